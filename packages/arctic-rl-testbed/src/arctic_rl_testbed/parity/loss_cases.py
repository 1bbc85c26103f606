"""Seeded random inputs for the policy-loss parity tests (identical in every environment).

A case is a batch of response-aligned rows `[B, R]`: current / old / reference log-probs, token
advantages (both signs and exact zeros), a 0/1 response mask with ragged lengths, optionally one
row whose mask is all zeros (sequence modes exclude it), and rollout importance weights. Log-prob
gaps include some beyond +-20 so the ratio clamp is exercised, and enough mid-size gaps that the
clip and the dual clip both bind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class PolicyLossCase:
    """One batch of response-aligned loss inputs; `response_lengths_B` >= 1 for every row."""

    logprobs_B_R: torch.Tensor
    old_logprobs_B_R: torch.Tensor
    ref_logprobs_B_R: torch.Tensor
    advantages_B_R: torch.Tensor
    mask_B_R: torch.Tensor  # float 0/1, zero past each row's response
    response_lengths_B: torch.Tensor  # int64
    rollout_is_weights_B_R: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return int(self.mask_B_R.sum().item())

    @property
    def num_sequences(self) -> int:
        """Rows with at least one masked-in token (what verl and the server count)."""
        return int((self.mask_B_R.sum(dim=-1) > 0).sum().item())


def random_policy_loss_case(
    seed: int,
    *,
    batch_size: int = 6,
    max_response_len: int = 9,
    fully_masked_row: bool = True,
    dtype: torch.dtype | None = None,
) -> PolicyLossCase:
    """A reproducible case from `seed` (CPU generator, float32 unless `dtype` says otherwise)."""
    import torch

    if batch_size < 2 or max_response_len < 2:
        raise ValueError(
            f"batch_size={batch_size}, max_response_len={max_response_len}: use at least 2 of each"
        )
    dtype = torch.float32 if dtype is None else dtype
    gen = torch.Generator().manual_seed(seed)
    shape = (batch_size, max_response_len)
    lengths_B = torch.randint(1, max_response_len + 1, (batch_size,), generator=gen)
    lengths_B[0] = max_response_len  # the horizon is reached
    positions = torch.arange(max_response_len)[None, :]
    in_response = positions < lengths_B[:, None]
    # the loss mask may drop tokens inside a response (e.g. tool output); keep most of them
    keep = torch.rand(shape, generator=gen) > 0.15
    mask = (in_response & keep).to(dtype)
    mask[0, :4] = 1.0
    if fully_masked_row:
        mask[-1] = 0.0
    logprobs = -3.0 * torch.rand(shape, generator=gen, dtype=torch.float64)
    gap = 0.4 * torch.randn(shape, generator=gen, dtype=torch.float64)
    extreme = torch.rand(shape, generator=gen) < 0.05
    gap = torch.where(extreme, 25.0 * torch.sign(gap), gap)  # beyond the +-20 ratio clamp
    old = logprobs - gap
    ref = logprobs + 0.3 * torch.randn(shape, generator=gen, dtype=torch.float64)
    advantages = torch.randn(shape, generator=gen, dtype=torch.float64)
    advantages[torch.rand(shape, generator=gen) < 0.1] = 0.0
    # pinned tokens so every case exercises each branch: the dual clip (A < 0, ratio > 3), the
    # +-20 clamp in both directions, and the ordinary clip (|A| > 0, ratio outside 1 +- 0.3)
    old[0, :4] = logprobs[0, :4] - torch.tensor([2.0, 25.0, -25.0, 0.6], dtype=torch.float64)
    advantages[0, :4] = torch.tensor([-1.0, -0.5, 0.7, 1.3], dtype=torch.float64)
    weights = 0.5 + torch.rand(shape, generator=gen, dtype=torch.float64)
    out = [t * in_response for t in (logprobs, old, ref, advantages, weights)]  # zeros past the response
    return PolicyLossCase(
        logprobs_B_R=out[0].to(dtype),
        old_logprobs_B_R=out[1].to(dtype),
        ref_logprobs_B_R=out[2].to(dtype),
        advantages_B_R=out[3].to(dtype),
        mask_B_R=mask,
        response_lengths_B=lengths_B.to(torch.int64),
        rollout_is_weights_B_R=out[4].to(dtype),
    )
