"""Request and response bodies of the HTTP API. pydantic lives only at this boundary: handlers
turn these into engine calls and engine results (dataclasses) into the same JSON the CLI prints.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from clew.config import ANSWER_MODES, PRESETS, RERANKERS

__all__ = [
    "AskRequest",
    "DeleteResponse",
    "DocumentIn",
    "DocumentList",
    "DocumentStatus",
    "DocumentSummaryOut",
    "DocumentsRequest",
    "GateResponse",
    "HealthResponse",
    "JobAccepted",
    "JobStatus",
    "SearchRequest",
    "SimilarResponse",
]

MAX_QUERY_CHARS = 2_000
MAX_K = 100
MAX_FILTER_DEPTH = 16
MAX_FILTER_NODES = 1_000
MAX_PAGE = 1_000
"""Most documents one page of ``GET /documents`` lists."""

# spelled out for the OpenAPI schema and the type checker; a test keeps them equal to the engine's
Preset = Literal["default", "dense", "fixed", "graph", "hybrid", "lexical", "rules"]
Rerank = Literal["none", "features", "cross-encoder", "llm"]
Mode = Literal["extractive", "generative"]
CHOICES = {"preset": (Preset, PRESETS), "rerank": (Rerank, RERANKERS), "mode": (Mode, ANSWER_MODES)}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_filter(value: dict[str, Any] | None, what: str = "filter") -> dict[str, Any] | None:
    """Bound a filter's size before the engine parses it (its own errors name bad fields), and
    refuse what no response could carry back: NaN or infinite numbers (JSON has none) and
    unpaired surrogates (``"\\ud800"``, which no UTF-8 encoder accepts)."""
    if value is None:
        return None
    nodes = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if depth > MAX_FILTER_DEPTH:
            raise ValueError(f"{what} is nested deeper than {MAX_FILTER_DEPTH} levels")
        if nodes > MAX_FILTER_NODES:
            raise ValueError(f"{what} has more than {MAX_FILTER_NODES} values")
        if isinstance(item, dict):
            for k, v in item.items():
                _check_text(k, what)
                stack.append((v, depth + 1))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{what} holds {item!r}; allowed: finite numbers")
        elif isinstance(item, str):
            _check_text(item, what)
    return value


def _check_text(text: str, what: str) -> None:
    bad = _SURROGATE.search(text)
    if bad is not None:
        raise ValueError(
            f"{what} holds an unpaired surrogate {bad.group(0)!r}; allowed: valid Unicode text"
        )


class _Query(_Body):
    k: int | None = Field(
        None, ge=1, le=MAX_K, strict=True, description="number of hits (default 10)"
    )
    filter: dict[str, Any] | None = Field(
        None,
        description='access filter, e.g. {"audience": "public"}; AND-ed with the key\'s scope',
        examples=[{"audience": "public"}],
    )
    preset: Preset | None = Field(None, description="config preset")
    expand: bool | None = Field(None, description="graph expansion (default: as configured)")
    rerank: Rerank | None = Field(None, description="reranker (default: as configured)")

    _filter = field_validator("filter")(_check_filter)


class SearchRequest(_Query):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, examples=["ERR-4413"])


class AskRequest(_Query):
    question: str = Field(
        min_length=1, max_length=MAX_QUERY_CHARS, examples=["What does ERR-4413 mean?"]
    )
    mode: Mode | None = Field(None, description="extractive (default) or generative")


class RelationIn(_Body):
    type: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$", examples=["caused_by"])
    target: str = Field(
        min_length=1, max_length=600, description="memory/document id, or concept:NAME"
    )


class MemoryIn(_Body):
    text: str = Field(min_length=1, max_length=100_000)
    session: str | None = Field(None, min_length=1, max_length=512)
    time: str | None = Field(None, description="ISO 8601; default now", examples=["2026-03-01"])
    metadata: dict[str, Any] | None = None
    relations: list[RelationIn] = Field(default_factory=list, max_length=100)

    _meta = field_validator("metadata")(_check_filter)


class RecallRequest(_Body):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    session: str | None = Field(None, min_length=1, max_length=512)
    since: str | None = Field(None, description="created at or after (ISO 8601)")
    until: str | None = Field(None, description="created before (ISO 8601)")
    as_of: str | None = Field(None, description="only what was known then (ISO 8601)")
    k: int | None = Field(None, ge=1, le=MAX_K)
    filter: dict[str, Any] | None = None

    _filter = field_validator("filter")(_check_filter)


class MemoryCreated(BaseModel):
    id: str


class Forgotten(BaseModel):
    forgotten: str
    release: int


class DocumentIn(_Body):
    id: str = Field(min_length=1, max_length=512, pattern=r"^[^\x00-\x1f\x7f]+$")
    text: str = Field(
        min_length=1,
        description="the document's text (markdown or plain); markdown that opens with YAML "
        "front matter (a `---` line) has it read as a markdown file's is: its fields join "
        "`metadata` (which wins), its `title` is the title unless `title` is given, its "
        "`links` join `links`",
    )
    title: str | None = Field(None, max_length=1_000)
    metadata: dict[str, Any] = Field(default_factory=dict, description="filterable fields")
    links: list[str] = Field(default_factory=list, max_length=1_000)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text is blank; a document needs at least one word")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        _check_filter(value, "metadata")  # the same depth, size and value bounds
        return value


class DocumentsRequest(_Body):
    documents: list[DocumentIn] = Field(min_length=1)

    @field_validator("documents")
    @classmethod
    def _unique(cls, value: list[DocumentIn]) -> list[DocumentIn]:
        seen: set[str] = set()
        for i, doc in enumerate(value):
            if doc.id in seen:
                raise ValueError(f"documents[{i}].id={doc.id!r} appears twice in the batch")
            seen.add(doc.id)
        return value


class JobAccepted(BaseModel):
    job_id: str
    status_url: str
    total: int


class DocumentStatus(BaseModel):
    id: str
    status: Literal["pending", "added", "updated", "unchanged", "failed"]
    error: str | None = None


class JobStatus(BaseModel):
    job_id: str
    state: Literal["queued", "running", "done", "failed"]
    total: int
    done: int
    failed: int
    documents: list[DocumentStatus]
    release: int | None = None
    error: str | None = None
    created_at: float
    finished_at: float | None = None


class DocumentSummaryOut(BaseModel):
    id: str
    title: str
    source: str
    chunks: int
    release: int
    metadata: dict[str, Any]


class DocumentList(BaseModel):
    """One page of ``GET /documents``: the documents the caller's key can see, in id order."""

    documents: list[DocumentSummaryOut]
    next: str | None = Field(
        None, description="pass as `after` for the next page; null on the last page"
    )


class DeleteResponse(BaseModel):
    deleted: str
    release: int


class SimilarResponse(BaseModel):
    doc_id: str
    similar: list[dict[str, Any]]


class GateResponse(BaseModel):
    passed: bool
    datasets: list[str] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)


class HealthResponse(BaseModel):
    """Liveness for anyone; the release and corpus counts only for a key with metrics rights
    (they are corpus-wide: see :mod:`clew.serve.auth`)."""

    status: Literal["ok"]
    release: int | None = None
    documents: int | None = None
    chunks: int | None = None
