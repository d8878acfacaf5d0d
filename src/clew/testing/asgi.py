"""A synchronous client for the API app in-process (httpx's ASGI transport), for tests."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


class ApiClient:
    """Calls an app with one of several API keys: ``client("POST", "/search", "admin", json=…)``.

    ``who`` names a key in ``keys`` (or is a raw key, or None for no key). ``no_5xx``: every
    response must be below 500 (a server error is a failed test, whatever it was asked).
    One event loop per client; ``close()`` also closes the app's engine."""

    def __init__(self, app: Any, keys: dict[str, str], *, no_5xx: bool = False) -> None:
        self.app = app
        self.keys = keys
        self.no_5xx = no_5xx
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, raise_app_exceptions=not no_5xx),
            base_url="http://clew.test",
            timeout=60,
        )

    def __call__(self, method: str, url: str, who: str | None = "admin", **kw: Any) -> Any:
        headers = dict(kw.pop("headers", {}))
        if who is not None:
            headers["Authorization"] = f"Bearer {self.keys.get(who, who)}"
        r = self.loop.run_until_complete(self.client.request(method, url, headers=headers, **kw))
        if self.no_5xx:
            assert r.status_code < 500, r.text
        return r

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()
        self.app.state.clew.close()
