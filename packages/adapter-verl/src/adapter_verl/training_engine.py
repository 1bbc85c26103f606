"""verl's choice of training engine, refused once when it is not the FSDP family.

On the Arctic path the training job is DeepSpeed (ZeRO data parallelism): verl's FSDP settings have
DeepSpeed counterparts (offload, ZeRO stage, Ulysses, kernels) and are mapped, whatever FSDP flavour
the launcher names (`fsdp`, `fsdp2`, `fsdp_turbo`). verl's other engines (Megatron-Core, Megatron
Lite, VeOmni, TorchTitan) bring their own parallelism (tensor / pipeline / expert / context) and
config trees that the DeepSpeed job cannot honour. A launcher selects one by `model_engine=<name>`, a
Megatron config (`--config-name=ppo_megatron_trainer`), an actor config group
(`actor@actor_rollout_ref.actor=<name>`) or `*.strategy=<name>`; `refuse` finds the selection before
Hydra composes, reports it as ONE problem naming the engine, and returns the command line as verl's
FSDP engine would take it (the selection and the engine's own settings removed), so that every other
setting is still checked in the same round."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from adapter_verl.command_line import ConfigSelection, override_key

FSDP_FAMILY = ("fsdp", "fsdp2", "fsdp_turbo", "dp")
ENGINES = {
    "megatron": "Megatron-Core",
    "mcore": "Megatron-Core",
    "megatron_lite": "Megatron Lite",
    "mlite": "Megatron Lite",
    "veomni": "VeOmni",
    "torchtitan": "TorchTitan",
    "automodel": "NeMo AutoModel",
    "mindspeed": "MindSpeed",
}
# config-path segments that hold one engine's own settings (dropped with the selection)
# (the optimizer's overrides are engine-specific: Megatron's OptimizerConfig, FSDP's torch optimizer kwargs)
ENGINE_SEGMENTS = (
    "megatron", "veomni", "torchtitan", "mcore", "engine", "mindspeed", "automodel", "override_optimizer_config",
)  # fmt: skip
STRATEGY_KEYS = (
    "actor_rollout_ref.actor.strategy",
    "actor_rollout_ref.ref.strategy",
    "critic.strategy",
    "actor_rollout_ref.actor.fsdp_config.strategy",
    "actor_rollout_ref.ref.fsdp_config.strategy",
    "critic.model.fsdp_config.strategy",
)
GROUP_KEYS = ("actor@actor_rollout_ref.actor", "ref@actor_rollout_ref.ref", "critic@critic")
FSDP_GROUPS = {"dp_actor", "actor", "dp_ref", "ref", "dp_critic", "critic"}


@dataclass
class EngineCheck:
    overrides: list[str]
    selection: ConfigSelection
    problem: str | None = None
    dropped: list[str] = field(default_factory=list)


def _engine_name(value: str) -> str:
    value = value.strip().strip("'\"")
    if value.startswith("actor_rollout_ref."):  # an engine's own setting: its segment names the engine
        value = next((p for p in value.split(".") if p in ENGINES), value)
    for key, name in ENGINES.items():
        if key in value.lower():
            return name
    return value


def _selection(
    overrides: Sequence[str], selection: ConfigSelection, config_name: str | None
) -> tuple[str, str] | None:
    """(the field as typed, its value) that selects a non-FSDP engine, or None."""
    for name in (selection.name, config_name or ""):
        if "megatron" in name:
            return "--config-name", name.removesuffix(".yaml")
    for override in overrides:
        key, value = override_key(override), override.partition("=")[2].strip().strip("'\"")
        if key == "model_engine" and value not in FSDP_FAMILY:
            return "model_engine", value
        if key in GROUP_KEYS and value not in FSDP_GROUPS:
            return key, value
        if key in STRATEGY_KEYS and value and value not in FSDP_FAMILY:
            return key, value
    for override in overrides:  # an engine's own settings (a recipe config that selected it)
        parts = override_key(override).split(".")
        if parts[0] == "actor_rollout_ref" and len(parts) > 2 and parts[2] in ENGINES:
            return override_key(override), override.partition("=")[2]
    return None


def _engine_setting(key: str, fsdp_keys: set[str], addition: bool) -> bool:
    """Whether an override belongs to the refused engine (its own tree, or a field FSDP's config lacks)."""
    parts = key.split(".")
    if any(p in ENGINE_SEGMENTS for p in parts[1:]):
        return True
    return not addition and key not in fsdp_keys


def refuse(
    overrides: Sequence[str],
    selection: ConfigSelection,
    fsdp_keys: Iterable[str],
    config_name: str | None = None,
) -> EngineCheck:
    """The engine refusal (None when the command line trains with verl's FSDP engine). `config_name`:
    the `--config-name` as typed (a recipe's Megatron config may not be found at all)."""
    found = _selection(overrides, selection, config_name)
    if found is None:
        return EngineCheck(list(overrides), selection)
    field_name, value = found
    engine = _engine_name(value)
    known = set(fsdp_keys)
    kept: list[str] = []
    dropped: list[str] = []
    for override in overrides:
        key = override_key(override)
        selecting = key in ("model_engine", *GROUP_KEYS) or (
            key in STRATEGY_KEYS and key != "critic.strategy"
        )
        if selecting or key == "critic.strategy" or _engine_setting(key, known, override.startswith("+")):
            dropped.append(override)
        else:
            kept.append(override)
    typed = f"{field_name}={value}"
    own = [d for d in dropped if override_key(d) != field_name]
    problem = (
        f"{typed}: verl's {engine} training engine brings its own parallelism (tensor / pipeline / expert / "
        "context) and config tree; the Arctic training job is DeepSpeed ZeRO, which verl's FSDP settings map "
        f"onto. Fix: remove {typed}"
        + (
            f" and the engine's own settings ({len(own)}, e.g. {override_key(own[-1])}; not checked)"
            if own
            else ""
        )
        + "; size the run with verl's FSDP fields (actor_rollout_ref.actor.fsdp_config.param_offload / "
        "optimizer_offload, +remote_backend.core.deepspeed.zero_stage=3 for the largest models)"
    )
    return EngineCheck(kept, ConfigSelection(), problem, dropped)
