"""Checks shared by the adapters' field-table tests."""

from __future__ import annotations

import builtins
from types import ModuleType

from arctic_rl_core.config import lora_fields
from arctic_rl_core.config.framework_fields import FieldTable


def assert_functions_are_named_transforms(table: FieldTable, transforms: ModuleType) -> None:
    """Every function the table calls is a named function of the adapter's transforms module (or of
    the core's LoRA rows, or a builtin such as int): no lambda mixed into the table data."""
    allowed = {transforms.__name__, lora_fields.__name__}
    functions = table.functions()
    assert len(functions) > 40
    for fn in functions:
        if getattr(builtins, getattr(fn, "__name__", ""), None) is fn:
            continue
        assert fn.__name__ != "<lambda>", (fn, fn.__code__.co_firstlineno)
        assert fn.__module__ in allowed, (fn.__name__, fn.__module__)
