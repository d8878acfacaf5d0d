"""The access filter: one small expression over metadata, parsed once, compiled per backend.

JSON form (CLI, API, eval datasets)::

    {"audience": "public"}                      equality (or list membership of the field)
    {"audience": ["public", "internal"]}        membership
    {"created_at": {"gte": "2026-01-01", "lt": "2026-07-01"}}   range (numbers or ISO times)
    {"and": [...]}, {"or": [...]}, {"not": {...}}
    several keys in one object are AND-ed; {} matches everything.

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
    """Parse a filter object (or its JSON text). ``None`` or ``{}`` means no filter."""
    if spec is None:
        return None
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise FilterError(f"filter is not valid JSON: {exc.msg} at char {exc.pos}") from exc
    if not isinstance(spec, Mapping):
        raise FilterError(f"filter must be a JSON object, got {type(spec).__name__}: {spec!r}")
    if not spec:
        return None
    return _parse_object(spec, "filter")


def _parse_object(spec: Mapping[str, Any], where: str) -> Node:
    if not spec:
        raise FilterError(f"{where}: empty object; allowed: field conditions, and, or, not")
    parts = [_parse_key(str(k), v, f"{where}.{k}") for k, v in spec.items()]
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def _parse_key(key: str, value: Any, where: str) -> Node:
    if key in ("and", "or"):
        if not isinstance(value, list) or not value:
            raise FilterError(f"{where}: expected a non-empty list of filter objects")
        items = []
        for i, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise FilterError(f"{where}[{i}]: expected an object, got {item!r}")
            items.append(_parse_object(item, f"{where}[{i}]"))
        return And(tuple(items)) if key == "and" else Or(tuple(items))
    if key == "not":
        if not isinstance(value, Mapping):
            raise FilterError(f"{where}: expected a filter object, got {value!r}")
        return Not(_parse_object(value, where))
    if not key.strip():
        raise FilterError(f"{where}: empty field name")
    if isinstance(value, list):
        if not value:
            raise FilterError(f"{where}: empty list; give at least one allowed value")
        for v in value:
            _check_scalar(v, where)
        return In(key, tuple(value))
    if isinstance(value, Mapping):
        bad = sorted(set(value) - set(_RANGE_OPS))
        if bad or not value:
            raise FilterError(
                f"{where}: unknown range operator(s) {bad or '(none)'}; allowed: "
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
            f"{where}: {value!r} is not allowed; values must be strings, numbers, booleans or null"
        )


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
    if isinstance(value, bool):
        raise FilterError(f"{where}: {value!r} is not a number or ISO 8601 time")
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        t = parse_time(value)
        if t is not None:
            return t
    raise FilterError(f"{where}: {value!r} is not a number or ISO 8601 time")


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


def _canon(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(float(value))
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

    @property
    def fields(self) -> set[str]:
        return set(self._postings)

    def _posting_array(self, field: str, key: str) -> npt.NDArray[np.int64]:
        cached = self._arrays.get((field, key))
        if cached is None:
            cached = np.asarray(self._postings.get(field, {}).get(key, []), dtype=np.int64)
            self._arrays[(field, key)] = cached
        return cached

    def mask(self, node: Node, *, strict: bool = True) -> Mask:
        """Evaluate a filter to a boolean mask over ordinals ``0 .. size-1``.

        ``strict``: a field no document has is an error (a typo in a request). A caller's scope
        is evaluated non-strictly: a field no document has yet simply matches nothing."""
        unknown = sorted(fields_of(node) - self.fields)
        if unknown and strict:
            raise FilterError(
                f"filter field(s) {unknown} appear in no document; known fields: "
                f"{', '.join(sorted(self.fields)) or '(none)'}"
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
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return parse_time(value)
    return None
