"""One arctic-platform 0.1.4 `DeepSpeedWorker` (the real class, unchanged) in its own process.

The real server runs each rank as a Ray actor; here each rank is a spawned child process that
builds the worker from `arctic_platform.common.deepspeed_worker` after `deepspeed_cpu_shims` and
answers method calls over a pipe, in arrival order, one at a time (as a Ray actor does).

- **Why a process**: DeepSpeed's process group, its global state and the model's ~1 GB of CPU
  allocator arenas belong to a process; `initialize` takes 7-18 s on a busy 2-core machine, so a test
  module starts a worker once and shares it. Ranks of one job rendezvous over gloo on `MASTER_PORT`.
- **A fresh interpreter, not a fork**: the worker must import DeepSpeed with `WORKER_ENV` already set
  (it picks its accelerator then), in a process without the caller's threads: `python -m` this module
  (~5 s of imports), connected by a socket pair (not multiprocessing's spawn, which re-runs the
  caller's main script in the child unless it has a `__main__` guard).
- **Calls**: `submit(method, *args)` sends the call at once and returns a `concurrent.futures.Future`;
  a reader thread resolves it with the child's value, or the child's exception (raised again here).
  Values cross the socket pickled with the plain `pickle` module (a tensor's bytes inline):
  multiprocessing's own pickler would send torch tensors as shared-memory handles that only a
  multiprocessing child can open.
- **Shutdown**: `close()` asks the child to exit and joins it (terminates it after a timeout). The
  child ignores SIGINT (the parent decides), exits when its socket closes, and a watchdog exits it
  once its parent is gone (killed, crashed). The child leads its own process group, and both ways out
  end the whole group, so nothing it started (DeepSpeed's JIT compiler, say) outlives it either.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

from arctic_rl_testbed.reference import deepspeed_cpu_shims
from arctic_rl_testbed.reference.deepspeed_cpu_shims import WORKER_ENV

RUNTIME_PROBE = "__runtime__"  # a call answered by the host, not the worker: see `_runtime`
WATCHDOG_S = 0.5  # how often the child checks that its parent is alive
JOIN_TIMEOUT_S = 20.0  # close(): how long the child may take to exit before it is terminated


class WorkerProcessError(RuntimeError):
    """The worker process is gone (crashed, killed) or was closed."""


class WorkerProcess:
    """A real `DeepSpeedWorker(rank, world_size, master_port)` in a spawned child (module docstring)."""

    def __init__(self, rank: int, world_size: int, master_port: int, *, num_threads: int) -> None:
        parent_sock, child_sock = socket.socketpair()
        env = {**os.environ, **WORKER_ENV, "OMP_NUM_THREADS": str(num_threads)}
        args = [str(child_sock.fileno()), str(rank), str(world_size), str(master_port), str(num_threads)]
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__, *args, str(os.getpid())],
                pass_fds=(child_sock.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: close() also ends what it started (a compiler)
            )
        finally:
            child_sock.close()  # the child sees EOF when the parent's end is gone
        self._conn = Connection(parent_sock.detach())
        self.rank = rank
        self._send_lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._pending_lock = threading.Lock()
        self._ids = itertools.count()
        self._closed = False
        self._reader = threading.Thread(
            target=self._read, name=f"deepspeed-worker-{rank}-reader", daemon=True
        )
        self._reader.start()
        self._stop = weakref.finalize(self, _stop_child, self._conn, self._process)

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def is_alive(self) -> bool:
        return self._process.poll() is None

    def submit(self, method: str, *args: Any) -> Future:
        """Call `worker.<method>(*args)` in the child; the future holds its value or exception."""
        future: Future = Future()
        with self._send_lock:
            if self._closed:
                raise WorkerProcessError(f"the DeepSpeed worker process (rank {self.rank}) is closed")
            call_id = next(self._ids)
            with self._pending_lock:
                self._pending[call_id] = future
            try:
                self._conn.send_bytes(pickle.dumps((call_id, method, args)))
            except (OSError, ValueError) as error:
                with self._pending_lock:
                    self._pending.pop(call_id, None)
                raise self._gone(method) from error
        return future

    def call(self, method: str, *args: Any) -> Any:
        """`submit(...)` and wait for the value (raises the child's exception)."""
        return self.submit(method, *args).result()

    def _read(self) -> None:
        while True:
            try:
                call_id, status, value = pickle.loads(self._conn.recv_bytes())
            except (EOFError, OSError):
                break
            with self._pending_lock:
                future = self._pending.pop(call_id, None)
            if future is None:
                continue
            if status == "ok":
                future.set_result(value)
            else:
                future.set_exception(value)
        with contextlib.suppress(Exception):
            self._process.wait(timeout=1.0)
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(self._gone("a pending call"))

    def _gone(self, what: str) -> WorkerProcessError:
        return WorkerProcessError(
            f"the DeepSpeed worker process (rank {self.rank}, pid {self._process.pid}) exited with code "
            f"{self._process.poll()} during {what}: create a new engine"
        )

    def close(self) -> None:
        """Ask the child to exit and wait for it (terminate it after JOIN_TIMEOUT_S); idempotent."""
        with self._send_lock:
            if self._closed:
                return
            self._closed = True
        self._stop()
        self._reader.join(timeout=JOIN_TIMEOUT_S)


def _stop_child(conn, process) -> None:
    with contextlib.suppress(OSError, ValueError):
        conn.send_bytes(pickle.dumps((None, "__close__", ())))
    try:
        process.wait(timeout=JOIN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            process.wait(timeout=JOIN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):  # whatever it started, still running
        os.killpg(process.pid, signal.SIGKILL)
    conn.close()


def real_worker_class() -> type:
    """arctic-platform 0.1.4's `DeepSpeedWorker` as written (the class under its `@ray.remote`)."""
    from arctic_platform.common.deepspeed_worker import DeepSpeedWorker

    metadata = getattr(DeepSpeedWorker, "__ray_metadata__", None)
    if metadata is None:
        return DeepSpeedWorker
    return metadata.modified_class.__ray_actor_class__


def _serve(conn, rank: int, world_size: int, master_port: int, num_threads: int, parent_pid: int) -> None:
    """The child: shims, the real worker, then answer calls until `__close__`, EOF or the parent's death."""

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    import torch

    torch.set_num_threads(num_threads)
    deepspeed_cpu_shims.install()
    worker = None
    error: BaseException | None = None
    try:
        worker = real_worker_class()(rank, world_size, master_port)
    except Exception as exc:  # reported on the first call
        error = exc
    while True:
        try:
            call_id, method, args = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if method == "__close__":
            with contextlib.suppress(Exception):
                if worker is not None and getattr(worker, "engine", None) is not None:
                    worker.destroy()
            return
        try:
            if error is not None:
                raise error
            if method == RUNTIME_PROBE:
                value = _runtime()
            elif method.startswith("_"):
                raise AttributeError(f"{method!r} is not a DeepSpeedWorker method")
            else:
                value = getattr(worker, method)(*args)
            reply: tuple[Any, str, Any] = (call_id, "ok", value)
        except Exception as exc:  # sent back and raised in the parent
            reply = (call_id, "error", exc)
        try:
            data = pickle.dumps(reply)
        except Exception:  # an unpicklable value or exception: its text instead
            sent = reply[2]
            data = pickle.dumps(
                (call_id, "error", RuntimeError(f"DeepSpeed worker: {type(sent).__name__}: {sent}"))
            )
        try:
            conn.send_bytes(data)
        except (EOFError, OSError):
            return


def _runtime() -> dict[str, Any]:
    """What the worker's process runs on (`WorkerProcess.call(RUNTIME_PROBE)`): DeepSpeed's accelerator,
    the process group's backend, whether DeepSpeed's shared-memory collective kernel was loaded, the
    GPUs torch sees, and the process id."""
    import torch
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator

    comm = sys.modules.get("deepspeed.comm.comm")
    backend = getattr(comm, "cdb", None)
    return {
        "pid": os.getpid(),
        "accelerator": get_accelerator().device_name(),
        "process_group_backend": dist.get_backend() if dist.is_initialized() else None,
        "shm_comm_op_loaded": getattr(backend, "shm_comm_op", None) is not None,
        "cuda_device_count": torch.cuda.device_count(),
    }


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(WATCHDOG_S)
    with contextlib.suppress(OSError):  # the group this process leads: itself and what it started
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os._exit(0)


def main(argv: list[str]) -> None:
    """`python -m arctic_rl_testbed.reference.deepspeed_worker_process FD RANK WORLD PORT THREADS PPID`."""

    fd, rank, world_size, master_port, num_threads, parent_pid = (int(a) for a in argv)
    _serve(Connection(fd), rank, world_size, master_port, num_threads, parent_pid)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
