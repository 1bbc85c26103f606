"""A framework override's value against the type of the field it sets (both adapters' dry runs).

SkyRL's and verl's command lines keep whatever their parsers make of a value: SkyRL (OmegaConf's
YAML 1.1) reads `weight_decay=1:2:3` as the base-60 number 3723 and `epochs=two` as the text
"two"; verl (Hydra) keeps both as text, and the first `int()` of it fails deep inside a run. The
adapters check every override they are given here, against the framework's default for that field,
before anything else reads it.
"""

from __future__ import annotations

import re
from typing import Any

BASE_60 = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
"""A YAML 1.1 base-60 (sexagesimal) number: `1:2:3` is 3723, `1:30.5` is 90.5."""


def base_60_value(text: str) -> float | int | None:
    """The number YAML 1.1 reads from `text` when it is written in base 60; None otherwise."""
    text = text.strip().replace("_", "")
    if not BASE_60.match(text):
        return None
    sign = -1 if text.startswith("-") else 1
    value: float = 0
    for part in text.lstrip("+-").split(":"):
        value = value * 60 + (float(part) if "." in part else int(part))
    return sign * value


def _kind(default: Any) -> tuple[str, tuple[type, ...]] | None:
    """(words, accepted types) of a field whose default is a bool or a number; None else."""
    if isinstance(default, bool):
        return "true or false", (bool,)
    if isinstance(default, int | float):  # frameworks default some float fields to ints (verl: top_p 1)
        return "a number", (int, float)
    return None


def value_problem(text: str, value: Any, default: Any) -> tuple[str, str] | None:
    """(problem, fix) of an override written `text` (parsed as `value`) for a field whose framework
    default is `default`: a base-60 spelling, or a value of another type than the default's (a
    missing value, null, is left to the framework); None when it is fine."""
    sixty = base_60_value(text)
    if sixty is not None and isinstance(default, int | float) and not isinstance(default, bool):
        return (
            f"YAML 1.1 reads {text} as the base-60 (sexagesimal) number {sixty:g}",
            "write the number you mean (e.g. 0.01)",
        )
    kind = _kind(default)
    if kind is None or value is None:
        return None
    words, accepted = kind
    if isinstance(value, accepted) and (bool in accepted or not isinstance(value, bool)):
        return None
    return f"must be {words} (its default is {default!r})", f"give {words}"
