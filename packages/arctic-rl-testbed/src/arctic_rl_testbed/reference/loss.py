"""Loss math of the reference backend, in pure torch: the Arctic server's `verl_grpo` loss (verl's
vanilla PPO/GRPO policy loss with global aggregation), its KL penalties and entropy bonus, and the
supervised cross-entropy losses `sft` / `sft_ce`.

All tensors are `[B, T]` rows (one sequence per row) with a 0/1 `mask_B_T`. Every function is
differentiable and dtype-agnostic (the gradient check runs them in float64). Differences from the
server, on purpose: the clip ratios sent in `actor_config` are honoured (arctic-platform 0.1.4
hard-codes 0.2/0.2/3.0; see `GRPOLossConfig.from_meta(honour_clip_ratios=False)` for that), and
the sequence-mean modes aggregate per sequence as verl does (the server's packed `[1, T]` rows
make seq-mean-token-mean a micro-batch token mean).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arctic_rl_losses.names import BUILTIN_LOSS_AGG_MODES as LOSS_AGG_MODES
from arctic_rl_losses.names import KL_LOSS_TYPES

if TYPE_CHECKING:
    import torch

SERVER_CLIP_RATIO = 0.2  # what arctic-platform 0.1.4's verl_grpo uses whatever it is sent
SERVER_CLIP_RATIO_C = 3.0
LOG_RATIO_CLAMP = 20.0


def aggregate(loss_B_T: torch.Tensor, mask_B_T: torch.Tensor, mode: str, **counts: Any) -> torch.Tensor:
    """The server's `verl_grpo` aggregation: the one aggregation of the server-side losses
    (`arctic_rl_losses.aggregation.aggregate`: verl's `agg_loss` with the global normalisation; `counts`
    are its keywords), over the modes 0.1.4's built-in loss has (no token-sum), with the mask in the
    loss's dtype."""
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode={mode!r}: use one of {', '.join(LOSS_AGG_MODES)}")
    from arctic_rl_losses.aggregation import aggregate as losses_aggregate  # torch: the light-import rule

    return losses_aggregate(loss_B_T, mask_B_T.to(loss_B_T.dtype), mode, **counts)


@dataclass(frozen=True)
class PolicyLossTerms:
    """Per-token pieces of the vanilla PPO loss (all `[B, T]`)."""

    pg_losses: torch.Tensor  # the loss per token, after clip, dual clip and IS weights
    unclipped: torch.Tensor  # -A * ratio
    clipped: torch.Tensor  # -A * clamp(ratio, 1 - low, 1 + high)
    dual_clip: torch.Tensor  # -A * c
    clip_max: torch.Tensor  # max(unclipped, clipped)
    log_ratio: torch.Tensor  # clamp(logp - old_logp, -20, 20)


