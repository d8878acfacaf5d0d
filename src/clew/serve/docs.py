"""The API's interactive documentation, served offline.

FastAPI's default ``/docs`` page loads Swagger UI's script and style from a CDN, which a service
without internet access (or a reader who should not reach one) cannot load. Here they come from
the ``swagger_ui_bundle`` module (in ``clew[serve]``), mounted under :data:`DOCS_STATIC`; the
page references no external URL. Like ``/openapi.json``, ``/docs`` and its files need no key:
they describe the API, not the index.

FastAPI writes OpenAPI 3.1, which Swagger UI renders from version 5 on: the
``swagger-ui-bundle-v2`` distribution (5.x) ships it under the same module name, while
``swagger-ui-bundle`` 1.1.0 ships 4.15.5, whose page only says it cannot render the spec."""

from __future__ import annotations

import logging
import re

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]

__all__ = ["DOCS_STATIC", "install_docs", "swagger_ui_version"]


log = logging.getLogger(__name__)

DOCS_STATIC = "/docs/static"
"""Where the Swagger UI files (the ``swagger-ui-bundle`` package) are served."""


def swagger_ui_version() -> tuple[int, ...]:
    """The version of the installed Swagger UI files (from their folder's name); () unknown."""
    m = re.search(r"swagger-ui-(\d+(?:\.\d+)*)$", str(swagger_ui_path).rstrip("/"))
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def install_docs(app: FastAPI) -> None:
    """``GET /docs``: Swagger UI from the service itself (no CDN: the page works offline),
    open to everyone like ``/openapi.json``; its files under :data:`DOCS_STATIC`."""
    version = swagger_ui_version()
    if version and version < (5,):
        log.warning(
            "Swagger UI %s cannot render OpenAPI 3.1 (what FastAPI writes): /docs will say so; "
            "install swagger-ui-bundle-v2 (Swagger UI 5) instead of swagger-ui-bundle",
            ".".join(map(str, version)),
        )
    app.mount(DOCS_STATIC, StaticFiles(directory=swagger_ui_path), name="swagger-ui")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = str(request.scope.get("root_path", "")).rstrip("/")
        return get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} {app.version} — API",
            swagger_js_url=f"{root}{DOCS_STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_STATIC}/favicon-32x32.png",
            # the spec validator badge would call validator.swagger.io: none
            swagger_ui_parameters={"validatorUrl": None},
        )
