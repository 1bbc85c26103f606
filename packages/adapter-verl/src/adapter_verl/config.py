"""verl's composed config -> the adapter's settings and the core `ArcticRLConfig`.

verl's own fields are the source of truth for everything verl has a field for: the mapping table
(`adapter_verl.field_table`) classifies every leaf, and `verl_core_values` reads the mapped ones
(GPU counts, colocation, TP, vLLM engine settings, kernels, offload, batch, optimizer, loss, seed,
checkpoint folder). The `remote_backend` Hydra group (`adapter_verl/hydra_config/remote_backend/
arctic.yaml`) carries only what verl has no field for: `remote_backend.core` holds core schema
groups (backend, zorro, arctic_inference, weight_sync, ...); repeating a verl-owned setting there
is an error naming the verl field. `resolve` checks everything in one round: the table's
rejections, the structural rules of the Arctic path and the core validation, all problems at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from adapter_verl.field_table import FieldRule, mapped_core_fields, rule_for

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig, ConfigIssue
    from omegaconf import DictConfig

ROLLOUT_NAME = "arctic"
TRAINER_MODE = "arctic"
_ABSENT = object()


class UnsupportedVerlSettingError(ValueError):
    """Settings the Arctic path cannot run: verl-side problems and core validation, all at once."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in the verl settings for Arctic RL:\n{lines}")


class ArcticVerlSettings(BaseModel):
    """What the trainer resolves once and publishes to the workers and rollout servers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    core: dict[str, Any] = Field(description="the full core ArcticRLConfig, as plain data")
    model_path: str = Field(description="actor_rollout_ref.model.path (tokenizer and HF config)")
    trust_remote_code: bool = Field(default=False, description="actor_rollout_ref.model.trust_remote_code")
    trace_dir: str | None = Field(default=None, description="remote_backend.trace_dir")

    def arctic_config(self) -> ArcticRLConfig:
        from arctic_rl_core.config import ArcticRLConfig

        return ArcticRLConfig.from_dict(self.core, source="verl config")


# ----------------------------------------------------------------------------------------------
# Reading a verl config
# ----------------------------------------------------------------------------------------------


def _get(config: Any, dotted: str, default: Any = None) -> Any:
    node = config
    for part in dotted.split("."):
        if node is None:
            return default
        node = node.get(part, None) if isinstance(node, Mapping) or hasattr(node, "get") else None
    return default if node is None else node


def _plain(value: Any) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def leaves(config: Any) -> dict[str, Any]:
    """Every leaf of a verl config by dotted path, with its RAW value (an interpolation stays
    its `${...}` text, so a field that follows another compares equal to its default). An empty
    mapping is a leaf; lists are leaves."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    found: dict[str, Any] = {}

    def walk(node: DictConfig, prefix: str) -> None:
        for key in node.keys():
            child = node._get_node(key)
            path = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(child, DictConfig) and not child._is_none() and not child._is_interpolation() and len(child):
                walk(child, path)
            elif isinstance(child, DictConfig | ListConfig):
                found[path] = child._value() if child._is_interpolation() or child._is_none() else (
                    OmegaConf.to_container(child, resolve=False)
                )
            else:
                found[path] = child._value()

    walk(config, "")
    return found


@lru_cache(maxsize=1)
def default_leaves() -> dict[str, Any]:
    """The leaves of the installed verl's default `ppo_trainer` config with the Arctic selection
    (what every rejection compares against)."""
    from adapter_verl.main import compose, with_arctic_defaults

    return leaves(compose(with_arctic_defaults([])[0]))


@dataclass
class FieldReport:
    """The verl fields a config sets away from verl's defaults, by table classification."""

    rejected: list[tuple[str, Any, FieldRule]] = field(default_factory=list)
    not_applicable: list[tuple[str, Any, FieldRule]] = field(default_factory=list)
    unclassified: list[tuple[str, Any]] = field(default_factory=list)


def field_report(config: DictConfig) -> FieldReport:
    defaults = default_leaves()
    report = FieldReport()
    for path, value in leaves(config).items():
        if defaults.get(path, _ABSENT) == value:
            continue
        rule = rule_for(path)
        if rule is None:
            report.unclassified.append((path, value))
        elif rule.kind == "rejected":
            report.rejected.append((path, value, rule))
        elif rule.kind == "not_applicable":
            report.not_applicable.append((path, value, rule))
    return report


