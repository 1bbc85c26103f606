"""Asynchronous GRPO on the reference backend: trained samples/s with `async.max_staleness` 1 against 0,
same sizes, same seeds, same run: `arctic-rl bench async`.

The reference engine runs generation in its own process (`sampler_process`: weights in shared
memory, one torch thread) and training on a thread of this one (one torch thread), so each side holds
one core, as the Arctic server's sampling and training GPUs are separate, and neither waits for the
other's GIL (`--sampler thread`: the in-thread sampler, for comparison): synchronously one waits for
the other; with k = 1 batch i+1 is sampled while batch i trains. The
benchmark first picks the model's hidden size so that generation and training each take 40-60% of a
synchronous step (training's kernels grow with it faster than generation's per-token cost, which is
mostly fixed overhead at these sizes: two calibration runs and a linear fit), prints the split, then runs both modes, alternating, `--repeats` times (the best run of each mode counts). Throughput is measured at steady state
(from the end of the first trained step to the end of the last: the pipeline's fill is one
generation, paid once per run) and for the whole run; the last line is the steady-state
`ratio: <async / sync>x`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arctic_rl_core.async_grpo.pipeline import StepRecord

import statistics

from arctic_rl_testbed.bench.conditions import ParallelConditions
from arctic_rl_testbed.bench.report import BenchResult

NAME = "async"
HELP = "Asynchronous GRPO: trained samples/s with async.max_staleness=1 vs 0 on the reference backend."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=8, help="GRPO steps per mode (>= 3)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--rollouts", type=int, default=4, help="responses per prompt")
    parser.add_argument("--prompt-len", type=int, default=16, help="prompt tokens")
    parser.add_argument("--response-len", type=int, default=64, help="tokens generated per response")
    parser.add_argument("--layers", type=int, default=2, help="layers of the tiny model")
    parser.add_argument(
        "--hidden",
        type=int,
        default=None,
        help="hidden size of the tiny model; default: calibrated so the phases take equal time",
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="runs of each mode, alternating; the best counts"
    )
    parser.add_argument(
        "--sampler",
        choices=("process", "thread"),
        default="process",
        help="the reference sampler in its own process (default) or on a thread of the trainer's process",
    )


@dataclass(frozen=True)
class ModeRun:
    max_staleness: int
    records: list[StepRecord]
    wall_s: float

    @property
    def samples(self) -> float:
        return sum(r.metrics.get("trained_samples", 0.0) for r in self.records)

    @property
    def steady_samples_per_s(self) -> float:
        first_end = self.records[0].training_interval[1]
        last_end = self.records[-1].training_interval[1]
        trained = sum(r.metrics.get("trained_samples", 0.0) for r in self.records[1:])
        return trained / (last_end - first_end)

    @property
    def whole_samples_per_s(self) -> float:
        return self.samples / self.wall_s


def _config(args: argparse.Namespace, hidden: int, max_staleness: int) -> Any:
    from arctic_rl_core.config import ArcticRLConfig  # noqa: PLC0415 - CLI start-up

    data: dict[str, Any] = {
        "backend": {
            "kind": "reference",
            "reference": {
                "hidden_size": hidden,
                "intermediate_size": 4 * hidden,
                "num_layers": args.layers,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
            },
        },
        "batch": {
            "prompts_per_step": args.prompts,
            "rollouts_per_prompt": args.rollouts,
            "max_prompt_length": args.prompt_len,
            "max_response_length": args.response_len,
            # one forward-backward over the whole batch (the reference default is one row per micro-batch)
            "micro_batch_size_per_gpu": args.prompts * args.rollouts,
        },
        "optimizer": {"lr": 1e-4},
    }
    if max_staleness:
        data["async"] = {"max_staleness": max_staleness}
    return ArcticRLConfig.from_dict(data)


async def _run_mode(args: argparse.Namespace, hidden: int, max_staleness: int, steps: int) -> ModeRun:
    from arctic_rl_core.async_grpo.token_task import TokenTask  # noqa: PLC0415 - CLI start-up

    from arctic_rl_testbed.reference.engine import ReferenceBackend  # noqa: PLC0415 - CLI start-up
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings  # noqa: PLC0415 - CLI start-up

    cfg = _config(args, hidden, max_staleness)
    settings = ReferenceEngineSettings.from_config(cfg)  # num_threads=1
    engine = ReferenceBackend(settings.model_copy(update={"sampler_process": args.sampler == "process"}))
    try:
        task = TokenTask.create(
            cfg,
            engine,
            pad_token_id=engine.pad_token_id,
            vocab_size=engine.vocab_size,
            prompt_len=args.prompt_len,
        )
        await task.train(0, await task.generate(task.prompts_for_step(10_000)))  # warm-up, not timed
        pipeline = task.pipeline()
        pipeline.weights_version = pipeline.trainer_version = 1
        start = time.perf_counter()
        records = await pipeline.run(steps, first_step=1)
        return ModeRun(max_staleness, records, time.perf_counter() - start)
    finally:
        await engine.shutdown()


def _phases(run: ModeRun) -> tuple[float, float]:
    """Median generation and training seconds of a run's steps."""

    gen = statistics.median(r.generation_interval[1] - r.generation_interval[0] for r in run.records)
    train = statistics.median(r.training_interval[1] - r.training_interval[0] for r in run.records)
    return gen, train


