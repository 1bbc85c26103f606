"""Settings of the reference engine (pydantic only, no torch): the model, the simulated training
topology, AdamW and its learning-rate schedule, the weight-sync defaults and the seed."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from arctic_rl_core.config import TrainingShape
from arctic_rl_core.config.engine_args import logprobs_mode
from arctic_rl_core.config.reference_model import ReferenceModelConfig
from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig


class OptimizerSettings(BaseModel):
    """AdamW (decoupled weight decay) and global-norm gradient clipping."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lr: float = Field(default=1e-4, gt=0, description="Peak learning rate.")
    betas: tuple[float, float] = Field(default=(0.9, 0.999), description="AdamW betas.")
    eps: float = Field(default=1e-8, gt=0, description="AdamW epsilon.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW decoupled weight decay.")
    grad_clip: float | None = Field(
        default=1.0, gt=0, description="Clip the global gradient norm to this value; None = no clipping."
    )

    @model_validator(mode="after")
    def _check_betas(self) -> OptimizerSettings:
        if not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"optimizer.betas={self.betas}: each beta must be in [0, 1)")
        return self


class ScheduleSettings(BaseModel):
    """Learning-rate multiplier per optimizer step s (0-based): linear warmup s / warmup_steps, then
    constant, cosine or linear decay to `min_lr_ratio` at `total_steps` (Hugging Face conventions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["constant", "cosine", "linear"] = Field(
        default="constant", description="Schedule after warmup."
    )
    warmup_steps: int = Field(default=0, ge=0, description="Optimizer steps of linear warmup from 0.")
    total_steps: int | None = Field(
        default=None, ge=1, description="Horizon in optimizer steps; required by cosine and linear."
    )
    min_lr_ratio: float = Field(
        default=0.0, ge=0, le=1, description="Final LR of cosine/linear, as a fraction."
    )

    @model_validator(mode="after")
    def _check_horizon(self) -> ScheduleSettings:
        if self.kind != "constant" and self.total_steps is None:
            raise ValueError(f"schedule.kind={self.kind!r} needs schedule.total_steps (the horizon)")
        if self.total_steps is not None and self.warmup_steps > self.total_steps:
            raise ValueError(
                f"schedule.warmup_steps={self.warmup_steps} exceeds total_steps={self.total_steps}: shorten the warmup"
            )
        return self

    def multiplier(self, step: int) -> float:
        """LR multiplier of the update with 0-based index `step`."""
        if step < self.warmup_steps:
            return step / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        assert self.total_steps is not None
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        decay = 0.5 * (1.0 + math.cos(math.pi * progress)) if self.kind == "cosine" else 1.0 - progress
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * decay


class DeepSpeedTrainerSettings(BaseModel):
    """The jobs of the `deepspeed` trainer (arctic-platform 0.1.4's own server code and DeepSpeedWorker on
    CPU, `deepspeed_backend`) when the engine starts them itself. Behind `arctic-rl serve --reference
    --trainer deepspeed`, the client's `/initialize` bodies configure the jobs instead."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    zero_stage: Literal[0, 1, 2, 3] = Field(
        default=2,
        description="ZeRO stage of the training job (0.1.4 fails on 0 with bf16 and fp32 accumulation).",
    )
    log_prob_zero_stage: Literal[0, 1, 2, 3] | None = Field(
        default=None,
        description="ZeRO stage of the log-prob (reference) job; None = zero_stage, as arctic-rl's client config "
        "sends. The 0.1.4 log-prob job has no optimizer, which DeepSpeed refuses on stages 1 and 2.",
    )
    offload_optimizer: bool = Field(
        default=False, description="ZeRO offload_optimizer to the CPU (stage >= 2)."
    )
    attn_implementation: Literal["sdpa", "eager"] = Field(
        default="sdpa", description="The worker's attention (flash-attention does not run on a CPU)."
    )
    gradient_checkpointing: bool = Field(default=True, description="The worker's activation checkpointing.")
    autocast: bool = Field(default=False, description="DeepSpeed torch_autocast (bf16) of the forward.")


