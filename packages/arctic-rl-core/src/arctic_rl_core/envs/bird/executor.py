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
# Tasks sent ahead to one worker: the running one and the next, so it never idles between them.
_QUEUE_DEPTH = 2

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

    @model_validator(mode="after")
    def _caches_fit_heap(self) -> ExecutorSettings:
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
        self.ready = False
        self.started_at = time.monotonic()

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

    def __init__(self, settings: ExecutorSettings | None = None) -> None:
        self.settings = settings if settings is not None else ExecutorSettings()
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._busy = 0
        self._started = False
        self._closed = False
        self._owner_pid = os.getpid()
        self.replaced_workers = 0

    def __enter__(self) -> SQLExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- pool -------------------------------------------------------------------------------

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

    def _checkout(self, block: bool) -> _Worker | None:
        with self._cond:
            self._ensure_started()
            while not self._idle:
                if not block:
                    return None
                self._cond.wait()
                self._ensure_started()
            worker = self._idle.pop()
            self._busy += 1
        if not worker.alive:
            logger.warning(
                "sql worker %d exited while idle (code %s); replacing it",
                worker.process.pid,
                worker.process.returncode,
            )
            worker.destroy()
            worker = _Worker(self.settings)
            self.replaced_workers += 1
        return worker

    def _checkin(self, worker: _Worker) -> None:
        with self._cond:
            self._busy -= 1
            if self._closed:
                worker.stop()
            else:
                self._idle.append(worker)
            self._cond.notify()

    def _replace(self, worker: _Worker) -> _Worker:
        worker.destroy()
        self.replaced_workers += 1
        return _Worker(self.settings)

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
        results: list[ExecutionResult | None] = [None] * len(tasks)
        pending: deque[int] = deque()
        exists: dict[str, bool] = {}
        for index, task in enumerate(tasks):
            if task.db_path not in exists:
                exists[task.db_path] = os.path.isfile(task.db_path)
            if exists[task.db_path]:
                pending.append(index)
            else:
                results[index] = ExecutionResult.failure(
                    "database_missing", f"no SQLite file at {task.db_path}"
                )
                if on_result is not None:
                    on_result(index, results[index])
        settings = self.settings
        hard_limit_s = settings.timeout_s + settings.kill_grace_s
        # worker -> its queue of [task index, deadline]. The head is running (or about to): its
        # deadline is its hard-kill time, or the startup deadline until the worker says hello.
        # Queued tasks (up to _QUEUE_DEPTH per worker, so a worker never waits for this thread)
        # get their deadline when they become the head.
        inflight: dict[_Worker, deque[list]] = {}

        def finish(index: int, result: ExecutionResult) -> None:
            results[index] = result
            if on_result is not None:
                on_result(index, result)

        def head_deadline(worker: _Worker) -> float:
            if worker.ready:
                return time.monotonic() + hard_limit_s
            return worker.started_at + settings.startup_timeout_s

        def retire(worker: _Worker, head_result: ExecutionResult | None) -> None:
            """Replace a dead or killed worker: its head gets `head_result`, the rest go back."""
            queue = inflight.pop(worker)
            if queue and head_result is not None:
                finish(queue.popleft()[0], head_result)
            pending.extendleft(reversed([entry[0] for entry in queue]))
            self._checkin(self._replace(worker))

        def send(worker: _Worker, index: int) -> bool:
            task = tasks[index]
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
            queue = inflight[worker]
            queue.append([index, head_deadline(worker) if not queue else None])
            return True

        try:
            while pending or inflight:
                # More workers while the pending tasks exceed the free queue slots we hold.
                while pending and len(pending) > sum(_QUEUE_DEPTH - len(q) for q in inflight.values()):
                    worker = self._checkout(block=not inflight)
                    if worker is None:
                        break
                    inflight[worker] = deque()
                # Deal pending tasks round-robin into the queues.
                dealt = True
                while pending and dealt:
                    dealt = False
                    for worker in list(inflight):
                        if not pending or len(inflight[worker]) >= _QUEUE_DEPTH:
                            continue
                        index = pending.popleft()
                        if send(worker, index):
                            dealt = True
                        else:  # died before taking the task: not the task's fault, retry it
                            pending.appendleft(index)
                            code = worker.process.poll()
                            kind: ErrorKind = "worker_crashed" if worker.ready else "worker_start_failed"
                            retire(worker, ExecutionResult.failure(kind, f"sql worker exited (code {code})"))
                for worker in [w for w, q in inflight.items() if not q]:
                    del inflight[worker]
                    self._checkin(worker)
                if not inflight:
                    continue
                now = time.monotonic()
                wait_s = max(0.0, min(q[0][1] for q in inflight.values()) - now)
                by_channel = {worker.channel: worker for worker in inflight}
                for channel in wait(list(by_channel), timeout=wait_s):
                    worker = by_channel[channel]
                    queue = inflight[worker]
                    try:
                        reply = channel.recv()
                    except (EOFError, OSError):
                        code = worker.process.poll()
                        kind = "worker_crashed" if worker.ready else "worker_start_failed"
                        retire(worker, ExecutionResult.failure(kind, f"sql worker exited (code {code})"))
                        continue
                    if reply[0] == "hello":
                        worker.ready = True
                        queue[0][1] = head_deadline(worker)
                        continue
                    _, reply_index, outcome = reply
                    index = queue.popleft()[0]
                    if reply_index != index:
                        raise RuntimeError(f"sql worker answered task {reply_index}, expected {index}")
                    finish(index, _within_limit(ExecutionResult.from_outcome(outcome), settings.timeout_s))
                    if queue:
                        queue[0][1] = head_deadline(worker)
                now = time.monotonic()
                for worker, queue in list(inflight.items()):
                    if not queue or now < queue[0][1]:
                        continue
                    if worker.ready:
                        elapsed = now - (queue[0][1] - hard_limit_s)
                        message = f"killed after {hard_limit_s:.2f} s (did not yield to the time limit)"
                        retire(worker, ExecutionResult.failure("timeout", message, elapsed))
                    else:
                        message = f"sql worker did not start within {settings.startup_timeout_s} s"
                        retire(worker, ExecutionResult.failure("worker_start_failed", message))
        finally:
            # Only reached with work in flight if this thread was interrupted: those workers are
            # in an unknown state, so they are replaced, never reused.
            for worker in inflight:
                self._checkin(self._replace(worker))
        missing = [index for index, result in enumerate(results) if result is None]
        if missing:
            raise RuntimeError(f"SQLExecutor: no result for task(s) {missing[:10]}")
        return results  # type: ignore[return-value]

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
