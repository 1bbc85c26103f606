"""A framework's own config fields, classified and mapped onto the core schema.

Each adapter declares ONE table (`FieldTable`) over every leaf of its framework's config. A leaf is
exactly one of:

- `Mapped`: feeds a core field, with its transform (`Derived` when a core value needs several
  framework fields, e.g. GPUs = GPUs per node x nodes);
- `Rejected`: accepted only at the framework's default (or a value `accepts` allows); any other
  value is a problem naming the field, the value and the fix;
- `NotApplicable`: has no meaning on the Arctic path (critic, FSDP wrap policy, ...); a value
  other than the default is listed at startup with the reason, never silently dropped;
- `PassedThrough`: the framework keeps using it itself (logging, data loading, schedule).

An entry's `field` may name a subtree (`trainer.critic`): it classifies every leaf below it that
has no entry of its own. The same table drives the translation (`translate`), the startup report
(`Translation.not_applied`), the README table (`markdown`) and the "every leaf is classified"
test (`check_complete` over the installed framework's leaves).

Nothing here knows a framework: the adapter gives a reader of its config (`Reader`: dotted
path -> value), a reader of the framework's defaults and the list of leaf paths.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from arctic_rl_core.config.errors import ConfigIssue

Reader = Callable[[str], Any]
"""Reads one framework field by its dotted path."""


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""Returned by a transform to leave the core field at the core default."""


class FieldProblem(Exception):
    """Raised by a transform: the framework value cannot be mapped. `field` defaults to the entry's."""

    def __init__(self, problem: str, fix: str, *, field: str | None = None, value: Any = UNSET):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        self.field = field
        self.value = value


@dataclass(frozen=True)
class Mapped:
    """Framework `field` -> core `core`, through `transform` (identity when None)."""

    field: str
    core: str
    transform: Callable[[Any], Any] | None = None
    how: str = ""

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.field,)

    def compute(self, read: Reader) -> Any:
        value = read(self.field)
        return value if self.transform is None else self.transform(value)


@dataclass(frozen=True)
class Derived:
    """Core `core` computed from several framework fields (`sources`), each of them mapped."""

    core: str
    sources: tuple[str, ...]
    compute: Callable[[Reader], Any]
    how: str


@dataclass(frozen=True)
class Rejected:
    """Accepted at the framework default (or where `accepts(value)`); otherwise a problem."""

    field: str
    fix: str
    why: str = "not supported on the Arctic path"
    accepts: Callable[[Any], bool] | None = None


@dataclass(frozen=True)
class NotApplicable:
    """No meaning on the Arctic path; a non-default value is reported at startup with `reason`."""

    field: str
    reason: str


@dataclass(frozen=True)
class PassedThrough:
    """The framework itself keeps using the field (`to` says what for)."""

    field: str
    to: str


Entry = Mapped | Derived | Rejected | NotApplicable | PassedThrough
Classification = Mapped | Rejected | NotApplicable | PassedThrough
KIND_NAMES: dict[type, str] = {
    Mapped: "mapped",
    Derived: "mapped",
    Rejected: "rejected unless default",
    NotApplicable: "not applicable",
    PassedThrough: "passed through",
}


@dataclass(frozen=True)
class NotAppliedSetting:
    """A framework setting with a non-default value that the Arctic path does not use."""

    field: str
    value: Any
    reason: str


@dataclass
class Translation:
    """What a framework config becomes: core values (dotted), problems, settings not applied."""

    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    issues: list[ConfigIssue] = dataclasses.field(default_factory=list)
    not_applied: list[NotAppliedSetting] = dataclasses.field(default_factory=list)

    def core_data(self) -> dict[str, Any]:
        """The values as the nested mapping `ArcticRLConfig.from_dict` takes."""
        return nest(self.values)


def nest(values: Mapping[str, Any]) -> dict[str, Any]:
    """`{"a.b": 1}` -> `{"a": {"b": 1}}`."""
    data: dict[str, Any] = {}
    for key, value in values.items():
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return data


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".")


