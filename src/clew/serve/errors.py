"""How the service answers errors: clew's exceptions as HTTP statuses with FastAPI's
``detail`` shape (a field's location for a 422, never the input echoed back), and the helpers
routes raise them with."""

from __future__ import annotations

import re
from functools import partial

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from clew.errors import (
    ClewError,
    ConfigError,
    FilterError,
    IndexNotFoundError,
    LLMError,
    ModelError,
    QueryError,
    StoreError,
)
from clew.serve.auth import WriteRefused

__all__ = ["install_errors", "invalid", "located", "refused"]


def _field_error(loc: list[str | int], message: str, status: int = 422) -> JSONResponse:
    return JSONResponse(
        {"detail": [{"loc": loc, "msg": message, "type": "value_error"}]}, status_code=status
    )


_KEY = r"'(?P<key>[^'\\]*)'"
_MEMORY_ERRORS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(r"^memory text"), ("text",)),
    (re.compile(r"^session="), ("session",)),
    (re.compile(r"^timestamp"), ("time",)),
    (re.compile(rf"^metadata key {_KEY}"), ("metadata", "{key}")),
    (re.compile(r"^metadata\.(?P<key>[^=\s\[.]+)"), ("metadata", "{key}")),
    (re.compile(r"^metadata\b"), ("metadata",)),
    (re.compile(r"^relations\[(?P<i>\d+)\]"), ("relations", "{i}")),
    (re.compile(r"^relation"), ("relations",)),
    (re.compile(r"^(?P<name>since|until|as_of)="), ("{name}",)),
    (re.compile(r"^k="), ("k",)),
    (re.compile(r"^query"), ("query",)),
)
"""Where a memory or recall error points: its message's leading field (clew.memory and
Engine.recall name the field first), as a request location under ``body``."""


def located(exc: QueryError) -> RequestValidationError:
    """A memory or recall QueryError as a 422 whose ``loc`` names the field at fault."""
    message = str(exc)
    loc: list[str | int] = ["body"]
    for pattern, parts in _MEMORY_ERRORS:
        m = pattern.match(message)
        if m is not None:
            groups = m.groupdict()
            for part in parts:
                value = part.format(**groups)
                loc.append(int(value) if value.isdigit() and part == "{i}" else value)
            break
    return RequestValidationError([{"loc": tuple(loc), "msg": message, "type": "value_error"}])


def invalid(loc: tuple[str | int, ...], message: str) -> RequestValidationError:
    """A 422 for the request field at ``loc`` (FastAPI's shape)."""
    return RequestValidationError([{"loc": loc, "msg": message, "type": "value_error"}])


def refused(exc: WriteRefused) -> HTTPException:
    return HTTPException(403, str(exc))


_STATUS: dict[type[Exception], int] = {
    IndexNotFoundError: 503,
    StoreError: 409,
    LLMError: 502,
    ModelError: 503,
}
"""Errors answered with their message alone, and their status (the most specific class wins)."""


async def _plain(status: int, request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=status)


def install_errors(app: FastAPI) -> None:
    @app.exception_handler(FilterError)
    async def bad_filter(request: Request, exc: FilterError) -> JSONResponse:
        return _field_error(["body", "filter"], str(exc))

    @app.exception_handler(QueryError)
    async def bad_query(request: Request, exc: QueryError) -> JSONResponse:
        message = str(exc)
        field = "k" if message.startswith("k=") else "query"
        return _field_error(["body", field], message)

    @app.exception_handler(ConfigError)
    async def bad_config(request: Request, exc: ConfigError) -> JSONResponse:
        return _field_error(["body"], str(exc))

    for error, status in _STATUS.items():
        app.add_exception_handler(error, partial(_plain, status))

    @app.exception_handler(ClewError)
    async def clew_error(request: Request, exc: ClewError) -> JSONResponse:
        return _field_error(["body"], str(exc))

    @app.exception_handler(RecursionError)
    async def too_deep(request: Request, exc: RecursionError) -> JSONResponse:
        return _field_error(["body"], "JSON is nested too deeply", 400)

    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's shape, without echoing the input back (it may be large or sensitive)
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": errors}, status_code=422)
