"""The SQL access filter selects exactly the rows the embedded mask selects."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.json import Jsonb

from clew.backends.postgres.schema import MIGRATIONS, dimension_ddl
from clew.backends.postgres.where import TRUE, and_where, compile_filter
from clew.filters import MetadataColumns, parse_filter


@pytest.fixture
def conn(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url, autocommit=True) as c:
        yield c


def select(conn: psycopg.Connection[Any], rows: Sequence[Any], spec: Any) -> list[int]:
    """Indexes of ``rows`` (metadata objects) the compiled filter selects, as a chunks alias."""
    where = compile_filter(parse_filter(spec))
    query = sql.SQL(
        "SELECT c.i - 1 FROM unnest(%s::jsonb[]) WITH ORDINALITY AS c(metadata, i) "
        "WHERE {} ORDER BY 1"
    ).format(where)
    return [r[0] for r in conn.execute(query, ([Jsonb(r) for r in rows],)).fetchall()]


def expected(rows: Sequence[dict[str, Any]], spec: Any) -> list[int]:
    node = parse_filter(spec)
    if node is None:
        return list(range(len(rows)))
    cols = MetadataColumns.build(len(rows), [([i], md) for i, md in enumerate(rows)])
    return [int(i) for i in cols.mask(node, strict=False).nonzero()[0]]


ROWS: list[dict[str, Any]] = [
    {"audience": "public", "n": 1, "when": "2026-01-15"},
    {"audience": ["sre", "public"], "n": 2.5, "when": "2026-03-01T10:00:00+02:00"},
    {"audience": "sre", "n": True, "when": "not a time", "tags": [["public"], {"a": 1}]},
    {"audience": None, "n": "3", "when": 1767225600},
    {"n": 10**20, "flag": False, "x": {"audience": "public"}},
    {"audience": "Public", "n": [1, 2], "when": "2026-02-30"},
    {},
]

EXAMPLES: list[Any] = [
    None,
    {},
    {"audience": "public"},
    {"audience": "sre"},
    {"audience": None},
    {"audience": ["public", "sre"]},
    {"audience": ["nobody"]},
    {"tags": "public"},
    {"x": "public"},
    {"n": 1},
    {"n": 1.0},
    {"n": True},
    {"n": "3"},
    {"n": 3},
    {"n": 10**20},
    {"n": 1e20},
    {"n": 2},
    {"flag": False},
    {"flag": 0},
    {"n": {"gte": 1, "lt": 3}},
    {"n": {"gt": 2.5}},
    {"n": {"lte": 2.5}},
    {"when": {"gte": "2026-01-01", "lt": "2026-02-01"}},
    {"when": {"gte": "2026-03-01T08:00:00Z", "lte": "2026-03-01T08:00:00Z"}},
    {"when": {"gt": 0}},
    {"missing": {"gt": 0}},
    {"not": {"missing": {"gt": 0}}},
    {"not": {"missing": "x"}},
    {"not": {"audience": "public"}},
    {"or": [{"audience": "sre"}, {"n": {"gte": 2}}]},
    {"and": [{"audience": "public"}, {"not": {"n": 1}}]},
    {"audience": "public", "n": {"lt": 2}},
    {"not": {"or": [{"audience": "public"}, {"not": {"when": {"gt": 0}}}]}},
]


@pytest.mark.parametrize("spec", EXAMPLES, ids=[str(i) for i in range(len(EXAMPLES))])
def test_examples_match_mask(conn: psycopg.Connection[Any], spec: Any) -> None:
    assert select(conn, ROWS, spec) == expected(ROWS, spec), spec


INJECTIONS = [
    "a'); DROP TABLE pg_class; --",
    'a"b',
    "a\\b",
    "$$; SELECT 1; $$",
    "}{",
    "a\x00b",
    "\ud800",
    "' OR 1=1 --",
]


@pytest.mark.parametrize("text", INJECTIONS)
def test_injection_in_names_and_values(conn: psycopg.Connection[Any], text: str) -> None:
    safe = text.replace("\x00", "").encode("utf-8", "replace").decode()
    rows = [{safe: safe, "v": safe}, {"v": "other"}, {safe: [1, safe]}]
    for spec in (
        {text: text},
        {"v": text},
        {"v": [text, "other"]},
        {text: {"gt": 0}},
        {"not": {text: text}},
        {safe: safe},
        {safe: [safe]},
        {"v": safe},
    ):
        assert select(conn, rows, spec) == expected(rows, spec), spec
    assert conn.execute("SELECT count(*) FROM pg_class").fetchone() is not None


def test_values_are_parameters_not_text() -> None:
    compiled = compile_filter(parse_filter({"a'--": "x'); DROP TABLE chunks; --"}))
    text = compiled.as_string(None)
    assert "''--" in text and "x''); DROP" in text, "quotes are escaped inside literals"
    assert compile_filter(None) is TRUE


def test_and_where(conn: psycopg.Connection[Any]) -> None:
    a = compile_filter(parse_filter({"audience": "public"}))
    b = compile_filter(parse_filter({"n": {"lt": 2}}))
    assert and_where(None, TRUE) is TRUE
    assert and_where(a, None) is a
    both = and_where(a, TRUE, b)
    query = sql.SQL(
        "SELECT c.i - 1 FROM unnest(%s::jsonb[]) WITH ORDINALITY AS c(metadata, i) "
        "WHERE {} ORDER BY 1"
    ).format(both)
    got = [r[0] for r in conn.execute(query, ([Jsonb(r) for r in ROWS],)).fetchall()]
    assert got == expected(ROWS, {"and": [{"audience": "public"}, {"n": {"lt": 2}}]})


def test_on_the_chunks_table(pg_url: str, pg_schema: str) -> None:
    """The predicate runs against the real table (alias ``c``) and its GIN index."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_search")
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(pg_schema)))
        conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(pg_schema)))
        conn.execute(MIGRATIONS[0])
        for stmt in dimension_ddl(2):
            conn.execute(stmt)
        for i, md in enumerate(ROWS):
            conn.execute(
                "INSERT INTO documents VALUES (%s, %s, %s, 'text', %s, 'h', '', 1)",
                (f"d{i}", f"d{i}", f"d{i}", Jsonb(md)),
            )
            conn.execute(
                "INSERT INTO chunks (chunk_id, doc_id, seq, text, content_hash, token_count, "
                "heading_path, start_char, end_char, tokens, embedding, metadata, release) "
                "VALUES (%s, %s, 0, 'x', 'h', 1, '[]', 0, 1, 'x', '[1,0]', %s, 1)",
                (f"d{i}#0", f"d{i}", Jsonb(md)),
            )
        ordinals = [
            r[0] for r in conn.execute("SELECT ordinal FROM chunks ORDER BY ordinal").fetchall()
        ]
        for spec in EXAMPLES:
            query = sql.SQL("SELECT c.ordinal FROM chunks AS c WHERE {} ORDER BY 1").format(
                compile_filter(parse_filter(spec))
            )
            got = [r[0] for r in conn.execute(query).fetchall()]
            assert got == [ordinals[i] for i in expected(ROWS, spec)], spec


