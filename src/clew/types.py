"""Core value types. Frozen, slotted dataclasses with stable string ids.

Change a value with :func:`dataclasses.replace`; never mutate. Every hit carries its chunk id,
never a list position, and a tuple of :class:`Contribution` records that say where its score
came from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

JSONValue = Any
"""A value that survives ``json.dumps``: str, int, float, bool, None, list, dict."""

Leg = Literal["lexical", "dense", "graph"]
LEGS: tuple[Leg, ...] = ("lexical", "dense", "graph")

ConceptKind = Literal["identifier", "entity", "phrase"]
CONCEPT_KINDS: tuple[ConceptKind, ...] = ("phrase", "entity", "identifier")
"""Concept kinds by rank: a concept is of the highest kind any mention of it has (a word one
chunk calls a phrase and another an identifier is an identifier), over the chunks counted."""
KIND_RANK: dict[str, int] = {k: i for i, k in enumerate(CONCEPT_KINDS)}
KIND_SQL = "CASE {} WHEN 'identifier' THEN 2 WHEN 'entity' THEN 1 ELSE 0 END"
"""SQL for a kind's rank (format in the column)."""
KIND_OF_RANK_SQL = "CASE {} WHEN 2 THEN 'identifier' WHEN 1 THEN 'entity' ELSE 'phrase' END"
"""SQL for the kind of a rank (format in the expression)."""
EdgeType = Literal["HAS_CHUNK", "NEXT", "MENTIONS", "RELATED_TO", "LINKS_TO"]


@dataclass(frozen=True, slots=True)
class Document:
    """A source document as loaded, before chunking."""

    doc_id: str
    title: str
    text: str
    source: str
    """Where it came from: a file path relative to the ingest root, or a JSONL file and line."""
    metadata: dict[str, JSONValue] = field(default_factory=dict)
    links: tuple[str, ...] = ()
    """Raw link targets (markdown links, ``metadata.links``), resolved to documents in the graph."""
    fmt: str = "txt"
    pages: tuple[int, ...] = ()
    """Where each page starts in ``text`` (character offsets, ascending, the first 0) for a
    paged format (PDF); empty for the others. Each chunk records the page it starts on."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """A contiguous piece of a document: the unit every leg indexes and returns."""

    chunk_id: str
    doc_id: str
    seq: int
    text: str
    content_hash: str
    token_count: int
    heading_path: tuple[str, ...] = ()
    start: int = 0
    """Character offset of the chunk's first character in the document text."""
    end: int = 0
    page: int | None = None
    """The page (1-based) the chunk starts on, for a paged format (PDF); None otherwise."""


@dataclass(frozen=True, slots=True)
class Concept:
    """A normalized concept: an identifier, a named entity or a noun phrase."""

    key: str
    """Normalized form; aliases that normalize to the same key are one concept."""
    label: str
    """The first surface form seen."""
    kind: ConceptKind
    aliases: tuple[str, ...] = ()
    """Every surface form seen for it in one chunk (entity resolution reports these)."""


@dataclass(frozen=True, slots=True)
class Mention:
    """A chunk mentions a concept ``count`` times."""

    concept: Concept
    count: int


@dataclass(frozen=True, slots=True)
class Contribution:
    """One piece of a hit's score: which stage produced it, at what rank, from what raw score."""

    leg: str
    rank: int
    """1-based rank in that leg's list."""
    raw_score: float
    fused_part: float
    """What this contribution added to the fused score (weight / (rrf_k + rank))."""

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "leg": self.leg,
            "rank": self.rank,
            "raw_score": self.raw_score,
            "fused_part": self.fused_part,
        }


TITLE_EDGE = "ABOUT"
"""The step of a title link (:mod:`clew.retrieve.titles`): from a chunk that mentions a concept
to the document the concept titles."""


