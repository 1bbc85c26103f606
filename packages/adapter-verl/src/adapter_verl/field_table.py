"""The verl mapping table: every leaf of verl 0.9.1's composed `ppo_trainer` config, classified.

One `arctic_rl_core.config.framework_fields.FieldTable` (plain data: one entry per verl field, or
per subtree where a whole verl component has no meaning on the Arctic path). Each entry is:

- `Mapped` / `Derived`: the value drives the core field named (with its transform);
- `Rejected`: allowed only at verl's default; any other value is a startup problem with its fix;
- `NotApplicable`: verl's own machinery the Arctic path replaces (the reason says by what); a value
  changed from verl's default is listed at startup, never silently dropped;
- `PassedThrough`: verl itself keeps using it (data, logging, schedule, validation).

`tests/verl/test_verl_field_table.py` composes the installed verl's default config and fails on any
leaf no entry covers (and on any entry naming no field), so a new verl release cannot add a silently
ignored field. verl's `_target_` leaves (the config class of each group) are structure, not settings:
`adapter_verl.config.check_supported` rejects any change to one. The README's verl mapping table
is `VERL_FIELDS.markdown()`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from arctic_rl_core.config.framework_fields import (
    UNSET,
    Derived,
    Entry,
    FieldProblem,
    FieldTable,
    Mapped,
    NotApplicable,
    PassedThrough,
    Reader,
    Rejected,
)
from arctic_rl_core.config.lora_fields import lora_entries

A = "actor_rollout_ref.actor"
M = "actor_rollout_ref.model"
R = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"

# Core fields a verl field maps onto only when that verl field leaves its default: at verl's default
# the core's (backend) default applies and `remote_backend.core.<field>` may set it.
CORE_WHEN_VERL_DEFAULT: dict[str, str] = {
    "kernels.use_liger": f"{M}.use_liger",
    # verl computes no IS weights (rollout_correction.rollout_is null): the core's truncated ones apply,
    # with their cap from remote_backend.core.async.is_weight_cap
    "async.is_weight_cap": "algorithm.rollout_correction.rollout_is",
}

# verl fields a user adds with `+` (absent from verl's default config, so no leaf there)
OPTIONAL_FIELDS: tuple[str, ...] = (f"{M}.override_config.attn_implementation",)

FSDP_ENGINE = (
    "verl's FSDP engine setting: the Arctic training job is DeepSpeed (remote_backend.core.deepspeed.*)"
)
PROFILER = "verl's profiler profiles verl's own workers; the Arctic jobs run on the Arctic server"
MEGATRON_LORA = (
    "verl's Megatron-Bridge LoRA (model.lora.*) belongs to verl's Megatron engine; the Arctic LoRA "
    "adapters (training.peft) are set by actor_rollout_ref.model.lora_rank / lora_alpha / target_modules: "
    "leave model.lora.rank at 0 and set those"
)
REF_WORKER = "verl's reference-policy FSDP worker: the reference model runs in the Arctic log-prob job"
LOGPROB_BATCHING = "the Arctic training job batches no-grad forwards by ppo_micro_batch_size_per_gpu"


def _m(field: str, core: str, how: str = "", transform: Callable[[Any], Any] | None = None) -> Mapped:
    return Mapped(field, core, transform, how)


def _r(field: str, text: str) -> Rejected:
    """`text` is 'why: fix' (or just the fix)."""
    why, _, fix = text.rpartition(": ")
    return Rejected(field, fix=fix, why=why or "not supported on the Arctic path")


def _na(field: str, reason: str) -> NotApplicable:
    return NotApplicable(field, reason)


def _p(field: str, to: str) -> PassedThrough:
    return PassedThrough(field, to)


# -- transforms ------------------------------------------------------------------------------------


def _unset_if_none(value: Any) -> Any:
    return UNSET if value is None else value


def _int_or_unset(value: Any) -> Any:
    return UNSET if value is None else int(value)


def _float(value: Any) -> float:
    return float(value)


def _scheduler(value: Any) -> Any:
    if value is None:
        return UNSET
    if str(value) not in ("constant", "cosine"):
        raise FieldProblem(
            f"the Arctic engine schedules constant or cosine only, not {value!r}", "set constant or cosine"
        )
    return str(value)


def _dtype(value: Any) -> bool:
    if str(value) in ("bfloat16", "bf16"):
        return True
    if str(value) in ("float32", "fp32"):
        return False
    raise FieldProblem("the Arctic training job trains in bfloat16 or float32", "set bfloat16 or float32")


def _training_gpus(read: Reader) -> int:
    return int(read("trainer.nnodes")) * int(read("trainer.n_gpus_per_node"))


def _sampling_gpus(read: Reader) -> int:
    if read("actor_rollout_ref.hybrid_engine") in (None, True):
        return _training_gpus(read)
    return int(read(f"{R}.nnodes") or 0) * int(read(f"{R}.n_gpus_per_node") or 0)


SYNC_TRAINER_MODE = "arctic"
ASYNC_TRAINER_MODE = "arctic_separate_async"  # what adapter_verl.main makes of verl's separate_async
VERL_SEPARATE_ASYNC = "separate_async"
TRAINER_MODE_FIELD = "trainer.v1.trainer_mode"
OFF_POLICY_THRESHOLD = "trainer.v1.sampler.max_off_policy_threshold"
OFF_POLICY_STRATEGY = "trainer.v1.sampler.max_off_policy_strategy"
SYNC_STEP_FIELD = "trainer.v1.separate_async.parameter_sync_step"
RC = "algorithm.rollout_correction"


def _separate_async(read: Reader) -> bool:
    mode = read(TRAINER_MODE_FIELD)
    if mode in (None, SYNC_TRAINER_MODE):
        return False
    if mode == ASYNC_TRAINER_MODE:
        return True
    if mode == VERL_SEPARATE_ASYNC:
        raise FieldProblem(
            "verl's own separate_async trainer runs verl's GPU workers, not the Arctic forwarders",
            "run through python -m adapter_verl.main (or arctic-rl demo), which selects "
            f"trainer.v1.trainer_mode={ASYNC_TRAINER_MODE} for it",
            field=TRAINER_MODE_FIELD,
        )
    raise FieldProblem(
        "the Arctic path runs verl's synchronous trainer (arctic) or its separate-async trainer; "
        "colocate_async trains and samples on the same GPUs in turns, so nothing overlaps",
        "set trainer.v1.trainer_mode=arctic (synchronous, the default) or separate_async (asynchronous, "
        "with actor_rollout_ref.hybrid_engine=false)",
        field=TRAINER_MODE_FIELD,
    )


def _parameter_sync_step(read: Reader) -> int:
    value = read(SYNC_STEP_FIELD)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FieldProblem(
            "must be an integer >= 1 (verl's updates per weight sync)",
            "set an integer >= 1",
            field=SYNC_STEP_FIELD,
        )
    return value


def _max_staleness(read: Reader) -> Any:
    """verl bounds the steps a trajectory may span from its prompt's submission (step p) to its training
    (step g): g - p + 1 <= threshold. Each verl step is parameter_sync_step = N updates of one mini-batch
    each (ppo_epochs = E optimizer steps apiece) and one weight sync at its end. Submitted at step p, a
    trajectory is sampled with the weights synced at the end of step p - 1 or newer; trained at step g by
    the update j (0 .. N - 1), the trainer is (g - p) x N x E + j x E optimizer steps past them: at most
    (threshold x N - 1) x E, the core's unit (N = 1: (threshold - 1) x E)."""
    if not _separate_async(read):
        return UNSET
    threshold = read(OFF_POLICY_THRESHOLD)
    if threshold is None:
        raise FieldProblem(
            "null turns verl's off-policy version control off (unbounded staleness); the Arctic path "
            "bounds it (async.max_staleness)",
            "set an integer >= 1: the steps a trajectory may span (1 = no step stale)",
            field=OFF_POLICY_THRESHOLD,
        )
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        raise FieldProblem("must be an integer >= 1", "set an integer >= 1", field=OFF_POLICY_THRESHOLD)
    return (threshold * _parameter_sync_step(read) - 1) * int(read(f"{A}.ppo_epochs") or 1)


