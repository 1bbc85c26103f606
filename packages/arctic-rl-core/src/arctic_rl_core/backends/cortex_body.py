"""Cortex's forward-backward body, lowered from the canonical train payload, and Cortex's step
result read back.

The 0.1.4 client forwards `fwd_bwd`'s batch verbatim (`client/requests.py`: "Cortex expects an
RPC-style {"args", "kwargs"} ... on-prem expects a pre-tokenized verl-GRPO {"batch", "meta",
"processing"}"), so the caller must speak Cortex's shape. It is the ArcticTraining extension of
the DSSST1 forward-backward object (Arctic-Platform `cortex-client/DSS-Server-API-Specification.md`
sections 6.1 and 10, `cortex-client/recipes/rl_loop.py`):

    {"args": (),
     "kwargs":     {input_ids, attention_mask, position_ids}         # model inputs [B, S']
     "context":    {input_ids, advantages, loss_mask,                # SHIFTED: [:, i] is about
                    old_log_probs_shifted},                          #   input_ids[:, i + 1]
     "processing": {"post": ["compute_logprobs"], "loss_fn": "grpo",
                    "config": {eps_clip, eps_clip_higher, c_clip, loss_agg_mode, entropy_coeff,
                               global_batch_size, batch_num_tokens}}}

- Rows are LEFT-ALIGNED (real tokens first, padding at the tail): Cortex's packer rejects any other
  layout (0.1.4 `integrations/_cortex_shared.py`). The canonical payload left-pads prompts to
  column P, so every row moves left by its padding; every per-token tensor moves with it.
- `grpo` is the Cortex loss contract (0.1.4 `rl/processors/cortex_grpo.py`): dual-clip PPO whose
  `eps_clip` / `eps_clip_higher` / `c_clip` are the canonical `clip_ratio_low` / `clip_ratio_high`
  / `clip_ratio_c`; `old_log_probs_shifted` is the behaviour policy (here: the sampler's rollout
  log-probs, Cortex has no forward).
- No temperature: Cortex's body has none (`compute_logprobs` is the only post-processor), so the
  training log-probs are the model's own (temperature 1), like the sampler's raw log-probs (vLLM's
  default `raw_logprobs`): the ratio starts at 1 whatever the sampling temperature.
- Rollout-correction weights are the identity here (the old log-probs ARE the rollout log-probs, so
  pi_old / pi_rollout = 1): they are checked to be 1 and not sent.

Cortex's `step` result is `{"global_steps", "last_lr"}` with no `metrics` dict (0.1.4
`client/requests.py` `step_request`): `step_result` reads it without inventing a gradient norm.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from arctic_rl_core.backends.protocol import WirePayload

CORTEX_LOSS_FN = "grpo"
CORTEX_POST = ("compute_logprobs",)
# the per-token fields of the canonical train payload Cortex's grpo reads, and their Cortex names
_CONTEXT_FIELDS = {"advantages": "advantages", "old_log_probs": "old_log_probs_shifted"}


class CortexBodyError(ValueError):
    """A train payload Cortex's forward-backward cannot carry; the message names the field."""


