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
with a stop token (EOS) finishes "stop", else "length". With stop strings (`sampling_params.stop`, a
multi-turn loop's, e.g. SkyRL-SQL's `</sql>`) a completion is served as FILE has it when a sampler could
have drawn it so: its text holds a stop string only at its very end (it finishes "stop", its text
without the stop string, as vLLM's `include_stop_str_in_output=False`); one whose text holds a stop
string before its last token is refused (400: vLLM would have stopped there, so serving it would be
something no sampler gives). Asked for log-probs (`logprobs=0`), the server reports the log-prob and
rank the sampler's current weights give each served token after its prompt (teacher-forced, in the
sampling job's `logprobs_mode`: what the sampler would have reported had it drawn those tokens). Top-k
alternatives (`logprobs > 0`) are refused.

FILE is read through pydantic models (`FixedRolloutsFile`, `FixedPrompt`, `FixedCompletion`: strict
types, no unknown keys); every problem found is reported at once, each naming its field (as
`prompts[i].completions[j].token_ids`), the value found and what to write instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator

FORMAT = "arctic-rl-fixed-rollouts/1"
MAX_PROBLEMS_SHOWN = 5  # a file with many bad entries: the first few, and how many more


class FixedRolloutsError(ValueError):
    """FILE is malformed, or a request cannot be served from it; the message says which and why."""


TokenId = Annotated[StrictInt, Field(ge=0)]


class FixedCompletion(BaseModel):
    """One completion of FILE: `{"token_ids": [...]}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token_ids: tuple[TokenId, ...] = Field(min_length=1)


class FixedPrompt(BaseModel):
    """One entry of FILE: the text that identifies its prompt and the completions served for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    contains: StrictStr = Field(min_length=1)
    completions: tuple[FixedCompletion, ...] = Field(min_length=1)


class FixedRolloutsFile(BaseModel):
    """FILE as a whole (`FORMAT`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal[FORMAT]
    prompts: tuple[FixedPrompt, ...] = Field(min_length=1)

    @field_validator("prompts")
    @classmethod
    def _each_text_once(cls, prompts: tuple[FixedPrompt, ...]) -> tuple[FixedPrompt, ...]:
        seen: set[str] = set()
        for i, entry in enumerate(prompts):
            if entry.contains in seen:
                raise ValueError(
                    f"prompts[{i}].contains={entry.contains!r} is listed twice: merge the two entries' "
                    "completions into one"
                )
            seen.add(entry.contains)
        return prompts


_KEYS = {  # the keys of each object of FILE, by the key that holds it (None: the document)
    None: tuple(FixedRolloutsFile.model_fields),
    "prompts": tuple(FixedPrompt.model_fields),
    "completions": tuple(FixedCompletion.model_fields),
}


def _path(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _found(loc: Sequence[Any], kind: str, value: Any) -> str:
    """What FILE has at `loc`: `path=value`, or `path missing`."""
    return f"{_path(loc)} missing" if kind == "missing" else f"{_path(loc)}={_shown(value)}"


_ENTRY = '{"contains": <text>, "completions": [...]}'


def _problem(item: Mapping[str, Any]) -> tuple[str, str]:
    """(the field it is about, what is wrong and how to fix it) for one pydantic error of FILE."""
    loc = tuple(item.get("loc", ()))
    kind = str(item.get("type", ""))
    found = _found(loc, kind, item.get("input"))
    keys = [part for part in loc if isinstance(part, str)]
    if kind == "extra_forbidden":
        known = ", ".join(repr(k) for k in _KEYS[keys[-2] if len(keys) > 1 else None])
        return _path(loc), f"{found}: unknown key (the keys here are {known})"
    if kind == "value_error":  # a check of FILE's own (`_each_text_once`)
        return _path(loc), str((item.get("ctx") or {}).get("error", item.get("msg")))
    if not loc:  # the document is no JSON object
        return "", (
            f"format={type(item.get('input')).__name__!r}, expected {FORMAT!r}: the file must be a JSON "
            f'object {{"format": {json.dumps(FORMAT)}, "prompts": [{_ENTRY}, ...]}}'
        )
    if loc == ("format",):
        return "format", f'{found}, expected {FORMAT!r}: set "format": {json.dumps(FORMAT)}'
    if loc == ("prompts",):
        if kind == "too_short":
            return "prompts", f"no prompts: list at least one {_ENTRY} entry"
        return "prompts", f"'prompts' must be a list of {_ENTRY} entries: {found}"
    where = _path(loc[:2])  # prompts[i]
    if len(loc) == 2:
        return where, f"{found} must be an object {_ENTRY}"
    if loc[2] == "contains":
        if kind == "string_too_short":
            return f"{where}.contains", f"{where}.contains is empty: give a text the prompt contains"
        return f"{where}.contains", f"{where} needs 'contains' (a string): {found}"
    if len(loc) == 3:  # prompts[i].completions
        if kind == "too_short":
            return f"{where}.completions", (
                f'{where} has no completions: list one {{"token_ids": [...]}} per request of the prompt'
            )
        return (
            f"{where}.completions",
            f'{where}.completions must be a list of {{"token_ids": [...]}}: {found}',
        )
    owner = _path(loc[:4]) + ".token_ids"  # prompts[i].completions[j].token_ids
    return owner, f"{owner} must be a non-empty list of token ids (integers >= 0): {found}"


def _file_error(source: str, error: ValidationError) -> FixedRolloutsError:
    """One message for every problem pydantic found (the first per field, at most MAX_PROBLEMS_SHOWN)."""
    problems: dict[str, str] = {}
    for item in error.errors(include_url=False):
        if item.get("type") == "too_short" and item.get("input"):
            continue  # pydantic counts the items that validated: the bad items are reported themselves
        field, message = _problem(item)
        problems.setdefault(field, message)
    shown = list(problems.values())[:MAX_PROBLEMS_SHOWN]
    more = len(problems) - len(shown)
    tail = f"; and {more} more" if more else ""
    if len(problems) == 1:
        return FixedRolloutsError(f"{source}: {shown[0]}")
    return FixedRolloutsError(f"{source}: {len(problems)} problems: " + "; ".join(shown) + tail)


@dataclass(frozen=True)
class ServedCompletion:
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str  # "stop" | "length"


class FixedRollouts:
    """The completions of FILE with a per-prompt counter of what has been served."""

    def __init__(self, file: FixedRolloutsFile, *, source: str = "fixed rollouts") -> None:
        self.source = source
        self.prompts = file.prompts
        self._served = [0] * len(self.prompts)

    @classmethod
    def from_document(cls, document: Any, *, source: str = "fixed rollouts") -> FixedRollouts:
        try:
            file = FixedRolloutsFile.model_validate(document)
        except ValidationError as err:
            raise _file_error(source, err) from None
        return cls(file, source=source)

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
            for j, completion in enumerate(entry.completions):
                bad = [t for t in completion.token_ids if t >= vocab_size]
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
        stop: Sequence[str] = (),
    ) -> list[ServedCompletion]:
        """The next completion of each prompt, in request order; nothing is counted if any prompt of
        the request cannot be served (one a stop string would have cut short included)."""
        picks = []
        planned = list(self._served)
        for prompt in prompts:
            matches = [i for i, e in enumerate(self.prompts) if e.contains in prompt]
            if len(matches) != 1:
                which = "no entry" if not matches else f"{len(matches)} entries ({matches})"
                raise FixedRolloutsError(
                    f"{self.source}: prompt {_shown_prompt(prompt)} matches {which}: each prompt must contain the "
                    "'contains' text of exactly one entry"
                )
            (i,) = matches
            entry = self.prompts[i]
            if planned[i] >= len(entry.completions):
                raise FixedRolloutsError(
                    f"{self.source}: prompt {_shown_prompt(entry.contains)} asked for completion {planned[i] + 1} but "
                    f"the file has {len(entry.completions)}: the run generates more than the fixed rollouts "
                    "planned (an extra step, validation, or more samples per prompt)"
                )
            ids = entry.completions[planned[i]].token_ids[:max_tokens]
            early = [s for s in stop if s in decode(list(ids[:-1]))]
            if early:
                raise FixedRolloutsError(
                    f"{self.source}: prompt {_shown_prompt(entry.contains)} completion {planned[i] + 1} holds the stop "
                    f"string {early[0]!r} before its last token: a sampler asked to stop there would have; end the "
                    "completion at the stop string, or send no stop strings"
                )
            picks.append((entry.completions[planned[i]].token_ids, ids))
            planned[i] += 1
        self._served = planned
        out = []
        for ids, cut in picks:
            text = decode(list(cut))
            at = min((text.find(s) for s in stop if s in text), default=-1)
            if at >= 0:
                out.append(ServedCompletion(cut, text[:at], "stop"))
                continue
            finish = "stop" if len(cut) == len(ids) and cut[-1] in stop_ids else "length"
            out.append(ServedCompletion(cut, text, finish))
        return out


def _shown_prompt(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
