"""The BIRD reward: execution match against the gold SQL, in three tiers.

- 1.0: the predicted query executes and its result equals the result of the gold SQL or of any
  `alternative_answers` query (set semantics, see `executor`).
- 0.1: the predicted query executes but its result differs, or the response is well formatted
  (`sql_extract.is_well_formatted`).
- 0.0: otherwise (no SQL, or SQL that fails, in a badly formatted response).

Every verdict carries `score`, `correct`, `format_correct`, `execution_success`, `error` (why
the prediction fell short: an executor error kind, `no_sql` or `wrong_result`; "" when correct)
and `scoring_error` (why the scorer itself could not judge: the gold SQL failed, the database
is missing, or an internal exception; "" when none). A scoring error is never a silent 0:
the verdict names it, `BatchScores.scoring_error_counts` counts it and it is logged. The score
of such a verdict is the tier the prediction earns on its own (0.1 or 0.0); it is never 1.0.

`score_batch` executes each distinct (database, SQL) once per batch, and each gold SQL once per
database content (cached across batches, keyed by the file's path, size and mtime; a gold
that fails the same way every time, e.g. by timing out, is cached too), in
parallel worker processes. `compute_score` is verl's custom-reward signature on top of it.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from arctic_rl_core.envs.bird.executor import ExecutionResult, ExecutorSettings, SQLExecutor, SQLTask
from arctic_rl_core.envs.bird.sql_extract import extract_sql, is_well_formatted
from arctic_rl_core.envs.bird.sql_identity import execution_key

logger = logging.getLogger(__name__)

CORRECT_SCORE = 1.0
PARTIAL_SCORE = 0.1
ZERO_SCORE = 0.0
# Keyword arguments that frameworks pass to every reward function and that this reward ignores.
_FRAMEWORK_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})
_SETTINGS_KWARGS = frozenset({"timeout_s", "max_rows", "max_result_mb", "num_workers"})
# Gold failures that the same database file and SQL give again (a gold that times out would
# otherwise cost the full timeout in every batch); the others (a crashed worker, a missing file,
# memory) are retried in the next batch.
GOLD_FAILURES_CACHED = frozenset(
    {
        "timeout",
        "row_limit",
        "result_too_large",
        "not_read_only",
        "multiple_statements",
        "invalid_sql",
        "not_a_query",
        "sql_error",
    }
)


@dataclass(frozen=True)
class ScoreRequest:
    """One rollout to score: the model's response, the gold SQL and the database file."""

    solution_str: str
    gold_sql: str
    db_path: str
    alternative_answers: tuple[str, ...] = ()
    # the SQL to execute when the caller has it (a multi-turn `<solution>`); None: extract it from
    # `solution_str` (`sql_extract.extract_sql`)
    sql: str | None = None


@dataclass(frozen=True)
class Verdict:
    score: float
    correct: bool
    format_correct: bool
    execution_success: bool
    error: str
    scoring_error: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BatchScores:
    """Verdicts in request order, plus what happened while scoring them."""

    verdicts: list[Verdict]
    error_counts: dict[str, int]
    scoring_error_counts: dict[str, int]
    predicted_executed: int
    gold_executed: int
    gold_cache_hits: int

    @property
    def scores(self) -> list[float]:
        return [verdict.score for verdict in self.verdicts]


class GoldCache:
    """Results of gold queries, keyed by (db path, size, mtime_ns, sql); LRU-bounded."""

    def __init__(self, max_entries: int = 4096) -> None:
        if max_entries < 1:
            raise ValueError(f"GoldCache max_entries={max_entries}: must be at least 1")
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple, ExecutionResult] = OrderedDict()

    def get(self, key: tuple) -> ExecutionResult | None:
        with self._lock:
            result = self._entries.get(key)
            if result is not None:
                self._entries.move_to_end(key)
            return result

    def put(self, key: tuple, result: ExecutionResult) -> None:
        with self._lock:
            self._entries[key] = result
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


def tier_score(correct: bool, execution_success: bool, format_correct: bool) -> float:
    """The V6b tiers: 1.0 correct; 0.1 executes or well formatted; else 0.0."""
    if correct:
        return CORRECT_SCORE
    if execution_success or format_correct:
        return PARTIAL_SCORE
    return ZERO_SCORE


def judge(
    response: str,
    predicted: ExecutionResult | None,
    golds: Sequence[ExecutionResult],
    *,
    format_correct: bool | None = None,
) -> Verdict:
    """The verdict for one response given its execution result (None: no SQL) and the golds'
    (`format_correct`: `is_well_formatted(response)` when the caller has it already)."""
    if format_correct is None:
        format_correct = is_well_formatted(response)
    execution_success = predicted is not None and predicted.ok
    correct = False
    if execution_success:
        correct = any(gold.ok and gold.rows == predicted.rows for gold in golds)
    scoring_error = ""
    if not correct and all(not gold.ok for gold in golds):
        kind = golds[0].error_kind
        scoring_error = "database_missing" if kind == "database_missing" else f"gold_{kind}"
    if predicted is None:
        error = "no_sql"
    elif not predicted.ok:
        error = predicted.error_kind or "sql_error"
    elif not correct and not scoring_error:
        error = "wrong_result"
    else:
        error = ""  # correct, or executed but not judgeable (see scoring_error)
    return Verdict(
        score=tier_score(correct, execution_success, format_correct),
        correct=correct,
        format_correct=format_correct,
        execution_success=execution_success,
        error=error,
        scoring_error=scoring_error,
    )


