"""Seeded random GRPO batches for the advantage parity tests (identical in every environment).

A batch has outcome rewards on the last response token of ragged rows, one singleton group, one
group whose rewards are all equal, and random groups (binary rewards on odd seeds), interleaved
as after a shuffle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def random_grpo_batch(
    seed: int, *, groups: int = 6, rollouts: int = 4, response_len: int = 7
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """(token_level_rewards `[B, R]`, response_mask `[B, R]`, group id per row)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = [0] + [1] * rollouts + [g for g in range(2, groups) for _ in range(rollouts)]
    perm = torch.randperm(len(ids), generator=gen).tolist()
    ids = [ids[i] for i in perm]
    b = len(ids)
    scores = torch.rand(b, generator=gen)
    if seed % 2:
        scores = (scores > 0.5).float()
    scores[torch.tensor([i for i, g in enumerate(ids) if g == 1])] = 0.75
    lengths = torch.randint(1, response_len + 1, (b,), generator=gen)
    mask = (torch.arange(response_len)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(b, response_len)
    rewards[torch.arange(b), lengths - 1] = scores
    return rewards, mask, ids
