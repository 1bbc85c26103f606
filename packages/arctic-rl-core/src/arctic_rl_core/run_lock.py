"""One writer per run folder: `hold(folder)` takes an exclusive `flock` on `folder/.arctic-rl.lock`
for as long as the process holds it. The kernel releases the lock when the holder exits, however it
ends (Ctrl-C, SIGKILL, a crash), so a dead run never keeps a folder locked; a second live run on the
same folder stops at once with `RunFolderBusy`, naming the holder (pid, host, command, start)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = ".arctic-rl.lock"


class RunFolderBusy(RuntimeError):
    """Another live process holds the run folder."""

    def __init__(self, folder: Path, holder: dict[str, object]) -> None:
        who = ", ".join(f"{k} {holder[k]}" for k in ("pid", "host", "started") if k in holder) or "unknown"
        command = holder.get("command")
        super().__init__(
            f"{folder} is in use by another run ({who}{f': {command}' if command else ''}). Two runs writing "
            "one folder would mix their checkpoints and records: wait for it to end or stop it, or use another "
            "folder"
        )
        self.folder, self.holder = folder, holder


def _holder(handle) -> dict[str, object]:
    handle.seek(0)
    try:
        return json.loads(handle.read() or "{}")
    except ValueError:
        return {}


# folder (resolved) -> [open lock file, holders in this process]: a process that holds a folder may
# take it again (one run's driver and its trainer objects), another process may not
_HELD: dict[Path, list] = {}


class RunFolderLock:
    """The exclusive lock on one run folder (`acquire` / `release`, or a `with` block)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._key: Path | None = None

    @property
    def held(self) -> bool:
        return self._key is not None

    def acquire(self) -> RunFolderLock:
        """Take the lock (the folder is created if missing); RunFolderBusy if another live process
        holds it. This process may hold a folder several times (released at the last release)."""
        if self._key is not None:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        key = self.folder.resolve()
        if key in _HELD:
            _HELD[key][1] += 1
            self._key = key
            return self
        handle = (key / LOCK_FILE).open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(handle)
            handle.close()
            raise RunFolderBusy(self.folder, holder) from None
        handle.seek(0)
        handle.truncate()
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv)[:300],
        }
        handle.write(json.dumps(holder))
        handle.flush()
        _HELD[key] = [handle, 1]
        self._key = key
        return self

    def release(self) -> None:
        key, self._key = self._key, None
        if key is None or key not in _HELD:
            return
        _HELD[key][1] -= 1
        if _HELD[key][1] == 0:
            _HELD.pop(key)[0].close()  # closing the descriptor releases the lock

    def __enter__(self) -> RunFolderLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


@contextlib.contextmanager
def hold(folder: str | Path) -> Iterator[RunFolderLock]:
    """Hold `folder` for the duration of the block; RunFolderBusy if a live process holds it."""
    with RunFolderLock(folder) as lock:
        yield lock
