"""The Cortex forward-backward body, checked and lowered onto the reference engine's verl_grpo
payload (what the Cortex emulator trains on).

The body Cortex takes (arctic-platform 0.1.4's `integrations/_cortex_shared.py`, the Arctic-Platform
cookbook `cortex-client/recipes/rl_loop.py`, the server's `grpo` loss in
`arctic_platform/rl/processors/cortex_grpo.py`):

    {"args": (),
     "kwargs": {"input_ids": [B, S] int, "attention_mask": [B, S] 0/1, "position_ids": [B, S] (optional)},
     "context": {"input_ids": the same [B, S], "advantages": [B, S] float, "loss_mask": [B, S] bool/0-1,
                 "old_log_probs_shifted": [B, S] float (optional)},
     "processing": {"loss_fn": "grpo", "post": ["compute_logprobs"],
                    "config": {"eps_clip", "eps_clip_higher", "c_clip", "loss_agg_mode", "entropy_coeff",
                               "global_batch_size", "batch_num_tokens"}}}

- Rows are LEFT-aligned: each row's real tokens are its leading columns, padding at the tail
  (Cortex's packer rejects any other layout).
- Per-token context tensors are SHIFTED (the server's `labels = roll(input_ids, -1)` convention):
  `loss_mask[b, i] = 1` trains the prediction of `input_ids[b, i + 1]`; `advantages[b, i]` and
  `old_log_probs_shifted[b, i]` belong to that same prediction. So a row's last real column never
  carries loss_mask.
- Without `old_log_probs_shifted` the server's GRPO takes pi_old = pi_new.detach() (ratio 1); with it,
  the ratio is against those log-probs (e.g. the sampler's rollout log-probs).

Lowering: each row is split at its first trained prediction (prompt = the tokens up to and including
it, response = the rest), re-laid out as the verl layout (prompts left-padded to P, responses
right-padded), and the per-token values moved to the response token's own index. pi_old, when not
sent, comes from a no-grad forward of the same weights just before the training forward.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

CORTEX_LOSS_FN = "grpo"
LOGPROBS_POST = "compute_logprobs"
BODY_KEYS = frozenset({"args", "kwargs", "context", "processing"})
KWARGS_KEYS = frozenset({"input_ids", "attention_mask", "position_ids", "use_cache"})
CONTEXT_KEYS = frozenset({"input_ids", "advantages", "loss_mask", "old_log_probs_shifted"})
# `grpo` config keys the emulator computes; the server's other keys (SAPO, CISPO, M2PO, KL, decoupled
# loss, version staleness, ...) are refused with their name rather than silently trained without.
CONFIG_KEYS = frozenset(
    {
        "eps_clip",
        "eps_clip_higher",
        "c_clip",
        "loss_agg_mode",
        "entropy_coeff",
        "global_batch_size",
        "batch_num_tokens",
    }
)
AGG_MODES = frozenset({"token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"})
NO_DUAL_CLIP = 1e30  # c_clip None: the server's dual clip is off


class CortexBodyError(ValueError):
    """A forward-backward body that breaks Cortex's contract (answered 400, naming the field)."""


@dataclass(frozen=True)
class LoweredBody:
    """The verl_grpo payload for the reference engine, and what it still needs before training."""

    payload: dict[str, Any]
    needs_old_logprobs: bool  # fill payload.batch.old_log_probs from a no-grad forward first
    rows: int
    prompt_width: int


