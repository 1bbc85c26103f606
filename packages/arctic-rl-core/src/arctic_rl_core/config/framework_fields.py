"""The one field-table mechanism of the adapters: a framework's config fields, classified, mapped
onto the core schema and checked, declared as data.

Each adapter declares ONE `FieldTable` over every leaf of its framework's config:

- rows (`Row`, built by `mapped`, `derived`, `rejected`, `not_applicable`, `passed_through`): one
  per framework field (or subtree: `trainer.critic` classifies every leaf below it that has no row
  of its own). A row names the framework field(s), its classification (`Kind`), the core field it
  feeds and the named transform that computes the core value, or the reason and the fix;
- rules (`Rule`): checks across several fields (the inputs), each with its problem and fix;
- notices (`Notice`): what a combination of settings means on the Arctic path, said at startup.

Transforms, rule checks and notices are named functions of the adapter's `field_transforms`
module (a transform may raise `FieldProblem`; it returns `UNSET` to leave the core default).
`FieldTable.translate` evaluates everything in one round: the core values, every problem (never
stopping at the first), the non-default settings that do not apply and the startup notices. The
same rows give the README table (`markdown`) and the "every leaf is classified" test
(`check_complete` over the installed framework's leaves).

Nothing here knows a framework: the adapter gives a reader of its config (`Reader`: dotted path ->
value), a reader of the framework's defaults and the list of leaf paths.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from arctic_rl_core.config.errors import ConfigIssue, all_leaf_paths
from arctic_rl_core.config.run_config import ArcticRLConfig

Reader = Callable[[str], Any]
"""Reads one framework field by its dotted path."""


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""Returned by a transform to leave the core field at the core default."""


class FieldProblem(Exception):
    """Raised by a transform: the framework value cannot be mapped. `field` defaults to the row's."""

    def __init__(self, problem: str, fix: str, *, field: str | None = None, value: Any = UNSET):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        self.field = field
        self.value = value


# -- rows ----------------------------------------------------------------------------------------


class Kind(StrEnum):
    """How a framework field is treated on the Arctic path."""

    MAPPED = "mapped"  # feeds a core field
    REJECTED = "rejected unless default"  # any other value is a problem with its fix
    NOT_APPLICABLE = "not applicable"  # no meaning here: a non-default value is listed at startup
    PASSED_THROUGH = "passed through"  # the framework itself keeps using it


@dataclass(frozen=True)
class Row:
    """One row of a field table (build it with `mapped`, `derived`, `rejected`, `not_applicable` or
    `passed_through`). `reason` is the how of a mapped row, the why of a rejected one, the reason of
    a not applicable one and what a passed-through field is used for."""

    kind: Kind
    fields: tuple[str, ...]
    core: str = ""
    transform: Callable[[Any], Any] | None = None  # one field's value -> the core value
    compute: Callable[[Reader], Any] | None = None  # several fields (read) -> the core value
    reason: str = ""
    fix: str = ""
    accepts: Callable[[Any], bool] | None = None  # rejected: non-default values allowed after all

    @property
    def field(self) -> str:
        return self.fields[0]

    def core_value(self, read: Reader) -> Any:
        if self.compute is not None:
            return self.compute(read)
        value = read(self.field)
        return value if self.transform is None else self.transform(value)


def mapped(field: str, core: str, transform: Callable[[Any], Any] | None = None, how: str = "") -> Row:
    """Framework `field` -> core `core`, through `transform` (as is when None)."""
    return Row(Kind.MAPPED, (field,), core, transform=transform, reason=how)


def derived(core: str, fields: tuple[str, ...], compute: Callable[[Reader], Any], how: str) -> Row:
    """Core `core` computed from several framework fields (`compute` reads them), each of them mapped."""
    return Row(Kind.MAPPED, tuple(fields), core, compute=compute, reason=how)


NOT_SUPPORTED = "not supported on the Arctic path"


def rejected(
    field: str, fix: str, why: str = NOT_SUPPORTED, accepts: Callable[[Any], bool] | None = None
) -> Row:
    """Accepted at the framework default (or where `accepts(value)`); otherwise a problem."""
    return Row(Kind.REJECTED, (field,), reason=why, fix=fix, accepts=accepts)


