"""Launchers of verl's other entry points, with the entry point switched to `python -m adapter_verl.main`.

verl 0.9.1 ships two asynchronous entry points beside `verl.trainer.main_ppo`, each with its own Hydra
config on top of `ppo_trainer`: `verl.experimental.one_step_off_policy.main_ppo`
(`one_step_off_ppo_trainer`: a top-level `rollout.nnodes` / `rollout.n_gpus_per_node` pool) and
`verl.experimental.fully_async_policy.fully_async_main` (`fully_async_ppo_trainer`: the same pool plus
`async_training.*`). Their trainers run verl's own GPU workers; the Arctic path's asynchronous mode is
verl's V1 separate-async trainer (`trainer.v1.trainer_mode=separate_async`, README "verl's asynchronous
mode"). `translate` recognises such a command line (its config name, or its top-level keys) and
rewrites it onto that mode, with one notice per rewritten key, reading each entry point's defaults from
the installed verl's own config file:

- one step off: the rollout pool -> `actor_rollout_ref.rollout.{nnodes,n_gpus_per_node}`
  (`hybrid_engine=false`); a step's mini-batches are verl's `parameter_sync_step` updates before its one
  weight sync (`data.train_batch_size / ppo_mini_batch_size`); the batch trained at step g was generated
  with the weights of step g - 2, so `max_off_policy_threshold=2`;
- fully async: `trigger_parameter_sync_step x require_batches` mini-batch updates per sync
  (`parameter_sync_step`; `data.train_batch_size`, 0 in those launchers, = that x `ppo_mini_batch_size`);
  `staleness_threshold` s (extra samples, as a fraction of a sync's) lets a sample wait one more sync
  per started fraction: `max_off_policy_threshold = 2 + ceil(s)`; `rollout.total_rollout_steps` (prompts)
  -> `trainer.total_training_steps`; `partial_rollout` and the dynamic-resource scheduling have no
  counterpart (the arctic replicas never abort a request; there is no hybrid engine): notices.

Both entry points' configs set `bypass_mode=true` (old log-probs = the rollout's), `calculate_log_probs`
and an nccl checkpoint engine: kept unless the launcher set them.

The DAPO recipe (`recipe.dapo.main_dapo`, verl-recipe) runs verl's trainer with its own config on top of
`ppo_trainer`: `reward.reward_kwargs` (DAPO's overlong buffer, read by verl's `dapo` reward manager) is
declared there, and its older launchers spell the reward settings the way verl did before its reward
loop (`reward_model.reward_manager`, `reward_model.overlong_buffer.*`, with `max_resp_len` taken from
`data.max_response_length`). `dapo_reward_keys` rewrites them into verl 0.9.1's spelling (what verl's
own `migrate_legacy_reward_impl` does for the fully-async entry point; verl 0.9.1's `main_ppo` leaves
`reward_model.reward_manager` unread), each with a notice."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from adapter_verl.command_line import ConfigSelection, override_key, package_folder

A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"
SEP = "trainer.v1.separate_async"
SAMPLER = "trainer.v1.sampler"

FULLY_ASYNC = "fully_async"
ONE_STEP_OFF = "one_step_off"
# entry point -> (its config package, its config name, its module)
ENTRY_POINTS: dict[str, tuple[str, str, str]] = {
    FULLY_ASYNC: (
        "verl.experimental.fully_async_policy.config",
        "fully_async_ppo_trainer",
        "verl.experimental.fully_async_policy.fully_async_main",
    ),
    ONE_STEP_OFF: (
        "verl.experimental.one_step_off_policy.config",
        "one_step_off_ppo_trainer",
        "verl.experimental.one_step_off_policy.main_ppo",
    ),
}


@dataclass
class EntryTranslation:
    overrides: list[str]
    selection: ConfigSelection
    entry: str | None = None
    notices: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _value(override: str) -> Any:
    raw = override.partition("=")[2]
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def _entry_of(overrides: Sequence[str], selection: ConfigSelection) -> str | None:
    for entry, (package, name, _) in ENTRY_POINTS.items():
        if selection.package == package and selection.name.startswith(name.removesuffix("_trainer")):
            return entry
    keys = {override_key(o) for o in overrides}
    if any(k.startswith("async_training.") for k in keys):
        return FULLY_ASYNC
    if any(k.startswith("rollout.") for k in keys):
        return ONE_STEP_OFF
    return None


def _entry_defaults(entry: str) -> dict[str, Any]:
    """The entry point's own settings on top of ppo_trainer (its config file, as installed)."""
    package, name, _ = ENTRY_POINTS[entry]
    folder = package_folder(package)
    if folder is None:
        return {}
    data = yaml.safe_load(Path(folder, f"{name}.yaml").read_text()) or {}
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict):
                walk(value, path)
            else:
                flat[path] = value

    walk({k: v for k, v in data.items() if k not in ("hydra", "defaults")}, "")
    return flat


