"""Batched sampling with vLLM's semantics on the reference sampler's weights: temperature (0 =
greedy), top-k, then top-p, max tokens, stop strings and stop tokens, an optional per-request seed
(every prompt of the call draws from its own generator seeded with it, so identical prompts give
identical completions, as in vLLM), and log-probs with vLLM's 1-based ranks, as vLLM's
`logprobs_mode`: `raw_logprobs` (vLLM's default) of the model's distribution, `processed_logprobs` of
the temperature-scaled, top-k/top-p-masked logits that are sampled from (temperature 0 scales by 1). Prompts are left-padded and decoded with a KV cache."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from arctic_rl_core.backends.protocol import FinishReason, SamplingParams

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")


@dataclass(frozen=True)
class SampledSequence:
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    text: str
    finish_reason: FinishReason
    logprobs: tuple[float, ...]  # sampled token, in the call's logprobs_mode
    top_logprobs: tuple[
        dict[int, tuple[float, int]], ...
    ]  # per token: id -> (logprob, rank); sampled + top-k


def sample(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    *,
    generator: torch.Generator,
    stop_ids: frozenset[int],
    max_model_len: int,
    top_logprobs: int | None = None,
    logprobs_mode: str = "raw_logprobs",
) -> list[SampledSequence]:
    """One completion per prompt. `generator` is used when `params.seed` is None. `top_logprobs`
    (vLLM's `logprobs=k`): per token the sampled token and the k most likely, with ranks."""
    import torch

    if logprobs_mode not in LOGPROBS_MODES:
        raise ValueError(f"logprobs_mode={logprobs_mode!r}: use one of {', '.join(LOGPROBS_MODES)}")

    device = next(model.parameters()).device
    batch = len(prompts)
    lengths = [len(p) for p in prompts]
    for i, length in enumerate(lengths):
        if length == 0:
            raise ValueError(f"prompt {i} is empty: give at least one token")
        if length >= max_model_len:
            raise ValueError(
                f"prompt {i} has {length} tokens, not below the model's max length {max_model_len}: shorten it"
            )
    width = max(lengths)
    pad = int(tokenizer.pad_token_id)
    input_ids = torch.full((batch, width), pad, dtype=torch.long)
    attention = torch.zeros((batch, width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        input_ids[i, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        attention[i, width - len(prompt) :] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0) * attention
    input_ids, attention, positions = input_ids.to(device), attention.to(device), positions.to(device)
    generators = (
        [torch.Generator().manual_seed(params.seed) for _ in range(batch)]
        if params.seed is not None
        else [generator] * batch
    )
    budgets = [min(params.max_tokens, max_model_len - length) for length in lengths]
    generated: list[list[int]] = [[] for _ in range(batch)]
    logprobs: list[list[float]] = [[] for _ in range(batch)]
    tops: list[list[dict[int, tuple[float, int]]]] = [[] for _ in range(batch)]
    finish: list[FinishReason | None] = [None] * batch
    texts: list[str] = [""] * batch

    cache_kwarg = _cache_argument(model)
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True)
        cache = _returned_cache(out)
        next_positions = positions[:, -1:] + 1
        logits_last = out.logits[:, -1, :]
        while True:
            raw = torch.log_softmax(logits_last.float(), dim=-1).cpu()
            chosen = _choose(raw, logits_last.float().cpu(), params, generators, finish)
            reported = raw if logprobs_mode == "raw_logprobs" else _processed_logprobs(logits_last, params)
            step_tokens = torch.full((batch, 1), pad, dtype=torch.long)
            for i in range(batch):
                if finish[i] is not None:
                    continue
                token = int(chosen[i])
                row = reported[i]
                generated[i].append(token)
                logprobs[i].append(float(row[token]))
                if top_logprobs is not None:
                    tops[i].append(_top_entries(row, token, top_logprobs))
                step_tokens[i, 0] = token
                finish[i], texts[i] = _finish_state(
                    tokenizer, generated[i], token, params, stop_ids, budgets[i]
                )
            if all(reason is not None for reason in finish):
                break
            attention = torch.cat([attention, torch.ones((batch, 1), dtype=torch.long, device=device)], dim=1)
            out = model(
                input_ids=step_tokens.to(device),
                attention_mask=attention,
                position_ids=next_positions,
                use_cache=True,
                **{cache_kwarg: cache},
            )
            cache = _returned_cache(out)
            next_positions = next_positions + 1
            logits_last = out.logits[:, -1, :]
    return [
        SampledSequence(
            prompt_ids=tuple(int(t) for t in prompts[i]),
            token_ids=tuple(generated[i]),
            text=texts[i],
            finish_reason=finish[i] or FinishReason.LENGTH,
            logprobs=tuple(logprobs[i]),
            top_logprobs=tuple(tops[i]),
        )
        for i in range(batch)
    ]


def teacher_forced_logprobs(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    params: SamplingParams,
    *,
    logprobs_mode: str = "raw_logprobs",
) -> list[tuple[tuple[float, int], ...]]:
    """The log-prob and rank (1 = the most likely) `model` gives each completion token after its
    prompt (one row at a time, no padding), in `logprobs_mode` as `sample` reports them: what the sampler would have reported had it
    drawn these tokens (`serve --reference --fixed-rollouts`)."""
    import torch

    if logprobs_mode not in LOGPROBS_MODES:
        raise ValueError(f"logprobs_mode={logprobs_mode!r}: one of {', '.join(LOGPROBS_MODES)}")
    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for prompt, completion in zip(prompts, completions, strict=True):
            ids = torch.tensor([[*prompt, *completion]], dtype=torch.long, device=device)
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : len(prompt) - 1 + len(completion)]
            if logprobs_mode == "raw_logprobs":
                values = torch.log_softmax(logits.float(), dim=-1).cpu()
            else:
                values = _processed_logprobs(logits, params)
            out.append(
                tuple(
                    (float(values[i, token]), int((values[i] > values[i, token]).sum()) + 1)
                    for i, token in enumerate(completion)
                )
            )
    return out


def _processed_logprobs(logits_B_V: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """vLLM's `processed_logprobs`: log-softmax of the logits divided by the temperature (1 when
    greedy), with top-k then top-p applied as masks (-inf outside the kept set)."""
    import torch

    scaled = logits_B_V.float().cpu() / (params.temperature or 1.0)
    vocab = scaled.shape[-1]
    if params.top_k > 0 and params.top_k < vocab:
        kth = torch.topk(scaled, params.top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(torch.softmax(scaled, dim=-1), dim=-1, descending=True)
        drop_sorted = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= params.top_p
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def _cache_argument(model) -> str:
    """The KV-cache keyword of this transformers version (`cache` from 5.2x, `past_key_values` before)."""

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _returned_cache(output):
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _choose(
    raw_B_V: torch.Tensor,
    logits_B_V: torch.Tensor,
    params: SamplingParams,
    generators: list[torch.Generator],
    finish: list[FinishReason | None],
) -> list[int]:
    import torch

    chosen = [0] * raw_B_V.shape[0]
    for i in range(raw_B_V.shape[0]):
        if finish[i] is not None:
            continue
        if params.temperature == 0:
            chosen[i] = int(torch.argmax(logits_B_V[i]))
            continue
        scaled = logits_B_V[i] / params.temperature
        if params.top_k > 0 and params.top_k < scaled.shape[0]:
            kth = torch.topk(scaled, params.top_k).values[-1]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        probs = torch.softmax(scaled, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass strictly above each token
            drop = before >= params.top_p
            drop[0] = False
            probs = probs.clone()
            probs[order[drop]] = 0.0
            probs = probs / probs.sum()
        noise = torch.empty_like(probs).exponential_(generator=generators[i])
        chosen[i] = int(torch.argmax(probs / noise))  # exponential race = a categorical draw
    return chosen


def _top_entries(row_V: torch.Tensor, token: int, k: int) -> dict[int, tuple[float, int]]:
    import torch

    values, ids = torch.topk(row_V, k) if k > 0 else (row_V[:0], torch.zeros(0, dtype=torch.long))
    entries = {int(t): (float(v), rank + 1) for rank, (v, t) in enumerate(zip(values, ids, strict=True))}
    if token not in entries:
        rank = int((row_V > row_V[token]).sum()) + 1
        entries = {token: (float(row_V[token]), rank), **entries}
    return entries


def _finish_state(
    tokenizer: PreTrainedTokenizerBase,
    generated: list[int],
    token: int,
    params: SamplingParams,
    stop_ids: frozenset[int],
    budget: int,
) -> tuple[FinishReason | None, str]:
    text = tokenizer.decode(generated, skip_special_tokens=True)
    if token in stop_ids:
        return FinishReason.STOP, text
    for stop in params.stop:
        at = text.find(stop)
        if at >= 0:
            return FinishReason.STOP, text[:at]
    if len(generated) >= budget:
        return FinishReason.LENGTH, text
    return None, text
