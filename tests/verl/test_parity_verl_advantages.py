"""Math parity: verl 0.9.1's own GRPO advantage equals the core's, bit for bit (rtol = 0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from arctic_rl_core.advantages import token_level_grpo_advantages
from arctic_rl_testbed.parity.advantage_cases import random_grpo_batch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_verl_grpo_advantage_matches_core(seed, norm_by_std):
    rewards, mask, ids = random_grpo_batch(seed)
    theirs, _ = compute_grpo_outcome_advantage(
        rewards.clone(), mask, np.array(ids), epsilon=1e-6, norm_adv_by_std_in_grpo=norm_by_std
    )
    ours = token_level_grpo_advantages(rewards, mask, ids, epsilon=1e-6, norm_by_std=norm_by_std)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