class BirdScorer:
    """Scores batches of rollouts with one executor and one gold cache (thread-safe)."""

    def __init__(
        self,
        settings: ExecutorSettings | None = None,
        *,
        executor: SQLExecutor | None = None,
        gold_cache: GoldCache | None = None,
    ) -> None:
        if executor is not None and settings is not None:
            raise ValueError("BirdScorer: pass either settings or an executor, not both")
        self._owns_executor = executor is None
        self.executor = executor if executor is not None else SQLExecutor(settings)
        self.gold_cache = gold_cache if gold_cache is not None else GoldCache()

    def close(self) -> None:
        if self._owns_executor:
            self.executor.close()

    def __enter__(self) -> BirdScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def score(self, requests: Sequence[ScoreRequest]) -> BatchScores:
        # Per rollout: its SQL's execution key (None: no SQL), or the exception that stopped it.
        predicted_keys: list[tuple[str, str] | Exception | None] = []
        first_text: dict[tuple[str, str], str] = {}
        key_of_text: dict[str, str] = {}  # rollouts repeat texts: compute each key once

        def key_for(db_path: str, sql: str) -> tuple[str, str]:
            key = key_of_text.get(sql)
            if key is None:
                key = key_of_text[sql] = execution_key(sql)
            return (db_path, key)

        sql_of_response: dict[str, str | None] = {}  # identical responses are parsed once
        for request in requests:
            try:
                if request.sql is not None:
                    sql = request.sql
                else:
                    if request.solution_str not in sql_of_response:
                        sql_of_response[request.solution_str] = extract_sql(request.solution_str).sql
                    sql = sql_of_response[request.solution_str]
                key = None if sql is None else key_for(request.db_path, sql)
                if key is not None:
                    first_text.setdefault(key, sql)
                predicted_keys.append(key)
            except Exception as error:  # counted as a scoring error below
                logger.exception("BIRD scoring: SQL extraction failed for one rollout")
                predicted_keys.append(error)
        db_versions: dict[str, tuple[int, int] | None] = {}
        for request in requests:
            if request.db_path not in db_versions:
                try:
                    stat = os.stat(request.db_path)
                    db_versions[request.db_path] = (stat.st_size, stat.st_mtime_ns)
                except (OSError, ValueError):  # ValueError: a NUL byte in the path
                    db_versions[request.db_path] = None
        # Distinct queries of this batch (by execution key) -> their result. Golds first, from the
        # cache when there; each key runs once, as the first SQL text seen with that key.
        results: dict[tuple[str, str], ExecutionResult] = {}
        gold_to_run: dict[tuple[str, str], tuple[str, tuple]] = {}  # key -> (sql, cache key)
        cache_hits = 0
        for request in requests:
            for gold_sql in (request.gold_sql, *request.alternative_answers):
                key = key_for(request.db_path, gold_sql)
                if key in results or key in gold_to_run:
                    continue
                cache_key = (*key, db_versions[request.db_path])
                cached = self.gold_cache.get(cache_key)
                if cached is not None:
                    results[key] = cached
                    cache_hits += 1
                else:
                    gold_to_run[key] = (gold_sql, cache_key)
        predicted_to_run: dict[tuple[str, str], str] = {}
        for key in predicted_keys:
            if isinstance(key, tuple) and key not in results and key not in gold_to_run:
                predicted_to_run.setdefault(key, first_text[key])
        keys = [*gold_to_run, *predicted_to_run]
        tasks = [SQLTask(db_path, sql) for (db_path, _), (sql, _) in gold_to_run.items()]
        tasks += [SQLTask(db_path, sql) for (db_path, _), sql in predicted_to_run.items()]
        outcomes = self.executor.run(tasks)
        for key, outcome in zip(keys, outcomes, strict=True):
            results[key] = outcome
            if key in gold_to_run and (outcome.ok or outcome.error_kind in GOLD_FAILURES_CACHED):
                self.gold_cache.put(gold_to_run[key][1], outcome)

        verdicts: list[Verdict] = []
        formatted: dict[str, bool] = {}  # identical responses are format-checked once
        for request, key in zip(requests, predicted_keys, strict=True):
            try:
                if isinstance(key, Exception):
                    raise key
                predicted = None if key is None else results[key]
                golds = [
                    results[key_for(request.db_path, gold)]
                    for gold in (request.gold_sql, *request.alternative_answers)
                ]
                response = request.solution_str
                if response not in formatted:
                    formatted[response] = is_well_formatted(response)
                verdict = judge(response, predicted, golds, format_correct=formatted[response])
            except Exception as error:  # counted and reported below, never a silent 0
                logger.exception("BIRD scoring failed for one rollout")
                verdict = Verdict(
                    score=ZERO_SCORE,
                    correct=False,
                    format_correct=False,
                    execution_success=False,
                    error="",
                    scoring_error=f"internal_{type(error).__name__}",
                )
            verdicts.append(verdict)
        error_counts = Counter(verdict.error for verdict in verdicts if verdict.error)
        scoring_error_counts = Counter(verdict.scoring_error for verdict in verdicts if verdict.scoring_error)
        for kind, count in scoring_error_counts.items():
            logger.warning("BIRD scoring: %d rollout(s) could not be judged: %s", count, kind)
        return BatchScores(
            verdicts=verdicts,
            error_counts=dict(error_counts),
            scoring_error_counts=dict(scoring_error_counts),
            predicted_executed=len(predicted_to_run),
            gold_executed=len(gold_to_run),
            gold_cache_hits=cache_hits,
        )