def _async_active(read: Reader) -> bool:
    staleness = _max_staleness(read)
    return staleness is not UNSET and staleness > 0


def _stale_policy(read: Reader) -> Any:
    """drop: verl's replay buffer drops the stale group (= the core's drop); wait: it holds the step
    until the in-flight stale groups finish, so none ever exceeds the bound (the core's gate only checks)."""
    if not _async_active(read):
        return UNSET
    return "drop" if read(OFF_POLICY_STRATEGY) == "drop" else UNSET


def _is_weight_cap(read: Reader) -> Any:
    """verl's token-level TIS (rollout_is=token) is the core's truncated IS with rollout_is_threshold as
    the cap; verl computes the weights itself then."""
    if not _async_active(read) or read(f"{RC}.rollout_is") != "token":
        return UNSET
    threshold = read(f"{RC}.rollout_is_threshold")
    try:
        return float(threshold)
    except (TypeError, ValueError):
        return UNSET


def _log_prob_gpus(read: Reader) -> Any:
    """verl's reference policy shares the actor's GPUs: the log-prob job gets as many, when a KL
    loss or KL in the reward needs reference log-probs (`remote_backend.core.placement.log_prob_gpus` overrides)."""
    wants = read(f"{A}.use_kl_loss") or read("algorithm.use_kl_in_reward")
    if read("remote_backend.core.placement.log_prob_gpus") is not None or not wants:
        return UNSET
    return _training_gpus(read)


def _ulysses(read: Reader) -> int:
    actor = int(read(f"{A}.ulysses_sequence_parallel_size") or 1)
    engine = int(read(f"{A}.fsdp_config.ulysses_sequence_parallel_size") or 1)
    if actor != 1 and engine != 1 and actor != engine:
        raise FieldProblem(
            f"differs from {A}.ulysses_sequence_parallel_size={actor}",
            "set one of the two",
            field=f"{A}.fsdp_config.ulysses_sequence_parallel_size",
            value=engine,
        )
    return actor if actor != 1 else engine


def _engine_args(read: Reader) -> Any:
    args = dict(read(f"{R}.engine_kwargs.vllm") or {})
    if read(f"{R}.quantization"):
        args["quantization"] = read(f"{R}.quantization")
    return args or UNSET


def _scheduler_of(read: Reader) -> Any:
    return _scheduler(read(f"{A}.optim.lr_scheduler_type") or read(f"{A}.optim.warmup_style") or "constant")


def _warmup(value: Any) -> Any:
    return float(value) if value else UNSET


def _min_lr(read: Reader) -> Any:
    return float(read(f"{A}.optim.min_lr_ratio") or 0.0) if _scheduler_of(read) == "cosine" else UNSET


def _checkpoint_path(value: Any) -> str:
    return os.path.abspath(str(value))


