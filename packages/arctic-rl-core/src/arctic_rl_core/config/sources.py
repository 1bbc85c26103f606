"""Configuration sources: a YAML or TOML file plus Hydra-style dotted overrides.

Override syntax (as Hydra's command line): `key.sub=value` sets a value, `+key=value` adds a key
the file does not have (an error if it has), `++key=value` sets whether or not it exists,
`~key` removes a key from the file (back to the schema default). Values are parsed like YAML
scalars and flow collections: `1e-6`, `true`, `null`, `[0.9,0.95]`, `{cudagraph_mode:FULL}`.

Hostile input is a message, never a traceback or a stall: a file over `MAX_FILE_BYTES` or an
override over `MAX_OVERRIDE_CHARS` is refused unread, a file that is not UTF-8 or nests too deep to
parse is reported as such, a key written twice in one YAML mapping is an error (YAML would keep the
last one silently; `<<:` merges still override), so is a value YAML would silently change: a date
or timestamp (`2024-01-01`: quote it), `!!binary`, `!!set`, `!!omap`, `!!pairs`, and a YAML 1.1
base-60 number (`1:2:3` is 3723), each naming its field; and the data's own bounds (aliases,
cycles, non-finite numbers) are `input_bounds`'.
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from arctic_rl_core.config.errors import ConfigError, ConfigIssue
from arctic_rl_core.config.input_bounds import MAX_FILE_BYTES, MAX_OVERRIDE_CHARS
from arctic_rl_core.config.override_values import base_60_value
from arctic_rl_core.config.run_config import ArcticRLConfig


class _YamlLoader(yaml.SafeLoader):
    """Safe YAML that also reads `1e-6` as a float (YAML 1.1 needs a dot: `1.0e-6`)."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"), list("-+0123456789")
)


_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(ValueError):
    def __init__(self, path: str, first_line: int, second_line: int) -> None:
        super().__init__(f"{path} is written twice (lines {first_line} and {second_line})")
        self.path, self.first_line, self.second_line = path, first_line, second_line


class SurprisingYamlValue(ValueError):
    """Values YAML would turn into something other than what was written (module doc): one
    `Surprise` each."""

    def __init__(self, surprises: list[Surprise]) -> None:
        super().__init__("; ".join(f"{s.path or '(top level)'} = {s.text!r}: {s.problem}" for s in surprises))
        self.surprises = surprises


@dataclass(frozen=True)
class Surprise:
    path: str
    line: int
    text: str
    problem: str
    fix: str


_YAML = "tag:yaml.org,2002:"
_TYPED_TAGS = {
    f"{_YAML}timestamp": "a YAML date/timestamp (it would become a date object, then text in another spelling)",
    f"{_YAML}binary": "a YAML !!binary value (it would become bytes)",
    f"{_YAML}set": "a YAML !!set (it would become an unordered set)",
    f"{_YAML}omap": "a YAML !!omap",
    f"{_YAML}pairs": "a YAML !!pairs",
}


def surprising_scalar(node: yaml.Node) -> tuple[str, str] | None:
    """(problem, fix) when YAML would not keep the value of `node` as written: a date or timestamp,
    the tags !!binary / !!set / !!omap / !!pairs, or a YAML 1.1 base-60 number; None otherwise."""
    if node.tag in _TYPED_TAGS:
        return (
            f"is {_TYPED_TAGS[node.tag]}; no setting takes one",
            "quote it to keep the text as written, or write the value the setting takes",
        )
    base_60 = node.tag in (f"{_YAML}int", f"{_YAML}float") and isinstance(node, yaml.ScalarNode)
    sixty = base_60_value(node.value) if base_60 else None
    if sixty is not None:
        return (
            f"is read by YAML 1.1 as the base-60 (sexagesimal) number {sixty:g}",
            "write the number you mean (e.g. 0.01), or quote the text",
        )
    return None


