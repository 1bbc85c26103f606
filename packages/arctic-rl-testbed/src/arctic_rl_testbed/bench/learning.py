"""Learning, synchronous against asynchronous GRPO: `arctic-rl bench learning`.

For each seed the demo runs twice, `--async 0` and `--async K` (default 1), same framework, task and
settings. Both runs of a seed start from the same supervised warm start: the asynchronous run's folder
is seeded with the synchronous run's `warm_start/` checkpoint and its warm-start and before-GRPO
accuracy records (the demo skips what its folder already has, as on `--resume`), so the pair differs
only in the GRPO phase and the accuracy measured after it. With `--one-warm-start` every run starts from
the first seed's synchronous run's warm start in the same way (one supervised phase in all: on a small
shared machine it is most of a run's time); the seeds then vary GRPO's sampling and data order only,
and the accuracy before GRPO is the first seed's for every run. The measure is the demo's sampled train EX
after GRPO (`eval_samples` answers per training question at the rollout temperature, the expected
reward GRPO optimises). Printed: every run, each mode's mean and sample standard deviation over the
seeds, the per-seed difference (async - sync) with its mean, standard deviation and standard error,
and the verdict "within noise" when the mean difference is within two standard errors of 0 (a
paired comparison; with n seeds it has n - 1 degrees of freedom, so it is a rough test). Last line:
`ratio: <async mean / sync mean>x`.

A run folder that already holds a finished run (`summary.json`) with the same settings is reused, so
an interrupted comparison continues where it stopped; one with other settings is an error naming it.
Each demo runs in its own process (the framework's environment, as `arctic-rl demo` starts it), its
console output in `<out>/<run>.console`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arctic_rl_testbed.bench.report import BenchResult
from arctic_rl_testbed.demo import launch

NAME = "learning"
HELP = (
    "Learning: the demo's sampled train EX after GRPO with --async K vs synchronous, over several seeds "
    "(same warm start per seed)."
)
# `arctic-rl bench all` runs it only when asked (--include learning).
ALL_SKIPS_BECAUSE = "about an hour of demo runs (an accuracy, not a speed)"
# What a reused run's config.yaml must match (the rest are the demo's defaults, which are not flags here).
MATCHED_FIELDS = ("framework", "task", "steps", "seed", "max_staleness", "num_threads")
# The records a seed's asynchronous run takes from its synchronous run (the phases before GRPO).
SHARED_KINDS = ("warm_start",)


class LearningBenchError(RuntimeError):
    """A run folder holds another comparison's run, or a demo run failed; the message names it."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--framework", choices=("skyrl", "verl"), default="skyrl", help="RL framework")
    parser.add_argument("--task", choices=("bird", "gsm8k"), default="bird", help="bundled sample")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="seeds (>= 2 of them)")
    parser.add_argument(
        "--async", dest="max_staleness", type=int, default=1, metavar="K", help="the async runs' --async K"
    )
    parser.add_argument("--steps", type=int, default=24, help="GRPO steps per run (demo default 24)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per run (default: torch's)")
    parser.add_argument(
        "--out", default="runs/bench-learning", help="folder of the runs (reused where already finished)"
    )
    parser.add_argument(
        "--one-warm-start",
        action="store_true",
        help="every run starts from the first seed's warm start (the seeds vary GRPO's sampling and data "
        "order only; one supervised phase in all)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="demo runs at once (default 1); a run that starts from another's warm start waits for it",
    )
    parser.add_argument(
        "--lock",
        default=None,
        metavar="FILE",
        help="hold an exclusive flock on FILE while each demo runs, or each wave of --jobs runs (a machine "
        "shared with other heavy jobs: they interleave between runs, not inside one)",
    )


@dataclass(frozen=True)
class RunScore:
    """One finished demo run's accuracies (sampled: `correct` of `total` sampled answers)."""

    seed: int
    max_staleness: int
    sampled_before: tuple[int, int]
    sampled_after: tuple[int, int]
    greedy_after: tuple[int, int]
    grpo_seconds: float

    @property
    def after_percent(self) -> float:
        correct, total = self.sampled_after
        return 100.0 * correct / total

    @classmethod
    def from_summary(cls, summary: dict[str, Any], seed: int) -> RunScore:
        before, after = summary["before"]["train"], (summary.get("after") or {}).get("train")
        if after is None or after.get("sampled") is None or before.get("sampled") is None:
            raise LearningBenchError(
                f"seed {seed}, max_staleness {summary.get('max_staleness')}: the run has no sampled train "
                "accuracy before and after GRPO (eval_samples 0, or a backend that cannot measure after)"
            )
        return cls(
            seed=seed,
            max_staleness=int(summary["max_staleness"]),
            sampled_before=(before["sampled"]["correct"], before["sampled"]["total"]),
            sampled_after=(after["sampled"]["correct"], after["sampled"]["total"]),
            greedy_after=(after["correct"], after["total"]),
            grpo_seconds=float(summary["seconds"].get("grpo", float("nan"))),
        )


