"""`arctic-rl serve --reference --fixed-rollouts FILE`: `/generate` answers with completions read from
FILE instead of sampling them. A documented difference from the real 0.1.4 server, for the parity
suite: two frameworks' trainers driven over the wire must see the same rollouts, and a sampler cannot
give them that (it draws once per call; verl's replica groups requests by arrival time, so what one
call holds depends on timing; a per-request seed would make every sample of a prompt the same).

FILE (JSON, `FORMAT`):

    {"format": "arctic-rl-fixed-rollouts/1",
     "prompts": [{"contains": "<text>", "completions": [{"token_ids": [...]}, ...]}, ...]}

A prompt of a generate request is served by the one entry whose `contains` it contains (zero or
several: 400 naming the prompt). The entry's completions go out in order of arrival: the k-th request
of that prompt (counted over the server's life, across calls and clients) gets completion k; one more
request than completions is refused (400), so an unplanned generate never passes unnoticed. Which of a
group's identical prompts gets which completion depends on arrival order; the parity comparison
canonicalises row order within a group (`parity.trace_diff`).

Everything else is the sampling route's: the body and sampling parameters are checked as for sampling
(`sampling_params.n`, unknown keys, non-neutral values), the state guard refuses a generate while the
sampler sleeps or after a sync without a prefix-cache reset, and the result carries the weights
version. A completion longer than `max_tokens` is cut there (`finish_reason` "length"); one that ends
with a stop token (EOS) finishes "stop", else "length". Asked for log-probs (`logprobs=0`), the server
reports the log-prob and rank the sampler's current weights give each served token after its prompt
(teacher-forced, in the sampling job's `logprobs_mode`: what the sampler would have reported had it
drawn those tokens). Top-k alternatives (`logprobs > 0`) and stop strings are refused: cutting a
completion at a stop string would serve something else than FILE says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "arctic-rl-fixed-rollouts/1"


class FixedRolloutsError(ValueError):
    """FILE is malformed, or a request cannot be served from it; the message says which and why."""


@dataclass(frozen=True)
class FixedPrompt:
    contains: str
    completions: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class ServedCompletion:
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str  # "stop" | "length"


class FixedRollouts:
    """The completions of FILE with a per-prompt counter of what has been served."""

    def __init__(self, prompts: Sequence[FixedPrompt], *, source: str = "fixed rollouts") -> None:
        self.source = source
        self.prompts = tuple(prompts)
        if not self.prompts:
            raise FixedRolloutsError(f"{source}: no prompts")
        seen: set[str] = set()
        for i, entry in enumerate(self.prompts):
            if not entry.contains:
                raise FixedRolloutsError(f"{source}: prompts[{i}].contains is empty")
            if entry.contains in seen:
                raise FixedRolloutsError(
                    f"{source}: prompts[{i}].contains={entry.contains!r} is listed twice"
                )
            seen.add(entry.contains)
            if not entry.completions:
                raise FixedRolloutsError(f"{source}: prompts[{i}] has no completions")
        self._served = [0] * len(self.prompts)

    @classmethod
    def from_document(cls, document: Any, *, source: str = "fixed rollouts") -> FixedRollouts:
        if not isinstance(document, Mapping) or document.get("format") != FORMAT:
            found = document.get("format") if isinstance(document, Mapping) else type(document).__name__
            raise FixedRolloutsError(f"{source}: format={found!r}, expected {FORMAT!r}")
        raw = document.get("prompts")
        if not isinstance(raw, list):
            raise FixedRolloutsError(f"{source}: 'prompts' must be a list")
        prompts = []
        for i, entry in enumerate(raw):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("contains"), str):
                raise FixedRolloutsError(f"{source}: prompts[{i}] needs 'contains' (a string)")
            completions = entry.get("completions")
            if not isinstance(completions, list):
                raise FixedRolloutsError(f"{source}: prompts[{i}].completions must be a list")
            ids = []
            for j, completion in enumerate(completions):
                tokens = completion.get("token_ids") if isinstance(completion, Mapping) else None
                if (
                    not isinstance(tokens, list)
                    or not tokens
                    or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens)
                ):
                    raise FixedRolloutsError(
                        f"{source}: prompts[{i}].completions[{j}].token_ids must be a non-empty list of "
                        "token ids (integers >= 0)"
                    )
                ids.append(tuple(tokens))
            prompts.append(FixedPrompt(entry["contains"], tuple(ids)))
        return cls(prompts, source=source)

    @classmethod
    def load(cls, path: str | Path) -> FixedRollouts:
        path = Path(path)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except OSError as err:
            raise FixedRolloutsError(f"--fixed-rollouts {path}: cannot read it ({err})") from None
        except ValueError as err:
            raise FixedRolloutsError(f"--fixed-rollouts {path}: not JSON ({err})") from None
        return cls.from_document(document, source=f"--fixed-rollouts {path}")

    def check_vocabulary(self, vocab_size: int) -> None:
        """Every token id must exist in the served model's vocabulary."""
        for i, entry in enumerate(self.prompts):
            for j, ids in enumerate(entry.completions):
                bad = [t for t in ids if t >= vocab_size]
                if bad:
                    raise FixedRolloutsError(
                        f"{self.source}: prompts[{i}].completions[{j}] has token ids {bad[:3]} outside the "
                        f"model's vocabulary [0, {vocab_size})"
                    )

    def served(self) -> dict[str, int]:
        """How many completions of each prompt have been served."""
        return {e.contains: n for e, n in zip(self.prompts, self._served, strict=True)}

    def serve(
        self,
        prompts: Sequence[str],
        *,
        max_tokens: int,
        stop_ids: frozenset[int],
        decode: Any,
    ) -> list[ServedCompletion]:
        """The next completion of each prompt, in request order; nothing is counted if any prompt of
        the request cannot be served."""
        picks = []
        planned = list(self._served)
        for prompt in prompts:
            matches = [i for i, e in enumerate(self.prompts) if e.contains in prompt]
            if len(matches) != 1:
                which = "no entry" if not matches else f"{len(matches)} entries ({matches})"
                raise FixedRolloutsError(
                    f"{self.source}: prompt {_shown(prompt)} matches {which}: each prompt must contain the "
                    "'contains' text of exactly one entry"
                )
            (i,) = matches
            entry = self.prompts[i]
            if planned[i] >= len(entry.completions):
                raise FixedRolloutsError(
                    f"{self.source}: prompt {_shown(entry.contains)} asked for completion {planned[i] + 1} but "
                    f"the file has {len(entry.completions)}: the run generates more than the fixed rollouts "
                    "planned (an extra step, validation, or more samples per prompt)"
                )
            picks.append(entry.completions[planned[i]])
            planned[i] += 1
        self._served = planned
        out = []
        for ids in picks:
            cut = ids[:max_tokens]
            finish = "stop" if len(cut) == len(ids) and cut[-1] in stop_ids else "length"
            out.append(ServedCompletion(cut, decode(list(cut)), finish))
        return out


def _shown(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
