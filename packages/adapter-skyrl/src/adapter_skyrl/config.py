"""SkyRL's config extended with `trainer.arctic_rl.*`, checked and mapped into the core schema.

`trainer.arctic_rl` holds the core `ArcticRLConfig` groups that SkyRL has no field for (backend,
placement, deepspeed, zorro, vllm, ...). Settings SkyRL already owns (learning rate, clip ratios,
KL, batch shape, ...) are read from SkyRL's own fields and may not be repeated there. Every SkyRL
setting the Arctic path cannot honour is rejected by `check_supported` with the field, the value and
the fix.
"""

# No `from __future__ import annotations`: SkyRL's config builder reads real field types.
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skyrl.train.config import SkyRLTrainConfig, make_config
from skyrl.train.config.config import TrainerConfig

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig

OVERRIDE_ENTRYPOINT_PREFIX = "trainer.override_entrypoint="


@dataclass
class ArcticTrainerConfig(TrainerConfig):
    """SkyRL's trainer config plus `arctic_rl`: the core schema's groups, as a nested mapping."""

    arctic_rl: dict[str, Any] = field(default_factory=dict)
    # JSON-lines file recording every payload sent to the backend (None: no trace).
    arctic_trace_path: str | None = None


ArcticSkyRLConfig = make_config(trainer_cls=ArcticTrainerConfig)
# make_config builds the class with type(): give it an importable name so Ray can pickle configs.
ArcticSkyRLConfig.__name__ = ArcticSkyRLConfig.__qualname__ = "ArcticSkyRLConfig"
ArcticSkyRLConfig.__module__ = __name__


class UnsupportedSkyRLSettingError(ValueError):
    """One or more SkyRL settings the Arctic path cannot honour (all listed at once)."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} SkyRL setting(s) cannot run on Arctic RL:\n{lines}")


def strip_override_entrypoint(argv: Sequence[str]) -> list[str]:
    """Drop `trainer.override_entrypoint=...`: SkyRL's launcher reads it before parsing, and the
    strict parse rejects it (it is not a config field)."""
    return [a for a in argv if not a.startswith(OVERRIDE_ENTRYPOINT_PREFIX)]


def parse_cli(argv: Sequence[str]) -> SkyRLTrainConfig:
    """SkyRL's strict CLI parse with the `trainer.arctic_rl.*` extension."""
    return ArcticSkyRLConfig.from_cli_overrides(strip_override_entrypoint(argv))


# ----------------------------------------------------------------------------------------------
# What the Arctic path cannot honour
# ----------------------------------------------------------------------------------------------

# loss_reduction -> the server's loss aggregation mode (the server aggregates; advantages are
# not pre-scaled on the Arctic path, see trainer.ArcticPPOTrainer._normalize_advantages).
LOSS_REDUCTION_TO_AGG_MODE = {
    "token_mean": "token-mean",
    "sequence_mean": "seq-mean-token-mean",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
}
# -- policy loss (SkyRL policy_loss_type -> a core loss family; the server computes it, see
# arctic_rl_core.losses). SkyRL's `regular` is PPO clip WITHOUT dual clip; `dual_clip` adds it.
SKYRL_POLICY_LOSSES = {
    "regular": "ppo_clip",
    "dual_clip": "dual_clip",
    "gspo": "gspo",
    "sapo": "sapo",
    "cispo": "cispo",
    "clip_cov": "clip_cov",
    "kl_cov": "kl_cov",
}


def policy_loss_values(algo: Any, backend: Mapping[str, Any], agg_mode: str) -> dict[str, Any]:
    """The core `loss.*` values of SkyRL's policy loss: the family, the server loss that runs it on
    this backend, the clip ratios it reads (cispo: its own cispo_eps_clip_*) and its knobs."""
    from arctic_rl_core.config.loss_selection import server_loss_for

    family = SKYRL_POLICY_LOSSES.get(algo.policy_loss_type, algo.policy_loss_type)
    cispo = family == "cispo"
    values: dict[str, Any] = {
        "loss.loss_fn": server_loss_for(family, backend, loss_agg_mode=agg_mode),
        "loss.policy_loss": family,
        "loss.clip_ratio_low": algo.cispo.cispo_eps_clip_low if cispo else algo.eps_clip_low,
        "loss.clip_ratio_high": algo.cispo.cispo_eps_clip_high if cispo else algo.eps_clip_high,
        "loss.clip_ratio_c": algo.clip_ratio_c,
    }
    if family == "sapo":
        values.update({"loss.tau_pos": algo.sapo.tau_pos, "loss.tau_neg": algo.sapo.tau_neg})
    elif family == "clip_cov":
        values.update(
            {
                "loss.clip_cov_ratio": algo.clip_cov.clip_ratio,
                "loss.clip_cov_lb": algo.clip_cov.clip_cov_lb,
                "loss.clip_cov_ub": algo.clip_cov.clip_cov_ub,
            }
        )
    elif family == "kl_cov":
        values.update(
            {"loss.kl_cov_ratio": algo.kl_cov.kl_cov_frac, "loss.ppo_kl_coef": algo.kl_cov.ppo_kl_coef}
        )
    return values


