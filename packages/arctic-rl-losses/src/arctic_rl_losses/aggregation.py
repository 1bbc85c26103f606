"""Token losses -> one scalar, and the KL estimators, as verl 0.9.1 computes them (operation for
operation, so results are bit-identical: `verl.trainer.ppo.core_algos.agg_loss` / `kl_penalty`).

Normalisation is global, as on the Arctic server: each micro-batch divides by the counts of the
whole mini-batch (`batch_num_tokens` response tokens, `global_batch_size` rows) and multiplies by
`dp_size`; the server back-propagates with `scale_wrt_gas=False` and DeepSpeed averages gradients
over the data-parallel ranks, so summing micro-batches and averaging ranks gives the mini-batch loss.
"""

from __future__ import annotations

import torch

from arctic_rl_losses.names import KL_LOSS_TYPES, LOSS_AGG_MODES


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Sum of `values` where `mask` is set (NaN outside the mask never leaks)."""
    valid = torch.where(mask.bool(), values, 0.0)
    return valid.sum() if axis is None else valid.sum(axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    return masked_sum(values, mask, axis) / (mask.sum(axis) + 1e-8)


def aggregate(
    loss_B_T: torch.Tensor,
    mask_B_T: torch.Tensor,
    mode: str,
    *,
    dp_size: int = 1,
    batch_num_tokens: float | None = None,
    global_batch_size: float | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """verl's `agg_loss`: token-mean = masked sum / batch_num_tokens * dp_size; token-sum = masked
    sum * dp_size; seq-mean-token-sum = per-row sums / global_batch_size * dp_size ("-norm": then /
    loss_scale_factor, default the row width T); seq-mean-token-mean = per-row token means /
    global_batch_size * dp_size. Rows with no masked token are excluded from the local fallback
    counts, used only when dp_size == 1 and the global count is None."""
    if mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise ValueError("meta.batch_num_tokens is required for token-mean when dp_size > 1")
            batch_num_tokens = mask_B_T.sum()
        return masked_sum(loss_B_T, mask_B_T) / batch_num_tokens * dp_size
    if mode == "token-sum":
        return masked_sum(loss_B_T, mask_B_T) * dp_size
    if mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        seq_losses = torch.sum(loss_B_T * mask_B_T, dim=-1)
        seq_mask = (torch.sum(mask_B_T, dim=-1) > 0).float()
        if global_batch_size is None:
            if dp_size > 1:
                raise ValueError(f"meta.global_batch_size is required for {mode} when dp_size > 1")
            global_batch_size = seq_mask.sum()
        loss = masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
        if mode == "seq-mean-token-sum-norm":
            loss /= mask_B_T.shape[-1] if loss_scale_factor is None else loss_scale_factor
        return loss
    if mode == "seq-mean-token-mean":
        tokens = torch.sum(mask_B_T, dim=-1)
        seq_losses = torch.sum(loss_B_T * mask_B_T, dim=-1) / (tokens + 1e-8)
        seq_mask = (tokens > 0).float()
        if global_batch_size is None:
            if dp_size > 1:
                raise ValueError(f"meta.global_batch_size is required for {mode} when dp_size > 1")
            global_batch_size = seq_mask.sum()
        return masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
    raise ValueError(f"loss_agg_mode={mode!r}: use one of {', '.join(LOSS_AGG_MODES)}")


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate (k1/kl, abs, k2/mse, k3/low_var_kl). A trailing "+" keeps the forward
    value and takes k2's gradient (straight-through); "k2+"/"mse+" equal "k2"."""
    if kind not in KL_LOSS_TYPES:
        raise ValueError(f"kl_loss_type={kind!r}: use one of {', '.join(KL_LOSS_TYPES)}")
    base = kind.removesuffix("+")
    if base in ("k1", "kl"):
        forward = logprobs - ref_logprobs
    elif base == "abs":
        forward = (logprobs - ref_logprobs).abs()
    elif base in ("k2", "mse"):
        forward = 0.5 * (logprobs - ref_logprobs).square()
    else:  # k3 / low_var_kl
        kl = torch.clamp(ref_logprobs - logprobs, min=-20, max=20)
        forward = torch.clamp((torch.exp(kl) - kl - 1).contiguous(), min=-10, max=10)
    if not kind.endswith("+") or base in ("k2", "mse"):
        return forward
    backward = 0.5 * (logprobs - ref_logprobs).square()
    return backward - backward.detach() + forward.detach()