def policy_loss_vanilla(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float,
    rollout_is_weights: torch.Tensor | None = None,
) -> PolicyLossTerms:
    """verl's vanilla policy loss per token: ratio = exp(clamp(logp - old, -20, 20));
    max(-A ratio, -A clamp(ratio, 1-low, 1+high)); for A < 0 also min(., -A c) (dual clip)."""
    import torch

    if not clip_ratio_c > 1.0:
        raise ValueError(f"clip_ratio_c={clip_ratio_c}: dual-clip PPO needs a value > 1.0 (verl uses 3.0)")
    log_ratio = torch.clamp(logprobs - old_logprobs, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    clip_max = torch.maximum(unclipped, clipped)
    dual_clip = -advantages * clip_ratio_c
    pg_losses = torch.where(advantages < 0, torch.minimum(dual_clip, clip_max), clip_max)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    return PolicyLossTerms(pg_losses, unclipped, clipped, dual_clip, clip_max, log_ratio)


@dataclass(frozen=True)
class GRPOLossConfig:
    """The loss knobs the server reads from `meta.actor_config` / `meta.policy_loss_config`."""

    loss_agg_mode: str = "token-mean"
    clip_ratio_low: float = SERVER_CLIP_RATIO
    clip_ratio_high: float = SERVER_CLIP_RATIO
    clip_ratio_c: float = SERVER_CLIP_RATIO_C
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    loss_scale_factor: float | None = None

    def __post_init__(self) -> None:
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(
                f"meta.actor_config.loss_agg_mode={self.loss_agg_mode!r}: use one of {', '.join(LOSS_AGG_MODES)}"
            )
        if self.kl_loss_type not in KL_LOSS_TYPES:
            raise ValueError(
                f"meta.actor_config.kl_loss_type={self.kl_loss_type!r}: use one of {', '.join(KL_LOSS_TYPES)}"
            )
        for name in ("clip_ratio_low", "clip_ratio_high"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"meta.actor_config.{name}={value}: must be a finite number >= 0")
        if not self.clip_ratio_c > 1.0:
            raise ValueError(f"meta.actor_config.clip_ratio_c={self.clip_ratio_c}: must be > 1.0 (dual clip)")
        if self.loss_scale_factor is not None and not self.loss_scale_factor > 0:
            raise ValueError(
                f"meta.actor_config.loss_scale_factor={self.loss_scale_factor}: must be > 0 or None"
            )

    @classmethod
    def from_meta(
        cls,
        actor_config: Mapping[str, Any] | None,
        policy_loss_config: Mapping[str, Any] | None,
        *,
        honour_clip_ratios: bool = True,
    ) -> GRPOLossConfig:
        """Read the knobs with the server's defaults for absent keys. `honour_clip_ratios=False`
        reproduces arctic-platform 0.1.4 (clip ratios fixed at 0.2/0.2/3.0)."""
        actor = dict(actor_config or {})
        policy = dict(policy_loss_config or {})
        loss_mode = policy.get("loss_mode", "vanilla")
        if loss_mode != "vanilla":
            raise ValueError(
                f"meta.policy_loss_config.loss_mode={loss_mode!r}: the verl_grpo loss is the vanilla PPO "
                "loss only; send 'vanilla'"
            )
        clip_ratio = _number(actor, "clip_ratio", SERVER_CLIP_RATIO)
        low = actor.get("clip_ratio_low")
        high = actor.get("clip_ratio_high")
        if honour_clip_ratios:
            clip_low = clip_ratio if low is None else _number(actor, "clip_ratio_low", clip_ratio)
            clip_high = clip_ratio if high is None else _number(actor, "clip_ratio_high", clip_ratio)
            clip_c = _number(actor, "clip_ratio_c", SERVER_CLIP_RATIO_C)
        else:
            clip_low, clip_high, clip_c = SERVER_CLIP_RATIO, SERVER_CLIP_RATIO, SERVER_CLIP_RATIO_C
        scale = actor.get("loss_scale_factor")
        return cls(
            loss_agg_mode=str(actor.get("loss_agg_mode", "token-mean")),
            clip_ratio_low=clip_low,
            clip_ratio_high=clip_high,
            clip_ratio_c=clip_c,
            entropy_coeff=_number(actor, "entropy_coeff", 0.0),
            use_kl_loss=bool(actor.get("use_kl_loss", False)),
            kl_loss_coef=_number(actor, "kl_loss_coef", 0.001),
            kl_loss_type=str(actor.get("kl_loss_type", "low_var_kl")),
            loss_scale_factor=None if scale is None else _number(actor, "loss_scale_factor", 1.0),
        )


def _number(mapping: Mapping[str, Any], key: str, default: float) -> float:
    value = mapping.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"meta.actor_config.{key}={value!r}: must be a number")
    return float(value)


@dataclass(frozen=True)
class GlobalBatchInfo:
    """The server's global normalisers: `dp_size` (injected by the server), `batch_num_tokens` and
    `global_batch_size` (sent in meta, over the whole mini-batch across ranks and micro-batches)."""

    dp_size: int
    batch_num_tokens: float | None
    global_batch_size: float | None
    loss_scale_factor: float | None = None


