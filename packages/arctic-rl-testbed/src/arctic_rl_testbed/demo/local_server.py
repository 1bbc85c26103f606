"""`arctic-rl serve --reference [ARGS]` in a child process for the demo's GRPO phase (`--trainer
deepspeed`: the Arctic on-prem API whose training jobs are arctic-platform 0.1.4's own code), on a free
loopback port, reading and writing files under the run directory; its output goes to a log file."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

STARTUP_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
_LISTENING = re.compile(r"listening on (http://\S+?:\d+)\s*$", re.MULTILINE)


class LocalServerError(RuntimeError):
    """The local server did not start (its log's tail in the message)."""


@contextlib.contextmanager
def local_reference_server(file_root: Path, log_path: Path, args: Sequence[str] = ()) -> Iterator[str]:
    """The server for the block; yields its URL. Stopped with SIGTERM (then SIGKILL) on the way out."""
    command = [sys.executable, "-m", "arctic_rl_core.cli.main", "serve", "--reference", "--host", "127.0.0.1"]
    command += ["--port", "0", "--file-root", str(file_root), *args]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        yield _wait_ready(process, log_path)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(process: subprocess.Popen, log_path: Path) -> str:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    url = None
    while time.monotonic() < deadline and process.poll() is None:
        if url is None:
            match = _LISTENING.search(log_path.read_text(encoding="utf-8", errors="replace"))
            url = match.group(1) if match else None
        if url is not None:
            with (
                contextlib.suppress(OSError, ValueError),
                urllib.request.urlopen(f"{url}/health", timeout=5) as response,
            ):
                if response.status == 200:
                    return url
        time.sleep(0.2)
    tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])
    state = f"exited with code {process.poll()}" if process.poll() is not None else "did not answer"
    raise LocalServerError(
        f"arctic-rl serve --reference {state} within {STARTUP_TIMEOUT_S:.0f} s; {log_path}:\n{tail}"
    )