def _show(value: Any) -> str:
    return repr(value)


# ----------------------------------------------------------------------------------------------
# verl-side checks
# ----------------------------------------------------------------------------------------------


def check_supported(config: DictConfig) -> list[str]:
    """Every verl setting in `config` the Arctic path cannot honour, as 'field=value: remedy'."""
    problems: list[str] = []

    def bad(path: str, value: Any, remedy: str) -> None:
        problems.append(f"{path}={_show(value)}: {remedy}")

    report = field_report(config)
    for path, value, rule in report.rejected:
        if path == "algorithm.adv_estimator":
            continue
        bad(path, _plain(_get(config, path, value)) if "${" not in str(value) else value, rule.why)
    for path, value in report.unclassified:
        bad(path, value, "a field the Arctic mapping table does not know: remove it, or report it to adapter-verl")

    if _get(config, "algorithm.adv_estimator") == "gae":
        bad(
            "algorithm.adv_estimator",
            "gae",
            "GAE needs a critic, which the Arctic path has not: set algorithm.adv_estimator=grpo",
        )
    actor = "actor_rollout_ref.actor"
    micro = _get(config, f"{actor}.ppo_micro_batch_size_per_gpu")
    if micro is None:
        bad(f"{actor}.ppo_micro_batch_size_per_gpu", None, "set it: it fixes the backend's gradient-accumulation steps")
    optim = _get(config, f"{actor}.optim")
    if optim is not None and _scheduler_of(optim) not in ("constant", "cosine"):
        bad(f"{actor}.optim.lr_scheduler_type", _scheduler_of(optim), "the Arctic engine schedules constant or cosine only")
    dtype = _get(config, f"{actor}.fsdp_config.dtype", "bfloat16")
    if str(dtype) not in ("bfloat16", "bf16", "float32", "fp32"):
        bad(f"{actor}.fsdp_config.dtype", dtype, "the Arctic training job trains in bfloat16 or float32")
    sp_actor = int(_get(config, f"{actor}.ulysses_sequence_parallel_size", 1))
    sp_fsdp = int(_get(config, f"{actor}.fsdp_config.ulysses_sequence_parallel_size", 1))
    if sp_actor != 1 and sp_fsdp != 1 and sp_actor != sp_fsdp:
        bad(f"{actor}.fsdp_config.ulysses_sequence_parallel_size", sp_fsdp, f"differs from {actor}.ulysses_sequence_parallel_size={sp_actor}: set one")
    if not _get(config, "actor_rollout_ref.hybrid_engine", True):
        rollout = "actor_rollout_ref.rollout"
        if int(_get(config, f"{rollout}.nnodes", 0) or 0) <= 0:
            bad(
                f"{rollout}.nnodes",
                _get(config, f"{rollout}.nnodes"),
                "with actor_rollout_ref.hybrid_engine=false the Arctic sampling job needs its own GPUs: set "
                f"{rollout}.nnodes x {rollout}.n_gpus_per_node",
            )
    if _get(config, "actor_rollout_ref.model.trust_remote_code", False):
        kind = (_plain(_get(config, "remote_backend.core.backend")) or {}).get("kind")
        if kind != "reference":
            bad(
                "actor_rollout_ref.model.trust_remote_code",
                True,
                "arctic-platform 0.1.4's training job loads models without trust_remote_code: use a model "
                "transformers ships (the reference backend honours it for the tokenizer)",
            )
    _check_core_group(config, bad)
    return problems


def _scheduler_of(optim: Any) -> str:
    return str(optim.get("lr_scheduler_type") or optim.get("warmup_style") or "constant")


def verl_owned_core_keys() -> dict[str, list[str]]:
    """Core field -> the verl fields that set it (repeating it under remote_backend.core is an error)."""
    return {core: verl for core, verl in mapped_core_fields().items() if not core.startswith("(")}


def _check_core_group(config: DictConfig, bad: Any) -> None:
    core = _plain(_get(config, "remote_backend.core", {})) or {}
    if not isinstance(core, dict):
        bad("remote_backend.core", core, "must be a mapping of core schema groups")
        return
    for core_path, verl_fields in verl_owned_core_keys().items():
        group, _, key = core_path.partition(".")
        values = core.get(group)
        if isinstance(values, dict) and key in values:
            bad(
                f"remote_backend.core.{core_path}",
                values[key],
                f"verl owns it: set {' x '.join(dict.fromkeys(verl_fields))} instead",
            )


