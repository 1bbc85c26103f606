"""Field-table rows that map a framework's LoRA settings onto the core's `peft.*` group.

Both SkyRL (`trainer.policy.model.lora.{rank,alpha,dropout,target_modules,exclude_modules}`) and
verl (`actor_rollout_ref.model.{lora_rank,lora_alpha,target_modules,exclude_modules}`) spell LoRA as
a rank (0 = off) plus adapter settings. The rank maps as is; every other setting maps only when the
rank is > 0 (at rank 0 the framework itself ignores them, and so does the core).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from arctic_rl_core.config.framework_fields import UNSET, FieldProblem, Reader, Row, derived, mapped

ALL_LINEAR = "all-linear"
_MODULE_NAME = re.compile(r"[A-Za-z0-9_.]+")


def lora_rank(value: Any) -> int:
    return int(value or 0)


def _names(value: Any, field: str, *, allow_all_linear: bool) -> Any:
    """A framework's module list (a list, an OmegaConf ListConfig or one name) as the core's list."""
    if isinstance(value, str):
        text = value.strip()
        if allow_all_linear and text == ALL_LINEAR:
            return ALL_LINEAR
        names = [part.strip() for part in text.split(",")]
    elif value is None:
        return UNSET
    else:
        try:
            names = [str(item).strip() for item in value]
        except TypeError:
            names = [str(value)]
    if not names and not allow_all_linear:
        return UNSET  # an empty exclusion list: none excluded
    if not names or not all(_MODULE_NAME.fullmatch(name) for name in names):
        accepted = f"'{ALL_LINEAR}' or " if allow_all_linear else ""
        raise FieldProblem(
            "module names for the Arctic LoRA adapters are plain names (the server's PEFT config; a "
            "regular expression would be matched differently)",
            f"give {accepted}a list of module names, e.g. [q_proj, k_proj, v_proj, o_proj]",
            field=field,
        )
    return names


def number(value: Any, field: str) -> float:
    return float(value)


def module_list(value: Any, field: str) -> Any:
    """A list of target modules, or all-linear."""
    return _names(value, field, allow_all_linear=True)


def excluded_modules(value: Any, field: str) -> Any:
    """A list of excluded modules (an empty list: none)."""
    return _names(value, field, allow_all_linear=False)


def _with_lora(rank: str, field: str, transform: Callable[[Any, str], Any]) -> Callable[[Reader], Any]:
    """`transform(value, field)` of the framework's `field`, only with rank > 0 (LoRA off: the
    framework ignores the setting too, and so does the core)."""

    def lora_setting(read: Reader) -> Any:
        return transform(read(field), field) if lora_rank(read(rank)) > 0 else UNSET

    return lora_setting


def lora_rows(
    *,
    rank: str,
    alpha: str | None = None,
    dropout: str | None = None,
    target_modules: str | None = None,
    exclude_modules: str | None = None,
) -> list[Row]:
    """The rows mapping one framework's LoRA fields (dotted paths) onto `peft.*`."""
    rows = [
        mapped(
            rank, "peft.lora_rank", lora_rank, "0 = full-weight training; > 0 = LoRA (Cortex or reference)"
        )
    ]
    for field, core, transform, how in (
        (alpha, "peft.lora_alpha", number, "as is (with rank > 0)"),
        (dropout, "peft.lora_dropout", number, "as is (with rank > 0)"),
        (
            target_modules,
            "peft.target_modules",
            module_list,
            "all-linear or a list of module names (with rank > 0)",
        ),
        (
            exclude_modules,
            "peft.exclude_modules",
            excluded_modules,
            "a list of module names; null = none (with rank > 0)",
        ),
    ):
        if field is not None:
            rows.append(derived(core, (field, rank), _with_lora(rank, field, transform), how))
    return rows
