"""Bounds on raw configuration data, checked before the schema sees it.

A configuration is small, finite, acyclic data. What is not gets one clear `ConfigIssue` each,
found in time linear in what is walked (at most `MAX_VALUES` values), never by expanding it:

- a YAML alias bomb (a few hundred bytes that expand to billions of values) stops at
  `MAX_VALUES` values walked, shared values counted each time they are reached;
- a value that contains itself (a self-referential YAML anchor, a cyclic dict) is refused;
- nesting deeper than `MAX_DEPTH` is refused;
- a non-finite number (`.inf`, `.nan`, `1e999`) anywhere, free-form mappings included, is refused:
  the schema's bounds (`gt=0`) let infinity through, and one training step then leaves
  non-finite weights without an error.
"""

from __future__ import annotations

import math
from typing import Any

from arctic_rl_core.config.errors import ConfigIssue

MAX_VALUES = 100_000
MAX_DEPTH = 32
# A config file or one override larger than this is refused before it is parsed.
MAX_FILE_BYTES = 1 << 20
MAX_OVERRIDE_CHARS = 64 * 1024


class _TooLarge(Exception):
    pass


def bounded_issues(data: Any) -> list[ConfigIssue]:
    """Every bound `data` breaks (see the module doc); [] when it is within them."""
    issues: list[ConfigIssue] = []
    ancestors: set[int] = set()
    walked = 0

    def walk(value: Any, path: str, depth: int) -> None:
        nonlocal walked
        walked += 1
        if walked > MAX_VALUES:
            raise _TooLarge
        if isinstance(value, float):
            if not math.isfinite(value):
                issues.append(
                    ConfigIssue(
                        path or "(top level)",
                        value,
                        "is not a finite number",
                        "give a finite number (YAML .inf / .nan and overflowing literals such as 1e999 are "
                        "not accepted)",
                    )
                )
            return
        if not isinstance(value, dict | list | tuple):
            return
        if id(value) in ancestors:
            issues.append(
                ConfigIssue(
                    path or "(top level)",
                    "(contains itself)",
                    "refers to itself (a YAML anchor used inside its own value, or a cyclic mapping)",
                    "write the value out, or anchor a value that does not contain its alias",
                )
            )
            return
        if depth >= MAX_DEPTH:
            issues.append(
                ConfigIssue(
                    path or "(top level)",
                    "(deeper)",
                    f"nests more than {MAX_DEPTH} levels",
                    "flatten the value; no setting needs this depth",
                )
            )
            return
        ancestors.add(id(value))
        try:
            if isinstance(value, dict):
                for key, item in value.items():
                    walk(item, f"{path}.{key}" if path else str(key), depth + 1)
            else:
                for index, item in enumerate(value):
                    walk(item, f"{path}[{index}]", depth + 1)
        finally:
            ancestors.discard(id(value))

    try:
        walk(data, "", 0)
    except _TooLarge:
        issues.append(
            ConfigIssue(
                "(top level)",
                "(not shown)",
                f"expands to more than {MAX_VALUES:,} values (YAML aliases count each time they are used)",
                "remove the alias bomb; a configuration needs a few hundred values",
            )
        )
    return issues