@dataclass(frozen=True, slots=True)
class PathStep:
    """One chunk-to-chunk step of a graph-expansion walk."""

    edge: str
    """``MENTIONS`` (both chunks mention the concept ``via``), ``NEXT`` (adjacent chunks of one
    document), ``LINKS_TO`` (the document links to ``via``), ``LINKED_FROM`` (``via`` links
    to the document) or ``ABOUT`` (:data:`TITLE_EDGE`: the concept ``via`` is the reached
    document's title; a title link)."""
    via: str
    to: str
    """Chunk id reached by this step."""

    def to_dict(self) -> dict[str, JSONValue]:
        return {"edge": self.edge, "via": self.via, "to": self.to}


@dataclass(frozen=True, slots=True)
class GraphTrail:
    """Why the graph leg reached a chunk: the concepts it came through and the hop count."""

    concepts: tuple[str, ...]
    hops: int
    via: tuple[str, ...] = ()
    """For 2-hop reach: the related concepts the walk passed through."""
    seed: str = ""
    """Personalized PageRank: where the strongest path starts, a query concept's key or the
    chunk id of a seed passage ("" when no seed is within reach of the explanation)."""
    steps: tuple[PathStep, ...] = ()
    """Personalized PageRank: that path's steps, from the seed to this chunk."""

    def to_dict(self) -> dict[str, JSONValue]:
        out: dict[str, JSONValue] = {
            "concepts": list(self.concepts),
            "hops": self.hops,
            "via": list(self.via),
        }
        if self.seed or self.steps:
            out["seed"] = self.seed
            out["steps"] = [s.to_dict() for s in self.steps]
        return out


@dataclass(frozen=True, slots=True)
class ExpansionPath:
    """How graph expansion reached a chunk: from which fused seed, over which edges."""

    seed: str
    """Chunk id of the seed (a top fused hit)."""
    hops: int
    steps: tuple[PathStep, ...]
    weight: float
    """Product of the edge weights along the path (before the hop penalty)."""

    @property
    def by_title(self) -> bool:
        """A title link: the seed's chunk names the reached document by its title."""
        return bool(self.steps) and self.steps[0].edge == TITLE_EDGE

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "seed": self.seed,
            "hops": self.hops,
            "steps": [s.to_dict() for s in self.steps],
            "weight": self.weight,
        }


@dataclass(frozen=True, slots=True)
class LegHit:
    """One entry of one leg's ranked list, before fusion."""

    ordinal: int
    """Internal row number of the chunk in this index release."""
    score: float
    trail: GraphTrail | None = None


@dataclass(frozen=True, slots=True)
class Hit:
    """A fused, deduplicated search result with its full provenance."""

    chunk_id: str
    doc_id: str
    title: str
    text: str
    score: float
    metadata: dict[str, JSONValue]
    contributions: tuple[Contribution, ...]
    graph: GraphTrail | None = None
    heading_path: tuple[str, ...] = ()
    content_hash: str = ""
    duplicates: tuple[str, ...] = ()
    """Chunk ids with the same content hash that were folded into this hit."""
    token_count: int = 0
    """Embedding-tokenizer tokens of the chunk as embedded (title and headings included)."""
    expansion: tuple[ExpansionPath, ...] = ()
    """Graph-expansion paths that reached this chunk, best first (empty if none did)."""
    rerank: RerankNote | None = None
    """What the reranker did to this hit (None when no reranker ran on it)."""
    page: int | None = None
    """The page (1-based) the chunk starts on, for a paged document (PDF); None otherwise."""
    source: str = ""
    """Where its document came from: a file path relative to the ingest root, a JSONL file
    and line, ``api`` or ``memory``."""

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "chunk_id": self.chunk_id,
            "doc_id": self.doc_id,
            "title": self.title,
            "text": self.text,
            "score": self.score,
            "metadata": self.metadata,
            "heading_path": list(self.heading_path),
            "contributions": [c.to_dict() for c in self.contributions],
            "graph": None if self.graph is None else self.graph.to_dict(),
            "duplicates": list(self.duplicates),
            "token_count": self.token_count,
            "expansion": [p.to_dict() for p in self.expansion],
            "rerank": None if self.rerank is None else self.rerank.to_dict(),
            "page": self.page,
            "source": self.source,
        }


