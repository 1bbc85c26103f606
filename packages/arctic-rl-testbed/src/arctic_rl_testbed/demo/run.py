"""The demo driver: `python -m arctic_rl_testbed.demo.run [--task bird] [--steps N] [--out DIR] [--resume DIR]`,
run inside the framework's environment (`arctic-rl demo` starts it there).

Phases: bundled sample -> supervised warm start of the tiny model (backend forward-backward with
the `sft` loss) -> greedy accuracy on the held-out and training splits -> GRPO steps through the
framework's trainer on the reference backend -> the same accuracy again. Everything lands in the
run directory; Ctrl-C leaves the warm-start and per-step checkpoints, and `--resume DIR` continues.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from arctic_rl_core.backends.arctic import ArcticBackend
from arctic_rl_core.backends.forwarding import ForwardingBackend
from arctic_rl_core.checkpoint_manifest import CheckpointFolder
from arctic_rl_core.failure_messages import explain
from arctic_rl_core.run_lock import RunFolderLock
from pydantic import ValidationError
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from arctic_rl_testbed.demo.arguments import add_arguments
from arctic_rl_testbed.demo.backend import reference_backend, synced
from arctic_rl_testbed.demo.drivers import (
    DriverNotFoundError,
    checkpoint_folder,
    load_driver,
    require_async_support,
    require_multi_turn_support,
)
from arctic_rl_testbed.demo.evaluation import ENDINGS, evaluate_episodes, evaluate_rows, evaluate_sampled
from arctic_rl_testbed.demo.local_server import local_reference_server
from arctic_rl_testbed.demo.options import CONFIG_FILE, DemoOptions
from arctic_rl_testbed.demo.process_chain import stop_on_termination, watch_launcher
from arctic_rl_testbed.demo.prompts import prompt_ids, prompt_text
from arctic_rl_testbed.demo.run_log import (
    PLOT_FILE,
    SUMMARY_FILE,
    MetricsLog,
    step_line,
    step_table,
    write_plot,
)
from arctic_rl_testbed.demo.tasks import load_task
from arctic_rl_testbed.demo.warm_start import warm_start

WARM_START_DIR = "warm_start"
LOG_FILE = "run.log"
SERVER_LOG_FILE = "server.log"  # --trainer deepspeed: the local server's output
EVAL_SPLITS = ("heldout", "train")
INTERRUPTED_EXIT = 130
FAILED_EXIT = 1
# Flags that a resumed run may change (the rest of a run's settings are fixed by its config.yaml).
RESUMABLE_FLAGS = ("steps",)


def _explicit(args: argparse.Namespace) -> dict[str, Any]:
    names = {
        "framework": "framework",
        "task": "task",
        "steps": "steps",
        "seed": "seed",
        "warm_start_steps": "warm_start_steps",
        "prompts_per_step": "prompts_per_step",
        "rollouts_per_prompt": "rollouts_per_prompt",
        "lr": "lr",
        "eval_samples": "eval_samples",
        "threads": "num_threads",
        "server": "server",
        "backend": "backend",
        "colocate": "colocate",
        "trainer": "trainer",
        "max_staleness": "max_staleness",
        "max_turns": "max_turns",
    }
    return {field: getattr(args, flag) for flag, field in names.items() if getattr(args, flag) is not None}


def default_out(now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return str(Path("runs") / f"demo-{stamp}")


def resolve_options(args: argparse.Namespace) -> DemoOptions:
    """New run: defaults + flags. `--resume DIR`: DIR's config.yaml, plus `--steps` (to extend it);
    any other flag that differs from the saved run is an error naming it."""

    explicit = _explicit(args)
    if args.resume is None:
        return _checked_options({"out": args.out or default_out(), **explicit}, explicit, None)
    run_dir = Path(args.resume)
    config_path = run_dir / CONFIG_FILE
    if not config_path.is_file():
        raise SystemExit(f"--resume {run_dir}: no {CONFIG_FILE} there; give the directory of a demo run")
    if args.out is not None and Path(args.out).resolve() != run_dir.resolve():
        raise SystemExit(
            f"--out {args.out} with --resume {run_dir}: a resumed run writes to its own directory"
        )
    saved = yaml.safe_load(config_path.read_text(encoding="utf-8"))["demo"]
    saved["out"] = str(run_dir)
    for field, value in explicit.items():
        if field not in RESUMABLE_FLAGS and saved.get(field) != value:
            raise SystemExit(
                f"--resume {run_dir}: {field}={value!r} differs from the run's {field}={saved.get(field)!r}; "
                f"only {', '.join(RESUMABLE_FLAGS)} can change on resume (start a new run for the rest)"
            )
    saved.update({k: v for k, v in explicit.items() if k in RESUMABLE_FLAGS})
    return _checked_options(saved, explicit, config_path)


_FLAGS = {"num_threads": "--threads", "max_staleness": "--async"}  # the rest: --<field with dashes>


def _checked_options(
    fields: dict[str, Any], explicit: dict[str, Any], config_path: Path | None
) -> DemoOptions:
    """`DemoOptions(**fields)`, or SystemExit naming each bad flag (or field of the resumed run's
    config.yaml), its value and the range it needs (was: pydantic's traceback)."""

    try:
        return DemoOptions(**fields)
    except ValidationError as error:
        lines = []
        for problem in error.errors():
            message = problem["msg"].removeprefix("Value error, ")
            if not problem["loc"]:  # a check across flags: its message names them and the fix
                lines.append(message)
                continue
            field = ".".join(str(part) for part in problem["loc"])
            name = (
                _FLAGS.get(field, "--" + field.replace("_", "-"))
                if field in explicit or config_path is None
                else f"{config_path}: demo.{field}"
            )
            need = message.replace("Input should be ", "must be ", 1)
            lines.append(f"{name} {problem.get('input')!r}: {need}")
        raise SystemExit("arctic-rl demo: " + "; ".join(lines)) from None


def write_config(options: DemoOptions, extra: dict[str, Any] | None = None) -> Path:
    path = options.run_dir / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"demo": options.model_dump(mode="json"), **(extra or {})}
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (file descriptors 1 and 2: framework logs, library
    progress bars, warnings) to `path`; the demo's console writes to a copy of the original stdout."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with path.open("ab") as sink:
        for fd in saved:
            os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