def translate(overrides: Sequence[str], selection: ConfigSelection) -> EntryTranslation:
    """The command line rewritten onto the adapter's separate-async mode when it is one of verl's
    asynchronous entry points' (unchanged otherwise)."""
    overrides, dapo_notices = dapo_reward_keys(overrides)
    entry = _entry_of(overrides, selection)
    if entry is None:
        return EntryTranslation(list(overrides), selection, notices=dapo_notices)
    _, config_name, module = ENTRY_POINTS[entry]
    megatron = "megatron" in selection.name
    out = EntryTranslation(
        [],
        ConfigSelection(name="ppo_megatron_trainer") if megatron else ConfigSelection(),
        entry=entry,
        notices=[
            *dapo_notices,
            f"{module}'s settings ({config_name}) run on verl's V1 separate-async trainer, the Arctic path's "
            "asynchronous mode: trainer.v1.trainer_mode=separate_async; each rewritten key below",
        ],
    )
    given: dict[str, Any] = {}
    for override in overrides:
        given[override_key(override)] = _value(override)
    settings = {**_entry_defaults(entry), **given}
    entry_keys = {k for k in settings if k.startswith(("rollout.", "async_training."))}
    rewritten: dict[str, Any] = {}

    def put(key: str, value: Any, why: str, *, keep_users: bool = True) -> None:
        if keep_users and key in given:
            return
        rewritten[key] = value
        out.notices.append(f"{key}={_text(value)}: {why}")

    put("trainer.v1.trainer_mode", "separate_async", "the asynchronous mode", keep_users=False)
    put(
        "actor_rollout_ref.hybrid_engine", False, "sampling has its own GPUs (the entry point's rollout pool)"
    )
    for name in ("nnodes", "n_gpus_per_node"):
        if f"rollout.{name}" in settings:
            put(f"{R}.{name}", settings[f"rollout.{name}"], f"from rollout.{name}", keep_users=False)
    for key in (
        f"{R}.calculate_log_probs",
        f"{R}.checkpoint_engine.backend",
        "algorithm.rollout_correction.bypass_mode",
    ):
        if key in settings:
            put(key, settings[key], f"{config_name}'s setting")
    mini = settings.get(f"{A}.ppo_mini_batch_size")
    if entry == ONE_STEP_OFF:
        _one_step_off(settings, given, mini, put, out)
    else:
        _fully_async(settings, given, mini, put, out)
    for key in sorted(entry_keys):
        if key not in ("rollout.nnodes", "rollout.n_gpus_per_node") and key in given and key not in _USED:
            out.notices.append(
                f"{key}={_text(given[key])}: {_NO_COUNTERPART.get(key.rpartition('.')[2], _NONE)}"
            )
    for override in overrides:
        key = override_key(override)
        if key in entry_keys or key in rewritten or (key == "data.gen_batch_size" and entry == FULLY_ASYNC):
            continue
        out.overrides.append(override)
    out.overrides.extend(f"{k}={_text(v)}" for k, v in rewritten.items())
    return out


