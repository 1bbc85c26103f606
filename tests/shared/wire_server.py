"""`arctic-rl serve --reference` in its own process, for the wire runs: the real arctic-platform 0.1.4
client (through `ArcticBackend`) talks HTTP to it as it would to the on-prem Arctic server.

- `serve_reference(log_dir)`: a context manager that starts the server on a free loopback port
  (`--port 0`; the server's "listening on" line says which), waits until `/health` answers, yields a
  `WireServer` and stops it (SIGTERM, then SIGKILL). If the process dies or never answers, the error
  carries the tail of its log.
- `WireServer.core_config(*overrides)`: an `ArcticRLConfig` with `backend.kind=http` pointing at the
  server and the model it serves; `WireServer.overrides(prefix)` the same as `key=value` strings for
  a framework's CLI (e.g. prefix `trainer.arctic_rl.` for SkyRL).
- `WireServer.requests(since)`: what the server received (its `--request-log`: route, job id and
  control fields per request, in order, from every client), from entry `since` on; `request_count()`
  marks where a run starts.
- Fixtures (import them into a suite's conftest.py, with `pytest_runtest_makereport` for the logs):
  `wire_server` (one server per session, shared by every test that asks, logging its requests) and
  `wire`, the same server
  checked per test: alive before the test, and no job left behind after it (a leftover job would
  break the next test's `/initialize`: each job type runs once). A failing test that used the server
  gets the server log's tail as a report section.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REFERENCE_MODEL_NAME = "arctic-rl/reference-tiny"  # what arctic_rl_testbed/reference/http_server.py serves
STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
LOG_TAIL_LINES = 80
_LISTENING = re.compile(r"listening on (http://\S+?):(\d+)\s*$")


class WireServerError(RuntimeError):
    """The reference server did not start, died, or was left in a bad state."""


@dataclass
class WireServer:
    """A running `arctic-rl serve --reference` process."""

    host: str
    port: int
    log_path: Path
    process: subprocess.Popen = field(repr=False)
    request_log: Path | None = None  # `--request-log` when the server was started with one

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- configs pointing here ------------------------------------------------------------------
    def overrides(self, prefix: str = "", *, model: bool = True) -> list[str]:
        """`key=value` settings of a core config (under `prefix`) for backend.kind=http here, and
        (`model`) the model it serves; a framework that names the model itself (SkyRL's
        `trainer.policy.model.path`, verl's `actor_rollout_ref.model.path`) passes model=False and
        points that at a directory from `tiny_model_dir`."""
        settings = [
            f"{prefix}backend.kind=http",
            f"{prefix}backend.host={self.host}",
            f"{prefix}backend.port={self.port}",
            f"{prefix}backend.job_ready_timeout_s=60",
            f"{prefix}backend.request_timeout_s=300",
        ]
        return [*settings, f"{prefix}model.name={REFERENCE_MODEL_NAME}"] if model else settings

    def core_config(self, *overrides: str) -> Any:
        """An `ArcticRLConfig` for this server; `overrides` (key=value) are applied after."""
        from arctic_rl_core.config import load_config

        return load_config(None, [*self.overrides(), *overrides])

    # -- the process ------------------------------------------------------------------------------
    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            return f"(no server log at {self.log_path}: {error})"
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise WireServerError(
                f"arctic-rl serve --reference at {self.url} exited with code {code}; "
                f"log {self.log_path}:\n{self.log_tail()}"
            )

    def get(self, route: str, timeout: float = 10.0) -> Any:
        """GET a JSON route of the server (e.g. /health, /status)."""
        with urllib.request.urlopen(f"{self.url}{route}", timeout=timeout) as response:
            return json.loads(response.read())

    def post(self, route: str, body: Any = None, timeout: float = 30.0) -> Any:
        request = urllib.request.Request(
            f"{self.url}{route}",
            data=json.dumps(body or {}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def request_count(self) -> int:
        """How many requests the server has logged so far (a mark for `requests`)."""
        return len(self.requests())

    def requests(self, since: int = 0) -> list[dict[str, Any]]:
        """The requests the server received, oldest first, from entry `since` on (one dict each:
        route, job_id, status and the control fields of its body)."""
        if self.request_log is None:
            raise WireServerError(f"the server at {self.url} was started without --request-log")
        if not self.request_log.exists():
            return []
        lines = self.request_log.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines[since:] if line.strip()]

    def jobs(self) -> dict[int, dict[str, Any]]:
        """The jobs the server holds now (id -> info), from `/status`."""
        return {int(job_id): info for job_id, info in self.get("/status")["jobs"].items()}

    def destroy_all_jobs(self) -> list[int]:
        """Destroy every job the server holds (the engine goes with the last); returns their ids."""
        ids = sorted(self.jobs())
        for job_id in ids:
            self.post(f"/destroy?job_id={job_id}")
        return ids


def _command(extra: Sequence[str], file_root: Path) -> list[str]:
    # The entry point next to this interpreter when installed (what a user runs), else the module.
    script = Path(sys.executable).with_name("arctic-rl")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "arctic_rl_core.cli.main"]
    serve = ["serve", "--reference", "--host", "127.0.0.1", "--port", "0", "--file-root", str(file_root)]
    return [*head, *serve, *extra]


def _wait_listening(process: subprocess.Popen, log_path: Path, deadline: float) -> tuple[str, int]:
    while time.monotonic() < deadline:
        if log_path.exists():
            for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
                match = _LISTENING.search(line)
                if match:
                    return match.group(1).removeprefix("http://"), int(match.group(2))
        if process.poll() is not None:
            break
        time.sleep(0.1)
    return "", 0


@contextlib.contextmanager
def serve_reference(
    log_dir: Path,
    *,
    args: Sequence[str] = (),
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
    env: dict[str, str] | None = None,
    file_root: Path | None = None,
) -> Iterator[WireServer]:
    """Run `arctic-rl serve --reference [args]` on a free loopback port while the block runs. The
    server reads and writes files only under `file_root` (default: the parent of `log_dir`, which
    under pytest is the session's base folder, so every test's `tmp_path` is inside it)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"arctic-rl-serve-{os.getpid()}-{time.monotonic_ns()}.log"
    child_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            _command(args, file_root if file_root is not None else log_dir.parent),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_env,
            start_new_session=True,  # a Ctrl-C of the test run reaches it only through our stop
        )
    server: WireServer | None = None
    request_log = next((Path(args[i + 1]) for i, a in enumerate(args[:-1]) if a == "--request-log"), None)
    try:
        deadline = time.monotonic() + startup_timeout_s
        host, port = _wait_listening(process, log_path, deadline)
        server = WireServer(host or "127.0.0.1", port, log_path, process, request_log)
        if not port:
            server.check_alive()
            raise WireServerError(
                f"arctic-rl serve --reference printed no 'listening on' line in {startup_timeout_s:.0f} s; "
                f"log {log_path}:\n{server.log_tail()}"
            )
        while True:
            try:
                if server.get("/health", timeout=5).get("status") == "OK":
                    break
            except (urllib.error.URLError, OSError, ValueError):
                pass
            server.check_alive()
            if time.monotonic() > deadline:
                raise WireServerError(f"{server.url}/health did not answer; log:\n{server.log_tail()}")
            time.sleep(0.1)
        yield server
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(timeout=STOP_TIMEOUT_S)


