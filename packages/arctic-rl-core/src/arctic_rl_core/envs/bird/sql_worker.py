"""The SQL worker process: runs one read-only query at a time for `executor.SQLExecutor`.

Standard library only: the executor starts it as
`python -I -S sql_worker.py FD HEAP_BYTES MAX_OPEN_CONNECTIONS PAGE_CACHE_KIB`, so it imports
nothing from the environment. Messages are pickled tuples on one socket:

- worker -> parent on start: ("hello", pid)
- parent -> worker: ("run", request_id, db_path, sql, max_rows, timeout_s, cooperative, max_result_bytes)
  worker -> parent: ("result", request_id, outcome) where outcome is
  ("ok", rows: frozenset[tuple], fetched: int, seconds) or ("error", kind, message, seconds)
- parent -> worker: ("stats",); worker -> parent: ("stats", pid, open_fds, kept_connections)

`HEAP_BYTES` (`max_memory_mb`, 0 = none) caps the whole process (`cap_memory`: RLIMIT_AS), not only
SQLite's heap: `SELECT zeroblob(900000000)` under a 1 GiB cap used to reach 1.7 GB (SQLite's blob
plus its Python copy).
- parent -> worker: ("exit",), or end of file: the worker exits.

Every connection is opened read-only (`mode=ro`) and `immutable` (so a WAL-mode database gets no
`-wal`/`-shm` file created beside it; a database whose `-wal` file holds data is refused, as that
data would not be read), with `PRAGMA query_only`, no attachable databases, and an authorizer
that allows reading only. A result is measured as it is fetched (the size of its distinct rows
as Python objects, what the parent will hold) and refused (`result_too_large`) past
`max_result_bytes`, before anything is pickled. After a successful query it may be kept
for the next query on the same file (`ConnectionCache`, bounded); on every other path it is
closed, and every kept one is closed when the worker exits.
"""

import os
import resource
import sqlite3
import sys
import time
import urllib.parse
from collections import OrderedDict
from multiprocessing.connection import Connection

# Authorizer: deny everything that is not reading. ATTACH, DETACH, writes, DDL, transactions,
# pragma writes and extension loading all end here with SQLITE_DENY.
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
_READ_ONLY_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "collation_list",
    }
)
_DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"})
_ERROR_MESSAGE_CHARS = 300


def _authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None) -> int:
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master":
        # Preparing a pragma table-valued function (`FROM pragma_table_info('t')`) asks for this.
        # A statement can never write sqlite_master here: SQLite refuses "UPDATE sqlite_master"
        # itself, writable_schema is a denied pragma write, and the file is opened read-only.
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        name = (arg2 or "").lower()
        return sqlite3.SQLITE_DENY if name in _DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _READ_ONLY_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _classify(error: Exception, timed_out: bool) -> str:
    message = str(error).lower()
    if isinstance(error, sqlite3.OperationalError) and "interrupted" in message and timed_out:
        return "timeout"
    if isinstance(error, sqlite3.ProgrammingError):
        if "one statement" in message:
            return "multiple_statements"
        return "invalid_sql"
    if isinstance(error, sqlite3.Warning) and "one statement" in message:
        return "multiple_statements"
    if "not authorized" in message or "authorization denied" in message or "readonly" in message:
        return "not_read_only"
    if "attached databases" in message:
        return "not_read_only"
    if isinstance(error, MemoryError) or "out of memory" in message or "too big" in message:
        return "resource_limit"
    return "sql_error"


