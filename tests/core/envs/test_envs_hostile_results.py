"""Hostile results and databases (issue 19 items 2 and 10): a huge result never reaches the
trainer process, a WAL-mode database gets nothing written beside it, pragma table functions read
like pragmas, a NUL in db_path is a verdict, and a gold that times out costs its timeout once."""

from __future__ import annotations

import resource
import sqlite3
import time
from pathlib import Path

import pytest
from arctic_rl_core.envs.bird.executor import ExecutorSettings, SQLExecutor
from arctic_rl_core.envs.bird.reward import BirdScorer, ScoreRequest, compute_score

RUNAWAY_CTE = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


@pytest.fixture(scope="module")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile-results") / "t.sqlite"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE t (a INTEGER, b TEXT)")
    connection.execute("INSERT INTO t VALUES (1, 'x'), (2, 'y')")
    connection.commit()
    connection.close()
    return path


@pytest.fixture(scope="module")
def executor():
    # timeout_s far above what any query here takes (a 300 MB zeroblob: ~3 s under load, but past 60 s
    # once on a swapping CI machine): these tests check verdicts other than `timeout`, not speed
    with SQLExecutor(ExecutorSettings(num_workers=1, timeout_s=600, max_result_mb=8)) as shared:
        yield shared


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_huge_blob_is_refused_in_the_worker_before_it_reaches_the_parent(executor, small_db) -> None:
    executor.execute(small_db, "SELECT 1")  # worker started outside the measurement
    before = _peak_rss_mb()
    result = executor.execute(small_db, "SELECT zeroblob(300000000)")
    assert (result.ok, result.error_kind) == (False, "result_too_large")
    assert "max_result_mb=8" in result.error_message
    # The old path pickled the 300 MB blob into this process: its peak RSS grew by 300 MB.
    assert _peak_rss_mb() - before < 50


def test_many_rows_that_add_up_are_refused_too(executor, small_db) -> None:
    sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT i, zeroblob(3000000) FROM n"
    result = executor.execute(small_db, sql)
    assert result.error_kind == "result_too_large" and "(3 row(s) fetched)" in result.error_message
    # under the cap: an ordinary result is untouched
    assert executor.execute(small_db, "SELECT a, b FROM t").rows == frozenset({(1, "x"), (2, "y")})


def _worker_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for worker {pid}")


def test_the_memory_cap_holds_for_the_whole_worker_process(small_db) -> None:
    """`max_memory_mb` caps the worker process, not only SQLite's heap: a blob under the SQLite cap
    used to be copied into a Python bytes object as well (a 1 GiB cap reached 1.77 GB with
    `zeroblob(900000000)`; here a 128 MiB cap reached ~200 MB). Now the query fails as
    `resource_limit` and the worker's peak stays under the cap, and it serves the next query."""
    cap_mb = 128
    settings = ExecutorSettings(
        num_workers=1,
        max_memory_mb=cap_mb,
        max_result_mb=4096,
        kept_connections=1,
        page_cache_mb=1,
        timeout_s=600,
    )
    with SQLExecutor(settings) as pool:
        assert pool.execute(small_db, "SELECT 1").ok  # the worker is up
        (pid,) = pool.worker_pids()
        result = pool.execute(small_db, "SELECT zeroblob(100000000)")
        assert (result.ok, result.error_kind) == (False, "resource_limit"), result
        assert _worker_peak_mb(pid) < cap_mb
        assert pool.worker_pids() == [pid]  # the same worker, still serving
        assert pool.execute(small_db, "SELECT a FROM t").rows == frozenset({(1,), (2,)})


def test_a_memory_cap_below_what_the_worker_needs_is_refused() -> None:
    with pytest.raises(ValueError, match=r"max_memory_mb=32: 0 \(no cap\) or at least 64"):
        ExecutorSettings(max_memory_mb=32, kept_connections=0)
    assert ExecutorSettings(max_memory_mb=0).max_memory_mb == 0


def test_the_default_cap_is_set_and_bounded() -> None:
    assert ExecutorSettings().max_result_mb == 64
    with pytest.raises(ValueError, match="max_result_mb"):
        ExecutorSettings(max_result_mb=0)


def test_a_wal_database_gets_no_files_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "wal.sqlite"
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("CREATE TABLE t (a)")
    connection.execute("INSERT INTO t VALUES (7)")
    connection.commit()
    connection.close()  # the last connection checkpoints and removes -wal and -shm
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wal.sqlite"]
    with SQLExecutor(ExecutorSettings(num_workers=1, kept_connections=0)) as pool:
        assert pool.execute(path, "SELECT a FROM t").rows == frozenset({(7,)})
        assert sorted(p.name for p in tmp_path.iterdir()) == ["wal.sqlite"]


def test_a_wal_file_holding_data_is_refused_not_silently_skipped(tmp_path: Path) -> None:
    path = tmp_path / "live.sqlite"
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE t (a)")
    writer.execute("INSERT INTO t VALUES (1)")
    writer.commit()
    try:
        with SQLExecutor(ExecutorSettings(num_workers=1, kept_connections=0)) as pool:
            result = pool.execute(path, "SELECT a FROM t")
        assert result.error_kind == "sql_error" and "wal_checkpoint" in result.error_message
    finally:
        writer.close()


def test_pragma_table_functions_are_read_only_like_the_pragmas(executor, small_db) -> None:
    as_function = executor.execute(small_db, "SELECT name FROM pragma_table_info('t') ORDER BY cid")
    assert as_function.ok and as_function.rows == frozenset({("a",), ("b",)})
    assert executor.execute(small_db, "PRAGMA table_info(t)").ok
    # a pragma that writes stays refused in either form
    assert executor.execute(small_db, "SELECT * FROM pragma_journal_mode").error_kind == "not_read_only"
    assert executor.execute(small_db, "UPDATE sqlite_master SET sql = 'x'").ok is False


def test_a_nul_byte_in_db_path_is_a_verdict_not_an_exception(small_db) -> None:
    verdict = compute_score(
        "bird", "```sql\nSELECT 1\n```", "SELECT 1", {"db_path": str(small_db) + "\x00evil"}
    )
    assert verdict["scoring_error"] == "database_missing" and verdict["score"] == 0.0


def test_a_gold_that_times_out_is_not_rerun_in_every_batch(small_db) -> None:
    settings = ExecutorSettings(num_workers=1, timeout_s=0.4, kill_grace_s=0.3)
    request = ScoreRequest(solution_str="```sql\nSELECT 1\n```", gold_sql=RUNAWAY_CTE, db_path=str(small_db))
    with BirdScorer(settings) as scorer:
        first = scorer.score([request])
        assert first.verdicts[0].scoring_error == "gold_timeout" and first.gold_executed == 1
        start = time.monotonic()
        second = scorer.score([request])
        assert second.verdicts[0].scoring_error == "gold_timeout"
        assert (second.gold_executed, second.gold_cache_hits) == (0, 1)
        assert time.monotonic() - start < 0.3


def test_compute_score_takes_the_result_cap_as_a_keyword(small_db) -> None:
    verdict = compute_score(
        "bird",
        "```sql\nSELECT zeroblob(3000000)\n```",
        "SELECT 1",
        {"db_path": str(small_db)},
        max_result_mb=1,
    )
    assert verdict["error"] == "result_too_large" and verdict["execution_success"] is False
