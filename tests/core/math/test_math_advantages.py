"""GRPO advantages: the documented semantics, on hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch
from arctic_rl_core.advantages import grpo_outcome_advantages, token_level_grpo_advantages


def test_group_is_normalised_by_its_unbiased_std():
    scores = torch.tensor([1.0, 0.0, 0.5, 0.5])
    adv = grpo_outcome_advantages(scores, ["a", "a", "b", "c"], epsilon=0.0)
    # group a: mean 0.5, unbiased std sqrt(0.125 * 2 / 1) = sqrt(0.5)
    assert adv[0].item() == pytest.approx(0.5 / math.sqrt(0.5), rel=1e-6)
    assert adv[1].item() == pytest.approx(-0.5 / math.sqrt(0.5), rel=1e-6)
    # singleton groups: mean 0, std 1 -> the score itself
    assert adv[2].item() == 0.5 and adv[3].item() == 0.5


def test_all_equal_group_gets_zero_and_dr_grpo_skips_the_std():
    scores = torch.tensor([1.0, 1.0, 1.0, 3.0, 1.0])
    ids = [0, 0, 0, 1, 1]
    assert grpo_outcome_advantages(scores, ids)[:3].tolist() == [0.0, 0.0, 0.0]
    assert grpo_outcome_advantages(scores, ids, norm_by_std=False)[3:].tolist() == [1.0, -1.0]


def test_token_level_form_broadcasts_and_masks():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = token_level_grpo_advantages(rewards, mask, ["p", "p"], epsilon=0.0)
    expected = 0.5 / math.sqrt(0.5)
    assert torch.allclose(adv, torch.tensor([[expected] * 3, [-expected, -expected, 0.0]]))


@pytest.mark.parametrize(
    ("scores", "ids", "message"),
    [
        (torch.zeros(2, 2), [0, 1], "expected one score per rollout"),
        (torch.zeros(3), [0, 1], "give one id per rollout"),
    ],
)
def test_bad_shapes_are_named(scores, ids, message):
    with pytest.raises(ValueError, match=message):
        grpo_outcome_advantages(scores, ids)