# SkyRL (HF) scheduler names the core schedule reproduces: linear warmup, then constant or cosine to 0.
SCHEDULERS = {"constant_with_warmup": "constant", "cosine": "cosine"}
# SkyRL's kl_estimator_type names that the server's kl_penalty knows under the same name.
KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
# SkyRL outcome estimators computed by the trainer from rewards alone (no critic values).
CRITIC_FREE_ESTIMATORS = ("grpo", "rloo", "reinforce++", "maxrl")


@dataclass(frozen=True)
class _Rule:
    path: str
    is_bad: Callable[[Any], bool]
    remedy: str


def _get(cfg: Any, path: str) -> Any:
    node = cfg
    for part in path.split("."):
        node = getattr(node, part)
    return node


_RULES: tuple[_Rule, ...] = (
    _Rule(
        "trainer.placement.colocate_all",
        lambda v: v is True,
        "set trainer.placement.colocate_all=false; colocation is the backend's "
        "(trainer.arctic_rl.placement.colocate), SkyRL starts no engines or workers",
    ),
    _Rule(
        "generator.inference_engine.enable_ray_prometheus_stats",
        lambda v: v is True,
        "set generator.inference_engine.enable_ray_prometheus_stats=false; there is no SkyRL vLLM engine to scrape",
    ),
    _Rule(
        "trainer.critic.model.path",
        lambda v: bool(v),
        "unset trainer.critic.model.path; the Arctic backend trains the policy only (no critic)",
    ),
    _Rule(
        "trainer.algorithm.advantage_estimator",
        lambda v: v not in CRITIC_FREE_ESTIMATORS,
        f"use one of {list(CRITIC_FREE_ESTIMATORS)} (critic-free estimators)",
    ),
    _Rule(
        "trainer.algorithm.policy_loss_type",
        lambda v: v not in SKYRL_POLICY_LOSSES,
        f"use one of {list(SKYRL_POLICY_LOSSES)}; the Arctic server computes these (arctic_rl_core.losses), "
        "the others need rollout log-probs as the behaviour policy or are not RL losses",
    ),
    _Rule(
        "trainer.algorithm.cispo.cispo_anchor",
        lambda v: v != "old",
        "set it to old; the Arctic loss anchors CISPO's ratio on the old log-probs",
    ),
    _Rule(
        "trainer.algorithm.loss_reduction",
        lambda v: v not in LOSS_REDUCTION_TO_AGG_MODE,
        f"use one of {list(LOSS_REDUCTION_TO_AGG_MODE)}; the Arctic server aggregates the loss itself",
    ),
    _Rule(
        "trainer.algorithm.kl_estimator_type",
        lambda v: v not in KL_ESTIMATORS,
        f"use one of {list(KL_ESTIMATORS)}",
    ),
    _Rule(
        "trainer.algorithm.use_tis",
        lambda v: v is True,
        "set trainer.algorithm.use_tis=false; the Arctic loss has no importance-sampling correction",
    ),
    _Rule(
        "trainer.algorithm.off_policy_correction.tis_ratio_type",
        lambda v: v is not None,
        "unset it (null); the Arctic loss has no off-policy correction",
    ),
    _Rule(
        "trainer.algorithm.off_policy_correction.sequence_mask_metric",
        lambda v: v is not None,
        "unset it (null); the Arctic loss has no off-policy correction",
    ),
    _Rule(
        "trainer.algorithm.enable_sample_support_replay",
        lambda v: v is True,
        "set it to false; the Arctic backend does not capture sample support",
    ),
    _Rule(
        "trainer.policy.model.lora.rank",
        lambda v: v > 0,
        "set trainer.policy.model.lora.rank=0; LoRA runs through trainer.arctic_rl.deepspeed settings, not SkyRL's",
    ),
    _Rule(
        "trainer.update_ref_every_epoch",
        lambda v: v is True,
        "set it to false; the backend's reference model is fixed for the run",
    ),
    _Rule(
        "trainer.hf_save_interval",
        lambda v: v > 0,
        "set trainer.hf_save_interval=-1; the Arctic backend exports checkpoints, not HF folders, "
        "through SkyRL's trainer.ckpt_interval",
    ),
    _Rule(
        "trainer.policy.torch_profiler_config.enable",
        lambda v: v is True,
        "set it to false; profile the Arctic server with its own tools",
    ),
    _Rule(
        "trainer.fully_async.enabled",
        lambda v: v is True,
        "set it to false; the Arctic adapter drives SkyRL's synchronous trainer",
    ),
    _Rule(
        "generator.step_wise_trajectories",
        lambda v: v is True,
        "set it to false; the Arctic generator is single-turn",
    ),
    _Rule(
        "generator.max_turns",
        lambda v: v != 1,
        "set generator.max_turns=1; the Arctic generator is single-turn",
    ),
    _Rule(
        "generator.vision_language_generator",
        lambda v: v is True,
        "set it to false; the Arctic backends take text only",
    ),
    _Rule(
        "generator.inference_engine.enable_return_routed_experts",
        lambda v: v is True,
        "set it to false; the Arctic backend does not return routed experts",
    ),
    _Rule(
        "generator.sampling_params.min_p",
        lambda v: v != 0.0,
        "set it to 0.0; the backend's sampling parameters have no min_p",
    ),
    _Rule(
        "generator.sampling_params.repetition_penalty",
        lambda v: v != 1.0,
        "set it to 1.0; the backend's sampling parameters have no repetition penalty",
    ),
    _Rule(
        "generator.sampling_params.additional_kwargs",
        lambda v: bool(v),
        "remove it; the backend's sampling parameters are max_tokens, temperature, top_p, top_k, stop, logprobs",
    ),
    _Rule(
        "generator.sampling_params.logprobs",
        lambda v: v not in (None, 0, 1),
        "use null, 0 or 1; the backend returns the sampled token's log-prob only",
    ),
    _Rule(
        "generator.zero_reward_on_non_stop",
        lambda v: v is True,
        "set it to false; the Arctic generator reports the raw reward",
    ),
    _Rule(
        "trainer.policy.optimizer_config.scheduler",
        lambda v: v not in SCHEDULERS,
        f"use one of {list(SCHEDULERS)} (linear warmup, then constant or cosine to 0)",
    ),
    _Rule(
        "generator.apply_overlong_filtering",
        lambda v: v is True,
        "set it to false; the Arctic generator does not filter overlong responses",
    ),
)