def lower(body: Any, *, pad_token_id: int, vocab_size: int) -> LoweredBody:
    import torch

    if not isinstance(body, Mapping):
        raise CortexBodyError(f"forward-backward body is a {type(body).__name__}: send a dict")
    unknown = sorted(set(body) - BODY_KEYS)
    if unknown:
        raise CortexBodyError(
            f"forward-backward body has keys {unknown}: Cortex takes args, kwargs, context and processing "
            "(the on-prem {batch, meta, processing} body is not Cortex's)"
        )
    args = body.get("args", ())
    if args not in ((), []):
        raise CortexBodyError("forward-backward args must be empty: send the model inputs in kwargs")
    kwargs = _dict(body.get("kwargs"), "kwargs")
    context = _dict(body.get("context"), "context")
    processing = _dict(body.get("processing"), "processing")
    _only(kwargs, KWARGS_KEYS, "kwargs")
    _only(context, CONTEXT_KEYS, "context")
    config = _processing(processing)

    ids = _tensor(kwargs, "input_ids", "kwargs")
    if ids.dim() != 2 or ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.shape[1] < 2:
        raise CortexBodyError(
            f"kwargs.input_ids has shape {tuple(ids.shape)} dtype {ids.dtype}: send [B, S] int"
        )
    ids = ids.to(torch.int64)
    rows, width = ids.shape
    if rows == 0:
        raise CortexBodyError("kwargs.input_ids has no rows")
    if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        raise CortexBodyError(f"kwargs.input_ids has ids outside the model vocabulary [0, {vocab_size})")
    attn = _tensor(kwargs, "attention_mask", "kwargs")
    _shape(attn, (rows, width), "kwargs.attention_mask")
    if not bool(((attn == 0) | (attn == 1)).all()):
        raise CortexBodyError("kwargs.attention_mask holds values other than 0/1")
    attn = attn.to(torch.int64)
    lengths = attn.sum(dim=1)
    aligned = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
    if not torch.equal(attn.bool(), aligned):
        raise CortexBodyError(
            "kwargs.attention_mask: packing requires left-aligned rows: every row's real tokens must be its leading "
            "columns, with padding at the tail"
        )
    if bool((lengths < 2).any()):
        raise CortexBodyError("every row needs at least 2 real tokens (a prompt token and a trained one)")
    if "position_ids" in kwargs:
        positions = _tensor(kwargs, "position_ids", "kwargs")
        _shape(positions, (rows, width), "kwargs.position_ids")
        canonical = torch.arange(width).expand(rows, -1)
        if bool(((positions.to(torch.int64) != canonical) & aligned).any()):
            raise CortexBodyError(
                "kwargs.position_ids must count each row's real tokens from 0 (0, 1, 2, ...)"
            )
    if kwargs.get("use_cache") not in (None, False):
        raise CortexBodyError("kwargs.use_cache must be false (or absent) in a training forward")
    if "input_ids" in context and not torch.equal(
        _tensor(context, "input_ids", "context").to(torch.int64), ids
    ):
        raise CortexBodyError("context.input_ids differs from kwargs.input_ids: send the same tensor")
    for key in ("advantages", "loss_mask"):
        if key not in context:
            raise CortexBodyError(
                f"context.{key} is missing: the grpo loss needs advantages and loss_mask [B, S]"
            )
    advantages = _float(context, "advantages", (rows, width))
    mask = _tensor(context, "loss_mask", "context")
    _shape(mask, (rows, width), "context.loss_mask")
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise CortexBodyError("context.loss_mask holds values other than 0/1 (or True/False)")
    mask = mask.bool()
    trainable = torch.arange(width).unsqueeze(0) < (lengths - 1).unsqueeze(1)
    outside = (mask & ~trainable).nonzero()
    if outside.numel():
        b, i = (int(x) for x in outside[0])
        raise CortexBodyError(
            f"context.loss_mask[{b}, {i}] is set but input_ids[{b}, {i + 1}] is not a real token: per-token context "
            "tensors are shifted (index i trains the prediction of token i+1), so a row's last real column and its "
            "padding never carry loss_mask"
        )
    if not bool(torch.isfinite(advantages[mask]).all()):
        raise CortexBodyError("context.advantages is not finite at a loss_mask position")
    old_shifted = None
    if "old_log_probs_shifted" in context:
        old_shifted = _float(context, "old_log_probs_shifted", (rows, width))
        if not bool(torch.isfinite(old_shifted[mask]).all()):
            raise CortexBodyError("context.old_log_probs_shifted is not finite at a loss_mask position")

    # split each row at its first trained prediction
    first = torch.where(mask.any(dim=1), mask.float().argmax(dim=1), lengths - 2)
    prompt_lens = first + 1
    response_lens = lengths - prompt_lens
    p_width, r_width = int(prompt_lens.max()), int(response_lens.max())
    total = p_width + r_width
    new_ids = torch.full((rows, total), int(pad_token_id), dtype=torch.int64)
    new_attn = torch.zeros((rows, total), dtype=torch.int64)
    response_mask = torch.zeros((rows, total), dtype=torch.int64)
    new_adv = torch.zeros((rows, total), dtype=torch.float32)
    old = torch.zeros((rows, total), dtype=torch.float32)
    for b in range(rows):
        p, n = int(prompt_lens[b]), int(lengths[b])
        r = n - p
        new_ids[b, p_width - p : p_width] = ids[b, :p]
        new_ids[b, p_width : p_width + r] = ids[b, p:n]
        new_attn[b, p_width - p : p_width + r] = 1
        # the prediction of token p + j sits at shifted index p - 1 + j
        response_mask[b, p_width : p_width + r] = mask[b, p - 1 : n - 1].to(torch.int64)
        new_adv[b, p_width : p_width + r] = advantages[b, p - 1 : n - 1]
        if old_shifted is not None:
            old[b, p_width : p_width + r] = old_shifted[b, p - 1 : n - 1]
    new_adv = new_adv * response_mask
    positions = ((new_attn.cumsum(dim=1) - 1).clamp(min=0) * new_attn).to(torch.int64)
    trained_tokens = int(mask.sum())
    if trained_tokens == 0:
        raise CortexBodyError("context.loss_mask trains no token: send at least one 1")

    entropy_coeff = float(config.get("entropy_coeff") or 0.0)
    eps = float(config.get("eps_clip", 0.2))
    high = config.get("eps_clip_higher")
    c_clip = config.get("c_clip")
    actor = {
        "clip_ratio": eps,
        "clip_ratio_low": eps,
        "clip_ratio_high": eps if high is None else float(high),
        "clip_ratio_c": NO_DUAL_CLIP if c_clip is None else float(c_clip),
        "loss_agg_mode": str(config.get("loss_agg_mode", "token-mean")),
        "entropy_coeff": entropy_coeff,
    }
    meta = {
        "pad_token_id": int(pad_token_id),
        "batch_num_tokens": int(config.get("batch_num_tokens") or trained_tokens),
        "global_batch_size": int(config.get("global_batch_size") or rows),
        "calculate_entropy": entropy_coeff != 0.0,
        "actor_config": actor,
    }
    payload = {
        "batch": {
            "input_ids": new_ids,
            "attention_mask": new_attn,
            "position_ids": positions,
            "prompts": torch.zeros((rows, p_width, 0), dtype=torch.int64),
            "response_mask": response_mask,
            "advantages": new_adv,
            "old_log_probs": old,
        },
        "meta": meta,
        "processing": {"loss_fn": "verl_grpo", "post": ["compute_entropy_and_logprobs"], "config": {}},
    }
    return LoweredBody(payload, needs_old_logprobs=old_shifted is None, rows=rows, prompt_width=p_width)


