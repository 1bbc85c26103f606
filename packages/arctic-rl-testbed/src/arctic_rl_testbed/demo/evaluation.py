"""Accuracy of the backend's sampler on a split, scored by the task (BIRD: official execution
accuracy): greedy answers (what the model knows), and `k` answers per prompt sampled at the rollout
temperature (what GRPO optimises: the expected reward of the sampling policy). BIRD multi-turn: whole
episodes (`evaluate_episodes`), with how many turns each took."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends.protocol import SamplingParams
from arctic_rl_core.envs.bird.multi_turn import STOP_STRINGS, BirdSQLEpisode
from arctic_rl_core.multi_turn.episodes import run_episodes
from arctic_rl_core.multi_turn.turn_sampler import TurnSampler

from arctic_rl_testbed.demo.prompts import prompt_ids
from arctic_rl_testbed.demo.tasks import DemoTask, HeldoutScore

# how a multi-turn episode ends (`evaluate_episodes`)
ENDINGS = ("solution", "max_turns", "context_limit")

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend


async def heldout_answers(
    backend: Backend,
    prompts: Sequence[Sequence[int]] | Sequence[str],
    *,
    max_tokens: int,
    batch_size: int = 8,
    temperature: float = 0.0,
) -> list[str]:
    """One answer per prompt (greedy by default), `batch_size` prompts per generate call. Prompts
    are token ids, or text for a backend that takes only text (the Arctic on-prem server)."""

    params = SamplingParams(max_tokens=max_tokens, temperature=temperature)
    texts: list[str] = []
    for first in range(0, len(prompts), batch_size):
        batch = [p if isinstance(p, str) else list(p) for p in prompts[first : first + batch_size]]
        out = await backend.generate(batch, params)
        texts.extend(c.text for c in out.completions)
    return texts


async def evaluate_rows(
    backend: Backend,
    task: DemoTask,
    rows: Sequence[dict[str, Any]],
    prompts: Sequence[Sequence[int]],
    *,
    max_tokens: int,
) -> tuple[HeldoutScore, list[str]]:
    """Greedy answers to `prompts` (the token ids of `rows`) and their score."""
    answers = await heldout_answers(backend, prompts, max_tokens=max_tokens)
    return task.score(rows, answers), answers


async def evaluate_sampled(
    backend: Backend,
    task: DemoTask,
    rows: Sequence[dict[str, Any]],
    prompts: Sequence[Sequence[int]],
    *,
    samples_per_prompt: int,
    temperature: float,
    max_tokens: int,
) -> HeldoutScore:
    """`samples_per_prompt` answers per prompt at `temperature` (unseeded: independent draws),
    scored together: the share of sampled answers that are correct."""
    repeated_rows = [row for row in rows for _ in range(samples_per_prompt)]
    repeated_prompts = [prompt for prompt in prompts for _ in range(samples_per_prompt)]
    answers = await heldout_answers(
        backend, repeated_prompts, max_tokens=max_tokens, batch_size=32, temperature=temperature
    )
    return task.score(repeated_rows, answers)


async def evaluate_episodes(
    backend: Backend,
    task: DemoTask,
    rows: Sequence[dict[str, Any]],
    tokenizer: Any,
    *,
    max_tokens: int,
    max_input_length: int,
    temperature: float = 0.0,
    samples_per_prompt: int = 1,
) -> HeldoutScore:
    """BIRD multi-turn: `samples_per_prompt` episodes per row (greedy by default), each up to the task's
    max_turns (`envs.bird.multi_turn`); EX is the share whose final answer is correct, `turns` how many
    episodes took each number of turns, `ended` how many ended with a `<solution>`, hit max_turns without
    one, or were cut at `max_input_length`; `errors` correct / wrong / malformed (no well-formed
    solution); `episodes` each one's turns, ending, reward and responses."""

    repeated = [row for row in rows for _ in range(samples_per_prompt)]
    episodes = [BirdSQLEpisode.from_row(row, max_turns=task.max_turns) for row in repeated]
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, stop=STOP_STRINGS)
    results = await run_episodes(
        TurnSampler(backend, tokenizer),
        [prompt_ids(tokenizer, row["prompt"]) for row in repeated],
        episodes,
        params,
        eos_token_id=tokenizer.eos_token_id,
        max_input_length=max_input_length,
    )
    verdicts = [episode.metrics() for episode in episodes]
    correct = sum(int(v["correct"]) for v in verdicts)
    formed = sum(int(v["well_formed"]) for v in verdicts)
    errors = {"correct": correct, "wrong_result": formed - correct, "malformed": len(verdicts) - formed}
    records = [
        {
            "turns": result.turns,
            "ended": "context_limit" if result.cut else episode.ended_by,
            "reward": result.reward,
            "responses": result.responses,
        }
        for episode, result in zip(episodes, results, strict=True)
    ]
    ended = Counter(record["ended"] for record in records)
    return HeldoutScore(
        metric="EX",
        correct=correct,
        total=len(verdicts),
        errors={k: v for k, v in errors.items() if v},
        well_formatted=formed,
        turns=dict(Counter(result.turns for result in results)),
        ended={kind: ended[kind] for kind in ENDINGS},
        episodes=records,
    )
