"""Held-out accuracy of the backend's sampler: greedy answers to the held-out prompts, scored by
the task (BIRD: official execution accuracy)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend
    from arctic_rl_core.demo.tasks import DemoTask, HeldoutScore


async def heldout_answers(
    backend: Backend, prompts: Sequence[Sequence[int]], *, max_tokens: int, batch_size: int = 8
) -> list[str]:
    """Greedy (temperature 0) answers, `batch_size` prompts per generate call."""
    from arctic_rl_core.backends.protocol import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    texts: list[str] = []
    for first in range(0, len(prompts), batch_size):
        out = await backend.generate([list(p) for p in prompts[first : first + batch_size]], params)
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
