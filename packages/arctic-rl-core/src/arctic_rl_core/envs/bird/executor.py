"""Safe, parallel, read-only execution of SQL against SQLite files.

`SQLExecutor` keeps a pool of persistent worker processes (`sql_worker.py`, standard library
only). Each query runs in one worker on a connection that is read-only by construction: the
`mode=ro` URI, `PRAGMA query_only`, no attachable databases, and an authorizer that allows only
reading (no ATTACH, writes, DDL, transactions, pragma writes or `load_extension`). Only one
statement is accepted (the sqlite3 module rejects a second one, as the official BIRD
evaluator's `cursor.execute` does).

Time limit: the worker cancels a query cooperatively when `timeout_s` has passed (a SQLite
progress handler); a query that does not yield to the progress handler (one huge string
operation, one huge sort) is ended by killing the worker at `timeout_s + kill_grace_s`. A
killed, crashed or hung worker is replaced; the other queries of the batch are unaffected.

Scheduling: a batch's tasks wait in one queue and each goes to a worker when a slot frees up
(one task per worker at a time), so no task waits behind a slow query while it could run. There
are `num_workers` slots; a query that has run past the straggler threshold gives its slot up, and
the next task runs on another worker process (an idle spare, or a new one: at most `max_workers`
processes in all), so runaway queries on a slow database hold only their own processes, each
until its own time limit. The threshold is `straggler_after_s` when set; by default 8x the
median of the pool's last 64 queries that ended in time, at least 50 ms and at most a tenth of
`timeout_s` within [0.5 s, 1 s]. With `straggler_nice` > 0 (default 0) a straggling query's
worker runs that many steps below the executor's priority, so the batch's other queries keep the
CPU, and leaves the pool when its query ends (an unprivileged process cannot raise its priority
back): a fresh worker replaces it when the batch ends. Off by default: on a busy CPU a legitimate
slow query that straggles can then pass its time limit where it would not have. A new
worker holds a slot but no task while it starts: the next task goes to whichever worker is free
first. Spares above `num_workers` stop after `spare_idle_s` idle. `SQLExecutor(on_event=...)`
receives every step of the schedule (`ScheduleEvent`), e.g. for a timeline.

Connections are never leaked: after a successful query a worker may keep the connection for the
next query on the same file (up to `kept_connections`, least recently used closed first), which
saves reopening the file and re-reading its schema and pages; after any failed query it is
closed, and all are closed when the worker exits. `kept_connections=0` opens and closes one
connection per query.

Result semantics: a successful result is the SET of result rows, as Python values from the
sqlite3 module (int, float, str, bytes, None) in column order: row order and duplicates are
dropped, column order and value types are kept, and values compare as Python compares them
(1 == 1.0, '1' != 1, b'1' != '1'). A result with more than `max_rows` DISTINCT rows is not
returned (error kind `row_limit`), nor one whose distinct rows take more than `max_result_mb`
(measured in the worker as Python objects, before pickling: `result_too_large`, e.g.
`SELECT zeroblob(900000000)`); the limits bound memory, not rows scanned. A statement that
returns no columns (an empty statement, a comment) is the error `not_a_query`.

Error kinds: `timeout`, `row_limit`, `result_too_large`, `not_read_only`, `multiple_statements`, `invalid_sql`,
`not_a_query`, `resource_limit`, `sql_error` (from the worker) and `database_missing`,
`worker_crashed`, `worker_start_failed` (from the pool).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

logger = logging.getLogger(__name__)

_WORKER_SCRIPT = Path(__file__).with_name("sql_worker.py")
MIN_WORKER_MEMORY_MB = 64
# The straggler threshold when `straggler_after_s` is None (`SQLExecutor.straggler_after_s`): a query
# that has run STRAGGLER_FACTOR times longer than the median of the pool's recent queries.
STRAGGLER_FACTOR = 8.0
STRAGGLER_FLOOR_S = 0.05
STRAGGLER_HISTORY = 64

ErrorKind = Literal[
    "timeout",
    "row_limit",
    "result_too_large",
    "not_read_only",
    "multiple_statements",
    "invalid_sql",
    "not_a_query",
    "resource_limit",
    "sql_error",
    "database_missing",
    "worker_crashed",
    "worker_start_failed",
]


class ExecutorSettings(BaseModel):
    """How queries are executed: parallelism, limits, and the hard-kill policy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_workers: int = Field(default=2, ge=1, le=256, description="persistent worker processes")
    straggler_after_s: float | None = Field(
        default=None,
        gt=0,
        description="a query running this long no longer holds the batch: while tasks wait, a new worker "
        "starts beside it (up to max_workers); None = 8x the median of the pool's recent queries, at least "
        "50 ms, at most timeout_s / 10 within [0.5 s, 1 s]",
    )
    max_workers: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="most worker processes at once, stragglers' included; None = 4 x num_workers",
    )
    spare_idle_s: float = Field(
        default=60.0, ge=0, description="an idle worker above num_workers stops after this long"
    )
    straggler_nice: int = Field(
        default=0,
        ge=0,
        le=19,
        description="a straggling query's worker runs this many nice steps below the executor's own priority "
        "(at most 19), so the batch's other queries keep the CPU; it leaves the pool when its query ends and a "
        "fresh one replaces it when the batch ends; 0 (the default) = keep its priority and the worker. On a "
        "busy CPU a legitimate slow query that straggles may then pass its limit where it would not have",
    )
    timeout_s: float = Field(default=30.0, gt=0, description="per-query time limit, seconds")
    kill_grace_s: float = Field(
        default=0.5, ge=0.05, le=0.9, description="a query still running this long after timeout_s is killed"
    )
    max_rows: int = Field(default=100_000, ge=1, description="most distinct result rows kept per query")
    max_result_mb: int = Field(
        default=64,
        ge=1,
        le=4096,
        description="most bytes (MiB) of distinct result rows a query may return, measured in the worker",
    )
    max_memory_mb: int = Field(
        default=1024,
        ge=0,
        description="memory cap of each worker process (address space: SQLite's heap and the result's Python "
        "objects together); 0 = no cap",
    )
    cooperative_cancel: bool = Field(
        default=True, description="cancel at timeout_s with a progress handler (else only the hard kill)"
    )
    startup_timeout_s: float = Field(default=60.0, gt=0, description="time a new worker has to start")
    kept_connections: int = Field(
        default=8,
        ge=0,
        le=64,
        description="read-only connections a worker keeps open between queries; 0 = none",
    )
    page_cache_mb: int = Field(default=16, ge=1, le=1024, description="SQLite page cache per connection")

    @property
    def effective_straggler_after_s(self) -> float:
        if self.straggler_after_s is not None:
            return self.straggler_after_s
        return min(1.0, max(0.5, self.timeout_s / 10))

    @property
    def effective_max_workers(self) -> int:
        return min(256, 4 * self.num_workers) if self.max_workers is None else self.max_workers

    @model_validator(mode="after")
    def _caches_fit_heap(self) -> ExecutorSettings:
        if self.max_workers is not None and self.max_workers < self.num_workers:
            raise ValueError(
                f"max_workers={self.max_workers} < num_workers={self.num_workers}: the pool keeps num_workers "
                "running; raise max_workers or leave it None (4 x num_workers)"
            )
        if 0 < self.max_memory_mb < MIN_WORKER_MEMORY_MB:
            raise ValueError(
                f"max_memory_mb={self.max_memory_mb}: 0 (no cap) or at least {MIN_WORKER_MEMORY_MB}; the worker "
                "process itself (Python and SQLite) takes about 20 MB of it"
            )
        needed = self.kept_connections * self.page_cache_mb
        if self.max_memory_mb and needed * 2 > self.max_memory_mb:
            raise ValueError(
                f"kept_connections={self.kept_connections} x page_cache_mb={self.page_cache_mb} = {needed} MB of "
                f"page cache may use more than half of max_memory_mb={self.max_memory_mb}; lower one of them "
                "or raise max_memory_mb"
            )
        return self


