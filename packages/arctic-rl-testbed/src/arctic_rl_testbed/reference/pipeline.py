"""The server's processing pipeline on one micro-batch: model forward, post-processors
(`apply_temperature`, `compute_entropy_and_logprobs`, `compute_entropy`, `identity`, in the order
sent) and the loss.

Alignment, as the server computes it. Without ZoRRo, returned `logprobs[b, i] =
log p(input_ids[b, i+1])` ("shifted"; the last real position of a row is meaningless) and
`entropy[b, i]` is the entropy of the distribution at position i, both filled with the VALUE of
`pad_token_id` where `attention_mask` is 0; the `verl_grpo` loss reads the log-prob of each
response token at the token's own position (index P+j, where the payload's per-token tensors sit)
and the entropy at those same indices unshifted (the server's convention). With
`meta.zorro_train_enable` the server's patched model applies `meta.temperature` itself and returns
token-aligned values (response token j at index P+j, zeros elsewhere) for log-probs and entropy
alike, and the loss uses them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from arctic_rl_testbed.reference.loss import grpo_loss, sft_ce_loss, sft_loss
from arctic_rl_testbed.reference.validation import LOGPROB_POSTS, POST_APPLY_TEMPERATURE, SFT_LOSS_FNS

if TYPE_CHECKING:
    import torch

    from arctic_rl_testbed.reference.validation import MicroBatch, ParsedPayload


@dataclass(frozen=True)
class PostOutputs:
    """What the post-processors produced for one micro-batch (unpadded values, may carry grad)."""

    logprobs_B_S: torch.Tensor | None
    entropy_B_S: torch.Tensor | None


def model_logits(model, micro: MicroBatch) -> torch.Tensor:
    """Logits `[b, S, V]` of one micro-batch (per-row causal attention over its real tokens)."""
    tensors = micro.tensors
    return model(
        input_ids=tensors["input_ids"],
        attention_mask=tensors["attention_mask"],
        position_ids=tensors["position_ids"],
        use_cache=False,
    ).logits


def run_posts(logits_B_S_V: torch.Tensor, micro: MicroBatch, parsed: ParsedPayload) -> PostOutputs:
    """Apply `parsed.posts` in order, with the server's semantics (a log-prob post consumes the
    logits). Log-probs come back shifted and entropy per position, whatever the mode."""
    import torch

    logits: torch.Tensor | None = logits_B_S_V
    zorro = parsed.zorro
    if zorro and parsed.temperature is not None and parsed.temperature != 1.0:
        logits = logits / parsed.temperature  # ZoRRo's patched forward applies meta.temperature itself
    logprobs = entropy = None
    for name in parsed.posts:
        if name == POST_APPLY_TEMPERATURE:
            if (
                not zorro
                and logits is not None
                and parsed.temperature is not None
                and parsed.temperature != 1.0
            ):
                logits = logits / parsed.temperature
        elif name in LOGPROB_POSTS:
            if logits is not None:
                if parsed.logits_in_fp32:
                    logits = logits.float()
                labels = torch.roll(micro.tensors["input_ids"], shifts=-1, dims=-1)
                logprobs, computed = logprobs_and_entropy(logits, labels, parsed.calculate_entropy)
                entropy = computed if computed is not None else entropy
                logits = None
        elif name == "compute_entropy" and entropy is None and logits is not None and not zorro:
            entropy = entropy_from_logits(logits)
    return PostOutputs(logprobs, entropy)


def logprobs_and_entropy(
    logits_B_S_V: torch.Tensor, labels_B_S: torch.Tensor, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    import torch

    log_softmax = torch.log_softmax(logits_B_S_V, dim=-1)
    logprobs = log_softmax.gather(-1, labels_B_S.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_softmax.exp() * log_softmax).sum(dim=-1) if with_entropy else None
    return logprobs, entropy


def entropy_from_logits(logits_B_S_V: torch.Tensor) -> torch.Tensor:
    import torch

    log_softmax = torch.log_softmax(logits_B_S_V.float(), dim=-1)
    return -(log_softmax.exp() * log_softmax).sum(dim=-1)


def response_window(micro: MicroBatch) -> torch.Tensor:
    """`[b, S]` bool: the response tokens of each row (real tokens at index >= P)."""
    window = micro.tensors["attention_mask"].bool().clone()
    window[:, : micro.prompt_width] = False
    return window


def token_aligned(shifted_B_S: torch.Tensor, micro: MicroBatch) -> torch.Tensor:
    """Move shifted values one place right inside the response window, 0 elsewhere: log p(token t)
    (or the entropy of the distribution that produced token t) at index t."""
    import torch

    own = torch.zeros_like(shifted_B_S)
    own[:, 1:] = shifted_B_S[:, :-1]
    return torch.where(response_window(micro), own, torch.zeros_like(own))


def wire_view(values_B_S: torch.Tensor, micro: MicroBatch, parsed: ParsedPayload) -> torch.Tensor:
    """What the server returns for one micro-batch: shifted with pad-token-value padding, or with
    ZoRRo token-aligned with zeros (float32, detached, CPU)."""
    import torch

    values = values_B_S.detach().to(torch.float32)
    if parsed.zorro:
        return token_aligned(values, micro).cpu()
    attention = micro.tensors["attention_mask"].bool()
    return torch.where(attention, values, torch.full_like(values, float(parsed.pad_token_id))).cpu()


@dataclass(frozen=True)
class MicroLoss:
    loss: torch.Tensor  # what this micro-batch back-propagates (before the rank average)
    metrics: dict[str, float]
    outputs: PostOutputs


def micro_loss(model, micro: MicroBatch, parsed: ParsedPayload) -> MicroLoss:
    """Forward (with grad) and the loss named by `parsed.loss_fn` for one micro-batch."""
    import torch

    logits = model_logits(model, micro)
    tensors = micro.tensors
    if parsed.loss_fn in SFT_LOSS_FNS:
        labels = tensors["labels"].to(torch.int64)
        if parsed.loss_fn == "sft":
            loss, metrics = sft_loss(logits, labels)
        else:
            assert parsed.global_num_tokens is not None
            loss, metrics = sft_ce_loss(
                logits, labels, global_num_tokens=parsed.global_num_tokens, dp_size=parsed.meta["dp_size"]
            )
        return MicroLoss(loss, metrics, PostOutputs(None, None))
    outputs = run_posts(logits, micro, parsed)
    if parsed.loss_callable is not None:
        loss, metrics = call_server_loss(parsed.loss_callable, outputs, micro, parsed)
        return MicroLoss(loss, metrics, outputs)
    assert (
        outputs.logprobs_B_S is not None and parsed.loss_config is not None and parsed.global_info is not None
    )
    compute = torch.float32 if outputs.logprobs_B_S.dtype != torch.float64 else torch.float64
    logprobs = token_aligned(outputs.logprobs_B_S.to(compute), micro)
    entropy = None
    if outputs.entropy_B_S is not None:
        entropy = outputs.entropy_B_S.to(compute)
        entropy = token_aligned(entropy, micro) if parsed.zorro else entropy
    config = parsed.loss_config

    def per_token(key: str) -> torch.Tensor | None:
        value = tensors.get(key)
        return None if value is None else value.to(compute)

    loss, metrics = grpo_loss(
        logprobs,
        per_token("old_log_probs"),
        per_token("advantages"),
        tensors["response_mask"] != 0,
        config,
        parsed.global_info,
        entropy_B_T=entropy,
        ref_logprobs_B_T=per_token("ref_log_prob") if config.use_kl_loss else None,
        rollout_is_weights_B_T=per_token("rollout_is_weights"),
    )
    return MicroLoss(loss, metrics, outputs)


def server_layout(
    outputs: PostOutputs, micro: MicroBatch, parsed: ParsedPayload
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """`(model_outputs, batch)` as arctic-platform 0.1.4's `run_pipeline` hands them to a loss:
    `response_lens` / `sequence_offsets` from the padded micro-batch, then every `[b, S]` tensor
    unpadded by `attention_mask` to `[1, T]` with shifted model outputs; with ZoRRo the per-token
    batch tensors and the (token-aligned) model outputs keep only the response tokens."""
    attention = micro.tensors["attention_mask"].bool()
    width = micro.prompt_width
    batch = dict(micro.tensors)
    batch["sequence_offsets"] = attention.long().sum(dim=1).cumsum(dim=0)
    batch["response_lens"] = attention[:, width:].sum(dim=1)
    produced = {"logprobs": outputs.logprobs_B_S, "entropy": outputs.entropy_B_S}
    model_outputs: dict[str, torch.Tensor] = {}
    if parsed.zorro:
        response = attention[:, width:]
        for key, value in micro.tensors.items():
            if key not in ("input_ids", "position_ids", "attention_mask") and value.shape == attention.shape:
                batch[key] = value[:, width:][response].unsqueeze(0)
        for key, value in produced.items():
            if value is not None:
                model_outputs[key] = token_aligned(value, micro)[:, width:][response].unsqueeze(0)
        return model_outputs, batch
    for key, value in micro.tensors.items():
        if value.shape == attention.shape:
            batch[key] = value[attention].unsqueeze(0)
    for key, value in produced.items():
        if value is not None:
            model_outputs[key] = value[attention].unsqueeze(0)
    return model_outputs, batch


def call_server_loss(fn, outputs: PostOutputs, micro: MicroBatch, parsed: ParsedPayload):
    """Call a dotted-path loss with the server's signature and layout (meta with the injected
    dp_size and the entropy gating; `config` = processing.config)."""
    model_outputs, batch = server_layout(outputs, micro, parsed)
    meta = {**parsed.meta, "calculate_entropy": parsed.calculate_entropy}
    config = dict(parsed.loss_config_section or {})
    loss, metrics = fn(model_outputs, batch, meta, config, str(micro.tensors["input_ids"].device))
    return loss, {key: float(value) for key, value in dict(metrics).items()}