def forward_payload(lowered: LoweredBody) -> dict[str, Any]:
    """The no-grad forward that yields pi_old for `lowered` (same tensors, no loss)."""
    batch = {
        k: v
        for k, v in lowered.payload["batch"].items()
        if k in ("input_ids", "attention_mask", "position_ids", "prompts")
    }
    meta = {"pad_token_id": lowered.payload["meta"]["pad_token_id"]}
    return {
        "batch": batch,
        "meta": meta,
        "processing": {"loss_fn": None, "post": ["compute_entropy_and_logprobs"], "config": {}},
    }


def with_old_logprobs(lowered: LoweredBody, shifted_logprobs_B_S: torch.Tensor) -> dict[str, Any]:
    """`lowered`'s payload with pi_old = the forward's log-probs (returned shifted: index i is the
    log-prob of token i+1), moved to each response token's own index."""
    import torch

    batch = dict(lowered.payload["batch"])
    own = torch.zeros_like(batch["old_log_probs"])
    own[:, 1:] = shifted_logprobs_B_S[:, :-1].to(own.dtype)
    window = batch["attention_mask"].bool().clone()
    window[:, : lowered.prompt_width] = False
    batch["old_log_probs"] = torch.where(window, own, torch.zeros_like(own))
    return {**lowered.payload, "batch": batch}