def not_applicable(field: str, reason: str) -> Row:
    """No meaning on the Arctic path; a non-default value is reported at startup with `reason`."""
    return Row(Kind.NOT_APPLICABLE, (field,), reason=reason)


def passed_through(field: str, to: str) -> Row:
    """The framework itself keeps using the field (`to` says what for)."""
    return Row(Kind.PASSED_THROUGH, (field,), reason=to)


# -- rules and notices ---------------------------------------------------------------------------


class Fields:
    """A framework config as rules and notices read it: `fields(path)` is a value,
    `fields.default(path)` the framework's default, `fields.changed(path)` whether they differ."""

    def __init__(self, read: Reader, default: Reader) -> None:
        self.read, self.default = read, default

    def __call__(self, path: str) -> Any:
        return self.read(path)

    def changed(self, path: str) -> bool:
        return not _same(self.read(path), self.default(path))


@dataclass(frozen=True)
class Found:
    """What a rule's check found: the field and value to report (the rule's first input and its
    value unless named) and the names its problem and fix templates use (`{name}`)."""

    field: str | None = None
    value: Any = UNSET
    names: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    """A check across framework fields. `check(fields)` returns a falsy value when the settings
    agree, else `True` or a `Found`: one problem, `problem` and `fix` (templates over `Found.names`)."""

    name: str
    inputs: tuple[str, ...]
    check: Callable[[Fields], Found | bool | None]
    problem: str
    fix: str

    def evaluate(self, fields: Fields) -> ConfigIssue | None:
        found = self.check(fields)
        if not found:
            return None
        found = found if isinstance(found, Found) else Found()
        where = found.field or self.inputs[0]
        value = fields(where) if found.value is UNSET else found.value
        names = dict(found.names)
        problem = self.problem.format_map(names) if names else self.problem
        fix = self.fix.format_map(names) if names else self.fix
        return ConfigIssue(where, value, problem, fix)


@dataclass(frozen=True)
class Notice:
    """What a combination of settings means on the Arctic path, said at startup: `say(fields)`
    returns the notice, or None when it has nothing to say."""

    name: str
    inputs: tuple[str, ...]
    say: Callable[[Fields], str | None]


# -- evaluation ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NotAppliedSetting:
    """A framework setting with a non-default value that the Arctic path does not use."""

    field: str
    value: Any
    reason: str


