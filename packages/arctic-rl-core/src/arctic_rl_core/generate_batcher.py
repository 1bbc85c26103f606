"""Coalesce concurrent single-prompt generate requests into batched `Backend.generate` calls, and
measure the sampler's queue.

Rollout loops send one request per trajectory turn (verl's agent loops, SkyRL's generator over an
inference engine), each as soon as its environment step returns; the Arctic server (and the reference
engine) serve a list of prompts per call far better than one call per prompt. Requests with equal
`SamplingParams` that arrive within `window_s` of the first one share a call of at most `max_batch`
prompts; each caller gets its own completion and the call's weights version.

`max_calls_in_flight` is how many calls the sampler serves at once (`Backend.max_generate_calls_in_flight`):
None for a server that batches concurrent calls itself (vLLM's continuous batching: a request sent
at once joins the running batch), 1 for the reference engine, whose sampler serves one call at a
time. At that limit, requests wait in the batcher and go together, up to `max_batch` a call, the
moment a call returns (they have waited already: no further window).

The queue depth: `take_stats()` returns what the sampler's queue looked like since the previous
take (requests and calls served, requests waiting in the batcher and prompts in flight on the
sampler: time-weighted means and maxima, and the share of the time a call was in flight), as
`SamplerQueueStats`; `.metrics()` names them as both adapters log them (`sampler_queue/*`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Completion, GenerateOutput, SamplingParams

GenerateFn = Callable[
    [Sequence[str] | Sequence[Sequence[int]], "SamplingParams"], Awaitable["GenerateOutput"]
]
METRIC_PREFIX = "sampler_queue"


@dataclass(frozen=True)
class BatchedCompletion:
    completion: Completion
    weights_version: int
    batch_size: int  # prompts in the backend call that served this request


@dataclass(frozen=True)
class SamplerQueueStats:
    """The sampler's queue over a window: from the first request after the previous take to the
    last event (a request or a call's return) before this one."""

    requests: int  # requests that reached the batcher
    calls: int  # backend calls sent
    window_s: float
    waiting_mean: float  # requests held in the batcher, time-weighted over the window
    waiting_max: int
    in_flight_mean: float  # prompts in calls sent and not yet returned, time-weighted
    in_flight_max: int
    busy_s: float  # time with at least one call in flight

    @property
    def busy_fraction(self) -> float:
        return self.busy_s / self.window_s if self.window_s > 0 else 0.0

    @property
    def batch_size_mean(self) -> float:
        return self.requests / self.calls if self.calls else 0.0

    def metrics(self, prefix: str = METRIC_PREFIX) -> dict[str, float]:
        """The stats as logged metrics (none when no request came)."""
        if not self.requests:
            return {}
        return {
            f"{prefix}/requests": float(self.requests),
            f"{prefix}/calls": float(self.calls),
            f"{prefix}/batch_size_mean": self.batch_size_mean,
            f"{prefix}/waiting_mean": self.waiting_mean,
            f"{prefix}/waiting_max": float(self.waiting_max),
            f"{prefix}/in_flight_mean": self.in_flight_mean,
            f"{prefix}/in_flight_max": float(self.in_flight_max),
            f"{prefix}/busy_fraction": self.busy_fraction,
        }

    @staticmethod
    def combine(stats: Sequence[SamplerQueueStats]) -> SamplerQueueStats:
        """Several batchers' stats (one per rollout replica) as one sampler's: counts and depths add
        up (means weighted by each window, over the longest window), maxima add up (an upper bound:
        the replicas' peaks need not coincide), busy time is the longest."""
        stats = [s for s in stats if s.requests]
        if not stats:
            return SamplerQueueStats(0, 0, 0.0, 0.0, 0, 0.0, 0, 0.0)
        window = max(s.window_s for s in stats)

        def spread(mean_of: Callable[[SamplerQueueStats], float]) -> float:
            return sum(mean_of(s) * s.window_s for s in stats) / window if window > 0 else 0.0

        return SamplerQueueStats(
            requests=sum(s.requests for s in stats),
            calls=sum(s.calls for s in stats),
            window_s=window,
            waiting_mean=spread(lambda s: s.waiting_mean),
            waiting_max=sum(s.waiting_max for s in stats),
            in_flight_mean=spread(lambda s: s.in_flight_mean),
            in_flight_max=sum(s.in_flight_max for s in stats),
            busy_s=max(s.busy_s for s in stats),
        )


class _QueueClock:
    """Time-weighted depths of the batcher's queue and the sampler's calls."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.waiting = 0
        self.in_flight = 0  # prompts
        self.calls_in_flight = 0
        self._reset()

    def _reset(self) -> None:
        self._start: float | None = None
        self._last = 0.0
        self._waiting_area = self._in_flight_area = self._busy = 0.0
        self._waiting_max, self._in_flight_max = self.waiting, self.in_flight
        self._requests = self._calls = 0

    def _advance(self) -> None:
        now = self._clock()
        if self._start is None:
            self._start = self._last = now
        elapsed = now - self._last
        self._waiting_area += self.waiting * elapsed
        self._in_flight_area += self.in_flight * elapsed
        if self.calls_in_flight:
            self._busy += elapsed
        self._last = now

    def arrived(self) -> None:
        self._advance()
        self._requests += 1
        self.waiting += 1
        self._waiting_max = max(self._waiting_max, self.waiting)

    def sent(self, prompts: int) -> None:
        self._advance()
        self._calls += 1
        self.calls_in_flight += 1
        self.waiting -= prompts
        self.in_flight += prompts
        self._in_flight_max = max(self._in_flight_max, self.in_flight)

    def returned(self, prompts: int) -> None:
        self._advance()
        self.calls_in_flight -= 1
        self.in_flight -= prompts

    def take(self) -> SamplerQueueStats:
        if self._start is not None and (self.waiting or self.calls_in_flight):
            self._advance()  # still busy: the window runs to now
        window = self._last - self._start if self._start is not None else 0.0
        stats = SamplerQueueStats(
            requests=self._requests,
            calls=self._calls,
            window_s=window,
            waiting_mean=self._waiting_area / window if window > 0 else float(self._waiting_max),
            waiting_max=self._waiting_max,
            in_flight_mean=self._in_flight_area / window if window > 0 else float(self._in_flight_max),
            in_flight_max=self._in_flight_max,
            busy_s=self._busy,
        )
        busy = bool(self.waiting or self.calls_in_flight)
        self._reset()
        if busy:  # the next window starts now, with what is still queued
            self._start = self._last = self._clock()
        return stats


class GenerateBatcher:
    def __init__(
        self,
        generate: GenerateFn,
        *,
        max_batch: int,
        window_s: float = 0.005,
        max_calls_in_flight: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch}: must be >= 1")
        if max_calls_in_flight is not None and max_calls_in_flight < 1:
            raise ValueError(f"max_calls_in_flight={max_calls_in_flight}: must be >= 1, or None for no limit")
        self._generate = generate
        self.max_batch = max_batch
        self.window_s = window_s
        self.max_calls_in_flight = max_calls_in_flight
        # requests by sampling parameters, in order of their first request (dicts keep insertion order)
        self._pending: dict[SamplingParams, list[tuple[list[int] | str, asyncio.Future]]] = {}
        self._timers: dict[SamplingParams, asyncio.TimerHandle] = {}
        self._queue = _QueueClock(clock)

    @property
    def waiting(self) -> int:
        """Requests held in the batcher now."""
        return self._queue.waiting

    @property
    def in_flight(self) -> int:
        """Prompts in backend calls sent and not yet returned."""
        return self._queue.in_flight

    def take_stats(self) -> SamplerQueueStats:
        """The queue since the previous take (see `SamplerQueueStats`); starts a new window."""
        return self._queue.take()

    async def generate(self, prompt: list[int] | str, params: SamplingParams) -> BatchedCompletion:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        queue = self._pending.setdefault(params, [])
        queue.append((prompt, future))
        self._queue.arrived()
        if not self._at_limit():
            if len(queue) >= self.max_batch:
                self._flush(params)
            elif params not in self._timers:
                self._timers[params] = loop.call_later(self.window_s, self._flush, params)
        return await future

    def _at_limit(self) -> bool:
        limit = self.max_calls_in_flight
        return limit is not None and self._queue.calls_in_flight >= limit

    def _flush(self, params: SamplingParams) -> None:
        timer = self._timers.pop(params, None)
        if timer is not None:
            timer.cancel()
        if self._at_limit():  # sent the moment a call returns (`_dispatch_waiting`)
            return
        queue = self._pending.get(params, [])
        batch, rest = queue[: self.max_batch], queue[self.max_batch :]
        if rest:
            self._pending[params] = rest
        else:
            self._pending.pop(params, None)
        if batch:
            self._queue.sent(len(batch))
            asyncio.get_running_loop().create_task(self._serve(batch, params))

    def _dispatch_waiting(self) -> None:
        """After a call returned: what waited goes out now, oldest parameters first, while under the limit."""
        while self._pending and not self._at_limit():
            self._flush(next(iter(self._pending)))

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
            self._returned(len(batch))
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        self._returned(len(batch))
        for (_, future), completion in zip(batch, out.completions, strict=True):
            if not future.done():
                future.set_result(BatchedCompletion(completion, out.weights_version, len(batch)))

    def _returned(self, prompts: int) -> None:
        self._queue.returned(prompts)
        if self.max_calls_in_flight is not None:
            self._dispatch_waiting()