def grpo_loss(
    logprobs_B_T: torch.Tensor,
    old_logprobs_B_T: torch.Tensor,
    advantages_B_T: torch.Tensor,
    mask_B_T: torch.Tensor,
    config: GRPOLossConfig,
    info: GlobalBatchInfo,
    *,
    entropy_B_T: torch.Tensor | None = None,
    ref_logprobs_B_T: torch.Tensor | None = None,
    rollout_is_weights_B_T: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """One micro-batch of `verl_grpo`: policy loss - entropy_coeff * entropy + kl_coef * KL, each
    aggregated with the global normalisers. Returns the loss to back-propagate and the server's
    paired metrics (`name.sum` / `name.tokens`, plain numbers for constants)."""
    import torch
    from arctic_rl_losses.aggregation import masked_sum  # imports torch: kept out of the module's import

    agg = dict(
        dp_size=info.dp_size,
        batch_num_tokens=info.batch_num_tokens,
        global_batch_size=info.global_batch_size,
        loss_scale_factor=info.loss_scale_factor,
    )
    terms = policy_loss_vanilla(
        logprobs_B_T,
        old_logprobs_B_T,
        advantages_B_T,
        clip_ratio_low=config.clip_ratio_low,
        clip_ratio_high=config.clip_ratio_high,
        clip_ratio_c=config.clip_ratio_c,
        rollout_is_weights=rollout_is_weights_B_T,
    )
    loss = aggregate(terms.pg_losses, mask_B_T, config.loss_agg_mode, **agg)
    mask = mask_B_T.to(logprobs_B_T.dtype)
    tokens = float(mask.sum().item())
    with torch.no_grad():
        clipfrac = (torch.gt(terms.clipped, terms.unclipped).to(mask.dtype) * mask).sum()
        clipfrac_lower = (
            torch.gt(terms.clip_max, terms.dual_clip).to(mask.dtype)
            * (advantages_B_T < 0).to(mask.dtype)
            * mask
        ).sum()
        pg_loss_sum = float(masked_sum(terms.pg_losses, mask_B_T).item())
        metrics: dict[str, float] = {
            "actor/pg_clipfrac.sum": float(clipfrac.item()),
            "actor/pg_clipfrac.tokens": tokens,
            "actor/ppo_kl.sum": float(masked_sum(-terms.log_ratio, mask_B_T).item()),
            "actor/ppo_kl.tokens": tokens,
            "actor/pg_clipfrac_lower.sum": float(clipfrac_lower.item()),
            "actor/pg_clipfrac_lower.tokens": tokens,
            "actor/pg_loss.sum": pg_loss_sum,
            "actor/pg_loss.tokens": tokens,
        }
    from arctic_rl_losses.regularizers import add_entropy_and_kl

    loss = add_entropy_and_kl(
        loss,
        pg_loss_sum,
        metrics,
        config,
        aggregate=aggregate,
        agg=agg,
        logprobs=logprobs_B_T,
        mask=mask_B_T,
        tokens=tokens,
        entropy=entropy_B_T,
        ref_logprobs=ref_logprobs_B_T,
    )
    return loss, metrics


def token_cross_entropy_sum(logits_B_S_V: torch.Tensor, labels_B_S: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy in float32 or wider: `logits[:, t]` predicts `labels[:, t+1]`;
    labels equal to -100 are ignored. Returns (sum, number of counted targets)."""
    import torch

    logits = logits_B_S_V[:, :-1, :]
    targets = labels_B_S[:, 1:]
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    ce_sum = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100, reduction="sum"
    )
    return ce_sum, int((targets != -100).sum().item())


def sft_loss(logits_B_S_V: torch.Tensor, labels_B_S: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """The server's `sft` loss for one micro-batch: Hugging Face's causal-LM token mean over the
    micro-batch (0 when every label is -100). Gradient accumulation sums these means."""
    ce_sum, count = token_cross_entropy_sum(logits_B_S_V, labels_B_S)
    loss = ce_sum / count if count > 0 else ce_sum * 0.0
    return loss, {"loss.sum": float(loss.detach().item()) * count, "loss.tokens": float(count)}


def sft_ce_loss(
    logits_B_S_V: torch.Tensor, labels_B_S: torch.Tensor, *, global_num_tokens: int, dp_size: int
) -> tuple[torch.Tensor, dict[str, float]]:
    """The server's `sft_ce` loss for one micro-batch: summed cross-entropy / global target count
    * dp_size, so that summing micro-batches and averaging ranks gives the global token mean."""
    ce_sum, count = token_cross_entropy_sum(logits_B_S_V, labels_B_S)
    loss = (
        ce_sum / float(global_num_tokens) * dp_size
        if global_num_tokens > 0
        else ce_sum / float(max(count, 1))
    )
    return loss, {"loss.sum": float(ce_sum.detach().item()), "loss.tokens": float(count)}


def combine_metrics(per_shard: list[Mapping[str, float]]) -> dict[str, float]:
    """The server's metric reduction across micro-batches and ranks: paired `name.sum` /
    `name.tokens` become `name` = sum of sums / sum of tokens (0 when no token); other numbers
    are averaged over the shards that report them."""
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for shard in per_shard:
        for key, value in shard.items():
            totals[key] = totals.get(key, 0.0) + float(value)
            counts[key] = counts.get(key, 0) + 1
    out: dict[str, float] = {}
    paired = {
        key[: -len(".sum")] for key in totals if key.endswith(".sum") and key[:-4] + ".tokens" in totals
    }
    for base in paired:
        tokens = totals[base + ".tokens"]
        out[base] = totals[base + ".sum"] / tokens if tokens > 0 else 0.0
    for key, total in totals.items():
        base = key.rsplit(".", 1)[0]
        if base in paired and key in (base + ".sum", base + ".tokens"):
            continue
        out[key] = total / counts[key]
    return out