# Core settings SkyRL owns (core dotted name -> the SkyRL field to set instead). Setting one
# under trainer.arctic_rl is an error; other fields of the same groups (e.g. optimizer.eps) are free.
SKYRL_OWNED: Mapping[str, str] = {
    "batch.prompts_per_step": "trainer.train_batch_size",
    "batch.rollouts_per_prompt": "generator.n_samples_per_prompt",
    "batch.mini_batch_prompts": "trainer.policy_mini_batch_size",
    "batch.micro_batch_size_per_gpu": "trainer.micro_train_batch_size_per_gpu",
    "batch.epochs": "trainer.update_epochs_per_batch",
    "batch.max_prompt_length": "trainer.max_prompt_length",
    "batch.max_response_length": "generator.sampling_params.max_generate_length",
    "optimizer.lr": "trainer.policy.optimizer_config.lr",
    "optimizer.betas": "trainer.policy.optimizer_config.adam_betas",
    "optimizer.weight_decay": "trainer.policy.optimizer_config.weight_decay",
    "optimizer.grad_clip": "trainer.policy.optimizer_config.max_grad_norm",
    "optimizer.scheduler": "trainer.policy.optimizer_config.scheduler",
    "optimizer.warmup_ratio": "trainer.policy.optimizer_config.num_warmup_steps",
    "optimizer.total_training_steps": "trainer.epochs / trainer.max_training_steps",
    "loss.loss_fn": "trainer.algorithm.policy_loss_type",
    "loss.policy_loss": "trainer.algorithm.policy_loss_type",
    "loss.clip_ratio_low": "trainer.algorithm.eps_clip_low",
    "loss.clip_ratio_high": "trainer.algorithm.eps_clip_high",
    "loss.clip_ratio_c": "trainer.algorithm.clip_ratio_c",
    "loss.loss_agg_mode": "trainer.algorithm.loss_reduction",
    "loss.tau_pos": "trainer.algorithm.sapo.tau_pos",
    "loss.tau_neg": "trainer.algorithm.sapo.tau_neg",
    "loss.clip_cov_ratio": "trainer.algorithm.clip_cov.clip_ratio",
    "loss.clip_cov_lb": "trainer.algorithm.clip_cov.clip_cov_lb",
    "loss.clip_cov_ub": "trainer.algorithm.clip_cov.clip_cov_ub",
    "loss.kl_cov_ratio": "trainer.algorithm.kl_cov.kl_cov_frac",
    "loss.ppo_kl_coef": "trainer.algorithm.kl_cov.ppo_kl_coef",
    "loss.loss_scale_factor": "trainer.algorithm.max_seq_len",
    "loss.use_kl_loss": "trainer.algorithm.use_kl_loss",
    "loss.kl_loss_coef": "trainer.algorithm.kl_loss_coef",
    "loss.kl_loss_type": "trainer.algorithm.kl_estimator_type",
    "loss.entropy_coeff": "trainer.algorithm.use_entropy_loss / entropy_loss_coef",
    "loss.temperature": "generator.sampling_params.temperature (or trainer.algorithm.temperature)",
    "determinism.seed": "trainer.seed",
    "model.name": "trainer.policy.model.path",
}


