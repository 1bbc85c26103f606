"""Safe, parallel, read-only execution of SQL against SQLite files.

`SQLExecutor` keeps a pool of persistent worker processes (`sql_worker.py`, standard library
only). Each query runs in one worker on a fresh connection that is read-only by construction:
the `mode=ro` URI, `PRAGMA query_only`, no attachable databases, and an authorizer that allows
only reading (no ATTACH, writes, DDL, transactions, pragma writes or `load_extension`). The
worker closes the connection on every path. Only one statement is accepted (the sqlite3
module rejects a second one, as the official BIRD evaluator's `cursor.execute` does).

Time limit: the worker cancels a query cooperatively when `timeout_s` has passed (a SQLite
progress handler); a query that does not yield to the progress handler (one huge string
operation, one huge sort) is ended by killing the worker at `timeout_s + kill_grace_s`. A
killed, crashed or hung worker is replaced; the other queries of the batch are unaffected.

Result semantics: a successful result is the SET of result rows, as Python values from the
sqlite3 module (int, float, str, bytes, None) in column order: row order and duplicates are
dropped, column order and value types are kept, and values compare as Python compares them
(1 == 1.0, '1' != 1, b'1' != '1'). A result with more than `max_rows` DISTINCT rows is not
returned (error kind `row_limit`); the limit bounds memory, not rows scanned. A statement that
returns no columns (an empty statement, a comment) is the error `not_a_query`.

Error kinds: `timeout`, `row_limit`, `not_read_only`, `multiple_statements`, `invalid_sql`,
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

from pydantic import BaseModel, ConfigDict, Field

logger = logging.getLogger(__name__)

_WORKER_SCRIPT = Path(__file__).with_name("sql_worker.py")

ErrorKind = Literal[
    "timeout",
    "row_limit",
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
    max_memory_mb: int = Field(default=1024, ge=0, description="SQLite heap cap per worker; 0 = no cap")
    cooperative_cancel: bool = Field(
        default=True, description="cancel at timeout_s with a progress handler (else only the hard kill)"
    )
    startup_timeout_s: float = Field(default=60.0, gt=0, description="time a new worker has to start")


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


def _result_from_outcome(outcome: tuple) -> ExecutionResult:
    if outcome[0] == "ok":
        _, rows, fetched, seconds = outcome
        return ExecutionResult(
            ok=True, rows=rows, fetched_rows=fetched, error_kind=None, error_message="", seconds=seconds
        )
    _, kind, message, seconds = outcome
    return ExecutionResult.failure(kind, message, seconds)


class _Worker:
    """One worker process and the parent's end of its socket."""

    def __init__(self, settings: ExecutorSettings) -> None:
        parent_sock, child_sock = socket.socketpair()
        heap_bytes = settings.max_memory_mb * 1024 * 1024
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_WORKER_SCRIPT), str(child_sock.fileno()), str(heap_bytes)],
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
        # worker -> [task index, deadline]; the deadline of a worker that has not said hello yet
        # is its startup deadline, and restarts at hello.
        inflight: dict[_Worker, list] = {}

        def finish(index: int, result: ExecutionResult) -> None:
            results[index] = result
            if on_result is not None:
                on_result(index, result)

        try:
            while pending or inflight:
                while pending:
                    worker = self._checkout(block=not inflight)
                    if worker is None:
                        break
                    index = pending.popleft()
                    task = tasks[index]
                    message = (
                        "run",
                        index,
                        task.db_path,
                        task.sql,
                        settings.max_rows,
                        settings.timeout_s,
                        settings.cooperative_cancel,
                    )
                    try:
                        worker.channel.send(message)
                    except OSError:
                        # The worker died before taking the task: not the task's fault, retry it.
                        pending.appendleft(index)
                        self._checkin(self._replace(worker))
                        continue
                    now = time.monotonic()
                    if worker.ready:
                        deadline = now + hard_limit_s
                    else:
                        deadline = worker.started_at + settings.startup_timeout_s
                    inflight[worker] = [index, deadline]
                if not inflight:
                    continue
                now = time.monotonic()
                wait_s = max(0.0, min(entry[1] for entry in inflight.values()) - now)
                by_channel = {worker.channel: worker for worker in inflight}
                for channel in wait(list(by_channel), timeout=wait_s):
                    worker = by_channel[channel]
                    index = inflight[worker][0]
                    try:
                        reply = channel.recv()
                    except (EOFError, OSError):
                        code = worker.process.poll()
                        kind: ErrorKind = "worker_crashed" if worker.ready else "worker_start_failed"
                        finish(index, ExecutionResult.failure(kind, f"sql worker exited (code {code})"))
                        del inflight[worker]
                        self._checkin(self._replace(worker))
                        continue
                    if reply[0] == "hello":
                        worker.ready = True
                        inflight[worker][1] = time.monotonic() + hard_limit_s
                        continue
                    _, reply_index, outcome = reply
                    if reply_index != index:
                        raise RuntimeError(f"sql worker answered task {reply_index}, expected {index}")
                    finish(index, _result_from_outcome(outcome))
                    del inflight[worker]
                    self._checkin(worker)
                now = time.monotonic()
                for worker, (index, deadline) in list(inflight.items()):
                    if now < deadline:
                        continue
                    if worker.ready:
                        message = f"killed after {hard_limit_s:.2f} s (did not yield to the time limit)"
                        finish(
                            index,
                            ExecutionResult.failure("timeout", message, now - (deadline - hard_limit_s)),
                        )
                    else:
                        message = f"sql worker did not start within {settings.startup_timeout_s} s"
                        finish(index, ExecutionResult.failure("worker_start_failed", message))
                    del inflight[worker]
                    self._checkin(self._replace(worker))
        finally:
            # Only reached with work in flight if this thread was interrupted: those workers are
            # in an unknown state, so they are replaced, never reused.
            for worker in inflight:
                self._checkin(self._replace(worker))
        return [result for result in results if result is not None]

    def worker_stats(self) -> list[tuple[int, int]]:
        """(pid, open file descriptors) of every idle worker; for leak checks."""
        with self._cond:
            self._ensure_started()
            workers = list(self._idle)
            self._idle = []
            self._busy += len(workers)
        stats: list[tuple[int, int]] = []
        try:
            for worker in workers:
                worker.channel.send(("stats",))
                while True:
                    reply = worker.channel.recv()
                    if reply[0] == "hello":
                        worker.ready = True
                        continue
                    stats.append((reply[1], reply[2]))
                    break
        finally:
            for worker in workers:
                self._checkin(worker)
        return stats

    def worker_pids(self) -> list[int]:
        with self._cond:
            return [worker.process.pid for worker in self._idle]
