"""Coercions the schema would make silently, refused before it sees the data.

Pydantic's lax mode reads `training_gpus: true` as 1, `"2"` as 2 and `"yes"` as true. Here a
number field takes a number (an int where a float is wanted is fine), a bool field takes true or
false, and neither takes text or the other kind. Only typed leaves of the schema are checked:
free-form mappings (`vllm.engine_args`, `deepspeed.config_overrides`) are passed on as written.
Sources already give typed values: YAML/TOML files and overrides are parsed as YAML scalars
(`lr=1e-6` is a float), and Hydra/OmegaConf configs hold typed values; a quoted number in YAML is
text, and is refused with the unquoted spelling as the fix.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic import BaseModel

from arctic_rl_core.config.errors import ConfigIssue

_Kind = Literal["int", "float", "bool"]


def _leaf_kinds(annotation: Any) -> tuple[set[str], bool]:
    """The scalar kinds a leaf accepts ('int', 'float', 'bool', 'other'), and whether text is one."""
    kinds: set[str] = set()
    text = False
    pending = [annotation]
    while pending:
        item = pending.pop()
        origin = typing.get_origin(item)
        if origin in (typing.Union, types.UnionType):
            pending.extend(typing.get_args(item))
        elif origin is Literal:
            for choice in typing.get_args(item):
                if isinstance(choice, bool):
                    kinds.add("bool")
                elif isinstance(choice, int):
                    kinds.add("int")
                elif isinstance(choice, str):
                    text = True
        elif item is bool:
            kinds.add("bool")
        elif item is int:
            kinds.add("int")
        elif item is float:
            kinds.add("float")
        elif item is str:
            text = True
        elif item is type(None):
            continue
        else:
            kinds.add("other")
    return kinds, text


def _problem(value: Any, kinds: set[str], text: bool) -> tuple[str, str] | None:
    numeric = kinds & {"int", "float"}
    number = "a whole number" if numeric == {"int"} else "a number"
    if isinstance(value, bool):
        if "bool" in kinds or "other" in kinds:
            return None
        if numeric:
            return f"is true/false where {number} is wanted (it would be read as 1/0)", f"give {number}"
        return None
    if isinstance(value, int | float):
        if numeric or "other" in kinds:
            return None
        if "bool" in kinds:
            return "is a number where true/false is wanted", "give true or false"
        return None
    if isinstance(value, str) and not text and "other" not in kinds and (numeric or "bool" in kinds):
        wanted = number if numeric else "true or false"
        return f"is text where {wanted} is wanted", f"write it without quotes, as {wanted}"
    return None


def coercion_issues(model: type[BaseModel], data: Any, prefix: str = "") -> list[ConfigIssue]:
    """Every typed leaf of `model` in `data` whose value pydantic would coerce silently."""
    issues: list[ConfigIssue] = []
    if not isinstance(data, dict):
        return issues
    for key, value in data.items():
        info = model.model_fields.get(str(key))
        if info is None:
            continue  # unknown keys are the schema's to report
        path = f"{prefix}.{key}" if prefix else str(key)
        annotation = info.annotation
        sub_models = [
            arg
            for arg in (typing.get_args(annotation) or (annotation,))
            if isinstance(arg, type) and issubclass(arg, BaseModel)
        ]
        if sub_models:
            if isinstance(value, dict):
                issues.extend(coercion_issues(sub_models[0], value, path))
            continue
        if typing.get_origin(annotation) is tuple:
            element_kinds, element_text = _leaf_kinds(typing.Union[typing.get_args(annotation)])  # noqa: UP007
            for index, item in enumerate(value if isinstance(value, list | tuple) else ()):
                found = _problem(item, element_kinds, element_text)
                if found is not None:
                    issues.append(ConfigIssue(f"{path}[{index}]", item, *found))
            continue
        kinds, text = _leaf_kinds(annotation)
        found = _problem(value, kinds, text)
        if found is not None:
            problem, remedy = found
            if info.description:
                remedy = f"{remedy} ({path}: {info.description})"
            issues.append(ConfigIssue(path, value, problem, remedy))
    return issues