@dataclass(frozen=True)
class Spread:
    mean: float
    sd: float  # sample standard deviation (n - 1)

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else float("nan")
        return cls(mean=mean, sd=math.sqrt(var))


def paired_verdict(sync: list[float], fast: list[float]) -> tuple[Spread, float, bool]:
    """(spread of the per-seed differences async - sync, standard error of their mean, within noise:
    |mean| <= 2 standard errors)."""
    if len(sync) != len(fast) or len(sync) < 2:
        raise ValueError(f"a paired comparison needs >= 2 seeds with both runs; got {len(sync)}, {len(fast)}")
    diff = Spread.of([a - s for s, a in zip(sync, fast, strict=True)])
    stderr = diff.sd / math.sqrt(len(sync))
    return diff, stderr, abs(diff.mean) <= 2 * stderr


def run_name(seed: int, max_staleness: int) -> str:
    return f"seed{seed}-async{max_staleness}"


def _wanted(args: argparse.Namespace, seed: int, max_staleness: int) -> dict[str, Any]:
    return {
        "framework": args.framework,
        "task": args.task,
        "steps": args.steps,
        "seed": seed,
        "max_staleness": max_staleness,
        "num_threads": args.threads,
    }


def finished_summary(run_dir: Path, wanted: dict[str, Any]) -> dict[str, Any] | None:
    """The run's summary when `run_dir` holds a finished run with `wanted` settings; None when it holds
    no finished run; an error when it holds one with other settings."""
    import yaml  # noqa: PLC0415 - CLI start-up

    summary_path, config_path = run_dir / "summary.json", run_dir / "config.yaml"
    if not summary_path.is_file():
        return None
    saved = yaml.safe_load(config_path.read_text(encoding="utf-8"))["demo"]
    differs = {k: (saved.get(k), v) for k, v in wanted.items() if saved.get(k) != v}
    if differs:
        shown = ", ".join(f"{k}={old!r} (wanted {new!r})" for k, (old, new) in differs.items())
        raise LearningBenchError(
            f"{run_dir} holds a finished run with other settings: {shown}; give another --out or remove it"
        )
    return json.loads(summary_path.read_text(encoding="utf-8"))


