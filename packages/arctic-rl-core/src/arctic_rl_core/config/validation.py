"""Cross-field rules of `ArcticRLConfig`, on its fields (`ArcticRLSettings`). Every rule reports, none stops the others: a config is
checked completely and all problems come back together, each naming field, value and fix.

A rule exists where the Arctic stack would fail late (DeepSpeed at engine build, vLLM at launch,
the server mid-run) or would silently ignore what the user asked for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from arctic_rl_core.backends.cortex_limits import CORTEX_LIMITS
from arctic_rl_core.config.errors import ConfigIssue
from arctic_rl_core.config.schema import ARCTIC_SERVER_CLIP_RATIOS, FAMILY_KNOB_FAMILIES, ArcticRLSettings
from arctic_rl_core.config.server_packing import server_packs_rows_across_attention

Rule = Callable[["ArcticRLSettings"], Iterable[ConfigIssue]]

# vLLM engine arguments owned by a typed knob (or set by the server itself).
VLLM_OWNED_KEYS: dict[str, str] = {
    "model": "model.name",
    "tensor_parallel_size": "placement.sampling_tensor_parallel_size",
    "gpu_memory_utilization": "vllm.gpu_memory_utilization",
    "max_num_seqs": "vllm.max_num_seqs",
    "enforce_eager": "vllm.enforce_eager",
    "enable_chunked_prefill": "vllm.enable_chunked_prefill",
    "enable_prefix_caching": "vllm.enable_prefix_caching",
    "max_model_len": "vllm.max_model_len",
    "max_num_batched_tokens": "vllm.max_num_batched_tokens",
    "logprobs_mode": "vllm.logprobs_mode",
    "enable_sleep_mode": "placement.colocate (the server turns sleep mode on when colocated)",
}

# DeepSpeed config keys owned by a typed knob or by the batch identity.
DEEPSPEED_OWNED_KEYS: dict[str, str] = {
    "train_batch_size": "batch.* (computed: mini-batch rows)",
    "train_micro_batch_size_per_gpu": "batch.micro_batch_size_per_gpu",
    "gradient_accumulation_steps": "batch.* (computed from the batch identity)",
    "sequence_parallel_size": "placement.ulysses_sequence_parallel_size",
    "optimizer": "optimizer.*",
    "scheduler": "optimizer.scheduler / warmup_ratio / total_training_steps",
    "gradient_clipping": "optimizer.grad_clip",
    "bf16": "deepspeed.bf16",
    "fp16": "deepspeed.bf16 (fp16 training is not supported)",
    "data_types": "deepspeed.grad_accum_dtype",
    "communication_data_type": "deepspeed.communication_data_type",
    "torch_autocast": "deepspeed.autocast / autocast_dtype",
    "zero_optimization.stage": "deepspeed.zero_stage",
    "zero_optimization.offload_optimizer": "deepspeed.offload_optimizer",
    "zero_optimization.offload_param": "deepspeed.offload_param",
}


def _issue(path: str, value: Any, problem: str, remedy: str) -> ConfigIssue:
    return ConfigIssue(path=path, value=value, problem=problem, remedy=remedy)


def _explicit(group: Any, name: str) -> bool:
    """Whether the user set `name` on `group` (as opposed to leaving the default)."""
    return name in group.model_fields_set


# ----------------------------------------------------------------------------------------------
# Backend and connection
# ----------------------------------------------------------------------------------------------


def _backend_fields_match_kind(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    backend = cfg.backend
    kind = backend.kind
    if kind != "http":
        for name in ("host", "port", "launch_local_server", "startup_timeout_s", "server_has_arctic_rl_core"):
            if _explicit(backend, name):
                yield _issue(
                    f"backend.{name}",
                    getattr(backend, name),
                    f"only the http backend uses it, and backend.kind is '{kind}'",
                    f"remove backend.{name}, or set backend.kind=http",
                )
    if kind != "cortex" and _explicit(backend, "cortex"):
        yield _issue(
            "backend.cortex",
            backend.cortex.model_dump(exclude_unset=True),
            f"only the cortex backend uses it, and backend.kind is '{kind}'",
            "remove backend.cortex, or set backend.kind=cortex",
        )
    if kind != "reference" and _explicit(backend, "reference"):
        yield _issue(
            "backend.reference",
            backend.reference.model_dump(exclude_unset=True),
            f"only the reference backend uses it, and backend.kind is '{kind}'",
            "remove backend.reference, or set backend.kind=reference",
        )
    if kind == "reference":
        for name in ("job_ready_timeout_s", "request_timeout_s"):
            if _explicit(backend, name):
                yield _issue(
                    f"backend.{name}",
                    getattr(backend, name),
                    "the reference backend runs in-process and has no server requests",
                    f"remove backend.{name}",
                )


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _worker_env_rules(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    env = cfg.backend.worker_env
    if env and not cfg.is_arctic:
        yield _issue(
            "backend.worker_env",
            env,
            f"only the Arctic server's workers take it, and backend.kind is '{cfg.backend.kind}'",
            "remove backend.worker_env, or set backend.kind to ray or http",
        )
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            yield _issue(
                f"backend.worker_env.{name}",
                env[name],
                "not an environment variable name",
                "use letters, digits, _",
            )
    if "ARCTIC_INFERENCE_ENABLED" in env:
        yield _issue(
            "backend.worker_env.ARCTIC_INFERENCE_ENABLED",
            env["ARCTIC_INFERENCE_ENABLED"],
            "owned by arctic_inference.enable (it sets the variable for every Arctic Inference run)",
            "remove it from backend.worker_env; set arctic_inference.enable instead",
        )
    if (
        cfg.placement.colocate
        and "expandable_segments:true" in env.get("PYTORCH_CUDA_ALLOC_CONF", "").lower()
    ):
        yield _issue(
            "backend.worker_env.PYTORCH_CUDA_ALLOC_CONF",
            env["PYTORCH_CUDA_ALLOC_CONF"],
            "colocated vLLM engines run in sleep mode, whose CuMemAllocator asserts 'Expandable segments are "
            "not compatible with memory pool' at start-up",
            "drop expandable_segments:True for colocated runs (keep it for separate training GPUs only)",
        )


def _arctic_needs_model_and_checkpoint(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    if not cfg.is_arctic:
        return
    if not cfg.model.name:
        yield _issue(
            "model.name",
            cfg.model.name,
            f"the {cfg.backend.kind} backend needs the model to serve and train",
            "set model.name to a Hugging Face id or a path the server can read, e.g. Qwen/Qwen3-0.6B",
        )
    if not cfg.checkpoint.path and cfg.backend.kind != "cortex":  # Cortex keeps its own checkpoint store
        yield _issue(
            "checkpoint.path",
            cfg.checkpoint.path,
            "the Arctic server refuses a training job without a checkpoint directory (HTTP 400)",
            "set checkpoint.path to a directory the training job can write (shared across nodes)",
        )
    if cfg.loss.loss_fn != "sft" and cfg.placement.sampling_gpus == 0:
        yield _issue(
            "placement.sampling_gpus",
            0,
            f"RL training (loss.loss_fn={cfg.loss.loss_fn}) generates rollouts, which needs a sampling job",
            "set placement.sampling_gpus >= 1",
        )


def _cortex_rules(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    """What Cortex cannot serve through the 0.1.4 client (`backends.cortex_limits`). Several epochs or
    mini-batches per rollout batch are fine: the old log-probs are the sampler's, not recomputed."""

    if cfg.backend.kind != "cortex":
        return
    cortex = cfg.backend.cortex
    if not cortex.base_url and not cortex.host:
        yield _issue(
            "backend.cortex.base_url",
            cortex.base_url,
            "Cortex needs a URL: either base_url, or host with database, schema_name and a token",
            "set backend.cortex.base_url, or backend.cortex.host + database + schema_name (+ token_env)",
        )
    if cortex.host and not cortex.base_url:
        for name in ("database", "schema_name"):
            if not getattr(cortex, name):
                yield _issue(
                    f"backend.cortex.{name}",
                    getattr(cortex, name),
                    "host (PAT) authentication needs the Snowflake database and schema",
                    f"set backend.cortex.{name}",
                )
    if cfg.placement.colocate:
        yield _issue(
            "placement.colocate",
            True,
            "Cortex always runs training and sampling as separate sub-jobs",
            "set placement.colocate=false for backend.kind=cortex",
        )
    for name in ("use_kl_loss", "use_kl_in_reward"):
        if getattr(cfg.loss, name):
            yield _issue(
                f"loss.{name}",
                True,
                "Cortex has no forward op (arctic-platform 0.1.4 CortexTransport), so there are no "
                "reference log-probs for a KL term",
                f"set loss.{name}=false, or use the ray/http backend",
            )
    if cfg.placement.log_prob_gpus:
        yield _issue(
            "placement.log_prob_gpus",
            cfg.placement.log_prob_gpus,
            "Cortex has no forward op, so a log-prob sub-job would serve nothing (old log-probs are the "
            "sampler's rollout log-probs, and there is no KL term)",
            "set placement.log_prob_gpus=0",
        )
    if cfg.loss.loss_fn == "sft":
        yield _issue(
            "loss.loss_fn",
            "sft",
            "the Cortex path of this project runs GRPO only: its forward-backward body is Cortex's grpo "
            "contract (old log-probs, advantages, loss mask)",
            "set loss.loss_fn=verl_grpo, or run supervised training on the ray/http backend",
        )
    if cfg.loss.loss_scale_factor is not None:
        yield _issue(
            "loss.loss_scale_factor",
            cfg.loss.loss_scale_factor,
            "Cortex's grpo loss has no loss_scale_factor (its seq-mean-token-sum-norm divides by its own constant)",
            "remove loss.loss_scale_factor for backend.kind=cortex",
        )
    for group, names, why in (
        ("zorro", ("enable", "max_rollouts", "load_balancer", "logits_optimization"),
         "Cortex's forward-backward body has no ZoRRo, load-balancer or logits-strategy switch"),
        ("arctic_inference", ("enable", "fca"), "arctic-platform 0.1.4's Cortex create-job body carries no Arctic Inference config"),
    ):  # fmt: skip
        settings = getattr(cfg, group)
        for name in names:
            if _explicit(settings, name) and getattr(settings, name) not in (None, False, "none"):
                yield _issue(
                    f"{group}.{name}",
                    getattr(settings, name),
                    why,
                    f"remove {group}.{name} for backend.kind=cortex",
                )
    for name in ("export_hf", "save_total_limit"):
        value = getattr(cfg.checkpoint, name)
        if value not in (None, False):
            yield _issue(
                f"checkpoint.{name}",
                value,
                CORTEX_LIMITS[name],
                f"remove checkpoint.{name} for backend.kind=cortex",
            )