def forward_backward_body(payload: WirePayload) -> dict[str, Any]:
    """The Cortex forward-backward object for one canonical train payload (built by
    `wire.build_train_payload` with the built-in loss, `verl_grpo`)."""
    import torch

    if payload.processing.get("loss_fn") != "verl_grpo":
        raise CortexBodyError(
            f"processing.loss_fn={payload.processing.get('loss_fn')!r}: Cortex runs only its built-in "
            f"{CORTEX_LOSS_FN!r} loss (the verl_grpo family) and cannot import others; set loss.loss_fn=verl_grpo"
        )
    if not isinstance(payload.batch, Mapping):
        raise CortexBodyError("payload.batch is a list of micro-batches: Cortex takes one [B, S] batch")
    batch, meta = payload.batch, payload.meta
    for key in ("ref_log_prob",):
        if key in batch:
            raise CortexBodyError(
                f"batch.{key}: Cortex has no reference model, so there is no KL term to send it for"
            )
    actor = meta.get("actor_config") or {}
    if actor.get("use_kl_loss"):
        raise CortexBodyError("meta.actor_config.use_kl_loss=True: Cortex has no reference log-probs")
    attention = batch["attention_mask"].to(torch.bool)
    order, valid = _left_alignment(attention)
    width = int(valid.sum(dim=1).max())  # the longest row; the tail beyond it is all padding

    def aligned(tensor: torch.Tensor, pad: float | int = 0) -> torch.Tensor:
        moved = torch.where(valid, tensor.gather(1, order), torch.full_like(tensor, pad))
        return moved[:, :width].contiguous()

    def shifted(tensor: torch.Tensor) -> torch.Tensor:
        """`out[:, i] = aligned[:, i + 1]` (the value of the token position i predicts), 0 last."""
        moved = aligned(tensor)
        out = torch.zeros_like(moved)
        out[:, :-1] = moved[:, 1:]
        return out

    input_ids = aligned(batch["input_ids"], int(meta["pad_token_id"]))
    kwargs: dict[str, Any] = {
        "input_ids": input_ids,
        "attention_mask": valid[:, :width].to(torch.int64).contiguous(),
    }
    # left-aligned rows: the k-th real token is at column k, so its position is k (as rl_loop.py sends)
    kwargs["position_ids"] = torch.arange(width, dtype=torch.int64).expand(len(input_ids), -1).contiguous()
    response_mask = batch["response_mask"].to(torch.bool) & attention
    context: dict[str, Any] = {
        "input_ids": input_ids,
        "loss_mask": shifted(response_mask.to(torch.float32)),
    }
    for canonical, cortex_name in _CONTEXT_FIELDS.items():
        if canonical in batch:
            context[cortex_name] = shifted(batch[canonical].to(torch.float32))
    if "rollout_is_weights" in batch:
        weights = batch["rollout_is_weights"].to(torch.float32)[response_mask]
        if not torch.allclose(weights, torch.ones_like(weights)):
            raise CortexBodyError(
                "batch.rollout_is_weights differ from 1: on Cortex the old log-probs are the rollout "
                "log-probs, so rollout-correction weights (pi_old / pi_rollout) are exactly 1; these were "
                "computed against other old log-probs"
            )
    if "old_log_probs_shifted" not in context:
        raise CortexBodyError(
            "batch.old_log_probs is missing: a train payload carries the behaviour log-probs"
        )
    config = {
        "eps_clip": float(actor.get("clip_ratio_low", 0.2)),
        "eps_clip_higher": float(actor.get("clip_ratio_high", 0.2)),
        "c_clip": float(actor.get("clip_ratio_c", 3.0)),
        "loss_agg_mode": str(actor.get("loss_agg_mode", "token-mean")),
        "entropy_coeff": float(actor.get("entropy_coeff", 0.0)),
        "global_batch_size": int(meta["global_batch_size"]),
        "batch_num_tokens": int(meta["batch_num_tokens"]),
    }
    return {
        "args": (),
        "kwargs": kwargs,
        "context": context,
        "processing": {"post": list(CORTEX_POST), "loss_fn": CORTEX_LOSS_FN, "config": config},
    }


def _left_alignment(attention_B_S: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(order, valid): gathering a row through `order` puts its real columns first, in order;
    `valid[b, i]` is True for the first `len_b` columns."""
    import torch

    lengths = attention_B_S.sum(dim=1)
    columns = torch.arange(attention_B_S.shape[1], device=attention_B_S.device)
    valid = columns.unsqueeze(0) < lengths.unsqueeze(1)
    order = torch.argsort((~attention_B_S).to(torch.int8), dim=1, stable=True)
    return order, valid


def step_result(out: Any) -> tuple[float, int | None, dict[str, float]]:
    """(learning rate, optimizer steps the server reports, numeric extras) of a Cortex `step`
    result. Cortex reports no gradient norm: callers record NaN ("not measured")."""
    if not isinstance(out, Mapping):
        raise RuntimeError(f"Cortex step returned {type(out).__name__}, expected an object")
    lr = _first_number(out.get("last_lr"))
    if lr is None:
        raise RuntimeError(f"Cortex step result has no numeric last_lr (keys: {sorted(out)})")
    steps = out.get("global_steps")
    extras: dict[str, float] = {}
    peak = out.get("peak_memory")
    if isinstance(peak, Mapping):
        extras.update({f"peak_memory/{k}": float(v) for k, v in peak.items() if isinstance(v, (int, float))})
    return lr, (int(steps) if isinstance(steps, (int, float)) else None), extras


def _first_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(float(value)) else None
    if isinstance(value, (list, tuple)) and value:
        return _first_number(value[0])
    if hasattr(value, "tolist"):
        return _first_number(value.tolist())
    return None
