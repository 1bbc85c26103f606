"""Check a `WirePayload` against the wire contract, as strictly as the server would (stricter
where the server would silently compute something wrong). Backends call this on every payload."""

from __future__ import annotations

import json
from typing import Any

from arctic_rl_core.backends.protocol import WirePayload
from arctic_rl_core.wire.build import PayloadError
from arctic_rl_core.wire.spec import POST_APPLY_TEMPERATURE, POST_ENTROPY_AND_LOGPROBS

MODEL_INPUTS: tuple[str, ...] = ("input_ids", "attention_mask", "prompts", "position_ids")
LOSS_INPUTS: tuple[str, ...] = ("response_mask", "loss_mask", "advantages", "old_log_probs")
OPTIONAL_LOSS_INPUTS: tuple[str, ...] = ("ref_log_prob", "rollout_log_probs", "rollout_is_weights")
KNOWN_BATCH_KEYS = frozenset(MODEL_INPUTS + LOSS_INPUTS + OPTIONAL_LOSS_INPUTS)
PROCESSING_KEYS = frozenset({"post", "loss_fn", "config"})
_INT_DTYPES = ("torch.int64",)
_MASK_DTYPES = ("torch.int64", "torch.int32", "torch.bool")
_FLOAT_DTYPES = ("torch.float32",)


def validate_payload(payload: WirePayload, *, dp_size: int = 1, grad_accum_steps: int = 1) -> None:
    """Raise `PayloadError` listing every problem of `payload`; return None when it is valid.

    `dp_size` / `grad_accum_steps`: the receiving engine's split (rows must divide evenly).
    """
    problems: list[str] = []
    if not isinstance(payload, WirePayload):
        raise PayloadError(f"expected a WirePayload, got {type(payload).__name__}")
    meta, processing = payload.meta, payload.processing
    if not isinstance(meta, dict) or not isinstance(processing, dict):
        raise PayloadError("payload.meta and payload.processing must be dicts")
    _check_processing(processing, meta, problems)
    _check_meta(meta, problems)
    if problems:
        raise PayloadError("invalid payload:\n  - " + "\n  - ".join(problems))

    batches = payload.batch if isinstance(payload.batch, list) else [payload.batch]
    if not batches or not all(isinstance(mb, dict) for mb in batches):
        raise PayloadError("payload.batch must be a dict of tensors or a non-empty list of such dicts")
    train = processing.get("loss_fn") is not None
    rows = 0
    for index, mb in enumerate(batches):
        where = "batch" if not isinstance(payload.batch, list) else f"batch[{index}]"
        rows += _check_batch(mb, meta, train=train, where=where, problems=problems)
    multiple = dp_size * grad_accum_steps
    if rows and rows % multiple:
        problems.append(
            f"{rows} rows do not split evenly across dp_size={dp_size} x grad_accum_steps={grad_accum_steps}"
        )
    if problems:
        raise PayloadError("invalid payload:\n  - " + "\n  - ".join(problems))


def _check_processing(processing: dict[str, Any], meta: dict[str, Any], problems: list[str]) -> None:
    unknown = set(processing) - PROCESSING_KEYS
    if unknown:
        problems.append(
            f"processing has unknown keys {sorted(unknown)}: the server reads only post, loss_fn, config"
        )
    if "loss_fn" not in processing:
        problems.append(
            "processing.loss_fn is missing: send None for a forward (the server defaults to a loss)"
        )
    loss_fn = processing.get("loss_fn")
    if loss_fn is not None and (not isinstance(loss_fn, str) or not loss_fn):
        problems.append(f"processing.loss_fn={loss_fn!r}: must be None or a loss name")
    post = processing.get("post")
    if not isinstance(post, list) or not all(isinstance(name, str) for name in post):
        problems.append(f"processing.post={post!r}: must be a list of post-processor names")
        return
    if POST_ENTROPY_AND_LOGPROBS not in post:
        problems.append(f"processing.post={post}: needs {POST_ENTROPY_AND_LOGPROBS!r} to produce log-probs")
    temperature = meta.get("temperature")
    if isinstance(temperature, (int, float)) and temperature != 1.0 and POST_APPLY_TEMPERATURE not in post:
        problems.append(
            f"meta.temperature={temperature} but processing.post={post} lacks {POST_APPLY_TEMPERATURE!r}: "
            "log-probs would ignore the sampling temperature (apply it to forward and train alike)"
        )


def _check_meta(meta: dict[str, Any], problems: list[str]) -> None:
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        problems.append(
            f"meta is not plain JSON data ({exc}): convert tensors/numpy values to Python numbers"
        )
    for key in ("pad_token_id", "max_prompt_len", "max_response_len"):
        value = meta.get(key)
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < (0 if key == "pad_token_id" else 1)
        ):
            problems.append(
                f"meta.{key}={value!r}: required, an integer >= {0 if key == 'pad_token_id' else 1}"
            )
    temperature = meta.get("temperature")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        problems.append(f"meta.temperature={temperature!r}: required, a number > 0")