# ----------------------------------------------------------------------------------------------
# verl fields -> core values
# ----------------------------------------------------------------------------------------------


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def verl_core_values(config: DictConfig, total_training_steps: int | None) -> dict[str, dict[str, Any]]:
    """The core schema values verl owns, read from verl's fields by their real names."""
    actor = config.actor_rollout_ref.actor
    rollout = config.actor_rollout_ref.rollout
    model = config.actor_rollout_ref.model
    optim = actor.optim
    trainer = config.trainer
    core = _plain(_get(config, "remote_backend.core", {})) or {}

    training_gpus = int(trainer.nnodes) * int(trainer.n_gpus_per_node)
    colocate = bool(config.actor_rollout_ref.get("hybrid_engine", True))
    if colocate:
        sampling_gpus = training_gpus
    else:
        sampling_gpus = int(rollout.get("nnodes") or 0) * int(rollout.get("n_gpus_per_node") or 0)
    sp = int(actor.get("ulysses_sequence_parallel_size", 1) or 1)
    if sp == 1:
        sp = int(actor.fsdp_config.get("ulysses_sequence_parallel_size", 1) or 1)
    placement: dict[str, Any] = {
        "training_gpus": training_gpus,
        "sampling_gpus": sampling_gpus,
        "colocate": colocate,
        "sampling_tensor_parallel_size": int(rollout.tensor_model_parallel_size),
        "ulysses_sequence_parallel_size": sp,
    }
    if "log_prob_gpus" not in (core.get("placement") or {}) and bool(actor.use_kl_loss):
        # verl's reference policy shares the actor's GPUs: the log-prob job gets as many
        placement["log_prob_gpus"] = training_gpus

    warmup = optim.get("lr_warmup_steps_ratio", 0.0)
    scheduler = _scheduler_of(optim)
    vllm: dict[str, Any] = {
        "gpu_memory_utilization": float(rollout.gpu_memory_utilization),
        "max_num_seqs": int(rollout.max_num_seqs),
        "enforce_eager": bool(rollout.enforce_eager),
        "enable_chunked_prefill": bool(rollout.enable_chunked_prefill),
        "enable_prefix_caching": bool(rollout.enable_prefix_caching),
        "max_model_len": _int_or_none(rollout.get("max_model_len")),
        "max_num_batched_tokens": _int_or_none(rollout.get("max_num_batched_tokens")),
    }
    engine_args = dict(_plain(_get(config, "actor_rollout_ref.rollout.engine_kwargs.vllm", {})) or {})
    if rollout.get("quantization"):
        engine_args["quantization"] = rollout.quantization
    if engine_args:
        vllm["engine_args"] = engine_args
    kernels: dict[str, Any] = {
        "use_liger": bool(model.get("use_liger", False)),
        "gradient_checkpointing": bool(model.get("enable_gradient_checkpointing", True)),
    }
    attn = _get(config, "actor_rollout_ref.model.override_config.attn_implementation")
    if attn is not None:
        kernels["attn_implementation"] = str(attn)
    dtype = str(actor.fsdp_config.get("dtype", "bfloat16"))
    values: dict[str, dict[str, Any]] = {
        "placement": placement,
        "batch": {
            "prompts_per_step": int(config.data.train_batch_size),
            "rollouts_per_prompt": int(rollout.n),
            "mini_batch_prompts": int(actor.ppo_mini_batch_size),
            "epochs": int(actor.ppo_epochs),
            "max_prompt_length": int(config.data.max_prompt_length),
            "max_response_length": int(config.data.max_response_length),
            "max_token_len_per_gpu": _int_or_none(actor.get("ppo_max_token_len_per_gpu")),
        },
        "optimizer": {
            "lr": float(optim.lr),
            "betas": [float(b) for b in _plain(optim.get("betas", [0.9, 0.999]))],
            "weight_decay": float(optim.get("weight_decay", 0.0)),
            "grad_clip": float(optim.clip_grad) if optim.get("clip_grad") is not None else None,
            "scheduler": scheduler,
            "total_training_steps": total_training_steps,
            # verl ignores these where they do not apply; so does the mapping (the core refuses them)
            **({"warmup_ratio": float(warmup)} if warmup else {}),
            **({"min_lr_ratio": float(optim.get("min_lr_ratio") or 0.0)} if scheduler == "cosine" else {}),
        },
        "loss": {
            "clip_ratio_low": float(actor.clip_ratio_low),
            "clip_ratio_high": float(actor.clip_ratio_high),
            "clip_ratio_c": float(actor.clip_ratio_c),
            "loss_agg_mode": str(actor.loss_agg_mode),
            "loss_scale_factor": actor.get("loss_scale_factor"),
            "use_kl_loss": bool(actor.use_kl_loss),
            "kl_loss_coef": float(actor.kl_loss_coef),
            "kl_loss_type": str(actor.kl_loss_type),
            "entropy_coeff": float(actor.entropy_coeff),
            "temperature": float(rollout.temperature),
        },
        "vllm": vllm,
        "kernels": kernels,
        "deepspeed": {
            "offload_param": bool(actor.fsdp_config.get("param_offload", False)),
            "offload_optimizer": bool(actor.fsdp_config.get("optimizer_offload", False)),
            "bf16": dtype in ("bfloat16", "bf16"),
        },
        "determinism": {"full": bool(actor.fsdp_config.get("full_determinism", False))},
        "checkpoint": {"path": os.path.abspath(str(trainer.default_local_dir))},
    }
    micro = actor.get("ppo_micro_batch_size_per_gpu")
    if micro is not None:
        values["batch"]["micro_batch_size_per_gpu"] = int(micro)
    if config.data.get("seed") is not None:
        values["determinism"]["seed"] = int(config.data.seed)
    return values


