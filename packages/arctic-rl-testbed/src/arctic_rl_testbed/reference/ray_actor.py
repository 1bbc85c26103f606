"""The reference engine as a named Ray actor (the topology the Arctic server uses), a `Backend` that
drives it, and a picklable handle that reaches it from any process of the Ray cluster.

    import ray
    ray.init()
    backend = launch_reference_actor(ReferenceEngineSettings(...))   # blocking; not on an event loop
    handle = backend.handle()        # send to a Ray task or actor
    other = handle.connect()          # there: a Backend bound to the same actor

The launching backend owns the actor: its `shutdown()` releases the engine and kills the actor. A
connected backend's `shutdown()` only detaches. Ray is imported lazily.
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from arctic_rl_core.backends.protocol import (
    Backend,
    BackendHandle,
    BackendState,
    ForwardOutput,
    GenerateOutput,
    SamplingParams,
    StepOutput,
    TrainOutput,
    WirePayload,
)

from arctic_rl_testbed.reference.engine import ReferenceBackend
from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

DEFAULT_NAMESPACE = "arctic_rl_reference"
_ACTOR_CLASS: Any = None


def _actor_class():
    """The Ray actor class, defined on first use so that importing this module needs no Ray."""
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        import ray

        class ReferenceEngineActor:
            def __init__(self, settings_json: str) -> None:
                self.engine = ReferenceBackend(ReferenceEngineSettings.model_validate_json(settings_json))

            def ready(self) -> bool:
                return True

            def location(self) -> dict[str, Any]:
                return process_location()

            async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
                if method.startswith("_") or method in ("handle",):
                    raise AttributeError(f"{method!r} is not callable through the reference actor")
                return await getattr(self.engine, method)(*args, **kwargs)

        _ACTOR_CLASS = ray.remote(ReferenceEngineActor)
    return _ACTOR_CLASS


def process_location() -> dict[str, Any]:
    """Where the calling process runs: process id, host name and, inside Ray, the node id."""

    location: dict[str, Any] = {"pid": os.getpid(), "hostname": socket.gethostname(), "node_id": None}
    ray = sys.modules.get("ray")  # never import Ray just to ask
    if ray is not None and ray.is_initialized():
        location["node_id"] = ray.get_runtime_context().get_node_id()
    return location


def launch_reference_actor(
    settings: ReferenceEngineSettings | None = None,
    *,
    name: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    num_cpus: float = 1.0,
) -> RayReferenceBackend:
    """Start the engine in a named Ray actor and wait until it is built. Needs `ray.init()` first."""
    import ray

    if not ray.is_initialized():
        raise RuntimeError("launch_reference_actor needs a Ray cluster: call ray.init() first")
    actor_name = name or f"arctic-rl-reference-{uuid.uuid4().hex[:12]}"
    settings = settings or ReferenceEngineSettings()
    actor = (
        _actor_class()
        .options(name=actor_name, namespace=namespace, num_cpus=num_cpus)
        .remote(settings.model_dump_json())
    )
    ray.get(actor.ready.remote())
    return RayReferenceBackend(actor, name=actor_name, namespace=namespace, owner=True)


class RayReferenceHandle(BackendHandle):
    """Picklable: the actor's name and namespace."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace

    def connect(self) -> Backend:
        import ray

        try:
            actor = ray.get_actor(self.name, namespace=self.namespace)
        except ValueError:
            raise RuntimeError(
                f"no reference actor {self.name!r} in namespace {self.namespace!r}: it was shut down, or this "
                "process is attached to another Ray cluster"
            ) from None
        return RayReferenceBackend(actor, name=self.name, namespace=self.namespace, owner=False)

    def location(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Where the engine actor runs (`process_location()` inside it); blocking."""
        import ray

        return ray.get(
            ray.get_actor(self.name, namespace=self.namespace).location.remote(), timeout=timeout_s
        )


class RayReferenceBackend(Backend):
    """Forwards every protocol call to the reference actor."""

    def __init__(self, actor: Any, *, name: str, namespace: str, owner: bool) -> None:
        self._actor = actor
        self.name = name
        self.namespace = namespace
        self.owner = owner

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._actor is None:
            raise RuntimeError("this reference backend was shut down: connect a handle again")
        return await self._actor.call.remote(method, *args, **kwargs)

    async def generate(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], params: SamplingParams
    ) -> GenerateOutput:
        return await self._call("generate", list(prompts), params)

    @property
    def max_generate_calls_in_flight(self) -> int | None:
        return 1  # the engine in the actor samples one call at a time

    async def forward(self, payload: WirePayload, *, reference_model: bool = False) -> ForwardOutput:
        return await self._call("forward", payload, reference_model=reference_model)

    async def forward_backward(self, payload: WirePayload) -> TrainOutput:
        return await self._call("forward_backward", payload)

    async def step(self, learning_rate: float | None = None) -> StepOutput:
        return await self._call("step", learning_rate)

    async def sync_weights(self, *, cuda_ipc: bool | None = None, low_memory: bool | None = None) -> int:
        return await self._call("sync_weights", cuda_ipc=cuda_ipc, low_memory=low_memory)

    async def sleep_inference(self, level: int = 1) -> None:
        await self._call("sleep_inference", level)

    async def wake_inference(self, tags: Sequence[str] | None = None) -> None:
        await self._call("wake_inference", None if tags is None else list(tags))

    async def sleep_training(self, mode: str = "all") -> None:
        await self._call("sleep_training", mode)

    async def wake_training(self) -> None:
        await self._call("wake_training")

    async def reset_prefix_cache(self) -> None:
        await self._call("reset_prefix_cache")

    async def state(self) -> BackendState:
        return await self._call("state")

    async def save_checkpoint(
        self, path: str, step: int, *, export_hf: bool = False, save_total_limit: int | None = None
    ) -> str:
        return await self._call(
            "save_checkpoint", path, step, export_hf=export_hf, save_total_limit=save_total_limit
        )

    async def load_checkpoint(self, path: str, step: int) -> None:
        await self._call("load_checkpoint", path, step)

    def handle(self) -> BackendHandle:
        return RayReferenceHandle(self.name, self.namespace)

    async def shutdown(self) -> None:
        actor, self._actor = self._actor, None
        if actor is None or not self.owner:
            return
        import ray

        try:
            await actor.call.remote("shutdown")
        finally:
            ray.kill(actor)
