"""Official BIRD execution accuracy (EX) for a file of predicted SQL.

A prediction is correct iff it executes, the gold SQL executes, and the SETS of result rows are
equal: `set(predicted_rows) == set(gold_rows)` as in the official evaluator. Row order and
duplicate rows are ignored; column order and value types are not (values compare as Python
values: 1 == 1.0, '1' != 1). A timeout or any error counts as wrong.

Differences from the official script, all documented in the report: the time limit applies to
each query rather than to the (predicted, gold) pair; a result with more than `max_rows`
distinct rows is wrong (`row_limit`) instead of exhausting memory; a statement that returns no
columns is wrong (`not_a_query`); queries run read-only; a missing prediction is wrong and
counted instead of being run as an empty query. The gold database is the one named by the gold
question (as in the official mini-dev script); a prediction naming another db_id is counted.

Prediction files: the official JSON object `{"0": "SQL\\t----- bird -----\\tdb_id", ...}` keyed
by the position of the question in the gold file, or JSONL with one `{"question_id": ..., "sql":
...}` per line, matched to the gold question with that `question_id`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from arctic_rl_core.envs.bird.dataset import BirdDataError, BirdQuestion, database_paths
from arctic_rl_core.envs.bird.executor import ExecutionResult, ExecutorSettings, SQLExecutor, SQLTask
from arctic_rl_core.envs.bird.sql_identity import execution_key

OFFICIAL_SEPARATOR = "\t----- bird -----\t"
DIFFICULTIES = ("simple", "moderate", "challenging")


@dataclass(frozen=True)
class Prediction:
    sql: str | None
    db_id: str | None


@dataclass(frozen=True)
class PredictionFile:
    """Parsed predictions: keyed by gold position (`official`) or by question_id (`jsonl`)."""

    format: str
    predictions: dict[int, Prediction]


def load_predictions(path: str | Path) -> PredictionFile:
    path = Path(path)
    if not path.is_file():
        raise BirdDataError(f"prediction file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict) and "question_id" not in whole:
        predictions: dict[int, Prediction] = {}
        for key, value in whole.items():
            try:
                index = int(key)
            except ValueError:
                raise BirdDataError(
                    f"prediction file {path}: key {key!r} is not a question index; the official format is "
                    '{"0": "SQL\\t----- bird -----\\tdb_id", ...}'
                ) from None
            if isinstance(value, str):
                sql, separator, db_id = value.partition(OFFICIAL_SEPARATOR)
                predictions[index] = Prediction(sql=sql, db_id=db_id.strip() if separator else None)
            else:  # the official generator writes 0 for a question it could not answer
                predictions[index] = Prediction(sql=None, db_id=None)
        return PredictionFile(format="official", predictions=predictions)
    predictions = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"prediction file {path} line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as error:
            raise BirdDataError(
                f"{where}: not JSON ({error}); expected the official JSON object or JSONL lines "
                '{"question_id": 0, "sql": "SELECT ..."}'
            ) from error
        if not isinstance(entry, dict) or isinstance(entry.get("question_id"), bool):
            raise BirdDataError(f"{where}: expected an object with an integer 'question_id'")
        question_id = entry.get("question_id")
        sql = entry.get("sql")
        if not isinstance(question_id, int) or not (sql is None or isinstance(sql, str)):
            raise BirdDataError(f"{where}: 'question_id' must be an integer and 'sql' a string")
        if question_id in predictions:
            raise BirdDataError(f"{where}: question_id {question_id} is predicted twice")
        db_id = entry.get("db_id")
        predictions[question_id] = Prediction(sql=sql, db_id=db_id if isinstance(db_id, str) else None)
    return PredictionFile(format="jsonl", predictions=predictions)


@dataclass(frozen=True)
class QuestionVerdict:
    index: int
    question_id: int | None
    db_id: str
    difficulty: str
    correct: bool
    predicted_sql: str | None
    predicted_error: str
    predicted_message: str
    gold_error: str
    gold_message: str
    predicted_db_id: str | None


@dataclass
class EvalReport:
    verdicts: list[QuestionVerdict]
    prediction_format: str
    timeout_s: float
    max_rows: int
    unmatched_predictions: list[int] = field(default_factory=list)

    def buckets(self) -> list[str]:
        extra = sorted({v.difficulty for v in self.verdicts} - set(DIFFICULTIES))
        return [*DIFFICULTIES, *extra, "total"]

    def counts(self) -> dict[str, tuple[int, int]]:
        """bucket -> (correct, total)."""
        result: dict[str, tuple[int, int]] = {}
        for bucket in self.buckets():
            members = [v for v in self.verdicts if bucket == "total" or v.difficulty == bucket]
            result[bucket] = (sum(v.correct for v in members), len(members))
        return result

    def accuracy(self) -> dict[str, float | None]:
        return {bucket: (100.0 * c / n if n else None) for bucket, (c, n) in self.counts().items()}

    def error_counts(self) -> dict[str, dict[str, int]]:
        return {
            "predicted": dict(Counter(v.predicted_error for v in self.verdicts if v.predicted_error)),
            "gold": dict(Counter(v.gold_error for v in self.verdicts if v.gold_error)),
        }

    def db_id_mismatches(self) -> int:
        return sum(1 for v in self.verdicts if v.predicted_db_id is not None and v.predicted_db_id != v.db_id)

    def table_text(self) -> str:
        """The EX table in the layout of the official script (percentages, two decimals)."""
        buckets = self.buckets()
        counts = self.counts()
        accuracy = self.accuracy()
        width = 20
        lines = [
            " " * width + " " + " ".join(f"{b:<{width}}" for b in buckets),
            f"{'count':<{width}} " + " ".join(f"{counts[b][1]:<{width}}" for b in buckets),
            "=" * 38 + "    ACCURACY    " + "=" * 37,
            f"{'accuracy':<{width}} "
            + " ".join(
                f"{'-' if accuracy[b] is None else format(accuracy[b], '.2f'):<{width}}" for b in buckets
            ),
        ]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": {
                "prediction_format": self.prediction_format,
                "timeout_s": self.timeout_s,
                "max_rows": self.max_rows,
                "counts": {b: {"correct": c, "total": n} for b, (c, n) in self.counts().items()},
                "accuracy": self.accuracy(),
                "errors": self.error_counts(),
                "db_id_mismatches": self.db_id_mismatches(),
                "unmatched_predictions": self.unmatched_predictions,
            },
            "questions": [asdict(v) for v in self.verdicts],
        }


def evaluate(
    questions: Sequence[BirdQuestion],
    predictions: PredictionFile,
    db_root: str | Path,
    settings: ExecutorSettings | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> EvalReport:
    """Execute every prediction and gold query (each distinct one once) and judge them.

    `on_progress(done, total)` is called as query results arrive.
    """
    settings = settings if settings is not None else ExecutorSettings()
    db_root = Path(db_root)
    if predictions.format == "jsonl":
        if any(q.question_id is None for q in questions):
            raise BirdDataError(
                "JSONL predictions are matched by question_id, but the gold file has questions without "
                "question_id; use the official prediction format (keyed by position) instead"
            )
        key_of = {q.index: q.question_id for q in questions}
    else:
        key_of = {q.index: q.index for q in questions}
    known = set(key_of.values())
    unmatched = sorted(key for key in predictions.predictions if key not in known)

    task_index: dict[tuple[str, str], int] = {}
    tasks: list[SQLTask] = []

    def task_for(db_path: str, sql: str) -> int:
        key = (db_path, execution_key(sql))
        if key not in task_index:
            task_index[key] = len(tasks)
            tasks.append(SQLTask(db_path, sql))
        return task_index[key]

    plan: list[tuple[BirdQuestion, Prediction | None, int | None, int]] = []
    for question in questions:
        db_path = str(database_paths(db_root, question.db_id).db_path)
        prediction = predictions.predictions.get(key_of[question.index])
        predicted_task = None
        if prediction is not None and prediction.sql is not None and prediction.sql.strip():
            predicted_task = task_for(db_path, prediction.sql)
        plan.append((question, prediction, predicted_task, task_for(db_path, question.sql)))

    done = 0

    def progress(_index: int, _result: ExecutionResult) -> None:
        nonlocal done
        done += 1
        if on_progress is not None:
            on_progress(done, len(tasks))

    with SQLExecutor(settings) as executor:
        results = executor.run(tasks, on_result=progress)

    verdicts: list[QuestionVerdict] = []
    for question, prediction, predicted_task, gold_task in plan:
        gold = results[gold_task]
        predicted = results[predicted_task] if predicted_task is not None else None
        if predicted is None:
            predicted_error, predicted_message = "no_prediction", "no prediction for this question"
        elif not predicted.ok:
            predicted_error, predicted_message = predicted.error_kind or "sql_error", predicted.error_message
        else:
            predicted_error, predicted_message = "", ""
        correct = predicted is not None and predicted.ok and gold.ok and predicted.rows == gold.rows
        if predicted is not None and predicted.ok and gold.ok and not correct:
            predicted_error = "wrong_result"
        verdicts.append(
            QuestionVerdict(
                index=question.index,
                question_id=question.question_id,
                db_id=question.db_id,
                difficulty=question.difficulty or "unknown",
                correct=correct,
                predicted_sql=None if prediction is None else prediction.sql,
                predicted_error=predicted_error,
                predicted_message=predicted_message,
                gold_error=gold.error_kind or "",
                gold_message=gold.error_message,
                predicted_db_id=None if prediction is None else prediction.db_id,
            )
        )
    return EvalReport(
        verdicts=verdicts,
        prediction_format=predictions.format,
        timeout_s=settings.timeout_s,
        max_rows=settings.max_rows,
        unmatched_predictions=unmatched,
    )
