"""Await a backend coroutine from SkyRL's own event loop.

The backend lives on the core's background loop (`arctic_rl_core.dispatch`); SkyRL's trainer runs
its async methods (generate, save_weights_for_sampler) on the loop of `asyncio.run(trainer.train())`.
Awaiting here hands the coroutine to the background loop without blocking SkyRL's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from arctic_rl_core.dispatch import background_loop


async def on_backend_loop[T](coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    loop = background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        return await (coro if timeout is None else asyncio.wait_for(coro, timeout))
    future = asyncio.run_coroutine_threadsafe(
        coro if timeout is None else asyncio.wait_for(coro, timeout), loop
    )
    return await asyncio.wrap_future(future)
