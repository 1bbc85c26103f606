"""DAPO's soft overlong punishment (`arctic_rl_core.overlong`): the numbers of the rule, both reward
shapes, and the input left as it was."""

from __future__ import annotations

import pytest
from arctic_rl_core.overlong import overlong_penalty, punish_overlong


@pytest.mark.parametrize(
    ("length", "penalty"),
    [(1, 0.0), (4, 0.0), (5, 0.25), (6, 0.5), (7, 0.75), (8, 1.0), (9, 0.0)],
)
def test_the_penalty_rises_linearly_over_the_buffer(length, penalty):
    # budget 8 tokens, buffer 4 (tokens 5..8), factor 1: 1/4 per token into the buffer; 9 is over the budget
    assert overlong_penalty(length, max_length=8, buffer_len=4, penalty_factor=1.0) == penalty


def test_sequence_and_per_token_rewards_and_over_budget_responses():
    rewards = [1.0, 1.0, [0.0, 0.0, 0.5], [0.25, 0.75], 0.5]
    lengths = [2, 6, 3, 7, 8]
    shaped = punish_overlong(rewards, lengths, max_length=6, buffer_len=4, penalty_factor=2.0)
    # buffer starts after token 2: 2 -> untouched; 6 -> 4/4 x 2 = 2; 3 -> 1/4 x 2 = 0.5 off the last token;
    # 7 and 8 are over the budget of 6 -> 0 (every token 0)
    assert shaped == [1.0, -1.0, [0.0, 0.0, 0.0], [0.0, 0.0], 0.0]
    assert rewards == [1.0, 1.0, [0.0, 0.0, 0.5], [0.25, 0.75], 0.5]  # not changed in place


def test_mismatched_lengths_are_an_error():
    with pytest.raises(ValueError, match="2 rewards for 1 responses"):
        punish_overlong([1.0, 0.0], [3], max_length=4, buffer_len=2, penalty_factor=1.0)