def core_data(config: DictConfig, total_training_steps: int | None) -> dict[str, Any]:
    """`remote_backend.core` plus the values verl owns, as plain data for `ArcticRLConfig`."""
    data: dict[str, Any] = dict(_plain(_get(config, "remote_backend.core", {})) or {})
    for group, values in verl_core_values(config, total_training_steps).items():
        existing = data.get(group)
        data[group] = {**(existing if isinstance(existing, dict) else {}), **values}
    kind = (data.get("backend") or {}).get("kind", "reference")
    if kind != "reference":
        data["model"] = {**(data.get("model") or {}), "name": str(config.actor_rollout_ref.model.path)}
    return data


def _verl_name_of(issue: ConfigIssue) -> str:
    verl = mapped_core_fields().get(issue.path)
    return f" (verl: {' x '.join(dict.fromkeys(verl))})" if verl else ""


@dataclass
class Resolution:
    """Everything one check of a verl config found: the core config (None when it cannot be
    built), every problem (verl side first, then the core's), the fields not applied."""

    config: ArcticRLConfig | None
    problems: list[str]
    not_applicable: list[tuple[str, Any, str]]


def resolve(config: DictConfig, total_training_steps: int | None) -> Resolution:
    """Check `config` completely: the table's rejections, the Arctic path's rules and the core
    validation in one round."""
    from arctic_rl_core.config import ArcticRLConfig, ConfigError

    problems = check_supported(config)
    report = field_report(config)
    cfg = None
    try:
        data = core_data(config, total_training_steps)
    except (TypeError, ValueError) as error:  # a verl value the mapping cannot read
        problems.append(f"verl settings: {error}")
        data = None
    if data is not None:
        try:
            cfg = ArcticRLConfig.from_dict(data, source="verl config")
        except ConfigError as error:
            problems.extend(f"{issue.render()}{_verl_name_of(issue)}" for issue in error.issues)
    not_applied = [(path, value, rule.why) for path, value, rule in report.not_applicable]
    return Resolution(config=None if problems else cfg, problems=problems, not_applicable=not_applied)


def arctic_config_from_verl(config: DictConfig, total_training_steps: int | None) -> ArcticRLConfig:
    """The core config; raises `UnsupportedVerlSettingError` listing every problem at once."""
    resolution = resolve(config, total_training_steps)
    if resolution.problems:
        raise UnsupportedVerlSettingError(resolution.problems)
    assert resolution.config is not None
    return resolution.config


def settings_from_verl(config: DictConfig, total_training_steps: int | None) -> ArcticVerlSettings:
    """Check `config` and resolve what the workers and rollout servers need."""
    cfg = arctic_config_from_verl(config, total_training_steps)
    return ArcticVerlSettings(
        core=cfg.model_dump(mode="json", exclude_unset=True),
        model_path=str(config.actor_rollout_ref.model.path),
        trust_remote_code=bool(_get(config, "actor_rollout_ref.model.trust_remote_code", False)),
        trace_dir=_get(config, "remote_backend.trace_dir"),
    )