@dataclass
class FieldTable:
    """Every framework field of one adapter, classified (see the module docstring)."""

    framework: str
    entries: Sequence[Entry]
    _by_field: dict[str, list[Entry]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.entries = tuple(self.entries)
        self._by_field = {}
        for entry in self.entries:
            for name in self._fields_of(entry):
                self._by_field.setdefault(name, []).append(entry)
        problems = []
        for name, found in self._by_field.items():
            kinds = {KIND_NAMES[type(e)] for e in found}
            if len(kinds) > 1:
                problems.append(f"{name}: classified as {' and '.join(sorted(kinds))}")
            elif len(found) > 1 and kinds != {"mapped"}:
                problems.append(f"{name}: classified {len(found)} times")
        if problems:
            raise ValueError(f"{self.framework} field table is ambiguous:\n  " + "\n  ".join(problems))

    @staticmethod
    def _fields_of(entry: Entry) -> tuple[str, ...]:
        return entry.sources if isinstance(entry, (Mapped, Derived)) else (entry.field,)

    # -- classification ---------------------------------------------------------------------------
    def entries_for(self, path: str) -> list[Entry]:
        """The entries classifying `path`: its own, else the closest subtree entry's."""
        if path in self._by_field:
            return self._by_field[path]
        parts = path.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            found = self._by_field.get(".".join(parts[:cut]))
            if found:
                return found
        return []

    def kind_of(self, path: str) -> str | None:
        found = self.entries_for(path)
        return KIND_NAMES[type(found[0])] if found else None

    def unclassified(self, leaves: Iterable[str]) -> list[str]:
        """Leaves no entry classifies (each one would be silently ignored)."""
        return sorted(leaf for leaf in leaves if not self.entries_for(leaf))

    def stale(self, leaves: Iterable[str]) -> list[str]:
        """Entries naming a field that is no leaf and covers no leaf (the framework dropped it)."""
        leaves = list(leaves)
        return sorted(name for name in self._by_field if not any(_under(leaf, name) for leaf in leaves))

    def check_complete(self, leaves: Iterable[str]) -> None:
        """Raise AssertionError listing every unclassified leaf and every stale entry."""
        leaves = list(leaves)
        missing = self.unclassified(leaves)
        stale = self.stale(leaves)
        if missing or stale:
            lines = [f"{self.framework}: the field table does not match the installed config"]
            if missing:
                lines.append(f"{len(missing)} unclassified field(s) (add an entry for each):")
                lines.extend(f"  {name}" for name in missing)
            if stale:
                lines.append(f"{len(stale)} entry(ies) naming no field of the installed config:")
                lines.extend(f"  {name}" for name in stale)
            raise AssertionError("\n".join(lines))

    def core_fields(self) -> set[str]:
        return {e.core for e in self.entries if isinstance(e, (Mapped, Derived))}

    def sources_of(self, core: str) -> tuple[str, ...]:
        """The framework fields that feed core field `core`."""
        found: list[str] = []
        for entry in self.entries:
            if isinstance(entry, (Mapped, Derived)) and entry.core == core:
                found.extend(s for s in entry.sources if s not in found)
        return tuple(found)

    # -- translation ------------------------------------------------------------------------------
    def translate(self, read: Reader, default: Reader, leaves: Iterable[str]) -> Translation:
        """Map every field: core values, every problem at once, the non-default settings not applied."""
        result = Translation()
        for entry in self.entries:
            if isinstance(entry, (Mapped, Derived)):
                try:
                    value = entry.compute(read)
                except FieldProblem as problem:
                    where = problem.field or entry.sources[0]
                    shown = read(where) if problem.value is UNSET else problem.value
                    result.issues.append(ConfigIssue(where, shown, problem.problem, problem.fix))
                    continue
                if value is not UNSET:
                    result.values[entry.core] = value
        for leaf in leaves:
            found = self.entries_for(leaf)
            if not found or isinstance(found[0], (Mapped, Derived, PassedThrough)):
                continue
            value = read(leaf)
            if _same(value, default(leaf)):
                continue
            entry = found[0]
            if isinstance(entry, Rejected):
                if entry.accepts is None or not entry.accepts(value):
                    result.issues.append(ConfigIssue(leaf, value, entry.why, entry.fix))
            else:
                result.not_applied.append(NotAppliedSetting(leaf, value, entry.reason))
        return result

    def in_framework_terms(self, issue: ConfigIssue, *, extension_prefix: str | None = None) -> ConfigIssue:
        """A core validation issue named by the framework field(s) to change. A core path no
        framework field feeds is shown under `extension_prefix` (the adapter's own subtree)."""
        core = issue.path
        sources = self.sources_of(core)
        if sources:
            names = " / ".join(sources)
            return dataclasses.replace(
                issue,
                path=f"{names} (core {core})",
                remedy=f"{issue.remedy} (in {self.framework}: set {names})",
            )
        if extension_prefix and core:
            return dataclasses.replace(issue, path=f"{extension_prefix}.{core}")
        return issue

    # -- documentation ----------------------------------------------------------------------------
    def markdown(self) -> str:
        """The README table: one row per entry, in table order."""
        lines = [
            f"| {self.framework} field | how | core field / reason / fix |",
            "| --- | --- | --- |",
        ]
        for entry in self.entries:
            if isinstance(entry, Mapped):
                names, how = f"`{entry.field}`", entry.how or "as is"
                target = f"`{entry.core}`"
            elif isinstance(entry, Derived):
                names = ", ".join(f"`{s}`" for s in entry.sources)
                how, target = entry.how, f"`{entry.core}`"
            elif isinstance(entry, Rejected):
                names, how, target = (
                    f"`{entry.field}`",
                    "rejected unless default",
                    f"{entry.why}; {entry.fix}",
                )
            elif isinstance(entry, NotApplicable):
                names, how, target = f"`{entry.field}`", "not applicable", entry.reason
            else:
                names, how, target = f"`{entry.field}`", "passed through", entry.to
            lines.append(f"| {names} | {_cell(how)} | {_cell(target)} |")
        return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _same(value: Any, default: Any) -> bool:
    try:
        return bool(value == default)
    except Exception:  # e.g. arrays: compare their text
        return repr(value) == repr(default)


def replace_marked_section(text: str, name: str, body: str) -> str:
    """`text` with the lines between `<!-- {name}:start -->` and `<!-- {name}:end -->` replaced."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    i, j = text.find(start), text.find(end)
    if i < 0 or j < 0 or j < i:
        raise ValueError(f"the markers {start} ... {end} are missing or out of order")
    return f"{text[: i + len(start)]}\n{body}{text[j:]}"


def marked_section(text: str, name: str) -> str:
    """What lies between the markers of `name` (see `replace_marked_section`)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    i, j = text.find(start), text.find(end)
    if i < 0 or j < 0 or j < i:
        raise ValueError(f"the markers {start} ... {end} are missing or out of order")
    return text[i + len(start) + 1 : j]