@dataclass(frozen=True)
class SQLTask:
    """One query: a SQLite file and one SQL statement."""

    db_path: str
    sql: str


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one query: `rows` (a set of row tuples) when `ok`, else an error kind."""

    ok: bool
    rows: frozenset[tuple] | None
    fetched_rows: int
    error_kind: ErrorKind | None
    error_message: str
    seconds: float

    @classmethod
    def failure(cls, kind: ErrorKind, message: str, seconds: float = 0.0) -> ExecutionResult:
        return cls(
            ok=False, rows=None, fetched_rows=0, error_kind=kind, error_message=message, seconds=seconds
        )

    @classmethod
    def from_outcome(cls, outcome: tuple) -> ExecutionResult:
        """From `sql_worker.run_query`'s outcome tuple."""
        if outcome[0] == "ok":
            _, rows, fetched, seconds = outcome
            return cls(
                ok=True, rows=rows, fetched_rows=fetched, error_kind=None, error_message="", seconds=seconds
            )
        _, kind, message, seconds = outcome
        return cls.failure(kind, message, seconds)


def _within_limit(result: ExecutionResult, timeout_s: float) -> ExecutionResult:
    """A query that ran past `timeout_s` is a timeout, also when it finished inside the kill grace
    (a non-yielding statement that the progress handler could not cancel): whether it counts must
    not depend on how fast the machine happened to be between the limit and the hard kill."""
    if not result.ok or result.seconds <= timeout_s:
        return result
    message = f"finished after {result.seconds:.2f} s, over the {timeout_s:g} s limit"
    return ExecutionResult.failure("timeout", message, result.seconds)


