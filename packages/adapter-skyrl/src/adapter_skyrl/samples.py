"""SkyRL's training batch <-> the core's per-sample rollouts.

SkyRL lays each row out as one left-padded block `[pad.. prompt response]` (`sequences`,
`attention_mask` `[B, S]`) with response-level tensors RIGHT-aligned in `[B, R]` (`response_mask`,
`loss_mask`, `advantages`, `action_log_probs`, ...). The core wire builder takes per-sample token
lists and response-aligned values instead; its log-probs come back response-aligned from column 0.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from arctic_rl_core.async_grpo.is_weights import ISWeightStats
from arctic_rl_core.wire import RolloutSample
from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import (
    compute_off_policy_correction,
    off_policy_correction_enabled,
)

if TYPE_CHECKING:
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch


def _row_values(values_B_R: torch.Tensor | None, row: int, resp_len: int) -> list[float] | None:
    if values_B_R is None:
        return None
    return values_B_R[row, values_B_R.shape[1] - resp_len :].tolist()


def to_rollout_samples(
    data: TrainingInputBatch,
    *,
    with_advantages: bool,
    with_old: bool,
    with_ref: bool,
    is_weights_B_R: torch.Tensor | None = None,
    old_B_R: torch.Tensor | None = None,
    loss_mask_B_R: torch.Tensor | None = None,
) -> list[RolloutSample]:
    """One `RolloutSample` per row of a SkyRL batch.

    `loss_mask` becomes the sample's response mask (SkyRL's loss mask is what its loss reads).
    `is_weights_B_R`: rollout-correction weights right-aligned like the response tensors (`[B, 1]`
    is broadcast over each row's response). `old_B_R`: the old log-probs to send (default: the batch's
    `action_log_probs`); `loss_mask_B_R`: the loss mask to send (default: the batch's).
    """

    sequences_B_S = data["sequences"].cpu()
    attention_B_S = data["attention_mask"].cpu().bool()
    response_mask_B_R = _required(data, "response_mask").cpu()
    if loss_mask_B_R is None:
        loss_mask_B_R = data.get("loss_mask")
    loss_mask_B_R = loss_mask_B_R.cpu() if loss_mask_B_R is not None else response_mask_B_R
    advantages_B_R = data["advantages"].cpu() if with_advantages else None
    if with_old:
        old_B_R = (old_B_R if old_B_R is not None else _required(data, "action_log_probs")).cpu()
    else:
        old_B_R = None
    ref_B_R = _required(data, "base_action_log_probs").cpu() if with_ref else None
    rollout_B_R = data.get("rollout_logprobs")
    rollout_B_R = rollout_B_R.cpu() if rollout_B_R is not None else None

    resp_lens = response_mask_B_R.sum(dim=1).tolist()
    samples: list[RolloutSample] = []
    for row, resp_len in enumerate(resp_lens):
        resp_len = int(resp_len)
        tokens = sequences_B_S[row][attention_B_S[row]].tolist()
        if resp_len <= 0 or resp_len >= len(tokens):
            raise ValueError(
                f"SkyRL batch row {row}: response length {resp_len} with {len(tokens)} real tokens; "
                "every row needs a non-empty prompt and a non-empty response"
            )
        samples.append(
            RolloutSample(
                prompt_ids=tokens[:-resp_len],
                response_ids=tokens[-resp_len:],
                response_mask=[int(v) for v in _row_values(loss_mask_B_R, row, resp_len)],
                advantages=_row_values(advantages_B_R, row, resp_len) if with_advantages else 0.0,
                old_logprobs=_row_values(old_B_R, row, resp_len),
                ref_logprobs=_row_values(ref_B_R, row, resp_len),
                rollout_logprobs=_row_values(rollout_B_R, row, resp_len),
                rollout_is_weights=_weights(is_weights_B_R, row, resp_len),
            )
        )
    return samples


def _weights(weights_B_R: torch.Tensor | None, row: int, resp_len: int) -> list[float] | None:
    if weights_B_R is None:
        return None
    if weights_B_R.shape[1] == 1:  # one weight per sequence
        return [float(weights_B_R[row, 0])] * resp_len
    return _row_values(weights_B_R.cpu(), row, resp_len)


def rollout_anchored(algorithm: Any) -> bool:
    """Whether SkyRL's policy loss takes the rollout policy as its behaviour policy (`rollout_is`,
    `cispo` with `cispo_anchor=rollout`): the old log-probs on the wire are then the rollout log-probs."""
    loss = algorithm.policy_loss_type
    return loss == "rollout_is" or (loss == "cispo" and algorithm.cispo.cispo_anchor == "rollout")


def reads_rollout_logprobs(cfg: Any) -> bool:
    """Whether SkyRL's settings build anything from the sampler's log-probs: a rollout-anchored loss,
    the off-policy correction (or the deprecated use_tis), the fully asynchronous trainer. Otherwise
    the old log-probs are the trainer's own forward and the rollout log-probs are never read."""

    algorithm = cfg.trainer.algorithm
    opc = copy.copy(algorithm.off_policy_correction)
    if opc.tis_ratio_type is None and algorithm.use_tis:
        opc.tis_ratio_type = "token"
    return (
        rollout_anchored(algorithm)
        or off_policy_correction_enabled(opc)
        or bool(cfg.trainer.fully_async.enabled)
    )


