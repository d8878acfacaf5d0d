"""clew as a Haystack retriever component (``pip install 'clew[haystack]'``)::

    from haystack import Pipeline
    from clew.integrations.haystack import ClewRetriever

    pipe = Pipeline()
    pipe.add_component("retriever", ClewRetriever("idx", top_k=5, scope={"tenant": "acme"}))
    out = pipe.run({"retriever": {"query": "why did ERR-4012 spike?",
                                  "filters": {"field": "meta.audience", "operator": "==",
                                              "value": "public"}}})

Each ``Document`` of ``out["retriever"]["documents"]`` is one clew hit, in clew's order: ``id``
is the chunk id, ``content`` the chunk's text, ``score`` the hit's score and ``meta`` the hit's
ids, score, rank and full provenance as plain JSON
(:func:`clew.integrations.common.hit_metadata`).

``filters`` use Haystack's syntax (:func:`translate_filters`) at construction and per run,
combined by ``filter_policy`` (replace, the default, or merge); ``scope``, the caller's access
filter, uses clew's syntax, is fixed at construction and is AND-ed with the filters by the
engine in every leg, so no run can widen it. ``to_dict`` records the index (its directory or
PostgreSQL URL) and the options, never the engine: ``from_dict`` opens the index again.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clew.config import EngineConfig
from clew.engine import Engine
from clew.errors import ConfigError, FilterError
from clew.integrations.common import (
    Comparison,
    all_of,
    any_of,
    check_filter,
    comparison,
    missing_framework,
    none_of,
    search,
)

try:
    from haystack import Document, component, default_from_dict, default_to_dict
    from haystack.document_stores.types import FilterPolicy
    from haystack.document_stores.types.filter_policy import apply_filter_policy
except ImportError as exc:  # pragma: no cover - exercised by a test that hides Haystack
    raise missing_framework(__name__, "Haystack (haystack-ai)", "haystack") from exc

__all__ = ["ClewRetriever", "translate_filters"]

_COMPARISONS: dict[str, Comparison] = {
    "==": "eq",
    "!=": "ne",
    ">": "gt",
    ">=": "gte",
    "<": "lt",
    "<=": "lte",
    "in": "in",
    "not in": "nin",
}
_LOGICAL = ("AND", "OR", "NOT")
_ALLOWED = f"{', '.join(_COMPARISONS)} (comparisons); {', '.join(_LOGICAL)} (logical)"


def translate_filters(
    filters: Mapping[str, Any] | None, where: str = "filters"
) -> dict[str, Any] | None:
    """A Haystack filter in clew's filter syntax (None for none).

    Comparisons ``{"field": "meta.<key>", "operator": op, "value": v}`` with op one of ``==``
    (on a list field: the list holds the value), ``!=``, ``>``, ``>=``, ``<``, ``<=`` (numbers
    or ISO times), ``in``, ``not in``; logical ``{"operator": "AND" | "OR" | "NOT",
    "conditions": [...]}`` (NOT: not all of its conditions). clew filters on document metadata
    only, so a field must be ``meta.<key>``. Anything else is a
    :class:`~clew.errors.FilterError` naming it and what is allowed."""
    if filters is None or (isinstance(filters, Mapping) and not filters):
        return None
    return _node(filters, where)


def _node(spec: Any, where: str) -> dict[str, Any]:
    if not isinstance(spec, Mapping) or "operator" not in spec:
        raise FilterError(
            f"{where}: not a Haystack filter: expected {{'field', 'operator', 'value'}} or "
            f"{{'operator', 'conditions'}}, got {spec!r:.80}"
        )
    op = spec["operator"]
    if "conditions" in spec:
        conditions = spec["conditions"]
        if op not in _LOGICAL:
            raise FilterError(
                f"{where}: logical operator {op!r} is not supported; allowed: {', '.join(_LOGICAL)}"
            )
        if not isinstance(conditions, list) or not conditions:
            raise FilterError(f"{where}: {op} needs a non-empty list of conditions")
        parts = [_node(c, f"{where}.conditions[{i}]") for i, c in enumerate(conditions)]
        if op == "AND":
            combined = all_of(parts)
            assert combined is not None  # parts is not empty
            return combined
        return any_of(parts) if op == "OR" else none_of(parts)
    if not isinstance(op, str) or op not in _COMPARISONS:
        raise FilterError(f"{where}: operator {op!r} is not supported by clew; allowed: {_ALLOWED}")
    field = spec.get("field")
    if "value" not in spec or not isinstance(field, str):
        raise FilterError(f"{where}: a comparison needs 'field' (a string), 'operator' and 'value'")
    if not field.startswith("meta.") or len(field) == len("meta."):
        raise FilterError(
            f"{where}: field {field!r} cannot be filtered on; clew filters on document metadata "
            "only: give 'meta.<key>'"
        )
    key = field[len("meta.") :]
    return comparison(key, _COMPARISONS[op], spec["value"], f"{where} ({field} {op})")


@component
class ClewRetriever:
    """A Haystack retriever over one clew index.

    ``index``: the index directory or PostgreSQL URL, opened (with ``config``, an
    :class:`~clew.config.EngineConfig` or its dict) on :meth:`warm_up` or the first run; or
    ``engine``: an open :class:`clew.Engine` (then ``config``, if given, configures the
    searches). ``top_k`` (default the engine's ``search.k``), ``filters`` (Haystack syntax),
    ``scope`` (clew syntax, fixed), ``preset``, ``filter_policy`` and ``caller`` (named in
    traces)."""

    def __init__(
        self,
        index: str | Path | None = None,
        *,
        engine: Engine | None = None,
        top_k: int | None = None,
        filters: dict[str, Any] | None = None,
        scope: dict[str, Any] | None = None,
        preset: str | None = None,
        config: EngineConfig | Mapping[str, Any] | None = None,
        filter_policy: FilterPolicy | str = FilterPolicy.REPLACE,
        caller: str | None = None,
    ) -> None:
        if (index is None) == (engine is None):
            raise ConfigError("ClewRetriever needs exactly one of index (a path or URL) or engine")
        if isinstance(config, Mapping):
            config = EngineConfig.from_dict(dict(config))
        if config is not None and not isinstance(config, EngineConfig):
            raise ConfigError(
                f"config must be an EngineConfig, its dict or None, got {type(config).__name__}"
            )
        self.index = str(index) if index is not None else _target(engine)
        self.top_k = top_k
        translate_filters(filters, "filters")  # a bad filter fails here, not on the first run
        self.filters = copy.deepcopy(filters)
        self._scope = check_filter(scope, "scope")
        self.preset = preset
        self.config = config
        self.filter_policy = (
            FilterPolicy.from_str(filter_policy)
            if isinstance(filter_policy, str)
            else filter_policy
        )
        self.caller = caller
        self._engine = engine
        self._owned = engine is None
        self._opening = threading.Lock()

    @property
    def scope(self) -> dict[str, Any] | None:
        """The access filter every run is confined to (a copy)."""
        return check_filter(self._scope, "scope")

    @property
    def engine(self) -> Engine:
        """The engine, opened from :attr:`index` on first use."""
        with self._opening:  # one engine, however many runs start at once
            if self._engine is None:
                self._engine = Engine(self.index, self.config)
            return self._engine

    def warm_up(self) -> None:
        """Open the index (Haystack calls this before a pipeline's first run)."""
        _ = self.engine

    def close(self) -> None:
        """Close the engine this component opened (one it was given stays open)."""
        with self._opening:
            if self._owned and self._engine is not None:
                self._engine.close()
                self._engine = None

    def to_dict(self) -> dict[str, Any]:
        """The index and the options (never the engine). Given an engine and no config, the
        engine's config is recorded unless it is the default, so the copy searches alike."""
        config = self.config
        if config is None and not self._owned and self.engine.config != EngineConfig():
            config = self.engine.config
        return default_to_dict(
            self,
            index=self.index,
            top_k=self.top_k,
            filters=self.filters,
            scope=self._scope,
            preset=self.preset,
            config=None if config is None else config.to_dict(),
            filter_policy=self.filter_policy.value,
            caller=self.caller,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClewRetriever:
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document])
    def run(
        self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = None
    ) -> dict[str, list[Document]]:
        """The hits of ``query`` as Documents, in clew's order. ``filters`` (Haystack syntax)
        replace or merge with the constructor's (``filter_policy``); ``top_k`` replaces it."""
        combined = apply_filter_policy(self.filter_policy, self.filters, filters)
        clew_filter = translate_filters(combined, "filters")
        found = search(
            self.engine,
            query,
            k=top_k if top_k is not None else self.top_k,
            filter=clew_filter,
            scope=self._scope,
            preset=self.preset,
            config=None if self._owned else self.config,  # an opened engine has its config
            caller=self.caller,
        )
        documents = [
            Document(id=r.hit.chunk_id, content=r.hit.text, meta=r.metadata, score=r.hit.score)
            for r in found
        ]
        return {"documents": documents}

    @component.output_types(documents=list[Document])
    async def run_async(
        self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = None
    ) -> dict[str, list[Document]]:
        """:meth:`run` in a worker thread (the engine blocks)."""
        return await asyncio.to_thread(self.run, query, filters, top_k)


def _target(engine: Engine | None) -> str:
    assert engine is not None
    return engine.url or str(engine.directory)
