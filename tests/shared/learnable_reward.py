"""A reward a tiny random model can learn in a few GRPO steps, for the e2e runs' learning signal.

BIRD and GSM8K rewards are 0 for every response of the untrained tiny model, so every GRPO
advantage is 0 and the policy term of the loss never moves. This reward is graded: the share of
the response's letters that are vowels (a, e, i, o, u; 0 when it has no letter). Samples of one
prompt differ in it, so group-normalised advantages are non-zero, and the policy can raise it by
shifting probability to vowel-rich tokens. Usable as verl's `custom_reward_function` (this file,
`compute_score`) and, in the SkyRL suite, behind a skyrl-gym environment.
"""

from __future__ import annotations

from typing import Any

VOWELS = frozenset("aeiou")
PROMPTS = (
    "Say something about the sea.",
    "Name a colour you like.",
    "What is a good name for a dog?",
    "Describe the weather today.",
    "Give me a word that rhymes with tree.",
    "What do you eat for breakfast?",
    "Tell me about your favourite book.",
    "Where would you go on holiday?",
)


# The multi-turn form (SkyRL's `vowel_turns` environment, tests/shared/skyrl_multi_turn.py; verl's
# `vowel_turns` agent loop, tests/shared/verl_vowel_turns.py): every turn is answered with this user
# message until the turn limit, and each turn earns its vowel share / the turn limit (a trajectory's
# total is its turns' mean vowel share).
SAY_MORE = "Say more."


def vowel_share(text: str) -> float:
    letters = [c for c in text.lower() if c.isalpha() and c.isascii()]
    return sum(c in VOWELS for c in letters) / len(letters) if letters else 0.0


def turn_reward(text: str, max_turns: int) -> float:
    """One turn's reward in the multi-turn form: its vowel share / `max_turns`."""
    return vowel_share(text) / max_turns


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any = None, extra_info: Any = None
) -> float:
    """verl's custom reward signature (`custom_reward_function.name=compute_score`)."""
    return vowel_share(solution_str)
