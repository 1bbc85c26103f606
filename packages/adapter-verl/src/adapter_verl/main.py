"""`python -m adapter_verl.main <verl overrides>`: verl's `main_ppo` V1 path on Arctic RL.

Adds the overrides that select the Arctic path (printed, never silent), checks the composed config
with `adapter_verl.config.check_supported` before any Ray start-up, turns off Ray's `uv run`
runtime-env hook (see `keep_ray_off_uv_run`), then hands the same argv to verl's own Hydra entry
point.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from adapter_verl.verl_internals import turn_off_ray_uv_hook_constant

RAY_UV_HOOK_ENV = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"

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


def keep_ray_off_uv_run() -> str | None:
    """Turn off Ray's `uv run` runtime-env hook for this process; returns the notice to print (None
    when the user set `RAY_ENABLE_UV_RUN_RUNTIME_ENV` to a false value themselves).

    verl 0.9.1 calls `ray.init(runtime_env={"working_dir": None, ...})`; when the driver runs under
    `uv run` (every recipe, and `uv run arctic-rl demo --framework verl`), Ray's hook, on by default,
    rejects the None working_dir with `TypeError: path_or_uri must be a string`. Without the hook,
    Ray's workers run the cluster's Python environment: the driver's for a local cluster, the one
    `ray start` ran from on a multi-node cluster (start it from the locked environment)."""
    value = os.environ.get(RAY_UV_HOOK_ENV)
    if value is not None:
        if value.strip().lower() in ("0", "false", "no", "off", ""):
            return None
        raise SystemExit(
            f"adapter_verl: {RAY_UV_HOOK_ENV}={value!r} cannot run verl 0.9.1 under `uv run`: verl passes "
            "runtime_env working_dir=None, which Ray's uv-run hook rejects. Unset it (the adapter sets 0) and "
            "start the Ray cluster from the locked environment"
        )
    os.environ[RAY_UV_HOOK_ENV] = "0"
    turn_off_ray_uv_hook_constant()  # Ray reads the variable when it is imported: maybe done here
    return (
        f"adapter_verl: {RAY_UV_HOOK_ENV}=0 (verl passes runtime_env working_dir=None, which Ray's "
        "uv-run hook rejects; Ray workers run the cluster's Python environment)"
    )


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
    notice = keep_ray_off_uv_run()
    if notice:
        print(notice, file=sys.stderr)
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
