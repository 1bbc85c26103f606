"""The entropy bonus and the KL penalty added to a policy loss, as verl 0.9.1's `ppo_loss` (and
arctic-platform 0.1.4's `verl_grpo`) compose them: loss - entropy_coeff x agg(entropy) +
kl_loss_coef x agg(KL), with their paired metrics and the whole loss's `loss.sum` / `loss.tokens`.
One copy for the server-side losses (`losses.policy`) and the reference engine's `verl_grpo`
(`arctic_rl_testbed.reference.loss`); each passes its own aggregation (the reference's is 0.1.4's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch

from arctic_rl_losses.aggregation import kl_penalty, masked_sum


class RegularizerSettings(Protocol):
    loss_agg_mode: str
    entropy_coeff: float
    use_kl_loss: bool
    kl_loss_coef: float
    kl_loss_type: str


def add_entropy_and_kl(
    loss: torch.Tensor,
    pg_loss_sum: float,
    metrics: dict[str, float],
    settings: RegularizerSettings,
    *,
    aggregate: Callable[..., torch.Tensor],
    agg: Mapping[str, Any],
    logprobs: torch.Tensor,
    mask: torch.Tensor,
    tokens: float,
    entropy: torch.Tensor | None,
    ref_logprobs: torch.Tensor | None,
) -> torch.Tensor:
    """`loss` with the entropy and KL terms added (each aggregated by `aggregate(values, mask,
    settings.loss_agg_mode, **agg)`); `metrics` gains their sums and `loss.sum` / `loss.tokens`."""
    loss_sum = pg_loss_sum
    if entropy is not None:
        loss = loss - settings.entropy_coeff * aggregate(entropy, mask, settings.loss_agg_mode, **agg)
        entropy_sum = float(masked_sum(entropy.detach(), mask).item())
        metrics["actor/entropy_loss.sum"] = entropy_sum
        metrics["actor/entropy_loss.tokens"] = tokens
        loss_sum -= settings.entropy_coeff * entropy_sum
    if settings.use_kl_loss:
        if ref_logprobs is None:
            raise ValueError(
                "meta.actor_config.use_kl_loss=True but batch.ref_log_prob is missing: send reference "
                "log-probs (forward with reference_model=True) or set use_kl_loss=False"
            )
        kld = kl_penalty(logprobs, ref_logprobs, settings.kl_loss_type)
        loss = loss + settings.kl_loss_coef * aggregate(kld, mask, settings.loss_agg_mode, **agg)
        kl_sum = float(masked_sum(kld.detach(), mask).item())
        metrics["kl_loss.sum"] = kl_sum
        metrics["kl_loss.tokens"] = tokens
        metrics["kl_coef"] = settings.kl_loss_coef
        loss_sum += settings.kl_loss_coef * kl_sum
    metrics["loss.sum"] = loss_sum
    metrics["loss.tokens"] = tokens
    return loss
