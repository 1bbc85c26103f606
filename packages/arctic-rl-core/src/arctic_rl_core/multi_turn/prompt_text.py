"""Token ids <-> the text a text-only server tokenises, with one tokenizer.

The Arctic on-prem server (arctic-platform 0.1.4) takes text prompts only and tokenises them the way
vLLM does: `tokenizer.encode(text)`, special tokens added (`add_special_tokens=True`). So a context
held as token ids is sent as `decode(ids)` without the tokens the tokenizer adds by itself (e.g. a
BOS it would add again), and the ids the server conditions on are `encode(decode(ids))`: the same
ids exactly when the ids are the tokenizer's own encoding of their text. Ids a model sampled need not
be (a byte-level BPE can spell one text several ways, and the boundary between two pieces may merge):
`server_ids` says what the server will see, so a caller can tell before and after sending.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_PROBE = "a"  # any text: the tokenizer's added prefix/suffix tokens are what surrounds its encoding


class PromptText:
    """`to_text(ids)` for a text-only server and `server_ids(text)`, what it makes of the text."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        plain = list(tokenizer.encode(_PROBE, add_special_tokens=False))
        full = list(tokenizer.encode(_PROBE, add_special_tokens=True))
        at = _find(full, plain)
        if at < 0:
            raise ValueError(
                f"the tokenizer encodes {_PROBE!r} as {plain} without special tokens but {full} with them: "
                "cannot tell which tokens it adds by itself"
            )
        self.added_prefix = tuple(full[:at])  # e.g. (bos,)
        self.added_suffix = tuple(full[at + len(plain) :])  # e.g. (eos,) for tokenizers that add one

    def to_text(self, ids: Sequence[int]) -> str:
        """The text to send for `ids`: their decoding (special tokens kept as text), without the
        tokens the server's `encode` adds itself when `ids` already start / end with them."""
        body = [int(t) for t in ids]
        prefix, suffix = list(self.added_prefix), list(self.added_suffix)
        if prefix and body[: len(prefix)] == prefix:
            body = body[len(prefix) :]
        if suffix and len(body) >= len(suffix) and body[-len(suffix) :] == suffix:
            body = body[: -len(suffix)]
        return self.tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def server_ids(self, text: str) -> tuple[int, ...]:
        """The ids a server that tokenises `text` as vLLM does conditions on."""
        return tuple(int(t) for t in self.tokenizer.encode(text, add_special_tokens=True))

    def response_text(self, token_ids: Sequence[int], stop: Sequence[str]) -> str:
        """The text of sampled ids as vLLM reports it with SkyRL's settings (`skip_special_tokens=True`,
        `include_stop_str_in_output=True`): the decoding, cut just after the first stop string in it
        (a last token may carry text past the stop string; vLLM drops that text, not the token)."""
        text = self.tokenizer.decode(list(token_ids), skip_special_tokens=True)
        found = [(at, at + len(s)) for s in stop if s and (at := text.find(s)) >= 0]
        return text[: min(found)[1]] if found else text


def _find(haystack: list[int], needle: list[int]) -> int:
    for start in range(len(haystack) - len(needle) + 1):
        if haystack[start : start + len(needle)] == needle:
            return start
    return -1
