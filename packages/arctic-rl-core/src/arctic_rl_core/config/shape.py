"""Numbers derived from a validated configuration: the batch identity, the schedule horizon, the
sampling engine count and the sequence budgets. Computed, never assumed."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arctic_rl_core.config.schema import ArcticRLSettings


@dataclass(frozen=True)
class TrainingShape:
    """Derived shape of one training step.

    DeepSpeed's batch identity holds by construction:
    `train_batch_size == micro_batch_size_per_gpu * gradient_accumulation_steps * data_parallel_size`,
    where `train_batch_size` is the rows (responses) of one optimizer step (one mini-batch).
    """

    data_parallel_size: int
    rows_per_step: int
    mini_batch_prompts: int
    mini_batches_per_step: int
    train_batch_size: int
    micro_batch_size_per_gpu: int
    gradient_accumulation_steps: int
    optimizer_steps_per_step: int
    training_horizon: int | None
    warmup_steps: int
    num_sampling_engines: int
    max_model_len: int
    zorro_max_rollouts: int
    max_token_len_per_gpu: int

    @classmethod
    def from_config(cls, cfg: ArcticRLSettings) -> TrainingShape:
        batch = cfg.batch
        dp = cfg.placement.data_parallel_size
        mini_prompts = batch.mini_batch_prompts or batch.prompts_per_step
        mini_batches = batch.prompts_per_step // mini_prompts
        train_batch_size = mini_prompts * batch.rollouts_per_prompt
        grad_accum = train_batch_size // (batch.micro_batch_size_per_gpu * dp)
        steps_per_step = batch.epochs * mini_batches
        total = cfg.optimizer.total_training_steps
        horizon = total * steps_per_step if total is not None else None
        if cfg.optimizer.warmup_steps is not None:
            warmup = cfg.optimizer.warmup_steps
        else:
            warmup = round(cfg.optimizer.warmup_ratio * horizon) if horizon is not None else 0
        max_rollouts = cfg.zorro.max_rollouts or batch.rollouts_per_prompt
        token_budget = batch.max_token_len_per_gpu or (
            batch.max_prompt_length + max_rollouts * batch.max_response_length
        )
        return cls(
            data_parallel_size=dp,
            rows_per_step=batch.prompts_per_step * batch.rollouts_per_prompt,
            mini_batch_prompts=mini_prompts,
            mini_batches_per_step=mini_batches,
            train_batch_size=train_batch_size,
            micro_batch_size_per_gpu=batch.micro_batch_size_per_gpu,
            gradient_accumulation_steps=grad_accum,
            optimizer_steps_per_step=steps_per_step,
            training_horizon=horizon,
            warmup_steps=warmup,
            num_sampling_engines=cfg.placement.num_sampling_engines,
            max_model_len=cfg.vllm.max_model_len or (batch.max_prompt_length + batch.max_response_length),
            zorro_max_rollouts=max_rollouts,
            max_token_len_per_gpu=token_budget,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
