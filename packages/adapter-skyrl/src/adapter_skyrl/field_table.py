"""Every field of SkyRL 0.4.0's `SkyRLTrainConfig`, classified for the Arctic path (one table).

SkyRL's own fields are the source of truth for everything SkyRL has a field for: GPUs and nodes,
engines x TP, colocation, the vLLM engine knobs, attention, gradient checkpointing, offload,
sequence parallelism, token budgets, seeds, checkpoints, batch shape, optimizer, loss and KL. The
table drives the translation (`adapter_skyrl.config`), the startup report (settings that do not
apply) and the README's mapping table (`python -m adapter_skyrl.field_table --write README.md`);
`tests/skyrl/test_skyrl_field_table.py` walks the installed dataclass tree and fails on any
unclassified leaf.

A reader of the table may also be asked for `ARCTIC_ZORRO`: whether ZoRRo is on for this run
(the core resolves it from the backend), which decides what SkyRL's micro-batch means.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

from arctic_rl_core.config.framework_fields import (
    UNSET,
    Derived,
    FieldProblem,
    FieldTable,
    Mapped,
    NotApplicable,
    PassedThrough,
    Reader,
    Rejected,
)
from arctic_rl_core.config.lora_fields import lora_entries

FRAMEWORK = "SkyRL 0.4.0"
ARCTIC_ZORRO = "@arctic.zorro"  # pseudo field: ZoRRo on for this run (resolved by the adapter)
EXTENSION = "trainer.arctic_rl"

# loss_reduction -> the server's aggregation (the server aggregates; SkyRL's advantage pre-scaling is off).
LOSS_REDUCTION_TO_AGG_MODE = {
    "token_mean": "token-mean",
    "sequence_mean": "seq-mean-token-mean",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
}
SCHEDULERS = {"constant_with_warmup": "constant", "cosine": "cosine"}
KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
ARCTIC_BACKEND = "@arctic.backend"  # pseudo field: the run's core `backend` group (kind defaulted)
# SkyRL policy_loss_type -> a core loss family the server computes (arctic_rl_core.losses); SkyRL's
# `regular` is PPO clip WITHOUT dual clip, `dual_clip` adds it.
SKYRL_POLICY_LOSSES = {
    "regular": "ppo_clip",
    "dual_clip": "dual_clip",
    "gspo": "gspo",
    "sapo": "sapo",
    "cispo": "cispo",
    "clip_cov": "clip_cov",
    "kl_cov": "kl_cov",
    # the behaviour policy is the rollout: the adapter sends the rollout log-probs as old log-probs
    "rollout_is": "rollout_is",
}


def steps_per_epoch_reader(read: Reader) -> int | None:
    value = read("@data.steps_per_epoch")
    return None if value is None else int(value)


def _training_gpus(r: Reader) -> int:
    return int(r("trainer.placement.policy_num_gpus_per_node")) * int(r("trainer.placement.policy_num_nodes"))


def _sampling_gpus(r: Reader) -> int:
    return int(r("generator.inference_engine.num_engines")) * int(
        r("generator.inference_engine.tensor_parallel_size")
    )


def _log_prob_gpus(r: Reader) -> int:
    if not (r("trainer.algorithm.use_kl_loss") or r("trainer.algorithm.use_kl_in_reward")):
        return 0
    return int(r("trainer.placement.ref_num_gpus_per_node")) * int(r("trainer.placement.ref_num_nodes"))


def _micro(r: Reader) -> Any:
    value = int(r("trainer.micro_train_batch_size_per_gpu"))
    if r(ARCTIC_ZORRO):
        return UNSET  # ZoRRo sizes micro-batches to whole prompt groups (the seed's rule)
    return value


def _keep_count(value: Any) -> Any:
    if int(value) < 0:
        return UNSET  # SkyRL's -1: keep every checkpoint
    if int(value) == 0:
        raise FieldProblem(
            "SkyRL's cleanup would delete every checkpoint, the one just saved included",
            "set trainer.max_ckpts_to_keep=-1 (keep all) or a count >= 1",
        )
    return int(value)


def _attn(r: Reader) -> Any:
    return UNSET if r("trainer.flash_attn") else "sdpa"


def _family(value: Any) -> str:
    if value not in SKYRL_POLICY_LOSSES:
        raise FieldProblem(
            "the Arctic server computes the GRPO-family losses and rollout_is (arctic_rl_core.losses); "
            "dppo's divergence mask has no server loss, the others are not RL losses",
            f"use one of {list(SKYRL_POLICY_LOSSES)}",
        )
    return SKYRL_POLICY_LOSSES[value]


def _loss_fn(r: Reader) -> Any:
    from arctic_rl_core.config.loss_selection import server_loss_for

    family = SKYRL_POLICY_LOSSES.get(r("trainer.algorithm.policy_loss_type"))
    if family is None:
        return UNSET  # reported once, by the policy_loss entry
    agg = LOSS_REDUCTION_TO_AGG_MODE.get(r("trainer.algorithm.loss_reduction"), "token-mean")
    return server_loss_for(family, r(ARCTIC_BACKEND), loss_agg_mode=agg)


def _is_family(r: Reader, family: str) -> bool:
    return SKYRL_POLICY_LOSSES.get(r("trainer.algorithm.policy_loss_type")) == family


def _clip(side: str) -> Any:
    def compute(r: Reader) -> Any:
        if _is_family(r, "cispo"):  # CISPO clips its IS weight with its own bounds
            return r(f"trainer.algorithm.cispo.cispo_eps_clip_{side}")
        return r(f"trainer.algorithm.eps_clip_{side}")

    return compute


def _family_knob(family: str, field: str) -> Any:
    def compute(r: Reader) -> Any:
        return r(field) if _is_family(r, family) else UNSET

    return compute


def _agg(value: Any) -> str:
    if value == "token_mean_legacy":  # SkyRL's DAPO fully async example sets it
        raise FieldProblem(
            "token_mean_legacy divides each micro-batch of trainer.micro_train_batch_size_per_gpu rows by its own "
            "token count; the Arctic server forms its own micro-batches (balanced by sequence length), so that "
            "per-micro-batch divisor cannot be reproduced",
            "use token_mean (one divisor, the mini-batch's response tokens; token_mean_legacy gives the same loss "
            "whenever every micro-batch holds as many response tokens)",
        )
    if value not in LOSS_REDUCTION_TO_AGG_MODE:
        raise FieldProblem(
            "the Arctic server aggregates the loss itself and has no such mode",
            f"use one of {list(LOSS_REDUCTION_TO_AGG_MODE)}",
        )
    return LOSS_REDUCTION_TO_AGG_MODE[value]


def _kl_type(value: Any) -> str:
    if value not in KL_ESTIMATORS:
        raise FieldProblem(
            "the server's kl_penalty has no such estimator", f"use one of {list(KL_ESTIMATORS)}"
        )
    return value


def _scheduler(value: Any) -> str:
    if value not in SCHEDULERS:
        raise FieldProblem(
            "the core schedule is a linear warmup then constant or cosine",
            f"use one of {list(SCHEDULERS)}",
        )
    return SCHEDULERS[value]


def _scale_factor(r: Reader) -> Any:
    if r("trainer.algorithm.loss_reduction") != "seq_mean_token_sum_norm":
        return None
    return r("trainer.algorithm.max_seq_len")


def _entropy(r: Reader) -> float:
    return float(r("trainer.algorithm.entropy_loss_coef")) if r("trainer.algorithm.use_entropy_loss") else 0.0


def _temperature(r: Reader) -> float:
    algo = r("trainer.algorithm.temperature")
    return float(algo if algo is not None else r("generator.sampling_params.temperature"))


def total_training_steps(r: Reader) -> int | None:
    per_epoch = steps_per_epoch_reader(r)
    if per_epoch is None:
        return None
    steps = per_epoch * int(r("trainer.epochs"))
    limit = r("trainer.max_training_steps")
    return min(steps, int(limit)) if limit is not None else steps


def _total_steps(r: Reader) -> Any:
    steps = total_training_steps(r)
    if steps is None:
        limit = r("trainer.max_training_steps")
        return int(limit) if limit is not None else UNSET
    return steps


def _warmup_ratio(r: Reader) -> float:
    warmup = int(r("trainer.policy.optimizer_config.num_warmup_steps"))
    if warmup == 0:
        return 0.0
    steps = _total_steps(r)
    if steps is UNSET:
        raise FieldProblem(
            "a warmup needs the run's length (the dataset or trainer.max_training_steps)",
            "set trainer.max_training_steps",
        )
    per_step = (int(r("trainer.train_batch_size")) // int(r("trainer.policy_mini_batch_size"))) * int(
        r("trainer.update_epochs_per_batch")
    )
    return warmup / (steps * per_step)


def _token_budget(value: Any) -> Any:
    return UNSET if int(value) <= 0 else int(value)


def _model_name(value: Any) -> Any:
    return value


def _max_staleness(r: Reader) -> Any:
    if not r("trainer.fully_async.enabled"):
        return UNSET  # the core default: 0, the synchronous path
    return int(r("trainer.fully_async.max_staleness_steps")) * int(r("trainer.update_epochs_per_batch"))


def _is_weight_cap(r: Reader) -> Any:
    """The token TIS cap of an asynchronous run (SkyRL computes the weights; the core records the cap)."""
    if _max_staleness(r) in (UNSET, 0):
        return UNSET
    if r("trainer.algorithm.off_policy_correction.tis_ratio_type") == "token":
        return float(r("trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high"))
    if r("trainer.algorithm.off_policy_correction.tis_ratio_type") is None and r("trainer.algorithm.use_tis"):
        return float(r("trainer.algorithm.tis_imp_ratio_cap"))
    return UNSET


def _one(value: Any) -> bool:
    return value == 1


_CRITIC = "the Arctic backend trains the policy only (critic-free GRPO-family estimators)"
_FSDP = "the Arctic server trains with DeepSpeed (trainer.arctic_rl.deepspeed.*), not SkyRL's FSDP workers"
_MEGATRON = "the Arctic server trains with DeepSpeed; SkyRL's Megatron settings do not apply"
_REF = (
    "the Arctic log-prob job serves the policy's initial weights with the training job's DeepSpeed settings"
)
_ENGINE = "the Arctic server runs the vLLM engines; SkyRL starts none"
_LOGPROB_KERNELS = (
    "the Arctic server computes log-probs and entropy itself (trainer.arctic_rl.zorro.logits_*)"
)
_TRACKER = "SkyRL's tracker and logging"
_LORA = "trainer.policy.model.lora"
_TIS = "the adapter's rollout_is_weights on the wire (SkyRL's compute_tis_ratio; the server's loss multiplies by them)"
_OPC = (
    "SkyRL's off-policy correction, computed by the adapter with SkyRL's own compute_off_policy_correction "
    "(pi_old vs pi_rollout): TIS weights -> rollout_is_weights, sequence / outlier / token masks -> the loss "
    "mask sent on the wire"
)
_UNUSED_LOSS = "a parameter of a SkyRL policy loss the Arctic server does not compute"

ENTRIES = [
    # -- placement: GPUs, nodes, engines, colocation ---------------------------------------------
    Mapped("trainer.placement.colocate_all", "placement.colocate", bool, "true = colocated Arctic jobs (sleep/wake)"),
    NotApplicable("trainer.placement.colocate_policy_ref", "the Arctic server colocates every job when placement.colocate"),
    Derived("placement.training_gpus", ("trainer.placement.policy_num_gpus_per_node", "trainer.placement.policy_num_nodes"),
            _training_gpus, "policy_num_gpus_per_node x policy_num_nodes"),
    Derived("placement.sampling_gpus", ("generator.inference_engine.num_engines", "generator.inference_engine.tensor_parallel_size"),
            _sampling_gpus, "num_engines x tensor_parallel_size"),
    Mapped("generator.inference_engine.tensor_parallel_size", "placement.sampling_tensor_parallel_size"),
    Derived("placement.log_prob_gpus", ("trainer.placement.ref_num_gpus_per_node", "trainer.placement.ref_num_nodes",
            "trainer.algorithm.use_kl_loss", "trainer.algorithm.use_kl_in_reward"),
            _log_prob_gpus, "ref_num_gpus_per_node x ref_num_nodes when a KL term needs reference log-probs, else 0"),
    NotApplicable("trainer.placement.critic_num_nodes", _CRITIC),
    NotApplicable("trainer.placement.critic_num_gpus_per_node", _CRITIC),
    Mapped("trainer.policy.sequence_parallel_size", "placement.ulysses_sequence_parallel_size"),
    Rejected("trainer.sequence_parallel_backend", "set trainer.sequence_parallel_backend=ulysses",
             why="the Arctic server's sequence parallelism is DeepSpeed Ulysses"),
    # -- model, kernels, precision ---------------------------------------------------------------
    Mapped("trainer.policy.model.path", "model.name", _model_name, "the model the Arctic server serves and trains"),
    # LoRA -> peft.* (training.peft on Cortex; on-prem kinds reject lora.rank > 0 at dry run, with the reason)
    *lora_entries(rank=f"{_LORA}.rank", alpha=f"{_LORA}.alpha", dropout=f"{_LORA}.dropout",
                  target_modules=f"{_LORA}.target_modules", exclude_modules=f"{_LORA}.exclude_modules"),
    Rejected(f"{_LORA}.init_method", "leave trainer.policy.model.lora.init_method at kaiming",
             why="the Arctic server initialises its adapters itself (PEFT's default: Kaiming-uniform A, zero B); "
                 "training.peft carries no init method"),
    Rejected(f"{_LORA}.max_loras", "leave it at 1", why="the Arctic sampler serves the one trained adapter"),
    Rejected(f"{_LORA}.max_cpu_loras", "unset it (null)", why="the Arctic sampler serves the one trained adapter"),
    NotApplicable(f"{_LORA}.lora_sync_path",
                  "the Arctic weight sync sends the adapter tensors itself (weight_format=lora): no files"),
    NotApplicable(f"{_LORA}.sync_mode", "Megatron's adapter transport; the Arctic weight sync is the server's"),
    NotApplicable(f"{_LORA}.share_expert_adapters", _MEGATRON),
    Rejected("trainer.policy.model.fake_int4_qat.enabled", "set it to false",
             why="the Arctic server has no quantization-aware training"),
    NotApplicable("trainer.policy.model.fake_int4_qat", "QAT settings apply only with fake_int4_qat.enabled"),
    Derived("kernels.attn_implementation", ("trainer.flash_attn",), _attn,
            "true = flash attention (FA2, or FA3 via trainer.arctic_rl.kernels.attn_implementation); false = sdpa"),
    Mapped("trainer.gradient_checkpointing", "kernels.gradient_checkpointing"),
    NotApplicable("trainer.gradient_checkpointing_use_reentrant", "DeepSpeed's activation checkpointing chooses its own mode"),
    Mapped("trainer.bf16", "deepspeed.bf16"),
    Mapped("trainer.policy.fsdp_config.cpu_offload", "deepspeed.offload_optimizer", bool,
           "FSDP CPU offload -> DeepSpeed optimizer offload (ZeRO >= 2); parameters: trainer.arctic_rl.deepspeed.offload_param"),
    NotApplicable("trainer.policy.fsdp_config", _FSDP),
    Rejected("trainer.strategy", "set trainer.strategy=fsdp (the ZeRO stage is trainer.arctic_rl.deepspeed.zero_stage)",
             why="the Arctic server trains with DeepSpeed; Megatron settings would not apply",
             accepts=lambda v: v in ("fsdp", "fsdp2")),
    NotApplicable("trainer.policy.megatron_config", _MEGATRON),
    Rejected("trainer.policy.use_torch_compile", "set it to false", why="the Arctic server does not torch.compile training"),
    NotApplicable("trainer.policy.record_memory", "memory snapshots are SkyRL worker features; the Arctic server has none"),
    Rejected("trainer.policy.torch_profiler_config.enable", "set it to false; profile the Arctic server with its own tools",
             why="SkyRL's profiler runs in SkyRL's workers, which the Arctic path does not start"),
    NotApplicable("trainer.policy.torch_profiler_config", "profiler settings apply only with torch_profiler_config.enable"),
    Rejected("trainer.policy.model_config_kwargs", "remove it", why="the Arctic server builds the model from model.name as is"),
    Rejected("trainer.policy.language_model_only", "set it to false", why="the Arctic backends take text-only models"),
    Rejected("trainer.policy.inference_only_init", "set it to false", why="the Arctic path always trains"),
    NotApplicable("trainer.use_expandable_segments", "the Arctic server sets its own CUDA allocator options"),
    # -- optimizer ---------------------------------------------------------------------------------
    Mapped("trainer.policy.optimizer_config.lr", "optimizer.lr"),
    Mapped("trainer.policy.optimizer_config.adam_betas", "optimizer.betas", tuple),
    Mapped("trainer.policy.optimizer_config.weight_decay", "optimizer.weight_decay"),
    Mapped("trainer.policy.optimizer_config.max_grad_norm", "optimizer.grad_clip"),
    Mapped("trainer.policy.optimizer_config.scheduler", "optimizer.scheduler", _scheduler,
           "constant_with_warmup -> constant, cosine -> cosine"),
    Derived("optimizer.warmup_ratio", ("trainer.policy.optimizer_config.num_warmup_steps",), _warmup_ratio,
            "num_warmup_steps / (training steps x optimizer steps per step)"),
    NotApplicable("trainer.policy.optimizer_config.offload_after_step",
                  "the core weight-sync policy offloads the optimizer around each colocated sync"),
    Derived("optimizer.total_training_steps", ("trainer.epochs", "trainer.max_training_steps"), _total_steps,
            "steps per epoch x epochs, capped by max_training_steps (SkyRL's own count)"),
    # -- reference model and critic ----------------------------------------------------------------
    NotApplicable("trainer.ref", _REF),
    NotApplicable("trainer.critic", _CRITIC),
    Rejected("trainer.critic.model.path", "unset trainer.critic.model.path", why=_CRITIC),
    NotApplicable("trainer.critic_mini_batch_size", _CRITIC),
    # -- algorithm ---------------------------------------------------------------------------------
    PassedThrough("trainer.algorithm.advantage_estimator",
                  "SkyRL's trainer computes the advantages: any estimator in SkyRL's registry but a critic's "
                  "(checked at dry run: adapter_skyrl.registries)"),
    PassedThrough("trainer.algorithm.kl_ctrl", "SkyRL's KL-in-reward controller (use_kl_in_reward)"),
    Mapped("trainer.algorithm.kl_estimator_type", "loss.kl_loss_type", _kl_type),
    Mapped("trainer.algorithm.use_kl_in_reward", "loss.use_kl_in_reward", bool,
           "SkyRL adds the KL penalty to rewards; the backend serves the reference log-probs"),
    Mapped("trainer.algorithm.use_kl_loss", "loss.use_kl_loss", bool),
    Mapped("trainer.algorithm.kl_loss_coef", "loss.kl_loss_coef"),
    Derived("loss.entropy_coeff", ("trainer.algorithm.use_entropy_loss", "trainer.algorithm.entropy_loss_coef"),
            _entropy, "entropy_loss_coef when use_entropy_loss, else 0"),
    Derived("loss.temperature", ("trainer.algorithm.temperature", "generator.sampling_params.temperature"),
            _temperature, "algorithm.temperature, else the sampling temperature"),
    PassedThrough("trainer.algorithm.advantage_batch_normalize", "SkyRL's advantage normalisation"),
    NotApplicable("trainer.algorithm.value_head_prefix", _CRITIC),
    Mapped("trainer.algorithm.policy_loss_type", "loss.policy_loss", _family,
           "regular -> ppo_clip, dual_clip, gspo, sapo, cispo, clip_cov, kl_cov (computed on the server)"),
    Derived("loss.loss_fn", ("trainer.algorithm.policy_loss_type",), _loss_fn,
            "the server loss that computes the family on this backend (arctic_rl_core, or the built-in verl_grpo)"),
    Mapped("trainer.algorithm.loss_reduction", "loss.loss_agg_mode", _agg,
           "token_mean -> token-mean, sequence_mean -> seq-mean-token-mean, seq_mean_token_sum_norm -> seq-mean-token-sum-norm"),
    PassedThrough("trainer.algorithm.grpo_norm_by_std", "SkyRL's GRPO advantages"),
    PassedThrough("trainer.algorithm.zero_variance_filter", "SkyRL's trainer"),
    # SkyRL's DAPO example config (DAPOConfig; here adapter_skyrl.dapo's ArcticDAPOConfig)
    PassedThrough("trainer.algorithm.overlong_buffer_len",
                  "DAPO's soft overlong punishment of the rewards (python -m adapter_skyrl.dapo, the counterpart of "
                  "SkyRL's DAPO example; arctic_rl_core.overlong)"),
    PassedThrough("trainer.algorithm.overlong_buffer_penalty_factor",
                  "DAPO's soft overlong punishment of the rewards (python -m adapter_skyrl.dapo)"),
    PassedThrough("trainer.algorithm.zero_variance_filter_tol", "SkyRL's trainer"),
    PassedThrough("trainer.algorithm.lambd", "SkyRL's advantage estimators"),
    PassedThrough("trainer.algorithm.gamma", "SkyRL's advantage estimators"),
    Derived("loss.clip_ratio_low", ("trainer.algorithm.eps_clip_low", "trainer.algorithm.cispo.cispo_eps_clip_low"),
            _clip("low"), "eps_clip_low (cispo: cispo_eps_clip_low)"),
    Derived("loss.clip_ratio_high", ("trainer.algorithm.eps_clip_high", "trainer.algorithm.cispo.cispo_eps_clip_high"),
            _clip("high"), "eps_clip_high (cispo: cispo_eps_clip_high)"),
    Mapped("trainer.algorithm.clip_ratio_c", "loss.clip_ratio_c"),
    Derived("loss.loss_scale_factor", ("trainer.algorithm.max_seq_len", "trainer.algorithm.loss_reduction"),
            _scale_factor, "max_seq_len with seq_mean_token_sum_norm"),
    PassedThrough("trainer.algorithm.off_policy_correction", _OPC),
    Rejected("trainer.algorithm.enable_sample_support_replay", "set it to false",
             why="the Arctic backend does not capture sample support"),
    *(Derived(core, (field,), _family_knob(family, field), f"with policy_loss_type={family}")
      for core, field, family in (
        ("loss.tau_pos", "trainer.algorithm.sapo.tau_pos", "sapo"),
        ("loss.tau_neg", "trainer.algorithm.sapo.tau_neg", "sapo"),
        ("loss.clip_cov_ratio", "trainer.algorithm.clip_cov.clip_ratio", "clip_cov"),
        ("loss.clip_cov_lb", "trainer.algorithm.clip_cov.clip_cov_lb", "clip_cov"),
        ("loss.clip_cov_ub", "trainer.algorithm.clip_cov.clip_cov_ub", "clip_cov"),
        ("loss.kl_cov_ratio", "trainer.algorithm.kl_cov.kl_cov_frac", "kl_cov"),
        ("loss.ppo_kl_coef", "trainer.algorithm.kl_cov.ppo_kl_coef", "kl_cov"),
      )),
    PassedThrough("trainer.algorithm.cispo.cispo_anchor",
                  "the behaviour policy the adapter sends as old log-probs: old = the trainer's forward, "
                  "rollout = the sampler's log-probs (as SkyRL's cispo reads them)"),
    NotApplicable("trainer.algorithm.dppo", _UNUSED_LOSS),
    NotApplicable("trainer.algorithm.value_clip", _CRITIC),
    PassedThrough("trainer.algorithm.dynamic_sampling.type",
                  "SkyRL's synchronous trainer: filter drops zero-variance groups and generates the next dataloader "
                  "batch until train_batch_size groups are kept (DAPO), replace swaps them for copies of kept "
                  "groups (POLARIS); one step then spans several generate calls, all with the last sync's weights "
                  "(fully async: refused, see trainer.fully_async.sample_full_batch)"),
    PassedThrough("trainer.algorithm.dynamic_sampling.max_sample_batches",
                  "SkyRL's synchronous trainer: it stops the run after this many generate calls without a full "
                  "batch (-1 or 0: no limit)"),
    PassedThrough("trainer.algorithm.dynamic_sampling.min_replace_ratio",
                  "SkyRL's synchronous trainer (replace): it replaces only when more than this share of the "
                  "batch's groups has reward variance, else it generates the next batch"),
    Rejected("trainer.mtp.enabled", "set it to false", why="the Arctic server trains no multi-token-prediction heads"),
    NotApplicable("trainer.mtp", "applies only with trainer.mtp.enabled"),
    # -- SkyRL's fully asynchronous trainer (adapter_skyrl.fully_async) ----------------------------
    Derived("async.max_staleness", ("trainer.fully_async.enabled", "trainer.fully_async.max_staleness_steps",
            "trainer.update_epochs_per_batch"), _max_staleness,
            "fully_async.enabled (SkyRL's FullyAsyncRayPPOTrainer, the adapter's ArcticFullyAsyncPPOTrainer): "
            "max_staleness_steps x update_epochs_per_batch (SkyRL counts training steps, the core optimizer "
            "steps); else 0"),
    Derived("async.is_weight_cap", ("trainer.algorithm.off_policy_correction.tis_ratio_type",
            "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high", "trainer.algorithm.use_tis",
            "trainer.algorithm.tis_imp_ratio_cap", "trainer.fully_async.enabled",
            "trainer.fully_async.max_staleness_steps"), _is_weight_cap,
            "asynchronous with token TIS: token_tis_ratio_clip_high (use_tis: tis_imp_ratio_cap); SkyRL's own "
            "compute_tis_ratio computes the weights with it"),
    PassedThrough("trainer.fully_async.num_parallel_generation_workers",
                  "SkyRL's generation workers (each has one prompt group's generate request in flight)"),
    PassedThrough("trainer.fully_async.sample_full_batch", "SkyRL's fully async trainer (drops zero-variance groups)"),
    NotApplicable("trainer.fully_async.clear_kv_cache_on_weight_sync",
                  "every Arctic weight sync resets the sampler's prefix cache (the core weight-sync policy, as "
                  "arctic-platform 0.1.4's sync_weights does): no KV cache outlives a weights version"),
    Rejected("trainer.fully_async.simulate_training", "set it to false",
             why="the simulated trainer trains nothing; the Arctic path runs the real one"),
    NotApplicable("trainer.fully_async.simulate_training_step_seconds", "applies only with simulate_training"),
    NotApplicable("trainer.fully_async.simulate_weight_sync_seconds", "applies only with simulate_training"),
    # -- run, seeds, checkpoints -------------------------------------------------------------------
    Mapped("trainer.seed", "determinism.seed"),
    PassedThrough("trainer.resume_mode", "SkyRL's checkpoint resume"),
    PassedThrough("trainer.resume_path", "SkyRL's checkpoint resume"),
    PassedThrough("trainer.log_path", "SkyRL's logs"),
    Mapped("trainer.ckpt_path", "checkpoint.path", str, "the Arctic training job's checkpoint directory (and SkyRL's)"),
    Mapped("trainer.max_ckpts_to_keep", "checkpoint.save_total_limit", _keep_count,
           "the server keeps the newest N backend checkpoints (one folder per run, arctic_backend/checkpoint-<n>); "
           "SkyRL's own cleanup keeps as many global_step folders; -1 keeps all"),
    PassedThrough("trainer.ckpt_interval", "SkyRL's checkpoint schedule"),
    Rejected("trainer.hf_save_interval",
             "set trainer.hf_save_interval=-1 and trainer.arctic_rl.checkpoint.export_hf=true (each checkpoint at "
             "trainer.ckpt_interval then carries an hf/ copy)",
             why="the Arctic server exports HF weights with each checkpoint (save_checkpoint(export_hf=True)), "
                 "not on a schedule of their own"),
    PassedThrough("trainer.export_path", "SkyRL's dumps and exports"),
    # -- batch shape -------------------------------------------------------------------------------
    Mapped("trainer.update_epochs_per_batch", "batch.epochs"),
    Mapped("trainer.train_batch_size", "batch.prompts_per_step"),
    Mapped("trainer.policy_mini_batch_size", "batch.mini_batch_prompts"),
    Derived("batch.micro_batch_size_per_gpu", ("trainer.micro_train_batch_size_per_gpu",), _micro,
            "as is without ZoRRo; with ZoRRo the micro-batch is whole prompt groups (the seed's rule)"),
    NotApplicable("trainer.micro_forward_batch_size_per_gpu", "the server's forward uses the training micro-batch"),
    Mapped("trainer.max_tokens_per_microbatch", "batch.max_token_len_per_gpu", _token_budget, "-1 -> the core's budget"),
    PassedThrough("trainer.recompute_old_logprobs_per_minibatch", "SkyRL's trainer (old log-prob forwards)"),
    Rejected("trainer.update_ref_every_epoch", "set it to false", why="the backend's reference model is fixed for the run"),
    NotApplicable("trainer.remove_microbatch_padding", "the server packs sequences itself (ZoRRo / unpadded)"),
    Mapped("trainer.max_prompt_length", "batch.max_prompt_length"),
    Mapped("generator.n_samples_per_prompt", "batch.rollouts_per_prompt"),
    Mapped("generator.sampling_params.max_generate_length", "batch.max_response_length"),
    # -- evaluation, logging, tokenizer (SkyRL's own) ---------------------------------------------
    PassedThrough("trainer.eval_batch_size", "SkyRL's evaluation"),
    PassedThrough("trainer.eval_before_train", "SkyRL's evaluation"),
    PassedThrough("trainer.eval_interval", "SkyRL's evaluation"),
    PassedThrough("generator.eval_n_samples_per_prompt", "SkyRL's evaluation"),
    PassedThrough("trainer.disable_fast_tokenizer", "the tokenizer the adapter loads"),
    *(PassedThrough(f"trainer.{name}", _TRACKER) for name in (
        "project_name", "run_name", "logger", "tags", "dump_data_batch", "dump_eval_results",
        "print_example_interval", "num_logger_eval_samples", "num_logger_train_samples", "log_example_interval",
    )),
    PassedThrough("trainer.enable_ray_gpu_monitor", "SkyRL's Ray GPU monitor"),
    NotApplicable("trainer.logprobs_chunk_size", _LOGPROB_KERNELS),
    NotApplicable("trainer.vocab_entropy_chunk_size", _LOGPROB_KERNELS),
    NotApplicable("trainer.vocab_entropy_chunk_memory_mb", _LOGPROB_KERNELS),
    NotApplicable("trainer.fused_lm_head_logprob", _LOGPROB_KERNELS),
    NotApplicable("trainer.fused_lm_head_logprob_backend", _LOGPROB_KERNELS),
    # -- inference engines -> the Arctic server's vLLM -------------------------------------------
    Mapped("generator.inference_engine.gpu_memory_utilization", "vllm.gpu_memory_utilization"),
    Mapped("generator.inference_engine.max_num_seqs", "vllm.max_num_seqs"),
    Mapped("generator.inference_engine.enable_prefix_caching", "vllm.enable_prefix_caching"),
    Mapped("generator.inference_engine.enable_chunked_prefill", "vllm.enable_chunked_prefill"),
    Mapped("generator.inference_engine.max_num_batched_tokens", "vllm.max_num_batched_tokens"),
    Mapped("generator.inference_engine.enforce_eager", "vllm.enforce_eager"),
    Mapped("generator.inference_engine.engine_init_kwargs", "vllm.engine_args", dict,
           "extra vLLM engine arguments (typed knobs' keys are rejected)"),
    Rejected("generator.inference_engine.model_dtype", "set it to bfloat16", why="the Arctic server serves the model in bf16"),
    Rejected("generator.inference_engine.fp8_weight_sync_mode", "unset it (null)", why="the Arctic weight sync is bf16"),
    NotApplicable("generator.inference_engine.run_engines_locally", _ENGINE),
    Rejected("generator.inference_engine.backend", "set it to vllm", why="the Arctic server's engines are vLLM"),
    NotApplicable("generator.inference_engine.weight_sync_backend",
                  "the core weight-sync policy picks NCCL (separate GPUs) or CUDA IPC (trainer.arctic_rl.weight_sync.cuda_ipc)"),
    NotApplicable("generator.inference_engine.weight_transfer_threshold_cuda_ipc_GB", "see weight_sync_backend"),
    Rejected("generator.inference_engine.delta_weight_sync", "unset it (null)", why="the Arctic weight sync sends full weights"),
    Rejected("generator.inference_engine.pipeline_parallel_size", "set it to 1", why="Arctic engines are tensor-parallel only",
             accepts=_one),
    Rejected("generator.inference_engine.expert_parallel_size", "set it to 1", why="Arctic engines are tensor-parallel only",
             accepts=_one),
    Rejected("generator.inference_engine.data_parallel_size", "set it to 1; more engines: num_engines",
             why="Arctic engines are tensor-parallel only", accepts=_one),
    NotApplicable("generator.inference_engine.vllm_v1_disable_multiproc", _ENGINE),
    Rejected("generator.inference_engine.enable_return_routed_experts", "set it to false",
             why="the Arctic backend does not return routed experts"),
    Rejected("generator.inference_engine.enable_return_sample_support_set", "set it to false",
             why="the Arctic backend does not capture sample support"),
    NotApplicable("generator.inference_engine.fully_sharded_loras",
                  "the Arctic sampler's vLLM LoRA kernels are the server's (training.peft enables them)"),
    NotApplicable("generator.inference_engine.enable_ray_prometheus_stats",
                  "there are no SkyRL vLLM engines to scrape (the adapter turns it off)"),
    NotApplicable("generator.inference_engine.offload_kv_for_weight_sync",
                  "the core weight-sync policy wakes the KV cache after each colocated sync"),
    NotApplicable("generator.inference_engine.use_expandable_segments", _ENGINE),
    NotApplicable("generator.inference_engine.served_model_name", _ENGINE),
    NotApplicable("generator.inference_engine.distributed_executor_backend", _ENGINE),
    Rejected("generator.inference_engine.language_model_only", "set it to false", why="the Arctic backends take text-only models"),
    Rejected("generator.inference_engine.speculative_config", "unset it; use trainer.arctic_rl.arctic_inference.speculative_model",
             why="speculative decoding on the Arctic server is Arctic Inference's"),
    Rejected("generator.inference_engine.external_proxy_url", "unset it", why="the Arctic server serves generation"),
    Rejected("generator.inference_engine.external_server_urls", "unset it", why="the Arctic server serves generation"),
    Rejected("generator.inference_engine.enable_pd", "set it to false", why="the Arctic server has no prefill/decode split"),
    NotApplicable("generator.inference_engine.num_prefill", "applies only with enable_pd"),
    NotApplicable("generator.inference_engine.prefill_init_kwargs", "applies only with enable_pd"),
    NotApplicable("generator.inference_engine.decode_init_kwargs", "applies only with enable_pd"),
    NotApplicable("generator.inference_engine.router_init_kwargs", _ENGINE),
    # -- generator ---------------------------------------------------------------------------------
    NotApplicable("generator.batched", "the Arctic generator sends each batch in one generate request"),
    Rejected("generator.max_turns", "set generator.max_turns=1", why="the Arctic generator is single-turn"),
    PassedThrough("generator.max_input_length", "SkyRL's validation (equals trainer.max_prompt_length)"),
    Rejected("generator.chat_template.source", "remove it; the tokenizer's own chat template is used",
             why="custom chat templates are not applied by the Arctic generator"),
    Rejected("generator.chat_template.name_or_path", "remove it; the tokenizer's own chat template is used",
             why="custom chat templates are not applied by the Arctic generator"),
    PassedThrough("generator.chat_template_kwargs", "the Arctic generator's chat template"),
    *(PassedThrough(f"generator.{group}.{name}", "the Arctic generator's sampling parameters")
      for group in ("sampling_params", "eval_sampling_params") for name in ("top_p", "top_k", "stop")),
    PassedThrough("generator.eval_sampling_params.temperature", "the Arctic generator's sampling parameters (evaluation)"),
    PassedThrough("generator.eval_sampling_params.max_generate_length", "the Arctic generator's sampling parameters (evaluation)"),
    *(x for group in ("sampling_params", "eval_sampling_params") for x in (
        Rejected(f"generator.{group}.min_p", "set it to 0.0", why="the backend's sampling parameters have no min_p"),
        Rejected(f"generator.{group}.repetition_penalty", "set it to 1.0",
                 why="the backend's sampling parameters have no repetition penalty"),
        Rejected(f"generator.{group}.additional_kwargs", "remove it",
                 why="the backend's sampling parameters are max_tokens, temperature, top_p, top_k, stop, logprobs"),
        Rejected(f"generator.{group}.logprobs", "use null, 0 or 1",
                 why="the backend returns the sampled token's log-prob only", accepts=lambda v: v in (None, 0, 1)),
    )),
    NotApplicable("generator.use_conversation_multi_turn", "the Arctic generator is single-turn"),
    NotApplicable("generator.append_eos_token_after_stop_str_in_multi_turn", "the Arctic generator is single-turn"),
    Rejected("generator.zero_reward_on_non_stop", "set it to false", why="the Arctic generator reports the raw reward"),
    NotApplicable("generator.use_cache_salt", "the Arctic server keys its prefix cache itself"),
    PassedThrough("generator.apply_overlong_filtering",
                  "the Arctic generator (DAPO's overlong filtering, as SkyRL's generator: a response whose stop "
                  "reason is not `stop`, i.e. truncated at max_generate_length, gets an all-zero loss mask)"),
    Rejected("generator.step_wise_trajectories", "set it to false", why="the Arctic generator is single-turn"),
    Rejected("generator.vision_language_generator", "set it to false", why="the Arctic backends take text only"),
    Rejected("generator.merge_stepwise_output", "set it to false", why="the Arctic generator is single-turn"),
    # -- data and environments ---------------------------------------------------------------------
    PassedThrough("data", "SkyRL's dataloader"),
    PassedThrough("environment.env_class", "the skyrl-gym environment of rows without env_class"),
    PassedThrough("environment.skyrl_gym", "the skyrl-gym environments (env_config of each env_class)"),
    # -- the Arctic extension ----------------------------------------------------------------------
    PassedThrough(EXTENSION, "the core schema groups SkyRL has no field for (and the seed's knobs)"),
    PassedThrough("trainer.arctic_trace_path", "the adapter's payload trace"),
]  # fmt: skip

TABLE = FieldTable(FRAMEWORK, ENTRIES)

# Core fields SkyRL owns that `trainer.arctic_rl` may still refine (SkyRL's field gives only a default).
REFINABLE = frozenset(
    {
        "kernels.attn_implementation",
        "batch.micro_batch_size_per_gpu",
        "batch.max_token_len_per_gpu",
        "deepspeed.offload_optimizer",
        "checkpoint.path",  # a server that writes its training job's files elsewhere
    }
)


def owned_core_fields() -> dict[str, str]:
    """Core field -> the SkyRL field(s) to set instead (an error under trainer.arctic_rl)."""
    return {core: " / ".join(TABLE.sources_of(core)) for core in sorted(TABLE.core_fields() - REFINABLE)}


def leaves(config: Any, prefix: str = "") -> Iterator[str]:
    """Dotted path of every leaf of a SkyRL config dataclass (mappings are leaves)."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from leaves(value, path + ".")
        else:
            yield path


