"""The record of one framework internal (a private symbol of SkyRL or verl) that an adapter touches.

Each adapter lists every private symbol of its framework that it relies on in one module
(`skyrl_internals`, `verl_internals` in each adapter package) as a tuple of `Internal`s; the
adapter's test suite checks each still exists with the shape used, so a framework release that
moves one fails there, loudly, with the list. This module only defines the record (the core
imports no framework).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

InternalKind = Literal[
    "override",  # the adapter overrides this private method (and may call super())
    "call",  # the adapter calls this private method
    "instance attribute",  # the adapter assigns or reads this private attribute (set by the owner's code)
    "class attribute",  # the adapter reads this private class attribute
    "module attribute",  # a module-level name the adapter reads or assigns
    "key",  # a string key the owner's code reads, which the adapter writes
]


@dataclass(frozen=True)
class Internal:
    """`owner`: "package.module" or "package.module:Class" holding `name`. `params`: for methods,
    the parameter names the adapter relies on (checked exactly); empty for other kinds."""

    owner: str
    name: str
    kind: InternalKind
    used_in: str
    why: str
    params: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.owner}.{self.name} ({self.kind})"