def open_read_only(db_path: str, page_cache_kib: int = 0) -> sqlite3.Connection:
    """A connection that can only read: mode=ro, query_only, no ATTACH, the authorizer."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(db_path)) + "?mode=ro&immutable=1"
    connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=True)
    try:
        connection.execute("PRAGMA query_only = ON")
        if page_cache_kib > 0:
            connection.execute(f"PRAGMA cache_size = -{int(page_cache_kib)}")
        connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        connection.set_authorizer(_authorize)
    except BaseException:
        connection.close()
        raise
    return connection


class ConnectionCache:
    """Open read-only connections kept between queries, keyed by the file's identity.

    A connection is kept only after a query that succeeded; after any error it is closed. The
    least recently used one is closed when more than `max_open` are kept; all are closed when
    the worker exits. Keys include inode, size and mtime, so a replaced file gets a new one.
    """

    def __init__(self, max_open: int, page_cache_kib: int) -> None:
        self.max_open = max_open
        self.page_cache_kib = page_cache_kib
        self._open: OrderedDict[tuple, sqlite3.Connection] = OrderedDict()

    @staticmethod
    def key(db_path: str) -> tuple:
        stat = os.stat(db_path)
        return (os.path.abspath(db_path), stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def take(self, key: tuple) -> sqlite3.Connection | None:
        return self._open.pop(key, None)

    def give_back(self, key: tuple, connection: sqlite3.Connection) -> None:
        self._open[key] = connection
        while len(self._open) > self.max_open:
            _, oldest = self._open.popitem(last=False)
            oldest.close()

    def close_all(self) -> None:
        while self._open:
            _, connection = self._open.popitem()
            connection.close()

    def __len__(self) -> int:
        return len(self._open)


def _row_bytes(row: tuple) -> int:
    return sys.getsizeof(row) + sum(sys.getsizeof(value) for value in row)


def _uncheckpointed_wal(db_path: str) -> bool:
    try:
        return os.path.getsize(db_path + "-wal") > 0
    except OSError:
        return False


def run_query(
    db_path: str,
    sql: str,
    max_rows: int,
    timeout_s: float,
    cooperative: bool,
    cache: ConnectionCache | None = None,
    max_result_bytes: int = 0,
) -> tuple:
    """Execute one statement read-only; returns the outcome tuple described in the module doc.

    Without a cache the connection is opened and closed here; with one, a connection is taken
    from it and given back only if the query succeeded (closed otherwise).
    """
    start = time.monotonic()
    deadline = start + timeout_s
    connection = None
    cursor = None
    key = None
    succeeded = False
    try:
        if _uncheckpointed_wal(db_path):
            message = (
                f"{db_path}-wal holds data not yet in the database file (read-only scoring does not read it): "
                "checkpoint it first, e.g. sqlite3 DB 'PRAGMA wal_checkpoint(TRUNCATE)'"
            )
            return ("error", "sql_error", message, time.monotonic() - start)
        if cache is not None and cache.max_open > 0:
            key = cache.key(db_path)
            connection = cache.take(key)
        if connection is None:
            connection = open_read_only(db_path, cache.page_cache_kib if cache is not None else 0)
        if cooperative:
            connection.set_progress_handler(lambda: time.monotonic() > deadline, 4096)
        cursor = connection.execute(sql)
        if cursor.description is None:
            message = "the statement returns no result columns"
            return ("error", "not_a_query", message, time.monotonic() - start)
        distinct: set[tuple] = set()
        fetched = 0
        result_bytes = 0
        for row in cursor:  # one row at a time: a huge row is measured before the next is read
            fetched += 1
            if row in distinct:
                continue
            distinct.add(row)
            if len(distinct) > max_rows:
                message = f"more than {max_rows} distinct result rows"
                return ("error", "row_limit", message, time.monotonic() - start)
            result_bytes += _row_bytes(row)
            if max_result_bytes and result_bytes > max_result_bytes:
                message = (
                    f"the result exceeds max_result_mb={max_result_bytes // (1024 * 1024)} "
                    f"({fetched} row(s) fetched)"
                )
                return ("error", "result_too_large", message, time.monotonic() - start)
        succeeded = True
        return ("ok", frozenset(distinct), fetched, time.monotonic() - start)
    except Exception as error:  # every failure of the query is reported to the parent, by kind
        kind = _classify(error, timed_out=time.monotonic() > deadline)
        message = f"{type(error).__name__}: {error}"[:_ERROR_MESSAGE_CHARS]
        return ("error", kind, message, time.monotonic() - start)
    finally:
        if connection is not None:
            try:
                if cursor is not None:
                    cursor.close()  # ends the statement (and its read transaction) even mid-fetch
                connection.set_progress_handler(None, 0)
            except Exception:
                succeeded = False
            if succeeded and key is not None and cache is not None:
                cache.give_back(key, connection)
            else:
                connection.close()


def _open_fd_count() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def serve(channel: Connection, cache: ConnectionCache) -> None:
    channel.send(("hello", os.getpid()))
    while True:
        try:
            message = channel.recv()
        except (EOFError, OSError):
            return
        kind = message[0]
        if kind == "run":
            _, request_id, db_path, sql, max_rows, timeout_s, cooperative, max_result_bytes = message
            outcome = run_query(db_path, sql, max_rows, timeout_s, cooperative, cache, max_result_bytes)
            try:
                channel.send(("result", request_id, outcome))
            except MemoryError:  # pickling the result passed the process's memory cap
                outcome = (
                    "error",
                    "resource_limit",
                    "MemoryError: the result does not fit the worker's memory cap",
                    outcome[-1],
                )
                channel.send(("result", request_id, outcome))
        elif kind == "stats":
            channel.send(("stats", os.getpid(), _open_fd_count(), len(cache)))
        elif kind == "exit":
            return
        else:
            raise ValueError(f"sql worker: unknown message kind {kind!r}")


def cap_memory(limit_bytes: int) -> None:
    """Cap this whole process at `limit_bytes` of address space (RLIMIT_AS: SQLite's heap, the
    Python objects of a result, the interpreter itself), and SQLite's own heap at the same number
    so that SQLite fails first, with "out of memory", where it can. A query that needs more fails
    with `resource_limit` (a MemoryError), and the worker goes on serving."""

    probe = sqlite3.connect(":memory:")
    try:
        probe.execute(f"PRAGMA hard_heap_limit = {limit_bytes}")
    finally:
        probe.close()
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit_bytes = min(limit_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, hard))


def main(argv: list[str]) -> int:
    fd, memory_limit_bytes, max_open, page_cache_kib = (int(value) for value in argv[1:5])
    if memory_limit_bytes > 0:
        cap_memory(memory_limit_bytes)
    channel = Connection(fd)
    cache = ConnectionCache(max_open, page_cache_kib)
    try:
        serve(channel, cache)
    finally:
        cache.close_all()
        channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
