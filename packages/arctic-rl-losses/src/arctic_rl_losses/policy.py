"""One micro-batch's whole actor loss on response-aligned rows: policy term - entropy_coeff x
entropy + kl_loss_coef x KL, each aggregated with the mini-batch's global counts, as verl 0.9.1's
`verl.workers.utils.losses.ppo_loss` composes it. Returns the loss to back-propagate and the
server's paired metrics (`name.sum` / `name.tokens`; the server turns each pair into a token mean
over all micro-batches and ranks)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from arctic_rl_losses.aggregation import aggregate, masked_sum
from arctic_rl_losses.families import policy_terms
from arctic_rl_losses.regularizers import add_entropy_and_kl
from arctic_rl_losses.settings import LossSettings


@dataclass(frozen=True)
class GlobalCounts:
    """The server's normalisers: `dp_size` (injected by the server), `batch_num_tokens` and
    `global_batch_size` (meta: the whole mini-batch across ranks and micro-batches)."""

    dp_size: int = 1
    batch_num_tokens: float | None = None
    global_batch_size: float | None = None


def actor_loss(
    settings: LossSettings,
    counts: GlobalCounts,
    logprobs_B_R: torch.Tensor,
    old_logprobs_B_R: torch.Tensor,
    advantages_B_R: torch.Tensor,
    mask_B_R: torch.Tensor,
    *,
    entropy_B_R: torch.Tensor | None = None,
    ref_logprobs_B_R: torch.Tensor | None = None,
    rollout_is_weights_B_R: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    mask = mask_B_R.bool()
    agg = dict(
        dp_size=counts.dp_size,
        batch_num_tokens=counts.batch_num_tokens,
        global_batch_size=counts.global_batch_size,
        loss_scale_factor=settings.loss_scale_factor,
    )
    terms = policy_terms(
        settings.family,
        logprobs_B_R,
        old_logprobs_B_R,
        advantages_B_R,
        mask,
        settings.params,
        rollout_is_weights_B_R,
    )
    loss = aggregate(terms.pg_losses, mask, settings.policy_agg_mode, **agg)
    with torch.no_grad():
        tokens = float(mask.sum().item())
        pg_sum = float(masked_sum(terms.pg_losses, mask).item())
        metrics: dict[str, float] = {
            "actor/pg_loss.sum": pg_sum,
            "actor/pg_loss.tokens": tokens,
            "actor/ppo_kl.sum": float(masked_sum(-terms.log_ratio, mask).item()),
            "actor/ppo_kl.tokens": tokens,
        }
        for name, flags in (("pg_clipfrac", terms.clipped), ("pg_clipfrac_lower", terms.clipped_lower)):
            if flags is not None:
                metrics[f"actor/{name}.sum"] = float((flags & mask).sum().item())
                metrics[f"actor/{name}.tokens"] = tokens
    loss = add_entropy_and_kl(
        loss,
        pg_sum,
        metrics,
        settings,
        aggregate=aggregate,
        agg=agg,
        logprobs=logprobs_B_R,
        mask=mask,
        tokens=tokens,
        entropy=entropy_B_R,
        ref_logprobs=ref_logprobs_B_R,
    )
    return loss, metrics
