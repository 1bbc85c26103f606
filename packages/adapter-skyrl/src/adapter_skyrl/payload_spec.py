"""The run's wire `PayloadSpec`, from the core config.

`arctic_rl_core.wire.PayloadSpec.from_config` is the agreed home of this mapping (core API); until
it exists this module builds the spec field for field the same way (the verl adapter does too), so
both adapters send identical payloads for the same core config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig
    from arctic_rl_core.wire import PayloadSpec


def payload_spec(cfg: ArcticRLConfig, *, pad_token_id: int) -> PayloadSpec:
    """One spec for every payload of the run: rows split across the server's data-parallel
    workers and gradient-accumulation steps as `cfg.shape` says."""
    from arctic_rl_core.wire import PayloadSpec

    from_config = getattr(PayloadSpec, "from_config", None)
    if from_config is not None:
        return from_config(cfg, pad_token_id=pad_token_id)
    shape, loss, zorro = cfg.shape, cfg.loss, cfg.zorro
    return PayloadSpec(
        pad_token_id=pad_token_id,
        max_prompt_len=cfg.batch.max_prompt_length,
        max_response_len=cfg.batch.max_response_length,
        rollout_n=cfg.batch.rollouts_per_prompt,
        temperature=loss.temperature,
        dp_size=shape.data_parallel_size,
        grad_accum_steps=shape.gradient_accumulation_steps,
        calculate_entropy=loss.entropy_coeff != 0,
        loss_fn=loss.loss_fn,
        clip_ratio_low=loss.clip_ratio_low,
        clip_ratio_high=loss.clip_ratio_high,
        clip_ratio_c=loss.clip_ratio_c,
        loss_agg_mode=loss.loss_agg_mode,
        use_kl_loss=loss.use_kl_loss,
        kl_loss_coef=loss.kl_loss_coef,
        kl_loss_type=loss.kl_loss_type,
        entropy_coeff=loss.entropy_coeff,
        loss_scale_factor=loss.loss_scale_factor,
        zorro_train_enable=zorro.enable,
        zorro_train_max_rollouts=zorro.max_rollouts,
        load_balancer=zorro.load_balancer,
        max_token_len_per_gpu=shape.max_token_len_per_gpu if zorro.load_balancer else None,
        logits_optimization=zorro.logits_optimization,
        logits_optimization_peak_mem_size_in_gib=zorro.logits_peak_mem_gib,
        drop_position_ids=cfg.wire.drop_position_ids,
    )
