"""The `/initialize` bodies of the `deepspeed` trainer's jobs when the engine starts them itself (in
process, without a client): what arctic-rl's client configuration sends for the same settings
(`arctic_rl_core.config.deepspeed_config`: every value the 0.1.4 worker would otherwise default is
written out), built from `ReferenceEngineSettings`. Behind `serve --reference --trainer deepspeed`
the client's own bodies are used instead. Pure data: no torch, no arctic-platform."""

from __future__ import annotations

from typing import Any

from arctic_rl_core.config.deepspeed_config import scheduler_section

from arctic_rl_testbed.reference.settings import ReferenceEngineSettings


def _zero(stage: int, *, offload_optimizer: bool) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": stage}
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    return zero


def _scheduler(settings: ReferenceEngineSettings) -> dict[str, Any] | None:
    schedule = settings.schedule
    return scheduler_section(
        schedule.kind,
        lr=settings.optimizer.lr,
        total_steps=schedule.total_steps,
        warmup_steps=schedule.warmup_steps,
        min_lr_ratio=schedule.min_lr_ratio,
    )


def training_ds_config(settings: ReferenceEngineSettings) -> dict[str, Any]:
    """The training job's `ds_config`. `torch_adam`: DeepSpeed's fused Adam is a C++/CUDA op it would
    JIT-compile; torch's AdamW is the same update."""
    opt = settings.optimizer
    ds = settings.deepspeed
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": settings.grad_accum_steps,
        "gradient_clipping": opt.grad_clip if opt.grad_clip is not None else 0.0,
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": opt.lr,
                "betas": list(opt.betas),
                "eps": opt.eps,
                "weight_decay": opt.weight_decay,
                "torch_adam": True,
            },
        },
        "bf16": {"enabled": True},
        "data_types": {"grad_accum_dtype": "fp32"},
        "communication_data_type": "fp32",
        "torch_autocast": {"enabled": True, "dtype": "bfloat16"} if ds.autocast else {"enabled": False},
        "zero_optimization": _zero(ds.zero_stage, offload_optimizer=ds.offload_optimizer),
    }
    scheduler = _scheduler(settings)
    if scheduler is not None:
        config["scheduler"] = scheduler
    return config


def worker_config(settings: ReferenceEngineSettings) -> dict[str, Any]:
    """`ds_worker_config`: attention, kernels, activation checkpointing (no ZoRRo: it needs flash-attention)."""
    ds = settings.deepspeed
    return {
        "attn_implementation": ds.attn_implementation,
        "use_liger": False,
        "enable_gradient_checkpointing": ds.gradient_checkpointing,
        "use_autocast": ds.autocast,
    }


def training_body(settings: ReferenceEngineSettings, model_dir: str, checkpoint_path: str) -> dict[str, Any]:
    return {
        "model_name": model_dir,
        "job_type": "training",
        "seed": settings.seed,
        "full_determinism": False,
        "checkpoint_path": checkpoint_path,
        "ds_config": training_ds_config(settings),
        "ds_worker_config": worker_config(settings),
        "cuda_ipc": settings.cuda_ipc,
        "low_memory": settings.low_memory,
    }


def log_prob_body(settings: ReferenceEngineSettings, model_dir: str) -> dict[str, Any]:
    """The log-prob (reference) job: the client sends the training `ds_config` (which makes it a DeepSpeed
    job) and the forward-only engine's `log_prob_config`."""
    ds = settings.deepspeed
    stage = ds.zero_stage if ds.log_prob_zero_stage is None else ds.log_prob_zero_stage
    return {
        "model_name": model_dir,
        "job_type": "log_prob",
        "seed": settings.seed,
        "full_determinism": False,
        "ds_config": training_ds_config(settings),
        "ds_worker_config": worker_config(settings),
        "log_prob_config": {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": _zero(stage, offload_optimizer=False),
        },
    }


def grad_accum_steps_of(ds_config: dict[str, Any], dp_size: int) -> int:
    """The gradient-accumulation steps DeepSpeed derives from a `ds_config` (explicit, else
    train_batch_size / (micro batch x ranks), else 1): how many micro-batches the worker splits a
    rank's rows into."""
    if ds_config.get("gradient_accumulation_steps") is not None:
        return int(ds_config["gradient_accumulation_steps"])
    batch = ds_config.get("train_batch_size")
    micro = ds_config.get("train_micro_batch_size_per_gpu")
    if batch is not None and micro:
        return max(1, int(batch) // (int(micro) * dp_size))
    return 1
