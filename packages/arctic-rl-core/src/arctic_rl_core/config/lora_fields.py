"""Field-table entries that map a framework's LoRA settings onto the core's `peft.*` group.

Both SkyRL (`trainer.policy.model.lora.{rank,alpha,dropout,target_modules,exclude_modules}`) and
verl (`actor_rollout_ref.model.{lora_rank,lora_alpha,target_modules,exclude_modules}`) spell LoRA as
a rank (0 = off) plus adapter settings. The rank maps as is; every other setting maps only when the
rank is > 0 (at rank 0 the framework itself ignores them, and so does the core).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from arctic_rl_core.config.framework_fields import UNSET, Derived, FieldProblem, Mapped, Reader

ALL_LINEAR = "all-linear"
_MODULE_NAME = re.compile(r"[A-Za-z0-9_.]+")


def _rank(value: Any) -> int:
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


def lora_entries(
    *,
    rank: str,
    alpha: str | None = None,
    dropout: str | None = None,
    target_modules: str | None = None,
    exclude_modules: str | None = None,
) -> list[Mapped | Derived]:
    """The entries mapping one framework's LoRA fields (dotted paths) onto `peft.*`."""
    entries: list[Mapped | Derived] = [
        Mapped(rank, "peft.lora_rank", _rank, "0 = full-weight training; > 0 = LoRA (Cortex or reference)")
    ]

    def when_lora(field: str, transform: Callable[[Any], Any]) -> Callable[[Reader], Any]:
        def compute(read: Reader) -> Any:
            if _rank(read(rank)) <= 0:
                return UNSET  # LoRA off: the framework ignores the setting too
            return transform(read(field))

        return compute

    for field, core, transform, how in (
        (alpha, "peft.lora_alpha", float, "as is (with rank > 0)"),
        (dropout, "peft.lora_dropout", float, "as is (with rank > 0)"),
        (
            target_modules,
            "peft.target_modules",
            lambda value, f=target_modules: _names(value, f, allow_all_linear=True),
            "all-linear or a list of module names (with rank > 0)",
        ),
        (
            exclude_modules,
            "peft.exclude_modules",
            lambda value, f=exclude_modules: _names(value, f, allow_all_linear=False),
            "a list of module names; null = none (with rank > 0)",
        ),
    ):
        if field is not None:
            entries.append(Derived(core, (field, rank), when_lora(field, transform), how))
    return entries
