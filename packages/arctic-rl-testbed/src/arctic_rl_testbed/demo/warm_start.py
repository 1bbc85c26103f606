"""Supervised warm start: cross-entropy on the training split's reference answers, sent through the
backend's `forward_backward` with the server's `sft` loss, then `step`.

A tiny model initialised from a seed emits noise; after the warm start it answers in the format
the reward checks (`<think>` plan, then the query in `<answer>` as a ```sql block), so GRPO starts
from rollouts the reward can tell apart.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from arctic_rl_core.wire import PayloadSpec, RolloutSample, build_sft_payload

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend, WirePayload


@dataclass(frozen=True)
class WarmStartStep:
    step: int
    loss: float
    grad_norm: float
    seconds: float


def sft_payload(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    pad_token_id: int,
    max_prompt_len: int,
    max_response_len: int,
) -> WirePayload:
    """The wire payload of one `sft` forward-backward: the core wire layout of (prompt, response)
    rows plus `labels` = the response tokens at their own positions, -100 elsewhere."""

    for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        if len(prompt) > max_prompt_len or len(response) > max_response_len:
            raise ValueError(
                f"warm-start example {i}: prompt {len(prompt)} / answer {len(response)} tokens exceed "
                f"max_prompt_length={max_prompt_len} / max_response_length={max_response_len}: raise them"
            )
    spec = PayloadSpec(
        pad_token_id=pad_token_id,
        max_prompt_len=max_prompt_len,
        max_response_len=max_response_len,
        rollout_n=1,
        temperature=1.0,
        loss_fn="sft",
    )
    samples = [
        RolloutSample(prompt_ids=list(p), response_ids=list(r))
        for p, r in zip(prompts, responses, strict=True)
    ]
    return build_sft_payload(samples, spec)


async def warm_start(
    backend: Backend,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    steps: int,
    batch_size: int,
    pad_token_id: int,
    max_prompt_len: int,
    max_response_len: int,
    seed: int,
    on_step: Callable[[WarmStartStep], None] | None = None,
) -> list[WarmStartStep]:
    """`steps` optimizer steps over shuffled epochs of the examples (`batch_size` per step)."""

    if not prompts or len(prompts) != len(responses):
        raise ValueError(f"warm start needs matching prompts and answers ({len(prompts)} / {len(responses)})")
    order: list[int] = []
    rng = random.Random(seed)
    history: list[WarmStartStep] = []
    for step in range(1, steps + 1):
        start = time.perf_counter()
        chosen: list[int] = []
        while len(chosen) < min(batch_size, len(prompts)):
            if not order:
                order = list(range(len(prompts)))
                rng.shuffle(order)
            chosen.append(order.pop())
        payload = sft_payload(
            [prompts[i] for i in chosen],
            [responses[i] for i in chosen],
            pad_token_id=pad_token_id,
            max_prompt_len=max_prompt_len,
            max_response_len=max_response_len,
        )
        out = await backend.forward_backward(payload)
        stepped = await backend.step()
        record = WarmStartStep(step, float(out.loss), float(stepped.grad_norm), time.perf_counter() - start)
        history.append(record)
        if on_step is not None:
            on_step(record)
    return history