def _calibrate(args: argparse.Namespace) -> tuple[int, list[str]]:
    """The hidden size at which generation and training of a synchronous step take equal time."""
    lo, hi = 128, 256
    g_lo, t_lo = _phases(asyncio.run(_run_mode(args, lo, 0, 2)))
    g_hi, t_hi = _phases(asyncio.run(_run_mode(args, hi, 0, 2)))
    # gen(H) and train(H) are close to linear over this range: solve gen(H) = train(H).
    slope = (t_hi - t_lo - (g_hi - g_lo)) / (hi - lo)
    chosen = hi if slope <= 0 else lo + (g_lo - t_lo) / slope
    chosen = max(32, min(512, 16 * round(chosen / 16)))  # divisible by the 4 attention heads
    notes = [
        f"calibration (sync step, generation/training s): hidden {lo}: {g_lo:.3f}/{t_lo:.3f}; "
        f"hidden {hi}: {g_hi:.3f}/{t_hi:.3f} -> hidden size {chosen}"
    ]
    return chosen, notes


def run(args: argparse.Namespace) -> BenchResult:
    import torch

    if args.steps < 3:
        raise SystemExit("--steps: give at least 3 (the steady state is measured after the first step)")
    notes: list[str] = []
    hidden = args.hidden
    if hidden is None:
        hidden, notes = _calibrate(args)
        print(notes[0], flush=True)
    runs: dict[int, list[ModeRun]] = {0: [], 1: []}
    with ParallelConditions() as machine:
        for _ in range(args.repeats):
            for k in (0, 1):
                runs[k].append(asyncio.run(_run_mode(args, hidden, k, args.steps)))
    capacity = machine.result.checks
    sync = max(runs[0], key=lambda r: r.steady_samples_per_s)
    fast = max(runs[1], key=lambda r: r.steady_samples_per_s)
    gen, train = _phases(sync)
    fast_gen, fast_train = _phases(fast)
    share = gen / (gen + train)
    split = f"sync step split: generation {gen:.3f} s ({share:.0%}), training {train:.3f} s ({1 - share:.0%})"
    print(split, flush=True)
    if not 0.4 <= share <= 0.6:
        notes.append(
            f"the split is outside 40-60% ({share:.0%} generation): the machine is noisy, or pass --hidden"
        )
    staleness = sorted(
        {lag for r in fast.records for lag in (r.trainer_version - v for v in r.group_versions)}
    )
    samples = args.prompts * args.rollouts
    return BenchResult(
        title=(
            f"asynchronous GRPO, reference backend (hidden {hidden}, {args.layers} layers, "
            f"{args.prompts}x{args.rollouts} rollouts of {args.prompt_len}+{args.response_len} tokens, {args.steps} steps)"
        ),
        baseline_label="max_staleness=0 (synchronous), s per step at steady state",
        baseline_seconds=samples / sync.steady_samples_per_s,
        ours_label="max_staleness=1 (generation overlaps training), s per step at steady state",
        ours_seconds=samples / fast.steady_samples_per_s,
        extra_rows=[
            (
                "sync trained samples/s (steady; whole run)",
                f"{sync.steady_samples_per_s:.1f}; {sync.whole_samples_per_s:.1f}",
            ),
            (
                "async trained samples/s (steady; whole run)",
                f"{fast.steady_samples_per_s:.1f}; {fast.whole_samples_per_s:.1f}",
            ),
            (
                "whole-run ratio (pipeline fill included)",
                f"{fast.whole_samples_per_s / sync.whole_samples_per_s:.2f}x",
            ),
            (
                "sync step: generation / training (s)",
                f"{gen:.3f} / {train:.3f} ({share:.0%} / {1 - share:.0%})",
            ),
            (
                "k=1 step: generation / training (s; each against sync: ~1x = no slowdown from the overlap)",
                f"{fast_gen:.3f} / {fast_train:.3f} ({fast_gen / gen:.2f}x / {fast_train / train:.2f}x)",
            ),
            ("staleness of trained groups (k=1)", ", ".join(map(str, staleness))),
            ("dropped groups (k=1)", f"{sum(r.metrics['async/dropped_groups'] for r in fast.records):.0f}"),
            (
                "sampler; torch threads per side; load average",
                f"{args.sampler}; {torch.get_num_threads()}; {os.getloadavg()[0]:.1f}",
            ),
            (
                "two-core check before; after (pure kernels, 2 threads vs 1; ~2 = two free cores)",
                f"{capacity[0]:.2f}x; {capacity[1]:.2f}x",
            ),
        ],
        notes=[split, *notes],
        conditions=machine.result.describe(),
        unmet_conditions=machine.result.unmet,
        goal=">= 1.7x with two free cores",
    )
