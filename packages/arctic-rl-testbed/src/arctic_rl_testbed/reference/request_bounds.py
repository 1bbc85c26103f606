"""What the reference servers (the on-prem API in `http_server`, the Cortex API in `cortex_server`)
check of a request before they store or parse it: the declared body size (`size_limit_middleware`:
a `Content-Length` over the limit is answered 413 before a byte of the body is read; a body sent
without one is read by aiohttp's `request.read()` in pieces and refused as soon as it passes the
same limit, `client_max_size`), and the nesting depth of a JSON body (`parse_json`: deeper than
`MAX_JSON_DEPTH` is a 400, never a RecursionError turned into a bare 500)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

MAX_JSON_DEPTH = 64
"""Deepest JSON nesting a request body may have (the deepest body of the 0.1.4 client is 4 levels)."""


class BodyTooLarge(ValueError):
    """The request declares a body over the server's limit: answered 413."""

    def __init__(self, path: str, limit: int, size: int) -> None:
        super().__init__(
            f"{path}: the body (Content-Length {size} bytes) is larger than the server's limit of {limit} bytes; "
            "send less per request (fewer or shorter sequences)"
        )
        self.path, self.limit, self.size = path, limit, size


class JsonTooDeep(ValueError):
    """A JSON body nested deeper than `MAX_JSON_DEPTH` (answered 400)."""


def size_limit_middleware(limit: int, answer: Callable[[BodyTooLarge], web.StreamResponse]) -> Any:
    """An aiohttp middleware (put it first) answering `answer(error)` (a 413) to a request whose
    `Content-Length` is over `limit`, before anything reads its body; the connection is then closed
    (the rest of the body is never read into memory)."""
    from aiohttp import web

    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        size = request.content_length
        if size is not None and size > limit:
            response = answer(BodyTooLarge(request.path, limit, size))
            response.force_close()
            return response
        return await handler(request)

    return check


def json_depth(value: Any, limit: int) -> int:
    """The nesting depth of a decoded JSON value, counted up to `limit + 1` (iterative)."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        pending.extend((child, depth + 1) for child in children)
    return deepest


def parse_json(raw: bytes | str, *, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads(raw)` with the nesting bounded: JsonTooDeep naming `what` when deeper than
    `max_depth`; ValueError (json's) for text that is not JSON."""
    data = raw.encode() if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") > max_depth:  # only then can it nest too deeply
        try:
            value = json.loads(data)
            depth = json_depth(value, max_depth)
        except RecursionError:
            depth = max_depth + 1
        if depth > max_depth:
            raise JsonTooDeep(
                f"{what}: the JSON nests deeper than {max_depth} levels; no request of the Arctic API needs "
                "more than a few: send the fields flat"
            )
        return value
    return json.loads(data)
