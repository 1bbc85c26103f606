"""Sample one turn per prompt from token ids, token in / token out, through any core `Backend`.

A backend that takes token ids (the reference engine in process, Cortex) gets the ids themselves. The
Arctic on-prem server takes text only: it gets `PromptText.to_text(ids)` and tokenises it back. Every
turn records the ids the sampler conditioned on (`SampledTurn.context_ids`), verified against what
the backend reports: the prompt ids it echoes, or else the length it reports (`prompt_len`, which
the 0.1.4 server returns; a backend that takes ids and reports neither read those ids).
`context_ids == prompt_ids` (`exact`) is the turn that is token-faithful;
a text turn whose ids do not survive `encode(decode(ids))` is sampled from the server's own
tokenisation, recorded as such (drift), never hidden. A backend whose count differs from the local
tokenizer's re-encoding conditioned on ids nobody here knows: refused (`TokenizerMismatchError`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from arctic_rl_core.multi_turn.prompt_text import PromptText

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend, Completion, FinishReason, SamplingParams
    from arctic_rl_core.generate_batcher import GenerateBatcher


class TokenizerMismatchError(RuntimeError):
    """The backend tokenised a turn's text into other ids than the local tokenizer does."""


@dataclass(frozen=True)
class SampledTurn:
    """One sampled turn. `prompt_ids`: the context the caller asked for; `context_ids`: the ids the
    sampler conditioned on (equal when `exact`); `token_ids` / `logprobs`: what it drew (log-probs
    when asked); `text`: their text (stop string included, special tokens skipped)."""

    prompt_ids: tuple[int, ...]
    context_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None
    text: str
    finish_reason: FinishReason
    weights_version: int
    sent_as: Literal["token_ids", "text"]

    @property
    def exact(self) -> bool:
        return self.context_ids == self.prompt_ids


class TurnSampler:
    """`sample(prompts_ids, params)`: one `SampledTurn` per prompt, in order. Without a `batcher` the
    prompts go in one backend call; with one (`arctic_rl_core.generate_batcher`), each prompt is a
    request that shares a call with whatever other requests (other trajectories' turns) are waiting."""

    def __init__(self, backend: Backend, tokenizer: Any, *, batcher: GenerateBatcher | None = None) -> None:
        self.backend = backend
        self.text = PromptText(tokenizer)
        self.sends_text = not backend.accepts_token_ids
        self.batcher = batcher

    async def sample(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[SampledTurn]:
        prompt_ids = [tuple(int(t) for t in p) for p in prompts]
        if not prompt_ids or any(not p for p in prompt_ids):
            raise ValueError("sample: give one or more non-empty token-id prompts")
        if self.sends_text:
            texts = [self.text.to_text(p) for p in prompt_ids]
            expected = [self.text.server_ids(t) for t in texts]
            served = await self._generate(texts, params)
        else:
            expected = prompt_ids
            served = await self._generate([list(p) for p in prompt_ids], params)
        turns = []
        for i, (asked, local, (completion, version)) in enumerate(
            zip(prompt_ids, expected, served, strict=True)
        ):
            turns.append(
                SampledTurn(
                    prompt_ids=asked,
                    context_ids=self._verified_context(i, local, completion),
                    token_ids=tuple(int(t) for t in completion.token_ids),
                    logprobs=self._logprobs(completion, params),
                    text=self.text.response_text(completion.token_ids, params.stop),
                    finish_reason=completion.finish_reason,
                    weights_version=version,
                    sent_as="text" if self.sends_text else "token_ids",
                )
            )
        return turns

    async def _generate(self, prompts: list[Any], params: SamplingParams) -> list[tuple[Completion, int]]:
        """Each prompt's completion and the weights version it was sampled with."""
        if self.batcher is None:
            out = await self.backend.generate(prompts, params)
            if len(out.completions) != len(prompts):
                raise RuntimeError(
                    f"the backend returned {len(out.completions)} completions for {len(prompts)} prompts"
                )
            return [(completion, int(out.weights_version)) for completion in out.completions]
        served = await asyncio.gather(*(self.batcher.generate(prompt, params) for prompt in prompts))
        return [(s.completion, int(s.weights_version)) for s in served]

    def _verified_context(
        self, index: int, expected: tuple[int, ...], completion: Completion
    ) -> tuple[int, ...]:
        """The ids the sampler conditioned on: `expected` (the ids sent, or the local tokenizer's
        encoding of the text sent), checked against what the backend reports of its own."""
        if completion.prompt_token_ids is not None:
            reported = tuple(int(t) for t in completion.prompt_token_ids)
            if reported != expected:
                sent = "the local tokenizer makes of the text sent" if self.sends_text else "sent"
                first = next(
                    (k for k, (a, b) in enumerate(zip(reported, expected, strict=False)) if a != b), None
                )
                raise TokenizerMismatchError(
                    f"prompt {index}: the backend conditioned on {len(reported)} ids that differ from the "
                    f"{len(expected)} ids {sent} (first difference at position "
                    f"{min(len(reported), len(expected)) if first is None else first}): the adapter's tokenizer "
                    "must be the served model's"
                )
            return reported
        if not self.sends_text and not completion.prompt_len:
            return expected  # ids in, and the backend reports nothing of them (Cortex): it read those ids
        if completion.prompt_len != len(expected):
            raise TokenizerMismatchError(
                f"prompt {index}: the backend reports a prompt of {completion.prompt_len} tokens, the local "
                f"tokenizer makes {len(expected)} of the {'text' if self.sends_text else 'ids'} sent: the "
                "adapter's tokenizer must be the served model's (the framework's model path), or the turn's "
                "context cannot be known"
            )
        return expected

    @staticmethod
    def _logprobs(completion: Completion, params: SamplingParams) -> tuple[float, ...] | None:
        if not params.logprobs:
            return None
        if completion.logprobs is None or len(completion.logprobs) != len(completion.token_ids):
            raise RuntimeError(
                "the backend returned no per-token log-probs (or the wrong number) although asked"
            )
        return tuple(float(x) for x in completion.logprobs)