# -- checks -----------------------------------------------------------------------------------------


def _processing(processing: Mapping[str, Any]) -> Mapping[str, Any]:
    _only(processing, frozenset({"loss_fn", "post", "config"}), "processing")
    loss_fn = processing.get("loss_fn")
    if loss_fn != CORTEX_LOSS_FN:
        raise CortexBodyError(
            f"processing.loss_fn={loss_fn!r}: the Cortex emulator trains the server's registered {CORTEX_LOSS_FN!r} "
            "loss only (Cortex cannot import a client's loss by dotted path)"
        )
    post = processing.get("post") or []
    if isinstance(post, str) or not isinstance(post, list | tuple) or any(p != LOGPROBS_POST for p in post):
        raise CortexBodyError(
            f"processing.post={post!r}: the emulator runs only the {LOGPROBS_POST!r} post-processor (send "
            f"[{LOGPROBS_POST!r}] or nothing)"
        )
    config = _dict(processing.get("config"), "processing.config")
    unknown = sorted(set(config) - CONFIG_KEYS)
    if unknown:
        raise CortexBodyError(
            f"processing.config has keys {unknown} the Cortex emulator does not compute (it computes "
            f"{sorted(CONFIG_KEYS)}); dp_size is the server's own and must not be sent"
        )
    mode = config.get("loss_agg_mode", "token-mean")
    if mode not in AGG_MODES:
        raise CortexBodyError(f"processing.config.loss_agg_mode={mode!r}: use one of {sorted(AGG_MODES)}")
    for key in ("eps_clip", "eps_clip_higher", "c_clip", "entropy_coeff"):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise CortexBodyError(f"processing.config.{key}={value!r}: must be a number")
    for key in ("global_batch_size", "batch_num_tokens"):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise CortexBodyError(f"processing.config.{key}={value!r}: must be a whole number >= 1")
    return config


def _dict(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CortexBodyError(f"{where} is a {type(value).__name__}: send a dict")
    return value


def _only(mapping: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise CortexBodyError(
            f"{where} has keys {unknown} the Cortex emulator does not read (it reads {sorted(allowed)})"
        )


def _tensor(mapping: Mapping[str, Any], key: str, where: str) -> torch.Tensor:
    import torch

    value = mapping.get(key)
    if not torch.is_tensor(value):
        raise CortexBodyError(
            f"{where}.{key} is {'missing' if value is None else type(value).__name__}: send a tensor"
        )
    return value


def _shape(value: torch.Tensor, shape: tuple[int, int], where: str) -> None:
    if tuple(value.shape) != shape:
        raise CortexBodyError(f"{where} has shape {tuple(value.shape)}: must be [B, S] = {shape}")


def _float(mapping: Mapping[str, Any], key: str, shape: tuple[int, int]) -> torch.Tensor:
    import torch

    value = _tensor(mapping, key, "context")
    _shape(value, shape, f"context.{key}")
    if not value.dtype.is_floating_point:
        raise CortexBodyError(f"context.{key} has dtype {value.dtype}: send a floating-point tensor")
    return value.to(torch.float32)
