"""The verl plugin: found through verl's own entry-point loading, registers the `arctic` trainer mode
and rollout replica, keeps sync semantics, and fails loudly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import pytest


def test_entry_point_is_declared_in_the_group_verl_loads():
    (ep,) = [ep for ep in entry_points(group="verl.plugins") if ep.name == "arctic"]
    assert ep.value == "adapter_verl.plugin:register"


def test_importing_verl_registers_trainer_mode_and_rollout_replica():
    import verl  # noqa: F401  (runs verl's plugin discovery)
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls
    from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry

    trainer_cls = get_trainer_cls("arctic")
    assert trainer_cls.__name__ == "ArcticTrainer"
    assert issubclass(trainer_cls, PPOTrainerSync)
    assert get_trainer_cls("sync") is PPOTrainerSync  # stock modes untouched
    replica_cls = RolloutReplicaRegistry.get("arctic")
    assert replica_cls.__name__ == "ArcticRolloutReplica"
    assert issubclass(replica_cls, RolloutReplica)


def test_register_is_idempotent_and_require_registered_passes():
    import verl  # noqa: F401
    from adapter_verl import plugin
    from verl.trainer.ppo.v1 import get_trainer_cls

    before = get_trainer_cls("arctic")
    plugin.register()
    plugin.register()
    plugin.require_registered()
    assert get_trainer_cls("arctic") is before
    assert plugin.registration_error is None


def test_trainer_reports_sync_mode_whatever_name_selected_it():
    from adapter_verl.trainer import ArcticTrainer

    trainer = ArcticTrainer.__new__(ArcticTrainer)
    trainer.trainer_mode = "arctic"  # what PPOTrainer.__init__ assigns from the config
    assert trainer.trainer_mode == "sync"
    assert trainer.selected_mode == "arctic"
    with pytest.raises(ValueError, match=r"trainer.v1.trainer_mode='colocate_async'"):
        trainer.trainer_mode = "colocate_async"


def _run(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=180,
    )


def test_failed_registration_is_loud_and_stock_modes_survive():
    # Make the trainer module unimportable, then let verl load its plugins as it always does.
    out = _run(
        """
        import sys
        sys.modules["adapter_verl.trainer"] = None
        import verl
        from verl.trainer.ppo.v1 import get_trainer_cls
        assert get_trainer_cls("sync").__name__ == "PPOTrainerSync"
        try:
            get_trainer_cls("arctic")
        except ValueError as e:
            print("UNKNOWN-MODE", e)
        from adapter_verl import plugin
        try:
            plugin.require_registered()
        except RuntimeError as e:
            print("REQUIRE", e)
        """
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ERROR" in out.stderr
    assert "adapter_verl: registering trainer mode 'arctic' failed: ModuleNotFoundError" in out.stderr
    assert "UNKNOWN-MODE Unknown trainer 'arctic'" in out.stdout
    assert "REQUIRE adapter_verl registration failed: ModuleNotFoundError" in out.stdout


def test_external_modules_variable_registers_without_entry_point_discovery():
    out = _run(
        """
        import verl
        from verl.trainer.ppo.v1 import get_trainer_cls
        from verl.workers.rollout.replica import RolloutReplicaRegistry
        print(get_trainer_cls("arctic").__name__, RolloutReplicaRegistry.get("arctic").__name__)
        """,
        VERL_USE_EXTERNAL_PLUGINS="none",
        VERL_USE_EXTERNAL_MODULES="adapter_verl.plugin",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["ArcticTrainer", "ArcticRolloutReplica"]


def test_importing_the_trainer_module_first_still_registers():
    # adapter_verl.trainer imports verl's trainer package, whose import hook would import the
    # half-initialised adapter_verl.trainer again: no error, and the mode is registered
    out = _run(
        """
        import adapter_verl.trainer
        from adapter_verl.plugin import require_registered
        from verl.trainer.ppo.v1 import get_trainer_cls
        require_registered()
        print(get_trainer_cls("arctic").__name__)
        """
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "registering trainer mode 'arctic' failed" not in out.stderr, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "ArcticTrainer"