def _check_nodes(root: yaml.Node | None) -> None:
    """Raise DuplicateKeyError for a key written twice in one mapping, then SurprisingYamlValue
    with every value (or key) YAML would change (`surprising_scalar`). Each node is visited once,
    so aliases are not expanded."""
    seen: set[int] = set()
    surprises: list[Surprise] = []
    pending: list[tuple[yaml.Node, str]] = [] if root is None else [(root, "")]
    while pending:
        node, path = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        surprise = surprising_scalar(node)
        if surprise is not None:
            text = node.value if isinstance(node, yaml.ScalarNode) else "!!" + node.tag.rsplit(":", 1)[-1]
            surprises.append(Surprise(path, node.start_mark.line + 1, text, *surprise))
        if isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:
                    pending.append((value_node, path))
                    continue
                key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "(complex key)"
                child = f"{path}.{key}" if path else key
                line = key_node.start_mark.line + 1
                surprise = surprising_scalar(key_node)
                if surprise is not None:
                    surprises.append(Surprise(child, line, key, "the key " + surprise[0], surprise[1]))
                if key in lines:
                    raise DuplicateKeyError(child, lines[key], line)
                lines[key] = line
                pending.append((value_node, child))
        elif isinstance(node, yaml.SequenceNode):
            pending.extend((item, f"{path}[{index}]") for index, item in enumerate(node.value))
    if surprises:
        raise SurprisingYamlValue(sorted(surprises, key=lambda s: s.line))


def parse_yaml(text: str) -> Any:
    loader = _YamlLoader(text)  # a SafeLoader subclass: no arbitrary objects
    try:
        node = loader.get_single_node()
        _check_nodes(node)
        return None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()


def _too_deep(what: str, value: str) -> ConfigError:
    return ConfigError(
        [ConfigIssue(what, value, "nests too deeply to parse", "flatten it; no setting needs this depth")]
    )


def read_file(path: str | Path) -> dict[str, Any]:
    """The raw mapping of a .yaml/.yml/.toml file."""
    file = Path(path)
    if not file.is_file():
        problem = (
            "is a folder, not a file"
            if file.is_dir()
            else "is not a regular file"
            if file.exists()
            else "no such file"
        )
        raise ConfigError([ConfigIssue("file", str(file), problem, "check the path of the config file")])
    suffix = file.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml"):
        raise ConfigError(
            [ConfigIssue("file", str(file), "unknown config format", "use a .yaml, .yml or .toml file")]
        )
    size = file.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(
            [
                ConfigIssue(
                    "file",
                    str(file),
                    f"is {size:,} bytes, more than a config file may be ({MAX_FILE_BYTES:,})",
                    "check the path: a configuration is a few kilobytes",
                )
            ]
        )
    try:
        text = file.read_bytes().decode("utf-8")
    except OSError as error:  # no permission, a file gone since
        raise ConfigError(
            [
                ConfigIssue(
                    "file", str(file), f"cannot be read ({error.strerror})", "check the file's permissions"
                )
            ]
        ) from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            [
                ConfigIssue(
                    "file",
                    str(file),
                    f"is not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset {error.start})",
                    "save the file as UTF-8",
                )
            ]
        ) from None
    try:
        data = parse_yaml(text) if suffix in (".yaml", ".yml") else tomllib.loads(text)
    except DuplicateKeyError as error:
        raise ConfigError(
            [
                ConfigIssue(
                    error.path,
                    f"(lines {error.first_line} and {error.second_line} of {file})",
                    "is written twice in the same mapping (YAML would keep the last one silently)",
                    "keep one of them",
                )
            ]
        ) from None
    except SurprisingYamlValue as error:
        raise ConfigError(
            [
                ConfigIssue(x.path or "file", f"{x.text} (line {x.line} of {file})", x.problem, x.fix)
                for x in error.surprises
            ]
        ) from None
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(
            [ConfigIssue("file", str(file), f"cannot be parsed: {error}", "fix the file's syntax")]
        ) from None
    except ValueError as error:  # a value YAML recognised but cannot build (a 30th of February)
        raise ConfigError(
            [ConfigIssue("file", str(file), f"cannot be read: {error}", "fix the value, or quote it")]
        ) from None
    except RecursionError:
        raise _too_deep("file", str(file)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            [
                ConfigIssue(
                    "file",
                    str(file),
                    f"the top level is a {type(data).__name__}, not a mapping",
                    "write the groups (backend:, batch:, ...) at the top level",
                )
            ]
        )
    return data


OverrideOp = Literal["set", "add", "force", "delete"]
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
# `{a:1}` is a mapping for Hydra; YAML needs a space after a key's colon. Only colons right after
# a key (after `{` or `,`) are touched, so values such as URLs keep theirs.
_FLOW_KEY = re.compile(r"([{,]\s*)([A-Za-z_][\w.-]*)\s*:(?=\S)")


@dataclass(frozen=True)
class Override:
    op: OverrideOp
    path: tuple[str, ...]
    value: Any
    text: str