def run_demo(options: DemoOptions) -> int:

    if options.max_staleness:  # before the warm start: a driver without an asynchronous mode fails now
        require_async_support(load_driver(options.framework), options)
    if options.max_turns > 1:
        require_multi_turn_support(load_driver(options.framework), options)
    # The demo's own output goes to a copy of stdout: fds 1 and 2 go to the run log meanwhile.
    console = Console(file=os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, closefd=True))
    run_dir = options.run_dir
    # one writer per run folder, until this run ends (however it ends: the kernel releases the lock)
    with RunFolderLock(run_dir):
        return _run_locked(options, console)


def _run_locked(options: DemoOptions, console: Any) -> int:

    run_dir = options.run_dir
    log = MetricsLog(run_dir)
    resumed = (run_dir / CONFIG_FILE).is_file()
    if not resumed:
        write_config(options)
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    console.print(
        f"[bold]arctic-rl demo[/]: {options.task} GRPO through {options.framework} on {_grpo_backend(options)}"
        f" -> {run_dir}" + (" (resumed)" if resumed else "")
    )
    columns = (
        TextColumn("{task.description:<20}"),
        BarColumn(bar_width=20),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(compact=True),
        TextColumn("{task.fields[info]}"),
    )
    hf_dir = run_dir / WARM_START_DIR / "hf"
    os.environ.setdefault("TQDM_DISABLE", "1")  # library progress bars; read when tqdm is imported
    console.print(f"framework and library logs: {run_dir / LOG_FILE}")
    try:
        with (
            output_to(run_dir / LOG_FILE),
            Progress(*columns, console=console, redirect_stdout=False, redirect_stderr=False) as progress,
            contextlib.ExitStack() as stack,
        ):
            t0 = time.perf_counter()
            task = load_task(options.task, options.max_turns)
            warm_started = (hf_dir / "config.json").is_file()
            backend = reference_backend(
                options,
                model_path=hf_dir if warm_started else None,
                lr=options.warm_start_lr,
            )
            tokenizer = backend.tokenizer
            train_prompts = [prompt_ids(tokenizer, row["prompt"]) for row in task.train_rows]
            heldout_prompts = [prompt_ids(tokenizer, row["prompt"]) for row in task.heldout_rows]
            seconds["setup"] = time.perf_counter() - t0

            # 1. Supervised warm start (skipped when the run already has its checkpoint).
            if not warm_started:
                t0 = time.perf_counter()
                bar = progress.add_task("warm start (sft)", total=options.warm_start_steps, info="")

                def on_sft(record) -> None:
                    log.append(
                        "warm_start",
                        step=record.step,
                        loss=record.loss,
                        grad_norm=record.grad_norm,
                        seconds=record.seconds,
                    )
                    progress.update(bar, advance=1, info=f"loss {record.loss:.3f}")

                sft_prompts, answers = task.warm_start_pairs(tokenizer)
                asyncio.run(
                    warm_start(
                        backend,
                        sft_prompts,
                        answers,
                        steps=options.warm_start_steps,
                        batch_size=options.warm_start_batch,
                        pad_token_id=backend.pad_token_id,
                        max_prompt_len=max(len(p) for p in sft_prompts),
                        max_response_len=options.max_response_length,
                        seed=options.seed,
                        on_step=on_sft,
                    )
                )
                asyncio.run(backend.save_to(run_dir / WARM_START_DIR, export_hf=True))
                seconds["warm_start"] = time.perf_counter() - t0

            # 2. Accuracy before GRPO (greedy), unless a resumed run has it.
            before = {r["split"]: r for r in log.records("eval") if r["phase"] == "before"}
            if set(before) != set(EVAL_SPLITS):
                t0 = time.perf_counter()
                asyncio.run(synced(backend))
                before = _evaluate(
                    progress, log, backend, task, "before", train_prompts, heldout_prompts, options, tokenizer
                )
                seconds["eval_before"] = time.perf_counter() - t0
            asyncio.run(backend.shutdown())

            # 3. GRPO through the framework's trainer.
            t0 = time.perf_counter()
            grpo_bar = progress.add_task("GRPO steps", total=options.steps, info="")

            def on_ready(first_step: int, overrides: list[str], arctic_config: dict[str, Any]) -> None:
                write_config(
                    options, {f"{options.framework}_overrides": overrides, "arctic_rl": arctic_config}
                )
                progress.update(grpo_bar, completed=first_step - 1)

            def on_step(step: int, record: dict[str, Any]) -> None:
                log.append("grpo_step", step=step, **record)
                progress.console.print(step_line(step, options.steps, record))
                progress.update(
                    grpo_bar,
                    completed=step,
                    info=f"reward {record['reward_mean']:.3f} loss {record['loss']:+.4f} v{record['weights_version']}",
                )

            def on_backend(location: dict[str, Any]) -> None:
                log.append("backend", **location, driver_pid=os.getpid())
                node = f", node {location['node_id'][:12]}" if location.get("node_id") else ""
                if location.get("pid") is None:  # an Arctic server: no engine process of ours
                    where = location["where"]
                else:
                    where = f"reference engine {location['where']} (pid {location['pid']}{node})"
                progress.console.print(f"backend: {where}; driver pid {os.getpid()}")

            run_grpo = load_driver(options.framework)  # the adapter's driver (entry point)
            folder = checkpoint_folder(run_grpo, run_dir)
            if folder is not None:
                for notice in rewind_unrecorded(folder, {int(r["step"]) for r in log.grpo_steps()}):
                    progress.console.print(f"[yellow]{notice}[/]")
            grpo_options = options
            if options.trainer == "deepspeed":  # a local server whose jobs are arctic-platform 0.1.4's own
                server = stack.enter_context(
                    local_reference_server(run_dir, run_dir / SERVER_LOG_FILE, ["--trainer", "deepspeed"])
                )
                grpo_options = options.model_copy(update={"server": server})
                progress.console.print(
                    f"GRPO server: {server} (--trainer deepspeed; log {run_dir / SERVER_LOG_FILE})"
                )
            # what the run does to the server's jobs is said on the console too (not only in the log)
            with _warnings_on(progress.console, "arctic_rl_core.backends.arctic_leftovers"):
                backend = run_grpo(
                    grpo_options,
                    task,
                    model_path=hf_dir,
                    on_step=on_step,
                    on_ready=on_ready,
                    on_backend=on_backend,
                )
            seconds["grpo"] = time.perf_counter() - t0

            # 4. Accuracy after GRPO, on the sampler's final weights (text prompts for a server). None:
            # the driver has no backend holding them (verl on Cortex: its jobs end with verl's trainer,
            # and the 0.1.4 client cannot load a Cortex checkpoint into new ones).
            after = None
            if backend is None:
                progress.console.print(
                    "accuracy after GRPO: not measured (the run's Cortex jobs ended with verl's trainer; "
                    "arctic-platform 0.1.4 cannot load a Cortex checkpoint into new jobs)"
                )
            else:
                t0 = time.perf_counter()
                if _takes_text(backend):
                    train_prompts = [prompt_text(tokenizer, row["prompt"]) for row in task.train_rows]
                    heldout_prompts = [prompt_text(tokenizer, row["prompt"]) for row in task.heldout_rows]
                after = _evaluate(
                    progress, log, backend, task, "after", train_prompts, heldout_prompts, options, tokenizer
                )
                asyncio.run(backend.shutdown())
                seconds["eval_after"] = time.perf_counter() - t0
    except KeyboardInterrupt:
        console.print(
            f"\n[yellow]Interrupted.[/] Checkpoints are in {run_dir}; continue with: "
            f"[bold]arctic-rl demo --resume {run_dir}[/]"
        )
        return INTERRUPTED_EXIT
    seconds["total"] = time.perf_counter() - started
    steps = log.grpo_steps()
    console.print(step_table(steps))
    plot = write_plot(
        steps, run_dir / PLOT_FILE, f"{options.task} GRPO via {options.framework} ({_grpo_backend(options)})"
    )
    summary = _summary(options, before, after, steps, seconds)

    (run_dir / SUMMARY_FILE).write_text(
        json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    _print_summary(console, summary, plot)
    return 0


@contextlib.contextmanager
def _warnings_on(console: Any, logger_name: str) -> Iterator[None]:
    """Inside the block, the warnings `logger_name` logs in this process are printed on `console`."""

    class ToConsole(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            console.print(f"[yellow]{record.getMessage()}[/]")

    target, handler = logging.getLogger(logger_name), ToConsole(logging.WARNING)
    target.addHandler(handler)
    try:
        yield
    finally:
        target.removeHandler(handler)


def rewind_unrecorded(folder: CheckpointFolder, recorded: set[int]) -> list[str]:
    """A checkpoint whose step has no record in metrics.jsonl (the run stopped between the framework's
    checkpoint and its metrics) is not resumed from: the run goes back to the newest whole checkpoint
    whose step has its record, and that step runs again (so no record is lost and no step runs past
    `--steps`). Every checkpoint file is checked first (`CheckpointDamaged` names a damaged one).
    Returns one notice per step rewound."""
    notices = []
    step = folder.resume_point()
    while step is not None and step not in recorded:
        earlier = [s for s in folder.whole_steps(below=step) if s in recorded]
        target = earlier[-1] if earlier else None
        folder.rewind_to(target)
        origin = f"step {target}'s checkpoint" if target is not None else "the warm start"
        notices.append(
            f"step {step} was checkpointed but its record was not written (the run stopped between them): "
            f"it runs again from {origin}"
        )
        step = target
    return notices


def _grpo_backend(options: DemoOptions) -> str:
    api = "Cortex API" if options.backend == "cortex" else "Arctic server"
    where = f"the {api} at {options.server}" if options.server else "the CPU reference backend"
    if options.trainer == "deepspeed":
        where = "a local Arctic server with arctic-platform 0.1.4's own DeepSpeed training code (CPU)"
    where += ", colocated" if options.colocate else ""
    return where + (
        f", asynchronous (max_staleness {options.max_staleness})" if options.max_staleness else ""
    )


def _takes_text(backend: Any) -> bool:
    """The Arctic on-prem server takes text prompts only (through `ArcticBackend`)."""

    while isinstance(backend, ForwardingBackend):
        backend = backend.target
    return isinstance(backend, ArcticBackend)


def _evaluate(
    progress, log: MetricsLog, backend, task, phase: str, train_prompts, heldout_prompts, options, tokenizer
):
    if task.max_turns > 1:
        return _evaluate_episodes(progress, log, backend, task, phase, options, tokenizer)

    bar = progress.add_task(f"accuracy {phase} GRPO", total=len(EVAL_SPLITS), info="")
    results: dict[str, dict[str, Any]] = {}
    # the trainer step whose weights the sampler serves (after GRPO: the final step's)
    weights_version = asyncio.run(backend.state()).weights_version
    for split, rows, prompts in (
        ("heldout", task.heldout_rows, heldout_prompts),
        ("train", task.train_rows, train_prompts),
    ):
        score, answers = asyncio.run(
            evaluate_rows(backend, task, rows, prompts, max_tokens=options.max_response_length)
        )
        sampled = _sampled_too(
            options,
            functools.partial(
                evaluate_sampled, backend, task, rows, prompts, max_tokens=options.max_response_length
            ),
        )
        results[split] = log.append(
            "eval",
            phase=phase,
            split=split,
            weights_version=weights_version,
            **score.to_json(),
            answers=answers,
            sampled=sampled,
        )
        info = f"{split} {score.metric} {score.percent:.1f}%"
        if sampled is not None:
            info += f", sampled {sampled['percent']:.1f}%"
        progress.update(bar, advance=1, info=info)
    return results


def _sampled_too(options: DemoOptions, evaluate: Any) -> dict[str, Any] | None:
    """`evaluate(temperature=..., samples_per_prompt=...)`'s score as JSON when the run samples answers."""
    if not options.eval_samples:
        return None
    return asyncio.run(
        evaluate(temperature=options.temperature, samples_per_prompt=options.eval_samples)
    ).to_json()


def _evaluate_episodes(progress, log: MetricsLog, backend, task, phase: str, options, tokenizer):
    """BIRD multi-turn: greedy episodes (and sampled ones) per split, with the turns they took."""

    bar = progress.add_task(f"accuracy {phase} GRPO", total=len(EVAL_SPLITS), info="")
    results: dict[str, dict[str, Any]] = {}
    weights_version = asyncio.run(backend.state()).weights_version
    lengths = {"max_tokens": options.max_response_length, "max_input_length": options.max_input_length}
    for split, rows in (("heldout", task.heldout_rows), ("train", task.train_rows)):
        episodes = functools.partial(evaluate_episodes, backend, task, rows, tokenizer, **lengths)
        score = asyncio.run(episodes())
        sampled = _sampled_too(options, episodes)
        results[split] = log.append(
            "eval",
            phase=phase,
            split=split,
            weights_version=weights_version,
            **score.to_json(),
            sampled=sampled,
        )
        turns = "/".join(str(score.turns.get(t, 0)) for t in range(1, task.max_turns + 1))
        info = f"{split} EX {score.percent:.1f}%, turns {turns}, hit max_turns {score.ended['max_turns']}"
        progress.update(bar, advance=1, info=info)
    return results


def _summary(options: DemoOptions, before, after, steps, seconds) -> dict[str, Any]:
    keys = ("metric", "correct", "total", "percent", "well_formatted", "errors", "turns", "ended")

    def pick(record: dict[str, Any]) -> dict[str, Any]:
        """A score's counts (multi-turn: by turns taken and ending too); its episodes stay in metrics.jsonl."""
        sampled = record.get("sampled")
        return {
            **{k: record.get(k) for k in keys},
            "sampled": None if sampled is None else {k: sampled.get(k) for k in keys},
        }

    return {
        "framework": options.framework,
        "task": options.task,
        "steps": [s["step"] for s in steps],
        "reward_mean": [s["reward_mean"] for s in steps],
        "loss": [s["loss"] for s in steps],
        "weights_version": [s["weights_version"] for s in steps],
        "rollout_weights_version": [s["rollout_weights_version"] for s in steps],
        "server": options.server,
        "backend": options.backend if options.server else "reference",
        "colocate": options.colocate,
        "max_staleness": options.max_staleness,
        "max_turns": options.max_turns,
        "before": {split: pick(before[split]) for split in EVAL_SPLITS},
        "after": None if after is None else {split: pick(after[split]) for split in EVAL_SPLITS},
        "seconds": seconds,
    }


def _print_summary(console, summary: dict[str, Any], plot: Path) -> None:
    def share(score: dict[str, Any] | None) -> str:
        return "-" if score is None else f"{score['correct']}/{score['total']} ({score['percent']:.1f}%)"

    table = Table(title="Accuracy before -> after GRPO")
    columns = (
        "split",
        "metric",
        "greedy before",
        "greedy after",
        "sampled before",
        "sampled after",
        "formatted",
    )
    for column in columns:
        table.add_column(column)
    for split in EVAL_SPLITS:
        b = summary["before"][split]
        a = (summary["after"] or {}).get(split) or {"well_formatted": "-"}
        name = "held-out" if split == "heldout" else "train"
        table.add_row(
            name,
            b["metric"],
            share(b),
            share(a if "metric" in a else None),
            share(b.get("sampled")),
            share(a.get("sampled")),
            f"{b['well_formatted']} -> {a['well_formatted']}",
        )
    console.print(table)
    console.print(
        "greedy: one answer per question at temperature 0; sampled: several answers per question at the "
        "rollout temperature, the expected reward GRPO optimises"
    )
    if summary.get("max_turns", 1) > 1:
        console.print(_turns_table(summary))
    rewards = summary["reward_mean"]
    if rewards:
        console.print(
            f"reward mean: step {summary['steps'][0]} {rewards[0]:.3f} -> step {summary['steps'][-1]} {rewards[-1]:.3f}"
        )
    timing = ", ".join(f"{k} {v:.0f}s" for k, v in summary["seconds"].items())
    console.print(f"time: {timing}")
    console.print(f"plot: {plot}")


def _turns_table(summary: dict[str, Any]):
    """Multi-turn: how many episodes took each number of turns and how they ended, with their EX,
    before -> after GRPO."""

    turns = range(1, summary["max_turns"] + 1)
    table = Table(
        title="Episodes before -> after GRPO: turns taken, how they ended (a <solution>; max_turns reached "
        "without one; cut at the input length), EX"
    )
    columns = (
        "split",
        "answers",
        *(f"{t} turn{'s' if t > 1 else ''}" for t in turns),
        "solution",
        "hit max_turns",
        "cut",
        "EX",
    )
    for column in columns:
        table.add_column(column)

    def change(before: dict[str, Any], after: dict[str, Any] | None, read: Any) -> str:
        return f"{read(before)} -> {'-' if after is None else read(after)}"

    for split in EVAL_SPLITS:
        for kind in ("greedy", "sampled"):
            b = summary["before"][split] if kind == "greedy" else summary["before"][split].get("sampled")
            after = (summary["after"] or {}).get(split) or {}
            a = after if kind == "greedy" else after.get("sampled")
            if b is None:
                continue
            cells = [change(b, a, lambda s, t=t: (s.get("turns") or {}).get(str(t), 0)) for t in turns]
            cells += [
                change(b, a, lambda s, e=ending: (s.get("ended") or {}).get(e, 0)) for ending in ENDINGS
            ]
            cells.append(change(b, a, lambda s: f"{s['correct']}/{s['total']}"))
            table.add_row("held-out" if split == "heldout" else "train", kind, *cells)
    return table


def main(argv: Sequence[str] | None = None) -> int:
    """The driver: the run, stopped as on Ctrl-C by SIGTERM or when its launcher is gone
    (`process_chain`); a failure a user can cause or meet is one message (`failure_messages`), exit 1."""

    parser = argparse.ArgumentParser(prog="python -m arctic_rl_testbed.demo.run", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    run_dir = Path(args.resume or args.out) if (args.resume or args.out) else None
    with stop_on_termination():
        watch_launcher()
        try:
            options = resolve_options(args)
            run_dir = options.run_dir
            return run_demo(options)
        except KeyboardInterrupt:  # before or after the run's own handling (setup, summary)
            print("\narctic-rl demo: interrupted", file=sys.stderr)
            return INTERRUPTED_EXIT
        except Exception as error:
            return _report_failure(error, run_dir)


def _report_failure(error: Exception, run_dir: Path | None) -> int:
    """One message on stderr for a failure `failure_messages.explain` knows (its traceback into the run log);
    anything else is raised on (a bug shows its traceback)."""

    resume = f"arctic-rl demo --resume {run_dir}" if run_dir is not None else "arctic-rl demo --resume DIR"
    message = (
        str(error)
        if isinstance(error, DriverNotFoundError)
        else explain(error, resume=resume, run_dir=run_dir)
    )
    if message is None:
        raise error
    log_note = ""
    if run_dir is not None and run_dir.is_dir():
        with (run_dir / LOG_FILE).open("a", encoding="utf-8") as log:
            log.write("".join(traceback.format_exception(error)))
        log_note = f" (details: {run_dir / LOG_FILE})"
    print(f"arctic-rl demo: {message}{log_note}", file=sys.stderr)
    return FAILED_EXIT


if __name__ == "__main__":
    raise SystemExit(main())
