"""GRPO outcome advantages, the reference every framework's implementation is checked against.

Semantics (SkyRL 0.4.0 `compute_grpo_outcome_advantage` and verl 0.9.1
`core_algos.compute_grpo_outcome_advantage` agree on them, and the parity suite pins it):

- a rollout's score is the sum of its token-level rewards;
- rollouts are grouped by their prompt's id; a group of one has mean 0 and std 1 (its advantage is
  its score / (1 + epsilon), not 0);
- otherwise advantage = (score - mean) / (std + epsilon) with the UNBIASED std (Bessel), or
  score - mean when `norm_by_std` is off (Dr. GRPO);
- a group whose scores are all equal gets advantage 0.

Each group is reduced with `torch.mean` / `torch.std` over its members in batch order, exactly as
the frameworks do, so results agree bit for bit, not just to a tolerance.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def grpo_outcome_advantages(
    scores_B: torch.Tensor,
    group_ids: Sequence[Hashable],
    *,
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """Sequence-level GRPO advantages `[B]` from sequence scores `[B]` and a group id per rollout."""
    import torch

    if scores_B.dim() != 1:
        raise ValueError(f"scores_B has shape {tuple(scores_B.shape)}: expected one score per rollout [B]")
    if len(group_ids) != scores_B.shape[0]:
        raise ValueError(
            f"{len(group_ids)} group ids for {scores_B.shape[0]} scores: give one id per rollout"
        )
    if epsilon < 0:
        raise ValueError(f"epsilon={epsilon}: must be >= 0")
    members: dict[Hashable, list[int]] = {}
    for row, group in enumerate(group_ids):
        members.setdefault(group, []).append(row)
    advantages_B = torch.empty_like(scores_B)
    for rows in members.values():
        index = torch.tensor(rows, dtype=torch.long)
        group_scores = scores_B.detach()[index]
        if len(rows) == 1:
            mean, std = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean, std = torch.mean(group_scores), torch.std(group_scores)
        centred = group_scores - mean
        advantages_B[index] = centred / (std + epsilon) if norm_by_std else centred
    return advantages_B


def token_level_grpo_advantages(
    token_level_rewards_B_R: torch.Tensor,
    response_mask_B_R: torch.Tensor,
    group_ids: Sequence[Hashable],
    *,
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """The frameworks' signature: token-level rewards `[B, R]` -> advantages broadcast over the
    response and masked, `[B, R]`."""
    if token_level_rewards_B_R.shape != response_mask_B_R.shape:
        raise ValueError(
            f"token_level_rewards {tuple(token_level_rewards_B_R.shape)} and response_mask "
            f"{tuple(response_mask_B_R.shape)} differ: both must be [B, R]"
        )
    scores_B = token_level_rewards_B_R.sum(dim=-1)
    advantages_B = grpo_outcome_advantages(scores_B, group_ids, epsilon=epsilon, norm_by_std=norm_by_std)
    return advantages_B.unsqueeze(-1) * response_mask_B_R