@dataclass
class Translation:
    """What a framework config becomes: core values (dotted), the rows' problems, the rules'
    problems, the settings not applied and the startup notices."""

    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    issues: list[ConfigIssue] = dataclasses.field(default_factory=list)
    rule_issues: list[ConfigIssue] = dataclasses.field(default_factory=list)
    not_applied: list[NotAppliedSetting] = dataclasses.field(default_factory=list)
    notices: list[str] = dataclasses.field(default_factory=list)

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
    """Every framework field of one adapter, classified, and its rules (see the module docstring)."""

    framework: str
    rows: Sequence[Row]
    rules: Sequence[Rule] = ()
    notices: Sequence[Notice] = ()
    _by_field: dict[str, list[Row]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rows, self.rules, self.notices = tuple(self.rows), tuple(self.rules), tuple(self.notices)
        self._by_field = {}
        for row in self.rows:
            for name in row.fields:
                self._by_field.setdefault(name, []).append(row)
        problems = []
        for name, found in self._by_field.items():
            kinds = {row.kind for row in found}
            if len(kinds) > 1:
                problems.append(f"{name}: classified as {' and '.join(sorted(kinds))}")
            elif len(found) > 1 and kinds != {Kind.MAPPED}:
                problems.append(f"{name}: classified {len(found)} times")
        names = [check.name for check in (*self.rules, *self.notices)]
        problems += [
            f"rule {name}: declared twice" for name in sorted({n for n in names if names.count(n) > 1})
        ]
        for check in (*self.rules, *self.notices):
            problems += [
                f"rule {check.name}: reads {name}, which no row classifies"
                for name in check.inputs
                if not name.startswith("@") and not self.rows_for(name)
            ]
        if problems:
            raise ValueError(f"{self.framework} field table is ambiguous:\n  " + "\n  ".join(problems))

    # -- classification ---------------------------------------------------------------------------
    def rows_for(self, path: str) -> list[Row]:
        """The rows classifying `path`: its own, else the closest subtree row's."""
        if path in self._by_field:
            return self._by_field[path]
        parts = path.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            found = self._by_field.get(".".join(parts[:cut]))
            if found:
                return found
        return []

    def kind_of(self, path: str) -> Kind | None:
        found = self.rows_for(path)
        return found[0].kind if found else None

    def unclassified(self, leaves: Iterable[str]) -> list[str]:
        """Leaves no row classifies (each one would be silently ignored)."""
        return sorted(leaf for leaf in leaves if not self.rows_for(leaf))

    def stale(self, leaves: Iterable[str]) -> list[str]:
        """Rows naming a field that is no leaf and covers no leaf (the framework dropped it)."""
        leaves = list(leaves)
        return sorted(name for name in self._by_field if not any(_under(leaf, name) for leaf in leaves))

    def stale_inputs(self, leaves: Iterable[str]) -> list[str]:
        """Rule and notice inputs that are no field of the config (nor inside a leaf mapping)."""
        leaves = list(leaves)
        return sorted(
            f"{check.name}: {name}"
            for check in (*self.rules, *self.notices)
            for name in check.inputs
            if not name.startswith("@")
            and not any(_under(leaf, name) or _under(name, leaf) for leaf in leaves)
        )

    def check_complete(self, leaves: Iterable[str]) -> None:
        """Raise AssertionError listing every unclassified leaf, stale row and stale rule input."""
        leaves = list(leaves)
        missing, stale, inputs = self.unclassified(leaves), self.stale(leaves), self.stale_inputs(leaves)
        if missing or stale or inputs:
            lines = [f"{self.framework}: the field table does not match the installed config"]
            if missing:
                lines.append(f"{len(missing)} unclassified field(s) (add a row for each):")
                lines.extend(f"  {name}" for name in missing)
            if stale:
                lines.append(f"{len(stale)} row(s) naming no field of the installed config:")
                lines.extend(f"  {name}" for name in stale)
            if inputs:
                lines.append(f"{len(inputs)} rule input(s) naming no field of the installed config:")
                lines.extend(f"  {name}" for name in inputs)
            raise AssertionError("\n".join(lines))

    def core_fields(self) -> set[str]:
        return {row.core for row in self.rows if row.kind is Kind.MAPPED}

    def sources_of(self, core: str) -> tuple[str, ...]:
        """The framework fields that feed core field `core`."""
        found: list[str] = []
        for row in self.rows:
            if row.kind is Kind.MAPPED and row.core == core:
                found.extend(s for s in row.fields if s not in found)
        return tuple(found)

    def functions(self) -> list[Callable[..., Any]]:
        """Every function the table calls: transforms, computes, accepts, rule checks, notices."""
        found = [
            fn for row in self.rows for fn in (row.transform, row.compute, row.accepts) if fn is not None
        ]
        return [*found, *(rule.check for rule in self.rules), *(notice.say for notice in self.notices)]

    # -- evaluation -------------------------------------------------------------------------------
    def translate(self, read: Reader, default: Reader, leaves: Iterable[str]) -> Translation:
        """Evaluate the table: core values, every problem at once, the non-default settings not
        applied and the startup notices."""
        result = Translation()
        for row in self.rows:
            if row.kind is not Kind.MAPPED:
                continue
            try:
                value = row.core_value(read)
            except FieldProblem as problem:
                where = problem.field or row.field
                shown = read(where) if problem.value is UNSET else problem.value
                result.issues.append(ConfigIssue(where, shown, problem.problem, problem.fix))
                continue
            if value is not UNSET:
                result.values[row.core] = value
        for leaf in leaves:
            found = self.rows_for(leaf)
            if not found or found[0].kind in (Kind.MAPPED, Kind.PASSED_THROUGH):
                continue
            value = read(leaf)
            if _same(value, default(leaf)):
                continue
            row = found[0]
            if row.kind is Kind.NOT_APPLICABLE:
                result.not_applied.append(NotAppliedSetting(leaf, value, row.reason))
            elif row.accepts is None or not row.accepts(value):
                result.issues.append(ConfigIssue(leaf, value, row.reason, row.fix))
        fields = Fields(read, default)
        result.rule_issues = self.check_rules(fields)
        result.notices = [text for notice in self.notices if (text := notice.say(fields))]
        return result

    def check_rules(self, fields: Fields) -> list[ConfigIssue]:
        """The problems the rules find (all of them)."""
        return [issue for rule in self.rules if (issue := rule.evaluate(fields)) is not None]

    def in_framework_terms(
        self,
        issue: ConfigIssue,
        *,
        extension_prefix: str | None = None,
        knob: Callable[[str], str] | None = None,
    ) -> ConfigIssue:
        """A core validation issue named by the framework field(s) to change. A core path no
        framework field feeds is shown under `extension_prefix` (the adapter's own subtree). With
        `knob` (core path -> how the framework's command line sets it, e.g. verl's
        `+remote_backend.core.deepspeed.zero_stage`), every core field the remedy names is rewritten
        so that the fix can be typed as given."""
        core = issue.path
        sources = self.sources_of(core)
        if knob is not None:
            issue = dataclasses.replace(issue, remedy=typeable(issue.remedy, knob))
        if sources:
            names = " / ".join(sources)
            remedy = (
                issue.remedy if knob is not None else f"{issue.remedy} (in {self.framework}: set {names})"
            )
            return dataclasses.replace(issue, path=f"{names} (core {core})", remedy=remedy)
        if extension_prefix and core:
            return dataclasses.replace(issue, path=f"{extension_prefix}.{core}")
        return issue

    # -- documentation ----------------------------------------------------------------------------
    def markdown(self) -> str:
        """The README table: one line per row, in table order."""
        lines = [
            f"| {self.framework} field | how | core field / reason / fix |",
            "| --- | --- | --- |",
        ]
        for row in self.rows:
            names = ", ".join(f"`{name}`" for name in row.fields)
            if row.kind is Kind.MAPPED:
                how, target = row.reason or "as is", f"`{row.core}`"
            elif row.kind is Kind.REJECTED:
                how, target = row.kind.value, f"{row.reason}; {row.fix}"
            else:
                how, target = row.kind.value, row.reason
            lines.append(f"| {names} | {_cell(how)} | {_cell(target)} |")
        return "\n".join(lines) + "\n"


def typeable(text: str, knob: Callable[[str], str]) -> str:
    """`text` with each core field it names (`deepspeed.zero_stage`) replaced by `knob(field)`."""

    paths = sorted((p for p in all_leaf_paths(ArcticRLConfig) if "." in p), key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.+/-])(" + "|".join(re.escape(p) for p in paths) + r")(?![\w.])")
    return pattern.sub(lambda match: knob(match.group(1)), text)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _same(value: Any, default: Any) -> bool:
    try:
        return bool(value == default)
    except Exception:  # e.g. arrays: compare their text
        return repr(value) == repr(default)


# -- README sections -----------------------------------------------------------------------------


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


def readme_command(sections: Mapping[str, str], argv: Sequence[str] | None = None) -> int:
    """`python -m adapter_<x>.field_table [--write packages/adapter-<x>/README.md]`: print the generated README sections
    (marker name -> body), or write them between their markers in the file named."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--write"] and len(args) == 2:
        path = Path(args[1])
        text = path.read_text(encoding="utf-8")
        for name, body in sections.items():
            text = replace_marked_section(text, name, body)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {', '.join(sections)} into {path}")
        return 0
    if args:
        print(
            "usage: python -m <adapter>.field_table [--write packages/<adapter>/README.md]", file=sys.stderr
        )
        return 2
    for body in sections.values():
        sys.stdout.write(body + "\n")
    return 0
