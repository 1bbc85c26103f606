"""The reference engine's sampler in its own process (`ReferenceEngineSettings.sampler_process`).

Why a process: the engine's sampler and trainer threads share one GIL, and the tiny model's decode
loop is about a third Python, so on two cores the two sides of asynchronous GRPO slow each other down
instead of overlapping. In a child process the sampler has its own interpreter.

- **Weights**: the engine's sampler model is moved to shared memory (`Module.share_memory`) before the
  child is forked, so both processes map the same parameter storage. A weight sync copies the trainer's
  buckets into it in the parent (`weight_transfer`) while it holds the engine's sampler lock, which a
  generate call holds from request to reply: the child never reads weights that are being written, and
  a rollout's weights version is still the one it started with.
- **Requests**: one pipe, one request at a time (the engine's sampler thread sends it and waits for the
  reply; the child's exceptions come back and are raised in the parent). The sampler RNG lives in the
  child: its state is read and restored over the pipe (checkpoints).
- **Same outputs**: the child runs `sampler.sample` on the same weights, the same tokenizer, the same
  RNG seed and the same torch thread count, so its tokens and log-probs equal the in-thread sampler's
  bit for bit (pinned by tests/core/reference/test_reference_sampler_process.py).
- **Start**: `fork`. A `spawn`/`forkserver` child re-imports torch and transformers (7-30 s of this
  2-core machine per process, measured); a forked one starts in milliseconds. Forking a process that
  has threads is what PyTorch's DataLoader workers do: the child uses one torch thread (it sets
  `torch.set_num_threads`, which is why `num_threads` is required), no autograd and no lock of the
  parent's other threads.
- **Shutdown**: `close()` asks the child to exit and joins it (terminates it after a timeout). The
  child ignores SIGINT (a Ctrl-C in the terminal reaches the whole process group; the parent decides),
  exits when its pipe closes, and a watchdog thread exits it within `WATCHDOG_S` seconds once its
  parent is gone (killed, crashed); multiprocessing also terminates it at the parent's normal exit
  (a daemon child). No orphan survives the engine's process.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from arctic_rl_testbed.reference.sampler import sample

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from arctic_rl_testbed.reference.sampler import SampledSequence

WATCHDOG_S = 0.5  # how often the child checks that its parent is alive
JOIN_TIMEOUT_S = 10.0  # close(): how long the child may take to exit before it is terminated


class SamplerProcessError(RuntimeError):
    """The sampler process is gone (crashed, killed) or did not answer."""


class SamplerProcess:
    """A child process that samples from `model` (see the module docstring). Call `close()` when done."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        seed: int,
        num_threads: int,
    ) -> None:
        if next(model.parameters()).device.type != "cpu":
            raise ValueError(
                "sampler_process=True shares the sampler's weights through CPU shared memory: use "
                "backend.reference.device='cpu', or sampler_process=False on a GPU"
            )
        if multiprocessing.current_process().daemon:
            raise ValueError(
                "sampler_process=True in a daemonic multiprocessing process, which may not start one: "
                "run the engine in the main process or a non-daemonic one, or use sampler_process=False"
            )
        model.share_memory()  # before the fork: parent and child map the same storage
        ctx = multiprocessing.get_context("fork")
        self._conn, child_conn = ctx.Pipe(duplex=True)
        self._lock = threading.Lock()  # one request at a time
        self._process = ctx.Process(
            target=_serve,
            args=(child_conn, self._conn, model, tokenizer, seed, num_threads, os.getpid()),
            name="arctic-rl-reference-sampler",
            daemon=True,
        )
        self._process.start()
        child_conn.close()  # the parent keeps its end only: the child sees EOF when the parent is gone
        self._closed = False
        # never closed (the engine dropped without shutdown): stop the child when this object goes
        self._stop = weakref.finalize(self, _stop_child, self._conn, self._process)
        self._call("ping")  # the child is up and serving

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def is_alive(self) -> bool:
        return self._process.is_alive()

    def sample(self, prompts: list[list[int]], params: Any, **kwargs: Any) -> list[SampledSequence]:
        """`sampler.sample(model, tokenizer, prompts, params, generator=<the child's RNG>, **kwargs)`."""
        return self._call("sample", prompts, params, kwargs)

    def rng_state(self) -> torch.Tensor:
        return self._call("get_rng")

    def set_rng_state(self, state: torch.Tensor) -> None:
        self._call("set_rng", state)

    def _call(self, op: str, *args: Any) -> Any:
        with self._lock:
            if self._closed:
                raise SamplerProcessError("the sampler process is closed: create a new engine")
            try:
                self._conn.send((op, args))
                status, value = self._conn.recv()
            except (EOFError, OSError) as error:
                self._process.join(timeout=1.0)
                raise SamplerProcessError(
                    f"the reference sampler process (pid {self._process.pid}) exited with code "
                    f"{self._process.exitcode} during {op!r}: create a new engine"
                ) from error
        if status == "error":
            raise value
        return value

    def close(self) -> None:
        """Ask the child to exit and wait for it (terminate it after JOIN_TIMEOUT_S); idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop()


def _stop_child(conn, process) -> None:
    with contextlib.suppress(OSError, ValueError):  # already gone, or already stopped
        conn.send(("close", ()))
    with contextlib.suppress(ValueError):  # a closed process object
        process.join(timeout=JOIN_TIMEOUT_S)
        if process.is_alive():
            process.terminate()
            process.join(timeout=JOIN_TIMEOUT_S)
    conn.close()


def _serve(conn, parent_conn, model, tokenizer, seed: int, num_threads: int, parent_pid: int) -> None:
    """The child's loop: answer requests until `close`, EOF or the parent's death."""

    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    parent_conn.close()  # the fork's copy of the parent's end
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    torch.set_num_threads(num_threads)
    generator = torch.Generator().manual_seed(seed)
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError):
            return  # the parent closed its end or is gone
        if op == "close":
            return
        try:
            if op == "ping":
                value: Any = None
            elif op == "sample":
                prompts, params, kwargs = args
                value = sample(model, tokenizer, prompts, params, generator=generator, **kwargs)
            elif op == "get_rng":
                value = generator.get_state()
            elif op == "set_rng":
                generator.set_state(args[0])
                value = None
            else:
                raise ValueError(f"unknown sampler-process request {op!r}")
            reply: tuple[str, Any] = ("ok", value)
        except Exception as error:  # sent back and raised in the parent
            reply = ("error", error)
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        except Exception:  # an unpicklable exception (or value): its text instead
            sent = reply[1]
            conn.send(("error", RuntimeError(f"sampler process: {type(sent).__name__}: {sent}")))


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(WATCHDOG_S)
    os._exit(0)
