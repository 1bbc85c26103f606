"""`arctic_rl_core.multi_turn.trajectory_fidelity.row_fidelity`: which sampled turns of a framework-built row (verl's agent
loops) a text-only sampler read exactly as the row holds them, with the reference tokenizer (a byte-level
BPE: one text, several spellings)."""

from __future__ import annotations

import pytest
from arctic_rl_core.multi_turn.prompt_text import PromptText
from arctic_rl_core.multi_turn.trajectory_fidelity import (
    DRIFTED_TURNS,
    drift_metrics,
    row_fidelity,
    turn_starts,
)


@pytest.fixture(scope="module")
def tokenizer():
    from arctic_rl_testbed.reference.tokenizer import build_tokenizer

    return build_tokenizer(None)


def _spelled_out(tokenizer, text: str) -> list[int]:
    """`text` as one token per character: ids a model may sample, not the tokenizer's own encoding."""
    ids = [t for ch in text for t in tokenizer.encode(ch, add_special_tokens=False)]
    assert ids != tokenizer.encode(text, add_special_tokens=False)
    return ids


def _conversation(tokenizer, first_turn: list[int]):
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "How many tables?"}], add_generation_prompt=True, tokenize=False
    )
    prompt = tokenizer.encode(chat, add_special_tokens=False)
    observation = tokenizer.encode("\n<observation>3 tables</observation>\n", add_special_tokens=False)
    second = [*tokenizer.encode("There are 3 tables.", add_special_tokens=False), tokenizer.eos_token_id]
    response = first_turn + observation + second
    mask = [1] * len(first_turn) + [0] * len(observation) + [1] * len(second)
    return list(prompt), response, mask


def test_a_row_of_the_tokenizers_own_ids_trains_every_turn(tokenizer):
    prompt, response, mask = _conversation(
        tokenizer, tokenizer.encode("SELECT name FROM users", add_special_tokens=False)
    )
    fidelity, trained = row_fidelity(prompt, response, mask, PromptText(tokenizer))
    assert (fidelity.turns, fidelity.exact_turns, fidelity.drifted, fidelity.prompt_repaired) == (
        2,
        2,
        False,
        False,
    )
    assert list(trained) == mask
    assert drift_metrics([fidelity])[DRIFTED_TURNS] == 0.0


def test_a_turn_after_non_canonical_sampled_ids_is_left_out(tokenizer):
    first = _spelled_out(tokenizer, "SELECT name FROM users")
    prompt, response, mask = _conversation(tokenizer, first)
    fidelity, trained = row_fidelity(prompt, response, mask, PromptText(tokenizer))
    # turn 1 was sampled on the prompt the row holds: trained; turn 2's context holds turn 1's ids,
    # which the server re-spells: not trained
    assert (fidelity.turns, fidelity.exact_turns) == (2, 1)
    second = turn_starts(mask)[1]
    assert list(trained) == mask[:second] + [0] * (len(mask) - second)
    assert drift_metrics([fidelity, fidelity])[DRIFTED_TURNS] == 0.5


def test_a_prompt_the_server_reads_otherwise_leaves_the_row_untrained(tokenizer):
    prompt, response, mask = _conversation(tokenizer, tokenizer.encode("SELECT 1", add_special_tokens=False))
    odd_prompt = prompt[:-3] + _spelled_out(tokenizer, tokenizer.decode(prompt[-3:]))
    fidelity, trained = row_fidelity(odd_prompt, response, mask, PromptText(tokenizer))
    assert (fidelity.exact_turns, fidelity.turns, set(trained)) == (0, 2, {0})
    with pytest.raises(ValueError, match="mask values"):
        row_fidelity(prompt, response, mask[:-1], PromptText(tokenizer))