def behaviour_logprobs(data: TrainingInputBatch, algorithm: Any) -> torch.Tensor:
    """The log-probs the server's loss takes as old: the trainer's forward (`action_log_probs`), or
    the sampler's (`rollout_logprobs`) for a rollout-anchored loss, as SkyRL's own loss reads them."""
    if not rollout_anchored(algorithm):
        return _required(data, "action_log_probs")
    rollout_B_R = data.get("rollout_logprobs")
    if rollout_B_R is None:
        raise ValueError(
            f"trainer.algorithm.policy_loss_type={algorithm.policy_loss_type} optimizes against the rollout "
            "log-probs: set generator.sampling_params.logprobs=1"
        )
    return rollout_B_R


@dataclass(frozen=True)
class OffPolicyCorrection:
    """SkyRL's off-policy correction of one batch (its own `compute_off_policy_correction`): the
    truncated IS weights (None without TIS), the loss mask with its sequence / outlier / token masks
    applied, and its metrics."""

    is_weights_B_R: torch.Tensor | None
    loss_mask_B_R: torch.Tensor | None
    metrics: dict[str, float]
    is_stats: ISWeightStats | None = None  # the weights' statistics over the loss mask (the core's)


def off_policy_correction(data: TrainingInputBatch, algorithm: Any) -> OffPolicyCorrection:
    """`trainer.algorithm.off_policy_correction` (or the deprecated `use_tis`, which SkyRL turns into
    token TIS capped at `tis_imp_ratio_cap`) on this batch: pi_old (the trainer's forward) against
    pi_rollout, exactly as SkyRL's losses apply it. Off: nothing to send."""

    opc = copy.copy(algorithm.off_policy_correction)
    if opc.tis_ratio_type is None and algorithm.use_tis:
        opc.tis_ratio_type, opc.token_tis_ratio_clip_high = "token", algorithm.tis_imp_ratio_cap
    if not off_policy_correction_enabled(opc):
        return OffPolicyCorrection(None, None, {})
    rollout_B_R = data.get("rollout_logprobs")
    if rollout_B_R is None:
        raise ValueError(
            "off-policy correction (trainer.algorithm.off_policy_correction) needs the rollout log-probs: "
            "set generator.sampling_params.logprobs=1"
        )
    old_B_R = _required(data, "action_log_probs")
    loss_mask_B_R = data.get("loss_mask")
    loss_mask_B_R = loss_mask_B_R if loss_mask_B_R is not None else _required(data, "response_mask")
    weights, metrics, mask = compute_off_policy_correction(
        old_B_R.cpu(), rollout_B_R.cpu(), loss_mask_B_R.cpu().float(), opc
    )
    stats = None
    if weights is not None:
        cap = (
            opc.token_tis_ratio_clip_high
            if opc.tis_ratio_type == "token"
            else opc.sequence_tis_ratio_clip_high
        )
        stats = is_weight_stats(weights, mask, float(cap))
    return OffPolicyCorrection(weights, mask, {k: float(v) for k, v in metrics.items()}, stats)


def is_weight_stats(weights_B_R: torch.Tensor, mask_B_R: torch.Tensor, cap: float) -> ISWeightStats:
    """The core's statistics of SkyRL's TIS weights (`[B, R]`, or `[B, 1]` per sequence) over the
    mask; a weight SkyRL truncated is exactly `cap` (its clamp)."""

    real = mask_B_R > 0
    values = weights_B_R.expand_as(mask_B_R)[real].float()
    if values.numel() == 0:
        return ISWeightStats(mean=1.0, max=1.0, min=1.0, clipped_fraction=0.0, tokens=0)
    return ISWeightStats(
        mean=float(values.mean()),
        max=float(values.max()),
        min=float(values.min()),
        clipped_fraction=float((values >= cap).float().mean()),
        tokens=int(values.numel()),
    )


def rollout_correction_weights(data: TrainingInputBatch, algorithm: Any) -> torch.Tensor | None:
    """SkyRL's truncated importance-sampling weights (pi_old / pi_rollout capped), None when off."""
    return off_policy_correction(data, algorithm).is_weights_B_R


def _required(data: TrainingInputBatch, key: str) -> torch.Tensor:
    value = data.get(key)
    if value is None:
        raise ValueError(
            f"SkyRL batch has no '{key}': the Arctic dispatch needs it (ArcticPPOTrainer adds the response "
            "mask to forward batches; other callers must include it)"
        )
    return value


def response_lengths(data: TrainingInputBatch) -> list[int]:
    return [int(v) for v in data["response_mask"].sum(dim=1).tolist()]


def to_skyrl_rows(values_B_R: torch.Tensor, resp_lens: Sequence[int], width: int) -> list[dict[str, Any]]:
    """Response-aligned core values (response token j at column j) -> SkyRL's per-sample outputs,
    right-aligned in `width` columns with zeros in front (what SkyRL's workers return)."""

    out_B_W = torch.zeros((len(resp_lens), width), dtype=torch.float32)
    for row, n in enumerate(resp_lens):
        out_B_W[row, width - n :] = values_B_R[row, :n].to(torch.float32)
    return [{"logprobs": out_B_W[row].tolist()} for row in range(len(resp_lens))]
