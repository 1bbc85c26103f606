"""From the server's `[B, S]` forward log-probs back to response-aligned `[B, R]` values."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from arctic_rl_core.backends.protocol import WirePayload, as_tensor_logprobs
from arctic_rl_core.wire.build import PayloadError
from arctic_rl_core.wire.sample import RolloutSample
from arctic_rl_core.wire.spec import PayloadSpec

if TYPE_CHECKING:
    import torch


def response_logprobs(
    logprobs_B_S: Any, payload_or_batch: WirePayload | Mapping[str, Any], spec: PayloadSpec
) -> tuple[torch.Tensor, torch.Tensor]:
    """Response-aligned log-probs `values_B_R[b, j] = log p(response token j of row b)` and the
    mask `mask_B_R` of real response tokens (bool); values are 0 where the mask is False.

    Non-ZoRRo forwards return shifted log-probs, so token j is read at column `P + j - 1`;
    ZoRRo forwards (`meta.zorro_train_enable`) return them token-aligned at column `P + j`.
    `payload_or_batch` is the payload that was sent (its meta decides ZoRRo) or its batch dict
    (then `spec.zorro_train_enable` decides). Lists and numpy arrays are accepted too.
    P and R are the payload's own widths (`prompts.shape[1]`, the rest of `attention_mask`), which
    may be below the spec's maxima (`PayloadSpec.pad_to_multiple`); the result is always
    `[B, spec.max_response_len]`, zero and unmasked past R.
    """
    import torch

    logprobs = as_tensor_logprobs(logprobs_B_S)
    if isinstance(payload_or_batch, WirePayload):
        batch, meta = payload_or_batch.batch, payload_or_batch.meta
        zorro = bool(meta.get("zorro_train_enable", False))
    else:
        batch, meta, zorro = payload_or_batch, None, spec.zorro_train_enable
    if isinstance(batch, list):
        attention_mask = torch.cat([mb["attention_mask"] for mb in batch], dim=0)
        prompts = batch[0]["prompts"]
    else:
        attention_mask, prompts = batch["attention_mask"], batch["prompts"]
    # the payload's own widths (a payload may be narrower than the spec's maxima: pad_to_multiple)
    P = int(prompts.shape[1])
    R = int(attention_mask.shape[1]) - P
    for key, width, limit in (
        ("max_prompt_len", P, spec.max_prompt_len),
        ("max_response_len", R, spec.max_response_len),
    ):
        if meta is not None and meta.get(key) != width:
            raise PayloadError(
                f"payload meta.{key}={meta.get(key)!r} but the payload is {width} wide: pass the payload as sent"
            )
        if width > limit:
            raise PayloadError(f"the payload's {key} is {width} > spec.{key}={limit}: use the same spec")
    if R < 1:
        raise PayloadError(
            f"attention_mask has shape {tuple(attention_mask.shape)} with prompts {P} wide: no response columns"
        )
    if tuple(logprobs.shape) != tuple(attention_mask.shape):
        raise PayloadError(
            f"log-probs have shape {tuple(logprobs.shape)} but the payload is {tuple(attention_mask.shape)}: "
            "pass the forward output of this payload"
        )
    mask_B_R = attention_mask[:, P:].to(torch.bool)
    window = logprobs[:, P:] if zorro else logprobs[:, P - 1 : P + R - 1]
    values_B_R = torch.where(mask_B_R, window, torch.zeros((), dtype=window.dtype))
    if spec.max_response_len > R:  # callers get [B, spec.max_response_len] whatever the payload width
        pad = spec.max_response_len - R
        values_B_R = torch.nn.functional.pad(values_B_R, (0, pad))
        mask_B_R = torch.nn.functional.pad(mask_B_R, (0, pad))
    return values_B_R.contiguous(), mask_B_R


def with_response_logprobs(
    samples: Sequence[RolloutSample],
    values_B_R: torch.Tensor,
    *,
    field: Literal["old_logprobs", "ref_logprobs", "rollout_logprobs"],
) -> list[RolloutSample]:
    """Copies of `samples` with `field` set from `response_logprobs` output (row b -> sample b)."""
    if field not in ("old_logprobs", "ref_logprobs", "rollout_logprobs"):
        raise ValueError(f"field={field!r}: expected old_logprobs, ref_logprobs or rollout_logprobs")
    if values_B_R.ndim != 2 or values_B_R.shape[0] != len(samples):
        raise PayloadError(
            f"values have shape {tuple(values_B_R.shape)} for {len(samples)} samples: expected [B, R] with B rows"
        )
    values = values_B_R.detach().to("cpu")
    return [
        dataclasses.replace(sample, **{field: values[b, : len(sample.response_ids)]})
        for b, sample in enumerate(samples)
    ]
