"""Start the backend a run's core config names (the core's backend registry, `shared=True`), keep it
for the run, and return a handle every Ray process of the job can `connect()` to: the reference engine
as a named Ray actor, or the Arctic server's jobs.

The Arctic server keeps no state a client can ask for, and in a verl run the rank-0 worker (syncs
after each step) and every rollout replica (sleeps the sampler after sampling, generates, reports
the weights version) each build their own client from the handle: the handle carries a
`RayStateLedger`, so all of them read and transition one record of the server's state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arctic_rl_core import dispatch
from arctic_rl_core.backends.registry import create_backend

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend, BackendHandle

    from adapter_verl.config import ArcticVerlSettings

# The backends this process started: their owner objects keep the actor / jobs alive for the run.
_owned: list[Backend] = []


def start_backend(settings: ArcticVerlSettings) -> BackendHandle:
    """The backend the run's core config names, from the core's backend registry, shared by every Ray
    process of the job (`backend.kind=reference`: the reference engine in a named Ray actor; `ray` /
    `http` / `cortex`: the Arctic server through the real client, with a Ray-held state ledger).
    Needs `ray.init()` first."""
    backend = create_backend(settings.arctic_config(), shared=True)
    _owned.append(backend)
    return backend.handle()


def shutdown_started_backends() -> None:
    """Shut down the backends this process started (last first): an Arctic server's jobs are
    destroyed, so the next run (a resume) can create its own; the reference actor is released."""

    while _owned:
        dispatch.run(_owned.pop().shutdown())
