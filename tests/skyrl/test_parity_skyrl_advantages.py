"""Math parity: SkyRL 0.4.0's own GRPO advantage equals the core's, bit for bit (rtol = 0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from arctic_rl_core.advantages import token_level_grpo_advantages
from skyrl.backends.skyrl_train.utils.ppo_utils import compute_grpo_outcome_advantage


def _random_batch(seed: int):
    gen = torch.Generator().manual_seed(seed)
    groups, rollouts, resp_len = 6, 4, 7
    # group 0 is a singleton, group 1 has all-equal rewards, the rest are random (and sometimes binary)
    ids = [0] + [1] * rollouts + [g for g in range(2, groups) for _ in range(rollouts)]
    perm = torch.randperm(len(ids), generator=gen).tolist()  # groups interleaved, as after shuffling
    ids = [ids[i] for i in perm]
    b = len(ids)
    scores = torch.rand(b, generator=gen)
    if seed % 2:
        scores = (scores > 0.5).float()
    scores[torch.tensor([i for i, g in enumerate(ids) if g == 1])] = 0.75
    lengths = torch.randint(1, resp_len + 1, (b,), generator=gen)
    mask = (torch.arange(resp_len)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(b, resp_len)
    rewards[torch.arange(b), lengths - 1] = scores  # outcome reward on the last response token
    return rewards, mask, ids


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_skyrl_grpo_advantage_matches_core(seed, norm_by_std):
    rewards, mask, ids = _random_batch(seed)
    theirs, _ = compute_grpo_outcome_advantage(
        rewards.clone(), mask, np.array(ids), epsilon=1e-6, grpo_norm_by_std=norm_by_std
    )
    ours = token_level_grpo_advantages(rewards, mask, ids, epsilon=1e-6, norm_by_std=norm_by_std)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
