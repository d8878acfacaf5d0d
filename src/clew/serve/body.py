"""The request-body limit of the API: an ASGI middleware answering 413 for a body over the limit,
whether it says its length or streams it."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["BodyLimit"]


class BodyLimit:
    """Reject bodies over ``limit`` bytes with 413, by Content-Length or, for a streamed body
    (``Transfer-Encoding: chunked``, no length), by counting the bytes as they arrive: reading
    stops at the limit, whatever the app answers to the cut-off body is dropped, and the client
    gets the 413."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = 0
                if length > self.limit:
                    await _reject_body(send, self.limit)
                    return
        seen = 0
        too_big = False
        started = False

        async def limited() -> MutableMapping[str, Any]:
            nonlocal seen, too_big
            if too_big:
                raise _TooLarge
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    too_big = True
                    raise _TooLarge
            return message

        async def guarded(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            if too_big:
                return  # the app's answer to a body cut off at the limit (a 400 or a 500)
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited, guarded)
        except Exception:
            if not too_big:
                raise
        if too_big and not started:
            await _reject_body(send, self.limit)


class _TooLarge(Exception):
    pass


async def _reject_body(send: Send, limit: int) -> None:
    body = json.dumps({"detail": f"request body is over {limit} bytes (max_body_bytes)"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
