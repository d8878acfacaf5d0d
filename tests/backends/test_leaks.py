"""Property: nothing a filter or a scope hides ever comes back, by any route, on every backend.

The corpora, filters, scopes and queries, the reference evaluator and the checks are in
:mod:`clew.testing.leaks`. Each example ingests into a fresh index on the backend (a fresh
schema on PostgreSQL, dropped afterwards). The embedded run has 100 examples per property, the
PostgreSQL run 30 (each example ingests over SQL): :func:`clew.testing.leaks.settings_for`.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from clew.testing import leaks
from clew.testing.leaks import corpora, filters, queries, scopes, visible

# ``backend`` (tests/backends/conftest.py): fresh indexes on each backend in turn


def test_reference_evaluator() -> None:
    meta = {"tenant": ["a", "b"], "level": 2, "flag": True, "created_at": "2026-03-01"}
    assert visible({"tenant": "b", "level": 2.0}, meta)
    assert not visible({"flag": 1}, meta) and visible({"flag": True}, meta)
    assert visible({"created_at": {"gte": "2026-02-12T08:00:00Z"}}, meta)
    assert not visible({"level": {"gt": 2}}, meta) and visible({"level": {"lte": 2.0}}, meta)
    assert not visible({"tenant": {"gte": 0}}, meta)  # a list has no number
    assert visible({"not": {"audience": "x"}}, meta) and not visible({"audience": "x"}, meta)
    assert visible({"or": [{"tenant": "z"}, {"not": {"level": 3}}]}, meta)


def test_nothing_hidden_ever_comes_back(backend: Any) -> None:
    engine_for = leaks.engine_for(backend.target)

    @leaks.settings_for(backend.name)
    @given(corpus=corpora(), spec=filters | st.none(), scope=scopes, query=queries)
    def nothing_hidden_ever_comes_back(
        corpus: leaks.Corpus, spec: dict[str, Any] | None, scope: dict[str, Any] | None, query: str
    ) -> None:
        leaks.nothing_hidden_comes_back(engine_for, corpus, spec, scope, query)

    nothing_hidden_ever_comes_back()


def test_a_scope_never_widens(backend: Any) -> None:
    """``{"or": [...]}`` and ``{"not": ...}`` filters that would widen the scope see nothing
    more than the scope itself allows."""
    engine_for = leaks.engine_for(backend.target)

    @leaks.settings_for(backend.name)
    @given(corpus=corpora(), scope=scopes)
    def a_scope_never_widens(corpus: leaks.Corpus, scope: dict[str, Any] | None) -> None:
        leaks.a_scope_never_widens(engine_for, corpus, scope)

    a_scope_never_widens()