def tiny_model_dir(directory: Path, seed: int, **model: Any) -> Path:
    """A tiny reference model (and the bundled tokenizer) saved as a local Hugging Face directory:
    the framework's tokenizer loads from it and the server serves it when a job names it."""
    from arctic_rl_core.config.reference_model import ReferenceModelConfig
    from arctic_rl_testbed.reference.model import save_model_dir

    return save_model_dir(directory, ReferenceModelConfig(**model), seed)


# -- pytest fixtures (import into a conftest.py) -------------------------------------------------
_SERVER_KEY = pytest.StashKey[WireServer]()


@pytest.fixture(scope="session")
def wire_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WireServer]:
    """One `arctic-rl serve --reference` for the whole session, logging every request it receives."""
    log_dir = tmp_path_factory.mktemp("wire-server")
    with serve_reference(log_dir, args=["--request-log", str(log_dir / "requests.jsonl")]) as server:
        yield server


@pytest.fixture
def wire(wire_server: WireServer, request: pytest.FixtureRequest) -> Iterator[WireServer]:
    """The session's server, alive and holding no job when the test starts and when it ends."""
    wire_server.check_alive()
    request.node.stash[_SERVER_KEY] = wire_server
    leftover = wire_server.destroy_all_jobs()
    if leftover:  # an earlier test died holding jobs (its own failure is reported there)
        print(f"wire server: destroyed jobs {leftover} left by an earlier test", file=sys.stderr)
    yield wire_server
    wire_server.check_alive()
    left = wire_server.destroy_all_jobs()
    if left:
        pytest.fail(f"the test left jobs {left} on the wire server: shut its ArcticBackend down")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failed test that used `wire` gets the server log's tail in its report."""
    outcome = yield
    report = outcome.get_result()
    server = item.stash.get(_SERVER_KEY, None)
    if server is not None and report.failed:
        report.sections.append((f"arctic-rl serve log ({server.log_path})", server.log_tail()))
