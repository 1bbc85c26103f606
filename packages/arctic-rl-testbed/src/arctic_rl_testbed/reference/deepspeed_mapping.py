"""What the reference HTTP server does with a training job's DeepSpeed `ds_config`: the optimizer,
schedule, clipping and gradient-accumulation keys are honoured (mapped onto the engine settings);
precision, ZeRO and communication keys only change how a GPU computes the same thing and are
accepted as no-ops on the CPU reference; anything else is refused with the key named."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from arctic_rl_testbed.reference.settings import OptimizerSettings, ScheduleSettings

HONOURED_KEYS = frozenset(
    {
        "optimizer",
        "scheduler",
        "gradient_clipping",
        "gradient_accumulation_steps",
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "sequence_parallel_size",
    }
)
NO_OP_KEYS = frozenset(
    {
        "bf16",
        "fp16",
        "data_types",
        "communication_data_type",
        "torch_autocast",
        "zero_optimization",
        "zero_allow_untested_optimizer",
        "steps_per_print",
        "wall_clock_breakdown",
        "activation_checkpointing",
    }
)
_OPTIMIZER_PARAMS = frozenset({"lr", "betas", "eps", "weight_decay", "torch_adam", "adam_w_mode"})


class DeepSpeedConfigError(ValueError):
    """A `ds_config` key or value the reference engine cannot honour."""


@dataclass(frozen=True)
class TrainingOverrides:
    optimizer: OptimizerSettings
    schedule: ScheduleSettings
    grad_accum_steps: int


def training_overrides(
    ds_config: Mapping[str, Any], *, dp_size: int, defaults: OptimizerSettings
) -> TrainingOverrides:
    unknown = sorted(set(ds_config) - HONOURED_KEYS - NO_OP_KEYS)
    if unknown:
        raise DeepSpeedConfigError(
            f"ds_config keys {unknown} are not understood by the reference engine: it honours "
            f"{sorted(HONOURED_KEYS)} and accepts {sorted(NO_OP_KEYS)} as GPU-only no-ops"
        )
    sp = ds_config.get("sequence_parallel_size", 1)
    if sp != 1:
        raise DeepSpeedConfigError(
            f"ds_config.sequence_parallel_size={sp}: the server refuses sp_size > 1; use 1"
        )
    optimizer = _optimizer(ds_config.get("optimizer"), ds_config.get("gradient_clipping"), defaults)
    schedule = _schedule(ds_config.get("scheduler"), optimizer.lr)
    return TrainingOverrides(optimizer, schedule, _grad_accum(ds_config, dp_size))


def _optimizer(spec: Any, clipping: Any, defaults: OptimizerSettings) -> OptimizerSettings:
    values = defaults.model_dump()
    if spec is not None:
        if not isinstance(spec, Mapping) or str(spec.get("type", "")).lower() not in ("adamw", "adam"):
            raise DeepSpeedConfigError(f"ds_config.optimizer={spec!r}: the reference engine runs AdamW only")
        params = dict(spec.get("params") or {})
        extra = sorted(set(params) - _OPTIMIZER_PARAMS)
        if extra:
            raise DeepSpeedConfigError(f"ds_config.optimizer.params keys {extra} are not supported")
        if str(spec.get("type")).lower() == "adam" or params.get("adam_w_mode") is False:
            raise DeepSpeedConfigError(
                "ds_config.optimizer: Adam with L2 regularisation (adam_w_mode=False) is not implemented; use AdamW"
            )
        for key in ("lr", "eps", "weight_decay"):
            if key in params:
                values[key] = params[key]
        if "betas" in params:
            values["betas"] = tuple(params["betas"])
    if clipping is not None:
        values["grad_clip"] = (
            None if float(clipping) == 0.0 else float(clipping)
        )  # DeepSpeed: 0 = no clipping
    try:
        return OptimizerSettings(**values)
    except ValueError as err:
        raise DeepSpeedConfigError(f"ds_config.optimizer: {err}") from None


def _schedule(spec: Any, lr: float) -> ScheduleSettings:
    if spec is None:
        return ScheduleSettings()
    if not isinstance(spec, Mapping):
        raise DeepSpeedConfigError(f"ds_config.scheduler={spec!r}: send a dict with type and params")
    kind, params = spec.get("type"), dict(spec.get("params") or {})
    if params.get("warmup_type", "linear") != "linear":
        raise DeepSpeedConfigError(
            f"ds_config.scheduler.params.warmup_type={params['warmup_type']!r}: use 'linear'"
        )
    warmup = int(params.get("warmup_num_steps", 0))
    if kind == "WarmupLR":
        if float(params.get("warmup_min_lr", 0.0)) != 0.0:
            raise DeepSpeedConfigError(
                "ds_config.scheduler WarmupLR: warmup_min_lr must be 0 (warmup starts from 0)"
            )
        if "warmup_max_lr" in params and float(params["warmup_max_lr"]) != lr:
            raise DeepSpeedConfigError(
                f"ds_config.scheduler WarmupLR: warmup_max_lr={params['warmup_max_lr']} differs from the optimizer "
                f"lr={lr}: make them equal"
            )
        return ScheduleSettings(kind="constant", warmup_steps=warmup)
    if kind == "WarmupCosineLR":
        if float(params.get("warmup_min_ratio", 0.0)) != 0.0:
            raise DeepSpeedConfigError("ds_config.scheduler WarmupCosineLR: warmup_min_ratio must be 0")
        if "total_num_steps" not in params:
            raise DeepSpeedConfigError("ds_config.scheduler WarmupCosineLR needs params.total_num_steps")
        return ScheduleSettings(
            kind="cosine",
            warmup_steps=warmup,
            total_steps=int(params["total_num_steps"]),
            min_lr_ratio=float(params.get("cos_min_ratio", 0.0)),
        )
    raise DeepSpeedConfigError(
        f"ds_config.scheduler.type={kind!r}: the reference engine maps WarmupLR and WarmupCosineLR"
    )


def _grad_accum(ds_config: Mapping[str, Any], dp_size: int) -> int:
    micro = int(ds_config.get("train_micro_batch_size_per_gpu", 1))
    gas = ds_config.get("gradient_accumulation_steps")
    total = ds_config.get("train_batch_size")
    if gas is None:
        if total is None:
            return 1
        if int(total) % (micro * dp_size):
            raise DeepSpeedConfigError(
                f"ds_config.train_batch_size={total} is not a multiple of micro batch {micro} x {dp_size} ranks"
            )
        return int(total) // (micro * dp_size)
    if total is not None and int(total) != micro * int(gas) * dp_size:
        raise DeepSpeedConfigError(
            f"ds_config.train_batch_size={total} != train_micro_batch_size_per_gpu {micro} x gradient_accumulation_steps "
            f"{gas} x {dp_size} data-parallel ranks (the reference server's --dp-size)"
        )
    if int(gas) < 1:
        raise DeepSpeedConfigError(f"ds_config.gradient_accumulation_steps={gas}: must be >= 1")
    return int(gas)
