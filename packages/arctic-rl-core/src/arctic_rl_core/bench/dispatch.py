"""`arctic-rl bench dispatch`: per-call overhead of the sync->async bridge.

Baseline: the naive pattern (a new thread pool and a new event loop per call, i.e.
`ThreadPoolExecutor(1).submit(asyncio.run, coro)`). Ours: `arctic_rl_core.dispatch.run`, one
persistent background loop. Both run the same trivial coroutine, so the time is the overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from arctic_rl_core.bench.report import BenchResult

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


def _per_call_seconds(call: Callable[[int], int], calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        if call(i) != i:
            raise AssertionError(f"{call.__name__} returned a wrong result for call {i}")
    return (time.perf_counter() - start) / calls


def run(args: argparse.Namespace) -> BenchResult:
    if args.calls < 1 or args.rounds < 1:
        raise ValueError(f"--calls={args.calls} --rounds={args.rounds}: both must be >= 1")
    for call in (_naive_call, _bridge_call):  # warm-up: imports, first loop start
        _per_call_seconds(call, min(50, args.calls))
    naive, ours = [], []
    for _ in range(args.rounds):  # interleaved so both see the same machine load
        naive.append(_per_call_seconds(_naive_call, args.calls))
        ours.append(_per_call_seconds(_bridge_call, args.calls))
    return BenchResult(
        title=f"sync->async call overhead ({args.calls} calls x {args.rounds} rounds, best round)",
        baseline_label="new thread pool + asyncio.run per call",
        baseline_seconds=min(naive) * 1e6,
        ours_label="dispatch.run (persistent background loop)",
        ours_seconds=min(ours) * 1e6,
        unit="us per call",
        notes=["Target: >= 5x lower overhead than the naive pattern."],
    )
