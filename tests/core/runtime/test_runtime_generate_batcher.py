"""`arctic_rl_core.generate_batcher`: concurrent single-prompt requests coalesced into batched
`Backend.generate` calls (each caller gets its own completion), the in-flight limit of a sampler that
serves one call at a time, failures reaching every waiting request, and the queue-depth statistics
(time-weighted on a clock the test drives)."""

from __future__ import annotations

import asyncio

import pytest
from arctic_rl_core.backends.protocol import Completion, FinishReason, GenerateOutput, SamplingParams
from arctic_rl_core.generate_batcher import GenerateBatcher, SamplerQueueStats

PARAMS = SamplingParams(max_tokens=4)


class Sampler:
    """A backend's `generate` that answers each prompt with its reversal, holds every call until the
    test releases it, and records the calls."""

    def __init__(self, clock: list[float] | None = None) -> None:
        self.calls: list[list] = []
        self.release: list[asyncio.Event] = []
        self.fail_next: Exception | None = None
        self.clock = clock

    async def generate(self, prompts, params):
        self.calls.append(list(prompts))
        number = len(self.calls)
        gate = asyncio.Event()
        self.release.append(gate)
        await gate.wait()
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        completions = [
            Completion(
                text="",
                token_ids=tuple(reversed(p)),
                finish_reason=FinishReason.STOP,
                prompt_len=len(p),
                generation_len=len(p),
            )
            for p in prompts
        ]
        return GenerateOutput(completions, weights_version=number)  # tells the calls apart


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_concurrent_requests_share_calls_of_at_most_max_batch_and_get_their_own_completion():
    async def scenario():
        sampler = Sampler()
        batcher = GenerateBatcher(sampler.generate, max_batch=3, window_s=0.01)
        prompts = [[i, i + 10, i + 20] for i in range(5)]
        other = SamplingParams(max_tokens=4, temperature=0.5)
        tasks = [asyncio.create_task(batcher.generate(p, PARAMS)) for p in prompts]
        tasks.append(asyncio.create_task(batcher.generate([99], other)))
        await _settle()
        assert sampler.calls == [prompts[:3]]  # full: sent at once, without the window
        await asyncio.sleep(0.03)  # the window: the rest of each parameter set goes
        assert sorted(map(len, sampler.calls)) == [1, 2, 3] and [[99]] in sampler.calls
        for gate in sampler.release:
            gate.set()
        served = await asyncio.gather(*tasks)
        assert [list(s.completion.token_ids) for s in served[:5]] == [list(reversed(p)) for p in prompts]
        assert [s.batch_size for s in served] == [3, 3, 3, 2, 2, 1]
        assert served[0].weights_version == 1 and served[3].weights_version != 1
        assert (batcher.waiting, batcher.in_flight) == (0, 0)

    asyncio.run(scenario())


def test_at_the_in_flight_limit_requests_wait_and_go_together_when_the_call_returns():
    async def scenario():
        sampler = Sampler()
        batcher = GenerateBatcher(sampler.generate, max_batch=4, window_s=0.001, max_calls_in_flight=1)
        first = asyncio.create_task(batcher.generate([1], PARAMS))
        await asyncio.sleep(0.01)
        assert sampler.calls == [[[1]]]
        # six requests while the sampler is busy: none is sent, whatever the window
        later = [asyncio.create_task(batcher.generate([k], PARAMS)) for k in range(2, 8)]
        await asyncio.sleep(0.02)
        assert len(sampler.calls) == 1 and (batcher.waiting, batcher.in_flight) == (6, 1)
        sampler.release[0].set()
        await first
        await _settle()
        # the moment the call returned: the oldest max_batch waiting requests, one call
        assert sampler.calls[1] == [[2], [3], [4], [5]] and (batcher.waiting, batcher.in_flight) == (2, 4)
        sampler.release[1].set()
        await _settle()
        assert sampler.calls[2] == [[6], [7]]
        sampler.release[2].set()
        served = await asyncio.gather(*later)
        assert [s.completion.token_ids for s in served] == [(k,) for k in range(2, 8)]
        assert [s.batch_size for s in served] == [4, 4, 4, 4, 2, 2]

    asyncio.run(scenario())


def test_a_failed_call_fails_each_of_its_requests_and_the_next_call_still_goes():
    async def scenario():
        sampler = Sampler()
        batcher = GenerateBatcher(sampler.generate, max_batch=2, window_s=0.001, max_calls_in_flight=1)
        sampler.fail_next = RuntimeError("sampler died")
        doomed = [asyncio.create_task(batcher.generate([k], PARAMS)) for k in (1, 2)]
        await _settle()
        waiting = asyncio.create_task(batcher.generate([3], PARAMS))
        await _settle()
        sampler.release[0].set()
        results = await asyncio.gather(*doomed, return_exceptions=True)
        assert [str(r) for r in results] == ["sampler died", "sampler died"]
        await asyncio.sleep(0.01)
        sampler.release[1].set()
        assert (await waiting).completion.token_ids == (3,)
        assert (batcher.waiting, batcher.in_flight) == (0, 0)

    asyncio.run(scenario())


