"""The one registry of backends: `backend.kind` -> the factory an installed package declares in the
`arctic_rl.backends` entry-point group.

    [project.entry-points."arctic_rl.backends"]
    reference = "arctic_rl_testbed.reference.factory:create_backend"

A factory is called as `factory(cfg, shared=...)` with the run's `ArcticRLConfig` and returns a core
`Backend`. `shared=False`: a backend for this process alone (SkyRL's trainer). `shared=True`: one
backend that every Ray process of the job reaches through `backend.handle().connect()` (verl's
workers and rollout replicas): the reference engine as a named Ray actor, the Arctic server's jobs
with a Ray-held state ledger.

The core declares `ray`, `http` and `cortex` (the Arctic server through the real client); the
testbed declares `reference`. A kind no installed package declares is an error naming the package.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend
    from arctic_rl_core.config import ArcticRLConfig

ENTRY_POINT_GROUP = "arctic_rl.backends"
# The package that declares each kind this repository ships (for the error's fix).
PROVIDERS = {
    "ray": "arctic-rl-core[ray,transport]",
    "http": "arctic-rl-core[transport]",
    "cortex": "arctic-rl-core[transport]",
    "reference": "arctic-rl-testbed[reference,ray]",
}


class BackendFactory(Protocol):
    def __call__(self, cfg: ArcticRLConfig, *, shared: bool) -> Backend: ...


class BackendNotInstalledError(RuntimeError):
    """No installed package declares the `backend.kind` a run asks for."""


def installed_kinds() -> list[str]:
    return sorted({entry.name for entry in entry_points(group=ENTRY_POINT_GROUP)})


def backend_factory(kind: str) -> BackendFactory:
    found = [entry for entry in entry_points(group=ENTRY_POINT_GROUP) if entry.name == kind]
    if not found:
        package = PROVIDERS.get(kind, "the package that provides it")
        raise BackendNotInstalledError(
            f"backend.kind={kind!r}: no installed package declares it in the {ENTRY_POINT_GROUP!r} entry "
            f"points (installed: {', '.join(installed_kinds()) or 'none'}). Fix: install {package}"
        )
    if len({entry.value for entry in found}) > 1:
        raise BackendNotInstalledError(
            f"backend.kind={kind!r} is declared by more than one installed package "
            f"({', '.join(sorted(entry.value for entry in found))}): uninstall all but one"
        )
    return found[0].load()


def create_backend(cfg: ArcticRLConfig, *, shared: bool = False) -> Backend:
    """The backend `cfg.backend.kind` names, built by the factory its package declares."""
    return backend_factory(cfg.backend.kind)(cfg, shared=shared)
