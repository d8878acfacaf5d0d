"""The leak property of ``tests/integration/test_leaks.py`` against the PostgreSQL backend.

The same random corpora, filters, scopes and queries, the same reference evaluator and the same
checks (hits, expansion paths, citations and their "why" trail, "more like this", traces, the
lexical leg returning exactly the visible part of its unfiltered list, unknown-field errors
that name only fields in scope), with every leg running in SQL under the compiled predicate.
Each example gets its own schema, dropped afterwards.
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from hypothesis import given, settings
from hypothesis import strategies as st

from clew import Engine
from clew.testing.pgserver import PgServer

_PATH = Path(__file__).resolve().parents[1] / "integration" / "test_leaks.py"
_spec = importlib.util.spec_from_file_location("clew_leak_property", _PATH)
assert _spec is not None and _spec.loader is not None
leaks: Any = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = leaks  # dataclasses look their module up while the class is made
_spec.loader.exec_module(leaks)

PG_SETTINGS = settings(leaks.FILTER_SETTINGS, max_examples=30)
"""Fewer examples than the embedded run: each one ingests into a fresh schema over SQL."""


def _engine_for(server: PgServer) -> Any:
    @contextmanager
    def engine_for(corpus: Any) -> Iterator[Engine]:
        schema = f"leak_{uuid.uuid4().hex[:12]}"
        try:
            with leaks.open_engine(f"{server.url}&schema={schema}", corpus) as engine:
                yield engine
        finally:
            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    return engine_for


@PG_SETTINGS
@given(
    corpus=leaks.corpora(),
    spec=leaks.filters | st.none(),
    scope=leaks.scopes,
    query=leaks.queries,
)
def test_nothing_hidden_ever_comes_back_on_postgres(
    pg_server: PgServer,
    corpus: Any,
    spec: dict[str, Any] | None,
    scope: dict[str, Any] | None,
    query: str,
) -> None:
    leaks.nothing_hidden_comes_back(_engine_for(pg_server), corpus, spec, scope, query)


@PG_SETTINGS
@given(corpus=leaks.corpora(), scope=leaks.scopes)
def test_a_scope_never_widens_on_postgres(
    pg_server: PgServer, corpus: Any, scope: dict[str, Any] | None
) -> None:
    leaks.a_scope_never_widens(_engine_for(pg_server), corpus, scope)