def parse_override(text: str) -> Override:
    """One `key=value` / `+key=value` / `++key=value` / `~key` override."""
    if len(text) > MAX_OVERRIDE_CHARS:
        raise ConfigError(
            [
                ConfigIssue(
                    "override",
                    text[:40] + "...",
                    f"is {len(text):,} characters, more than an override may be ({MAX_OVERRIDE_CHARS:,})",
                    "put large values in the config file",
                )
            ]
        )
    if text.startswith("~"):
        op: OverrideOp = "delete"
        body = text[1:]
        key = body.split("=", 1)[0]
        value: Any = None
    else:
        if "=" not in text:
            raise ConfigError(
                [ConfigIssue("override", text, "no '=' in it", "write overrides as key.sub=value (or ~key)")]
            )
        if text.startswith("++"):
            op, body = "force", text[2:]
        elif text.startswith("+"):
            op, body = "add", text[1:]
        else:
            op, body = "set", text
        key, raw = body.split("=", 1)
        value = _parse_value(raw, text)
    if not _KEY.match(key):
        raise ConfigError(
            [
                ConfigIssue(
                    "override", text, f"'{key}' is not a dotted key", "write overrides as group.key=value"
                )
            ]
        )
    return Override(op=op, path=tuple(key.split(".")), value=value, text=text)


def _parse_value(raw: str, text: str) -> Any:
    if raw == "":
        return ""
    source = _FLOW_KEY.sub(r"\1\2: ", raw) if raw.lstrip().startswith("{") else raw
    try:
        return parse_yaml(source)
    except RecursionError:
        raise _too_deep("override", text[:40] + ("..." if len(text) > 40 else "")) from None
    except DuplicateKeyError as error:
        raise ConfigError(
            [ConfigIssue("override", text, f"writes the key {error.path!r} twice", "keep one of them")]
        ) from None
    except SurprisingYamlValue as error:
        key = text.split("=", 1)[0].lstrip("+")
        raise ConfigError(
            [
                ConfigIssue(f"{key}.{x.path}" if x.path else key, x.text, x.problem, x.fix)
                for x in error.surprises
            ]
        ) from None
    except yaml.YAMLError as error:
        problem = str(error).splitlines()[0]
        raise ConfigError(
            [
                ConfigIssue(
                    "override", text, f"the value cannot be parsed ({problem})", "quote it or fix its syntax"
                )
            ]
        ) from None


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of `data` with every override applied; all malformed overrides are reported together."""
    result, issues = _apply_each(data, overrides)
    if issues:
        raise ConfigError(issues)
    return result


def _apply_each(data: dict[str, Any], overrides: Sequence[str]) -> tuple[dict[str, Any], list[ConfigIssue]]:
    """A copy of `data` with every well-formed override applied, and the issues of the others."""

    result = copy.deepcopy(data)
    issues: list[ConfigIssue] = []
    for text in overrides:
        try:
            override = parse_override(text)
        except ConfigError as error:
            issues.extend(error.issues)
            continue
        problem = _apply(result, override)
        if problem is not None:
            issues.append(problem)
    return result, issues


def _apply(data: dict[str, Any], override: Override) -> ConfigIssue | None:
    *parents, leaf = override.path
    node: Any = data
    for depth, part in enumerate(parents):
        child = node.get(part)
        if child is None:
            if override.op == "delete":
                return _missing(override)
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(override.path[: depth + 1])
            return ConfigIssue(
                where, child, "is a value, so it has no sub-keys", f"fix the override {override.text!r}"
            )
        node = child
    if override.op == "delete":
        if leaf not in node:
            return _missing(override)
        del node[leaf]
    elif override.op == "add" and leaf in node:
        return ConfigIssue(
            ".".join(override.path),
            node[leaf],
            "already set in the file, so it cannot be added",
            f"drop the '+' (or use '++') in {override.text!r}",
        )
    else:
        node[leaf] = override.value
    return None


def _missing(override: Override) -> ConfigIssue:
    return ConfigIssue(
        ".".join(override.path), None, "not set in the file, so it cannot be removed", "drop the override"
    )


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> ArcticRLConfig:
    """Read a YAML/TOML file (None = schema defaults), apply overrides, validate."""
    source = str(path) if path is not None else None
    try:
        data = read_file(path) if path is not None else {}
        data, override_issues = _apply_each(data, overrides)
        if not override_issues:
            return ArcticRLConfig.from_dict(data, source=source)
        # Every problem at once: the bad overrides, and what the schema says of the rest.
        try:
            ArcticRLConfig.from_dict(data, source=source)
        except ConfigError as error:
            override_issues += error.issues
        raise ConfigError(override_issues)
    except ConfigError as error:
        raise error.with_source(source) if source and error.source is None else error from None
