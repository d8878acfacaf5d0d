"""The access filter: one small expression over metadata, parsed once, compiled per backend.

JSON form (CLI, API, eval datasets)::

    {"audience": "public"}                      equality (or list membership of the field)
    {"audience": ["public", "internal"]}        membership
    {"created_at": {"gte": "2026-01-01", "lt": "2026-07-01"}}   range (numbers or ISO times)
    {"and": [...]}, {"or": [...]}, {"not": {...}}
    several keys in one object are AND-ed; {} matches everything.

A filter is bounded: at most MAX_DEPTH levels of objects and MAX_CONDITIONS conditions, values
are strings, finite numbers, booleans or null, so no request can exhaust the stack or the CPU.

The embedded backend compiles a filter to a boolean mask over chunk ordinals
(:class:`MetadataColumns`); every leg and graph expansion take that mask, so a hidden chunk
never enters any candidate list. A second backend compiles the same tree to its own predicate.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from clew.errors import FilterError

Mask = npt.NDArray[np.bool_]
Scalar = str | int | float | bool | None
_RANGE_OPS = ("gt", "gte", "lt", "lte")
MAX_DEPTH = 32
"""Deepest nesting of filter objects (``and``/``or``/``not`` and field objects)."""
MAX_CONDITIONS = 10_000
"""Most field conditions (equality, membership, range) and combinators in one filter."""


@dataclass(frozen=True, slots=True)
class Eq:
    field: str
    value: Scalar


@dataclass(frozen=True, slots=True)
class In:
    field: str
    values: tuple[Scalar, ...]


@dataclass(frozen=True, slots=True)
class Range:
    field: str
    bounds: tuple[tuple[str, float], ...]
    """(op, bound) pairs; ISO timestamps are converted to epoch seconds."""


@dataclass(frozen=True, slots=True)
class And:
    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Not:
    part: Node


Node = Eq | In | Range | And | Or | Not


def parse_filter(spec: Any) -> Node | None:
    """Parse a filter object (or its JSON text). ``None``, ``{}`` (or ``null``) mean no filter."""
    if spec is None:
        return None
    if isinstance(spec, str | bytes):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise FilterError(f"filter is not valid JSON: {exc.msg} at char {exc.pos}") from exc
        except RecursionError:
            raise FilterError(
                f"filter JSON is nested too deeply; allowed: at most {MAX_DEPTH} levels"
            ) from None
        except ValueError as exc:  # e.g. an integer with more digits than Python converts
            raise FilterError(f"filter is not valid JSON: {exc}") from exc
        if spec is None:  # the JSON text "null", like None itself
            return None
    if not isinstance(spec, Mapping):
        raise FilterError(
            f"filter must be a JSON object, got {type(spec).__name__}: {_short(spec)}"
        )
    if not spec:
        return None
    return _Parser().object(spec, "filter", 1)


class _Parser:
    """Recursive descent with a depth bound (no RecursionError on any input) and a budget of
    conditions (no CPU-bound blow-up on a 100 000-key object)."""

    def __init__(self) -> None:
        self.conditions = 0

    def _count(self, where: str) -> None:
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise FilterError(
                f"{where}: filter has more than {MAX_CONDITIONS} conditions; allowed: at most "
                f"{MAX_CONDITIONS}"
            )

    def object(self, spec: Mapping[str, Any], where: str, depth: int) -> Node:
        if depth > MAX_DEPTH:
            raise FilterError(
                f"{clip_text(where, 200)}: filter is nested deeper than {MAX_DEPTH} levels; "
                f"allowed: at most {MAX_DEPTH}"
            )
        if not spec:
            raise FilterError(f"{where}: empty object; allowed: field conditions, and, or, not")
        if len(spec) > 1:
            self._count(where)
        parts = [
            self.key(str(k), v, f"{where}.{clip_text(str(k), 60)}", depth) for k, v in spec.items()
        ]
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def key(self, key: str, value: Any, where: str, depth: int) -> Node:
        self._count(where)
        if key in ("and", "or"):
            if not isinstance(value, list) or not value:
                raise FilterError(f"{where}: expected a non-empty list of filter objects")
            items = []
            for i, item in enumerate(value):
                if not isinstance(item, Mapping):
                    raise FilterError(f"{where}[{i}]: expected an object, got {_short(item)}")
                items.append(self.object(item, f"{where}[{i}]", depth + 1))
            return And(tuple(items)) if key == "and" else Or(tuple(items))
        if key == "not":
            if not isinstance(value, Mapping):
                raise FilterError(f"{where}: expected a filter object, got {_short(value)}")
            return Not(self.object(value, where, depth + 1))
        return _condition(key, value, where)


def _short(value: Any, limit: int = 60) -> str:
    """A bounded ``repr`` for messages (a bad value may be megabytes or deeply nested)."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # too deep, or an int with too many digits
        text = f"<{type(value).__name__}>"
    return clip_text(text, limit)


