"""Per-token policy losses of the GRPO family, on response-aligned rows `[B, R]`.

Each family follows its framework's own code operation for operation (verl 0.9.1
`verl.trainer.ppo.core_algos`, SkyRL 0.4.0 `skyrl.backends.skyrl_train.utils.ppo_utils`), so that
the per-token losses and their gradients are bit-identical on CPU; the parity suite checks it.
`rollout_is_weights` (rollout-correction / truncated importance-sampling weights, computed by the
trainer) multiply the per-token loss after the clip, where verl applies them and SkyRL applies
its TIS ratio.

`clip_cov` draws the tokens it masks with `torch.randperm` from torch's global generator, as both
frameworks do.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arctic_rl_losses.aggregation import masked_mean
from arctic_rl_losses.names import POLICY_LOSSES

LOG_RATIO_CLAMP = 20.0  # ratio = exp(clamp(logp - old, -20, 20)) where the frameworks clamp
GSPO_LOG_RATIO_MAX = 10.0


@dataclass(frozen=True)
class FamilyParams:
    """The knobs of the families (each family reads its own; defaults are verl's)."""

    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    tau_pos: float = 1.0  # sapo
    tau_neg: float = 1.05  # sapo
    clip_cov_ratio: float = 0.0002  # clip_cov: fraction of tokens masked
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002  # kl_cov: fraction of tokens penalised
    ppo_kl_coef: float = 0.1  # kl_cov: weight of |log-ratio|


@dataclass(frozen=True)
class PolicyTerms:
    """Per-token loss `[B, R]` (after rollout weights) and the counts behind the metrics."""

    pg_losses: torch.Tensor
    log_ratio: torch.Tensor  # logp - old_logp, for actor/ppo_kl (= masked mean of -log_ratio)
    clipped: torch.Tensor | None = None  # bool [B, R]: the clip bound (actor/pg_clipfrac)
    clipped_lower: torch.Tensor | None = None  # bool [B, R]: the dual clip bound (pg_clipfrac_lower)


def policy_terms(
    family: str,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    params: FamilyParams,
    rollout_is_weights: torch.Tensor | None = None,
) -> PolicyTerms:
    """The per-token loss of `family` (one of `POLICY_LOSSES`) on `[B, R]` rows with a bool mask."""
    if family not in _FAMILIES:
        raise ValueError(f"policy loss {family!r}: use one of {', '.join(POLICY_LOSSES)}")
    terms = _FAMILIES[family](logprobs, old_logprobs, advantages, mask, params)
    if rollout_is_weights is not None:
        terms = PolicyTerms(
            terms.pg_losses * rollout_is_weights, terms.log_ratio, terms.clipped, terms.clipped_lower
        )
    return terms


def _clipped_ratio_losses(ratio, advantages, low, high):
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    return pg_losses1, pg_losses2, torch.maximum(pg_losses1, pg_losses2)


def _ppo_clip(logprobs, old_logprobs, advantages, mask, p: FamilyParams) -> PolicyTerms:
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(torch.clamp(log_ratio, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP))
    pg1, pg2, clip_max = _clipped_ratio_losses(ratio, advantages, p.clip_ratio_low, p.clip_ratio_high)
    return PolicyTerms(clip_max, log_ratio, clipped=torch.gt(pg2, pg1))


def _dual_clip(logprobs, old_logprobs, advantages, mask, p: FamilyParams) -> PolicyTerms:
    if not p.clip_ratio_c > 1.0:
        raise ValueError(f"clip_ratio_c={p.clip_ratio_c}: dual-clip PPO needs a value > 1.0 (verl uses 3.0)")
    log_ratio = torch.clamp(logprobs - old_logprobs, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    pg1, pg2, clip_max = _clipped_ratio_losses(ratio, advantages, p.clip_ratio_low, p.clip_ratio_high)
    pg3 = -advantages * p.clip_ratio_c
    pg_losses = torch.where(advantages < 0, torch.min(pg3, clip_max), clip_max)
    lower = torch.gt(clip_max, pg3) & (advantages < 0)
    return PolicyTerms(pg_losses, log_ratio, clipped=torch.gt(pg2, pg1), clipped_lower=lower)


def _gspo(logprobs, old_logprobs, advantages, mask, p: FamilyParams) -> PolicyTerms:
    log_ratio = logprobs - old_logprobs
    seq_lengths = torch.sum(mask, dim=-1).clamp(min=1)
    seq_log_ratio = torch.sum(log_ratio * mask, dim=-1) / seq_lengths
    token_log_ratio = logprobs - logprobs.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(token_log_ratio, max=GSPO_LOG_RATIO_MAX))
    pg1, pg2, clip_max = _clipped_ratio_losses(ratio, advantages, p.clip_ratio_low, p.clip_ratio_high)
    return PolicyTerms(clip_max, log_ratio, clipped=torch.gt(pg2, pg1))


def _sapo(logprobs, old_logprobs, advantages, mask, p: FamilyParams) -> PolicyTerms:
    tau_pos = torch.as_tensor(p.tau_pos, dtype=advantages.dtype, device=advantages.device)
    tau_neg = torch.as_tensor(p.tau_neg, dtype=advantages.dtype, device=advantages.device)
    log_ratio = torch.clamp(logprobs - old_logprobs, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    taus = torch.where(advantages > 0, tau_pos, tau_neg)
    gates = torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus)
    return PolicyTerms(-gates * advantages, log_ratio)


def _cispo(logprobs, old_logprobs, advantages, mask, p: FamilyParams) -> PolicyTerms:
    log_ratio = torch.clamp(logprobs - old_logprobs, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1 - p.clip_ratio_low, 1 + p.clip_ratio_high)
    pg_losses = -clipped_ratio.detach() * advantages * logprobs
    return PolicyTerms(pg_losses, log_ratio, clipped=ratio != clipped_ratio)


def _clip_cov(logprobs, old_logprobs, advantages, mask, p: FamilyParams) -> PolicyTerms:
    if not p.clip_cov_ratio > 0:
        raise ValueError(f"clip_cov_ratio={p.clip_cov_ratio}: must be > 0")
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1 - p.clip_ratio_low, 1 + p.clip_ratio_high)
    clip_by_origin = (pg2 > pg1) & (mask > 0)
    cov_all = (advantages - masked_mean(advantages, mask)) * (logprobs - masked_mean(logprobs.detach(), mask))
    cov_all[mask == 0] = -torch.inf
    cov_all[clip_by_origin] = -torch.inf
    clip_num = max(int(p.clip_cov_ratio * mask.sum().item()), 1)
    candidates = torch.nonzero((cov_all < p.clip_cov_ub) & (cov_all > p.clip_cov_lb) & (mask > 0))
    if len(candidates) > 0:
        perm = torch.randperm(len(candidates))
        candidates = candidates[perm[: min(clip_num, len(candidates))]]
    else:
        candidates = torch.empty((0, 2), device=cov_all.device, dtype=torch.long)
    corr = torch.ones_like(advantages)
    corr[candidates[:, 0], candidates[:, 1]] = 0
    return PolicyTerms(torch.maximum(pg1, pg2) * corr, log_ratio, clipped=corr == 0)


