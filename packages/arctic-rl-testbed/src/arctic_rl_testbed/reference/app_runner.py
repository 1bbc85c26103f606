"""Serving an aiohttp application until told to stop: the one run loop of the reference servers
(the Arctic on-prem API in `http_server`, the Cortex API in `cortex_server`)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web


async def serve_application(
    application: web.Application,
    host: str,
    port: int,
    *,
    ssl_context: Any = None,
    on_ready: Callable[[str, int], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve `application` on host:port (port 0: a free one, passed to `on_ready`) until `stop` is
    set, or until SIGINT/SIGTERM when `stop` is None."""

    from aiohttp import web

    runner = web.AppRunner(application, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    if on_ready is not None:
        on_ready(host, bound)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
