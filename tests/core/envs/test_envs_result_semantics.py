"""Execution-accuracy semantics match the official BIRD evaluator: set(pred_rows) == set(gold_rows)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from arctic_rl_core.envs.bird.dataset import load_questions
from arctic_rl_core.envs.bird.evaluate import evaluate, load_predictions
from arctic_rl_core.envs.bird.executor import ExecutorSettings, SQLExecutor, SQLTask

# (predicted, gold, equal under the official rule)
CASES = [
    ("SELECT a FROM t ORDER BY a", "SELECT a FROM t ORDER BY a DESC", True),  # row order ignored
    ("SELECT a FROM t", "SELECT DISTINCT a FROM t", True),  # duplicates ignored
    ("SELECT a, b FROM t WHERE a = 1", "SELECT b, a FROM t WHERE a = 1", False),  # column order kept
    ("SELECT 1", "SELECT 1.0", True),  # 1 == 1.0 in Python
    ("SELECT 1", "SELECT '1'", False),  # '1' != 1
    ("SELECT 1.0", "SELECT '1.0'", False),
    ("SELECT r FROM t WHERE a = 1", "SELECT a FROM t WHERE a = 1", True),  # REAL 1.0 vs INTEGER 1
    ("SELECT CAST(3 AS REAL) / 2", "SELECT 3 / 2", False),  # 1.5 vs integer division 1
    ("SELECT NULL", "SELECT b FROM t WHERE a = 3", True),
    ("SELECT ''", "SELECT NULL", False),
    ("SELECT x'31'", "SELECT '1'", False),  # bytes vs text
    ("SELECT a FROM t WHERE a > 9", "SELECT b FROM t WHERE a > 9", True),  # both empty
    ("SELECT 1", "SELECT 1, 1", False),  # arity
    ("SELECT a, b FROM t", "SELECT a, b FROM t WHERE a > 1 UNION ALL SELECT 1, 'x'", True),
]


def official_equal(db_path: Path, predicted: str, gold: str) -> bool:
    """The official evaluator's comparison, written out: fetchall, then compare sets."""
    connection = sqlite3.connect(db_path)
    try:
        return set(connection.execute(predicted).fetchall()) == set(connection.execute(gold).fetchall())
    finally:
        connection.close()


def test_executor_sets_compare_like_the_official_script(values_db: Path) -> None:
    with SQLExecutor(ExecutorSettings(num_workers=2, timeout_s=5)) as executor:
        results = executor.run([SQLTask(str(values_db), sql) for case in CASES for sql in case[:2]])
    for position, (predicted, gold, expected) in enumerate(CASES):
        ours = results[2 * position].rows == results[2 * position + 1].rows
        assert results[2 * position].ok and results[2 * position + 1].ok
        assert official_equal(values_db, predicted, gold) is expected, (predicted, gold)
        assert ours is expected, (predicted, gold)


def test_result_holds_python_values_and_counts(values_db: Path) -> None:
    with SQLExecutor(ExecutorSettings(num_workers=1, timeout_s=5)) as executor:
        result = executor.execute(values_db, "SELECT a, b, r FROM t")
    assert result.rows == frozenset({(1, "x", 1.0), (2, "y", 2.5), (3, None, None)})
    assert result.fetched_rows == 4  # duplicates were fetched, then dropped by the set
    value = next(row for row in result.rows if row[0] == 2)
    assert type(value[0]) is int and type(value[2]) is float


def test_row_limit_counts_distinct_rows(values_db: Path) -> None:
    with SQLExecutor(ExecutorSettings(num_workers=1, timeout_s=5, max_rows=2)) as executor:
        # 4 rows but only 2 distinct: within the limit, and equal to its set.
        two = executor.execute(values_db, "SELECT a > 1 FROM t")
        three = executor.execute(values_db, "SELECT a FROM t")
    assert two.ok and two.rows == frozenset({(0,), (1,)})
    assert not three.ok and three.error_kind == "row_limit"


def test_statement_without_columns_is_not_a_query(values_db: Path) -> None:
    with SQLExecutor(ExecutorSettings(num_workers=1, timeout_s=5)) as executor:
        result = executor.execute(values_db, "-- only a comment")
    assert result.error_kind == "not_a_query"


def test_evaluate_matches_the_official_rule_case_by_case(values_db: Path, tmp_path: Path) -> None:
    db_root = tmp_path / "dbs"
    (db_root / "values").mkdir(parents=True)
    (db_root / "values" / "values.sqlite").write_bytes(values_db.read_bytes())
    gold = [
        {
            "question_id": i,
            "db_id": "values",
            "question": f"q{i}",
            "evidence": "",
            "SQL": case[1],
            "difficulty": ("simple", "moderate", "challenging")[i % 3],
        }
        for i, case in enumerate(CASES)
    ]
    (tmp_path / "gold.json").write_text(json.dumps(gold), encoding="utf-8")
    predictions = {str(i): f"{case[0]}\t----- bird -----\tvalues" for i, case in enumerate(CASES)}
    (tmp_path / "pred.json").write_text(json.dumps(predictions), encoding="utf-8")
    report = evaluate(
        load_questions(tmp_path / "gold.json"),
        load_predictions(tmp_path / "pred.json"),
        db_root,
        ExecutorSettings(num_workers=2, timeout_s=5),
    )
    assert [v.correct for v in report.verdicts] == [case[2] for case in CASES]
    expected_total = sum(case[2] for case in CASES)
    assert report.counts()["total"] == (expected_total, len(CASES))
    simple = [case[2] for i, case in enumerate(CASES) if i % 3 == 0]
    assert report.accuracy()["simple"] == pytest.approx(100.0 * sum(simple) / len(simple))
    assert report.error_counts()["predicted"] == {"wrong_result": len(CASES) - expected_total}
