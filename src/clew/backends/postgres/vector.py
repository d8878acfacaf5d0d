"""The dense leg in PostgreSQL: inner-product search through pgvector (HNSW or an exact scan).

It takes the access filter as a compiled predicate over ``chunks AS c``
(:func:`clew.backends.postgres.where.compile_filter`) and applies it inside the query, before
the top-k, so a hidden chunk never enters a candidate list, like the embedded leg's mask (the
lexical leg does the same: :mod:`clew.backends.postgres.lexical`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

from clew.backends.postgres.store import Connect
from clew.types import LegHit


class PgVector:
    """Inner-product search over ``chunks.embedding`` (score = inner product).

    When the filter allows at most ``exact_max_allowed`` chunks (counted, up to that bound), the
    allowed rows are scanned exactly; otherwise the HNSW index is walked with
    ``hnsw.iterative_scan = relaxed_order`` (the filter inside the walk, which goes on until k
    allowed rows are found or ``max_scan_tuples`` are visited) and the hits are re-sorted."""

    def __init__(
        self,
        connect: Connect,
        *,
        ef_search: int = 100,
        exact_max_allowed: int = 5000,
        max_scan_tuples: int = 20_000,
    ) -> None:
        if not 1 <= ef_search <= 1000:
            raise ValueError(f"ef_search={ef_search!r} is invalid; allowed: 1..1000")
        self.connect = connect
        self.ef_search = ef_search
        self.exact_max_allowed = exact_max_allowed
        self.max_scan_tuples = max_scan_tuples

    def allowed_upto(self, conn: psycopg.Connection[Any], where: sql.Composable) -> int:
        """How many chunks ``where`` allows, counted up to ``exact_max_allowed + 1``."""
        query = sql.SQL(
            "SELECT count(*) FROM (SELECT 1 FROM chunks AS c WHERE {} LIMIT {}) AS s"
        ).format(where, sql.Literal(self.exact_max_allowed + 1))
        row = conn.execute(query).fetchone()
        return int(row[0]) if row else 0

    def vectors_of(self, ordinals: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        """The stored embedding of each given chunk (absent: no such chunk)."""
        wanted = sorted({int(o) for o in ordinals})
        if not wanted:
            return {}
        with self.connect() as conn, conn.cursor(binary=True) as cur:
            rows = cur.execute(
                "SELECT ordinal, embedding FROM chunks WHERE ordinal = ANY(%s)", (wanted,)
            ).fetchall()
        return {int(o): np.asarray(v.to_numpy(), dtype=np.float32) for o, v in rows}

    def search(
        self, vector: npt.ArrayLike, where: sql.Composable, k: int, *, exact: bool | None = None
    ) -> list[LegHit]:
        """Top-k allowed chunks by inner product (score desc, ordinal asc). ``exact``: force
        (True) or forbid (False) the exact scan; None decides by the allowed count."""
        if k <= 0:
            return []
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        text = "[" + ",".join(repr(float(x)) for x in q.tolist()) + "]"
        literal = sql.SQL("{}::vector").format(sql.Literal(text))
        with self.connect() as conn, conn.transaction():
            if exact is None:
                exact = self.allowed_upto(conn, where) <= self.exact_max_allowed
            if exact:
                query = sql.SQL(
                    "WITH f AS MATERIALIZED (SELECT c.ordinal, c.embedding FROM chunks AS c "
                    "WHERE {where}) "
                    "SELECT f.ordinal, -(f.embedding <#> {q}) AS score FROM f "
                    "ORDER BY f.embedding <#> {q}, f.ordinal LIMIT {k}"
                ).format(where=where, q=literal, k=sql.Literal(int(k)))
            else:
                for name, value in (
                    ("hnsw.ef_search", max(self.ef_search, k)),
                    ("hnsw.iterative_scan", "relaxed_order"),
                    ("hnsw.max_scan_tuples", self.max_scan_tuples),
                ):
                    conn.execute("SELECT set_config(%s, %s, true)", (name, str(value)))
                query = sql.SQL(
                    "WITH h AS MATERIALIZED (SELECT c.ordinal, c.embedding <#> {q} AS d "
                    "FROM chunks AS c WHERE {where} ORDER BY c.embedding <#> {q} LIMIT {k}) "
                    "SELECT h.ordinal, -h.d AS score FROM h ORDER BY h.d, h.ordinal"
                ).format(where=where, q=literal, k=sql.Literal(int(k)))
            rows = conn.execute(query).fetchall()
        return [LegHit(int(o), float(s)) for o, s in rows]
