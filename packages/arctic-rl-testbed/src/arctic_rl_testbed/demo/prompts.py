"""Chat prompts -> token ids, the way the frameworks' generators do it (the tokenizer's chat
template with the generation prompt), so warm start, evaluation and GRPO see the same tokens."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def prompt_ids(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
    if isinstance(ids, Mapping):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def response_ids(tokenizer: Any, text: str) -> list[int]:
    """A supervised answer's tokens, ended by the eos token (what ends a sampled answer)."""
    return [*tokenizer.encode(text, add_special_tokens=False), int(tokenizer.eos_token_id)]


def prompt_text(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> str:
    """The same chat-templated prompt as text: what the Arctic on-prem server takes."""
    return str(tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False))
