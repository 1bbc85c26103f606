"""Keys of the integrations this project replaces (SkyRL's `trainer.arctic_rl.<knob>`, Arctic's verl
`remote_backend.*`), accepted as aliases of their core fields or rejected naming the replacement.

An adapter declares a `LegacyKeys` table; `resolve` splits the user's flat dotted keys into core
values (with a one-line notice per alias used), problems (keys whose meaning changed: the exact
replacement is named) and the keys that are not legacy (handed on to the core schema as they are).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from arctic_rl_core.config.errors import ConfigIssue
from arctic_rl_core.config.framework_fields import UNSET, FieldProblem


@dataclass(frozen=True)
class Alias:
    """Old key `old` means core field `core` (through `transform`, identity when None)."""

    old: str
    core: str
    transform: Callable[[Any], Any] | None = None
    how: str = ""


@dataclass(frozen=True)
class Replaced:
    """Old key `old` is rejected: `replacement` says exactly what to write instead, `why` why."""

    old: str
    replacement: str
    why: str


@dataclass(frozen=True)
class Noted:
    """Old key `old` has no core field: accepted where `accepts(value)` with the notice `note` (what
    already happens instead), otherwise rejected with `fix`."""

    old: str
    note: str
    accepts: Callable[[Any], bool]
    fix: str


LegacyEntry = Alias | Replaced | Noted


@dataclass
class LegacyResolution:
    values: dict[str, Any] = field(default_factory=dict)  # core dotted path -> value
    notices: list[str] = field(default_factory=list)
    issues: list[ConfigIssue] = field(default_factory=list)
    rest: dict[str, Any] = field(default_factory=dict)  # keys that are not legacy, as given


@dataclass
class LegacyKeys:
    """The legacy keys under one prefix (e.g. `trainer.arctic_rl`)."""

    prefix: str
    entries: Sequence[LegacyEntry]
    _by_old: dict[str, LegacyEntry] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.entries = tuple(self.entries)
        self._by_old = {}
        for entry in self.entries:
            if entry.old in self._by_old:
                raise ValueError(f"legacy key {self.prefix}.{entry.old} is listed twice")
            self._by_old[entry.old] = entry

    def __contains__(self, key: str) -> bool:
        return key in self._by_old

    def entry(self, old: str) -> LegacyEntry:
        """The entry of old key `old` (KeyError when it is not one)."""
        return self._by_old[old]

    def old_key_for(self, core: str) -> str | None:
        """The old key that aliases core field `core`, if any."""
        return next((e.old for e in self.entries if isinstance(e, Alias) and e.core == core), None)

    def resolve(self, flat: Mapping[str, Any]) -> LegacyResolution:
        """Split `flat` (dotted keys under the prefix -> values)."""
        result = LegacyResolution()
        for key, value in flat.items():
            entry = self._by_old.get(key)
            full = f"{self.prefix}.{key}"
            if entry is None:
                result.rest[key] = value
            elif isinstance(entry, Replaced):
                result.issues.append(
                    ConfigIssue(full, value, f"a key of the old integration; {entry.why}", entry.replacement)
                )
            elif isinstance(entry, Noted):
                if entry.accepts(value):
                    result.notices.append(f"{full} is the old integration's knob: {entry.note}")
                else:
                    result.issues.append(
                        ConfigIssue(full, value, f"a key of the old integration; {entry.note}", entry.fix)
                    )
            else:
                try:
                    mapped = value if entry.transform is None else entry.transform(value)
                except FieldProblem as problem:
                    result.issues.append(ConfigIssue(full, value, problem.problem, problem.fix))
                    continue
                if mapped is UNSET:
                    continue
                result.values[entry.core] = mapped
                how = f" ({entry.how})" if entry.how else ""
                result.notices.append(
                    f"{full} is the old integration's name: read as {self.prefix}.{entry.core}{how}; "
                    f"write {self.prefix}.{entry.core} to silence this notice"
                )
        return result

    def markdown(self, new_prefix: str | None = None) -> str:
        """README table: old key, new key, what changed."""
        new_prefix = new_prefix or self.prefix
        lines = ["| old key | new key | what changed |", "| --- | --- | --- |"]
        for entry in self.entries:
            old = f"`{self.prefix}.{entry.old}`"
            if isinstance(entry, Alias):
                lines.append(f"| {old} | `{new_prefix}.{entry.core}` | {_cell(entry.how or 'renamed')} |")
            elif isinstance(entry, Noted):
                lines.append(f"| {old} | (none) | {_cell(entry.note)}; otherwise: {_cell(entry.fix)} |")
            else:
                lines.append(f"| {old} | {_cell(entry.replacement)} | rejected: {_cell(entry.why)} |")
        return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