ScheduleEventKind = Literal["batch", "spawned", "sent", "ready", "straggling", "result", "killed"]


@dataclass(frozen=True)
class ScheduleEvent:
    """One step of a batch's schedule, for a timeline (`SQLExecutor(on_event=...)`): `at` is
    `time.monotonic()` (for `spawned`, when the process was started: a renewed spare may have
    started before the run that first takes it); `task` the task index (None for `batch`, the run's
    start, `spawned` and `ready`); `pid` the worker process; `detail` the result's error kind (or
    "ok") for `result`."""

    at: float
    kind: ScheduleEventKind
    task: int | None = None
    pid: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class WorkerStats:
    pid: int
    open_fds: int
    kept_connections: int


class _Worker:
    """One worker process and the parent's end of its socket."""

    def __init__(self, settings: ExecutorSettings) -> None:
        parent_sock, child_sock = socket.socketpair()
        heap_bytes = settings.max_memory_mb * 1024 * 1024
        try:
            command = [
                sys.executable,
                "-I",
                "-S",
                str(_WORKER_SCRIPT),
                str(child_sock.fileno()),
                str(heap_bytes),
                str(settings.kept_connections),
                str(settings.page_cache_mb * 1024),
            ]
            self.process = subprocess.Popen(
                command,
                pass_fds=(child_sock.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                close_fds=True,
            )
        except BaseException:
            parent_sock.close()
            raise
        finally:
            child_sock.close()
        self.channel = Connection(parent_sock.detach())
        self.idle_since = time.monotonic()
        self.ready = False
        self.started_at = time.monotonic()
        self.niced = False  # its priority was lowered (for good: an unprivileged process cannot raise it)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def destroy(self) -> None:
        """Kill the process (if still running), reap it and close the socket."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.channel.close()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Ask the worker to exit; kill it if it does not."""
        try:
            if self.process.poll() is None:
                self.channel.send(("exit",))
                self.process.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.destroy()


class SQLExecutor:
    """A pool of persistent worker processes executing read-only SQL (see the module doc).

    Thread-safe: several threads may call `run` at once; each query holds one worker.
    Workers start on first use. Call `close()` (or use it as a context manager) to stop them.
    """

    def __init__(
        self,
        settings: ExecutorSettings | None = None,
        *,
        on_event: Callable[[ScheduleEvent], None] | None = None,
    ) -> None:
        self.settings = settings if settings is not None else ExecutorSettings()
        self.on_event = on_event  # called with each ScheduleEvent of every run (a timeline); None: none
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._busy = 0
        self._straggling = 0  # busy workers whose query has run past the straggler threshold
        self._recent_seconds: deque[float] = deque(maxlen=STRAGGLER_HISTORY)  # queries that ended in time
        self._started = False
        self._closed = False
        self._owner_pid = os.getpid()
        self.replaced_workers = 0  # killed, crashed or hung workers replaced
        self.renewed_workers = 0  # fresh workers started for niced ones after their straggling query

    def __enter__(self) -> SQLExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- pool -------------------------------------------------------------------------------
    # Slots: at most num_workers busy workers whose query has not yet run past straggler_after_s.
    # Processes: at most max_workers; idle ones above num_workers stop after spare_idle_s.

    def _ensure_started(self) -> None:
        if self._closed:
            raise RuntimeError("SQLExecutor: used after close(); create a new executor")
        if os.getpid() != self._owner_pid:
            raise RuntimeError(
                "SQLExecutor: used in a forked child process; create a new executor in that process"
            )
        if not self._started:
            self._idle = [_Worker(self.settings) for _ in range(self.settings.num_workers)]
            self._started = True

    def _slot_free(self) -> bool:
        return self._busy - self._straggling < self.settings.num_workers

    def _stale_spares(self) -> list[_Worker]:
        """Idle workers above num_workers that have been idle for spare_idle_s (taken off the list)."""
        surplus = len(self._idle) + self._busy - self.settings.num_workers
        if surplus <= 0:
            return []
        cutoff = time.monotonic() - self.settings.spare_idle_s
        stale = [worker for worker in self._idle if worker.idle_since <= cutoff][:surplus]
        for worker in stale:
            self._idle.remove(worker)
        return stale

    def _checkout(self, block: bool) -> _Worker | None:
        """A worker for one task when a slot is free: an idle one, else a new one while the pool has
        fewer than max_workers (None: no slot or no worker, and `block` is False)."""
        start_new, worker = False, None
        with self._cond:
            self._ensure_started()
            stale = self._stale_spares()
            while True:
                if self._slot_free():
                    if self._idle:
                        worker = self._idle.pop()
                        break
                    if self._busy < self.settings.effective_max_workers:
                        start_new = True
                        break
                if not block:
                    break
                self._cond.wait()
                self._ensure_started()
            if worker is not None or start_new:
                self._busy += 1
        for spare in stale:
            spare.stop()
        if start_new:
            try:
                return _Worker(self.settings)
            except BaseException:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()
                raise
        if worker is not None and not worker.alive:
            logger.warning(
                "sql worker %d exited while idle (code %s); replacing it",
                worker.process.pid,
                worker.process.returncode,
            )
            worker.destroy()
            worker = _Worker(self.settings)
            self.replaced_workers += 1
        return worker

    def straggler_after_s(self) -> float:
        """How long a query runs before it gives its slot up: `settings.straggler_after_s` when set;
        else STRAGGLER_FACTOR x the median of this pool's last STRAGGLER_HISTORY queries that ended
        within their limit, at least STRAGGLER_FLOOR_S and at most `timeout_s` / 10 within
        [0.5 s, 1 s] (that ceiling alone before any query has ended)."""
        settings = self.settings
        if settings.straggler_after_s is not None:
            return settings.straggler_after_s
        ceiling = settings.effective_straggler_after_s
        with self._cond:
            recent = sorted(self._recent_seconds)
        if not recent:
            return ceiling
        typical = recent[len(recent) // 2]
        return min(ceiling, max(STRAGGLER_FLOOR_S, STRAGGLER_FACTOR * typical))

    def _note_duration(self, seconds: float) -> None:
        """A query ended within its limit after `seconds` (from sending it to its answer)."""
        with self._cond:
            self._recent_seconds.append(seconds)

    def _mark_straggling(self, delta: int) -> None:
        """A busy worker's query has run past straggler_after_s (+1), or that query ended (-1)."""
        with self._cond:
            self._straggling += delta
            self._cond.notify_all()

    def _keep(self) -> bool:
        """Whether a busy worker whose query just ended may take another task (its slot is its own)."""
        with self._cond:
            return self._busy - self._straggling <= self.settings.num_workers and not self._closed

    def _checkin(self, worker: _Worker) -> None:
        with self._cond:
            self._busy -= 1
            if not self._closed:
                worker.idle_since = time.monotonic()
                self._idle.append(worker)
            stale = self._stale_spares()
            self._cond.notify_all()
        if self._closed:
            worker.stop()
        for spare in stale:
            spare.stop()

    def _lower_priority(self, worker: _Worker) -> None:
        """A straggling query's worker yields the CPU to the batch's other queries (`straggler_nice`)."""
        if self.settings.straggler_nice and not worker.niced:
            nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + self.settings.straggler_nice)
            try:
                os.setpriority(os.PRIO_PROCESS, worker.process.pid, nice)
            except OSError:  # it has just exited: the batch finds out from its socket
                return
            worker.niced = True

    def _drop_niced(self, worker: _Worker) -> None:
        """A niced worker whose query ended leaves the pool (its batch starts a fresh one when it ends,
        `_add_spares`: no process start inside the batch unless a task needs one)."""
        worker.destroy()
        with self._cond:
            self._busy -= 1
            self._cond.notify_all()

    def _add_spares(self, count: int) -> None:
        """Start `count` fresh workers into the pool, as far as max_workers allows (the niced workers a
        batch dropped, replaced when it ends so that the next straggler finds a warm spare)."""
        with self._cond:
            room = self.settings.effective_max_workers - len(self._idle) - self._busy
            count = 0 if self._closed else max(0, min(count, room))
            self._busy += count  # held while they start
            self.renewed_workers += count
        for started in range(count):
            try:
                worker = _Worker(self.settings)
            except BaseException:
                with self._cond:
                    self._busy -= count - started
                    self._cond.notify_all()
                raise
            self._checkin(worker)

    def _retire(self, worker: _Worker) -> None:
        """Kill a dead, hung or killed worker; start one in its place if the pool is short."""
        worker.destroy()
        with self._cond:
            self._busy -= 1
            self.replaced_workers += 1
            short = not self._closed and len(self._idle) + self._busy < self.settings.num_workers
            if short:
                self._busy += 1  # held while it starts
            self._cond.notify_all()
        if short:
            self._checkin(_Worker(self.settings))

    def close(self) -> None:
        """Stop every idle worker now; busy ones stop when their query returns."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        for worker in idle:
            worker.stop()

    # -- execution --------------------------------------------------------------------------

    def execute(self, db_path: str | Path, sql: str) -> ExecutionResult:
        """Run one query (see `run`)."""
        return self.run([SQLTask(str(db_path), sql)])[0]

    def run(
        self,
        tasks: Sequence[SQLTask],
        on_result: Callable[[int, ExecutionResult], None] | None = None,
    ) -> list[ExecutionResult]:
        """Run every task in parallel on the pool; results come back in task order.

        `on_result(index, result)` is called (in this thread) as each result arrives.
        A missing database file gives `database_missing` without using a worker.
        """
        return _BatchRun(self, tasks, on_result).run()

    def worker_stats(self) -> list[WorkerStats]:
        """Open file descriptors and kept connections of every idle worker; for leak checks."""
        with self._cond:
            self._ensure_started()
            workers = list(self._idle)
            self._idle = []
            self._busy += len(workers)
        stats: list[WorkerStats] = []
        try:
            for worker in workers:
                worker.channel.send(("stats",))
                while True:
                    reply = worker.channel.recv()
                    if reply[0] == "hello":
                        worker.ready = True
                        continue
                    stats.append(WorkerStats(pid=reply[1], open_fds=reply[2], kept_connections=reply[3]))
                    break
        finally:
            for worker in workers:
                self._checkin(worker)
        return stats

    def worker_pids(self) -> list[int]:
        with self._cond:
            return [worker.process.pid for worker in self._idle]


class _BatchRun:
    """One `SQLExecutor.run`: hands each task to a worker as a slot frees up (one task per worker at
    a time, so nothing waits in a busy worker's queue), marks a query past the straggler threshold
    as straggling (its slot goes to the next task, on another worker), and kills the worker of a
    query past its hard limit. A worker that is still starting holds a slot but no task: the next
    task goes to whichever worker is free first, the new one once it says hello or one that has
    just answered, so no task waits for a process to start while another worker could take it."""

    def __init__(
        self,
        pool: SQLExecutor,
        tasks: Sequence[SQLTask],
        on_result: Callable[[int, ExecutionResult], None] | None,
    ) -> None:
        self.pool, self.tasks, self.on_result = pool, tasks, on_result
        self.settings = pool.settings
        self.hard_limit_s = self.settings.timeout_s + self.settings.kill_grace_s
        self.results: list[ExecutionResult | None] = [None] * len(tasks)
        self.pending: deque[int] = deque()
        # worker -> [task index, when it was sent, hard-kill deadline, straggling]
        self.running: dict[_Worker, list] = {}
        # workers checked out for this run that have not said hello yet -> their startup deadline
        self.starting: dict[_Worker, float] = {}
        self.send_failures: dict[int, int] = {}
        self.dropped_niced = 0  # niced workers whose query ended: replaced when the run ends
        self.on_event = pool.on_event

    def event(
        self, kind: ScheduleEventKind, task: int | None, worker: _Worker | None, detail: str = ""
    ) -> None:
        if self.on_event is not None:
            at = worker.started_at if kind == "spawned" and worker is not None else time.monotonic()
            self.on_event(
                ScheduleEvent(at, kind, task, None if worker is None else worker.process.pid, detail)
            )

    def run(self) -> list[ExecutionResult]:
        self.event("batch", None, None)
        exists: dict[str, bool] = {}
        for index, task in enumerate(self.tasks):
            if task.db_path not in exists:
                exists[task.db_path] = os.path.isfile(task.db_path)
            if exists[task.db_path]:
                self.pending.append(index)
            else:
                self.finish(
                    index, ExecutionResult.failure("database_missing", f"no SQLite file at {task.db_path}")
                )
        try:
            while self.pending or self.running:
                self.hand_out()
                if self.running or self.starting:
                    straggler_after_s = self.pool.straggler_after_s()
                    self.wait_for_replies(straggler_after_s)
                    self.kill_overdue()
                    self.mark_stragglers(straggler_after_s)
        finally:
            # Only reached with work in flight if this thread was interrupted: those workers are
            # in an unknown state, so they are replaced, never reused.
            for worker in list(self.running):
                self.retire(worker)
            # a worker still starting has no task: it joins the pool (it says hello there)
            for worker in list(self.starting):
                del self.starting[worker]
                self.pool._checkin(worker)
            self.pool._add_spares(self.dropped_niced)
        missing = [index for index, result in enumerate(self.results) if result is None]
        if missing:
            raise RuntimeError(f"SQLExecutor: no result for task(s) {missing[:10]}")
        return self.results  # type: ignore[return-value]

    # -- bookkeeping ----------------------------------------------------------------------------

    def finish(self, index: int, result: ExecutionResult) -> None:
        self.results[index] = result
        if self.on_result is not None:
            self.on_result(index, result)

    def done_with(self, worker: _Worker) -> list:
        """The worker's task ended: its entry, its straggler mark taken back."""
        entry = self.running.pop(worker)
        if entry[3]:
            self.pool._mark_straggling(-1)
        return entry

    def retire(self, worker: _Worker, result: ExecutionResult | None = None) -> None:
        """The worker died or was killed: its task (if any) gets `result`; the pool replaces it."""
        if worker in self.running:
            index = self.done_with(worker)[0]
            if result is not None:
                self.finish(index, result)
        self.starting.pop(worker, None)
        self.pool._retire(worker)

    def start_failed(self, worker: _Worker, message: str) -> None:
        """A worker of this run did not start: the oldest waiting task gets the failure (so a pool
        whose workers cannot start ends the run), and the pool replaces the worker."""
        if self.pending:
            self.finish(self.pending.popleft(), ExecutionResult.failure("worker_start_failed", message))
        self.retire(worker)

    def mark_stragglers(self, straggler_after_s: float) -> None:
        now = time.monotonic()
        for worker, entry in self.running.items():
            if not entry[3] and now - entry[1] >= straggler_after_s:
                entry[3] = True
                self.pool._mark_straggling(+1)
                self.pool._lower_priority(worker)
                self.event("straggling", entry[0], worker)

    # -- the loop -------------------------------------------------------------------------------

    def send(self, worker: _Worker, index: int) -> bool:
        task, settings = self.tasks[index], self.settings
        message = (
            "run",
            index,
            task.db_path,
            task.sql,
            settings.max_rows,
            settings.timeout_s,
            settings.cooperative_cancel,
            settings.max_result_mb * 1024 * 1024,
        )
        try:
            worker.channel.send(message)
        except OSError:
            return False
        now = time.monotonic()
        self.running[worker] = [index, now, now + self.hard_limit_s, False]
        self.event("sent", index, worker)
        return True

    def send_or_retry(self, worker: _Worker, index: int) -> None:
        """Send task `index` to `worker`; a worker that died before taking it is replaced and the
        task waits for the next one (twice at most: then the task gets the failure)."""
        if self.send(worker, index):
            return
        code = worker.process.poll()
        self.send_failures[index] = self.send_failures.get(index, 0) + 1
        if self.send_failures[index] >= 2:
            self.finish(index, ExecutionResult.failure("worker_crashed", f"sql worker exited (code {code})"))
        else:
            self.pending.appendleft(index)
        self.retire(worker)

    def hand_out(self) -> None:
        # each starting worker will take one waiting task: check out more only for the others
        while len(self.pending) > len(self.starting):
            # block only when nothing of this run is in flight (else a reply may free a slot)
            worker = self.pool._checkout(block=not (self.running or self.starting))
            if worker is None:
                return
            if worker.ready:
                self.send_or_retry(worker, self.pending.popleft())
            else:
                self.starting[worker] = worker.started_at + self.settings.startup_timeout_s
                self.event("spawned", None, worker)

    def wait_for_replies(self, straggler_after_s: float) -> None:
        now = time.monotonic()
        wake = min([entry[2] for entry in self.running.values()] + list(self.starting.values()))
        if self.pending:  # a query turning straggler frees a slot for the waiting tasks
            young = [entry[1] + straggler_after_s for entry in self.running.values() if not entry[3]]
            if young:
                wake = min(wake, min(young))
        by_channel = {worker.channel: worker for worker in (*self.running, *self.starting)}
        for channel in wait(list(by_channel), timeout=max(0.0, wake - now)):
            worker = by_channel[channel]
            try:
                reply = channel.recv()
            except (EOFError, OSError):
                code = worker.process.poll()
                message = f"sql worker exited (code {code})"
                if worker in self.starting:
                    self.start_failed(worker, message)
                else:
                    self.retire(worker, ExecutionResult.failure("worker_crashed", message))
                continue
            if reply[0] == "hello":
                worker.ready = True
                del self.starting[worker]
                self.event("ready", None, worker)
                self.next_task_or_checkin(worker)
                continue
            entry = self.running[worker]
            _, reply_index, outcome = reply
            if reply_index != entry[0]:
                raise RuntimeError(f"sql worker answered task {reply_index}, expected {entry[0]}")
            self.done_with(worker)
            result = _within_limit(ExecutionResult.from_outcome(outcome), self.settings.timeout_s)
            if result.error_kind != "timeout":
                self.pool._note_duration(time.monotonic() - entry[1])
            self.event("result", entry[0], worker, result.error_kind or "ok")
            self.finish(entry[0], result)
            # the next task goes to this worker now, unless its slot went to another worker meanwhile
            self.next_task_or_checkin(worker)

    def next_task_or_checkin(self, worker: _Worker) -> None:
        if worker.niced:
            self.pool._drop_niced(worker)
            self.dropped_niced += 1
        elif self.pending and self.pool._keep():
            self.send_or_retry(worker, self.pending.popleft())
        else:
            self.pool._checkin(worker)

    def kill_overdue(self) -> None:
        now = time.monotonic()
        for worker, entry in list(self.running.items()):
            if now >= entry[2]:
                self.event("killed", entry[0], worker)
                message = f"killed after {self.hard_limit_s:.2f} s (did not yield to the time limit)"
                self.retire(worker, ExecutionResult.failure("timeout", message, now - entry[1]))
        for worker, deadline in list(self.starting.items()):
            if now >= deadline:
                self.start_failed(
                    worker, f"sql worker did not start within {self.settings.startup_timeout_s} s"
                )
