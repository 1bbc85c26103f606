"""Payload rules of the Arctic server's `/forward` and `/forward-backward`, checked up front with
errors that name the field, the value and the fix; and the server's row split (data-parallel ranks
first, then gradient-accumulation micro-batches).

Where the server would silently compute something wrong, this is stricter than the server, on
purpose (an adapter bug should fail on a laptop): per-token tensors must sit at the response
token's own position, `position_ids` must be the canonical per-row positions, `loss_mask` must
equal `response_mask` (the server's loss ignores it), and knobs that need each other are checked
together. Each such rule says so in its message.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from arctic_rl_losses.names import SERVER_LOSS_FN

from arctic_rl_testbed.reference.loss import GlobalBatchInfo, GRPOLossConfig
from arctic_rl_testbed.reference.loss_resolver import resolve_loss_fn

if TYPE_CHECKING:
    import torch
    from arctic_rl_core.backends.protocol import WirePayload

POST_APPLY_TEMPERATURE = "apply_temperature"
LOGPROB_POSTS = frozenset({"compute_entropy_and_logprobs", "ap_compute_logprobs"})
KNOWN_POSTS = LOGPROB_POSTS | {POST_APPLY_TEMPERATURE, "compute_entropy", "identity"}
TRAIN_LOSS_FNS: tuple[str, ...] = ("verl_grpo", "sft", "sft_ce")
SFT_LOSS_FNS = frozenset({"sft", "sft_ce"})
# A dotted-path `processing.loss_fn` is imported and called as the 0.1.4 worker does
# (`loss_resolver`); these read the same per-token inputs as verl_grpo and are checked like it.
POLICY_LOSS_FNS = frozenset({"verl_grpo", SERVER_LOSS_FN})
PER_TOKEN_KEYS: tuple[str, ...] = (
    "response_mask",
    "loss_mask",
    "advantages",
    "old_log_probs",
    "ref_log_prob",
    "rollout_is_weights",
    "rollout_log_probs",
    "labels",
)
# Batch-dim tensors the server moves from meta into batch before splitting (its BATCH_DIM_CONTEXT_KEYS
# that the reference reads).
PROMOTED_META_KEYS: tuple[str, ...] = (
    "response_mask",
    "loss_mask",
    "advantages",
    "old_log_probs",
    "ref_log_prob",
    "rollout_is_weights",
    "labels",
)
SFT_CONFIG_KEYS = frozenset({"logits_optimization", "logits_optimization_peak_mem_size_in_gib"})
IGNORE_INDEX = -100


class PayloadError(ValueError):
    """A payload breaks a rule of the server's contract."""


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch of one simulated rank: `[b, S]` tensors, rows `rows` of the payload."""

    tensors: dict[str, torch.Tensor]
    first_row: int
    prompt_width: int

    @property
    def num_rows(self) -> int:
        return int(self.tensors["input_ids"].shape[0])


@dataclass(frozen=True)
class ParsedPayload:
    op: Literal["forward", "train"]
    loss_fn: str | None
    posts: tuple[str, ...]
    meta: dict[str, Any]  # as sent, plus the injected dp_size
    shards: tuple[tuple[MicroBatch, ...], ...]  # [rank][micro-batch]
    num_rows: int
    pad_token_id: int
    temperature: float | None  # set when apply_temperature runs (or ZoRRo applies meta.temperature)
    zorro: bool  # meta.zorro_train_enable: token-aligned outputs
    calculate_entropy: bool  # after the server's gating on entropy_coeff
    logits_in_fp32: bool
    return_fwd_batch: bool
    loss_config: GRPOLossConfig | None = None  # verl_grpo
    loss_callable: Any = None  # a dotted-path loss, imported as the server's worker imports it
    loss_config_section: dict[str, Any] | None = None  # processing.config, handed to a dotted-path loss
    global_info: GlobalBatchInfo | None = None  # verl_grpo
    global_num_tokens: int | None = None  # sft_ce

    def micro_batches_in_row_order(self) -> list[MicroBatch]:
        return sorted((mb for shard in self.shards for mb in shard), key=lambda mb: mb.first_row)

    def to(self, device: torch.device) -> ParsedPayload:
        """The same payload with every micro-batch tensor on `device`."""

        shards = tuple(
            tuple(
                MicroBatch({k: v.to(device) for k, v in mb.tensors.items()}, mb.first_row, mb.prompt_width)
                for mb in shard
            )
            for shard in self.shards
        )
        return dataclasses.replace(self, shards=shards)


def parse_payload(
    payload: WirePayload | Mapping[str, Any],
    *,
    op: Literal["forward", "train"],
    dp_size: int,
    grad_accum_steps: int,
    vocab_size: int,
    honour_clip_ratios: bool = True,
) -> ParsedPayload:
    """Validate `payload` for `op` and split it into `[rank][micro-batch]` shards."""
    batch, meta, processing = _sections(payload)
    loss_fn, posts = _processing(processing, op)
    meta = dict(meta)
    batch = _promote_meta_tensors(batch, meta)
    if "dp_size" in meta and _plain_int(meta["dp_size"]) != dp_size:
        raise PayloadError(
            f"meta.dp_size={meta['dp_size']!r} but the engine has {dp_size} data-parallel ranks: the server "
            "injects dp_size itself; do not send it"
        )
    meta["dp_size"] = dp_size
    pad_token_id = _meta_int(meta, "pad_token_id", required=True, minimum=0)
    zorro = _meta_bool(meta, "zorro_train_enable") and loss_fn not in SFT_LOSS_FNS
    temperature = None
    if loss_fn not in SFT_LOSS_FNS and (POST_APPLY_TEMPERATURE in posts or zorro):
        temperature = _meta_number(
            meta, "temperature", required=POST_APPLY_TEMPERATURE in posts, positive=True
        )
    calculate_entropy = _meta_bool(meta, "calculate_entropy")
    logits_opt = meta.get("logits_optimization", "none")
    if logits_opt not in ("none", "compute", "memory"):
        raise PayloadError(f"meta.logits_optimization={logits_opt!r}: use 'none', 'compute' or 'memory'")
    if logits_opt == "memory" and not zorro:
        raise PayloadError(
            "meta.logits_optimization='memory' requires meta.zorro_train_enable=True (server rule)"
        )
    if zorro:
        _meta_int(meta, "max_prompt_len", required=True, minimum=1)
    drop_position_ids = _meta_bool(meta, "drop_position_ids")

    micro_list = batch if isinstance(batch, list) else None
    if micro_list is not None:
        if not micro_list:
            raise PayloadError("batch is an empty list: send a dict of tensors or one dict per micro-batch")
        if len(micro_list) != grad_accum_steps:
            raise PayloadError(
                f"batch is a list of {len(micro_list)} micro-batches but the engine runs {grad_accum_steps} "
                "gradient-accumulation steps: send exactly one micro-batch per step (or one dict)"
            )
        if op == "forward":
            widths = {tuple(mb["input_ids"].shape[1:]) for mb in micro_list if isinstance(mb, Mapping)}
            if len(widths) > 1:
                raise PayloadError(
                    "forward with a list of micro-batches needs one sequence length for all of them: pad them "
                    "to the same width or send one dict"
                )
        checked = [
            _check_rows(mb, f"batch[{i}]", meta, loss_fn, vocab_size, drop_position_ids)
            for i, mb in enumerate(micro_list)
        ]
        for i, mb in enumerate(checked):
            rows = int(mb["input_ids"].shape[0])
            if rows % dp_size:
                raise PayloadError(
                    f"batch[{i}] has {rows} rows, not divisible by the {dp_size} data-parallel ranks: send a "
                    "multiple of dp_size rows per micro-batch"
                )
        shards = _split_micro_list(checked, dp_size)
    else:
        checked_dict = _check_rows(batch, "batch", meta, loss_fn, vocab_size, drop_position_ids)
        rows = int(checked_dict["input_ids"].shape[0])
        if rows % (dp_size * grad_accum_steps):
            raise PayloadError(
                f"batch has {rows} rows, not divisible by dp_size x grad_accum_steps = {dp_size} x "
                f"{grad_accum_steps}: send a multiple of {dp_size * grad_accum_steps} rows"
            )
        shards = _split_dict(checked_dict, dp_size, grad_accum_steps)
    num_rows = sum(mb.num_rows for shard in shards for mb in shard)

    parsed: dict[str, Any] = dict(
        op=op,
        loss_fn=loss_fn,
        posts=posts,
        meta=meta,
        shards=shards,
        num_rows=num_rows,
        pad_token_id=pad_token_id,
        temperature=temperature,
        zorro=zorro,
        calculate_entropy=calculate_entropy,
        logits_in_fp32=_meta_bool(meta, "logits_compute_in_fp32"),
        return_fwd_batch=_meta_bool(meta, "return_fwd_batch"),
        loss_config_section=dict(processing.get("config") or {}),
    )
    if loss_fn == "verl_grpo":
        parsed.update(_grpo_settings(meta, dp_size, calculate_entropy, honour_clip_ratios, shards))
    elif is_dotted_path(loss_fn):
        parsed.update(_dotted_loss_settings(loss_fn, meta, calculate_entropy))
    elif loss_fn == "sft_ce":
        total = sum(_count_sft_targets(mb.tensors["labels"]) for shard in shards for mb in shard)
        parsed["global_num_tokens"] = total
    if loss_fn in SFT_LOSS_FNS and POST_APPLY_TEMPERATURE in posts:
        temp = meta.get("temperature", 1.0)
        if _plain_number(temp) != 1.0:
            raise PayloadError(
                f"processing.post has apply_temperature with meta.temperature={temp!r}, but the server's SFT "
                f"pipeline ({loss_fn!r}) runs no post-processors: drop apply_temperature or use temperature 1"
            )
    return ParsedPayload(**parsed)


# -- sections and processing -------------------------------------------------------------------


def _sections(payload: Any) -> tuple[Any, Mapping[str, Any], Mapping[str, Any]]:
    if isinstance(payload, Mapping):
        missing = [key for key in ("batch", "meta", "processing") if key not in payload]
        if missing:
            raise PayloadError(
                f"payload is missing {missing}: the server requires 'batch', 'meta' and 'processing' in every "
                "forward / forward-backward body"
            )
        batch, meta, processing = payload["batch"], payload["meta"], payload["processing"]
    else:
        batch, meta, processing = payload.batch, payload.meta, payload.processing
    if not isinstance(meta, Mapping):
        raise PayloadError(f"payload.meta is a {type(meta).__name__}: send a dict")
    if not isinstance(processing, Mapping):
        raise PayloadError(f"payload.processing is a {type(processing).__name__}: send a dict")
    if not isinstance(batch, Mapping | list):
        raise PayloadError(
            f"payload.batch is a {type(batch).__name__}: send a dict of tensors or a list of them"
        )
    return batch, meta, processing


def _processing(processing: Mapping[str, Any], op: str) -> tuple[str | None, tuple[str, ...]]:
    unknown = sorted(set(processing) - {"post", "loss_fn", "config"})
    if unknown:
        raise PayloadError(
            f"processing has unknown keys {unknown}: the server reads only post, loss_fn and config"
        )
    if "loss_fn" not in processing:
        if op == "forward":
            raise PayloadError(
                "processing.loss_fn is missing: a forward call must send loss_fn: None explicitly (the server's "
                "default is the training loss 'ap_grpo')"
            )
        raise PayloadError(
            "processing.loss_fn is missing: the server would default to 'ap_grpo', which the reference backend "
            f"does not implement; send one of {', '.join(TRAIN_LOSS_FNS)}"
        )
    loss_fn = processing["loss_fn"]
    if op == "forward" and loss_fn is not None and not is_dotted_path(loss_fn):
        raise PayloadError(
            f"processing.loss_fn={loss_fn!r} in a forward call: forward without grad must send loss_fn: None "
            "(or a dotted-path loss, which the server runs without grad, e.g. the import probe)"
        )
    if op == "train" and loss_fn not in TRAIN_LOSS_FNS and not is_dotted_path(loss_fn):
        raise PayloadError(
            f"processing.loss_fn={loss_fn!r}: the reference backend implements {', '.join(TRAIN_LOSS_FNS)} "
            "or a dotted path module.function the server imports (forward-backward needs a loss)"
        )
    posts_value = processing.get("post", [])
    if posts_value is None:
        posts_value = []
    if isinstance(posts_value, str) or not isinstance(posts_value, Sequence):
        raise PayloadError(f"processing.post={posts_value!r}: send a list of post-processor names")
    posts = tuple(posts_value)
    for name in posts:
        if name not in KNOWN_POSTS:
            raise PayloadError(
                f"processing.post contains {name!r}: the reference backend implements {', '.join(sorted(KNOWN_POSTS))}"
            )
    if loss_fn not in SFT_LOSS_FNS and not LOGPROB_POSTS.intersection(posts):
        what = "returns no log-probs" if op == "forward" else f"gives {loss_fn!r} no log-probs"
        raise PayloadError(
            f"processing.post={list(posts)} {what}: add 'compute_entropy_and_logprobs' (the server computes "
            "log-probs only in that post-processor)"
        )
    config = processing.get("config") or {}
    if not isinstance(config, Mapping):
        raise PayloadError(f"processing.config={config!r}: send a dict")
    allowed = SFT_CONFIG_KEYS if loss_fn in SFT_LOSS_FNS else frozenset()
    extra = sorted(set(config) - allowed)
    if extra and not is_dotted_path(loss_fn):
        raise PayloadError(
            f"processing.config has keys {extra} that the {loss_fn or 'forward'} path does not read: send {{}}"
            + (f" or only {sorted(allowed)}" if allowed else "")
        )
    opt = config.get("logits_optimization", "none")
    if opt not in ("none", "compute", "memory"):
        raise PayloadError(
            f"processing.config.logits_optimization={opt!r}: use 'none', 'compute' or 'memory'"
        )
    return loss_fn, posts


def _promote_meta_tensors(batch: Any, meta: dict[str, Any]) -> Any:
    """Move batch-dim tensors sent in meta into a dict batch, as the server does (batch wins)."""
    import torch

    if not isinstance(batch, Mapping):
        return batch
    batch = dict(batch)
    for key in PROMOTED_META_KEYS:
        if key in meta and torch.is_tensor(meta[key]):
            batch.setdefault(key, meta[key])
            del meta[key]
    return batch


# -- rows ---------------------------------------------------------------------------------------


def _check_rows(
    batch: Any,
    where: str,
    meta: Mapping[str, Any],
    loss_fn: str | None,
    vocab_size: int,
    drop_position_ids: bool,
) -> dict[str, torch.Tensor]:
    import torch

    if not isinstance(batch, Mapping):
        raise PayloadError(f"{where} is a {type(batch).__name__}: send a dict of tensors")
    tensors = dict(batch)
    for key, value in tensors.items():
        if not torch.is_tensor(value):
            raise PayloadError(
                f"{where}.{key} is a {type(value).__name__}: send torch tensors (numpy is not wire-safe)"
            )
    for key in ("input_ids", "attention_mask", "prompts"):
        if key not in tensors:
            raise PayloadError(
                f"{where}.{key} is missing: the server needs input_ids, attention_mask and prompts"
            )
    input_ids = tensors["input_ids"]
    if input_ids.dim() != 2 or input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise PayloadError(
            f"{where}.input_ids has shape {tuple(input_ids.shape)} dtype {input_ids.dtype}: send [B, S] int64"
        )
    rows, seq_len = input_ids.shape
    if rows == 0 or seq_len < 2:
        raise PayloadError(
            f"{where}.input_ids has shape {tuple(input_ids.shape)}: need at least 1 row and 2 positions"
        )
    for key, value in tensors.items():
        if value.dim() == 0 or value.shape[0] != rows:
            raise PayloadError(
                f"{where}.{key} has shape {tuple(value.shape)}: every batch tensor's first dimension is the "
                f"{rows} rows (the server splits all of them across ranks)"
            )
    if int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab_size:
        raise PayloadError(
            f"{where}.input_ids has ids in [{int(input_ids.min())}, {int(input_ids.max())}] outside the model "
            f"vocabulary [0, {vocab_size}): tokenize with the backend's tokenizer"
        )
    attention = tensors["attention_mask"]
    if tuple(attention.shape) != (rows, seq_len):
        raise PayloadError(
            f"{where}.attention_mask has shape {tuple(attention.shape)}: must be [B, S] = {(rows, seq_len)}"
        )
    if not bool(((attention == 0) | (attention == 1)).all()):
        raise PayloadError(f"{where}.attention_mask holds values other than 0/1")
    prompts = tensors["prompts"]
    # the server reads only prompts.shape[1]; a [B, P, 0] tensor (no bytes) carries it as well as
    # [B, P], and passes the server's unpad / ZoRRo / split code (it never matches [B, S])
    if not (prompts.dim() == 2 or (prompts.dim() == 3 and prompts.shape[2] == 0)) or not (
        1 <= prompts.shape[1] < seq_len
    ):
        raise PayloadError(
            f"{where}.prompts has shape {tuple(prompts.shape)}: must be [B, P] (or the empty [B, P, 0]) with "
            f"1 <= P < S={seq_len} (only its width P is read: prompts are left-padded to P)"
        )
    width = int(prompts.shape[1])
    _check_lengths(meta, where, width, seq_len)
    attn = attention.to(torch.int64)
    prompt_part, response_part = attn[:, :width], attn[:, width:]
    if not bool((prompt_part[:, 1:] >= prompt_part[:, :-1]).all()):
        raise PayloadError(
            f"{where}.attention_mask: prompts must be LEFT-padded to P={width} (zeros, then ones)"
        )
    if response_part.shape[1] > 1 and not bool((response_part[:, 1:] <= response_part[:, :-1]).all()):
        raise PayloadError(
            f"{where}.attention_mask: responses must be RIGHT-padded after P={width} (ones, then zeros)"
        )
    empty = (prompt_part[:, -1] == 0).nonzero()
    if empty.numel():
        raise PayloadError(
            f"{where} row {int(empty[0])} has an empty prompt: every row needs at least one prompt token before P={width}"
        )
    canonical = (attn.cumsum(dim=-1) - 1).clamp(min=0) * attn
    if "position_ids" in tensors:
        positions = tensors["position_ids"]
        if tuple(positions.shape) != (rows, seq_len):
            raise PayloadError(f"{where}.position_ids has shape {tuple(positions.shape)}: must be [B, S]")
        wrong = ((positions.to(torch.int64) != canonical) & (attn == 1)).nonzero()
        if wrong.numel():
            b, i = (int(x) for x in wrong[0])
            raise PayloadError(
                f"{where}.position_ids[{b}, {i}]={int(positions[b, i])} but the token is the {int(canonical[b, i])}-th "
                "real token of its row: position ids count real tokens from 0 (cumsum of attention_mask - 1); the "
                "reference is stricter than the server here"
            )
    elif drop_position_ids:
        tensors["position_ids"] = canonical
    else:
        raise PayloadError(
            f"{where}.position_ids is missing and meta.drop_position_ids is not true: send position_ids, or set "
            "drop_position_ids=True so the server rebuilds them from attention_mask"
        )
    window = attn.bool().clone()
    window[:, :width] = False
    for key in PER_TOKEN_KEYS:
        if key in tensors and tuple(tensors[key].shape) != (rows, seq_len):
            raise PayloadError(
                f"{where}.{key} has shape {tuple(tensors[key].shape)}: per-token tensors are [B, S] = {(rows, seq_len)} "
                "with response token j of a row at index P+j"
            )
    if loss_fn in POLICY_LOSS_FNS:
        _check_grpo_rows(tensors, where, meta)
    elif loss_fn in SFT_LOSS_FNS:
        _check_sft_rows(tensors, where, attn, vocab_size, loss_fn)
    for key in ("response_mask", "loss_mask"):
        if key in tensors:
            _check_inside_window(tensors[key] != 0, window, where, key, width)
    if (
        "loss_mask" in tensors
        and "response_mask" in tensors
        and not bool(((tensors["loss_mask"] != 0) == (tensors["response_mask"] != 0)).all())
    ):
        raise PayloadError(
            f"{where}.loss_mask differs from response_mask: the server's loss masks with response_mask only, so "
            "a different loss_mask would be ignored; send loss_mask = response_mask (or leave it out)"
        )
    return tensors


def _check_lengths(meta: Mapping[str, Any], where: str, width: int, seq_len: int) -> None:
    prompt_len = meta.get("max_prompt_len")
    if prompt_len is not None and _plain_int(prompt_len) != width:
        raise PayloadError(
            f"meta.max_prompt_len={prompt_len!r} but {where}.prompts is {width} wide: prompts are left-padded "
            "to max_prompt_len"
        )
    response_len = meta.get("max_response_len")
    if response_len is not None and _plain_int(response_len) != seq_len - width:
        raise PayloadError(
            f"meta.max_response_len={response_len!r} but {where} has {seq_len - width} response positions "
            f"(S={seq_len} - P={width})"
        )


def _check_inside_window(
    mask_B_S: torch.Tensor, window_B_S: torch.Tensor, where: str, key: str, width: int
) -> None:
    outside = (mask_B_S & ~window_B_S).nonzero()
    if outside.numel():
        b, i = (int(x) for x in outside[0])
        part = "a prompt position" if i < width else "a padded position"
        raise PayloadError(
            f"{where}.{key}[{b}, {i}] is set at {part}: per-token tensors hold response token j of a row at index "
            f"P+j (the token's own position; P={width}), as the server's verl_grpo loss reads them. (Returned "
            "log-probs are shifted by one; the payload's per-token tensors are not.)"
        )


def _check_grpo_rows(tensors: dict[str, torch.Tensor], where: str, meta: Mapping[str, Any]) -> None:
    import torch

    for key in ("response_mask", "old_log_probs", "advantages"):
        if key not in tensors:
            raise PayloadError(
                f"{where}.{key} is missing: the verl_grpo loss needs response_mask, old_log_probs and advantages"
            )
    mask = tensors["response_mask"] != 0
    for key in ("old_log_probs", "advantages", "ref_log_prob", "rollout_is_weights"):
        if key in tensors:
            value = tensors[key]
            if not value.dtype.is_floating_point:
                raise PayloadError(f"{where}.{key} has dtype {value.dtype}: send a floating-point tensor")
            bad = (~torch.isfinite(value) & mask).nonzero()
            if bad.numel():
                b, i = (int(x) for x in bad[0])
                raise PayloadError(
                    f"{where}.{key}[{b}, {i}]={float(value[b, i])} is not finite at a response token"
                )
    actor = meta.get("actor_config") or {}
    if isinstance(actor, Mapping) and bool(actor.get("use_kl_loss", False)) and "ref_log_prob" not in tensors:
        raise PayloadError(
            f"{where}.ref_log_prob is missing but meta.actor_config.use_kl_loss=True: send reference log-probs "
            "(forward with reference_model=True) or set use_kl_loss=False"
        )


def _check_sft_rows(
    tensors: dict[str, torch.Tensor], where: str, attn: torch.Tensor, vocab_size: int, loss_fn: str
) -> None:
    labels = tensors.get("labels")
    if labels is None:
        raise PayloadError(
            f"{where}.labels is missing: the {loss_fn!r} loss needs labels [B, S] (the target token ids at their own "
            f"positions, {IGNORE_INDEX} where no loss is taken, e.g. prompt and padding)"
        )
    if labels.dtype.is_floating_point:
        raise PayloadError(f"{where}.labels has dtype {labels.dtype}: send int64 token ids")
    counted = labels != IGNORE_INDEX
    if bool((counted & (attn == 0)).any()):
        raise PayloadError(f"{where}.labels has targets at padded positions: set them to {IGNORE_INDEX}")
    values = labels[counted]
    if values.numel() and (int(values.min()) < 0 or int(values.max()) >= vocab_size):
        raise PayloadError(
            f"{where}.labels has ids outside [0, {vocab_size}) (use {IGNORE_INDEX} to ignore a position)"
        )


def _count_sft_targets(labels_B_S: torch.Tensor) -> int:
    return int((labels_B_S[:, 1:] != IGNORE_INDEX).sum())


# -- split ----------------------------------------------------------------------------------------


def _split_dict(
    tensors: dict[str, torch.Tensor], dp_size: int, gas: int
) -> tuple[tuple[MicroBatch, ...], ...]:
    rows = int(tensors["input_ids"].shape[0])
    per_rank, per_micro = rows // dp_size, rows // (dp_size * gas)
    width = int(tensors["prompts"].shape[1])
    shards = []
    for rank in range(dp_size):
        micro = []
        for step in range(gas):
            start = rank * per_rank + step * per_micro
            part = {key: value[start : start + per_micro] for key, value in tensors.items()}
            micro.append(MicroBatch(part, start, width))
        shards.append(tuple(micro))
    return tuple(shards)


def _split_micro_list(
    micro_list: list[dict[str, torch.Tensor]], dp_size: int
) -> tuple[tuple[MicroBatch, ...], ...]:
    shards: list[list[MicroBatch]] = [[] for _ in range(dp_size)]
    offset = 0
    for tensors in micro_list:
        rows = int(tensors["input_ids"].shape[0])
        per_rank = rows // dp_size
        width = int(tensors["prompts"].shape[1])
        for rank in range(dp_size):
            start = rank * per_rank
            part = {key: value[start : start + per_rank] for key, value in tensors.items()}
            shards[rank].append(MicroBatch(part, offset + start, width))
        offset += rows
    return tuple(tuple(shard) for shard in shards)


# -- verl_grpo meta -------------------------------------------------------------------------------


def _grpo_settings(
    meta: dict[str, Any],
    dp_size: int,
    calculate_entropy: bool,
    honour_clip_ratios: bool,
    shards: tuple[tuple[MicroBatch, ...], ...],
) -> dict[str, Any]:
    for key in ("batch_num_tokens", "global_batch_size"):
        if key not in meta:
            raise PayloadError(
                f"meta.{key} is missing: the server's verl_grpo loss reads it (the total over the whole mini-batch "
                "across ranks and micro-batches)"
            )
    actor = meta.get("actor_config")
    policy = meta.get("policy_loss_config")
    for name, value in (("actor_config", actor), ("policy_loss_config", policy)):
        if value is not None and not isinstance(value, Mapping):
            raise PayloadError(f"meta.{name} is a {type(value).__name__}: send a dict")
    try:
        config = GRPOLossConfig.from_meta(actor, policy, honour_clip_ratios=honour_clip_ratios)
    except ValueError as err:
        raise PayloadError(str(err)) from None
    batch_num_tokens = _meta_number(meta, "batch_num_tokens", required=False, positive=True)
    global_batch_size = _meta_number(meta, "global_batch_size", required=False, positive=True)
    if dp_size > 1 and (batch_num_tokens is None or global_batch_size is None):
        raise PayloadError(
            f"meta.batch_num_tokens / meta.global_batch_size are None with {dp_size} data-parallel ranks: send the "
            "global counts (response tokens and rows of the whole mini-batch)"
        )
    if config.entropy_coeff != 0 and not calculate_entropy:
        raise PayloadError(
            f"meta.actor_config.entropy_coeff={config.entropy_coeff} but meta.calculate_entropy is false: the server "
            "adds the entropy bonus only when entropy is computed, so it would be silently dropped; set "
            "calculate_entropy=True"
        )
    gated_entropy = calculate_entropy
    if (
        calculate_entropy
        and isinstance(actor, Mapping)
        and "entropy_coeff" in actor
        and config.entropy_coeff == 0
    ):
        gated_entropy = False  # the server skips the entropy computation when it cannot affect the loss
    scale = config.loss_scale_factor
    if scale is None and config.loss_agg_mode == "seq-mean-token-sum-norm":
        widths = {int(mb.tensors["input_ids"].shape[1]) - mb.prompt_width for shard in shards for mb in shard}
        scale = float(max(widths))  # the response horizon R (verl's loss_mask.shape[-1])
    info = GlobalBatchInfo(
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=scale,
    )
    return {"loss_config": config, "global_info": info, "calculate_entropy": gated_entropy}


# -- dotted-path losses ---------------------------------------------------------------------------


def is_dotted_path(loss_fn: Any) -> bool:
    """A `processing.loss_fn` the server imports rather than looks up (`module.function`)."""
    return isinstance(loss_fn, str) and "." in loss_fn and loss_fn not in TRAIN_LOSS_FNS


def _dotted_loss_settings(loss_fn: str, meta: dict[str, Any], calculate_entropy: bool) -> dict[str, Any]:
    try:
        fn = resolve_loss_fn(loss_fn)
    except (ImportError, AttributeError, ValueError) as err:
        raise PayloadError(str(err)) from None
    actor = meta.get("actor_config")
    if loss_fn == SERVER_LOSS_FN:
        from arctic_rl_losses.settings import LossSettings

        for key in ("batch_num_tokens", "global_batch_size"):
            if key not in meta:
                raise PayloadError(
                    f"meta.{key} is missing: the arctic_rl_core loss normalises by it (the total over the whole "
                    "mini-batch across ranks and micro-batches)"
                )
        try:
            settings = LossSettings.from_meta(actor, meta.get("policy_loss_config"))
        except ValueError as err:
            raise PayloadError(str(err)) from None
        if settings.entropy_coeff != 0 and not calculate_entropy:
            raise PayloadError(
                f"meta.actor_config.entropy_coeff={settings.entropy_coeff} but meta.calculate_entropy is false: the "
                "server computes entropy only when asked, so the bonus would be silently dropped; set "
                "calculate_entropy=True"
            )
    gated = calculate_entropy
    if calculate_entropy and isinstance(actor, Mapping) and "entropy_coeff" in actor:
        try:
            gated = float(actor["entropy_coeff"]) != 0.0  # the server skips entropy it cannot use
        except (TypeError, ValueError):
            gated = bool(actor["entropy_coeff"])
    return {"loss_callable": fn, "calculate_entropy": gated}


# -- scalar helpers -------------------------------------------------------------------------------


def _plain_number(value: Any) -> float:
    import torch

    if torch.is_tensor(value):
        if value.numel() != 1:
            raise PayloadError(f"expected a scalar, got a tensor of shape {tuple(value.shape)}")
        return float(value.item())
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PayloadError(f"expected a number, got {value!r}")
    return float(value)


def _plain_int(value: Any) -> int:
    number = _plain_number(value)
    if number != int(number):
        raise PayloadError(f"expected an integer, got {value!r}")
    return int(number)


def _meta_number(
    meta: Mapping[str, Any], key: str, *, required: bool, positive: bool = False
) -> float | None:
    if key not in meta or meta[key] is None:
        if required:
            raise PayloadError(f"meta.{key} is missing")
        return None
    try:
        value = _plain_number(meta[key])
    except PayloadError as err:
        raise PayloadError(f"meta.{key}={meta[key]!r}: {err}") from None
    if not math.isfinite(value) or (positive and value <= 0):
        raise PayloadError(f"meta.{key}={value}: must be a finite number" + (" > 0" if positive else ""))
    return value


def _meta_int(meta: Mapping[str, Any], key: str, *, required: bool, minimum: int) -> int:
    value = _meta_number(meta, key, required=required)
    if value is None or value != int(value) or value < minimum:
        raise PayloadError(f"meta.{key}={meta.get(key)!r}: must be an integer >= {minimum}")
    return int(value)


def _meta_bool(meta: Mapping[str, Any], key: str) -> bool:
    import torch

    value = meta.get(key, False)
    if value is None:
        return False
    if torch.is_tensor(value) and value.numel() == 1:
        value = bool(value.item())
    if not isinstance(value, bool | int) or (isinstance(value, int) and value not in (0, 1)):
        raise PayloadError(f"meta.{key}={value!r}: must be true or false")
    return bool(value)