def test_queue_stats_are_time_weighted_over_the_window_and_reset_on_take():
    clock = [100.0]

    async def scenario():
        sampler = Sampler()
        batcher = GenerateBatcher(
            sampler.generate, max_batch=2, window_s=0.001, max_calls_in_flight=1, clock=lambda: clock[0]
        )
        a = asyncio.create_task(batcher.generate([1], PARAMS))  # t=100: arrives
        b = asyncio.create_task(batcher.generate([2], PARAMS))  # full: sent at t=100
        await _settle()
        clock[0] = 101.0
        c = asyncio.create_task(batcher.generate([3], PARAMS))  # waits behind the call
        await _settle()
        clock[0] = 103.0
        sampler.release[0].set()  # returns at t=103; [3] goes at once
        await asyncio.gather(a, b)
        await _settle()
        clock[0] = 104.0
        sampler.release[1].set()  # returns at t=104
        await c
        stats = batcher.take_stats()
        assert (stats.requests, stats.calls, stats.window_s) == (3, 2, 4.0)
        assert stats.batch_size_mean == 1.5
        # waiting: 1 request from t=101 to t=103 -> 2 request-seconds over 4 s (the first two waited
        # together for no time: sent the moment the second made the batch full)
        assert (stats.waiting_mean, stats.waiting_max) == (0.5, 2)
        # in flight: 2 prompts from 100 to 103, 1 from 103 to 104 -> 7 prompt-seconds over 4 s
        assert (stats.in_flight_mean, stats.in_flight_max) == (1.75, 2)
        assert stats.busy_fraction == 1.0
        assert stats.metrics()["sampler_queue/busy_fraction"] == 1.0
        assert set(stats.metrics()) == {
            f"sampler_queue/{k}"
            for k in (
                "requests",
                "calls",
                "batch_size_mean",
                "waiting_mean",
                "waiting_max",
                "in_flight_mean",
                "in_flight_max",
                "busy_fraction",
            )
        }
        empty = batcher.take_stats()
        assert (empty.requests, empty.calls, empty.metrics()) == (0, 0, {})
        # idle time between windows does not count: the next window starts at its first request
        clock[0] = 200.0
        d = asyncio.create_task(batcher.generate([4], PARAMS))
        await asyncio.sleep(0.01)
        clock[0] = 202.0
        taken_mid_call = batcher.take_stats()  # the call is still in flight: the window runs to now
        assert (taken_mid_call.window_s, taken_mid_call.busy_fraction, taken_mid_call.in_flight_max) == (
            2.0,
            1.0,
            1,
        )
        sampler.release[2].set()
        await d

    asyncio.run(scenario())


def test_combined_stats_of_several_replicas():
    one = SamplerQueueStats(
        requests=4,
        calls=2,
        window_s=2.0,
        waiting_mean=1.0,
        waiting_max=2,
        in_flight_mean=2.0,
        in_flight_max=3,
        busy_s=1.0,
    )
    two = SamplerQueueStats(
        requests=2,
        calls=1,
        window_s=4.0,
        waiting_mean=0.5,
        waiting_max=1,
        in_flight_mean=1.0,
        in_flight_max=2,
        busy_s=3.0,
    )
    both = SamplerQueueStats.combine([one, two, SamplerQueueStats.combine([])])
    assert (both.requests, both.calls, both.window_s, both.busy_s) == (6, 3, 4.0, 3.0)
    assert (both.waiting_mean, both.in_flight_mean) == (1.0, 2.0)  # (1x2 + 0.5x4) / 4, (2x2 + 1x4) / 4
    assert (both.waiting_max, both.in_flight_max) == (3, 5)


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="max_batch=0"):
        GenerateBatcher(Sampler().generate, max_batch=0)
    with pytest.raises(ValueError, match="max_calls_in_flight=0"):
        GenerateBatcher(Sampler().generate, max_batch=1, max_calls_in_flight=0)


def test_the_reference_engine_serves_one_call_at_a_time_and_forwarders_say_what_they_forward_to():
    from arctic_rl_core.backends.forwarding import ForwardingBackend
    from arctic_rl_core.backends.protocol import Backend
    from arctic_rl_testbed.reference.engine import ReferenceBackend
    from arctic_rl_testbed.reference.ray_actor import RayReferenceBackend

    assert Backend.max_generate_calls_in_flight.fget(None) is None  # vLLM batches concurrent calls
    assert ReferenceBackend.max_generate_calls_in_flight.fget(None) == 1
    assert RayReferenceBackend.max_generate_calls_in_flight.fget(None) == 1

    class OneAtATime(ForwardingBackend):
        pass

    target = type("T", (), {"max_generate_calls_in_flight": 1})()
    assert OneAtATime(target).max_generate_calls_in_flight == 1
