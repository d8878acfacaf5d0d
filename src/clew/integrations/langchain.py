"""clew as a LangChain retriever (``pip install 'clew[langchain]'``)::

    from clew import Engine
    from clew.integrations.langchain import ClewRetriever

    retriever = ClewRetriever(engine=Engine("idx"), k=5, scope={"tenant": "acme"})
    docs = retriever.invoke("why did ERR-4012 spike?")
    docs = retriever.invoke("refunds", filter={"audience": "public"}, k=3)   # per call

Each ``Document`` is one clew hit, in clew's order: ``page_content`` is the chunk's text,
``id`` its chunk id and ``metadata`` the hit's ids, score, rank and full provenance as plain
JSON (:func:`clew.integrations.common.hit_metadata`).

``filter`` (a clew metadata filter) may be given at construction and replaced per call;
``scope`` (the caller's access filter) only at construction: the engine AND-s it with the
filter in every leg, so no per-call filter can widen what the retriever sees.
"""

from __future__ import annotations

import asyncio
from typing import Any

from clew.config import EngineConfig
from clew.engine import Engine
from clew.integrations.common import check_filter, missing_framework, search

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, PrivateAttr
except ImportError as exc:  # pragma: no cover - exercised by a test that hides LangChain
    raise missing_framework(__name__, "LangChain (langchain-core)", "langchain") from exc

__all__ = ["ClewRetriever"]

_PER_CALL = ("k", "filter", "preset")


class ClewRetriever(BaseRetriever):
    """A LangChain retriever over one :class:`clew.Engine`.

    Options (as :meth:`clew.Engine.search` takes them): ``k`` (hits; default the engine's
    ``search.k``), ``filter`` (clew filter syntax), ``preset``, ``config`` (an
    :class:`~clew.config.EngineConfig` for these searches), ``caller`` (named in traces), and
    ``scope``, the access filter, fixed at construction (read-only afterwards). ``invoke`` and
    ``ainvoke`` take ``k``, ``filter`` and ``preset`` per call; a per-call ``filter`` replaces
    the constructor's, the scope always applies.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    engine: Engine
    k: int | None = None
    filter: dict[str, Any] | None = None
    preset: str | None = None
    config: EngineConfig | None = None
    caller: str | None = None
    _scope: dict[str, Any] | None = PrivateAttr(default=None)

    def __init__(self, *, scope: dict[str, Any] | None = None, **data: Any) -> None:
        if "filter" in data:
            data["filter"] = check_filter(data["filter"], "filter")
        super().__init__(**data)
        self._scope = check_filter(scope, "scope")

    @property
    def scope(self) -> dict[str, Any] | None:
        """The access filter every search of this retriever is confined to (a copy)."""
        return check_filter(self._scope, "scope")

    def _options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(kwargs) - set(_PER_CALL))
        if "scope" in unknown:
            raise TypeError(
                "scope is fixed when the retriever is built (an access filter a call cannot "
                "change); narrow a call with filter=..."
            )
        if unknown:
            raise TypeError(
                f"unexpected keyword argument(s) {unknown}; allowed per call: "
                f"{', '.join(_PER_CALL)}"
            )
        return {
            "k": kwargs.get("k", self.k),
            "filter": check_filter(kwargs["filter"], "filter")
            if "filter" in kwargs
            else self.filter,
            "preset": kwargs.get("preset", self.preset),
        }

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        found = search(
            self.engine,
            query,
            scope=self._scope,
            config=self.config,
            caller=self.caller,
            **self._options(kwargs),
        )
        return [
            Document(page_content=r.hit.text, metadata=r.metadata, id=r.hit.chunk_id) for r in found
        ]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        # the engine blocks (SQLite, model inference): run it in a worker thread
        return await asyncio.to_thread(
            self._get_relevant_documents, query, run_manager=run_manager.get_sync(), **kwargs
        )
