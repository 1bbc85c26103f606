"""Stands in for Ray's actor API where arctic-platform 0.1.4's server code creates and calls its
`DeepSpeedWorker` actors, so that code runs unchanged with each rank in a `WorkerProcess`.

The server writes `DeepSpeedWorker.options(**ray_options).remote(rank, world_size, master_port)`
to start a rank and `await worker.<method>.remote(*args)` (alone or under `asyncio.gather`) to call
it. `WorkerActorClass` answers the first (the Ray scheduling options, e.g. `num_gpus=1` or a
placement-group bundle, have no meaning for a CPU child process and are ignored), `WorkerHandle` the
second: `.remote(...)` sends the call at once, as Ray does, and returns an awaitable of its result.
The server's `ray.get(ref)` calls (its sleep/wake-training routes run them in an executor) are not
stood in for: those routes are driven directly (see `deepspeed_server_jobs`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from arctic_rl_testbed.reference.deepspeed_worker_process import WorkerProcess


class WorkerHandle:
    """A started rank: `handle.<method>.remote(*args)` is an awaitable of `worker.<method>(*args)`."""

    def __init__(self, process: WorkerProcess) -> None:
        self.process = process

    def __getattr__(self, method: str) -> _RemoteMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return _RemoteMethod(self.process, method)


class _RemoteMethod:
    def __init__(self, process: WorkerProcess, method: str) -> None:
        self._process = process
        self._method = method

    def remote(self, *args: Any) -> Any:
        future: Future = self._process.submit(self._method, *args)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return future  # outside a coroutine: a concurrent future (`.result()`)
        return asyncio.wrap_future(future)


class WorkerActorClass:
    """`DeepSpeedWorker` for the server's code: `.options(...).remote(rank, world_size, master_port)`
    starts the real worker in a child process; `started` receives each process (for shutdown)."""

    def __init__(self, *, num_threads: int, started: Callable[[WorkerProcess], None]) -> None:
        self._num_threads = num_threads
        self._started = started

    def options(self, **_ray_options: Any) -> WorkerActorClass:
        return self

    def remote(self, rank: int, world_size: int, master_port: int) -> WorkerHandle:
        process = WorkerProcess(rank, world_size, master_port, num_threads=self._num_threads)
        self._started(process)
        return WorkerHandle(process)
