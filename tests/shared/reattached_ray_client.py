"""The real arctic-platform 0.1.4 client over its real `RayTransport`, reattached (job ids in the
config) to a stand-in `ArcticRLRayServer` object: how the runtime suites drive the Ray transport's own
`acall` without a Ray cluster."""

from __future__ import annotations

import asyncio
from typing import Any


def reattached_ray_client(config: Any, server: Any, *, compat: bool = False) -> Any:
    """`compat`: the transport as `arctic_compat` builds it (blocking ops off the loop), else 0.1.4's as is."""
    from arctic_platform.client.transports.onprem_ray import RayTransport
    from arctic_rl_core.backends import arctic_compat

    transport = RayTransport.__new__(RayTransport)
    transport.config, transport._reconnect, transport._state = config, True, None
    transport._server, transport._loop = server, asyncio.new_event_loop()
    if compat:
        transport = arctic_compat.with_blocking_ops_off_loop(transport)
    return arctic_compat._client_with_transport(arctic_compat.load_client_api(), config, transport)