def reader(config: Any, extra: dict[str, Any] | None = None) -> Reader:
    """Reads dotted SkyRL fields (and `extra` pseudo fields) of `config`."""
    extra = dict(extra or {})

    def read(path: str) -> Any:
        if path in extra:
            return extra[path]
        node = config
        for part in path.split("."):
            node = node[part] if isinstance(node, dict) else getattr(node, part)
        return node

    return read


def main(argv: list[str] | None = None) -> int:
    """`python -m adapter_skyrl.field_table [--write README.md]`: print or update the README tables."""
    from arctic_rl_core.config.framework_fields import replace_marked_section

    from adapter_skyrl.seed_keys import SEED_KEYS

    args = list(sys.argv[1:] if argv is None else argv)
    sections = {"skyrl-fields": TABLE.markdown(), "skyrl-seed-keys": SEED_KEYS.markdown()}
    if args[:1] == ["--write"] and len(args) == 2:
        from pathlib import Path

        path = Path(args[1])
        text = path.read_text(encoding="utf-8")
        for name, body in sections.items():
            text = replace_marked_section(text, name, body)
        path.write_text(text, encoding="utf-8")
        print(f"wrote the SkyRL field and seed-key tables into {path}")
        return 0
    for body in sections.values():
        sys.stdout.write(body + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
