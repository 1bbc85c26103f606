"""`arctic-rl bench dispatch`: per-call overhead of the sync->async bridge.

Ours: `arctic_rl_core.dispatch.run`, one persistent background loop (uvloop where installed). Every
variant runs the same trivial coroutine, so the time is the bridge's overhead. Baselines, measured in
the same run, interleaved, best round each:

- the strongest simple alternative: a persistent stock asyncio loop in a daemon thread, each call
  `asyncio.run_coroutine_threadsafe(coro, loop).result()` (the pattern of verl 0.9.1's TransferQueue
  bridge, `verl/utils/transferqueue_utils.py`);
- the frameworks' own bridges: `asyncio.run(coro)` per call from synchronous code (verl 0.9.1's
  `auto_await` without a running loop, `verl/utils/ray_utils.py`; SkyRL 0.4.0's
  `skyrl/backends/skyrl_train_backend.py`), and a new one-thread pool running `asyncio.run` per call
  (`auto_await` inside a running loop, where `asyncio.run` cannot run in the loop's own thread).

A third row measures the floor of any persistent-loop bridge on this machine: a bare round trip
between two threads (caller wakes a waiting thread, which wakes the caller), with no event loop
at all. What dispatch.run costs above it is the event loop's wake-up and task machinery.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from arctic_rl_core import dispatch

from arctic_rl_testbed.bench.conditions import serial_conditions
from arctic_rl_testbed.bench.report import BenchResult, Comparison

NAME = "dispatch"
HELP = (
    "Per-call overhead of dispatch.run vs a persistent asyncio loop in a thread, and vs verl's and "
    "SkyRL's own bridges (asyncio.run per call; a thread pool + asyncio.run per call)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=2000, help="calls per round and variant (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the best round counts (default 3)")


async def _noop(i: int) -> int:
    await asyncio.sleep(0)
    return i


def _naive_call(i: int) -> int:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _noop(i)).result()


def _asyncio_run_call(i: int) -> int:
    return asyncio.run(_noop(i))


class _PersistentAsyncioLoop:
    """A stock asyncio loop running forever in a daemon thread; each call is
    `run_coroutine_threadsafe(...).result()`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="bench-asyncio-loop", daemon=True)
        self._thread.start()

    def __call__(self, i: int) -> int:
        return asyncio.run_coroutine_threadsafe(_noop(i), self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def _bridge_call(i: int) -> int:
    return dispatch.run(_noop(i))


class _PingPong:
    """Two threads handing a token back and forth through locks: the bare cross-thread round trip."""

    def __init__(self) -> None:
        self._ask, self._answer = threading.Lock(), threading.Lock()
        self._ask.acquire()
        self._answer.acquire()
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="bench-ping-pong", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            self._ask.acquire()
            if self._stop:
                return
            self._answer.release()

    def __call__(self, i: int) -> int:
        self._ask.release()
        self._answer.acquire()
        return i

    def close(self) -> None:
        self._stop = True
        self._ask.release()
        self._thread.join()


def _loop_kind() -> str:
    return type(dispatch.background_loop()).__module__.split(".")[0]


def _per_call_seconds(call: Callable[[int], int], calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        if call(i) != i:
            raise AssertionError(f"{call.__name__} returned a wrong result for call {i}")
    return (time.perf_counter() - start) / calls


def run(args: argparse.Namespace) -> BenchResult:

    if args.calls < 1 or args.rounds < 1:
        raise ValueError(f"--calls={args.calls} --rounds={args.rounds}: both must be >= 1")
    load = os.getloadavg()[0]
    ping_pong, persistent = _PingPong(), _PersistentAsyncioLoop()
    variants = {
        "ours": _bridge_call,
        "persistent": persistent,
        "asyncio_run": _asyncio_run_call,
        "pool": _naive_call,
        "floor": ping_pong,
    }
    try:
        for call in variants.values():  # warm-up: imports, first loop start
            _per_call_seconds(call, min(50, args.calls))
        best = dict.fromkeys(variants, float("inf"))
        for _ in range(args.rounds):  # interleaved so all see the same machine load
            for name, call in variants.items():
                best[name] = min(best[name], _per_call_seconds(call, args.calls) * 1e6)
    finally:
        ping_pong.close()
        persistent.close()
    ours_label = f"dispatch.run (persistent background loop, {_loop_kind()})"
    unit = "us per call"
    return BenchResult(
        title=f"sync->async call overhead ({args.calls} calls x {args.rounds} rounds, best round)",
        baseline_label="persistent asyncio loop in a thread (run_coroutine_threadsafe; verl's TransferQueue bridge)",
        baseline_seconds=best["persistent"],
        ours_label=ours_label,
        ours_seconds=best["ours"],
        unit=unit,
        extra_rows=[
            ("asyncio.run per call (verl auto_await, SkyRL backend)", f"{best['asyncio_run']:.6g}"),
            ("new thread pool + asyncio.run per call (auto_await in a running loop)", f"{best['pool']:.6g}"),
            ("(floor) bare two-thread round trip, no asyncio", f"{best['floor']:.6g}"),
        ],
        notes=[
            f"dispatch.run costs {best['ours'] / best['floor']:.2f}x a bare thread round trip "
            f"(a persistent asyncio loop {best['persistent'] / best['floor']:.2f}x).",
        ],
        conditions=serial_conditions(load) + f", best of {args.rounds} interleaved rounds",
        goal="> 1x",
        more=[
            Comparison(
                "asyncio.run per call (verl 0.9.1 auto_await from sync code; SkyRL 0.4.0's backend)",
                best["asyncio_run"],
                ours_label,
                best["ours"],
                unit,
            ),
            Comparison(
                "new thread pool + asyncio.run per call (verl auto_await inside a running loop)",
                best["pool"],
                ours_label,
                best["ours"],
                unit,
                goal=">= 5x",
            ),
        ],
    )