def _keep_count(value: Any) -> Any:
    # verl's checkpoint managers prune only for a positive count
    return int(value) if value is not None and int(value) > 0 else UNSET


def _grad_clip(value: Any) -> Any:
    return None if value is None else float(value)


# verl policy_loss.loss_mode -> the core loss family the Arctic server computes (arctic_rl_core.losses);
# verl's `vanilla` always dual-clips for negative advantages.
VERL_POLICY_LOSSES: dict[str, str] = {
    "vanilla": "dual_clip",
    "gspo": "gspo",
    "sapo": "sapo",
    "cispo": "cispo",
    "clip_cov": "clip_cov",
    "kl_cov": "kl_cov",
    "gpg": "gpg",
}
LOSS_MODE = f"{A}.policy_loss.loss_mode"


def _family(read: Reader) -> str:
    mode = read(LOSS_MODE) or "vanilla"
    if mode not in VERL_POLICY_LOSSES:
        raise FieldProblem(
            f"the Arctic server computes {sorted(VERL_POLICY_LOSSES)} (arctic_rl_core.losses), not {mode!r}",
            f"set {LOSS_MODE} to one of them",
        )
    return VERL_POLICY_LOSSES[mode]


def _loss_fn(read: Reader) -> str:
    from arctic_rl_core.config.loss_selection import server_loss_for

    backend = read("remote_backend.core.backend") or {}
    return server_loss_for(_family(read), backend, loss_agg_mode=str(read(f"{A}.loss_agg_mode")))


def _family_knob(family: str, field: str, default: float) -> Callable[[Reader], Any]:
    """A family's knob from its verl field, only when that family runs (else the core leaves it unset)."""

    def compute(read: Reader) -> Any:
        if _family(read) != family:
            return UNSET
        value = read(field)
        return float(default if value is None else value)

    return compute


def _pg_agg(read: Reader) -> Any:
    # verl's sapo aggregates its policy term per sequence whatever loss_agg_mode says
    return "seq-mean-token-mean" if _family(read) == "sapo" else UNSET