def check_supported(cfg: SkyRLTrainConfig) -> None:
    """Raise `UnsupportedSkyRLSettingError` listing every SkyRL setting the Arctic path cannot honour."""
    problems: list[str] = []
    for rule in _RULES:
        value = _get(cfg, rule.path)
        if rule.is_bad(value):
            problems.append(f"{rule.path}={value!r}: {rule.remedy}")
    algo = cfg.trainer.algorithm
    if algo.use_kl_in_reward and algo.use_kl_loss:
        problems.append(
            "trainer.algorithm.use_kl_in_reward=True with use_kl_loss=True: pick one (SkyRL requires it too)"
        )
    if algo.use_kl_loss and algo.kl_ctrl.type != "fixed":
        problems.append(
            f"trainer.algorithm.kl_ctrl.type={algo.kl_ctrl.type!r} with use_kl_loss=True: the KL loss "
            "coefficient is fixed on the Arctic server; use kl_ctrl.type=fixed"
        )
    arctic_rl = getattr(cfg.trainer, "arctic_rl", {}) or {}
    if not isinstance(arctic_rl, Mapping):
        problems.append(f"trainer.arctic_rl={arctic_rl!r}: must be a mapping of core config groups")
    else:
        for key in sorted(dict(_flatten_items("", arctic_rl))):
            if key in SKYRL_OWNED:
                problems.append(
                    f"trainer.arctic_rl.{key}: SkyRL owns this setting; set {SKYRL_OWNED[key]} instead"
                )
    n = cfg.generator.n_samples_per_prompt
    if (
        cfg.trainer.policy_mini_batch_size <= 0
        or cfg.trainer.train_batch_size % cfg.trainer.policy_mini_batch_size
    ):
        problems.append(
            f"trainer.policy_mini_batch_size={cfg.trainer.policy_mini_batch_size}: must divide "
            f"trainer.train_batch_size={cfg.trainer.train_batch_size}"
        )
    if n <= 0:
        problems.append(f"generator.n_samples_per_prompt={n}: must be >= 1")
    if problems:
        raise UnsupportedSkyRLSettingError(problems)


def to_arctic_config(cfg: SkyRLTrainConfig, *, steps_per_epoch: int) -> "ArcticRLConfig":
    """The core config for this SkyRL run: `trainer.arctic_rl.*` groups plus SkyRL's own fields
    under their core names. Raises the core `ConfigError` for invalid combinations."""
    from arctic_rl_core.config import ArcticRLConfig, ConfigError

    check_supported(cfg)
    data: dict[str, Any] = {}
    for key, value in _flatten_items("", dict(cfg.trainer.arctic_rl)):
        _set_dotted(data, key, value)
    for key, value in skyrl_owned_values(cfg, steps_per_epoch=steps_per_epoch).items():
        _set_dotted(data, key, value)
    try:
        return ArcticRLConfig.from_dict(data)
    except ConfigError as error:
        raise ConfigError(
            [_in_skyrl_terms(issue) for issue in error.issues], source="the SkyRL config"
        ) from None


def _in_skyrl_terms(issue: Any) -> Any:
    """A core config issue named by the SkyRL field to change (or its trainer.arctic_rl.* path)."""
    import dataclasses

    owner = SKYRL_OWNED.get(issue.path)
    if owner is not None:
        return dataclasses.replace(
            issue, path=f"{owner} (core {issue.path})", remedy=f"{issue.remedy} (in SkyRL: set {owner})"
        )
    if not issue.path:
        return issue
    return dataclasses.replace(issue, path=f"trainer.arctic_rl.{issue.path}")