# -- the process-wide scorers behind compute_score / score_batch ------------------------------

_default_lock = threading.Lock()
_default_scorers: dict[tuple[int, ExecutorSettings], BirdScorer] = {}


def default_scorer(settings: ExecutorSettings | None = None) -> BirdScorer:
    """One shared scorer per executor settings in this process (closed at exit)."""
    settings = settings if settings is not None else ExecutorSettings()
    key = (os.getpid(), settings)
    with _default_lock:
        scorer = _default_scorers.get(key)
        if scorer is None:
            scorer = BirdScorer(settings)
            _default_scorers[key] = scorer
        return scorer


@atexit.register
def _close_default_scorers() -> None:
    with _default_lock:
        scorers = [scorer for (pid, _), scorer in _default_scorers.items() if pid == os.getpid()]
        _default_scorers.clear()
    for scorer in scorers:
        scorer.close()


def _settings_from_kwargs(kwargs: Mapping[str, Any]) -> ExecutorSettings:
    unknown = sorted(set(kwargs) - _FRAMEWORK_KWARGS - _SETTINGS_KWARGS)
    if unknown:
        raise TypeError(
            f"BIRD compute_score: unknown keyword argument(s) {unknown}; accepted: {sorted(_SETTINGS_KWARGS)}"
        )
    return ExecutorSettings(**{key: value for key, value in kwargs.items() if key in _SETTINGS_KWARGS})


def _request_from(solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None) -> ScoreRequest:
    if not isinstance(ground_truth, str):
        raise ValueError(
            f"BIRD compute_score: ground_truth must be the gold SQL string, got {type(ground_truth).__name__}; "
            "write reward_model.ground_truth as the gold SQL (arctic-rl bird preprocess does)"
        )
    if not extra_info or not extra_info.get("db_path"):
        raise ValueError(
            "BIRD compute_score: extra_info['db_path'] is missing; it must be the absolute path of the "
            "question's SQLite file (arctic-rl bird preprocess writes it)"
        )
    alternatives = extra_info.get("alternative_answers")
    alternative_answers: tuple[str, ...] = ()
    if alternatives is not None:
        alternative_answers = tuple(str(sql) for sql in list(alternatives))
    return ScoreRequest(
        solution_str=solution_str,
        gold_sql=ground_truth,
        db_path=str(extra_info["db_path"]),
        alternative_answers=alternative_answers,
    )


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl's custom reward signature for one rollout; returns `Verdict.to_dict()`.

    `extra_info["db_path"]` is required; `extra_info["alternative_answers"]` (gold SQLs that
    also count as correct) is optional. Keyword arguments `timeout_s`, `max_rows`, `max_result_mb`
    and `num_workers` configure the shared executor.
    """
    del data_source  # one reward for every BIRD-style source
    scorer = default_scorer(_settings_from_kwargs(kwargs))
    return scorer.score([_request_from(solution_str, ground_truth, extra_info)]).verdicts[0].to_dict()


def score_batch(requests: Sequence[ScoreRequest], *, scorer: BirdScorer | None = None) -> BatchScores:
    """Score a whole batch (see the module doc); uses the shared default scorer if none given."""
    return (scorer if scorer is not None else default_scorer()).score(requests)


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[str],
    extra_infos: Sequence[Mapping[str, Any] | None],
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """verl's batch reward signature (`reward_manager=batch`): one dict per rollout."""
    lengths = {len(data_sources), len(solution_strs), len(ground_truths), len(extra_infos)}
    if len(lengths) != 1:
        raise ValueError(f"BIRD compute_score_batch: inputs have different lengths {sorted(lengths)}")
    scorer = default_scorer(_settings_from_kwargs(kwargs))
    requests = [
        _request_from(solution, truth, extra)
        for solution, truth, extra in zip(solution_strs, ground_truths, extra_infos, strict=True)
    ]
    return [verdict.to_dict() for verdict in scorer.score(requests).verdicts]
