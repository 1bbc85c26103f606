"""verl plugin: registers the `arctic` V1 trainer mode and the `arctic` rollout replica.

verl 0.9.1 loads `verl.plugins` entry points with `EntryPoint.load()` (it imports the module and
never calls the object) and logs failures at DEBUG; `VERL_USE_EXTERNAL_MODULES=adapter_verl.plugin`
imports the module too. So importing this module registers, and every failure is logged at ERROR
(and re-raised where verl lets it surface).

Registration is lazy so that every process importing verl does not pay for verl's trainer stack:
the rollout replica is registered as a loader, and the trainer is registered right after
`verl.trainer.ppo.v1` finishes importing (or at once if it already is).
"""

from __future__ import annotations

import importlib
import importlib.abc
import logging
import sys
import threading
from collections.abc import Callable
from types import ModuleType

from adapter_verl.modes import ROLLOUT_NAME, TRAINER_MODE
from adapter_verl.verl_internals import REPLICA_MODULE, TRAINER_PACKAGE, registered_rollout_loader

logger = logging.getLogger("adapter_verl")

_lock = threading.Lock()
_registered: dict[str, bool] = {}
# The last registration error, kept so that `require_registered()` can name it later.
registration_error: BaseException | None = None


def _loud(what: str, error: BaseException) -> None:
    global registration_error
    registration_error = error
    logger.error(
        "adapter_verl: %s failed: %s: %s. verl will not offer it; fix the error above "
        "(is adapter-verl installed with its `cpu` or `gpu` extra in this environment?)",
        what,
        type(error).__name__,
        error,
        exc_info=error,
    )


def _load_replica_class() -> type:
    from adapter_verl.replica import ArcticRolloutReplica  # noqa: PLC0415 - verl plugin: imported while verl imports

    return ArcticRolloutReplica


def register_replica_now() -> None:
    """Register `actor_rollout_ref.rollout.name=arctic` (a loader: the class is imported on use)."""
    from verl.workers.rollout.replica import RolloutReplicaRegistry  # noqa: PLC0415 - verl plugin: imported while verl imports

    existing = registered_rollout_loader(ROLLOUT_NAME)
    if existing is not None and existing is not _load_replica_class:
        raise ValueError(
            f"rollout name {ROLLOUT_NAME!r} is already registered by {existing!r}: another plugin "
            "claims it; uninstall it or rename its rollout"
        )
    RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica_class)
    _registered[REPLICA_MODULE] = True


def register_trainer_now() -> type | None:
    """Import the trainer module: its decorator registers `trainer.v1.trainer_mode=arctic`.

    When `adapter_verl.trainer` is itself the importer of verl's trainer package (imported first),
    the hook fires while that module is half-initialised: its own decorator registers the mode when
    it finishes, and `require_registered()` records it then."""
    half_done = sys.modules.get("adapter_verl.trainer")
    if half_done is not None and not hasattr(half_done, "ArcticTrainer"):
        return None
    from adapter_verl.trainer import ArcticTrainer  # noqa: PLC0415 - verl plugin: imported while verl imports

    _registered[TRAINER_PACKAGE] = True
    return ArcticTrainer


_REGISTRATIONS: dict[str, tuple[str, Callable[[], object]]] = {
    REPLICA_MODULE: (f"registering rollout {ROLLOUT_NAME!r}", register_replica_now),
    TRAINER_PACKAGE: (f"registering trainer mode {TRAINER_MODE!r}", register_trainer_now),
}


def _run_registration(module_name: str) -> None:
    what, action = _REGISTRATIONS[module_name]
    try:
        action()
    except Exception as error:  # loud; verl's own modes keep working
        _loud(what, error)


class _AfterImportFinder(importlib.abc.MetaPathFinder):
    """Runs a registration right after one named verl module has finished executing."""

    def __init__(self, module_name: str) -> None:
        self.module_name = module_name

    def find_spec(self, fullname, path, target=None):  # type: ignore[override]
        if fullname != self.module_name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = None
        for finder in list(sys.meta_path):  # whichever finder owns verl (site-packages, editable, zip)
            find_spec = getattr(finder, "find_spec", None)
            spec = find_spec(fullname, path, target) if find_spec is not None else None
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            _loud(
                f"hooking {fullname}",
                ImportError(
                    f"no loader with exec_module for {fullname}: call adapter_verl.plugin.register() after importing it"
                ),
            )
            return spec
        inner = spec.loader
        module_name = self.module_name

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):  # type: ignore[override]
                return inner.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                inner.exec_module(module)
                _run_registration(module_name)

            def __getattr__(self, name: str):  # resources, source, ...: the real loader's
                return getattr(inner, name)

        spec.loader = _Loader()
        return spec


def _hook_pending() -> set[str]:
    return {f.module_name for f in sys.meta_path if isinstance(f, _AfterImportFinder)}


def register() -> None:
    """Register the `arctic` rollout replica and trainer mode with verl, each as soon as its verl
    module is imported. Idempotent. Errors are logged at ERROR and re-raised."""
    with _lock:
        pending = _hook_pending()
        for module_name, (what, action) in _REGISTRATIONS.items():
            if _registered.get(module_name) or module_name in pending:
                continue
            if module_name in sys.modules:
                try:
                    action()
                except Exception as error:
                    _loud(what, error)
                    raise
            else:
                sys.meta_path.insert(0, _AfterImportFinder(module_name))


def require_registered() -> None:
    """Make sure both registrations happened, importing verl's modules if needed; raise a
    `RuntimeError` naming the failure otherwise (entry points call this before handing over)."""
    try:
        register()
        for module_name in _REGISTRATIONS:
            importlib.import_module(module_name)
    except Exception as error:
        raise RuntimeError(
            f"adapter_verl registration failed: {type(error).__name__}: {error}; see the ERROR log above"
        ) from error
    if registration_error is not None:
        raise RuntimeError(
            f"adapter_verl registration failed: {type(registration_error).__name__}: "
            f"{registration_error}; see the ERROR log above"
        ) from registration_error
    missing = [name for name in _REGISTRATIONS if not _registered.get(name)]
    if missing:
        raise RuntimeError(f"adapter_verl: registration did not run after importing {missing}")


# Importing the module is what verl's plugin loader does: register now.
register()