def total_training_steps(cfg: SkyRLTrainConfig, steps_per_epoch: int) -> int:
    """Global training steps of the run, as SkyRL's trainer computes them."""
    steps = steps_per_epoch * cfg.trainer.epochs
    if cfg.trainer.max_training_steps is not None:
        steps = min(steps, cfg.trainer.max_training_steps)
    return steps


def training_horizon(cfg: SkyRLTrainConfig, steps_per_epoch: int) -> int:
    """Optimizer steps of the whole run (the LR schedule's horizon), as SkyRL computes it:
    global steps times optimizer steps per global step (mini-batches x update epochs)."""
    per_batch = cfg.trainer.train_batch_size // cfg.trainer.policy_mini_batch_size
    return total_training_steps(cfg, steps_per_epoch) * per_batch * cfg.trainer.update_epochs_per_batch


def skyrl_owned_values(cfg: SkyRLTrainConfig, *, steps_per_epoch: int) -> dict[str, Any]:
    """SkyRL's settings under the core schema's dotted names (the keys of `SKYRL_OWNED`)."""
    algo = cfg.trainer.algorithm
    opt = cfg.trainer.policy.optimizer_config
    sp = cfg.generator.sampling_params
    temperature = algo.temperature if algo.temperature is not None else sp.temperature
    horizon = training_horizon(cfg, steps_per_epoch)
    agg_mode = LOSS_REDUCTION_TO_AGG_MODE.get(algo.loss_reduction, algo.loss_reduction)
    values: dict[str, Any] = {
        "batch.prompts_per_step": cfg.trainer.train_batch_size,
        "batch.rollouts_per_prompt": cfg.generator.n_samples_per_prompt,
        "batch.mini_batch_prompts": cfg.trainer.policy_mini_batch_size,
        # SkyRL's default (1) leaves the core's: whole prompt groups with ZoRRo, else 1.
        "batch.micro_batch_size_per_gpu": cfg.trainer.micro_train_batch_size_per_gpu
        if cfg.trainer.micro_train_batch_size_per_gpu != 1
        else None,
        "batch.epochs": cfg.trainer.update_epochs_per_batch,
        "batch.max_prompt_length": cfg.trainer.max_prompt_length,
        "batch.max_response_length": sp.max_generate_length,
        "optimizer.lr": opt.lr,
        "optimizer.betas": tuple(opt.adam_betas),
        "optimizer.weight_decay": opt.weight_decay,
        "optimizer.grad_clip": opt.max_grad_norm,
        "optimizer.scheduler": SCHEDULERS.get(opt.scheduler, opt.scheduler),
        "optimizer.warmup_ratio": opt.num_warmup_steps / horizon if horizon else 0.0,
        "optimizer.total_training_steps": total_training_steps(cfg, steps_per_epoch),
        **policy_loss_values(algo, _backend_group(cfg), agg_mode),
        "loss.loss_agg_mode": agg_mode,
        "loss.loss_scale_factor": algo.max_seq_len
        if algo.loss_reduction == "seq_mean_token_sum_norm"
        else None,
        "loss.use_kl_loss": bool(algo.use_kl_loss),
        "loss.kl_loss_coef": algo.kl_loss_coef,
        "loss.kl_loss_type": algo.kl_estimator_type,
        "loss.entropy_coeff": algo.entropy_loss_coef if algo.use_entropy_loss else 0.0,
        "loss.temperature": temperature,
        "determinism.seed": cfg.trainer.seed,
        # The Arctic server serves and trains SkyRL's policy model; the reference engine builds its own.
        "model.name": None if _backend_kind(cfg) == "reference" else cfg.trainer.policy.model.path,
    }
    assert set(values) <= set(SKYRL_OWNED), "SKYRL_OWNED must list every key skyrl_owned_values sets"
    return values


def _backend_group(cfg: SkyRLTrainConfig) -> Mapping[str, Any]:
    backend = dict(cfg.trainer.arctic_rl).get("backend")
    return backend if isinstance(backend, Mapping) else {}


def _backend_kind(cfg: SkyRLTrainConfig) -> Any:
    return _backend_group(cfg).get("kind")


def _flatten_items(prefix: str, node: Any):
    if isinstance(node, Mapping) and node:
        for k, v in node.items():
            yield from _flatten_items(f"{prefix}.{k}" if prefix else str(k), v)
    else:
        yield prefix, node


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
