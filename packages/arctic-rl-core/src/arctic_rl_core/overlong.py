"""DAPO's soft overlong punishment (Yu et al. 2025, "DAPO", section 3.4), framework-neutral.

A response of length L against a generation budget of `max_length` tokens with an overlong buffer of
`buffer_len` tokens: inside the last `buffer_len` tokens of the budget the reward falls linearly,
by `penalty_factor` x (L - (max_length - buffer_len)) / buffer_len (so a response that uses the whole
budget loses `penalty_factor`); a response longer than the budget (possible only when a framework
counts more than one turn) gets reward 0, as SkyRL's DAPO trainers set it. Shorter responses keep
their reward. SkyRL's DAPO example (`trainer.algorithm.overlong_buffer_len`,
`overlong_buffer_penalty_factor`) and verl's DAPO reward manager (`overlong_buffer.len`,
`penalty_factor`) use this rule.
"""

from __future__ import annotations

from collections.abc import Sequence


def overlong_penalty(
    response_length: int, *, max_length: int, buffer_len: int, penalty_factor: float
) -> float:
    """What is subtracted from the reward of a response of `response_length` tokens that fits the budget."""
    start = max_length - buffer_len  # where the buffer begins
    if response_length <= start or response_length > max_length:
        return 0.0
    return (response_length - start) / buffer_len * penalty_factor


def punish_overlong(
    rewards: Sequence[float | Sequence[float]],
    response_lengths: Sequence[int],
    *,
    max_length: int,
    buffer_len: int,
    penalty_factor: float,
) -> list[float | list[float]]:
    """The rewards with the soft overlong punishment applied (new lists: the input is not changed).
    A sequence-level reward loses the penalty; a per-token reward list loses it on its last token;
    a response over the budget gets 0 (every token 0)."""
    if len(rewards) != len(response_lengths):
        raise ValueError(f"{len(rewards)} rewards for {len(response_lengths)} responses")
    shaped: list[float | list[float]] = []
    for reward, length in zip(rewards, response_lengths, strict=True):
        per_token = not isinstance(reward, (int, float))
        if length > max_length:
            shaped.append([0.0] * len(reward) if per_token else 0.0)
            continue
        penalty = overlong_penalty(
            length, max_length=max_length, buffer_len=buffer_len, penalty_factor=penalty_factor
        )
        if per_token:
            tokens = [float(r) for r in reward]
            if tokens and penalty:
                tokens[-1] -= penalty
            shaped.append(tokens)
        else:
            shaped.append(float(reward) - penalty)
    return shaped