@dataclass(frozen=True, slots=True)
class RerankNote:
    """A reranker's effect on one hit: its rank before and after, its score and why."""

    reranker: str
    before: int
    """1-based rank in the fused (and expanded) order."""
    after: int
    """1-based rank after reranking."""
    score: float | None
    explain: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "reranker": self.reranker,
            "before": self.before,
            "after": self.after,
            "score": self.score,
            "explain": dict(self.explain),
        }


@dataclass(frozen=True, slots=True)
class RerankStatus:
    """Whether the reranker ran, or fell back to fused order and why."""

    reranker: str
    ran: bool
    reason: str = ""
    """Why it fell back (exception text), empty when it ran."""
    notes: tuple[str, ...] = ()
    """Problems it reported while running (ignored labels, missing grades)."""
    pool: int = 0

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "reranker": self.reranker,
            "ran": self.ran,
            "reason": self.reason,
            "notes": list(self.notes),
            "pool": self.pool,
        }


PLAN_STEPS = ("lexical", "dense", "graph.walk", "graph.ppr", "graph.titles")
"""The steps a plan may hold."""


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step of a query's plan: which retrieval it runs, on what it waits, with what."""

    step: str
    """One of :data:`PLAN_STEPS`."""
    after: tuple[str, ...] = ()
    """Steps whose output this one reads (``graph.ppr`` seeds from the lexical and dense
    passages)."""
    params: dict[str, JSONValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.step not in PLAN_STEPS:
            raise ValueError(
                f"plan step {self.step!r} is unknown; allowed: {', '.join(PLAN_STEPS)}"
            )

    def to_dict(self) -> dict[str, JSONValue]:
        return {"step": self.step, "after": list(self.after), "params": dict(self.params)}


@dataclass(frozen=True, slots=True)
class Route:
    """Which legs run and with what weight, and the query features that chose them."""

    legs: dict[str, float]
    features: tuple[str, ...]
    expand: bool = False
    """The router asks for graph expansion (a relation cue and a linked concept)."""
    weighed_by: str = "rules"
    """``rules``, or the version of the router model that set the lexical and dense weights."""
    reason: str = ""
    """Why the learned weights are what they are: ``dense 1.6, lexical 0.4 (lexical top z
    0.4; leg overlap@10 0.1)``."""
    signals: dict[str, float] = field(default_factory=dict)
    """The signals the router model read (:mod:`clew.retrieve.signals`), rounded."""
    plan: tuple[PlanStep, ...] = ()
    """The retrieval steps the query ran, in order, with their inputs and parameters."""

    def to_dict(self) -> dict[str, JSONValue]:
        out: dict[str, JSONValue] = {
            "legs": dict(self.legs),
            "features": list(self.features),
            "expand": self.expand,
            "weighed_by": self.weighed_by,
        }
        if self.reason:
            out["reason"] = self.reason
        if self.signals:
            out["signals"] = dict(self.signals)
        if self.plan:
            out["plan"] = [s.to_dict() for s in self.plan]
        return out


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What :meth:`clew.Engine.search` always returns."""

    query: str
    route: Route
    hits: tuple[Hit, ...]
    release: int
    timings_ms: dict[str, float]
    filter: dict[str, JSONValue] | None = None
    preset: str = "default"
    rerank: RerankStatus | None = None
    """None when no reranker was configured."""
    trace_id: str | None = None
    """Id of the trace this search wrote (``clew replay``), None when tracing is off."""
    cached: bool = False
    """Served from the result cache (same query, config, filter, scope and release)."""

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "query": self.query,
            "preset": self.preset,
            "filter": self.filter,
            "route": self.route.to_dict(),
            "hits": [h.to_dict() for h in self.hits],
            "release": self.release,
            "timings_ms": dict(self.timings_ms),
            "rerank": None if self.rerank is None else self.rerank.to_dict(),
            "trace_id": self.trace_id,
            "cached": self.cached,
        }


@dataclass(frozen=True, slots=True)
class StoredChunk:
    chunk_id: str
    seq: int
    text: str


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """A document as the index holds it (:meth:`clew.Engine.document`)."""

    doc_id: str
    title: str
    source: str
    metadata: dict[str, JSONValue]
    text: str
    chunks: tuple[StoredChunk, ...]
    release: int
    """The release that last wrote it."""

    @classmethod
    def from_store(
        cls, doc: Mapping[str, Any], chunks: Sequence[tuple[int, str, int, str]]
    ) -> StoredDocument:
        """From a store's ``document()`` row and its (ordinal, chunk id, seq, text) chunks."""
        return cls(
            doc_id=doc["doc_id"],
            title=doc["title"],
            source=doc["source"],
            metadata=doc["metadata"],
            text=doc["text"],
            chunks=tuple(StoredChunk(c[1], c[2], c[3]) for c in chunks),
            release=doc["release"],
        )

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "id": self.doc_id,
            "title": self.title,
            "source": self.source,
            "metadata": self.metadata,
            "text": self.text,
            "release": self.release,
            "chunks": [{"chunk_id": c.chunk_id, "seq": c.seq, "text": c.text} for c in self.chunks],
        }


