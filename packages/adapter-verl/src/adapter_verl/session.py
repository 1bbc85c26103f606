"""One run's shared state on the Ray cluster: the backend handle and the adapter settings.

The trainer starts (or connects to) the backend once and publishes a picklable `BackendHandle`
with the resolved settings in a small named Ray actor; the forwarder workers and the rollout
server actors, which verl constructs with its own arguments, look it up by name and `connect()`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import ray

from adapter_verl.backend_factory import start_backend

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import BackendHandle

    from adapter_verl.config import ArcticVerlSettings

SESSION_ACTOR_NAME = "arctic_rl_verl_session"
_live_stores: dict[str, object] = {}


@dataclass(frozen=True)
class SessionInfo:
    handle: BackendHandle
    settings: ArcticVerlSettings


class _SessionStore:
    """Body of the named actor (no CPU reserved): holds the info, answers lookups."""

    def __init__(self, info: SessionInfo) -> None:
        self._info = info

    def info(self) -> SessionInfo:
        return self._info


def start_session(settings: ArcticVerlSettings, handle: BackendHandle | None = None) -> SessionInfo:
    """Start the backend named by the settings (unless `handle` is given) and publish the session.
    A session left by an earlier trainer in the same Ray namespace is replaced."""

    if handle is None:
        handle = start_backend(settings)
    info = SessionInfo(handle=handle, settings=settings)
    with contextlib.suppress(ValueError):  # no earlier session
        ray.kill(ray.get_actor(SESSION_ACTOR_NAME))
    store_cls = ray.remote(num_cpus=0)(_SessionStore)
    store = store_cls.options(name=SESSION_ACTOR_NAME, lifetime=None).remote(info)
    ray.get(store.info.remote())  # fail here, not in a worker, if the info cannot be shipped
    # Ray collects an actor once no handle refers to it, named or not: keep one for the process.
    _live_stores[SESSION_ACTOR_NAME] = store
    return info


def lookup_session(timeout_s: float = 60.0) -> SessionInfo:
    """The published session, from any process of the same Ray job."""

    try:
        store = ray.get_actor(SESSION_ACTOR_NAME)
    except ValueError as error:
        raise RuntimeError(
            f"no Arctic session actor {SESSION_ACTOR_NAME!r} in this Ray namespace: the adapter's "
            "workers and rollout servers only run under trainer.v1.trainer_mode=arctic"
        ) from error
    return ray.get(store.info.remote(), timeout=timeout_s)
