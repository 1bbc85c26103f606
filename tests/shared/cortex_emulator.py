"""`arctic-rl serve --reference --api cortex` in its own process, for the Cortex runs: the real
arctic-platform 0.1.4 `CortexTransport` (through `ArcticBackend`) drives it on loopback as it would
Snowflake Cortex, with the PAT from `ARCTIC_CORTEX_PAT` on every call.

- `serve_cortex(log_dir, pat)`: a context manager that starts the emulator on a free port (`--port 0`;
  its "listening on" line says which), yields a `CortexEmulator` and stops it (SIGTERM, then SIGKILL).
- `CortexEmulator.overrides(prefix)`: core settings for backend.kind=cortex at its URL.
- Fixture `cortex_emulator`: one emulator per test module (import it into a suite's conftest.py or
  test module); the PAT it checks is `PAT` and is put in this process's environment for the module.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from wire_server import STARTUP_TIMEOUT_S, WireServerError, _command, _stop, _wait_listening

PAT = "pat-cortex-test-7d1e9b3a5c"  # must never appear in a log line, a plan, a trace or an error
TOKEN_ENV = "ARCTIC_CORTEX_PAT"  # the README's name; backend.cortex.token_env's default
DATABASE, SCHEMA = "ARCTIC_RL", "TESTS"


@dataclass
class CortexEmulator:
    host: str
    port: int
    log_path: Path
    pat: str
    process: subprocess.Popen = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def overrides(self, prefix: str = "") -> list[str]:
        return [
            f"{prefix}backend.kind=cortex",
            f"{prefix}backend.cortex.base_url={self.url}",
            f"{prefix}backend.cortex.database={DATABASE}",
            f"{prefix}backend.cortex.schema_name={SCHEMA}",
            f"{prefix}backend.job_ready_timeout_s=60",
            f"{prefix}backend.request_timeout_s=300",
        ]

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise WireServerError(
                f"the Cortex emulator exited with code {code}; log:\n{self.log_text()[-4000:]}"
            )


@contextlib.contextmanager
def serve_cortex(log_dir: Path, pat: str = PAT, *, file_root: Path | None = None) -> Iterator[CortexEmulator]:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"arctic-rl-serve-cortex-{os.getpid()}-{time.monotonic_ns()}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", TOKEN_ENV: pat}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            _command(["--api", "cortex"], file_root if file_root is not None else log_dir.parent),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    try:
        host, port = _wait_listening(process, log_path, time.monotonic() + STARTUP_TIMEOUT_S)
        emulator = CortexEmulator(host or "127.0.0.1", port, log_path, pat, process)
        if not port:
            emulator.check_alive()
            raise WireServerError(
                f"the Cortex emulator printed no 'listening on' line; log:\n{emulator.log_text()}"
            )
        yield emulator
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def cortex_emulator(tmp_path_factory) -> Iterator[CortexEmulator]:
    pytest.importorskip("tenacity")  # arctic-platform[cortex]: the real CortexTransport needs it
    with pytest.MonkeyPatch.context() as patch, serve_cortex(tmp_path_factory.mktemp("cortex")) as emulator:
        patch.setenv(TOKEN_ENV, emulator.pat)
        yield emulator
        emulator.check_alive()


class InProcessCortex:
    """The emulator (`CortexEmulator` of `arctic_rl_testbed.reference.cortex_server`) on loopback in
    this process, on its own event-loop thread, so a test can look at the jobs' engines (LoRA runs:
    adapters, base, the last sync). `url`, `emulator.jobs`, `overrides(prefix)`; `stop()` when done."""

    def __init__(self, pat: str, settings, file_root: Path) -> None:
        import asyncio
        import threading

        from aiohttp import web
        from arctic_rl_testbed.reference.cortex_server import CortexEmulator as Server

        self.pat = pat
        self.emulator = Server(pat, settings, file_root=file_root)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def start() -> int:
            self.runner = web.AppRunner(self.emulator.application(), access_log=None)
            await self.runner.setup()
            await web.TCPSite(self.runner, "127.0.0.1", 0).start()
            return self.runner.addresses[0][1]

        self.port = asyncio.run_coroutine_threadsafe(start(), self.loop).result(60)
        self.url = f"http://127.0.0.1:{self.port}"

    def overrides(self, prefix: str = "") -> list[str]:
        return CortexEmulator("127.0.0.1", self.port, Path(), self.pat, None).overrides(prefix)  # type: ignore[arg-type]

    def stop(self) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
