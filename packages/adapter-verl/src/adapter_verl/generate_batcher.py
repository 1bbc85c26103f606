"""Coalesce concurrent single-prompt generate requests into batched `Backend.generate` calls.

verl's agent loop sends one request per trajectory, all at about the same time; the Arctic server
(and the reference engine) serve a list of prompts per call far better than one call per prompt.
Requests with equal `SamplingParams` that arrive within `window_s` of the first one share a call
of at most `max_batch` prompts; each caller gets its own completion and the call's weights version.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Completion, GenerateOutput, SamplingParams

GenerateFn = Callable[
    [Sequence[str] | Sequence[Sequence[int]], "SamplingParams"], Awaitable["GenerateOutput"]
]


@dataclass(frozen=True)
class BatchedCompletion:
    completion: Completion
    weights_version: int
    batch_size: int  # prompts in the backend call that served this request


class GenerateBatcher:
    def __init__(self, generate: GenerateFn, *, max_batch: int, window_s: float = 0.005) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch}: must be >= 1")
        self._generate = generate
        self.max_batch = max_batch
        self.window_s = window_s
        self._pending: dict[SamplingParams, list[tuple[list[int] | str, asyncio.Future]]] = {}
        self._timers: dict[SamplingParams, asyncio.TimerHandle] = {}

    async def generate(self, prompt: list[int] | str, params: SamplingParams) -> BatchedCompletion:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        queue = self._pending.setdefault(params, [])
        queue.append((prompt, future))
        if len(queue) >= self.max_batch:
            self._flush(params)
        elif params not in self._timers:
            self._timers[params] = loop.call_later(self.window_s, self._flush, params)
        return await future

    def _flush(self, params: SamplingParams) -> None:
        timer = self._timers.pop(params, None)
        if timer is not None:
            timer.cancel()
        batch = self._pending.pop(params, [])
        if batch:
            asyncio.get_running_loop().create_task(self._serve(batch, params))

    async def _serve(
        self, batch: list[tuple[list[int] | str, asyncio.Future]], params: SamplingParams
    ) -> None:
        try:
            out = await self._generate([prompt for prompt, _ in batch], params)
            if len(out.completions) != len(batch):
                raise RuntimeError(
                    f"the backend returned {len(out.completions)} completions for {len(batch)} prompts"
                )
        except BaseException as error:  # every waiting request sees the failure
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        for (_, future), completion in zip(batch, out.completions, strict=True):
            if not future.done():
                future.set_result(BatchedCompletion(completion, out.weights_version, len(batch)))