def _check_batch(
    mb: dict[str, Any], meta: dict[str, Any], *, train: bool, where: str, problems: list[str]
) -> int:
    import torch

    unknown = set(mb) - KNOWN_BATCH_KEYS
    if unknown:
        problems.append(f"{where} has unknown keys {sorted(unknown)}; known: {sorted(KNOWN_BATCH_KEYS)}")
    required = ["input_ids", "attention_mask", "prompts"]
    if not meta.get("drop_position_ids", False):
        required.append("position_ids")
    if train:
        required += ["response_mask", "advantages", "old_log_probs"]
        if isinstance(meta.get("actor_config"), dict) and meta["actor_config"].get("use_kl_loss"):
            required.append("ref_log_prob")
    missing = [key for key in required if key not in mb]
    if missing:
        problems.append(f"{where} is missing {missing}")
        return 0
    not_tensors = [key for key, value in mb.items() if not isinstance(value, torch.Tensor)]
    if not_tensors:
        problems.append(f"{where}: {not_tensors} are not torch tensors (convert numpy/lists before sending)")
        return 0
    P, R = meta.get("max_prompt_len"), meta.get("max_response_len")
    if not isinstance(P, int) or not isinstance(R, int):
        return 0
    input_ids = mb["input_ids"]
    B, S = (input_ids.shape[0], input_ids.shape[1]) if input_ids.ndim == 2 else (-1, -1)
    if S != P + R:
        problems.append(
            f"{where}.input_ids has shape {tuple(input_ids.shape)}: expected [B, {P + R}] (P + R)"
        )
        return 0
    shapes = {key: (B, S) for key in mb} | {"prompts": (B, P)}
    if mb["prompts"].ndim == 3:  # the empty [B, P, 0]: only its width is read
        shapes["prompts"] = (B, P, 0)
    for key, value in mb.items():
        if tuple(value.shape) != shapes[key]:
            problems.append(f"{where}.{key} has shape {tuple(value.shape)}: expected {list(shapes[key])}")
    for key in mb:
        if key == "prompts" and mb[key].ndim == 3:
            continue  # no values: any dtype
        expected = (
            _INT_DTYPES
            if key in ("input_ids", "prompts", "position_ids")
            else _MASK_DTYPES
            if key in ("attention_mask", "response_mask", "loss_mask")
            else _FLOAT_DTYPES
        )
        if str(mb[key].dtype) not in expected:
            problems.append(f"{where}.{key} has dtype {mb[key].dtype}: expected {' or '.join(expected)}")
    if problems:
        return B
    _check_layout(mb, meta, where, problems)
    if train:
        _check_loss_tensors(mb, P, where, problems)
        for key in ("batch_num_tokens", "global_batch_size"):
            value = meta.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                problems.append(f"meta.{key}={value!r}: a train payload needs it (global loss normalisation)")
        if not isinstance(meta.get("actor_config"), dict):
            problems.append("meta.actor_config is missing: the loss reads its settings from it")
    return B


def _np(tensor: Any) -> Any:
    return tensor.detach().cpu().numpy()  # zero-copy for CPU tensors


def _is_01(values: Any) -> bool:
    return values.size == 0 or (values.min() >= 0 and values.max() <= 1)


def _check_layout(mb: dict[str, Any], meta: dict[str, Any], where: str, problems: list[str]) -> None:
    """Vectorised numpy checks (views of the tensors): the real tokens of each row must be one
    block from a left-padded prompt (>= 1 token) into a right-padded response."""
    import numpy as np

    P = meta["max_prompt_len"]
    mask = _np(mb["attention_mask"])
    if not _is_01(mask):
        problems.append(f"{where}.attention_mask holds values other than 0/1")
        return
    columns = np.arange(mask.shape[1])[None, :]
    prompt_lens = mask[:, :P].sum(axis=1)
    response_lens = mask[:, P:].sum(axis=1)
    real = (columns >= (P - prompt_lens)[:, None]) & (columns < (P + response_lens)[:, None])
    if not np.array_equal(mask.astype(bool, copy=False), real):
        problems.append(
            f"{where}: each row must be a LEFT-padded prompt followed by a RIGHT-padded response "
            "(attention_mask is not one block ending in the response region)"
        )
        return
    if (prompt_lens == 0).any():
        problems.append(f"{where}: every row needs at least one prompt token (attention_mask[:, P-1] == 1)")
    pad = meta["pad_token_id"]
    if np.logical_and(_np(mb["input_ids"]) != pad, ~real).any():
        problems.append(
            f"{where}.input_ids holds non-pad tokens where attention_mask is 0 (pad_token_id={pad})"
        )
    if mb["prompts"].ndim == 2 and not np.array_equal(_np(mb["prompts"]), _np(mb["input_ids"])[:, :P]):
        problems.append(f"{where}.prompts differs from input_ids[:, :max_prompt_len]")
    if "position_ids" in mb:
        expected = np.where(real, columns - (P - prompt_lens)[:, None], 0)
        if not np.array_equal(_np(mb["position_ids"]), expected):
            problems.append(
                f"{where}.position_ids are not 0..n-1 over the real tokens of each row (0 on padding)"
            )


def _check_loss_tensors(mb: dict[str, Any], P: int, where: str, problems: list[str]) -> None:
    import numpy as np

    attention = _np(mb["attention_mask"]).astype(bool, copy=False)
    for key in ("response_mask", "loss_mask"):
        if key not in mb:
            continue
        value = _np(mb[key])
        if not _is_01(value):
            problems.append(f"{where}.{key} holds values other than 0/1")
        elif value[:, :P].any() or np.logical_and(value, ~attention).any():
            problems.append(
                f"{where}.{key} is set outside the real response tokens (columns >= P, attention 1)"
            )
    for key in ("advantages", "old_log_probs", "ref_log_prob", "rollout_log_probs", "rollout_is_weights"):
        if key in mb and mb[key].numel():
            values = _np(mb[key])
            if not (np.isfinite(values.min()) and np.isfinite(values.max())):  # min/max propagate NaN
                problems.append(f"{where}.{key} holds NaN or infinite values")
