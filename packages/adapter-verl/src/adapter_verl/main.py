"""`python -m adapter_verl.main <verl overrides>`: verl's `main_ppo` V1 path on Arctic RL.

Adds the overrides that select the Arctic path (printed, never silent), checks the composed config
with `adapter_verl.config.check_supported` before any Ray start-up, then hands the same argv to
verl's own Hydra entry point.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

SEARCHPATH = "hydra.searchpath=[pkg://adapter_verl.hydra_config]"
# key -> the override the adapter adds when the user did not set that key
ARCTIC_DEFAULTS: dict[str, str] = {
    "hydra.searchpath": SEARCHPATH,
    "remote_backend": "+remote_backend=arctic",
    "trainer.use_v1": "trainer.use_v1=true",
    "trainer.v1.trainer_mode": "trainer.v1.trainer_mode=arctic",
    "actor_rollout_ref.rollout.name": "actor_rollout_ref.rollout.name=arctic",
    # verl defaults to TP 2, which gives zero replicas with one forwarder worker
    "actor_rollout_ref.rollout.tensor_model_parallel_size": (
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1"
    ),
}


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def with_arctic_defaults(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """`overrides` plus the Arctic selection overrides the user did not give; returns (all, added)."""
    given = {_override_key(o) for o in overrides}
    added = [value for key, value in ARCTIC_DEFAULTS.items() if key not in given]
    return [*added, *overrides], added


def compose(overrides: Sequence[str]):
    """verl's `ppo_trainer` config composed with `overrides` (Hydra compose API, no run)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))


def main(argv: Sequence[str] | None = None) -> None:
    from adapter_verl.config import UnsupportedVerlSettingError, check_supported
    from adapter_verl.plugin import require_registered

    user = list(sys.argv[1:] if argv is None else argv)
    overrides, added = with_arctic_defaults(user)
    if added:
        print(f"adapter_verl: adding {' '.join(added)}", file=sys.stderr)
    problems = check_supported(compose(overrides))
    if problems:
        raise SystemExit(str(UnsupportedVerlSettingError(problems)))
    require_registered()

    from verl.trainer import main_ppo

    sys.argv = [sys.argv[0], *overrides]
    main_ppo.main()


if __name__ == "__main__":
    main()
