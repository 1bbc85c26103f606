"""The demo's process chain ends together: no driver outlives its launcher.

`uv run arctic-rl demo` is four processes: uv, the `arctic-rl` launcher (the root environment),
uv again (the framework's environment) and the driver. uv forwards SIGINT and SIGTERM to its child,
but a SIGKILLed process forwards nothing: before this module, SIGKILL of the outer `uv run` left the
launcher, the inner uv and the driver running (training, holding the run folder and the server's
jobs). Now each end watches the other (polling, `WATCH_INTERVAL_S`; the kernel's parent-death signal
is not used: it fires when the parent's spawning *thread* exits, which a multi-threaded parent such
as uv may do while alive):

- the launcher watches its parent (`watch_parent`) and forwards SIGTERM / SIGHUP to its child
  (`forward_termination`); when the parent is gone it sends the child SIGTERM, which the inner uv
  passes on to the driver;
- the driver watches the launcher (`watch_launcher`, named in `LAUNCHER_ENV` by pid and start
  time, so that a reused pid is not mistaken for it) and stops as on Ctrl-C when it is gone or when
  SIGTERM arrives (`stop_on_termination`: KeyboardInterrupt in the main thread), so that the run
  ends with its checkpoints, records and lock as after Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator

LAUNCHER_ENV = "ARCTIC_RL_DEMO_LAUNCHER"
WATCH_INTERVAL_S = 0.5


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22); None when
    there is no such process or no /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def launcher_identity(pid: int | None = None) -> str:
    """`pid:start-time` of this process (the launcher), for `LAUNCHER_ENV`."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{_start_time(pid) or ''}"


def _alive(identity: str) -> bool:
    """The process `pid:start-time` names still runs (not a zombie, not a reused pid)."""
    pid_text, _, started = identity.partition(":")
    try:
        pid = int(pid_text)
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError, PermissionError):  # PermissionError: another user's pid now
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[-1].split()
    except OSError:
        return True  # no /proc: the pid answers
    return fields[0] != "Z" and (not started or fields[19] == started)


def _watch(
    gone: Callable[[], bool], then: Callable[[], None], name: str, interval_s: float
) -> threading.Thread:
    def watch() -> None:
        pause = threading.Event()
        while not gone():
            pause.wait(interval_s)
        then()

    thread = threading.Thread(target=watch, name=name, daemon=True)
    thread.start()
    return thread


def watch_launcher(
    identity: str | None = None, interval_s: float = WATCH_INTERVAL_S
) -> threading.Thread | None:
    """A daemon thread that sends this process SIGTERM once the launcher named by `identity`
    (default: `LAUNCHER_ENV`) is gone; None when there is no launcher to watch."""
    identity = identity if identity is not None else os.environ.get(LAUNCHER_ENV)
    if not identity:
        return None
    me = os.getpid()
    return _watch(
        lambda: not _alive(identity), lambda: os.kill(me, signal.SIGTERM), "demo-launcher-watch", interval_s
    )


def watch_parent(process: subprocess.Popen, interval_s: float = WATCH_INTERVAL_S) -> threading.Thread:
    """A daemon thread that sends `process` (the launcher's child) SIGTERM once this process's parent
    is gone (this process was re-parented)."""
    parent = os.getppid()

    def stop_child() -> None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)

    return _watch(lambda: os.getppid() != parent, stop_child, "demo-parent-watch", interval_s)


@contextlib.contextmanager
def stop_on_termination() -> Iterator[None]:
    """Inside the block, SIGTERM (a killed launcher, a forwarded termination) and SIGHUP raise
    KeyboardInterrupt in the main thread, as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {
        sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGTERM, signal.SIGHUP)
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def forward_termination(process: subprocess.Popen) -> contextlib.AbstractContextManager[None]:
    """Inside the block, SIGTERM and SIGHUP to this process are sent on to `process` (which then
    stops at a step boundary) instead of ending this process first."""

    @contextlib.contextmanager
    def block() -> Iterator[None]:
        def forward(sig: int, _frame: object) -> None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)

        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    return block()