# entry-point keys the translation reads
_USED = {
    "async_training.trigger_parameter_sync_step",
    "async_training.require_batches",
    "async_training.staleness_threshold",
    "rollout.total_rollout_steps",
}
_NONE = "no counterpart in verl's separate-async trainer on the Arctic path (not applied)"
_NO_COUNTERPART = {
    "partial_rollout": "the arctic rollout replicas never abort a request at a weight sync: a request in flight "
    "finishes with the weights it started on (its rows' versions are checked by the staleness gate)",
    "use_dynamic_resource_scheduling": "no hybrid replicas on the training GPUs on the Arctic path "
    "(actor_rollout_ref.hybrid_engine=false): not applied",
    "use_trainer_do_validate": "verl's separate-async trainer validates on its own schedule (trainer.test_freq)",
    "concurrent_samples_per_replica": "the arctic replicas batch requests themselves (rollout.max_num_seqs)",
}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _one_step_off(settings, given, mini, put, out) -> None:
    batch = settings.get("data.train_batch_size")
    if isinstance(batch, int) and isinstance(mini, int) and mini > 0 and batch % mini == 0:
        put(
            f"{SEP}.parameter_sync_step",
            batch // mini,
            f"one weight sync per step of data.train_batch_size / ppo_mini_batch_size = {batch} / {mini} updates",
        )
    put(
        f"{SAMPLER}.max_off_policy_threshold",
        2,
        "one step off: the batch trained at step g was generated with the weights synced after step g - 2",
    )


def _fully_async(settings, given, mini, put, out) -> None:
    trigger = int(settings.get("async_training.trigger_parameter_sync_step") or 1)
    require = int(settings.get("async_training.require_batches") or 1)
    staleness = float(settings.get("async_training.staleness_threshold") or 0.0)
    updates = trigger * require
    put(
        f"{SEP}.parameter_sync_step",
        updates,
        f"async_training.trigger_parameter_sync_step x require_batches = {trigger} x {require} mini-batch updates "
        "per weight sync",
        keep_users=False,
    )
    if isinstance(mini, int) and mini > 0:
        put(
            "data.train_batch_size",
            updates * mini,
            f"{updates} updates x ppo_mini_batch_size {mini} prompts per step",
            keep_users=given.get("data.train_batch_size") != 0,
        )
        total = settings.get("rollout.total_rollout_steps")
        if isinstance(total, int) and total > 0:
            put(
                "trainer.total_training_steps",
                math.ceil(total / (updates * mini)),
                f"rollout.total_rollout_steps={total} prompts / {updates * mini} per step",
            )
    put(
        f"{SAMPLER}.max_off_policy_threshold",
        2 + math.ceil(staleness),
        f"async_training.staleness_threshold={staleness:g}: a sample waits at most 1 + ceil({staleness:g}) weight "
        "syncs before it is trained",
    )


OVERLONG = "reward_model.overlong_buffer."


def dapo_reward_keys(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """The DAPO recipe's reward settings in verl 0.9.1's spelling: (overrides, notices)."""
    out: list[str] = []
    notices: list[str] = []
    response_length = next(
        (o.partition("=")[2] for o in overrides if override_key(o) == "data.max_response_length"), None
    )
    for override in overrides:
        key, value = override_key(override), override.partition("=")[2]
        if key == "reward_model.reward_manager":
            new = f"reward.reward_manager.name={value}"
        elif key.startswith("reward_model.reward_kwargs."):
            new = f"+reward.reward_kwargs.{key.removeprefix('reward_model.reward_kwargs.')}={value}"
        elif key.startswith(OVERLONG):
            new = f"+reward.reward_kwargs.overlong_buffer_cfg.{key.removeprefix(OVERLONG)}={value}"
        elif key.startswith("reward.reward_kwargs.") and not override.startswith("+"):
            new = f"+{override}"
        else:
            out.append(override)
            continue
        out.append(new)
        notices.append(
            f"{key}={value}: now {new} (verl 0.9.1's spelling of the DAPO recipe's reward settings)"
        )
    wants_length = any(override_key(o).startswith("reward.reward_kwargs.overlong_buffer_cfg.") for o in out)
    if (
        wants_length
        and "reward.reward_kwargs.max_resp_len" not in {override_key(o) for o in out}
        and response_length
    ):
        out.append(f"+reward.reward_kwargs.max_resp_len={response_length}")
        notices.append(
            f"+reward.reward_kwargs.max_resp_len={response_length}: data.max_response_length, as the DAPO recipe's "
            "trainer gave verl's dapo reward manager (it needs it with the overlong buffer)"
        )
    return out, notices
