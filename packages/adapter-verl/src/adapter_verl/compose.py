"""verl's `ppo_trainer` config (or the one `--config-path`/`--config-name` select) composed with the
overrides that select the Arctic path.

The adapter adds (and `adapter_verl.main` prints) the overrides in `ARCTIC_DEFAULTS` that the user
did not give: the adapter's Hydra search path (its `remote_backend=arctic` group), the V1 trainer, the
`arctic` trainer mode and the `arctic` rollout. `compose_reporting` composes what it can: an override
verl's config has no field for (Hydra's "Could not override"), one Hydra cannot parse (a launcher's
placeholder) or a `+key` verl's config class for its group does not declare (verl's startup would fail
instantiating it) is reported with "did you mean" and left out, and the rest is still composed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import yaml
from arctic_rl_core.config.errors import suggest_key_among
from hydra import compose as hydra_compose
from hydra import initialize_config_dir, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from adapter_verl.command_line import ConfigSelection, override_key
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


def compose(overrides: Sequence[str], selection: ConfigSelection | None = None) -> DictConfig:
    """verl's `ppo_trainer` config (or the one `selection` names) composed with `overrides` (Hydra
    compose API, no run)."""
    selection = selection or ConfigSelection()
    GlobalHydra.instance().clear()
    if selection.folder is not None:
        overrides = with_selected_searchpath(overrides, selection)
        with initialize_config_dir(config_dir=str(selection.folder), version_base=None):
            return hydra_compose(config_name=selection.name, overrides=list(overrides))
    with initialize_config_module(config_module=selection.package, version_base=None):
        return hydra_compose(config_name=selection.name, overrides=list(overrides))


def with_selected_searchpath(overrides: Sequence[str], selection: ConfigSelection) -> list[str]:
    """A config outside verl's packages (a recipe's `config/` folder) names verl's configs by its own
    `hydra.searchpath` (often `file://verl/trainer/config`, relative to a verl checkout): the adapter's
    search path keeps those entries, and verl's installed package stands in for the relative one."""
    assert selection.folder is not None
    raw = yaml.safe_load((selection.folder / f"{selection.name}.yaml").read_text()) or {}
    entries = [str(e) for e in ((raw.get("hydra") or {}).get("searchpath") or [])]
    entries = ["pkg://verl.trainer.config" if e.startswith("file://verl/") else e for e in entries]
    if "pkg://verl.trainer.config" not in entries:
        entries.append("pkg://verl.trainer.config")
    out = []
    for override in overrides:
        if override_key(override) == "hydra.searchpath":
            key, _, value = override.partition("=")
            override = f"{key}={value.strip().removesuffix(']')},{','.join(entries)}]"
        out.append(override)
    return out


_NOT_IN_CONFIG = (re.compile(r"Could not override '([^']+)'"), re.compile(r"full_key: (\S+)"))


def compose_reporting(
    overrides: Sequence[str], selection: ConfigSelection | None = None
) -> tuple[DictConfig | None, list[str]]:
    """`compose`, with every override verl's config has no field for (or Hydra cannot parse) reported
    and left out, so that the rest is still composed and checked: (config or None, problems)."""
    remaining = list(overrides)
    problems: list[str] = []
    for _ in range(len(remaining) + 1):
        try:
            return compose(remaining, selection), problems
        except (HydraException, OmegaConfBaseException) as error:
            unparsable = [o for o in remaining if not parses(o)]
            for override in unparsable:
                problems.append(
                    f"{override}: Hydra cannot parse this override (a placeholder left in the launcher, or a "
                    "value with unquoted special characters). Fix: give the value, quoted if it holds =, <, >, "
                    "spaces or brackets"
                )
                remaining.remove(override)
            if unparsable:
                continue
            text = f"{error} {error.__cause__ or ''}"
            key = next((m.group(1) for pattern in _NOT_IN_CONFIG if (m := pattern.search(text))), None)
            culprit = next((o for o in remaining if key is not None and override_key(o) == key), None)
            if culprit is None:
                problems.append(f"verl's Hydra config: {error}".replace("\n", " "))
                return None, problems
            problems.append(unknown_key_problem(culprit, default_leaves()))
            remaining.remove(culprit)
    return None, problems


def parses(override: str) -> bool:
    try:
        OverridesParser.create().parse_overrides([override])
    except HydraException:
        return False
    return True


def config_class_accepts(key: str, existing: Mapping[str, Any]) -> bool:
    """Whether `+key` adds a field verl's config class for the group accepts (a group without a
    `_target_` is free-form: anything goes). verl instantiates each such group as a dataclass at
    startup, which raises on a field it does not declare, even one its YAML leaves out."""
    group, _, name = key.rpartition(".")
    target = existing.get(f"{group}._target_")
    if not isinstance(target, str):
        return True
    try:
        cls = get_class(target)
    except (ImportError, ValueError, AttributeError):
        return True
    return not dataclasses.is_dataclass(cls) or name in {f.name for f in dataclasses.fields(cls)}


def unknown_key_problem(override: str, existing: Mapping[str, Any], *, config_class: bool = False) -> str:
    """'key=value: not a field of verl 0.9.1's config. Fix: did you mean ...' for `override`."""
    key, value = override_key(override), override.partition("=")[2]
    known = {k for k in existing if not k.endswith("._target_")}
    known |= {p.rsplit(".", i)[0] for p in known for i in range(1, p.count(".") + 1)}
    group, _, name = key.rpartition(".")
    where = (
        f"{group} is a verl config class without a field {name!r} (verl's startup would fail instantiating it)"
        if config_class
        else "not a field of verl 0.9.1's config"
    )
    return f"{key}={value}: {where}. Fix: {suggest_key_among(sorted(known), group, name)}"


def leaves(config: Any) -> dict[str, Any]:
    """Every leaf of a verl config by dotted path, with its RAW value (an interpolation stays
    its `${...}` text, so a field that follows another compares equal to its default). An empty
    mapping is a leaf; lists are leaves."""
    found: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict) and value:
                walk(value, path)
            else:
                found[path] = value

    walk(OmegaConf.to_container(config, resolve=False), "")
    return found


@lru_cache(maxsize=1)
def default_config() -> DictConfig:
    """The installed verl's default `ppo_trainer` config with the Arctic selection (what every
    rejection compares against)."""
    return compose(with_arctic_defaults([])[0])


@lru_cache(maxsize=1)
def default_leaves() -> dict[str, Any]:
    return leaves(default_config())