def clip_text(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _condition(key: str, value: Any, where: str) -> Node:
    if not key.strip():
        raise FilterError(f"{where}: empty field name")
    if isinstance(value, list):
        if not value:
            raise FilterError(f"{where}: empty list; give at least one allowed value")
        if len(value) > MAX_CONDITIONS:
            raise FilterError(f"{where}: {len(value)} values; allowed: at most {MAX_CONDITIONS}")
        for v in value:
            _check_scalar(v, where)
        return In(key, tuple(value))
    if isinstance(value, Mapping):
        bad = sorted(str(op) for op in set(value) - set(_RANGE_OPS))
        if bad or not value:
            shown = [clip_text(op, 20) for op in bad[:5]]
            raise FilterError(
                f"{where}: unknown range operator(s) {shown or '(none)'}; allowed: "
                f"{', '.join(_RANGE_OPS)}"
            )
        bounds = tuple(
            (op, _to_number(value[op], f"{where}.{op}")) for op in _RANGE_OPS if op in value
        )
        return Range(key, bounds)
    _check_scalar(value, where)
    return Eq(key, value)


def _check_scalar(value: Any, where: str) -> None:
    if not isinstance(value, str | int | float | bool) and value is not None:
        raise FilterError(
            f"{where}: {_short(value)} is not allowed; values must be strings, numbers, booleans "
            "or null"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise FilterError(f"{where}: {value!r} is not allowed; numbers must be finite")


def parse_time(value: str) -> float | None:
    """ISO 8601 date or timestamp → epoch seconds (naive times are UTC); None if not a time."""
    text = value.strip()
    if len(text) < 8 or not text[:4].isdigit():
        return None
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def _to_number(value: Any, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = finite_float(value)
        if number is not None:
            return number
    if isinstance(value, str):
        t = parse_time(value)
        if t is not None:
            return t
    raise FilterError(
        f"{where}: {_short(value)} is not a number or ISO 8601 time; allowed: finite numbers, "
        "ISO dates and times"
    )


def finite_float(value: int | float) -> float | None:
    """``value`` as a finite float, or None (NaN, infinities, integers beyond float range)."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def fields_of(node: Node | None) -> set[str]:
    if node is None:
        return set()
    if isinstance(node, Eq | In | Range):
        return {node.field}
    if isinstance(node, Not):
        return fields_of(node.part)
    return set().union(*(fields_of(p) for p in node.parts))


def to_json(node: Node | None) -> dict[str, Any] | None:
    """The canonical JSON form of a parsed filter (for traces and cache keys)."""
    if node is None:
        return None
    if isinstance(node, Eq):
        return {node.field: node.value}
    if isinstance(node, In):
        return {node.field: list(node.values)}
    if isinstance(node, Range):
        return {node.field: dict(node.bounds)}
    if isinstance(node, Not):
        return {"not": to_json(node.part)}
    key = "and" if isinstance(node, And) else "or"
    return {key: [to_json(p) for p in node.parts]}


def filter_key(node: Node | None) -> str | None:
    """A parsed filter as one string (sorted canonical JSON, the parts of each ``and`` / ``or``
    in one order: how a filter is spelled does not change what it allows): what caches of
    masks, scope statistics and SQL predicates and a scope's calibration file are keyed by;
    None for no filter."""
    return None if node is None else json.dumps(_unordered(to_json(node)), sort_keys=True)


def _unordered(value: Any) -> Any:
    """Filter JSON with the parts of each ``and`` / ``or`` sorted by their own canonical JSON."""
    if isinstance(value, dict):
        return {
            k: sorted((_unordered(x) for x in v), key=lambda x: json.dumps(x, sort_keys=True))
            if k in ("and", "or") and isinstance(v, list)
            else _unordered(v)
            for k, v in value.items()
        }
    return value


def _canon(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        number = finite_float(value)
        if number is not None:
            return repr(number)
        # NaN, an infinity or an integer beyond float range: a key of its own (hex is never
        # refused by Python's limit on decimal digits)
        return f"int:{value:#x}" if isinstance(value, int) else repr(value)
    return json.dumps(value, ensure_ascii=False)


class MetadataColumns:
    """Columnar view of chunk metadata for one release: postings per value, numeric columns."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._postings: dict[str, dict[str, list[int]]] = {}
        self._numeric: dict[str, npt.NDArray[np.float64]] = {}
        self._arrays: dict[tuple[str, str], npt.NDArray[np.int64]] = {}

    @classmethod
    def build(
        cls, size: int, rows: Iterable[tuple[Iterable[int], Mapping[str, Any]]]
    ) -> MetadataColumns:
        """``rows``: (chunk ordinals, metadata) per document."""
        cols = cls(size)
        for ordinals, metadata in rows:
            ords = list(ordinals)
            for field, value in metadata.items():
                postings = cols._postings.setdefault(field, {})
                values = value if isinstance(value, list) else [value]
                for v in values:
                    if isinstance(v, dict | list):
                        continue
                    postings.setdefault(_canon(v), []).extend(ords)
                number = _number_of(value)
                if number is not None:
                    col = cols._numeric.get(field)
                    if col is None:
                        col = np.full(size, np.nan)
                        cols._numeric[field] = col
                    col[ords] = number
        return cols

    def numeric(self, field: str) -> npt.NDArray[np.float64] | None:
        """The numeric column of ``field`` (ISO times as epoch seconds, NaN where absent)."""
        return self._numeric.get(field)

    @property
    def fields(self) -> set[str]:
        return set(self._postings)

    def _posting_array(self, field: str, key: str) -> npt.NDArray[np.int64]:
        cached = self._arrays.get((field, key))
        if cached is None:
            cached = np.asarray(self._postings.get(field, {}).get(key, []), dtype=np.int64)
            self._arrays[(field, key)] = cached
        return cached

    def fields_within(self, within: Mask) -> set[str]:
        """Fields that at least one ordinal selected by ``within`` has."""
        sel = np.zeros(self.size, dtype=bool)
        upto = min(self.size, len(within))
        sel[:upto] = within[:upto]
        out = set()
        for field, postings in self._postings.items():
            if any(sel[self._posting_array(field, key)].any() for key in postings):
                out.add(field)
        return out

    def mask(self, node: Node, *, strict: bool = True, within: Mask | None = None) -> Mask:
        """Evaluate a filter to a boolean mask over ordinals ``0 .. size-1``.

        ``strict``: a field no document has is an error (a typo in a request). A caller's scope
        is evaluated non-strictly: a field no document has yet simply matches nothing.
        ``within``: check (and name) only the fields of the documents it selects."""
        if within is not None and not within.any():
            strict = False  # nothing in scope: every filter selects nothing, none is a typo
        fields = self.fields if within is None else self.fields_within(within)
        unknown = sorted(fields_of(node) - fields)
        if unknown and strict:
            known = sorted(fields)
            more = f" and {len(known) - 50} more" if len(known) > 50 else ""
            shown = [clip_text(f, 40) for f in unknown[:10]]
            raise FilterError(
                f"filter field(s) {shown}{' …' if len(unknown) > 10 else ''} appear in no "
                f"document; known fields: {', '.join(known[:50]) or '(none)'}{more}"
            )
        return self._eval(node)

    def _eval(self, node: Node) -> Mask:
        if isinstance(node, Eq | In):
            values = (node.value,) if isinstance(node, Eq) else node.values
            out = np.zeros(self.size, dtype=bool)
            for v in values:
                out[self._posting_array(node.field, _canon(v))] = True
            return out
        if isinstance(node, Range):
            col = self._numeric.get(node.field)
            if col is None:
                return np.zeros(self.size, dtype=bool)
            out = ~np.isnan(col)
            with np.errstate(invalid="ignore"):
                for op, bound in node.bounds:
                    if op == "gt":
                        out &= col > bound
                    elif op == "gte":
                        out &= col >= bound
                    elif op == "lt":
                        out &= col < bound
                    else:
                        out &= col <= bound
            return out
        if isinstance(node, Not):
            return ~self._eval(node.part)
        masks = [self._eval(p) for p in node.parts]
        result = masks[0].copy()
        for m in masks[1:]:
            if isinstance(node, And):
                result &= m
            else:
                result |= m
        return result


def _number_of(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return finite_float(value)
    if isinstance(value, str):
        return parse_time(value)
    return None


def matches(metadata: Mapping[str, Any], spec: Any) -> bool:
    """Whether one document's metadata passes a filter (None = everything), evaluated like a
    caller's scope: a field the document lacks matches nothing (``not`` of it: everything)."""
    node = parse_filter(spec)
    if node is None:
        return True
    return bool(MetadataColumns.build(1, [([0], metadata)]).mask(node, strict=False)[0])