def seed_from(sync_dir: Path, async_dir: Path) -> None:
    """Start `async_dir` from `sync_dir`'s warm start: its checkpoint, its warm-start records and its
    accuracy before GRPO (so the demo goes straight to GRPO from the same model)."""
    from arctic_rl_testbed.demo.run import WARM_START_DIR  # noqa: PLC0415 - CLI start-up
    from arctic_rl_testbed.demo.run_log import METRICS_FILE  # noqa: PLC0415 - CLI start-up

    if not (sync_dir / "summary.json").is_file():
        raise LearningBenchError(
            f"{async_dir.name} starts from {sync_dir}'s warm start, which has no finished run"
        )

    if async_dir.exists():
        shutil.rmtree(async_dir)  # an unfinished run: start it again
    async_dir.mkdir(parents=True)
    shutil.copytree(sync_dir / WARM_START_DIR, async_dir / WARM_START_DIR)
    lines = []
    for line in (sync_dir / METRICS_FILE).read_text(encoding="utf-8").splitlines():
        record = json.loads(line) if line.strip() else None
        if record is None:
            continue
        if record.get("kind") in SHARED_KINDS or (
            record.get("kind") == "eval" and record.get("phase") == "before"
        ):
            lines.append(line)
    (async_dir / METRICS_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")


def demo_command(
    args: argparse.Namespace, seed: int, max_staleness: int, run_dir: Path
) -> tuple[list[str], dict[str, str], Path]:
    """The demo's command line and environment: in this interpreter when the framework is importable
    here, else the framework's locked environment through uv (as `arctic-rl demo`)."""

    extra = {"--seed": seed, "--async": max_staleness, "--threads": args.threads}
    forwarded = launch.driver_args(
        framework=args.framework, task=args.task, steps=args.steps, out=str(run_dir), resume=None, extra=extra
    )
    if launch.framework_importable(args.framework):
        return [sys.executable, "-m", launch.DRIVER_MODULE, *forwarded], {}, Path.cwd()
    command = launch.uv_launch(args.framework, forwarded, launch.find_repo_root(), launch.find_uv())
    return command.argv, command.env, command.cwd


@contextlib.contextmanager
def _held(lock: str | None) -> Iterator[None]:
    if lock is None:
        yield
        return

    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


def warm_start_source(args: argparse.Namespace, seed: int, max_staleness: int, out: Path) -> Path | None:
    """The finished run whose warm start this run starts from (None: its own warm start)."""
    first = next(iter(dict.fromkeys(args.seeds)))
    if args.one_warm_start and seed != first:
        return out / run_name(first, 0)
    return out / run_name(seed, 0) if max_staleness else None


def run_one(
    args: argparse.Namespace, seed: int, max_staleness: int, out: Path, lock: str | None = None
) -> dict[str, Any]:
    run_dir = out / run_name(seed, max_staleness)
    wanted = _wanted(args, seed, max_staleness)
    summary = finished_summary(run_dir, wanted)
    if summary is not None:
        print(f"{run_dir.name}: reused (finished)", flush=True)
        return summary
    source = warm_start_source(args, seed, max_staleness, out)
    if source is not None:
        seed_from(source, run_dir)
    elif run_dir.exists():
        shutil.rmtree(run_dir)
    argv, env, cwd = demo_command(args, seed, max_staleness, run_dir)
    console = out / f"{run_dir.name}.console"
    started = time.perf_counter()
    print(f"{run_dir.name}: running ({' '.join(argv[-12:])}; output in {console})", flush=True)
    environ = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | env
    with console.open("w", encoding="utf-8") as sink, _held(lock):
        code = subprocess.call(argv, env=environ, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT)
    if code != 0:
        raise LearningBenchError(f"{run_dir.name}: the demo exited {code}; its output: {console}")
    print(f"{run_dir.name}: done in {time.perf_counter() - started:.0f} s", flush=True)
    summary = finished_summary(run_dir, wanted)
    if summary is None:
        raise LearningBenchError(f"{run_dir.name}: the demo exited 0 but wrote no summary.json in {run_dir}")
    return summary


def run(args: argparse.Namespace) -> BenchResult:
    if len(set(args.seeds)) < 2:
        raise SystemExit("arctic-rl bench learning: give >= 2 distinct --seeds (noise needs several runs)")
    if args.max_staleness < 1:
        raise SystemExit(f"arctic-rl bench learning: --async {args.max_staleness}: give K >= 1")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs = [(seed, k) for seed in dict.fromkeys(args.seeds) for k in (0, args.max_staleness)]
    summaries: dict[tuple[int, int], dict[str, Any]] = {}
    if args.jobs <= 1:
        for seed, k in runs:
            summaries[seed, k] = run_one(args, seed, k, out, args.lock)
    else:
        # waves: the runs with their own warm start, then the runs starting from one of theirs
        first = [r for r in runs if warm_start_source(args, *r, out) is None]
        for wave in (first, [r for r in runs if r not in first]):
            with _held(args.lock), ThreadPoolExecutor(max_workers=args.jobs) as pool:
                for run, summary in zip(wave, pool.map(lambda r: run_one(args, *r, out), wave), strict=True):
                    summaries[run] = summary
    scores = {
        k: [RunScore.from_summary(summaries[seed, k], seed) for seed in dict.fromkeys(args.seeds)]
        for k in (0, args.max_staleness)
    }
    return learning_result(args, scores[0], scores[args.max_staleness], time.perf_counter() - started)


def learning_result(
    args: argparse.Namespace, sync: list[RunScore], fast: list[RunScore], wall_s: float
) -> BenchResult:
    k = args.max_staleness
    sync_pct = [r.after_percent for r in sync]
    fast_pct = [r.after_percent for r in fast]
    s, a = Spread.of(sync_pct), Spread.of(fast_pct)
    diff, stderr, within = paired_verdict(sync_pct, fast_pct)

    def share(pair: tuple[int, int]) -> str:
        return f"{pair[0]}/{pair[1]}"

    rows = []
    for rs, ra in zip(sync, fast, strict=True):
        rows.append(
            (
                f"seed {rs.seed}: sampled train EX before -> after (sync | async {k})",
                f"{share(rs.sampled_before)} -> {share(rs.sampled_after)} | {share(ra.sampled_before)} -> "
                f"{share(ra.sampled_after)}; greedy after {share(rs.greedy_after)} | {share(ra.greedy_after)}; "
                f"GRPO {rs.grpo_seconds:.0f} s | {ra.grpo_seconds:.0f} s",
            )
        )
    rows += [
        ("sync: mean +- sd over seeds (%)", f"{s.mean:.1f} +- {s.sd:.1f}"),
        (f"async {k}: mean +- sd over seeds (%)", f"{a.mean:.1f} +- {a.sd:.1f}"),
        (
            "async - sync per seed (points): mean +- sd, standard error",
            f"{diff.mean:+.1f} +- {diff.sd:.1f}, {stderr:.1f}",
        ),
        (
            "verdict (|mean difference| <= 2 standard errors)",
            "within noise" if within else "NOT within noise",
        ),
    ]
    return BenchResult(
        title=(
            f"learning: {args.framework} demo ({args.task}, {args.steps} GRPO steps), synchronous vs --async {k}, "
            f"seeds {', '.join(str(r.seed) for r in sync)}; sampled train EX after GRPO"
        ),
        baseline_label="synchronous (--async 0), mean sampled train EX",
        baseline_seconds=s.mean,
        ours_label=f"asynchronous (--async {k}), mean sampled train EX",
        ours_seconds=a.mean,
        unit="%",
        quantity="sampled train EX",
        higher_is_better=True,
        extra_rows=rows,
        notes=[
            f"runs in {Path(args.out).resolve()}; this invocation took {wall_s:.0f} s"
            + ("; every run from the first seed's warm start" if args.one_warm_start else "")
        ],
    )
