"""clew as a LlamaIndex retriever (``pip install 'clew[llamaindex]'``)::

    from clew import Engine
    from clew.integrations.llamaindex import ClewRetriever

    retriever = ClewRetriever(Engine("idx"), k=5, scope={"tenant": "acme"})
    nodes = retriever.retrieve("why did ERR-4012 spike?")

Each ``NodeWithScore`` is one clew hit, in clew's order: a ``TextNode`` whose ``id_`` is the
chunk id, whose text is the chunk's, whose SOURCE relationship is the document id and whose
metadata is the hit's ids, score, rank and full provenance as plain JSON
(:func:`clew.integrations.common.hit_metadata`). Only title, source, heading path and page
are shown to LLMs and embedders (``excluded_llm_metadata_keys`` /
``excluded_embed_metadata_keys`` hold the rest), so the provenance never fills a prompt.

``filter`` takes clew's filter syntax or LlamaIndex ``MetadataFilters``; ``filters`` (the name
LlamaIndex's own retrievers use) takes ``MetadataFilters``; both given are AND-ed. ``scope``,
the caller's access filter, is AND-ed with them by the engine in every leg. LlamaIndex has no
per-call options: build another retriever over the same engine for another filter (cheap).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from clew.config import EngineConfig
from clew.engine import Engine
from clew.errors import FilterError
from clew.integrations.common import (
    LLM_VISIBLE,
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
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import (
        NodeRelationship,
        NodeWithScore,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )
    from llama_index.core.vector_stores.types import (
        FilterCondition,
        FilterOperator,
        MetadataFilter,
        MetadataFilters,
    )
except ImportError as exc:  # pragma: no cover - exercised by a test that hides LlamaIndex
    raise missing_framework(__name__, "LlamaIndex (llama-index-core)", "llamaindex") from exc

__all__ = ["EMBED_VISIBLE", "ClewRetriever", "translate_filters"]

EMBED_VISIBLE = ("title", "heading_path")
"""The metadata keys an embedder of these nodes sees (the rest is excluded)."""

_OPERATORS: dict[FilterOperator, Comparison] = {
    FilterOperator.EQ: "eq",
    FilterOperator.NE: "ne",
    FilterOperator.GT: "gt",
    FilterOperator.GTE: "gte",
    FilterOperator.LT: "lt",
    FilterOperator.LTE: "lte",
    FilterOperator.IN: "in",
    FilterOperator.NIN: "nin",
}


def translate_filters(filters: MetadataFilters, where: str = "filters") -> dict[str, Any] | None:
    """LlamaIndex ``MetadataFilters`` in clew's filter syntax (None when empty).

    Keys name document metadata fields. Operators ``==`` (on a list field: the list holds the
    value), ``!=``, ``>``, ``>=``, ``<``, ``<=`` (numbers or ISO times), ``in``, ``nin``;
    conditions AND, OR and NOT (not all of its filters). Any other operator is a
    :class:`~clew.errors.FilterError` naming it and what is allowed."""
    parts: list[dict[str, Any]] = []
    for i, item in enumerate(filters.filters):
        at = f"{where}[{i}]"
        if isinstance(item, MetadataFilters):
            nested = translate_filters(item, at)
            if nested is not None:
                parts.append(nested)
            continue
        if not isinstance(item, MetadataFilter):
            raise FilterError(f"{at}: expected a MetadataFilter or MetadataFilters, got {item!r}")
        op = _OPERATORS.get(FilterOperator(item.operator))
        if op is None:
            allowed = ", ".join(o.value for o in _OPERATORS)
            raise FilterError(
                f"{at}: operator {FilterOperator(item.operator).value!r} (key {item.key!r}) is "
                f"not supported by clew; allowed: {allowed}"
            )
        parts.append(comparison(item.key, op, item.value, f"{at} (key {item.key!r})"))
    if not parts:
        return None
    condition = FilterCondition(filters.condition or FilterCondition.AND)
    if condition == FilterCondition.AND:
        return all_of(parts)
    if condition == FilterCondition.OR:
        return any_of(parts)
    if condition == FilterCondition.NOT:
        return none_of(parts)
    raise FilterError(  # pragma: no cover - LlamaIndex has no other condition today
        f"{where}: condition {condition.value!r} is not supported; allowed: and, or, not"
    )


def _as_clew(spec: Any, what: str) -> dict[str, Any] | None:
    if spec is None:
        return None
    if isinstance(spec, MetadataFilters):
        return translate_filters(spec, what)
    if isinstance(spec, Mapping):
        return check_filter(spec, what)
    raise FilterError(
        f"{what} must be a clew filter (a dict), LlamaIndex MetadataFilters or None, got "
        f"{type(spec).__name__}"
    )


class ClewRetriever(BaseRetriever):
    """A LlamaIndex retriever over one :class:`clew.Engine`.

    ``k`` (hits; default the engine's ``search.k``), ``filter`` (clew filter syntax or
    ``MetadataFilters``), ``filters`` (``MetadataFilters``), ``scope`` (the access filter,
    clew syntax), ``preset``, ``config`` (an :class:`~clew.config.EngineConfig` for these
    searches) and ``caller`` (named in traces), as :meth:`clew.Engine.search` takes them."""

    def __init__(
        self,
        engine: Engine,
        *,
        k: int | None = None,
        filter: Mapping[str, Any] | MetadataFilters | None = None,
        filters: MetadataFilters | None = None,
        scope: Mapping[str, Any] | None = None,
        preset: str | None = None,
        config: EngineConfig | None = None,
        caller: str | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.engine = engine
        self.k = k
        self._filter = all_of([_as_clew(filter, "filter"), _as_clew(filters, "filters")])
        self._scope = check_filter(scope, "scope")
        self.preset = preset
        self.config = config
        self.caller = caller

    @property
    def filter(self) -> dict[str, Any] | None:
        """The metadata filter of every search, in clew's syntax (a copy)."""
        return check_filter(self._filter, "filter")

    @property
    def scope(self) -> dict[str, Any] | None:
        """The access filter every search is confined to (a copy)."""
        return check_filter(self._scope, "scope")

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = search(
            self.engine,
            query_bundle.query_str,
            k=self.k,
            filter=self._filter,
            scope=self._scope,
            preset=self.preset,
            config=self.config,
            caller=self.caller,
        )
        out = []
        for r in found:
            hidden_llm = [key for key in r.metadata if key not in LLM_VISIBLE]
            hidden_embed = [key for key in r.metadata if key not in EMBED_VISIBLE]
            node = TextNode(
                id_=r.hit.chunk_id,
                text=r.hit.text,
                metadata=r.metadata,
                excluded_llm_metadata_keys=hidden_llm,
                excluded_embed_metadata_keys=hidden_embed,
                relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=r.hit.doc_id)},
            )
            out.append(NodeWithScore(node=node, score=r.hit.score))
        return out

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # the engine blocks (SQLite, model inference): run it in a worker thread
        return await asyncio.to_thread(self._retrieve, query_bundle)
