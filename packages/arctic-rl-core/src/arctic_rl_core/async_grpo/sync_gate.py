"""Generation and weight sync of one sampler when generation runs concurrently with training.

An asynchronous trainer keeps several generate calls in flight while it trains, then syncs the
trainer's weights into the sampler (`weight_sync.sync_after_step`: the transfer, then the
prefix-cache reset). A generate call must not reach the sampler inside that bracket: between the
transfer and the reset the prefix cache still holds KV computed with the old weights (the reference
engine refuses such a call; arctic-platform 0.1.4 would serve it from the stale cache).

`GenerationSyncGate`: generate calls run together; a sync waits for the calls already in flight (they
finish with the weights they started with, and report that version) and holds back new ones until
its bracket is done. It prefers the sync: once one waits, no new generate call starts, so a steady
stream of generation cannot starve it. Every call goes through the same event loop (the core's
background loop, `arctic_rl_core.dispatch`), where the gate's condition lives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class GenerationSyncGate:
    """Shared for generation, exclusive for a weight sync (see the module docstring)."""

    def __init__(self) -> None:
        self._condition: asyncio.Condition | None = None
        self._generating = 0
        self._syncing = False
        self._syncs_waiting = 0
        self.syncs_waited_for_generation = 0  # syncs that found generate calls in flight

    def _cond(self) -> asyncio.Condition:
        if self._condition is None:  # created on the loop that first uses it
            self._condition = asyncio.Condition()
        return self._condition

    @property
    def generating(self) -> int:
        """Generate calls in flight now."""
        return self._generating

    async def generate[T](self, call: Coroutine[Any, Any, T]) -> T:
        """Await the generate coroutine `call` once no sync runs or waits."""
        cond = self._cond()
        try:
            async with cond:
                await cond.wait_for(lambda: not self._syncing and self._syncs_waiting == 0)
                self._generating += 1
        except BaseException:
            call.close()
            raise
        try:
            return await call
        finally:
            async with cond:
                self._generating -= 1
                cond.notify_all()

    async def sync[T](self, call: Coroutine[Any, Any, T]) -> T:
        """Await the sync coroutine `call` (transfer and prefix-cache reset) once the generate calls
        in flight are done; new ones wait until it returns."""
        cond = self._cond()
        try:
            async with cond:
                self._syncs_waiting += 1
                try:
                    if self._generating:
                        self.syncs_waited_for_generation += 1
                    await cond.wait_for(lambda: self._generating == 0 and not self._syncing)
                finally:
                    self._syncs_waiting -= 1
                    cond.notify_all()  # a sync cancelled while waiting must not hold generation back
                self._syncing = True
        except BaseException:
            call.close()
            raise
        try:
            return await call
        finally:
            async with cond:
                self._syncing = False
                cond.notify_all()
