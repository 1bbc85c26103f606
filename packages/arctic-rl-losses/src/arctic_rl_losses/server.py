"""The functions an Arctic server imports by dotted path (`processing.loss_fn`).

arctic-platform 0.1.4 resolves a `processing.loss_fn` that is not a registered name with
`importlib.import_module(module).<fn>` inside its DeepSpeed worker (`common/registry.py:
resolve_fn`), then calls, once per gradient-accumulation micro-batch of each data-parallel rank,

    loss, metrics = fn(model_outputs, batch, meta, config, device)

and back-propagates `loss` with `engine.backward(loss, scale_wrt_gas=False)` (`rl/processors/
pipeline.py: run_pipeline`). What the loss receives there (non-ZoRRo path, `pack=False`):

- `batch`: every `[B, S]` tensor of the micro-batch unpadded by `attention_mask` into `[1, T]` (the
  row-major real tokens), so `response_mask`, `advantages`, `old_log_probs`, `ref_log_prob`,
  `rollout_is_weights` are `[1, T]`; plus `response_lens` `[B]` (real tokens at columns >= P) and
  `sequence_offsets` `[B]` (cumulative real tokens per row), added before unpadding. Batch-dim
  tensors sent in `meta` were moved into `batch` first (`BATCH_DIM_CONTEXT_KEYS`).
- `model_outputs["logprobs"]` `[1, T]`: shifted, position i holds log p(token i+1); `entropy` the
  same way when `meta.calculate_entropy` (the server drops it when `actor_config.entropy_coeff`
  is 0).
- With `meta.zorro_train_enable`: per-token batch tensors hold only the response tokens (`[1, N]`,
  row by row) and log-probs / entropy are response-aligned.
- `meta`: as sent, plus `dp_size` (the number of training workers) injected by the server;
  `config`: `processing.config`.

When the payload asks the server not to pack rows (`meta.cu_seqlens` present: 0.1.4's "already
packed" signal, sent without flash attention so that rows never attend to each other; see
`arctic_rl_core.wire.spec.PayloadSpec.rows_unpacked`), nothing is unpadded: `batch` tensors and
`model_outputs` stay `[B, S]` with the prompt ending at column `meta.max_prompt_len`, and there are
no `response_lens` / `sequence_offsets`.

This module rebuilds response-aligned rows `[B, R]` from either layout (so per-sequence ratios and
sequence aggregation see real sequences, unlike the built-in `verl_grpo`, which treats the packed
micro-batch as one row) and computes `arctic_rl_losses.policy.actor_loss`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from arctic_rl_losses import __version__
from arctic_rl_losses.policy import GlobalCounts, actor_loss
from arctic_rl_losses.settings import LossSettings

PER_TOKEN_INPUTS: tuple[str, ...] = (
    "response_mask",
    "advantages",
    "old_log_probs",
    "ref_log_prob",
    "rollout_is_weights",
)


def policy_loss(
    model_outputs: Mapping[str, Any],
    batch: Mapping[str, Any],
    meta: Mapping[str, Any],
    config: Any,
    device: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The server-side loss (`arctic_rl_losses.names.SERVER_LOSS_FN`): settings from
    `meta.actor_config` / `meta.policy_loss_config`, global counts from `meta`."""
    if config:
        raise ValueError(
            f"processing.config={dict(config)!r}: the arctic_rl_core loss reads its settings from "
            "meta.actor_config and meta.policy_loss_config; send processing.config = {}"
        )
    settings = LossSettings.from_meta(meta.get("actor_config"), meta.get("policy_loss_config"))
    for key in ("response_mask", "advantages", "old_log_probs"):
        if key not in batch:
            raise ValueError(
                f"batch.{key} is missing: the arctic_rl_core loss needs it for every micro-batch"
            )
    if settings.use_kl_loss and "ref_log_prob" not in batch:
        raise ValueError(
            "batch.ref_log_prob is missing but meta.actor_config.use_kl_loss=True: send reference log-probs"
        )
    if "cu_seqlens" in meta and "response_lens" not in batch:
        rows = ResponseRows.padded(batch, meta)
    else:
        rows = ResponseRows.of(batch, zorro=bool(meta.get("zorro_train_enable", False)))
    logprobs = rows.model_output(model_outputs["logprobs"])
    entropy = model_outputs.get("entropy")
    counts = GlobalCounts(
        dp_size=int(meta.get("dp_size", 1)),
        batch_num_tokens=_optional_number(meta, "batch_num_tokens"),
        global_batch_size=_optional_number(meta, "global_batch_size"),
    )
    inputs = {key: rows.batch_tensor(batch[key]) for key in PER_TOKEN_INPUTS if batch.get(key) is not None}
    compute = logprobs.dtype if logprobs.dtype in (torch.float32, torch.float64) else torch.float32
    mask = inputs["response_mask"].to(torch.bool) & rows.valid
    return actor_loss(
        settings,
        counts,
        logprobs.to(compute),
        inputs["old_log_probs"].to(compute),
        inputs["advantages"].to(compute),
        mask,
        entropy_B_R=None if entropy is None else rows.model_output(entropy).to(compute),
        ref_logprobs_B_R=inputs["ref_log_prob"].to(compute) if settings.use_kl_loss else None,
        rollout_is_weights_B_R=(
            inputs["rollout_is_weights"].to(compute) if "rollout_is_weights" in inputs else None
        ),
    )


