"""The machine a benchmark ran on, and whether it could measure what the benchmark is about.

A benchmark whose two sides run in parallel (worker processes, a sampler process beside a trainer)
needs its cores free: on a machine busy with other work the ratio says how the two sides share one
busy core, not how they compare. Such a benchmark checks two things, before and after its runs: the
two-core check (two threads of pure torch kernels, no GIL held, against one: about 2 with two free
cores, about 1 when other work holds one) and the 1-minute load average taken before its runs (after
them it counts the benchmark's own processes, which on two cores always exceed two); when either fails
it reports why instead of a ratio. A benchmark of one thread (or of bytes) reports the load it ran
under and needs nothing.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

MIN_TWO_CORE_SPEEDUP = 1.5  # below this a second core is not free


def two_core_speedup(repeats: int = 25, tries: int = 3) -> float:
    """How much two threads of pure torch kernels (no GIL held) gain over one on this machine right now,
    best of `tries`: about 2 with two free cores, about 1 when other work holds one (then no overlap can
    show, whatever the code does)."""

    import torch

    a = torch.randn(384, 384)

    def work() -> None:
        torch.set_num_threads(1)  # in this thread (see the reference engine's worker threads)
        for _ in range(repeats):
            a @ a

    work()
    best = 0.0
    for _ in range(tries):
        start = time.perf_counter()
        work()
        work()
        one = time.perf_counter() - start
        threads = [threading.Thread(target=work) for _ in range(2)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        best = max(best, one / (time.perf_counter() - start))
    return best


def unmet_parallel_conditions(checks: list[float], load: float, cores: int) -> str | None:
    """Why the machine cannot give a meaningful ratio for a benchmark that needs two free cores
    (None: it can). `checks`: the two-core checks taken around the runs; `load`: the 1-minute load
    average before them (other work's load, not the benchmark's own)."""
    worst = min(checks)
    if cores < 2:
        return f"{cores} core(s): the benchmark's two sides need two"
    if worst < MIN_TWO_CORE_SPEEDUP:
        return (
            f"a second core is not free (two-core check {worst:.2f}x < {MIN_TWO_CORE_SPEEDUP:.2f}x: two threads of "
            "pure kernels gain that little over one): rerun on a quiet machine"
        )
    if load > cores:
        return f"load average {load:.1f} on {cores} cores before the runs: rerun on a quiet machine"
    return None


@dataclass(frozen=True)
class ParallelCheck:
    """The two-core checks around a parallel benchmark's runs and the load before them."""

    checks: tuple[float, ...]
    load: float
    cores: int

    @property
    def unmet(self) -> str | None:
        return unmet_parallel_conditions(list(self.checks), self.load, self.cores)

    def describe(self) -> str:
        checks = "; ".join(f"{c:.2f}x" for c in self.checks)
        return f"two free cores needed: two-core check {checks}, load before {self.load:.1f} on {self.cores} cores"


class ParallelConditions:
    """`with ParallelConditions() as check:` runs the two-core check before and after the block;
    `check.result` then says whether the block ran with two free cores."""

    def __enter__(self) -> ParallelConditions:
        self._load = os.getloadavg()[0]  # before the two-core check and the runs add their own
        self._before = two_core_speedup()
        return self

    def __exit__(self, *exc: object) -> None:
        after = two_core_speedup()
        self.result = ParallelCheck((self._before, after), self._load, os.cpu_count() or 1)


def serial_conditions(load_before: float) -> str:
    """What a one-thread benchmark (interleaved rounds, the best of each counts) ran under."""
    return f"one thread; load {load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
