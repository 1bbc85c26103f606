"""`arctic-rl bird ...`: BIRD text-to-SQL data preparation, evaluation and the bundled sample."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bird", help="BIRD text-to-SQL: preprocess to parquet, evaluate EX, sample data."
    )
    actions = parser.add_subparsers(dest="bird_command", metavar="ACTION", required=True)

    prep = actions.add_parser(
        "preprocess",
        help="Write <out>/<split>.parquet (chat prompts, gold SQL, absolute db paths) for SkyRL and verl.",
    )
    prep.add_argument(
        "--bird-dir", required=True, help="BIRD root holding train/ and dev/ (or dev_YYYYMMDD/)"
    )
    prep.add_argument("--out", required=True, help="output directory for the parquet files")
    prep.add_argument("--split", default="train,dev", help="comma-separated splits (default: train,dev)")
    prep.add_argument(
        "--max-prompt-tokens", type=int, default=None, help="drop longer prompts (needs --tokenizer)"
    )
    prep.add_argument(
        "--tokenizer", default=None, help="local tokenizer directory used to count prompt tokens"
    )
    prep.add_argument(
        "--skip-missing", action="store_true", help="skip questions whose database files are missing"
    )
    prep.add_argument(
        "--sample-rows", type=int, default=3, help="sample rows per table in the schema (default 3)"
    )
    prep.add_argument("--example-values", type=int, default=3, help="example values per column (default 3)")
    prep.add_argument(
        "--no-descriptions", action="store_true", help="leave column descriptions out of the schema (shorter)"
    )
    prep.add_argument(
        "--env-class",
        default=None,
        help="env_class column value for SkyRL (default: bird; bird_multi_turn with --max-turns)",
    )
    prep.add_argument(
        "--max-turns",
        type=int,
        default=None,
        help="multi-turn prompts (SkyRL-SQL's protocol: <sql> queries, then <solution>) for N turns; "
        "set the framework's turn limit (SkyRL: generator.max_turns) to N",
    )
    prep.set_defaults(func=_clean_errors("preprocess", _preprocess))

    ev = actions.add_parser("eval", help="Official execution accuracy (EX) of predicted SQL, by difficulty.")
    ev.add_argument("--pred", required=True, help="predictions: official JSON or JSONL {question_id, sql}")
    ev.add_argument("--gold", required=True, help="gold question file (e.g. dev.json)")
    ev.add_argument("--db-root", required=True, help="directory holding <db_id>/<db_id>.sqlite")
    ev.add_argument(
        "--timeout", type=float, default=30.0, help="per-query time limit in seconds (default 30)"
    )
    ev.add_argument("--workers", type=int, default=None, help="worker processes (default: CPU count)")
    ev.add_argument(
        "--max-rows", type=int, default=1_000_000, help="most distinct rows per result (default 1e6)"
    )
    ev.add_argument("--json", default=None, help="write the report with per-question verdicts here")
    ev.set_defaults(func=_clean_errors("eval", _evaluate))

    sample = actions.add_parser(
        "sample", help="Copy the bundled BIRD-format sample (3 databases, 26 questions)."
    )
    sample.add_argument("--out", required=True, help="new directory to write the sample into")
    sample.set_defaults(func=_clean_errors("sample", _sample))


def _clean_errors(
    action: str, run: Callable[[argparse.Namespace], int]
) -> Callable[[argparse.Namespace], int]:
    """Bad input (missing files, malformed data, invalid settings) ends with its message, not a traceback."""

    def wrapped(args: argparse.Namespace) -> int:
        from arctic_rl_core.envs.bird.dataset import BirdDataError  # noqa: PLC0415 - CLI start-up

        try:
            return run(args)
        except (BirdDataError, ValidationError, FileNotFoundError, FileExistsError) as error:
            raise SystemExit(f"arctic-rl bird {action}: {error}") from error

    return wrapped


def _preprocess(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415 - CLI start-up
    from rich.table import Table  # noqa: PLC0415 - CLI start-up

    from arctic_rl_core.envs.bird.dataset import parse_splits  # noqa: PLC0415 - CLI start-up
    from arctic_rl_core.envs.bird.preprocess import PreprocessOptions, preprocess  # noqa: PLC0415 - CLI start-up
    from arctic_rl_core.envs.bird.schema_prompt import SchemaPromptOptions  # noqa: PLC0415 - CLI start-up

    options = PreprocessOptions(
        splits=tuple(parse_splits(args.split)),
        skip_missing=args.skip_missing,
        schema_prompt=SchemaPromptOptions(
            sample_rows=args.sample_rows,
            example_values=args.example_values,
            include_descriptions=not args.no_descriptions,
        ),
        max_prompt_tokens=args.max_prompt_tokens,
        tokenizer_path=args.tokenizer,
        env_class=args.env_class,
        max_turns=args.max_turns,
    )
    summaries = preprocess(args.bird_dir, args.out, options)
    table = Table(title="bird preprocess")
    table.add_column("")
    for s in summaries:
        table.add_column(s.split, justify="right")
    rows = [
        ("questions", [str(s.questions) for s in summaries]),
        ("written", [str(s.written) for s in summaries]),
        ("skipped (missing files)", [str(s.skipped_missing) for s in summaries]),
        ("dropped (prompt too long)", [str(s.dropped_too_long) for s in summaries]),
        ("databases", [str(s.databases) for s in summaries]),
        ("max prompt chars", [str(s.max_prompt_chars) for s in summaries]),
        (
            "max prompt tokens",
            ["-" if s.max_prompt_tokens is None else str(s.max_prompt_tokens) for s in summaries],
        ),
    ]
    for label, values in rows:
        table.add_row(label, *values)
    console = Console()
    console.print(table)
    for s in summaries:  # plain print: paths must not be wrapped
        print(f"{s.split}: {s.path}")
        for path in s.missing:
            print(f"  skipped, missing: {path}")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415 - CLI start-up
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415 - CLI start-up

    from arctic_rl_core.envs.bird.dataset import load_questions  # noqa: PLC0415 - CLI start-up
    from arctic_rl_core.envs.bird.evaluate import evaluate, load_predictions  # noqa: PLC0415 - CLI start-up
    from arctic_rl_core.envs.bird.executor import ExecutorSettings  # noqa: PLC0415 - CLI start-up

    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    settings = ExecutorSettings(num_workers=workers, timeout_s=args.timeout, max_rows=args.max_rows)
    questions = load_questions(args.gold)
    predictions = load_predictions(args.pred)
    columns = (TextColumn("executing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns) as progress:
        task = progress.add_task("queries", total=None)

        def on_progress(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        report = evaluate(questions, predictions, args.db_root, settings, on_progress)
    console = Console()
    print(report.table_text())
    errors = report.error_counts()
    console.print(f"prediction format: {report.prediction_format}; timeout {settings.timeout_s} s per query")
    console.print(f"predicted-query errors: {errors['predicted'] or 'none'}")
    console.print(f"gold-query errors: {errors['gold'] or 'none'}")
    if report.db_id_mismatches():
        console.print(f"predictions naming another db_id (gold db used): {report.db_id_mismatches()}")
    if report.unmatched_predictions:
        console.print(f"predictions matching no gold question: {len(report.unmatched_predictions)}")
    if args.json is not None:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        print(f"report: {args.json}")
    return 0


def _sample(args: argparse.Namespace) -> int:
    from arctic_rl_core.envs.bird.sample import sample_dir  # noqa: PLC0415 - CLI start-up

    out = Path(args.out)
    if out.exists():
        raise FileExistsError(f"--out {out} already exists; pass a new directory")
    shutil.copytree(sample_dir(), out, ignore=shutil.ignore_patterns("SAMPLE_KEY"))
    print(out)
    return 0
