"""`arctic-rl bench dispatch`: per-call overhead of the sync->async bridge.

Baseline: the naive pattern (a new thread pool and a new event loop per call, i.e.
`ThreadPoolExecutor(1).submit(asyncio.run, coro)`). Ours: `arctic_rl_core.dispatch.run`, one
persistent background loop. Both run the same trivial coroutine, so the time is the overhead.

A third row measures the floor of any persistent-loop bridge on this machine: a bare round trip
between two threads (caller wakes a waiting thread, which wakes the caller), with no event loop
at all. What dispatch.run costs above it is the event loop's wake-up and task machinery.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from arctic_rl_testbed.bench.report import BenchResult

NAME = "dispatch"
HELP = "Per-call overhead of dispatch.run vs a new thread pool + event loop per call (target >= 5x)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=2000, help="calls per round and variant (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the best round counts (default 3)")


async def _noop(i: int) -> int:
    await asyncio.sleep(0)
    return i


def _naive_call(i: int) -> int:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _noop(i)).result()


def _bridge_call(i: int) -> int:
    from arctic_rl_core import dispatch

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
    from arctic_rl_core import dispatch

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
    ping_pong = _PingPong()
    try:
        for call in (_naive_call, _bridge_call, ping_pong):  # warm-up: imports, first loop start
            _per_call_seconds(call, min(50, args.calls))
        naive, ours, floor = [], [], []
        for _ in range(args.rounds):  # interleaved so all see the same machine load
            naive.append(_per_call_seconds(_naive_call, args.calls))
            ours.append(_per_call_seconds(_bridge_call, args.calls))
            floor.append(_per_call_seconds(ping_pong, args.calls))
    finally:
        ping_pong.close()
    return BenchResult(
        title=f"sync->async call overhead ({args.calls} calls x {args.rounds} rounds, best round)",
        baseline_label="new thread pool + asyncio.run per call",
        baseline_seconds=min(naive) * 1e6,
        ours_label=f"dispatch.run (persistent background loop, {_loop_kind()})",
        ours_seconds=min(ours) * 1e6,
        unit="us per call",
        extra_rows=[("(floor) bare two-thread round trip, no asyncio", f"{min(floor) * 1e6:.6g}")],
        notes=[
            f"dispatch.run costs {min(ours) / min(floor):.2f}x a bare thread round trip "
            f"(the naive pattern {min(naive) / min(floor):.2f}x).",
            "Target: >= 5x lower overhead than the naive pattern.",
        ],
    )
