"""How the SQL executor hands out a batch: no task waits behind a runaway query while a worker could
take it, a runaway holds only its own worker, and the pool shrinks back to `num_workers` afterwards.
Checked by the order in which results arrive (`on_result`), never by timing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from arctic_rl_core.envs.bird.executor import ExecutorSettings, ScheduleEvent, SQLExecutor, SQLTask
from pydantic import ValidationError

RUNAWAY = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


@pytest.fixture
def small_db(tmp_path: Path, make_db) -> Path:
    return make_db(
        tmp_path / "small.sqlite",
        [
            "CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)",
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) "
            "INSERT INTO t SELECT i, 'row ' || i FROM n",
        ],
    )


def _run_in_order(executor: SQLExecutor, tasks: list[SQLTask]) -> tuple[list, list[int]]:
    order: list[int] = []
    results = executor.run(tasks, on_result=lambda index, _result: order.append(index))
    return results, order


def test_no_task_waits_behind_a_runaway_while_another_worker_is_free(small_db: Path) -> None:
    # Two workers, no extra one allowed: the runaway holds one worker for its whole time limit; every
    # other task goes to the other worker. (Dealt two per worker ahead, as before, task 2 waited in
    # the runaway worker's queue until the limit.)
    settings = ExecutorSettings(num_workers=2, max_workers=2, timeout_s=3.0)
    fast = [SQLTask(str(small_db), f"SELECT b FROM t WHERE a = {i}") for i in range(1, 9)]
    with SQLExecutor(settings) as executor:
        executor.run([SQLTask(str(small_db), "SELECT 1")] * 2)  # both workers started
        results, order = _run_in_order(executor, [SQLTask(str(small_db), RUNAWAY), *fast])
    assert results[0].error_kind == "timeout"
    assert [r.rows for r in results[1:]] == [frozenset({(f"row {i}",)}) for i in range(1, 9)]
    assert order[-1] == 0  # every fast task came back before the runaway's timeout


def test_runaways_hold_only_their_own_workers(small_db: Path) -> None:
    # One persistent worker: two runaways would hold it twice over and the fast task would wait for
    # both. With straggler workers each runaway gets its own, and the fast task is not held.
    # timeout_s leaves a loaded machine (load 40 on 2 cores measured 3 s) time to start the spare processes
    settings = ExecutorSettings(
        num_workers=1, max_workers=3, timeout_s=8.0, straggler_after_s=0.2, spare_idle_s=0.0
    )
    with SQLExecutor(settings) as executor:
        executor.execute(small_db, "SELECT 1")
        (persistent,) = executor.worker_pids()
        tasks = [SQLTask(str(small_db), RUNAWAY), SQLTask(str(small_db), RUNAWAY)]
        tasks.append(SQLTask(str(small_db), "SELECT count(*) FROM t"))
        results, order = _run_in_order(executor, tasks)
        assert [r.error_kind for r in results[:2]] == ["timeout", "timeout"]
        assert results[2].rows == frozenset({(200,)})
        assert order[0] == 2  # the fast task before either runaway
        assert executor.replaced_workers == 0
        executor.execute(small_db, "SELECT 1")  # the spares idle past spare_idle_s stop here
        pids = executor.worker_pids()
        assert len(pids) == 1
    for pid in {*pids, persistent}:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_spares_stay_warm_for_the_next_batch(small_db: Path) -> None:
    # straggler_nice=0 (the default): the runaway's worker keeps its priority and is reused (with
    # straggler_nice it is renewed: below)
    settings = ExecutorSettings(
        num_workers=1, max_workers=3, timeout_s=1.0, straggler_after_s=0.1, straggler_nice=0
    )
    with SQLExecutor(settings) as executor:
        tasks = [SQLTask(str(small_db), RUNAWAY), SQLTask(str(small_db), "SELECT count(*) FROM t")]
        executor.run(tasks)
        spares = set(executor.worker_pids())
        assert len(spares) == 2  # the runaway's and its stand-in's, idle until spare_idle_s (60 s)
        _, order = _run_in_order(executor, tasks)
        assert order == [1, 0] and set(executor.worker_pids()) == spares  # no new process started


def test_a_straggler_yields_the_cpu_and_its_worker_is_renewed(small_db: Path) -> None:
    # One slot: the fast task runs only once the runaway has been marked straggling, so at its result
    # the runaway's worker runs straggler_nice steps below this process; when the runaway ends, a fresh
    # worker at this process's priority takes its place (warm for the next straggler).
    settings = ExecutorSettings(
        num_workers=1, max_workers=2, timeout_s=1.0, straggler_after_s=0.1, straggler_nice=10
    )
    events: list[ScheduleEvent] = []
    own = os.getpriority(os.PRIO_PROCESS, 0)
    niced: list[int] = []
    with SQLExecutor(settings, on_event=events.append) as executor:
        tasks = [SQLTask(str(small_db), RUNAWAY), SQLTask(str(small_db), "SELECT count(*) FROM t")]

        def on_result(index: int, _result) -> None:
            if index == 1:
                (runaway_pid,) = [e.pid for e in events if e.kind == "sent" and e.task == 0]
                niced.append(os.getpriority(os.PRIO_PROCESS, runaway_pid))

        results = executor.run(tasks, on_result=on_result)
        assert [r.error_kind for r in results] == ["timeout", None]
        assert niced == [min(19, own + settings.straggler_nice)]
        (runaway_pid,) = [e.pid for e in events if e.kind == "sent" and e.task == 0]
        with pytest.raises(ProcessLookupError):
            os.kill(runaway_pid, 0)
        # (on a loaded machine the fast task may have straggled too: its worker is renewed as well)
        assert executor.renewed_workers >= 1 and executor.replaced_workers == 0
        pids = executor.worker_pids()
        assert len(pids) == 2 and runaway_pid not in pids
        assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in pids] == [own, own]


def test_no_task_is_sent_to_a_worker_before_it_has_started(small_db: Path) -> None:
    # A starting worker holds a slot but no task: the next task goes to whichever worker is free first,
    # so a task never waits in the socket of a process that is still starting (the cold pool's worker,
    # and the spare started when the runaway, holding the one slot, turns straggler).
    settings = ExecutorSettings(num_workers=1, max_workers=2, timeout_s=1.0, straggler_after_s=0.1)
    events: list[ScheduleEvent] = []
    fast = [SQLTask(str(small_db), f"SELECT b FROM t WHERE a = {i}") for i in range(1, 13)]
    with SQLExecutor(settings, on_event=events.append) as executor:
        results = executor.run([fast[0], SQLTask(str(small_db), RUNAWAY), *fast[1:]])
    assert [r.rows for r in results[2:]] == [frozenset({(f"row {i}",)}) for i in range(2, 13)]
    ready: set[int] = set()
    for event in events:
        if event.kind == "ready":
            ready.add(event.pid)
        elif event.kind == "sent":
            assert event.pid in ready, (event, [e for e in events if e.pid == event.pid])
    assert len(ready) == 2  # the pool's worker and the runaway's stand-in
    assert 1 in [e.task for e in events if e.kind == "straggling"]


def test_without_room_for_extra_workers_runaways_share_the_pool(small_db: Path) -> None:
    # max_workers = num_workers: the fast task waits for a runaway's limit (the bound is honoured).
    settings = ExecutorSettings(num_workers=1, max_workers=1, timeout_s=1.0, straggler_after_s=0.1)
    with SQLExecutor(settings) as executor:
        tasks = [SQLTask(str(small_db), RUNAWAY), SQLTask(str(small_db), "SELECT count(*) FROM t")]
        results, order = _run_in_order(executor, tasks)
        assert order == [0, 1] and results[1].rows == frozenset({(200,)})
        assert len(executor.worker_pids()) == 1


def test_max_workers_below_num_workers_is_refused() -> None:
    with pytest.raises(ValidationError, match="max_workers=2 < num_workers=4"):
        ExecutorSettings(num_workers=4, max_workers=2)
    assert ExecutorSettings(num_workers=3).effective_max_workers == 12
