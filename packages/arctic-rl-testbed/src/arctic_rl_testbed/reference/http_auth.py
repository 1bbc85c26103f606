"""Bearer-token authentication of the reference HTTP server, and the rule for when it is required.

With a token, every route but `/health` needs `Authorization: Bearer <token>` (else 401); the
token comes from `--token` or the `ARCTIC_RL_SERVE_TOKEN` environment variable. Without one, the
server may bind only a loopback address: `check_bind` refuses a non-loopback host unless a token
is set. arctic-platform 0.1.4's on-prem HTTP client sends no Authorization header (its
`requests`/`aiohttp` sessions take no headers from its config), so the real client drives a
loopback server without a token; a token-protected server serves clients that can set the header.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

TOKEN_ENV = "ARCTIC_RL_SERVE_TOKEN"
OPEN_ROUTES = frozenset({"/health"})


class BindRefused(ValueError):
    pass


def is_loopback(host: str) -> bool:
    """True when every address `host` names is a loopback address."""
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve a non-loopback address without a token."""
    if token:
        return
    if not is_loopback(host):
        raise BindRefused(
            f"--host {host} is not a loopback address and no token is set: anyone who can reach it could "
            f"write and delete files under the server's file root. Set --token (or {TOKEN_ENV}), or bind "
            "127.0.0.1"
        )


def authorized(request: web.Request, token: str | None) -> bool:
    """True when the server has no token, or the request carries it."""
    if not token:
        return True
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    # aiohttp decodes header bytes that are not UTF-8 as surrogates: compare the bytes as sent
    sent = given.strip().encode("utf-8", errors="surrogateescape")
    return scheme.lower() == "bearer" and hmac.compare_digest(sent, token.encode())


def middleware(token: str | None):
    """An aiohttp middleware answering 401 to unauthenticated requests (all routes but /health)."""
    from aiohttp import web

    @web.middleware
    async def check(request: web.Request, handler):
        if token and request.path not in OPEN_ROUTES and not authorized(request, token):
            return web.json_response(
                {"detail": "missing or wrong bearer token: send 'Authorization: Bearer <token>'"},
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return await handler(request)

    return check
