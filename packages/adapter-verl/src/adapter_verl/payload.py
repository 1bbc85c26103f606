"""The wire `PayloadSpec` of a run: verl's batch and loss settings plus the core config's
server-side knobs (ZoRRo, load balancer, logits optimisation, position ids)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arctic_rl_core.config import ArcticRLConfig
    from arctic_rl_core.wire import PayloadSpec


def payload_spec(cfg: ArcticRLConfig, *, pad_token_id: int) -> PayloadSpec:
    """One spec for every payload of the run (forward and train): rows split across the server's
    data-parallel workers and gradient-accumulation steps as `cfg.shape` says."""
    from arctic_rl_core.wire import PayloadSpec

    shape = cfg.shape
    loss = cfg.loss
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
        zorro_train_enable=cfg.zorro.enable,
        zorro_train_max_rollouts=cfg.zorro.max_rollouts,
        load_balancer=cfg.zorro.load_balancer,
        max_token_len_per_gpu=shape.max_token_len_per_gpu if cfg.zorro.load_balancer else None,
        logits_optimization=cfg.zorro.logits_optimization,
        logits_optimization_peak_mem_size_in_gib=cfg.zorro.logits_peak_mem_gib,
        drop_position_ids=cfg.wire.drop_position_ids,
    )