def _kl_cov(logprobs, old_logprobs, advantages, mask, p: FamilyParams) -> PolicyTerms:
    if not p.kl_cov_ratio > 0:
        raise ValueError(f"kl_cov_ratio={p.kl_cov_ratio}: must be > 0")
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    pg_losses = -advantages * ratio
    pg_losses_kl = -advantages * ratio + p.ppo_kl_coef * log_ratio.abs()
    valid = mask > 0
    valid_idx = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
    valid_adv = advantages[valid].detach().reshape(-1).cpu()
    valid_logp = logprobs[valid].detach().reshape(-1).cpu()
    if len(valid_adv) > 0:
        cov = (valid_adv - valid_adv.mean()) * (valid_logp - valid_logp.mean())
        count = max(1, int(len(cov) * p.kl_cov_ratio))
        chosen = torch.topk(cov, min(count, len(cov)), largest=True).indices
        if len(chosen) > 0:
            flat = valid_idx[chosen.to(valid_idx.device)]
            rows, cols = flat // advantages.shape[1], flat % advantages.shape[1]
            pg_losses[rows, cols] = pg_losses_kl[rows, cols]
    return PolicyTerms(pg_losses, log_ratio)


def _gpg(logprobs, old_logprobs, advantages, mask, p: FamilyParams) -> PolicyTerms:
    return PolicyTerms(-logprobs * advantages, logprobs - old_logprobs)


def _rollout_is(logprobs, old_logprobs, advantages, mask, p: FamilyParams) -> PolicyTerms:
    """SkyRL's `rollout_is`: `old_logprobs` are the behaviour (rollout) policy's; the stop-gradient
    ratio is kept inside (1 - low, 1 + high) and zeroed outside (a hard zero, not CISPO's clamp)."""
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(torch.clamp(log_ratio, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP))
    in_range = (ratio > 1 - p.clip_ratio_low) & (ratio < 1 + p.clip_ratio_high)
    calibrated = torch.where(in_range, ratio, torch.zeros_like(ratio))
    return PolicyTerms(-(calibrated.detach() * advantages * logprobs), log_ratio, clipped=~in_range)


_FAMILIES = {
    "ppo_clip": _ppo_clip,
    "dual_clip": _dual_clip,
    "gspo": _gspo,
    "sapo": _sapo,
    "cispo": _cispo,
    "clip_cov": _clip_cov,
    "kl_cov": _kl_cov,
    "gpg": _gpg,
    "rollout_is": _rollout_is,
}
assert tuple(_FAMILIES) == POLICY_LOSSES
