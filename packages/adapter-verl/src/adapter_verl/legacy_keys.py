"""Legacy keys: launchers of Arctic-Platform's verl integration (`arctic_platform/integrations/verl/`), the
integration this adapter replaces, keep working.

That integration targets a verl fork (`verl.remote_backend`, `trainer.remote_backend=arctic`) and
reads a flat `remote_backend` Hydra group (`config/remote_backend/arctic.yaml`: `colocate`,
`training_gpus`, `train.zorro_train.enable`, ...). `translate` rewrites such overrides before Hydra
composes the config: each `remote_backend.<key>` becomes the verl field or core field that means the
same here, with a one-line notice naming the new key, or a problem naming the exact replacement where
the meaning differs. GPU counts are checked against verl's own fields after composition
(`check_gpu_counts`): on this adapter they are `trainer.nnodes x trainer.n_gpus_per_node`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from adapter_verl.modes import TRAINER_MODE

CORE = "++remote_backend.core."
A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"

# Fork-only top-level overrides: dropped with a notice (what replaces them here).
DROPPED: dict[str, str] = {
    "trainer.remote_backend": f"trainer.v1.trainer_mode={TRAINER_MODE} (added by adapter_verl.main)",
    "trainer.use_legacy_worker_impl": "nothing: verl 0.9.1 has no such field; the arctic trainer's workers are the adapter's",
}


@dataclass
class LegacyOverrides:
    overrides: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # the legacy GPU counts, checked against verl's fields once the config is composed
    gpu_counts: dict[str, int] = field(default_factory=dict)


def _value(raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def _yaml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _device_on(raw: str) -> bool | None:
    value = str(_value(raw)).lower()
    return {"none": False, "cpu": True}.get(value)


# remote_backend.<key> -> (new override(s) for the value, or None when checked after composition)
Alias = Callable[[str], list[str]]


def _core(path: str, convert: Callable[[str], Any] = _value) -> Alias:
    return lambda raw: [f"{CORE}{path}={_yaml(convert(raw))}"]


def _verl(path: str, convert: Callable[[str], Any] = _value) -> Alias:
    return lambda raw: [f"{path}={_yaml(convert(raw))}"]


def _offload(verl_path: str) -> Alias:
    def alias(raw: str) -> list[str]:
        on = _device_on(raw)
        if on is None:
            raise ValueError(
                f"device must be none or cpu (the Arctic server offloads to CPU only); set {verl_path}"
            )
        return [f"{verl_path}={_yaml(on)}"]

    return alias


def _max_rollouts(raw: str) -> list[str]:
    if "${" in raw:  # the legacy default `${actor_rollout_ref.rollout.n}` is the core default
        return []
    return [f"{CORE}zorro.max_rollouts={raw}"]


def _fca(raw: str) -> list[str]:
    on = bool(_value(raw))
    return [
        f"{CORE}arctic_inference.fca={_yaml(on)}",
        *([f"{CORE}arctic_inference.enable=true"] if on else []),
    ]


def _speculative(raw: str) -> list[str]:
    model = _value(raw)
    if not model:
        return [f"{CORE}arctic_inference.speculative_model=null"]
    return [f"{CORE}arctic_inference.speculative_model={model}", f"{CORE}arctic_inference.enable=true"]


def _protocol(raw: str) -> list[str]:
    value = str(_value(raw))
    if value == "ray":
        return [f"{CORE}backend.kind=ray"]
    if value == "http":
        raise ValueError(
            "the legacy integration launched a local HTTP server on port 7000 by itself; here say so: "
            f"{CORE}backend.kind=http {CORE}backend.launch_local_server=true {CORE}backend.port=7000"
        )
    raise ValueError(f"protocol must be ray or http: set {CORE}backend.kind")


ALIASES: dict[str, tuple[str, Alias]] = {
    # key: (the new key named in the notice, translation)
    "colocate": ("actor_rollout_ref.hybrid_engine", _verl("actor_rollout_ref.hybrid_engine")),
    "sampling_tp_size": (f"{R}.tensor_model_parallel_size", _verl(f"{R}.tensor_model_parallel_size")),
    "log_prob_gpus": ("remote_backend.core.placement.log_prob_gpus", _core("placement.log_prob_gpus")),
    "weight_sync.cuda_ipc": ("remote_backend.core.weight_sync.cuda_ipc", _core("weight_sync.cuda_ipc")),
    "weight_sync.low_memory": ("remote_backend.core.weight_sync.low_memory", _core("weight_sync.low_memory")),
    "train.load_balancer": ("remote_backend.core.zorro.load_balancer", _core("zorro.load_balancer")),
    "train.zorro_train.enable": ("remote_backend.core.zorro.enable", _core("zorro.enable")),
    "train.zorro_train.max_rollouts": ("remote_backend.core.zorro.max_rollouts", _max_rollouts),
    "train.logits.optimization": (
        "remote_backend.core.zorro.logits_optimization",
        _core("zorro.logits_optimization"),
    ),
    "train.logits.optimization_peak_mem_size_in_gib": (
        "remote_backend.core.zorro.logits_peak_mem_gib",
        _core("zorro.logits_peak_mem_gib"),
    ),
    "train.logits.compute_in_fp32": (
        "remote_backend.core.zorro.logits_compute_in_fp32",
        _core("zorro.logits_compute_in_fp32"),
    ),
    "train.logits.compute_from_fp32_inputs": (
        "remote_backend.core.zorro.logits_compute_from_fp32_inputs",
        _core("zorro.logits_compute_from_fp32_inputs"),
    ),
    "train.determinism.full": (
        f"{A}.fsdp_config.full_determinism",
        _verl(f"{A}.fsdp_config.full_determinism"),
    ),
    "train.determinism.seed": ("data.seed", _verl("data.seed")),
    "train.deepspeed.zero_optimization.stage": (
        "remote_backend.core.deepspeed.zero_stage",
        _core("deepspeed.zero_stage"),
    ),
    "train.deepspeed.zero_optimization.offload_optimizer.device": (
        f"{A}.fsdp_config.optimizer_offload",
        _offload(f"{A}.fsdp_config.optimizer_offload"),
    ),
    "train.deepspeed.zero_optimization.offload_param.device": (
        f"{A}.fsdp_config.param_offload",
        _offload(f"{A}.fsdp_config.param_offload"),
    ),
    "rollout.zorro_inference.enable": ("remote_backend.core.arctic_inference.fca", _fca),
    "rollout.speculative_decoding.model": (
        "remote_backend.core.arctic_inference.speculative_model",
        _speculative,
    ),
    "comms.protocol": ("remote_backend.core.backend.kind", _protocol),
    "comms.drop_position_ids": (
        "remote_backend.core.wire.drop_position_ids",
        _core("wire.drop_position_ids"),
    ),
}
GPU_COUNTS = ("training_gpus", "sampling_gpus")
OURS = ("core", "trace_dir")


def _split(override: str) -> tuple[str, str, str]:
    """(prefix, key, raw value) of a Hydra override such as `++a.b=c`."""
    key, _, raw = override.partition("=")
    stripped = key.lstrip("+~")
    return key[: len(key) - len(stripped)], stripped, raw


def translate(overrides: Sequence[str]) -> LegacyOverrides:
    """Rewrite the legacy `remote_backend.*` and fork-only overrides (others pass unchanged)."""
    out = LegacyOverrides()
    given = {_split(o)[1]: _split(o)[2] for o in overrides}
    for override in overrides:
        prefix, key, raw = _split(override)
        if key in DROPPED:
            out.notices.append(f"{key}={raw}: dropped (Arctic-Platform's verl fork); here: {DROPPED[key]}")
            continue
        if key == "remote_backend" and prefix == "":
            out.overrides.append(f"+remote_backend={raw}")
            out.notices.append(
                f"remote_backend={raw}: selected as +remote_backend={raw} (verl 0.9.1 adds a group with +)"
            )
            continue
        if not key.startswith("remote_backend.") or key.split(".")[1] in OURS:
            out.overrides.append(override)
            continue
        old = key.removeprefix("remote_backend.")
        if old in GPU_COUNTS:
            out.gpu_counts[old] = int(_value(raw))
            continue
        if old.startswith("train.deepspeed.") and old not in ALIASES:
            rest = old.removeprefix("train.deepspeed.")
            new_key, alias = (
                f"remote_backend.core.deepspeed.config_overrides.{rest}",
                _core(f"deepspeed.config_overrides.{rest}"),
            )
        elif old in ALIASES:
            new_key, alias = ALIASES[old]
        else:
            out.problems.append(
                f"{key}={raw}: not a key of Arctic-Platform's verl integration nor of this adapter; core settings "
                "go under remote_backend.core.<group>.<knob> (see the verl mapping table in adapter-verl's README)"
            )
            continue
        try:
            new = alias(raw)
        except ValueError as error:
            out.problems.append(f"{key}={raw}: {error}")
            continue
        clash = [
            o
            for o in new
            if not o.startswith("+")
            and _split(o)[1] in given
            and _value(given[_split(o)[1]]) != _value(_split(o)[2])
        ]
        if clash:
            target = _split(clash[0])[1]
            out.problems.append(
                f"{key}={raw}: says {_split(clash[0])[2]} but {target}={given[target]} is also given: drop {key}"
            )
            continue
        out.overrides.extend(new)
        out.notices.append(
            f"{key}={raw}: now {new_key}" + (f" ({' '.join(new)})" if new else " (the default)")
        )
    # the legacy sampling GPUs when not colocated: verl's standalone rollout pool
    colocate = _value(given.get("remote_backend.colocate", "true"))
    sampling = out.gpu_counts.get("sampling_gpus")
    if colocate is False and sampling is not None:
        for verl_key, value in ((f"{R}.nnodes", 1), (f"{R}.n_gpus_per_node", sampling)):
            if verl_key not in given:
                out.overrides.append(f"{verl_key}={value}")
    return out


def check_gpu_counts(translation: LegacyOverrides, config: Any) -> tuple[list[str], list[str]]:
    """(notices, problems): the legacy GPU counts against verl's fields (composed config)."""
    notices: list[str] = []
    problems: list[str] = []
    trainer = config.trainer
    training = int(trainer.nnodes) * int(trainer.n_gpus_per_node)
    colocated = bool(config.actor_rollout_ref.get("hybrid_engine", True))
    rollout = config.actor_rollout_ref.rollout
    sampling = training if colocated else int(rollout.nnodes or 0) * int(rollout.n_gpus_per_node or 0)
    where = {
        "training_gpus": (training, "trainer.nnodes x trainer.n_gpus_per_node"),
        "sampling_gpus": (
            sampling,
            "trainer.nnodes x trainer.n_gpus_per_node (colocated: the hybrid engine)"
            if colocated
            else f"{R}.nnodes x {R}.n_gpus_per_node",
        ),
    }
    for key, count in translation.gpu_counts.items():
        have, fields = where[key]
        if count == have:
            notices.append(f"remote_backend.{key}={count}: now {fields} (= {have})")
        else:
            problems.append(
                f"remote_backend.{key}={count}: the Arctic {key.split('_')[0]} GPUs are {fields} = {have} here: "
                f"set those verl fields to {count} GPUs and drop remote_backend.{key}"
            )
    return notices, problems
