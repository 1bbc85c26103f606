"""What a failed Arctic server call says: the operation, the job, the payload size, the server,
and where to look next.

0.1.4's transports give little of this away: its HTTP transport raises aiohttp's bare
`ServerDisconnectedError` when the server dies mid-call and drops the error body; the server has
no exception handler, so a failure inside a worker is a bare `500 Internal Server Error`; its
Ray transport has no timeout at all. `ArcticBackend` turns each of these into one of the errors
below, built from a `CallContext`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MAX_BODY_CHARS = 4000


@dataclass(frozen=True)
class CallContext:
    """Where one call went: `op` (the client's route name), `job` (e.g. "training job 3"),
    `server` (e.g. "http://gpu-0:8000"), `payload_bytes` (tensor bytes sent, None for JSON ops),
    `server_log` (where that server writes the causes it does not send back)."""

    op: str
    job: str
    server: str
    payload_bytes: int | None = None
    server_log: str = ""

    def describe(self) -> str:
        parts = [f"Arctic op {self.op!r} on {self.job} at {self.server}"]
        if self.payload_bytes is not None:
            parts.append(f"payload {format_bytes(self.payload_bytes)}")
        return ", ".join(parts)


def format_bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit} ({n:,} bytes)"
    return f"{n} bytes"


class ArcticCallError(RuntimeError):
    """An Arctic server call failed; `context` says which call and where."""

    def __init__(self, message: str, context: CallContext | None = None) -> None:
        super().__init__(message)
        self.context = context

    @property
    def op(self) -> str | None:
        return None if self.context is None else self.context.op


class ArcticServerError(ArcticCallError):
    """The server answered an op with an HTTP error; `body` is what it said."""

    def __init__(self, op: str, status: int, body: str, context: CallContext | None = None) -> None:
        shown = body if len(body) <= _MAX_BODY_CHARS else body[:_MAX_BODY_CHARS] + f"... ({len(body)} chars)"
        where = context.describe() if context is not None else f"Arctic server op {op!r}"
        message = f"{where} failed with HTTP {status}: {shown}"
        if status >= 500 and is_bare_error_body(body, status):
            log = context.server_log if context is not None and context.server_log else "the server's log"
            message += (
                f" (the 0.1.4 server has no exception handler, so a failure inside it or its workers comes back "
                f"without a cause: read {log})"
            )
        super().__init__(message, context)
        self._op, self.status, self.body = op, status, body

    @property
    def op(self) -> str:
        return self._op


class ArcticTimeoutError(ArcticCallError, TimeoutError):
    """A call did not finish within the configured timeout (`backend.request_timeout_s`)."""


class ArcticConnectionError(ArcticCallError, ConnectionError):
    """The connection to the server failed or was closed mid-call (a crashed or killed server)."""


def is_bare_error_body(body: str, status: int) -> bool:
    """True for an error body that carries no cause (empty, or only the status line)."""
    text = body.strip().lower()
    return not text or text in {
        f"{status}: internal server error",
        "500 internal server error",
        "internal server error",
    }


def timeout_error(context: CallContext, timeout_s: float) -> ArcticTimeoutError:
    return ArcticTimeoutError(
        f"{context.describe()} did not finish within backend.request_timeout_s={timeout_s:g} s. The server may "
        f"still be running it (e.g. a hung NCCL collective): check {context.server_log or 'its log'}; raise "
        "backend.request_timeout_s if the call is legitimately slow. This backend's view of the server state "
        "is unknown after a timeout: restart the run from its last checkpoint.",
        context,
    )


def connection_error(context: CallContext, cause: BaseException) -> ArcticConnectionError:
    return ArcticConnectionError(
        f"{context.describe()}: the connection failed or the server closed it mid-call "
        f"({type(cause).__name__}: {cause}). Did the server crash or get killed (out of memory, SIGKILL)? "
        f"Its log: {context.server_log or 'the server process output'}.",
        context,
    )


def unreachable_error(context: CallContext, cause: BaseException) -> ArcticConnectionError:
    """Nothing answers at the server's address when the run creates its jobs."""
    found = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(cause))
    reason = found.group(1).strip() if found else type(cause).__name__
    return ArcticConnectionError(
        f"cannot connect to the Arctic server at {context.server} ({reason}): is it running, and at that "
        "address? Start it (on this machine: `arctic-rl serve --reference --port PORT --file-root DIR`, or the "
        "Arctic server on a GPU node) or point the run at it (backend.host / backend.port; the demo's --server "
        f"URL). Its log: {context.server_log}.",
        context,
    )