# -- property: random metadata, random filters -----------------------------------------------

FIELDS = ["a", "b", "t"]
TIMES = [
    "2026-01-01",
    "2026-01-01T00:00:00Z",
    "2026-01-01 10:30",
    "2026-01-01T10:30:00.5+02:00",
    "2025-12-31T23:00:00-0100",
    " 2026-06-01t00:00:00 ",
    "20260101",
    "2026-02-30",
    "2026-01-01T24:00",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 3),
    st.sampled_from([0.0, 1.0, 1.5, -1.0, 2.5, 1e16, 1767225600.0]),
    st.sampled_from([2**53, 2**53 + 1, 10**16, 10**400, 1767225600]),
    st.sampled_from(["x", "y", "1", "true", "null", "X", "x "]),
    st.sampled_from(TIMES),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.just([["x"]]),
    st.just({"x": 1}),
)
METADATA = st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=3)
BOUNDS = st.one_of(
    st.integers(-2, 3),
    st.sampled_from([1.5, 1e16, 1767225600, 2**53]),
    st.sampled_from(["2026-01-01", "2026-01-01T10:30:00+00:00", "2025-12-31"]),
)
RANGES = st.dictionaries(st.sampled_from(["gt", "gte", "lt", "lte"]), BOUNDS, min_size=1)
CONDITION = st.builds(
    lambda f, v: {f: v},
    st.sampled_from([*FIELDS, "zz"]),
    st.one_of(SCALARS, st.lists(SCALARS, min_size=1, max_size=3), RANGES),
)
FILTERS = st.recursive(
    CONDITION,
    lambda inner: st.one_of(
        st.builds(lambda xs: {"and": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"or": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda x: {"not": x}, inner),
    ),
    max_leaves=6,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=st.lists(METADATA, min_size=1, max_size=12), spec=FILTERS)
def test_property_sql_equals_mask(
    conn: psycopg.Connection[Any], rows: list[dict[str, Any]], spec: Any
) -> None:
    assert select(conn, rows, spec) == expected(rows, spec), (rows, spec)