@dataclass(frozen=True, slots=True)
class DocumentSummary:
    """One line of a listing of the index's documents (:meth:`clew.Engine.documents`): what a
    document is, without its text."""

    doc_id: str
    title: str
    source: str
    chunks: int
    """How many chunks it has."""
    release: int
    """The release that last wrote it."""
    metadata: dict[str, JSONValue] = field(default_factory=dict)

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "id": self.doc_id,
            "title": self.title,
            "source": self.source,
            "chunks": self.chunks,
            "release": self.release,
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class Similar:
    """A "more like this" neighbour of a document: dense similarity of the best chunk pair."""

    doc_id: str
    title: str
    score: float
    chunk_id: str
    """The neighbour's chunk closest to the document."""

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "doc_id": self.doc_id,
            "title": self.title,
            "score": round(self.score, 6),
            "chunk_id": self.chunk_id,
        }


API_SOURCE = "api"
"""The ``source`` of every document written through the HTTP API (no file behind it)."""


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file a directory ingest did not load, and why (unsupported type, no text layer,
    corrupt, too big, not UTF-8 ...)."""

    path: str
    """Relative to the ingested directory (the id its document would have had)."""
    reason: str

    def to_dict(self) -> dict[str, JSONValue]:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What an ingest did, document by document."""

    added: tuple[str, ...]
    updated: tuple[str, ...]
    unchanged: tuple[str, ...]
    chunks_written: int
    release: int
    seconds: float
    skipped: tuple[SkippedFile, ...] = ()
    """Files of a directory that were not loaded, each with its reason."""
    removed: tuple[str, ...] = ()
    """Documents removed because their source file is gone (``prune``)."""
    calibrated: float | None = None
    """The abstention threshold this ingest measured for its scope (``answer.self_calibrate``);
    None when it measured none."""

    @property
    def ingested(self) -> int:
        """Documents this ingest loaded (added, updated or unchanged)."""
        return len(self.added) + len(self.updated) + len(self.unchanged)

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "added": list(self.added),
            "updated": list(self.updated),
            "unchanged": list(self.unchanged),
            "chunks_written": self.chunks_written,
            "release": self.release,
            "seconds": self.seconds,
            "skipped": [s.to_dict() for s in self.skipped],
            "removed": list(self.removed),
            "calibrated": self.calibrated,
        }
