"""The Arctic server's sleep/wake state and weights versions, as every client of one run agrees on it.

The 0.1.4 server keeps no state a client can ask for: `/job/{id}` and `/status` report job
metadata only, its sleep/wake and weight-sync routes neither check nor report whether vLLM or the
DeepSpeed engines are asleep, and no route says which optimizer step the sampler's weights come
from. So the clients keep that record, and every process that transitions the server or reads
the weights version must read and write the SAME record: a verl run has the trainer, the rank-0
worker (syncs after each step) and every rollout replica (sleeps the sampler after sampling,
generates, reports the version) each with its own client object.

- `ArcticServerRecord`: the record (inference, training, weights version, trainer version).
- `Transition` + `apply_transition`: how each successful call changes it (pure).
- `StateLedger`: where the record lives. `LocalStateLedger` in one process (pickling it copies
  the record: processes that each hold a copy diverge at their first transition);
  `RayStateLedger` in a small Ray actor that applies every transition atomically, shared by every
  process of the Ray job that receives the handle.

The ledger also keeps the ordered list of transitions (`history()`), which is what tests read to
check the sequence a multi-process run sent.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from arctic_rl_core.backends.protocol import InferenceState, TrainingState

HISTORY_LIMIT = 10_000
# A transition holds the ledger for one server call; the longest (a weight sync) stays far below this.
EXCLUSIVE_TIMEOUT_S = 1800.0
_TRAINING_DEPTH = {
    TrainingState.AWAKE: 0,
    TrainingState.NON_LP_ASLEEP: 1,
    TrainingState.LP_PARAMS_ASLEEP: 2,
    TrainingState.ASLEEP: 3,
}


@dataclass(frozen=True)
class ArcticServerRecord:
    inference: InferenceState = InferenceState.AWAKE
    training: TrainingState = TrainingState.AWAKE
    weights_version: int = 0  # optimizer steps in the weights the sampler serves
    trainer_version: int = 0  # optimizer steps the trainer has taken


@dataclass(frozen=True)
class Transition:
    """One successful server call that changes the record. `op` is the client call's name."""

    op: str  # sleep_inference | wake_inference | sleep_training | wake_training | step | sync_weights | load_checkpoint
    tags: tuple[str, ...] | None = None  # wake_inference
    mode: str | None = None  # sleep_training
    step: int | None = None  # load_checkpoint: the restored optimizer step

    def describe(self) -> str:
        if self.op == "wake_inference":
            return f"wake_inference({list(self.tags) if self.tags is not None else None})"
        if self.op == "sleep_training":
            return f"sleep_training({self.mode})"
        if self.op == "load_checkpoint":
            return f"load_checkpoint({self.step})"
        return self.op


def apply_transition(record: ArcticServerRecord, transition: Transition) -> ArcticServerRecord:
    """The record after `transition` succeeded on the server."""
    op = transition.op
    if op == "sleep_inference":
        return replace(record, inference=InferenceState.ASLEEP)
    if op == "wake_inference":
        tags = set(("weights", "kv_cache") if transition.tags is None else transition.tags)
        if "kv_cache" in tags:
            return replace(record, inference=InferenceState.AWAKE)
        if record.inference is InferenceState.ASLEEP:
            return replace(record, inference=InferenceState.WEIGHTS_ONLY)
        return record
    if op == "sleep_training":
        target = TrainingState(transition.mode)
        if _TRAINING_DEPTH[target] > _TRAINING_DEPTH[record.training]:
            return replace(record, training=target)
        return record
    if op == "wake_training":
        return replace(record, training=TrainingState.AWAKE)
    if op == "step":
        return replace(record, trainer_version=record.trainer_version + 1)
    if op == "sync_weights":
        return replace(record, weights_version=record.trainer_version)
    if op == "load_checkpoint":
        if transition.step is None:
            raise ValueError("Transition('load_checkpoint') needs the restored step")
        return replace(record, trainer_version=int(transition.step))
    raise ValueError(f"unknown transition {op!r}")


