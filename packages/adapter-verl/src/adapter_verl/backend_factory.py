"""Start the backend a run's core config names, and return a handle every Ray process of the job can
`connect()` to: the reference engine as a named Ray actor, or the Arctic server's jobs.

The Arctic server keeps no state a client can ask for, and in a verl run the rank-0 worker (syncs
after each step) and every rollout replica (sleeps the sampler after sampling, generates, reports
the weights version) each build their own client from the handle: the handle carries a
`RayStateLedger`, so all of them read and transition one record of the server's state."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend, BackendHandle

    from adapter_verl.config import ArcticVerlSettings

# The backends this process started: their owner objects keep the actor / jobs alive for the run.
_owned: list[Backend] = []


def start_backend(settings: ArcticVerlSettings) -> BackendHandle:
    """`backend.kind=reference`: the reference engine in a named Ray actor (needs `ray.init()`);
    `ray` / `http` / `cortex`: the Arctic server through the real client."""
    cfg = settings.arctic_config()
    if cfg.backend.kind == "reference":
        from arctic_rl_testbed.reference.ray_actor import launch_reference_actor
        from arctic_rl_testbed.reference.settings import ReferenceEngineSettings

        backend: Backend = launch_reference_actor(ReferenceEngineSettings.from_config(cfg))
    else:
        from arctic_rl_core.backends.arctic import ArcticBackend
        from arctic_rl_core.backends.arctic_state import RayStateLedger

        backend = ArcticBackend.from_config(cfg, state_ledger=RayStateLedger.start())
    _owned.append(backend)
    return backend.handle()


def shutdown_started_backends() -> None:
    """Shut down the backends this process started (last first): an Arctic server's jobs are
    destroyed, so the next run (a resume) can create its own; the reference actor is released."""
    from arctic_rl_core import dispatch

    while _owned:
        dispatch.run(_owned.pop().shutdown())