ENTRIES: tuple[Entry, ...] = (
    # -- structure ---------------------------------------------------------------------------
    _p("remote_backend", "the adapter's own group (core settings verl has no field for)"),
    # -- data --------------------------------------------------------------------------------
    _p("data", "verl's dataset and dataloader"),
    _m("data.train_batch_size", "batch.prompts_per_step", transform=int),
    _m("data.max_prompt_length", "batch.max_prompt_length", transform=int),
    _m("data.max_response_length", "batch.max_response_length", transform=int),
    _m(
        "data.seed",
        "determinism.seed",
        "also seeds verl's dataloader; null keeps the core default",
        _int_or_unset,
    ),
    Rejected(
        "data.gen_batch_size",
        "generation batches are data.train_batch_size on the Arctic path: remove it",
        # verl's async trainers fetch prompts one at a time (they set 1 themselves; a sync step still
        # submits data.train_batch_size prompts at once)
        accepts=lambda value: value == 1,
    ),
    _r("data.use_shm", "set it to false"),
    _r("data.custom_cls.path", "the Arctic path reads verl's standard RL dataset: remove it"),
    _r(
        "data.return_multi_modal_inputs",
        "multi-modal inputs are not sent to the Arctic server: set it to true",
    ),
    # -- model -------------------------------------------------------------------------------
    _p(f"{M}.path", "verl's tokenizer; also model.name of the Arctic jobs (set by adapter_verl.config)"),
    _r(f"{M}.hf_config_path", "the Arctic server reads the model config from actor_rollout_ref.model.path"),
    _r(f"{M}.tokenizer_path", "the Arctic server tokenizes with actor_rollout_ref.model.path's tokenizer"),
    _na(f"{M}.use_shm", "the Arctic server loads the model itself"),
    _p(f"{M}.trust_remote_code", "verl's and the adapter's tokenizers (Arctic backends refuse true)"),
    _p(f"{M}.custom_chat_template", "verl's dataset applies it to the prompts"),
    _p(f"{M}.external_lib", "verl imports it"),
    _r(
        f"{M}.override_config",
        "the Arctic training job takes no HF config overrides except attn_implementation",
    ),
    _m(
        f"{M}.override_config.attn_implementation",
        "kernels.attn_implementation",
        "FA3 included",
        _unset_if_none,
    ),
    _m(f"{M}.enable_gradient_checkpointing", "kernels.gradient_checkpointing", transform=bool),
    _r(f"{M}.enable_activation_offload", "set it to false (use actor.fsdp_config.param_offload for offload)"),
    _na(f"{M}.use_remove_padding", "the Arctic training job packs its own batches"),
    # LoRA -> peft.* (training.peft on Cortex; on-prem kinds reject lora_rank > 0 at dry run, with the reason)
    *lora_entries(
        rank=f"{M}.lora_rank",
        alpha=f"{M}.lora_alpha",
        target_modules=f"{M}.target_modules",
        exclude_modules=f"{M}.exclude_modules",
    ),
    _r(
        f"{M}.lora_adapter_path",
        "training.peft starts fresh adapters (arctic-platform 0.1.4 sends no adapter to load): remove it",
    ),
    _r(f"{M}.lora.rank", MEGATRON_LORA),
    _r(f"{M}.lora.adapter_path", MEGATRON_LORA),
    _na(f"{M}.lora", "verl's Megatron LoRA settings (model.lora.*): apply only with model.lora.rank > 0"),
    _m(
        f"{M}.use_liger",
        "kernels.use_liger",
        "true = on; verl's default (false) leaves the backend's default (on with the Arctic backends; "
        "remote_backend.core.kernels.use_liger=false turns it off)",
        lambda value: True if value else UNSET,
    ),
    _r(
        f"{M}.use_fused_kernels",
        "the Arctic counterparts are use_liger and remote_backend.core.zorro.logits_optimization",
    ),
    _na(f"{M}.fused_kernel_options", "fused kernels are off (see use_fused_kernels)"),
    _r(f"{M}.tiled_mlp.enabled", "tiled MLP is not in the Arctic training job: set it to false"),
    _na(f"{M}.tiled_mlp.num_shards", "tiled MLP is off"),
    _r(f"{M}.mtp.enable", "multi-token prediction is not in the Arctic training job: set it to false"),
    _na(f"{M}.mtp", "multi-token prediction is off"),
    _m(
        "actor_rollout_ref.hybrid_engine", "placement.colocate", "hybrid engine = colocated Arctic jobs", bool
    ),
    _na("actor_rollout_ref.nccl_timeout", "NCCL of verl's workers; the Arctic server has its own"),
    # -- actor: optimizer --------------------------------------------------------------------
    _r(f"{A}.optim.optimizer", "the Arctic training job runs AdamW: set it to AdamW"),
    _r(f"{A}.optim.optimizer_impl", "the Arctic training job runs DeepSpeed's AdamW: remove it"),
    _m(f"{A}.optim.lr", "optimizer.lr", transform=_float),
    _m(f"{A}.optim.lr_warmup_steps_ratio", "optimizer.warmup_ratio", "0 leaves it unset", _warmup),
    _p(f"{A}.optim.total_training_steps", "verl fills it in from the dataloader"),
    _m(f"{A}.optim.weight_decay", "optimizer.weight_decay", transform=_float),
    _r(f"{A}.optim.lr_warmup_steps", f"use {A}.optim.lr_warmup_steps_ratio instead"),
    _m(f"{A}.optim.betas", "optimizer.betas", transform=lambda v: [float(b) for b in v]),
    _m(f"{A}.optim.clip_grad", "optimizer.grad_clip", transform=_grad_clip),
    Derived("optimizer.min_lr_ratio", (f"{A}.optim.min_lr_ratio",), _min_lr, "cosine schedule only"),
    _r(f"{A}.optim.num_cycles", "the Arctic cosine schedule is one half cycle: remove it"),
    Derived(
        "optimizer.scheduler",
        (f"{A}.optim.lr_scheduler_type", f"{A}.optim.warmup_style"),
        _scheduler_of,
        "constant or cosine (warmup_style: verl's older name)",
    ),
    _r(f"{A}.optim.zero_indexed_step", "the Arctic engine's scheduler counts its own steps: remove it"),
    _r(
        f"{A}.optim.override_optimizer_config",
        "the Arctic optimizer is configured by optim.* only: remove it",
    ),
    # -- actor: engine -------------------------------------------------------------------------
    _na(f"{A}.fsdp_config", FSDP_ENGINE),
    _m(f"{A}.fsdp_config.param_offload", "deepspeed.offload_param", transform=bool),
    _m(f"{A}.fsdp_config.optimizer_offload", "deepspeed.offload_optimizer", transform=bool),
    _r(f"{A}.fsdp_config.offload_policy", f"use {A}.fsdp_config.param_offload / optimizer_offload"),
    _m(f"{A}.fsdp_config.full_determinism", "determinism.full", transform=bool),
    _m(f"{A}.fsdp_config.dtype", "deepspeed.bf16", "bfloat16 = bf16 training, float32 = fp32", _dtype),
    _r(f"{A}.fsdp_config.seed", "every Arctic job's seed is data.seed: set that instead"),
    _r(f"{A}.fsdp_config.qat.enable", "quantization-aware training is not in the Arctic training job"),
    _r(f"{A}.qat.enable", "quantization-aware training is not in the Arctic training job"),
    _na(f"{A}.qat", "QAT is off"),
    _na(f"{A}.strategy", "verl's training engine: the Arctic training job is DeepSpeed"),
    _na(f"{A}.use_torch_compile", FSDP_ENGINE),
    _na(
        f"{A}.entropy_from_logits_with_chunking",
        "the Arctic counterpart is remote_backend.core.zorro.logits_optimization",
    ),
    _na(
        f"{A}.entropy_from_logits_chunk_size",
        "the Arctic counterpart is remote_backend.core.zorro.logits_peak_mem_gib",
    ),
    _na(
        f"{A}.entropy_checkpointing",
        "the Arctic counterpart is remote_backend.core.zorro.logits_optimization",
    ),
    _na(f"{A}.pad_to_length", "the Arctic training job packs its own batches"),
    _na(f"{A}.use_remove_padding", "the Arctic training job packs its own batches"),
    _na(f"{A}.use_fused_kernels", "follows actor_rollout_ref.model.use_fused_kernels"),
    _r(f"{A}.freeze_vision_tower", "vision models are not trained on the Arctic path: set it to false"),
    _na(f"{A}.profiler", PROFILER),
    _na(f"{R}.profiler", PROFILER),
    _r(f"{R}.profiler.enable", PROFILER + ": set it to false"),
    _r(f"{A}.profiler.enable", PROFILER + ": set it to false"),
    # -- actor: batch and loss -------------------------------------------------------------------
    _p(f"{A}.rollout_n", "follows actor_rollout_ref.rollout.n"),
    _m(f"{A}.ppo_mini_batch_size", "batch.mini_batch_prompts", transform=int),
    _r(f"{A}.ppo_micro_batch_size", f"deprecated in verl: use {A}.ppo_micro_batch_size_per_gpu"),
    _m(f"{A}.ppo_micro_batch_size_per_gpu", "batch.micro_batch_size_per_gpu", transform=_int_or_unset),
    _r(f"{A}.use_dynamic_bsz", f"set it to false and size {A}.ppo_micro_batch_size_per_gpu"),
    _m(
        f"{A}.ppo_max_token_len_per_gpu",
        "batch.max_token_len_per_gpu",
        "ZoRRo packing and load-balancer budget",
        _int_or_unset,
    ),
    _r(f"{A}.clip_ratio", f"set {A}.clip_ratio_low and {A}.clip_ratio_high"),
    _m(f"{A}.clip_ratio_low", "loss.clip_ratio_low", transform=_float),
    _m(f"{A}.clip_ratio_high", "loss.clip_ratio_high", transform=_float),
    _m(f"{A}.clip_ratio_c", "loss.clip_ratio_c", transform=_float),
    Derived("loss.policy_loss", (LOSS_MODE,), _family, f"family: {VERL_POLICY_LOSSES}"),
    Derived(
        "loss.loss_fn",
        (LOSS_MODE, f"{A}.loss_agg_mode"),
        _loss_fn,
        "the server loss that runs the family on this backend (arctic_rl_core or the built-in verl_grpo)",
    ),
    Derived("loss.pg_loss_agg_mode", (LOSS_MODE,), _pg_agg, "sapo: seq-mean-token-mean (as verl)"),
    Derived(
        "loss.tau_pos", (LOSS_MODE, f"{A}.tau_pos"), _family_knob("sapo", f"{A}.tau_pos", 1.0), "sapo only"
    ),
    Derived(
        "loss.tau_neg", (LOSS_MODE, f"{A}.tau_neg"), _family_knob("sapo", f"{A}.tau_neg", 1.05), "sapo only"
    ),
    Derived(
        "loss.clip_cov_ratio",
        (LOSS_MODE, f"{A}.policy_loss.clip_cov_ratio"),
        _family_knob("clip_cov", f"{A}.policy_loss.clip_cov_ratio", 0.0002),
        "clip_cov only",
    ),
    Derived(
        "loss.clip_cov_lb",
        (LOSS_MODE, f"{A}.policy_loss.clip_cov_lb"),
        _family_knob("clip_cov", f"{A}.policy_loss.clip_cov_lb", 1.0),
        "clip_cov only",
    ),
    Derived(
        "loss.clip_cov_ub",
        (LOSS_MODE, f"{A}.policy_loss.clip_cov_ub"),
        _family_knob("clip_cov", f"{A}.policy_loss.clip_cov_ub", 5.0),
        "clip_cov only",
    ),
    Derived(
        "loss.kl_cov_ratio",
        (LOSS_MODE, f"{A}.policy_loss.kl_cov_ratio"),
        _family_knob("kl_cov", f"{A}.policy_loss.kl_cov_ratio", 0.0002),
        "kl_cov only",
    ),
    Derived(
        "loss.ppo_kl_coef",
        (LOSS_MODE, f"{A}.policy_loss.ppo_kl_coef"),
        _family_knob("kl_cov", f"{A}.policy_loss.ppo_kl_coef", 1.0),
        "kl_cov only",
    ),
    _r(f"{A}.policy_loss.dro_beta", "the DRO loss is not computed by the Arctic server: remove it"),
    _m(f"{A}.loss_agg_mode", "loss.loss_agg_mode", transform=str),
    _m(f"{A}.loss_scale_factor", "loss.loss_scale_factor", transform=_unset_if_none),
    _m(f"{A}.entropy_coeff", "loss.entropy_coeff", transform=_float),
    _r(f"{A}.calculate_entropy", f"the Arctic path computes entropy when {A}.entropy_coeff != 0: remove it"),
    _r(f"{A}.calculate_sum_pi_squared", "not computed by the Arctic training job: set it to false"),
    _m(f"{A}.use_kl_loss", "loss.use_kl_loss", transform=bool),
    Derived(
        "placement.log_prob_gpus",
        (f"{A}.use_kl_loss", "algorithm.use_kl_in_reward"),
        _log_prob_gpus,
        "use_kl_loss or use_kl_in_reward: as many as training (verl's reference shares the actor's GPUs); "
        "remote_backend.core.placement.log_prob_gpus overrides",
    ),
    _m(f"{A}.kl_loss_coef", "loss.kl_loss_coef", transform=_float),
    _m(f"{A}.kl_loss_type", "loss.kl_loss_type", transform=str),
    _r(
        f"{A}.use_prefix_grouper",
        "the Arctic counterpart is remote_backend.core.zorro.enable: set it to false",
    ),
    _m(f"{A}.ppo_epochs", "batch.epochs", transform=int),
    _p(
        f"{A}.shuffle",
        "verl's mini-batch iterator in the forwarder's update_actor (seeded by data_loader_seed), over the "
        "step's rows in dataloader order (adapter_verl.batch_order): the same mini-batches in every run",
    ),
    _p(f"{A}.data_loader_seed", f"the seed of verl's mini-batch shuffle (with {A}.shuffle=true)"),
    _r(
        f"{A}.checkpoint.save_contents",
        "the Arctic backend saves model, optimizer and state; HF export ('hf_model'): arctic-platform 0.1.4 "
        "has save_checkpoint(export_hf=True) but this adapter does not send it yet: remove it",
    ),
    _r(f"{A}.checkpoint.load_contents", "the Arctic backend loads model, optimizer and state: remove it"),
    _r(f"{A}.checkpoint.async_save", "Arctic checkpoints are synchronous: set it to false"),
    _na(f"{A}.checkpoint.strict", "verl's FSDP checkpoint loader"),
    _r(f"{A}.grad_clip", f"use {A}.optim.clip_grad"),
    Derived(
        "placement.ulysses_sequence_parallel_size",
        (f"{A}.ulysses_sequence_parallel_size", f"{A}.fsdp_config.ulysses_sequence_parallel_size"),
        _ulysses,
        "either (they must agree when both are set)",
    ),
    # -- reference policy --------------------------------------------------------------------
    _na(f"{REF}", REF_WORKER),
    _p(f"{REF}.rollout_n", "follows actor_rollout_ref.rollout.n"),
    # -- rollout -------------------------------------------------------------------------------
    _r(f"{R}.name", f"set {R}.name=arctic (vllm is accepted and means the Arctic server's vLLM)"),
    _r(f"{R}.mode", "the arctic rollout serves verl's async agent loop: set it to async"),
    Derived(
        "placement.sampling_gpus",
        (
            "actor_rollout_ref.hybrid_engine",
            "trainer.nnodes",
            "trainer.n_gpus_per_node",
            f"{R}.nnodes",
            f"{R}.n_gpus_per_node",
        ),
        _sampling_gpus,
        "hybrid engine: the training GPUs; hybrid_engine=false: rollout.nnodes x rollout.n_gpus_per_node",
    ),
    _m(f"{R}.temperature", "loss.temperature", "also every rollout's sampling temperature", _float),
    _p(f"{R}.top_k", "per-request sampling parameter"),
    _p(f"{R}.top_p", "per-request sampling parameter"),
    _p(f"{R}.do_sample", "per-request sampling parameter"),
    _r(f"{R}.full_determinism", "the 0.1.4 server has no deterministic-sampling switch: set it to false"),
    _r(f"{R}.seed", "every Arctic job's seed is data.seed: set that instead"),
    _p(f"{R}.prompt_length", "follows data.max_prompt_length"),
    _p(f"{R}.response_length", "follows data.max_response_length; the default max tokens of a rollout"),
    _r(f"{R}.dtype", "the Arctic sampling job serves the model's dtype: remove it"),
    _m(f"{R}.gpu_memory_utilization", "vllm.gpu_memory_utilization", transform=_float),
    _r(f"{R}.ignore_eos", "set it to false"),
    _m(f"{R}.enforce_eager", "vllm.enforce_eager", transform=bool),
    _r(
        f"{R}.cudagraph_capture_sizes",
        f"use {R}.engine_kwargs.vllm.compilation_config.cudagraph_capture_sizes",
    ),
    _na(f"{R}.free_cache_engine", "the Arctic server sleeps and wakes its engines when colocated"),
    _m(
        f"{R}.tensor_model_parallel_size",
        "placement.sampling_tensor_parallel_size",
        "verl itself then runs TP 1 forwarders",
        int,
    ),
    _r(f"{R}.data_parallel_size", "vLLM engines = sampling GPUs / tensor_model_parallel_size: set it to 1"),
    _r(f"{R}.expert_parallel_size", "the Arctic sampling job has no expert parallelism: set it to 1"),
    _r(
        f"{R}.pipeline_model_parallel_size",
        "the Arctic sampling job has no pipeline parallelism: set it to 1",
    ),
    _m(f"{R}.max_num_batched_tokens", "vllm.max_num_batched_tokens", transform=_int_or_unset),
    _m(f"{R}.max_model_len", "vllm.max_model_len", transform=_int_or_unset),
    _m(f"{R}.max_num_seqs", "vllm.max_num_seqs", "also the adapter's generate batch", int),
    _m(f"{R}.enable_chunked_prefill", "vllm.enable_chunked_prefill", transform=bool),
    _m(f"{R}.enable_prefix_caching", "vllm.enable_prefix_caching", transform=bool),
    _m(f"{R}.logprobs_mode", "vllm.logprobs_mode", "the sampling engine's vLLM logprobs_mode", str),
    _r(f"{R}.scheduling_policy", f"use {R}.engine_kwargs.vllm.scheduling_policy"),
    _na(f"{R}.load_format", "the Arctic sampling job loads the model itself"),
    _na(f"{R}.layered_summon", "FSDP weight gathering; the Arctic weight sync replaces it"),
    _na(f"{R}.log_prob_micro_batch_size", LOGPROB_BATCHING),
    _na(f"{R}.log_prob_micro_batch_size_per_gpu", LOGPROB_BATCHING),
    _na(f"{R}.log_prob_use_dynamic_bsz", LOGPROB_BATCHING),
    _na(f"{R}.log_prob_max_token_len_per_gpu", LOGPROB_BATCHING),
    _na(f"{R}.disable_log_stats", "vLLM statistics of verl's own engines"),
    _m(f"{R}.n", "batch.rollouts_per_prompt", transform=int),
    _r(f"{R}.over_sample_rate", "set it to 0"),
    _na(f"{R}.multi_stage_wake_up", "the Arctic server wakes weights, then the KV cache"),
    Derived(
        "vllm.engine_args",
        (f"{R}.engine_kwargs.vllm", f"{R}.quantization"),
        _engine_args,
        "engine_kwargs.vllm, plus quantization",
    ),
    _na(f"{R}.engine_kwargs.sglang", "the Arctic sampling job is vLLM"),
    _na(f"{R}.engine_kwargs.trtllm", "the Arctic sampling job is vLLM"),
    _p(f"{R}.val_kwargs", "verl's validation sampling, served by the arctic rollout"),
    _r(f"{R}.router_config_path", "the arctic rollout routes to the Arctic server itself: remove it"),
    _r(f"{R}.multi_turn.enable", "multi-turn rollouts are not supported yet: set it to false"),
    _na(f"{R}.multi_turn", "multi-turn is off"),
    _p(f"{R}.calculate_log_probs", "rollout log-probs come back with every generation"),
    _p(f"{R}.agent.num_workers", "verl's agent-loop workers"),
    _r(f"{R}.agent.default_agent_loop", "the arctic rollout serves single-turn generation: remove it"),
    _r(f"{R}.agent.agent_loop_config_path", "the arctic rollout serves single-turn generation: remove it"),
    _r(f"{R}.agent.custom_async_server.path", "the arctic rollout is the server: remove it"),
    _na(f"{R}.agent.custom_async_server.name", "see agent.custom_async_server.path"),
    _na(
        f"{R}.checkpoint_engine",
        "weights reach the sampler by the Arctic weight sync (remote_backend.core.weight_sync)",
    ),
    _p(f"{R}.trace", "verl's rollout tracing"),
    _na(f"{R}.skip_tokenizer_init", "the Arctic sampling job takes text prompts"),
    _r(f"{R}.enable_rollout_routing_replay", "set it to false"),
    _na(f"{R}.moe_load_balance_metrics_interval", "metrics of verl's own engines"),
    _r(f"{R}.prometheus.enable", "metrics of verl's own engines: set it to false"),
    _na(f"{R}.prometheus", "prometheus is off"),
    _r(f"{R}.quantization_config_file", f"use {R}.engine_kwargs.vllm"),
    _na(f"{R}.mtp", "follows actor_rollout_ref.model.mtp"),
    _na(f"{R}.qat", "follows the actor's qat"),
    _r(
        f"{R}.disaggregation.enabled",
        "prefill/decode disaggregation is not in the Arctic sampling job: set it to false",
    ),
    _na(f"{R}.disaggregation", "disaggregation is off"),
    # -- algorithm -------------------------------------------------------------------------------
    _p("algorithm", "verl computes advantages"),
    _na("algorithm.gamma", "GAE only (needs a critic)"),
    _na("algorithm.lam", "GAE only (needs a critic)"),
    _m(
        "algorithm.use_kl_in_reward",
        "loss.use_kl_in_reward",
        "verl subtracts the KL penalty from the rewards (apply_kl_penalty) with reference log-probs from the "
        "Arctic log-prob job; no KL term in the server loss",
        bool,
    ),
    _p("algorithm.kl_penalty", "verl's KL-in-reward estimator (apply_kl_penalty)"),
    _p("algorithm.kl_ctrl", "verl's KL-in-reward controller (apply_kl_penalty)"),
    _p(
        "algorithm.rollout_correction",
        "verl computes the rollout importance-sampling weights (rollout_is*) and the rejection mask "
        "(rollout_rs*) from the rollout log-probs; the weights go on the wire as rollout_is_weights and the "
        "server loss multiplies them in, rejected tokens leave the response mask",
    ),
    _p(
        "algorithm.rollout_correction.bypass_mode",
        "verl's V1 trainer: true sets the old log-probs to the rollout's (no old-log-prob forward; the PPO ratio "
        "is against the sampling policy, and verl computes no rollout_is / rollout_rs then: refused with them); "
        "what lets separate_async run parameter_sync_step > 1 (no pi_old to keep); true needs "
        "trainer.v1.trainer_mode=separate_async and rollout.calculate_log_probs=true (checked at dry run)",
    ),
    _na(
        "algorithm.rollout_correction.loss_type",
        "verl's V1 trainer reads it only in its bypass_mode policy loss (actor.policy_loss.loss_mode=bypass_mode, "
        "which the Arctic path does not serve); with bypass_mode=true the policy loss is actor.policy_loss",
    ),
    # -- trainer ---------------------------------------------------------------------------------
    _p("trainer", "verl's training loop, logging and validation schedule"),
    Derived(
        "placement.training_gpus",
        ("trainer.nnodes", "trainer.n_gpus_per_node"),
        _training_gpus,
        "nnodes x n_gpus_per_node",
    ),
    _p(
        "trainer.total_training_steps",
        "verl's loop; also optimizer.total_training_steps (null: from the dataloader, set by the trainer)",
    ),
    _m(
        "trainer.default_local_dir",
        "checkpoint.path",
        "made absolute; verl's own trainer state goes below it too",
        _checkpoint_path,
    ),
    _r("trainer.default_hdfs_dir", "the Arctic backend saves to the filesystem only: set it to null"),
    _m(
        "trainer.max_actor_ckpt_to_keep",
        "checkpoint.save_total_limit",
        "the server keeps the newest N backend checkpoints (one folder per run, arctic_backend/checkpoint-<n>); "
        "null or <= 0 keeps all, as in verl",
        _keep_count,
    ),
    _na("trainer.max_critic_ckpt_to_keep", "no critic"),
    _r("trainer.del_local_ckpt_after_load", "checkpoints belong to the Arctic backend: set it to false"),
    _r("trainer.checkpoint_callback_class", "remove it"),
    _na("trainer.critic_warmup", "no critic"),
    _r("trainer.device", "verl's workers are CPU forwarders; GPUs belong to the Arctic server: remove it"),
    _r("trainer.use_v1", "set trainer.use_v1=true (the V1 trainer)"),
    Derived(
        "async.max_staleness",
        (TRAINER_MODE_FIELD, OFF_POLICY_THRESHOLD, SYNC_STEP_FIELD, f"{A}.ppo_epochs"),
        _max_staleness,
        "trainer_mode arctic (synchronous): 0; separate_async (the adapter's arctic_separate_async): "
        "(max_off_policy_threshold x parameter_sync_step - 1) x ppo_epochs optimizer steps (a trajectory spans "
        "at most threshold steps from its prompt's submission, each of parameter_sync_step updates of one "
        "mini-batch and one weight sync; null, unbounded, is rejected); parameter_sync_step > 1 needs "
        "algorithm.rollout_correction.bypass_mode=true (verl's decoupled mode keeps pi_old on the trainer, the "
        "Arctic training job has one copy of the weights; checked at dry run); colocate_async is rejected",
    ),
    Derived(
        "async.stale_policy",
        (TRAINER_MODE_FIELD, OFF_POLICY_STRATEGY),
        _stale_policy,
        "separate_async with staleness > 0: drop -> drop (verl's replay buffer drops the group); wait -> "
        "the core default (verl holds the step until stale groups in flight finish: none exceeds the bound)",
    ),
    Derived(
        "async.is_weight_cap",
        (TRAINER_MODE_FIELD, f"{RC}.rollout_is", f"{RC}.rollout_is_threshold"),
        _is_weight_cap,
        "separate_async with staleness > 0 and rollout_is=token: rollout_is_threshold (verl computes the "
        "weights); rollout_is null: the core's truncated IS weights, cap remote_backend.core.async.is_weight_cap "
        "(bypass_mode=true: none sent, the old log-probs are the rollout's and every weight would be 1)",
    ),
    _na(
        "trainer.v1.colocate_async",
        "verl's colocate_async mode, rejected on the Arctic path (see trainer.v1.trainer_mode)",
    ),
    _p(
        "trainer.v1.separate_async.num_warmup_batches",
        "verl's separate-async prefetch window (batches submitted for generation ahead of training); "
        "unused by the synchronous arctic mode",
    ),
    _na(
        "trainer.v1.separate_async.hybrid_rollout",
        "lends the hybrid engine's training GPUs to rollout between steps; separate_async on the Arctic "
        "path has no hybrid engine (actor_rollout_ref.hybrid_engine=false), and verl turns switching off then",
    ),
    _p("trainer.v1.sync", "the arctic trainer mode is verl's synchronous trainer"),
    _p("trainer.v1.sampler", "verl's replay buffer"),
    _p(
        "trainer.v1.sampler.sync_refill_failed_groups",
        "verl's replay buffer: in the synchronous arctic mode it refills groups whose rollouts failed (opt-in); "
        "separate_async refills every failed group whatever it says (verl's eviction matrix)",
    ),
    _p(
        "trainer.v1.sampler.custom_sampler",
        "verl's replay buffer class (path, name) and its sampler_kwargs: a custom buffer chooses what verl "
        "trains and in which order (verl's own buffer's completion order is restored to dataloader order), "
        "and in separate_async the forwarder still passes every row's weights version through the "
        "core's StalenessGate before training (a stale row is an error, never trained)",
    ),
    _p(
        "trainer.v1.sampler.sampler_kwargs",
        "the custom replay buffer's arguments (see trainer.v1.sampler.custom_sampler)",
    ),
    _na("trainer.ray_wait_register_center_timeout", "verl's worker start-up"),
    # -- the rest of verl ----------------------------------------------------------------------
    _na("critic", "no critic on the Arctic path (GRPO-style estimators only)"),
    _r("critic.enable", "no critic on the Arctic path: set critic.enable=false"),
    _p("reward", "verl's reward loop"),
    _r(
        "reward.reward_model.enable",
        "model-based rewards are not served by the Arctic path: use reward.custom_reward_function",
    ),
    _na("reward.reward_model", "model-based reward is off"),
    _p("custom_reward_function", "verl's older name of reward.custom_reward_function"),
    _na("reward_model", "verl's older name of reward.reward_model (off)"),
    _p("sandbox_fusion", "verl's older name of reward.sandbox_fusion"),
    _r("distillation.enabled", "on-policy distillation is not on the Arctic path: set it to false"),
    _na("distillation", "distillation is off"),
    _na("global_profiler", PROFILER),
    _r("global_profiler.tool", PROFILER + ": remove it"),
    _p("ray_kwargs", "verl's Ray start-up"),
    _p("transfer_queue", "verl's TransferQueue"),
    _p("skip", "verl's rollout dump and replay"),
    _na("model_engine", "verl's training engine family: the Arctic training job is DeepSpeed"),
)


VERL_FIELDS = FieldTable("verl 0.9.1", ENTRIES)


def write_readme(path: str) -> None:
    """Regenerate the README's verl mapping table (between the `verl-fields` markers)."""
    from pathlib import Path

    from arctic_rl_core.config.framework_fields import replace_marked_section

    readme = Path(path)
    readme.write_text(
        replace_marked_section(readme.read_text(encoding="utf-8"), "verl-fields", VERL_FIELDS.markdown())
    )


if __name__ == "__main__":  # python -m adapter_verl.field_table --write README.md
    import sys

    if sys.argv[1:2] != ["--write"] or len(sys.argv) != 3:
        raise SystemExit("usage: python -m adapter_verl.field_table --write README.md")
    write_readme(sys.argv[2])
