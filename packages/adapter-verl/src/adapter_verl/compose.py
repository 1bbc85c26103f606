"""verl's `ppo_trainer` config composed with the overrides that select the Arctic path.

The adapter adds (and `adapter_verl.main` prints) the overrides in `ARCTIC_DEFAULTS` that the user
did not give: the adapter's Hydra search path (its `remote_backend=arctic` group), the V1 trainer, the
`arctic` trainer mode and the `arctic` rollout.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra import compose as hydra_compose
from hydra import initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from adapter_verl.modes import ROLLOUT_NAME, TRAINER_MODE

SEARCHPATH_ENTRY = "pkg://adapter_verl.hydra_config"
SEARCHPATH = f"hydra.searchpath=[{SEARCHPATH_ENTRY}]"
# key -> the override the adapter adds when the user did not set that key
ARCTIC_DEFAULTS: dict[str, str] = {
    "hydra.searchpath": SEARCHPATH,
    "remote_backend": "+remote_backend=arctic",
    "trainer.use_v1": "trainer.use_v1=true",
    "trainer.v1.trainer_mode": f"trainer.v1.trainer_mode={TRAINER_MODE}",
    "actor_rollout_ref.rollout.name": f"actor_rollout_ref.rollout.name={ROLLOUT_NAME}",
}


def override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def with_arctic_defaults(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """`overrides` plus the Arctic selection overrides the user did not give; returns (all, added)."""
    given = {override_key(o) for o in overrides}
    added = [value for key, value in ARCTIC_DEFAULTS.items() if key not in given]
    return [*added, *overrides], added


def merge_searchpath(override: str) -> tuple[str, str | None]:
    """A user's `hydra.searchpath=[...]` with the adapter's entry first (its `remote_backend/arctic`
    group must win over a same-named group elsewhere); returns (override, notice)."""
    key, _, raw = override.partition("=")
    entries = [
        e.strip().strip("'\"")
        for e in raw.strip().removeprefix("[").removesuffix("]").split(",")
        if e.strip()
    ]
    if SEARCHPATH_ENTRY in entries:
        return override, None
    merged = [SEARCHPATH_ENTRY, *entries]
    return (
        f"{key}=[{','.join(merged)}]",
        f"hydra.searchpath: {SEARCHPATH_ENTRY} added before yours ({','.join(entries)})",
    )


def compose(overrides: Sequence[str]) -> DictConfig:
    """verl's `ppo_trainer` config composed with `overrides` (Hydra compose API, no run)."""
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))
