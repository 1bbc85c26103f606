"""Truncated importance-sampling weights: the off-policy correction of asynchronous GRPO.

The rollouts were sampled by the behaviour policy mu (the sampler's weights version v, its per-token
log-probs reported by the generate call); the PPO ratio is taken against the old policy pi_old (the
trainer's weights at this step, the old log-probs of the forward pass). Each response token's policy
loss is multiplied by w = min(pi_old / mu, cap) = exp(min(old - rollout, log cap)) (truncated IS, as
SkyRL's TIS and verl's rollout correction), sent as `rollout_is_weights`; no overflow for any input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ISWeightStats:
    """Statistics of the weights over the real (masked-in) response tokens."""

    mean: float
    max: float
    min: float
    clipped_fraction: float  # tokens whose raw ratio exceeded the cap
    tokens: int


def combined_is_stats(stats: list[ISWeightStats]) -> ISWeightStats | None:
    """Several batches' statistics as one (token-weighted); None when none covers a token."""
    stats = [s for s in stats if s.tokens]
    if not stats:
        return None
    tokens = sum(s.tokens for s in stats)
    return ISWeightStats(
        mean=sum(s.mean * s.tokens for s in stats) / tokens,
        max=max(s.max for s in stats),
        min=min(s.min for s in stats),
        clipped_fraction=sum(s.clipped_fraction * s.tokens for s in stats) / tokens,
        tokens=tokens,
    )


def truncated_is_weights(
    old_logprobs_B_R: torch.Tensor,
    rollout_logprobs_B_R: torch.Tensor,
    mask_B_R: torch.Tensor,
    cap: float,
) -> tuple[torch.Tensor, ISWeightStats]:
    """`[B, R]` float32 weights (1.0 outside the mask) and their statistics over the mask."""
    import torch

    if cap < 1:
        raise ValueError(f"cap={cap}: must be >= 1 (async.is_weight_cap)")
    if old_logprobs_B_R.shape != rollout_logprobs_B_R.shape or old_logprobs_B_R.shape != mask_B_R.shape:
        raise ValueError(
            f"shapes differ: old {tuple(old_logprobs_B_R.shape)}, rollout {tuple(rollout_logprobs_B_R.shape)}, "
            f"mask {tuple(mask_B_R.shape)}: give response-aligned [B, R] tensors"
        )
    mask = mask_B_R.to(torch.bool)
    log_ratio = (old_logprobs_B_R.double() - rollout_logprobs_B_R.double()).masked_fill(~mask, 0.0)
    log_cap = math.log(cap)
    weights = torch.exp(torch.clamp(log_ratio, max=log_cap)).to(torch.float32).masked_fill(~mask, 1.0)
    tokens = int(mask.sum())
    if tokens == 0:
        return weights, ISWeightStats(mean=1.0, max=1.0, min=1.0, clipped_fraction=0.0, tokens=0)
    real = weights[mask]
    stats = ISWeightStats(
        mean=float(real.double().mean()),
        max=float(real.max()),
        min=float(real.min()),
        clipped_fraction=float((log_ratio[mask] > log_cap).double().mean()),
        tokens=tokens,
    )
    return weights, stats


def weights_per_sample(weights_B_R: torch.Tensor, lengths: Sequence[int]) -> list[list[float]]:
    """Row b's first `lengths[b]` weights, as the `RolloutSample.rollout_is_weights` lists."""
    return [weights_B_R[b, :n].tolist() for b, n in enumerate(lengths)]