def import_probe(
    model_outputs: Mapping[str, Any],
    batch: Mapping[str, Any],
    meta: Mapping[str, Any],
    config: Any,
    device: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """A no-op loss for the startup probe (sent in a no-grad forward): proves the server's worker
    imported `arctic_rl_losses` and reports the version it found."""

    logprobs = model_outputs["logprobs"]
    major, minor = (int(p) if p.isdigit() else 0 for p in [*__version__.split("."), "0", "0"][:2])
    metrics = {
        "arctic_rl_core/import_probe": 1.0,
        "arctic_rl_core/version_major": float(major),
        "arctic_rl_core/version_minor": float(minor),
    }
    return logprobs.sum() * 0.0, metrics


class ResponseRows:
    """Index map from the server's flat per-micro-batch layout to `[B, R]` response rows."""

    def __init__(self, flat_index_B_R: torch.Tensor, valid_B_R: torch.Tensor, shift: int) -> None:
        self.index = flat_index_B_R
        self.valid = valid_B_R
        self.shift = shift  # 1: model outputs are shifted (value for token i at i - 1)

    @classmethod
    def of(cls, batch: Mapping[str, Any], *, zorro: bool) -> ResponseRows:
        for key in ("response_lens", "sequence_offsets"):
            if key not in batch:
                raise ValueError(
                    f"batch.{key} is missing: the arctic_rl_core loss reads the layout the Arctic server's "
                    "pipeline builds (compute_packing_info_for_batch); call it from the server's pipeline"
                )
        lens = torch.as_tensor(batch["response_lens"]).reshape(-1).to(torch.long)
        if zorro:
            ends = torch.cumsum(lens, dim=0)
        else:
            ends = torch.as_tensor(batch["sequence_offsets"]).reshape(-1).to(torch.long)
        width = max(int(lens.max().item()) if lens.numel() else 0, 1)
        columns = torch.arange(width, device=lens.device)
        valid = columns[None, :] < lens[:, None]
        starts = ends - lens
        index = torch.where(
            valid, starts[:, None] + columns[None, :], torch.zeros_like(valid, dtype=torch.long)
        )
        return cls(index, valid, shift=0 if zorro else 1)

    @classmethod
    def padded(cls, batch: Mapping[str, Any], meta: Mapping[str, Any]) -> ResponseRows:
        """The rows of an unpacked `[B, S]` micro-batch: responses start at column
        `meta.max_prompt_len` and are right-padded (the wire layout)."""
        mask = batch.get("attention_mask")
        if not torch.is_tensor(mask) or mask.dim() != 2:
            raise ValueError(
                "meta.cu_seqlens is set (rows not packed) but batch.attention_mask is not a [B, S] tensor: the "
                "arctic_rl_core loss reads the padded layout from it"
            )
        width = int(meta["max_prompt_len"])
        B, S = mask.shape
        valid = mask[:, width:].to(torch.bool)
        columns = torch.arange(S - width, device=mask.device)
        index = torch.arange(B, device=mask.device)[:, None] * S + width + columns[None, :]
        if width == S:  # no response column at all: one empty column keeps the shapes
            valid = torch.zeros(B, 1, dtype=torch.bool, device=mask.device)
            index = torch.zeros(B, 1, dtype=torch.long, device=mask.device)
        return cls(torch.where(valid, index, torch.zeros_like(index)), valid, shift=1)

    def _gather(self, values: torch.Tensor, shift: int) -> torch.Tensor:
        flat = values.reshape(-1)
        index = (self.index - shift).clamp(min=0).to(flat.device)
        rows = flat[index]
        return torch.where(self.valid.to(flat.device), rows, torch.zeros_like(rows))

    def batch_tensor(self, values: torch.Tensor) -> torch.Tensor:
        """A per-token batch tensor (token-aligned) as `[B, R]` rows."""
        return self._gather(values, 0)

    def model_output(self, values: torch.Tensor) -> torch.Tensor:
        """Model log-probs / entropy (shifted unless ZoRRo) as `[B, R]` rows: log p(response token j)."""
        return self._gather(values, self.shift)


def _optional_number(meta: Mapping[str, Any], key: str) -> float | None:
    value = meta.get(key)
    if value is None:
        return None
    if torch.is_tensor(value):
        value = value.item()
    return float(value)