class StateLedger(abc.ABC):
    """Where the record of one run's server lives; every client of the run shares one."""

    @abc.abstractmethod
    async def read(self) -> ArcticServerRecord: ...

    @abc.abstractmethod
    async def record(self, transition: Transition) -> ArcticServerRecord:
        """Apply `transition` (atomically) and return the new record."""

    @abc.abstractmethod
    async def history(self) -> list[str]:
        """The transitions applied so far, oldest first (at most `HISTORY_LIMIT`)."""

    @abc.abstractmethod
    def exclusive(
        self, timeout_s: float = EXCLUSIVE_TIMEOUT_S
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Held around check + server call + `record` of one transition, so that two processes
        asking for the same transition at once (verl sleeps every replica concurrently) send it
        once: the second finds it done."""

    @property
    @abc.abstractmethod
    def shared_across_processes(self) -> bool: ...


class LocalStateLedger(StateLedger):
    """The record in this process. Objects connected in this process share it; a pickled copy
    (a handle sent to another process) starts from a copy and diverges: use `RayStateLedger`."""

    def __init__(self, initial: ArcticServerRecord | None = None, history: Sequence[str] = ()) -> None:
        self._record = initial or ArcticServerRecord()
        self._history = list(history)
        self._lock: asyncio.Lock | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_record": self._record, "_history": self._history, "_lock": None}

    @contextlib.asynccontextmanager
    async def exclusive(self, timeout_s: float = EXCLUSIVE_TIMEOUT_S) -> AsyncIterator[None]:
        if self._lock is None:
            self._lock = asyncio.Lock()
        await asyncio.wait_for(self._lock.acquire(), timeout_s)
        try:
            yield
        finally:
            self._lock.release()

    async def read(self) -> ArcticServerRecord:
        return self._record

    async def record(self, transition: Transition) -> ArcticServerRecord:
        self._record = apply_transition(self._record, transition)
        self._history = [*self._history, transition.describe()][-HISTORY_LIMIT:]
        return self._record

    async def history(self) -> list[str]:
        return list(self._history)

    @property
    def shared_across_processes(self) -> bool:
        return False


class _LedgerActor:
    """Body of the Ray actor behind `RayStateLedger` (methods run one at a time)."""

    def __init__(self, initial: ArcticServerRecord) -> None:
        self._ledger = LocalStateLedger(initial)
        self._lock = asyncio.Lock()
        self._holder: str | None = None

    async def acquire(self, token: str, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(self._lock.acquire(), timeout_s)
        except TimeoutError:
            raise TimeoutError(
                f"the Arctic state ledger was held by {self._holder} for over {timeout_s:.0f} s: a process "
                "died in the middle of a server call, or the call hangs"
            ) from None
        self._holder = token

    async def release(self, token: str) -> None:
        if self._holder == token:
            self._holder = None
            self._lock.release()

    async def read(self) -> ArcticServerRecord:
        return await self._ledger.read()

    async def record(self, transition: Transition) -> ArcticServerRecord:
        return await self._ledger.record(transition)

    async def history(self) -> list[str]:
        return await self._ledger.history()


class RayStateLedger(StateLedger):
    """The record in a Ray actor (no CPU reserved). Picklable: every Ray process that receives it
    (inside an `ArcticHandle`) reads and transitions the one record. The actor lives as long as
    the process that started it holds this object (or a copy of its actor handle)."""

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    @classmethod
    def start(cls, initial: ArcticServerRecord | None = None) -> RayStateLedger:
        """Start the actor (needs `ray.init()` in this process)."""
        import ray

        if not ray.is_initialized():
            raise RuntimeError(
                "RayStateLedger.start() needs a connected Ray runtime: call ray.init() first "
                "(verl's trainer has done so by the time the backend starts)"
            )
        actor_cls = ray.remote(num_cpus=0)(_LedgerActor)
        # Several callers at once (rollout replicas) must not be serialised behind a slow one.
        actor = actor_cls.options(max_concurrency=64).remote(initial or ArcticServerRecord())
        ray.get(actor.read.remote())  # fail here if the actor cannot start
        return cls(actor)

    @contextlib.asynccontextmanager
    async def exclusive(self, timeout_s: float = EXCLUSIVE_TIMEOUT_S) -> AsyncIterator[None]:
        token = uuid.uuid4().hex
        await self._ask("acquire", token, timeout_s)
        try:
            yield
        finally:
            await self._ask("release", token)

    async def _ask(self, method: str, *args: Any) -> Any:
        ref = getattr(self._actor, method).remote(*args)
        return await asyncio.wrap_future(ref.future())

    async def read(self) -> ArcticServerRecord:
        return await self._ask("read")

    async def record(self, transition: Transition) -> ArcticServerRecord:
        return await self._ask("record", transition)

    async def history(self) -> list[str]:
        return await self._ask("history")

    @property
    def shared_across_processes(self) -> bool:
        return True
