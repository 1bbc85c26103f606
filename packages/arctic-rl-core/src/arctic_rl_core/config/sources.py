"""Configuration sources: a YAML or TOML file plus Hydra-style dotted overrides.

Override syntax (as Hydra's command line): `key.sub=value` sets a value, `+key=value` adds a key
the file does not have (an error if it has), `++key=value` sets whether or not it exists,
`~key` removes a key from the file (back to the schema default). Values are parsed like YAML
scalars and flow collections: `1e-6`, `true`, `null`, `[0.9,0.95]`, `{cudagraph_mode:FULL}`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from arctic_rl_core.config.errors import ConfigError, ConfigIssue
from arctic_rl_core.config.schema import ArcticRLConfig


class _YamlLoader(yaml.SafeLoader):
    """Safe YAML that also reads `1e-6` as a float (YAML 1.1 needs a dot: `1.0e-6`)."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def parse_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_YamlLoader)  # a SafeLoader subclass: no arbitrary objects


def read_file(path: str | Path) -> dict[str, Any]:
    """The raw mapping of a .yaml/.yml/.toml file."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            [ConfigIssue("file", str(file), "no such file", "check the path of the config file")]
        )
    suffix = file.suffix.lower()
    text = file.read_text(encoding="utf-8")
    try:
        if suffix in (".yaml", ".yml"):
            data = parse_yaml(text)
        elif suffix == ".toml":
            data = tomllib.loads(text)
        else:
            raise ConfigError(
                [ConfigIssue("file", str(file), "unknown config format", "use a .yaml, .yml or .toml file")]
            )
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(
            [ConfigIssue("file", str(file), f"cannot be parsed: {error}", "fix the file's syntax")]
        ) from None
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
    import copy

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
    if issues:
        raise ConfigError(issues)
    return result


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
        data = apply_overrides(data, overrides)
        return ArcticRLConfig.from_dict(data, source=source)
    except ConfigError as error:
        raise error.with_source(source) if source and error.source is None else error from None
