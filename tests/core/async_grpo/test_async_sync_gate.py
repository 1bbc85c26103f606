"""`GenerationSyncGate`: generate calls run together, a weight sync waits for the ones in flight and
holds new ones back until its bracket (transfer + prefix-cache reset) is done, and a waiting sync is
not starved by a steady stream of generation. On the reference engine: with the gate, concurrent
generation never lands between a sync and its prefix-cache reset (without it, it does)."""

from __future__ import annotations

import asyncio

import pytest
from arctic_rl_core.async_grpo.sync_gate import GenerationSyncGate


def test_generate_calls_overlap_and_a_sync_waits_for_them_then_holds_new_ones_back():
    events: list[str] = []

    async def generation(name: str, seconds: float) -> str:
        events.append(f"{name} start")
        await asyncio.sleep(seconds)
        events.append(f"{name} end")
        return name

    async def sync() -> str:
        events.append("sync start")
        await asyncio.sleep(0.05)
        events.append("sync end")
        return "synced"

    async def main() -> None:
        gate = GenerationSyncGate()
        a = asyncio.create_task(gate.generate(generation("a", 0.1)))
        b = asyncio.create_task(gate.generate(generation("b", 0.05)))
        await asyncio.sleep(0.01)
        assert gate.generating == 2  # both in flight at once
        s = asyncio.create_task(gate.sync(sync()))
        await asyncio.sleep(0.01)
        c = asyncio.create_task(gate.generate(generation("c", 0.01)))  # arrives while the sync waits
        assert await asyncio.gather(a, b, s, c) == ["a", "b", "synced", "c"]
        assert gate.syncs_waited_for_generation == 1

    asyncio.run(main())
    assert events.index("sync start") > max(events.index("a end"), events.index("b end"))
    assert events.index("c start") > events.index("sync end")


def test_a_steady_stream_of_generation_does_not_starve_the_sync():
    async def main() -> int:
        gate = GenerationSyncGate()
        stop = asyncio.Event()
        started_after_sync_began = 0
        sync_began = asyncio.Event()

        async def worker() -> None:
            nonlocal started_after_sync_began
            while not stop.is_set():

                async def call() -> None:
                    nonlocal started_after_sync_began
                    if sync_began.is_set() and not stop.is_set():
                        started_after_sync_began += 1
                    await asyncio.sleep(0.01)

                await gate.generate(call())

        workers = [asyncio.create_task(worker()) for _ in range(4)]
        await asyncio.sleep(0.03)

        async def transfer() -> None:
            sync_began.set()
            await asyncio.sleep(0.02)
            stop.set()

        await asyncio.wait_for(gate.sync(transfer()), timeout=2)
        await asyncio.gather(*workers)
        return started_after_sync_began

    assert asyncio.run(main()) == 0  # nothing started inside the sync's bracket


def test_a_cancelled_waiting_sync_lets_generation_go_on():
    async def main() -> None:
        gate = GenerationSyncGate()
        release = asyncio.Event()
        first = asyncio.create_task(gate.generate(release.wait()))
        await asyncio.sleep(0)
        waiting = asyncio.create_task(gate.sync(asyncio.sleep(0)))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        second = asyncio.create_task(gate.generate(asyncio.sleep(0, result="ran")))
        assert await asyncio.wait_for(second, timeout=1) == "ran"
        release.set()
        await first

    asyncio.run(main())


@pytest.mark.parametrize("gated", [True, False])
def test_on_the_reference_engine_no_generate_lands_inside_a_sync(gated):
    """Generation kept in flight while the trainer steps and syncs (as an asynchronous trainer does),
    and at every sync one generate call issued between the weight transfer and the prefix-cache reset
    (the window a free-running generator hits only by chance): through the gate every generate call
    succeeds, the one issued in the window held back until the reset; without it the engine refuses
    that one."""
    from arctic_rl_core.backends.protocol import SamplingParams
    from arctic_rl_core.config import load_config
    from arctic_rl_core.weight_sync import WeightSyncPolicy, sync_after_step
    from arctic_rl_testbed.reference.engine import ReferenceBackend
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

    cfg = load_config(
        None,
        ["backend.kind=reference", "backend.reference.num_layers=1", "backend.reference.hidden_size=32",
         "backend.reference.intermediate_size=64", "backend.reference.num_attention_heads=2",
         "backend.reference.num_key_value_heads=1"],
    )  # fmt: skip
    backend = ReferenceBackend(ReferenceEngineSettings.from_config(cfg))
    policy = WeightSyncPolicy.from_config(cfg)
    gate = GenerationSyncGate()
    params = SamplingParams(max_tokens=2, temperature=1.0)
    prompt = [backend.tokenizer.encode("how many schools")]

    async def main() -> list[BaseException]:
        errors: list[BaseException] = []
        stop = asyncio.Event()
        held: list[asyncio.Task] = []
        reset = backend.reset_prefix_cache

        async def reset_after_a_generate_in_the_window() -> None:
            call = backend.generate(prompt, params)
            if gated:  # the gate holds it back until the sync's bracket is done: awaited after the sync
                held.append(asyncio.create_task(gate.generate(call)))
            else:
                try:
                    await call
                except Exception as error:
                    errors.append(error)
            await reset()

        backend.reset_prefix_cache = reset_after_a_generate_in_the_window

        async def generator() -> None:
            while not stop.is_set():
                call = backend.generate(prompt, params)
                try:
                    await (gate.generate(call) if gated else call)
                except Exception as error:
                    errors.append(error)
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(generator()) for _ in range(3)]
        for _ in range(4):
            sync = sync_after_step(backend, policy)
            await (gate.sync(sync) if gated else sync)
            await asyncio.sleep(0.005)
        stop.set()
        await asyncio.gather(*tasks)
        for outcome in await asyncio.gather(*held, return_exceptions=True):
            if isinstance(outcome, BaseException):
                errors.append(outcome)
        assert len(held) == (4 if gated else 0)
        return errors

    try:
        errors = asyncio.run(main())
    finally:
        asyncio.run(backend.shutdown())
    if gated:
        assert errors == []
    else:
        assert len(errors) >= 4 and any("reset_prefix_cache" in str(e) for e in errors), errors
