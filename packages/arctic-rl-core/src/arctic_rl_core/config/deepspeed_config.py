"""DeepSpeed configs of the training and reference log-prob jobs, and the worker config the
server's DeepSpeed worker reads (model kernels, ZoRRo).

Every value the server would otherwise default is written out (arctic-platform 0.1.4 turns
`torch_autocast` ON and uses fp32 gradient accumulation when the keys are absent), so the job
runs exactly what the configuration says.
"""

from __future__ import annotations

from typing import Any

from arctic_rl_core.config.engine_args import deep_merge
from arctic_rl_core.config.schema import ArcticRLSettings
from arctic_rl_core.config.shape import TrainingShape


def log_prob_zero_stage(cfg: ArcticRLSettings) -> int:
    """ZeRO stage of the forward-only log-prob (reference) engine: 3 when training shards parameters,
    else 0. Stages 1 and 2 shard optimizer state and gradients, which an engine without an optimizer
    has none of: DeepSpeed asserts "zero stage N requires an optimizer" (0.1.4 builds that engine from
    `log_prob_config` with no optimizer), and stage 0 holds the same parameters."""
    return 3 if cfg.deepspeed.zero_stage == 3 else 0


def _zero_optimization(cfg: ArcticRLSettings, *, training: bool) -> dict[str, Any]:
    ds = cfg.deepspeed
    stage = ds.zero_stage if training else log_prob_zero_stage(cfg)
    zero: dict[str, Any] = {"stage": stage}
    if training and ds.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if ds.offload_param and stage == 3:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return zero


def _scheduler(cfg: ArcticRLSettings) -> dict[str, Any] | None:
    opt = cfg.optimizer
    shape = TrainingShape.from_config(cfg)
    return scheduler_section(
        opt.scheduler,
        lr=opt.lr,
        total_steps=shape.training_horizon,
        warmup_steps=shape.warmup_steps,
        min_lr_ratio=opt.min_lr_ratio,
    )


def scheduler_section(
    kind: str, *, lr: float, total_steps: int | None, warmup_steps: int, min_lr_ratio: float
) -> dict[str, Any] | None:
    """DeepSpeed's `scheduler` for a schedule after linear warmup: `cosine` (WarmupCosineLR), `linear`
    decay to 0 (WarmupDecayLR), or constant (WarmupLR with a warmup, else none). Also used by the
    reference engine's `deepspeed` trainer for its own jobs."""
    if kind == "cosine":
        return {
            "type": "WarmupCosineLR",
            "params": {
                "total_num_steps": total_steps,
                "warmup_num_steps": warmup_steps,
                "warmup_min_ratio": 0.0,
                "cos_min_ratio": min_lr_ratio,
                "warmup_type": "linear",
            },
        }
    warmup = {
        "warmup_min_lr": 0.0,
        "warmup_max_lr": lr,
        "warmup_num_steps": warmup_steps,
        "warmup_type": "linear",
    }
    if kind == "linear":
        return {"type": "WarmupDecayLR", "params": {"total_num_steps": total_steps, **warmup}}
    if warmup_steps > 0:
        return {"type": "WarmupLR", "params": warmup}
    return None


def training_ds_config(cfg: ArcticRLSettings) -> dict[str, Any]:
    """`training.ds_config`: batch identity, optimizer, schedule, precision and ZeRO."""
    shape = TrainingShape.from_config(cfg)
    ds = cfg.deepspeed
    opt = cfg.optimizer
    config: dict[str, Any] = {
        "train_batch_size": shape.train_batch_size,
        "train_micro_batch_size_per_gpu": shape.micro_batch_size_per_gpu,
        "gradient_accumulation_steps": shape.gradient_accumulation_steps,
        "sequence_parallel_size": cfg.placement.ulysses_sequence_parallel_size,
        "gradient_clipping": opt.grad_clip if opt.grad_clip is not None else 0.0,
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": opt.lr,
                "betas": list(opt.betas),
                "eps": opt.eps,
                "weight_decay": opt.weight_decay,
                **({"torch_adam": True} if opt.torch_adam else {}),
            },
        },
        "bf16": {"enabled": ds.bf16},
        "data_types": {"grad_accum_dtype": ds.grad_accum_dtype},
        "communication_data_type": ds.communication_data_type,
        "torch_autocast": (
            {"enabled": True, "dtype": ds.autocast_dtype} if ds.autocast else {"enabled": False}
        ),
        "zero_optimization": _zero_optimization(cfg, training=True),
    }
    scheduler = _scheduler(cfg)
    if scheduler is not None:
        config["scheduler"] = scheduler
    merged, _ = deep_merge(config, ds.config_overrides)
    return merged


def log_prob_ds_config(cfg: ArcticRLSettings) -> dict[str, Any] | None:
    """`sampling.log_prob_ds_config`: the forward-only reference engine (None without that job)."""
    if cfg.placement.log_prob_gpus == 0:
        return None
    return {
        "train_micro_batch_size_per_gpu": cfg.batch.micro_batch_size_per_gpu,
        "sequence_parallel_size": cfg.placement.ulysses_sequence_parallel_size,
        "zero_optimization": _zero_optimization(cfg, training=False),
    }


def ds_worker_config(cfg: ArcticRLSettings) -> dict[str, Any]:
    """`training.ds_worker_config`: kernels, autocast of the log-prob engine, ZoRRo."""
    kernels = cfg.kernels
    zorro = cfg.zorro
    shape = TrainingShape.from_config(cfg)
    worker: dict[str, Any] = {
        "attn_implementation": kernels.attn_implementation,
        "use_liger": kernels.use_liger,
        "enable_gradient_checkpointing": kernels.gradient_checkpointing,
        "use_autocast": cfg.deepspeed.autocast,
    }
    if zorro.enable:
        worker.update(
            zorro_train_enable=True,
            response_len=cfg.batch.max_response_length,
            max_token_len=shape.max_token_len_per_gpu,
            rollout_n=cfg.batch.rollouts_per_prompt,
            temperature=cfg.loss.temperature,
            use_unpad=True,
            logits_optimization=zorro.logits_optimization,
            logits_optimization_peak_mem_size_in_gib=zorro.logits_peak_mem_gib,
            logits_compute_from_fp32_inputs=zorro.logits_compute_from_fp32_inputs,
            logits_compute_in_fp32=zorro.logits_compute_in_fp32,
        )
    return worker
