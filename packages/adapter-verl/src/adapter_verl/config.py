"""verl's composed config -> the adapter's settings and the core `ArcticRLConfig`.

The `remote_backend` Hydra group (`adapter_verl/config/remote_backend/arctic.yaml`) carries what
verl has no field for: `remote_backend.core` holds core schema groups (backend, placement,
deepspeed, zorro, ...), `remote_backend.trace_dir` turns the payload trace on. Settings verl owns
are read by their real names (`ppo_mini_batch_size`, `clip_ratio_low`, `optim.lr`, `rollout.n`,
...) and may not be repeated under `remote_backend.core`. Every verl setting the Arctic path
cannot honour is rejected at startup by `check_supported`, all problems at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig
    from omegaconf import DictConfig

ROLLOUT_NAME = "arctic"
TRAINER_MODE = "arctic"


class UnsupportedVerlSettingError(ValueError):
    """One or more verl settings the Arctic path cannot honour (all listed at once)."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} verl setting(s) cannot run on Arctic RL:\n{lines}")


class ArcticVerlSettings(BaseModel):
    """What the trainer resolves once and publishes to the workers and rollout servers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    core: dict[str, Any] = Field(description="the full core ArcticRLConfig, as plain data")
    model_path: str = Field(description="actor_rollout_ref.model.path (tokenizer and HF config)")
    trace_dir: str | None = Field(default=None, description="remote_backend.trace_dir")

    def arctic_config(self) -> ArcticRLConfig:
        from arctic_rl_core.config import ArcticRLConfig

        return ArcticRLConfig.from_dict(self.core, source="verl config")


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


def check_supported(config: DictConfig) -> list[str]:
    """Every verl setting in `config` the Arctic path cannot honour, as 'field=value: remedy'."""
    problems: list[str] = []

    def bad(field: str, value: Any, remedy: str) -> None:
        problems.append(f"{field}={value!r}: {remedy}")

    mode = _get(config, "trainer.v1.trainer_mode")
    if mode != TRAINER_MODE:
        bad("trainer.v1.trainer_mode", mode, f"set trainer.v1.trainer_mode={TRAINER_MODE}")
    if not _get(config, "trainer.use_v1", False):
        bad("trainer.use_v1", _get(config, "trainer.use_v1"), "set trainer.use_v1=true (the V1 trainer)")
    name = _get(config, "actor_rollout_ref.rollout.name")
    if name != ROLLOUT_NAME:
        bad("actor_rollout_ref.rollout.name", name, f"set actor_rollout_ref.rollout.name={ROLLOUT_NAME}")
    adv = _get(config, "algorithm.adv_estimator")
    if adv == "gae":
        bad(
            "algorithm.adv_estimator",
            adv,
            "GAE needs a critic, which the Arctic path has not: set algorithm.adv_estimator=grpo",
        )
    if _get(config, "critic.enable"):
        bad("critic.enable", True, "no critic on the Arctic path: set critic.enable=false")
    if _get(config, "algorithm.use_kl_in_reward", False):
        bad(
            "algorithm.use_kl_in_reward",
            True,
            "use actor_rollout_ref.actor.use_kl_loss=true instead (KL in the loss)",
        )
    if _get(config, "reward.reward_model.enable", False):
        bad(
            "reward.reward_model.enable",
            True,
            "model-based rewards are not served by the Arctic path: use reward.custom_reward_function",
        )
    if _get(config, "distillation.enabled", False) or _get(config, "distillation.enable", False):
        bad("distillation.enabled", True, "on-policy distillation is not supported on the Arctic path")

    actor = "actor_rollout_ref.actor"
    if _get(config, f"{actor}.use_dynamic_bsz", False):
        bad(
            f"{actor}.use_dynamic_bsz",
            True,
            f"set {actor}.use_dynamic_bsz=false and {actor}.ppo_micro_batch_size_per_gpu",
        )
    micro = _get(config, f"{actor}.ppo_micro_batch_size_per_gpu")
    if micro is None:
        bad(
            f"{actor}.ppo_micro_batch_size_per_gpu",
            None,
            "set it: it fixes the backend's gradient-accumulation steps",
        )
    mini = _get(config, f"{actor}.ppo_mini_batch_size")
    n = _get(config, "actor_rollout_ref.rollout.n", 1)
    if micro and mini and (mini * n) % micro:
        bad(
            f"{actor}.ppo_micro_batch_size_per_gpu",
            micro,
            f"must divide ppo_mini_batch_size x rollout.n = {mini * n} (whole gradient-accumulation steps)",
        )
    loss_mode = _get(config, f"{actor}.policy_loss.loss_mode", "vanilla")
    if loss_mode not in VERL_POLICY_LOSSES:
        bad(
            f"{actor}.policy_loss.loss_mode",
            loss_mode,
            f"use one of {list(VERL_POLICY_LOSSES)}; the Arctic server computes these (arctic_rl_core.losses)",
        )
    model = "actor_rollout_ref.model"
    lora = _get(config, f"{model}.lora.rank", 0) or _get(config, f"{model}.lora_rank", 0)
    if lora:
        bad(f"{model}.lora_rank", lora, "LoRA is not supported by the Arctic path: set it to 0")
    if _get(config, f"{model}.lora_adapter_path"):
        bad(f"{model}.lora_adapter_path", _get(config, f"{model}.lora_adapter_path"), "remove it (no LoRA)")

    rollout = "actor_rollout_ref.rollout"
    parallel = {
        key: _get(config, f"{rollout}.{key}", 1)
        for key in ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size")
    }
    for key, value in parallel.items():
        if value != 1:
            bad(
                f"{rollout}.{key}",
                value,
                "set it to 1: the backend owns inference parallelism (one replica per forwarder)",
            )
    if _get(config, f"{rollout}.multi_turn.enable", False):
        bad(f"{rollout}.multi_turn.enable", True, "multi-turn rollouts are not supported yet")
    if _get(config, f"{rollout}.disaggregation.enabled", False):
        bad(f"{rollout}.disaggregation.enabled", True, "set it to false")

    optim = _get(config, f"{actor}.optim")
    if optim is not None:
        scheduler = _scheduler_of(optim)
        if scheduler not in ("constant", "cosine"):
            bad(
                f"{actor}.optim.lr_scheduler_type",
                scheduler,
                "the Arctic engine schedules constant or cosine only",
            )
        warmup_steps = optim.get("lr_warmup_steps", -1)
        if warmup_steps is not None and int(warmup_steps) > 0:
            bad(
                f"{actor}.optim.lr_warmup_steps",
                warmup_steps,
                f"use {actor}.optim.lr_warmup_steps_ratio instead",
            )
    for key, neutral, remedy in (
        ("trainer.default_hdfs_dir", None, "the backend saves to local paths only: set it to null"),
        ("trainer.max_actor_ckpt_to_keep", None, "the backend keeps every checkpoint: set it to null"),
        ("trainer.del_local_ckpt_after_load", False, "checkpoints belong to the backend: set it to false"),
    ):
        value = _get(config, key, neutral)
        if value != neutral:
            bad(key, value, remedy)
    _check_core_group(config, bad)
    return problems


# -- policy loss (verl policy_loss.loss_mode -> a core loss family; the server computes it, see
# arctic_rl_core.losses). verl's `vanilla` always dual-clips for negative advantages.
VERL_POLICY_LOSSES = {
    "vanilla": "dual_clip",
    "gspo": "gspo",
    "sapo": "sapo",
    "cispo": "cispo",
    "clip_cov": "clip_cov",
    "kl_cov": "kl_cov",
    "gpg": "gpg",
}


def policy_loss_values(actor: Any, backend: Mapping[str, Any]) -> dict[str, Any]:
    """The core `loss` values of verl's policy loss: the family, the server loss that runs it on this
    backend and the family's knobs (verl's sapo aggregates its policy term per sequence whatever
    loss_agg_mode says, and so does the mapping)."""
    from arctic_rl_core.config.loss_selection import server_loss_for

    policy = actor.get("policy_loss") or {}
    family = VERL_POLICY_LOSSES.get(policy.get("loss_mode", "vanilla"), "dual_clip")
    values: dict[str, Any] = {
        "loss_fn": server_loss_for(family, backend, loss_agg_mode=str(actor.loss_agg_mode)),
        "policy_loss": family,
    }
    if family == "sapo":
        values.update(
            pg_loss_agg_mode="seq-mean-token-mean",
            tau_pos=float(actor.get("tau_pos", 1.0)),
            tau_neg=float(actor.get("tau_neg", 1.05)),
        )
    elif family == "clip_cov":
        values.update(
            clip_cov_ratio=float(policy.get("clip_cov_ratio") or 0.0002),
            clip_cov_lb=float(policy.get("clip_cov_lb") if policy.get("clip_cov_lb") is not None else 1.0),
            clip_cov_ub=float(policy.get("clip_cov_ub") if policy.get("clip_cov_ub") is not None else 5.0),
        )
    elif family == "kl_cov":
        values.update(
            kl_cov_ratio=float(policy.get("kl_cov_ratio") or 0.0002),
            ppo_kl_coef=float(policy.get("ppo_kl_coef") if policy.get("ppo_kl_coef") is not None else 1.0),
        )
    return values


def verl_owned_core_values(config: DictConfig, total_training_steps: int | None) -> dict[str, dict[str, Any]]:
    """The core schema values verl owns, read from verl's fields by their real names."""
    actor = config.actor_rollout_ref.actor
    rollout = config.actor_rollout_ref.rollout
    optim = actor.optim
    warmup = optim.get("lr_warmup_steps_ratio", 0.0)
    return {
        "batch": {
            "prompts_per_step": int(config.data.train_batch_size),
            "rollouts_per_prompt": int(rollout.n),
            "mini_batch_prompts": int(actor.ppo_mini_batch_size),
            "micro_batch_size_per_gpu": int(actor.ppo_micro_batch_size_per_gpu),
            "epochs": int(actor.ppo_epochs),
            "max_prompt_length": int(rollout.prompt_length),
            "max_response_length": int(rollout.response_length),
        },
        "optimizer": {
            "lr": float(optim.lr),
            "betas": [float(b) for b in _plain(optim.get("betas", [0.9, 0.999]))],
            "weight_decay": float(optim.get("weight_decay", 0.0)),
            "grad_clip": float(optim.clip_grad) if optim.get("clip_grad") is not None else None,
            "scheduler": _scheduler_of(optim),
            "total_training_steps": total_training_steps,
            # verl ignores these where they do not apply; so does the mapping (the core refuses them)
            **({"warmup_ratio": float(warmup)} if warmup else {}),
            **(
                {"min_lr_ratio": float(optim.get("min_lr_ratio") or 0.0)}
                if _scheduler_of(optim) == "cosine"
                else {}
            ),
        },
        "loss": {
            **policy_loss_values(actor, _plain(_get(config, "remote_backend.core.backend", {})) or {}),
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
    }


def _scheduler_of(optim: Any) -> str:
    return str(optim.get("lr_scheduler_type") or optim.get("warmup_style") or "constant")


# Core keys verl owns (set through verl's own fields, never twice), with the verl field to use.
VERL_OWNED_CORE_KEYS: dict[str, dict[str, str]] = {
    "batch": {
        "prompts_per_step": "data.train_batch_size",
        "rollouts_per_prompt": "actor_rollout_ref.rollout.n",
        "mini_batch_prompts": "actor_rollout_ref.actor.ppo_mini_batch_size",
        "micro_batch_size_per_gpu": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "epochs": "actor_rollout_ref.actor.ppo_epochs",
        "max_prompt_length": "data.max_prompt_length",
        "max_response_length": "data.max_response_length",
    },
    "optimizer": {
        "lr": "actor_rollout_ref.actor.optim.lr",
        "betas": "actor_rollout_ref.actor.optim.betas",
        "weight_decay": "actor_rollout_ref.actor.optim.weight_decay",
        "grad_clip": "actor_rollout_ref.actor.optim.clip_grad",
        "scheduler": "actor_rollout_ref.actor.optim.lr_scheduler_type",
        "warmup_ratio": "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
        "min_lr_ratio": "actor_rollout_ref.actor.optim.min_lr_ratio",
        "total_training_steps": "trainer.total_training_steps",
    },
    "loss": {
        "loss_fn": "actor_rollout_ref.actor.policy_loss.loss_mode",
        "policy_loss": "actor_rollout_ref.actor.policy_loss.loss_mode",
        "pg_loss_agg_mode": "actor_rollout_ref.actor.policy_loss.loss_mode (sapo)",
        "tau_pos": "actor_rollout_ref.actor.tau_pos",
        "tau_neg": "actor_rollout_ref.actor.tau_neg",
        **{
            key: f"actor_rollout_ref.actor.policy_loss.{key}"
            for key in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef")
        },
        **{
            key: f"actor_rollout_ref.actor.{key}"
            for key in (
                "clip_ratio_low",
                "clip_ratio_high",
                "clip_ratio_c",
                "loss_agg_mode",
                "loss_scale_factor",
                "use_kl_loss",
                "kl_loss_coef",
                "kl_loss_type",
                "entropy_coeff",
            )
        },
        "temperature": "actor_rollout_ref.rollout.temperature",
    },
}


def _check_core_group(config: DictConfig, bad: Any) -> None:
    core = _plain(_get(config, "remote_backend.core", {})) or {}
    if not isinstance(core, dict):
        bad("remote_backend.core", core, "must be a mapping of core schema groups")
        return
    for group, owned in VERL_OWNED_CORE_KEYS.items():
        for key, verl_field in owned.items():
            if key in (core.get(group) or {}):
                bad(
                    f"remote_backend.core.{group}.{key}",
                    core[group][key],
                    f"verl owns it: set {verl_field} instead",
                )
    model_name = (core.get("model") or {}).get("name")
    if model_name is not None:
        bad(
            "remote_backend.core.model.name",
            model_name,
            "verl owns it: set actor_rollout_ref.model.path instead",
        )


def arctic_config_from_verl(config: DictConfig, total_training_steps: int | None) -> ArcticRLConfig:
    """The core config: `remote_backend.core` plus the values verl owns. Raises
    `UnsupportedVerlSettingError` (verl side) or the core `ConfigError` (every problem at once)."""
    from arctic_rl_core.config import ArcticRLConfig

    problems = check_supported(config)
    if problems:
        raise UnsupportedVerlSettingError(problems)
    data: dict[str, Any] = _plain(_get(config, "remote_backend.core", {})) or {}
    for group, values in verl_owned_core_values(config, total_training_steps).items():
        data[group] = {**(data.get(group) or {}), **values}
    kind = (data.get("backend") or {}).get("kind", "reference")
    if kind != "reference":
        data["model"] = {**(data.get("model") or {}), "name": str(config.actor_rollout_ref.model.path)}
    return ArcticRLConfig.from_dict(data, source="verl config (remote_backend.core + verl fields)")


def settings_from_verl(config: DictConfig, total_training_steps: int | None) -> ArcticVerlSettings:
    """Check `config` and resolve what the workers and rollout servers need."""
    cfg = arctic_config_from_verl(config, total_training_steps)
    return ArcticVerlSettings(
        core=cfg.model_dump(mode="json", exclude_unset=True),
        model_path=str(config.actor_rollout_ref.model.path),
        trace_dir=_get(config, "remote_backend.trace_dir"),
    )
