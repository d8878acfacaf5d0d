"""The access filter compiled to one SQL predicate over ``chunks.metadata`` (PostgreSQL, jsonb).

:func:`compile_filter` gives the same rows as the embedded backend's
``MetadataColumns.mask(node, strict=False)`` (:mod:`clew.filters`):

- equality and membership compare canonical values: strings exactly, booleans and null as
  themselves (``true`` is not ``1``), numbers by their float value (``1`` is ``1.0``); a list in
  the metadata matches when one of its scalar elements does; nested lists and objects never match.
  Equality is jsonb containment (``metadata @> {"f": v}`` or ``{"f": [v]}``), which the GIN index
  ``chunks_metadata`` (``jsonb_path_ops``) serves;
- ranges hold for a field whose value is a finite number or an ISO 8601 time string (naive times
  are UTC), never for lists, booleans or other strings;
- a field a chunk lacks matches nothing, and ``not`` of it matches everything: every atom is
  strictly true or false (never SQL NULL), so ``NOT`` is the complement, as in the mask.

Values and field names always travel as literals (:class:`psycopg.sql.Literal`), never pasted.

Known differences, all about values the PostgreSQL store cannot hold as Python wrote them:

- jsonb has no negative zero: a stored ``-0.0`` reads back as ``0`` (the mask tells them apart);
- ISO times: the SQL recognizes ``YYYY-MM-DD`` or ``YYYYMMDD``, optionally followed by ``T``,
  ``t`` or a space and ``HH:MM[:SS[.ffffff]]`` and an offset ``Z``/``±HH[[:]MM]`` (Python's
  ``fromisoformat`` also takes week dates, hour-only times, basic-format times and any separator
  character; such strings are not times here);
- metadata numbers are assumed written as Python writes them (``repr`` of a float, exact
  integers); a decimal with more digits than a float keeps is compared exactly in equality.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

from psycopg import sql

from clew.filters import And, Eq, In, Node, Not, Range, Scalar, finite_float

TRUE = sql.SQL("TRUE")
FALSE = sql.SQL("FALSE")

_FLOAT_LIMIT = Decimal(2**1024 - 2**970)
"""The smallest magnitude that no longer rounds to a finite float (numeric → float8 errors)."""
_EXACT_INT = 2.0**53
"""Below this magnitude a float equals only the numbers that are exactly its value."""

# Python's str.strip() whitespace, as a regex class body
_WS = (
    "[ \\t\\n\\r\\v\\f\\u001c-\\u001f\\u0085\\u00a0\\u1680\\u2000-\\u200a"
    "\\u2028\\u2029\\u202f\\u205f\\u3000]"
)
_DATE = "[0-9]{4}(?:-[0-9]{2}-[0-9]{2}|[0-9]{4})"
_TIME = "[Tt ](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\\.[0-9]{1,6})?)?"
_TZ = "(?:Z|[+-](?:[01][0-9]|2[0-3])(?::?[0-5][0-9])?)"
_NAIVE = f"^{_WS}*({_DATE}(?:{_TIME})?){_WS}*$"
_AWARE = f"^{_WS}*({_DATE}{_TIME}{_TZ}){_WS}*$"


def compile_filter(node: Node | None, *, alias: str = "c") -> sql.Composable:
    """One boolean SQL predicate over ``chunks AS <alias>`` selecting exactly the chunks that
    ``MetadataColumns.mask(node, strict=False)`` selects (``TRUE`` for no filter)."""
    if node is None:
        return TRUE
    return _Compiler(sql.Identifier(alias)).node(node)


def and_where(*parts: sql.Composable | None) -> sql.Composable:
    """AND predicates together (a request's filter with a caller's scope); ``None`` and ``TRUE``
    parts are dropped, no part at all is ``TRUE``."""
    kept = [p for p in parts if p is not None and p is not TRUE]
    if not kept:
        return TRUE
    if len(kept) == 1:
        return kept[0]
    return (
        sql.SQL("(") + sql.SQL(" AND ").join(sql.SQL("({})").format(p) for p in kept) + sql.SQL(")")
    )


def _encodable(text: str) -> bool:
    """Whether PostgreSQL can hold ``text`` at all (no NUL, no lone surrogate)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Compiler:
    def __init__(self, alias: sql.Identifier) -> None:
        self.metadata = sql.SQL("{}.metadata").format(alias)

    def node(self, node: Node) -> sql.Composable:
        if isinstance(node, Eq):
            return self.equals(node.field, (node.value,))
        if isinstance(node, In):
            return self.equals(node.field, node.values)
        if isinstance(node, Range):
            return self.range(node)
        if isinstance(node, Not):
            return sql.SQL("(NOT {})").format(self.node(node.part))
        joiner = " AND " if isinstance(node, And) else " OR "
        return sql.SQL("(") + sql.SQL(joiner).join(self.node(p) for p in node.parts) + sql.SQL(")")

    def value(self, field: str) -> sql.Composable:
        return sql.SQL("({} -> {})").format(self.metadata, sql.Literal(field))

    # -- equality and membership -----------------------------------------------------------

    def equals(self, field: str, values: tuple[Scalar, ...]) -> sql.Composable:
        if not _encodable(field):
            return FALSE
        arms: list[sql.Composable] = []
        seen: set[str] = set()
        for v in values:
            canon = _json_scalar(v)
            if canon is None or canon in seen:
                continue
            seen.add(canon)
            key = json.dumps(field, ensure_ascii=False)
            for shape in (canon, f"[{canon}]"):
                doc = sql.Literal(f"{{{key}: {shape}}}")
                arms.append(sql.SQL("{} @> {}::jsonb").format(self.metadata, doc))
            if isinstance(v, int | float) and not isinstance(v, bool):
                number = finite_float(v)
                if number is not None and abs(number) >= _EXACT_INT:
                    arms.append(self.float_equal(field, number))
        if not arms:
            return FALSE
        return sql.SQL("(") + sql.SQL(" OR ").join(arms) + sql.SQL(")")

    def float_equal(self, field: str, number: float) -> sql.Composable:
        """Some numeric element of the field rounds to ``number`` (beyond 2**53, where distinct
        integers share a float)."""
        v = self.value(field)
        return sql.SQL(
            "EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof({v}) = 'array' "
            "THEN {v} ELSE jsonb_build_array({v}) END) AS e(x) WHERE CASE WHEN "
            "jsonb_typeof(e.x) = 'number' THEN CASE WHEN abs(e.x::numeric) < {lim} THEN "
            "e.x::numeric::float8 = {num} ELSE FALSE END ELSE FALSE END)"
        ).format(v=v, lim=sql.Literal(_FLOAT_LIMIT), num=_float8(number))

    # -- ranges ------------------------------------------------------------------------------

    def number(self, field: str) -> sql.Composable:
        """The field's value as float8: a finite number, or an ISO time as epoch seconds; NULL
        for anything else (a list, a boolean, another string, a missing field)."""
        v = self.value(field)
        text = sql.SQL("({} #>> '{{}}')").format(v)
        naive = sql.SQL("substring({} from {})").format(text, sql.Literal(_NAIVE))
        aware = sql.SQL("substring({} from {})").format(text, sql.Literal(_AWARE))
        return sql.SQL(
            "(CASE WHEN jsonb_typeof({v}) = 'number' THEN CASE WHEN abs({v}::numeric) < {lim} "
            "THEN {v}::numeric::float8 END "
            "WHEN jsonb_typeof({v}) = 'string' THEN CASE "
            "WHEN {text} ~ {rx_naive} AND pg_input_is_valid({naive}, 'timestamp') "
            "THEN extract(epoch FROM ({naive}::timestamp AT TIME ZONE 'UTC'))::float8 "
            "WHEN {text} ~ {rx_aware} AND pg_input_is_valid({aware}, 'timestamptz') "
            "THEN extract(epoch FROM {aware}::timestamptz)::float8 END END)"
        ).format(
            v=v,
            lim=sql.Literal(_FLOAT_LIMIT),
            text=text,
            naive=naive,
            aware=aware,
            rx_naive=sql.Literal(_NAIVE),
            rx_aware=sql.Literal(_AWARE),
        )

    def range(self, node: Range) -> sql.Composable:
        if not _encodable(node.field):
            return FALSE
        ops = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
        x = self.number(node.field)
        conds = [
            sql.SQL("{} {} {}").format(x, sql.SQL(ops[op]), _float8(bound))
            for op, bound in node.bounds
        ]
        # NULL (not a number or time) makes the conjunction NULL or FALSE: never TRUE. (A
        # simple ``CASE x WHEN`` or a subquery here breaks pg_search's planner: "Unsupported
        # query shape".)
        return sql.SQL("COALESCE(({}), FALSE)").format(sql.SQL(" AND ").join(conds))


def _float8(number: float) -> sql.Composable:
    return sql.SQL("{}::float8").format(sql.Literal(repr(float(number))))


def _json_scalar(value: Any) -> str | None:
    """The JSON text a stored value equal to ``value`` has (canonical as in the mask), or None
    when no stored value can equal it."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        number = finite_float(value)
        if number is not None:
            return repr(number) if math.isfinite(number) else None
        if isinstance(value, int):  # beyond float range: only the same integer matches
            try:
                return str(value)
            except ValueError:  # more digits than Python converts: not storable either
                return None
        return None
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False) if _encodable(value) else None
    return None
