"""`RolloutSample`: one prompt + response with its per-token training data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RolloutSample:
    """One rollout, response-aligned: every per-token field has `len(response_ids)` entries,
    entry j belonging to response token j.

    Sequences may be lists, tuples, numpy arrays or 1-D CPU torch tensors (arrays and tensors
    are copied as whole rows; lists are packed into their rows in C). `response_mask` None means every response token counts;
    a scalar `advantages` is broadcast over the response tokens.
    """

    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    response_mask: Sequence[int] | None = None
    advantages: Sequence[float] | float = 0.0
    old_logprobs: Sequence[float] | None = None
    ref_logprobs: Sequence[float] | None = None
    rollout_logprobs: Sequence[float] | None = None
    # rollout-correction (truncated importance-sampling) weight per response token, computed by the
    # trainer; the server's loss multiplies each token's policy loss by it (batch.rollout_is_weights)
    rollout_is_weights: Sequence[float] | None = None