class ReferenceEngineSettings(BaseModel):
    """Everything the reference engine needs. `dp_size` and `grad_accum_steps` simulate the
    server's DeepSpeed topology: payload rows are split across `dp_size` simulated ranks, then
    into `grad_accum_steps` micro-batches, and gradients are averaged over ranks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ReferenceModelConfig = Field(default_factory=ReferenceModelConfig, description="The model.")
    seed: int = Field(default=42, description="Seeds the model init, the sampler RNG and everything else.")
    dp_size: int = Field(default=1, ge=1, description="Simulated data-parallel training ranks.")
    grad_accum_steps: int = Field(default=1, ge=1, description="Micro-batches per rank and payload (GAS).")
    optimizer: OptimizerSettings = Field(default_factory=OptimizerSettings, description="AdamW.")
    schedule: ScheduleSettings = Field(default_factory=ScheduleSettings, description="LR schedule.")
    colocated: bool = Field(
        default=True, description="Trainer and sampler share a device (sleep/wake apply)."
    )
    cuda_ipc: bool = Field(default=False, description="Default weight-sync strategy (as the training job's).")
    low_memory: bool = Field(default=False, description="Default low-memory weight sync.")
    honour_clip_ratios: bool = Field(
        default=True,
        description="Use the clip ratios sent in meta.actor_config; False reproduces arctic-platform 0.1.4, "
        "which always uses 0.2/0.2/3.0.",
    )
    state_guard: bool = Field(
        default=True,
        description="Refuse what the real server would silently do wrong in the current sleep/wake state "
        "(sync into a sleeping sampler, generate while asleep, train while offloaded). False does it anyway, "
        "as arctic-platform 0.1.4 (which checks nothing).",
    )
    zero_norm_step: Literal["skip", "apply"] = Field(
        default="skip",
        description="A step whose gradient norm is 0: 'skip' (no update, schedule not advanced: what the 0.1.4 "
        "worker intends for an old DeepSpeed BF16_Optimizer assert) or 'apply' (DeepSpeed 0.19.8 on every ZeRO "
        "stage: AdamW's momentum still moves the weights and the schedule advances).",
    )
    step_without_gradients: Literal["refuse", "zero_gradients"] = Field(
        default="refuse",
        description="step() with no forward_backward since the last step: 'refuse' (an error) or "
        "'zero_gradients' (as DeepSpeed: a step over all-zero gradients, see zero_norm_step).",
    )
    peft: dict[str, Any] | None = Field(
        default=None,
        description="LoRA adapters: arctic-platform 0.1.4's training.peft (a PEFT LoraConfig as a dict; Cortex's "
        "peft_config of the training and sampling sub-jobs). The trainer trains only the adapters, the sampler "
        "serves the same adapter shape, a sync sends only the adapter tensors. None = full-weight training.",
    )
    logprobs_mode: Literal["raw_logprobs", "processed_logprobs"] = Field(
        default="raw_logprobs",
        description="The sampler's log-probs, as vLLM's logprobs_mode: raw (vLLM's default) = log-softmax of the "
        "model's logits; processed = of the temperature-scaled, top-k/top-p-masked logits (the trainer's "
        "apply_temperature distribution).",
    )
    trainer: Literal["torch", "deepspeed"] = Field(
        default="torch",
        description="Who trains: 'torch' (this engine's own trainer: forward, loss, AdamW in torch) or 'deepspeed' "
        "(arctic-platform 0.1.4's own server code and DeepSpeedWorkers, on CPU, in their own processes; the "
        "sampler stays this engine's and receives the workers' weights at every sync).",
    )
    deepspeed: DeepSpeedTrainerSettings = Field(
        default_factory=DeepSpeedTrainerSettings, description="The deepspeed trainer's own jobs."
    )
    num_threads: int | None = Field(
        default=1,
        ge=1,
        description="torch intra-op threads, set process-wide when the engine starts. 1 by default: the tiny "
        "model is latency-bound and extra threads slow sampling sharply on a busy CPU; None leaves torch's setting.",
    )
    sampler_process: bool = Field(
        default=False,
        description="Run the sampler in its own (forked) process instead of a thread of this one: weights in "
        "shared memory (a sync copies into them), generate calls over a pipe, same tokens and log-probs. For "
        "asynchronous GRPO on CPU, where generation overlaps training and two threads would share one GIL; "
        "needs num_threads and device 'cpu'.",
    )

    @model_validator(mode="after")
    def _check_trainer(self) -> ReferenceEngineSettings:
        if self.trainer != "deepspeed":
            return self
        if self.peft is not None:
            raise ValueError(
                "trainer='deepspeed' with peft: arctic-platform 0.1.4's DeepSpeedWorker trains full weights; "
                "use trainer='torch' for LoRA"
            )
        if self.model.device != "cpu":
            raise ValueError(
                f"trainer='deepspeed' with model.device={self.model.device!r}: the DeepSpeed workers run on the "
                "CPU here (a GPU runs the real Arctic server); use device='cpu'"
            )
        return self

    @model_validator(mode="after")
    def _check_sampler_process(self) -> ReferenceEngineSettings:
        if self.sampler_process and self.num_threads is None:
            raise ValueError(
                "sampler_process=True needs num_threads (the forked sampler sets its own torch thread "
                "count; the in-thread sampler's is torch's default): set num_threads, e.g. 1"
            )
        if self.sampler_process and self.model.device != "cpu":
            raise ValueError(
                f"sampler_process=True with model.device={self.model.device!r}: the sampler process shares "
                "its weights through CPU shared memory; use device='cpu' or sampler_process=False"
            )
        return self

    @classmethod
    def from_config(cls, cfg: ArcticRLConfig) -> ReferenceEngineSettings:
        """Map the project configuration: model from `backend.reference`, topology from the derived
        training shape (data-parallel size, gradient accumulation), optimizer and schedule, seed,
        colocation, weight-sync defaults and vLLM's logprobs_mode."""

        shape = TrainingShape.from_config(cfg)
        opt = cfg.optimizer
        return cls(
            model=cfg.backend.reference,
            seed=cfg.determinism.seed,
            dp_size=shape.data_parallel_size,
            grad_accum_steps=shape.gradient_accumulation_steps,
            optimizer=OptimizerSettings(
                lr=opt.lr,
                betas=opt.betas,
                eps=opt.eps,
                weight_decay=opt.weight_decay,
                grad_clip=opt.grad_clip,
            ),
            schedule=ScheduleSettings(
                kind=opt.scheduler,
                warmup_steps=shape.warmup_steps,
                total_steps=shape.training_horizon,
                min_lr_ratio=opt.min_lr_ratio if opt.scheduler == "cosine" else 0.0,
            ),
            colocated=cfg.placement.colocate,
            cuda_ipc=cfg.weight_sync.cuda_ipc,
            low_memory=cfg.weight_sync.low_memory,
            peft=cfg.peft.peft_config(),
            logprobs_mode=logprobs_mode(cfg),
        )