# ----------------------------------------------------------------------------------------------
# Placement and batch shape
# ----------------------------------------------------------------------------------------------


def _placement_divisibility(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    place = cfg.placement
    if place.sampling_gpus % place.sampling_tensor_parallel_size:
        yield _issue(
            "placement.sampling_gpus",
            place.sampling_gpus,
            f"not divisible by placement.sampling_tensor_parallel_size={place.sampling_tensor_parallel_size}, "
            "so the GPUs do not split into whole vLLM engines",
            "make sampling_gpus a multiple of sampling_tensor_parallel_size",
        )
    sp = place.ulysses_sequence_parallel_size
    if place.training_gpus % sp:
        yield _issue(
            "placement.training_gpus",
            place.training_gpus,
            f"not divisible by placement.ulysses_sequence_parallel_size={sp}",
            "make training_gpus a multiple of ulysses_sequence_parallel_size",
        )
    if place.log_prob_gpus % sp:
        yield _issue(
            "placement.log_prob_gpus",
            place.log_prob_gpus,
            f"not divisible by placement.ulysses_sequence_parallel_size={sp} (the log-prob job uses the same SP)",
            "make log_prob_gpus a multiple of ulysses_sequence_parallel_size",
        )


def _sequence_parallel_unsupported(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    """0.1.4's batch splitter (`common/utils/batch.py:_split_batch`) raises for sp_size > 1 on
    every forward and forward-backward: such a run would start, allocate its GPUs, then fail its
    first data call."""
    sp = cfg.placement.ulysses_sequence_parallel_size
    if cfg.is_arctic and sp > 1:
        yield _issue(
            "placement.ulysses_sequence_parallel_size",
            sp,
            "the arctic-platform 0.1.4 server cannot split batches for Ulysses sequence parallelism (its "
            "_split_batch refuses sp_size > 1 on every forward / forward-backward)",
            "set placement.ulysses_sequence_parallel_size=1 (longer sequences: lower "
            "batch.micro_batch_size_per_gpu or use ZoRRo) until a server release supports it",
        )


def _batch_divisibility(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    batch = cfg.batch
    mini = batch.mini_batch_prompts or batch.prompts_per_step
    if batch.mini_batch_prompts is not None and batch.prompts_per_step % batch.mini_batch_prompts:
        yield _issue(
            "batch.mini_batch_prompts",
            batch.mini_batch_prompts,
            f"batch.prompts_per_step={batch.prompts_per_step} is not a whole number of mini-batches",
            "choose mini_batch_prompts that divides prompts_per_step",
        )
        return
    if cfg.placement.training_gpus % cfg.placement.ulysses_sequence_parallel_size:
        return  # the data-parallel size is undefined; reported by the placement rule
    dp = cfg.placement.data_parallel_size
    rows = mini * batch.rollouts_per_prompt
    per_micro_step = dp * batch.micro_batch_size_per_gpu
    if rows % per_micro_step:
        yield _issue(
            "batch.micro_batch_size_per_gpu",
            batch.micro_batch_size_per_gpu,
            f"a mini-batch has {mini} prompts x {batch.rollouts_per_prompt} rollouts = {rows} rows, not "
            f"divisible by data-parallel size {dp} x micro-batch {batch.micro_batch_size_per_gpu} = "
            f"{per_micro_step} (DeepSpeed needs train_batch_size = micro x grad-accum x data-parallel)",
            "change batch.micro_batch_size_per_gpu, batch.mini_batch_prompts, batch.rollouts_per_prompt "
            "or placement.training_gpus so that the rows divide evenly",
        )


def _lengths(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    batch = cfg.batch
    needed = batch.max_prompt_length + batch.max_response_length
    max_len = cfg.vllm.max_model_len
    if max_len is not None and max_len < needed:
        yield _issue(
            "vllm.max_model_len",
            max_len,
            f"shorter than max_prompt_length + max_response_length = {needed}",
            f"set vllm.max_model_len >= {needed}, or null to use exactly {needed}",
        )
    if cfg.backend.kind == "reference":
        limit = cfg.backend.reference.max_position_embeddings
        if needed > limit:
            yield _issue(
                "backend.reference.max_position_embeddings",
                limit,
                f"the reference model cannot hold prompt + response = {needed} tokens",
                f"raise backend.reference.max_position_embeddings to >= {needed}, or shorten the batch lengths",
            )


def _log_prob_job(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    if not cfg.is_arctic or cfg.backend.kind == "cortex":
        return
    place = cfg.placement
    loss = cfg.loss
    wants = (
        "loss.use_kl_loss" if loss.use_kl_loss else "loss.use_kl_in_reward" if loss.use_kl_in_reward else None
    )
    if wants and place.log_prob_gpus == 0:
        yield _issue(
            "placement.log_prob_gpus",
            0,
            f"{wants}=true needs reference log-probs, served by the log-prob job",
            f"set placement.log_prob_gpus >= 1 (e.g. equal to training_gpus when colocated), or {wants}=false",
        )
    if not wants and place.log_prob_gpus > 0:
        yield _issue(
            "placement.log_prob_gpus",
            place.log_prob_gpus,
            "nothing uses the reference log-prob job when loss.use_kl_loss and loss.use_kl_in_reward are false",
            "set placement.log_prob_gpus=0, or loss.use_kl_loss=true",
        )


# ----------------------------------------------------------------------------------------------
# Optimizer and loss
# ----------------------------------------------------------------------------------------------


def _schedule(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    opt = cfg.optimizer
    needs_horizon = opt.scheduler == "cosine" or opt.warmup_ratio > 0
    if needs_horizon and opt.total_training_steps is None:
        what = "a cosine schedule" if opt.scheduler == "cosine" else f"warmup_ratio={opt.warmup_ratio}"
        yield _issue(
            "optimizer.total_training_steps",
            None,
            f"{what} needs the run's length to place the schedule (no fallback horizon is assumed)",
            "set optimizer.total_training_steps to the number of training steps of the run"
            + ("" if opt.scheduler == "cosine" else ", or give the warmup in steps (optimizer.warmup_steps)"),
        )
    if opt.warmup_steps is not None and opt.warmup_ratio > 0:
        yield _issue(
            "optimizer.warmup_steps",
            opt.warmup_steps,
            f"the warmup is given twice (also warmup_ratio={opt.warmup_ratio})",
            "keep one: optimizer.warmup_steps (optimizer steps) or optimizer.warmup_ratio (of the horizon)",
        )
    if opt.scheduler == "constant" and _explicit(opt, "min_lr_ratio"):
        yield _issue(
            "optimizer.min_lr_ratio",
            opt.min_lr_ratio,
            "only the cosine schedule uses it",
            "remove optimizer.min_lr_ratio, or set optimizer.scheduler=cosine",
        )
    for index, beta in enumerate(opt.betas):
        if not 0 <= beta < 1:
            yield _issue(
                f"optimizer.betas.{index}", beta, "an AdamW beta must be in [0, 1)", "use e.g. [0.9, 0.999]"
            )


def _loss_rules(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:

    loss = cfg.loss
    if loss.loss_fn == "verl_grpo":
        yield from _builtin_verl_grpo_rules(cfg)
    if loss.loss_fn == "arctic_rl_core" and not cfg.server_imports_core:
        if cfg.backend.kind == "cortex":
            why = "Cortex runs only its built-in losses and cannot import arctic_rl_losses"
            fix = "use loss.loss_fn=verl_grpo with loss.policy_loss=dual_clip, or a ray/http backend"
        else:
            why = "backend.server_has_arctic_rl_core=false: the HTTP server cannot import arctic_rl_losses"
            fix = (
                "install arctic-rl-losses (the same version as here) in the server's environment and set "
                "backend.server_has_arctic_rl_core=true, or use loss.loss_fn=verl_grpo with loss.policy_loss=dual_clip"
            )
        yield _issue(
            "loss.loss_fn", loss.loss_fn, f"{why}, so the {loss.policy_loss} loss cannot run there", fix
        )
    for name, family in FAMILY_KNOB_FAMILIES.items():
        value = getattr(loss, name)
        if value is not None and (loss.loss_fn != "arctic_rl_core" or loss.policy_loss != family):
            yield _issue(
                f"loss.{name}",
                value,
                f"only loss.policy_loss={family} with loss.loss_fn=arctic_rl_core reads it (policy_loss is "
                f"{loss.policy_loss}, loss_fn is {loss.loss_fn})",
                f"remove loss.{name}, or set loss.policy_loss={family} and loss.loss_fn=arctic_rl_core",
            )
    if loss.loss_scale_factor is not None and loss.loss_agg_mode != "seq-mean-token-sum-norm":
        yield _issue(
            "loss.loss_scale_factor",
            loss.loss_scale_factor,
            f"only loss_agg_mode=seq-mean-token-sum-norm uses it (loss_agg_mode is {loss.loss_agg_mode})",
            "remove loss.loss_scale_factor, or set loss.loss_agg_mode=seq-mean-token-sum-norm",
        )


def _builtin_verl_grpo_rules(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    """What the server's built-in `verl_grpo` (arctic-platform 0.1.4) cannot honour."""

    loss = cfg.loss
    fix = "set loss.loss_fn=arctic_rl_core (computed exactly, imported by the server)"
    if loss.policy_loss != "dual_clip":
        yield _issue(
            "loss.policy_loss",
            loss.policy_loss,
            "the built-in verl_grpo loss is dual-clip PPO only",
            f"{fix}, or loss.policy_loss=dual_clip",
        )
    for name, value in (("loss_agg_mode", loss.loss_agg_mode), ("pg_loss_agg_mode", loss.pg_loss_agg_mode)):
        if value == "token-sum" or (name == "pg_loss_agg_mode" and value is not None):
            yield _issue(
                f"loss.{name}",
                value,
                "the built-in verl_grpo loss aggregates the policy term with loss_agg_mode, which has no token-sum",
                f"{fix}, or remove loss.{name} / use another mode",
            )
    if not cfg.is_arctic or cfg.backend.kind == "cortex":  # Cortex's grpo takes eps_clip(_higher), c_clip
        return
    for name, server_value in ARCTIC_SERVER_CLIP_RATIOS.items():
        value = getattr(loss, name)
        if value != server_value:
            yield _issue(
                f"loss.{name}",
                value,
                f"the Arctic server's verl_grpo loss (arctic-platform 0.1.4) hard-codes {name}="
                f"{server_value} and ignores the value sent, so this setting would silently not apply",
                f"{fix}, or set loss.{name}={server_value} with backend.kind={cfg.backend.kind}",
            )
    yield from _packed_rows_attend_across(cfg)
    if loss.loss_agg_mode in ("seq-mean-token-mean", "seq-mean-token-sum-norm"):
        yield _issue(
            "loss.loss_agg_mode",
            loss.loss_agg_mode,
            "the Arctic server's verl_grpo loss (arctic-platform 0.1.4) sees each packed micro-batch as ONE "
            "sequence, so this mode would not average per sequence (it divides by the packed token count) and "
            "ignores loss.loss_scale_factor",
            f"{fix}, or use loss_agg_mode=token-mean / seq-mean-token-sum",
        )


def _packed_rows_attend_across(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    """0.1.4 packs a micro-batch's rows into one sequence; without flash attention's varlen kernel they
    attend to each other. Forward payloads (and the arctic_rl_core loss) ask the server not to pack
    (`PayloadSpec.rows_unpacked`); the built-in verl_grpo reads the packed layout, so its micro-batches
    must hold one row."""
    micro = cfg.batch.micro_batch_size_per_gpu
    if micro > 1 and server_packs_rows_across_attention(cfg):
        attn = cfg.kernels.attn_implementation
        yield _issue(
            "batch.micro_batch_size_per_gpu",
            micro,
            f"the Arctic server (arctic-platform 0.1.4) packs the {micro} rows of a training micro-batch into "
            f"one sequence, and {attn} attention (no flash-attention varlen kernel) lets them attend to each "
            "other (0.16-0.38 nats off per token on a tiny Qwen3); the built-in verl_grpo loss needs that packed "
            "layout, so the server cannot be asked not to pack",
            "set loss.loss_fn=arctic_rl_core (its rows are sent unpacked), or batch.micro_batch_size_per_gpu=1, "
            "or kernels.attn_implementation=flash_attention_2 (needs flash-attn on the server)",
        )


# ----------------------------------------------------------------------------------------------
# DeepSpeed and kernels
# ----------------------------------------------------------------------------------------------


def _deepspeed_rules(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    ds = cfg.deepspeed
    if ds.zero_stage == 0 and ds.bf16 and ds.grad_accum_dtype == "fp32":
        yield _issue(
            "deepspeed.zero_stage",
            0,
            "DeepSpeed rejects bf16 training with fp32 gradient accumulation at ZeRO stage 0 "
            "(it fails when the engine is built)",
            "set deepspeed.zero_stage to 1, 2 or 3, or deepspeed.grad_accum_dtype=bf16",
        )
    if ds.offload_optimizer and ds.zero_stage < 2:
        yield _issue(
            "deepspeed.offload_optimizer",
            True,
            f"optimizer offload needs ZeRO stage 2 or 3 (deepspeed.zero_stage={ds.zero_stage})",
            "set deepspeed.zero_stage to 2 or 3, or deepspeed.offload_optimizer=false",
        )
    if ds.offload_param and ds.zero_stage != 3:
        yield _issue(
            "deepspeed.offload_param",
            True,
            f"parameter offload needs ZeRO stage 3 (deepspeed.zero_stage={ds.zero_stage})",
            "set deepspeed.zero_stage=3, or deepspeed.offload_param=false",
        )
    if not ds.bf16 and ds.grad_accum_dtype == "bf16":
        yield _issue(
            "deepspeed.grad_accum_dtype",
            "bf16",
            "bf16 gradient accumulation with fp32 training (deepspeed.bf16=false) loses precision for nothing",
            "set deepspeed.grad_accum_dtype=fp32, or deepspeed.bf16=true",
        )
    if not ds.autocast and _explicit(ds, "autocast_dtype"):
        yield _issue(
            "deepspeed.autocast_dtype",
            ds.autocast_dtype,
            "only used with deepspeed.autocast=true",
            "remove deepspeed.autocast_dtype, or set deepspeed.autocast=true",
        )
    yield from _owned_keys(
        "deepspeed.config_overrides", ds.config_overrides, DEEPSPEED_OWNED_KEYS, nested=("zero_optimization",)
    )


def _owned_keys(
    field: str, mapping: dict[str, Any], owned: dict[str, str], nested: tuple[str, ...] = ()
) -> Iterable[ConfigIssue]:
    for key, value in mapping.items():
        if key in owned:
            yield _issue(
                f"{field}.{key}",
                value,
                f"owned by {owned[key]}; a second source of truth is not accepted",
                f"remove {field}.{key} and set {owned[key]}",
            )
        elif key in nested and not isinstance(value, dict):
            yield _issue(
                f"{field}.{key}",
                value,
                "must be a mapping (it is merged into the generated section of the same name)",
                f"give {field}.{key} as key: value pairs",
            )
        elif key in nested:
            for sub, sub_value in value.items():
                dotted = f"{key}.{sub}"
                if dotted in owned:
                    yield _issue(
                        f"{field}.{dotted}",
                        sub_value,
                        f"owned by {owned[dotted]}; a second source of truth is not accepted",
                        f"remove {field}.{dotted} and set {owned[dotted]}",
                    )


def _weight_sync_rules(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    sync = cfg.weight_sync
    if sync.cuda_ipc and not cfg.placement.colocate:
        yield _issue(
            "weight_sync.cuda_ipc",
            True,
            "CUDA IPC hands GPU memory between processes on the same GPUs, which needs colocated jobs",
            "set placement.colocate=true, or weight_sync.cuda_ipc=false (NCCL sync)",
        )
    if sync.inference_sleep_level is not None and not cfg.placement.colocate:
        yield _issue(
            "weight_sync.inference_sleep_level",
            sync.inference_sleep_level,
            "only colocated samplers sleep (to free the GPUs for training); this one stays awake",
            "remove weight_sync.inference_sleep_level, or set placement.colocate=true",
        )
    if sync.low_memory and not sync.cuda_ipc:
        yield _issue(
            "weight_sync.low_memory",
            True,
            "low-memory streaming applies only to CUDA IPC weight sync",
            "set weight_sync.cuda_ipc=true, or weight_sync.low_memory=false",
        )


# ----------------------------------------------------------------------------------------------
# Asynchronous GRPO (bounded staleness)
# ----------------------------------------------------------------------------------------------


def _async_rules(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    settings = cfg.async_settings
    k = settings.max_staleness
    if k == 0:
        for name in ("stale_policy", "is_weight_cap"):
            if _explicit(settings, name):
                yield _issue(
                    f"async.{name}",
                    getattr(settings, name),
                    "only the asynchronous pipeline uses it, and async.max_staleness is 0 (synchronous)",
                    f"remove async.{name}, or set async.max_staleness >= 1",
                )
        return
    if cfg.placement.colocate:
        yield _issue(
            "async.max_staleness",
            k,
            "colocated training and sampling share the same GPUs and take turns (the sampler sleeps while "
            "the trainer runs, and the reverse), so generation of the next batch cannot overlap training",
            "set placement.colocate=false (separate training and sampling GPUs), or async.max_staleness=0",
        )
    if cfg.loss.loss_fn == "sft":
        yield _issue(
            "async.max_staleness",
            k,
            "supervised training (loss.loss_fn=sft) samples no rollouts, so there is no generation to overlap",
            "set async.max_staleness=0, or an RL loss (loss.loss_fn=verl_grpo or arctic_rl_core)",
        )


# ----------------------------------------------------------------------------------------------
# ZoRRo and Arctic Inference
# ----------------------------------------------------------------------------------------------


def _zorro_rules(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    zorro = cfg.zorro
    batch = cfg.batch
    if zorro.logits_optimization == "memory" and not zorro.enable:
        yield _issue(
            "zorro.logits_optimization",
            "memory",
            "the memory strategy exists only on the ZoRRo path",
            "set zorro.enable=true, or zorro.logits_optimization to none or compute",
        )
    if zorro.logits_compute_from_fp32_inputs and not zorro.enable:
        yield _issue(
            "zorro.logits_compute_from_fp32_inputs",
            True,
            "the fp32 LM-head input exists only on the ZoRRo path",
            "set zorro.enable=true, or zorro.logits_compute_from_fp32_inputs=false",
        )
    if zorro.max_rollouts is not None and zorro.max_rollouts > batch.rollouts_per_prompt:
        yield _issue(
            "zorro.max_rollouts",
            zorro.max_rollouts,
            f"larger than batch.rollouts_per_prompt={batch.rollouts_per_prompt}",
            f"set zorro.max_rollouts <= {batch.rollouts_per_prompt}, or null",
        )
    if zorro.enable:
        if not cfg.kernels.attn_implementation.startswith("flash_attention"):
            yield _issue(
                "kernels.attn_implementation",
                cfg.kernels.attn_implementation,
                "ZoRRo training packs sequences and needs a flash-attention implementation",
                "set kernels.attn_implementation to flash_attention_2 or flash_attention_3, or zorro.enable=false",
            )
        group = zorro.max_rollouts or batch.rollouts_per_prompt
        if batch.micro_batch_size_per_gpu % group:
            yield _issue(
                "batch.micro_batch_size_per_gpu",
                batch.micro_batch_size_per_gpu,
                f"with ZoRRo a micro-batch must hold whole prompt groups of {group} rollouts "
                "(a partial group fails in the server with a shape mismatch)",
                f"set batch.micro_batch_size_per_gpu to a multiple of {group}, or lower zorro.max_rollouts",
            )
    if (zorro.enable or zorro.load_balancer) and batch.max_token_len_per_gpu is not None:
        group = zorro.max_rollouts or batch.rollouts_per_prompt
        needed = batch.max_prompt_length + group * batch.max_response_length
        if batch.max_token_len_per_gpu < needed:
            yield _issue(
                "batch.max_token_len_per_gpu",
                batch.max_token_len_per_gpu,
                f"a prompt group needs up to max_prompt_length + {group} x max_response_length = {needed} "
                "tokens on one GPU (the server rejects the batch otherwise)",
                f"raise batch.max_token_len_per_gpu to >= {needed} (or null), or lower zorro.max_rollouts",
            )


def _arctic_inference_rules(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    ai = cfg.arctic_inference
    if not ai.enable:
        for name, active in (
            ("speculative_model", ai.speculative_model is not None),
            ("fca", ai.fca),
            ("suffix_decoding", ai.suffix_decoding),
        ):
            if active:
                yield _issue(
                    f"arctic_inference.{name}",
                    getattr(ai, name),
                    "this is an Arctic Inference feature and arctic_inference.enable=false, so it would not apply",
                    "set arctic_inference.enable=true (loads the plugin on sampling workers), "
                    f"or remove arctic_inference.{name}",
                )
    if _explicit(ai, "num_speculative_tokens") and ai.speculative_model is None and not ai.suffix_decoding:
        yield _issue(
            "arctic_inference.num_speculative_tokens",
            ai.num_speculative_tokens,
            "no speculative decoding is configured",
            "set arctic_inference.speculative_model or suffix_decoding=true, or remove num_speculative_tokens",
        )
    if ai.speculative_model is not None and not ai.speculative_model.strip():
        yield _issue(
            "arctic_inference.speculative_model",
            ai.speculative_model,
            "empty model name",
            "give the draft model's id or path, or null to disable speculative decoding",
        )


# ----------------------------------------------------------------------------------------------
# LoRA (PEFT)
# ----------------------------------------------------------------------------------------------

# Why arctic-platform 0.1.4 cannot train LoRA off Cortex (its client and its server, read).
ONPREM_PEFT_REASON = (
    "arctic-platform 0.1.4's on-prem server trains dense only: its client refuses training.peft unless "
    "the backend is Cortex, its /initialize has no PEFT field (an adapter config would be dropped) and "
    "its weight sync always sends full weights (weight_format='lora' is Cortex only)"
)


def _peft_rules(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    peft = cfg.peft
    if not peft.enabled:
        for name in ("lora_alpha", "lora_dropout", "target_modules", "exclude_modules", "bias"):
            if _explicit(peft, name):
                yield _issue(
                    f"peft.{name}",
                    getattr(peft, name),
                    "a LoRA setting, and peft.lora_rank=0 trains full weights (no adapters)",
                    f"set peft.lora_rank > 0 to train LoRA adapters, or remove peft.{name}",
                )
        return
    kind = cfg.backend.kind
    if kind in ("ray", "http"):
        yield _issue(
            "peft.lora_rank",
            peft.lora_rank,
            f"{ONPREM_PEFT_REASON}; backend.kind is '{kind}'",
            "set backend.kind=cortex (LoRA on Snowflake Cortex), or peft.lora_rank=0 (full-weight training)",
        )
    if peft.exclude_modules is not None and isinstance(peft.target_modules, list):
        overlap = sorted(set(peft.target_modules) & set(peft.exclude_modules))
        if overlap:
            yield _issue(
                "peft.exclude_modules",
                peft.exclude_modules,
                f"{overlap} are also in peft.target_modules",
                "name each module in only one of target_modules and exclude_modules",
            )


def _vllm_rules(cfg: ArcticRLSettings) -> Iterable[ConfigIssue]:
    yield from _owned_keys("vllm.engine_args", cfg.vllm.engine_args, VLLM_OWNED_KEYS)
    if (
        cfg.backend.kind == "cortex"
        and cfg.vllm.logprobs_mode == "processed_logprobs"
        and cfg.loss.temperature != 1
    ):
        yield _issue(
            "vllm.logprobs_mode",
            "processed_logprobs",
            f"Cortex's training body has no temperature (its log-probs are the model's own), so temperature-"
            f"scaled rollout log-probs at loss.temperature={cfg.loss.temperature} bias every importance weight",
            "set vllm.logprobs_mode to raw_logprobs or null (verl: actor_rollout_ref.rollout.logprobs_mode="
            "raw_logprobs)",
        )


RULES: tuple[Rule, ...] = (
    _backend_fields_match_kind,
    _worker_env_rules,
    _arctic_needs_model_and_checkpoint,
    _cortex_rules,
    _placement_divisibility,
    _sequence_parallel_unsupported,
    _batch_divisibility,
    _lengths,
    _log_prob_job,
    _schedule,
    _loss_rules,
    _deepspeed_rules,
    _weight_sync_rules,
    _zorro_rules,
    _arctic_inference_rules,
    _vllm_rules,
    _peft_rules,
    _async_rules,
)


def check(cfg: ArcticRLSettings) -> list[ConfigIssue]:
    """Every problem of a (field-valid) configuration."""
    issues: list[ConfigIssue] = []
    for rule in RULES:
        issues.extend(rule(cfg))
    return issues
