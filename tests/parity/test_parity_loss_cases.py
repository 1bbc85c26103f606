"""The shared random loss cases are reproducible and exercise every branch the parity tests rely on."""

from __future__ import annotations

import pytest
import torch
from arctic_rl_testbed.parity.loss_cases import random_policy_loss_case


def test_cases_are_reproducible_and_seed_dependent():
    a, b, c = random_policy_loss_case(3), random_policy_loss_case(3), random_policy_loss_case(4)
    for name in ("logprobs_B_R", "old_logprobs_B_R", "ref_logprobs_B_R", "advantages_B_R", "mask_B_R"):
        assert torch.equal(getattr(a, name), getattr(b, name))
        assert not torch.equal(getattr(a, name), getattr(c, name))


@pytest.mark.parametrize("seed", range(4))
def test_cases_cover_clamp_clip_dual_clip_and_masking(seed):
    case = random_policy_loss_case(seed)
    gap = case.logprobs_B_R - case.old_logprobs_B_R
    mask = case.mask_B_R.bool()
    assert (gap[mask] > 20).any() and (gap[mask] < -20).any()  # the ratio clamp, both ways
    assert ((gap[mask] > 1.1) & (case.advantages_B_R[mask] < 0)).any()  # dual clip (ratio > 3, A < 0)
    assert (case.advantages_B_R[mask] > 0).any() and (case.advantages_B_R[mask] == 0).any()
    assert case.mask_B_R[-1].sum() == 0 and case.num_sequences == case.mask_B_R.shape[0] - 1
    past = torch.arange(case.mask_B_R.shape[1])[None, :] >= case.response_lengths_B[:, None]
    assert not mask[past].any() and (case.logprobs_B_R[past] == 0).all()
    assert case.logprobs_B_R.dtype == torch.float32 and (case.logprobs_B_R <= 0).all()


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="batch_size=1"):
        random_policy_loss_case(0, batch_size=1)
