"""Accuracy of the backend's sampler on a split, scored by the task (BIRD: official execution
accuracy): greedy answers (what the model knows), and `k` answers per prompt sampled at the rollout
temperature (what GRPO optimises: the expected reward of the sampling policy)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend

    from arctic_rl_testbed.demo.tasks import DemoTask, HeldoutScore


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
    from arctic_rl_core.backends.protocol import SamplingParams

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
