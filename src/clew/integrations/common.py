"""What the framework adapters share, without any framework: one search whose hits come back
with their metadata as plain JSON, and the pieces each filter translator builds clew's filter
syntax (:mod:`clew.filters`) from.

The metadata of a hit (:func:`hit_metadata`) is the same in every framework::

    doc_id, chunk_id, title, source, score, rank (1-based, clew's order), heading_path,
    page (only when the hit has one), contributions ([{leg, rank, raw_score, fused_part}]),
    graph, expansion, rerank, duplicates, token_count, release, trace_id,
    metadata (the document's own metadata, as ingested)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from clew.config import EngineConfig
from clew.engine import Engine
from clew.errors import FilterError
from clew.filters import parse_filter, to_json
from clew.types import Hit, SearchResult

__all__ = [
    "COMPARISONS",
    "LLM_VISIBLE",
    "Comparison",
    "Retrieved",
    "all_of",
    "any_of",
    "check_filter",
    "comparison",
    "hit_metadata",
    "missing_framework",
    "none_of",
    "search",
]

LLM_VISIBLE = ("title", "source", "heading_path", "page")
"""The metadata keys a framework that renders metadata into prompts should show the model; the
provenance (scores, ranks, legs, paths) and the document metadata stay out of prompts."""

Comparison = Literal["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"]
COMPARISONS: tuple[Comparison, ...] = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
"""The comparisons clew's filter syntax can express: equality (of the value, or membership of
a list field), its negation, ranges (numbers or ISO times), membership and its negation."""

_COMBINATORS = ("and", "or", "not")


def missing_framework(module: str, framework: str, extra: str) -> ImportError:
    """The ImportError an adapter raises when its framework is not installed."""
    return ImportError(
        f"{module} needs {framework}, which is not installed: pip install 'clew[{extra}]'"
    )


@dataclass(frozen=True, slots=True)
class Retrieved:
    """One hit of :func:`search` and the metadata a framework's document carries for it."""

    hit: Hit
    metadata: dict[str, Any]


def search(
    engine: Engine,
    query: str,
    *,
    k: int | None = None,
    filter: Mapping[str, Any] | None = None,
    scope: Mapping[str, Any] | None = None,
    preset: str | None = None,
    config: EngineConfig | None = None,
    caller: str | None = None,
) -> list[Retrieved]:
    """:meth:`Engine.search` (``scope`` AND-ed with ``filter`` in every leg), each hit with its
    :func:`hit_metadata`, in clew's order."""
    result = engine.search(
        query,
        k=k,
        filter=filter,
        scope=scope,
        preset=preset,
        config=config,
        caller=caller,
    )
    return [
        Retrieved(hit, hit_metadata(hit, rank, result)) for rank, hit in enumerate(result.hits, 1)
    ]


def hit_metadata(hit: Hit, rank: int, result: SearchResult | None = None) -> dict[str, Any]:
    """A hit's ids, title, source, score, rank, heading path, page (when it has one), full
    provenance and document metadata, as plain JSON (a fresh copy: changing it changes no hit).
    ``result``: the search it came from (its release and trace id)."""
    out: dict[str, Any] = {
        "doc_id": hit.doc_id,
        "chunk_id": hit.chunk_id,
        "title": hit.title,
        "source": hit.source,
        "score": hit.score,
        "rank": rank,
    }
    full = hit.to_dict()
    for key in ("chunk_id", "doc_id", "title", "text", "score", "metadata", "page", "source"):
        full.pop(key, None)
    out.update(full)
    page = getattr(hit, "page", None)  # a paged document's (PDF) chunks have one
    if page is not None:
        out["page"] = page
    out["release"] = None if result is None else result.release
    out["trace_id"] = None if result is None else result.trace_id
    out["metadata"] = hit.metadata
    plain: dict[str, Any] = json.loads(json.dumps(out))
    return plain


# -- filters ---------------------------------------------------------------------------------


def check_filter(spec: Mapping[str, Any] | None, what: str) -> dict[str, Any] | None:
    """A clew filter, validated now and copied in canonical form (None for no filter), so a
    bad one fails where it is given and a later change to the caller's dict changes nothing."""
    if spec is not None and not isinstance(spec, Mapping):
        raise FilterError(
            f"{what} must be a clew filter object (a dict) or None, got {type(spec).__name__}"
        )
    try:
        return to_json(parse_filter(spec))
    except FilterError as exc:
        raise FilterError(f"{what}: {exc}") from None


def comparison(field: str, op: str, value: Any, where: str) -> dict[str, Any]:
    """One condition on document metadata field ``field`` in clew's filter syntax; ``op`` is
    one of :data:`COMPARISONS`. ``where`` names the condition in errors."""
    if not isinstance(field, str) or not field.strip():
        raise FilterError(f"{where}: empty field name")
    if field in _COMBINATORS:
        raise FilterError(
            f"{where}: a metadata field named {field!r} cannot be filtered on (clew's filter "
            f"syntax reads {', '.join(_COMBINATORS)} as combinators)"
        )
    listed = isinstance(value, list | tuple)
    if op in ("in", "nin"):
        if not listed or not value:
            raise FilterError(
                f"{where}: {op!r} needs a non-empty list of values, got {value!r:.60}"
            )
        cond: dict[str, Any] = {field: list(value)}
    elif listed:
        raise FilterError(
            f"{where}: {op!r} compares with one value, got a list; for membership use 'in'"
        )
    elif op in ("eq", "ne"):
        cond = {field: value}
    elif op in ("gt", "gte", "lt", "lte"):
        cond = {field: {op: value}}
    else:
        raise FilterError(f"{where}: unknown comparison {op!r}; allowed: {', '.join(COMPARISONS)}")
    if op in ("ne", "nin"):
        cond = {"not": cond}
    check_filter(cond, where)
    return cond


def all_of(parts: Sequence[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """Every part (None parts ignored; None when none is left)."""
    kept = [dict(p) for p in parts if p]
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else {"and": kept}


def any_of(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """At least one of ``parts`` (a non-empty list)."""
    kept = [dict(p) for p in parts]
    if not kept:
        raise FilterError("an OR of no conditions matches nothing; give at least one")
    return kept[0] if len(kept) == 1 else {"or": kept}


def none_of(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """NOT (all of ``parts``), the NOT of Haystack and LlamaIndex."""
    inner = all_of(parts)
    if inner is None:
        raise FilterError("a NOT of no conditions is ambiguous; give at least one")
    return {"not": inner}
