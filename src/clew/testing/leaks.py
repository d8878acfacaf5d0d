"""The leak property, for every backend: nothing a filter or a scope hides ever comes back.

For random small corpora (random metadata over small alphabets, texts sharing identifiers such
as ``ERR-4012``, links between documents so graph expansion has edges, several chunks per
document so it has NEXT steps), random filters (equality, membership, ranges, and/or/not,
nested) and random scopes, no returned hit, no node on any expansion path (seed, steps, the
documents a link step goes through), no cited chunk of ``Engine.ask`` nor any step of its "why"
trail, no ``Engine.similar`` suggestion and no id in the written trace belongs to a document
that fails the filter AND the scope; and the text of hidden documents appears nowhere in the
output. Visibility is decided by a reference evaluator written here from the filter's
documented semantics, independent of the engine's mask code, and the lexical leg is checked to
return exactly the visible part of what it returns unfiltered (the filter runs inside the leg,
it does not just drop rows afterwards).

Here are the reference evaluator, the hypothesis strategies, the engine runs and the checks;
``tests/backends/test_leaks.py`` runs the property on every backend (its ``backend`` fixture).
Needs ``hypothesis`` (a dev dependency) at import time.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st

from clew.config import ConceptConfig, EngineConfig, preset_config
from clew.engine import Engine
from clew.errors import FilterError, StoreError
from clew.ingest.analyze import concept_key
from clew.ingest.concepts import ConceptExtractor, find_identifiers
from clew.testing.consistency import without_query
from clew.testing.fakes import FakeHashEncoder
from clew.trace import TraceStore
from clew.types import Document, Hit, SearchResult

__all__ = [
    "CONFIGS",
    "FILTER_SETTINGS",
    "INGEST",
    "LEXICAL_ALL",
    "MARKERS",
    "Checker",
    "Corpus",
    "EngineFor",
    "a_scope_never_widens",
    "corpora",
    "engine_for",
    "fields",
    "filters",
    "nothing_hidden_comes_back",
    "open_engine",
    "queries",
    "scopes",
    "settings_for",
    "unknown_field",
    "visible",
]

# -- the reference evaluator --------------------------------------------------------------------

TIMES = {
    "2025-12-31T23:59:59+01:00": dt.datetime(2025, 12, 31, 22, 59, 59, tzinfo=dt.UTC),
    "2026-01-10T00:00:00Z": dt.datetime(2026, 1, 10, tzinfo=dt.UTC),
    "2026-02-12T08:00:00Z": dt.datetime(2026, 2, 12, 8, tzinfo=dt.UTC),
    "2026-03-01": dt.datetime(2026, 3, 1, tzinfo=dt.UTC),
}
"""The only time strings the strategies produce, with their instants worked out by hand."""


def _number(value: Any) -> float | None:
    """A field value as a number for ranges: numbers (not booleans) and known ISO times."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value in TIMES:
        return TIMES[value].timestamp()
    return None


def _same(stored: Any, wanted: Any) -> bool:
    """Equality of one stored value and one filter value: booleans only equal booleans, numbers
    compare by value (2 == 2.0), strings and null by identity of value; lists never match."""
    if isinstance(stored, list | dict):
        return False
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return isinstance(stored, bool) and isinstance(wanted, bool) and stored == wanted
    if isinstance(stored, int | float) and isinstance(wanted, int | float):
        return float(stored) == float(wanted)
    if stored is None or wanted is None:
        return stored is None and wanted is None
    return type(stored) is type(wanted) and stored == wanted


def _matches(field: str, condition: Any, meta: Mapping[str, Any]) -> bool:
    if field not in meta:
        return False
    stored = meta[field]
    values = stored if isinstance(stored, list) else [stored]
    if isinstance(condition, dict):  # a range: every bound holds for the (scalar) value
        number = _number(stored)
        if number is None:
            return False
        ops = {"gt": float.__gt__, "gte": float.__ge__, "lt": float.__lt__, "lte": float.__le__}
        for op, bound in condition.items():
            limit = _number(bound)
            assert limit is not None
            if not ops[op](number, limit):
                return False
        return True
    wanted = condition if isinstance(condition, list) else [condition]
    return any(_same(v, w) for v in values for w in wanted)


def visible(spec: Mapping[str, Any] | None, meta: Mapping[str, Any]) -> bool:
    """Does a document with ``meta`` pass the filter ``spec`` (JSON form; None = no filter)?"""
    if not spec:
        return True
    for key, value in spec.items():
        if key == "and":
            ok = all(visible(s, meta) for s in value)
        elif key == "or":
            ok = any(visible(s, meta) for s in value)
        elif key == "not":
            ok = not visible(value, meta)
        else:
            ok = _matches(key, value, meta)
        if not ok:
            return False
    return True


def fields(spec: Any) -> set[str]:
    if not isinstance(spec, dict):
        return set()
    out: set[str] = set()
    for key, value in spec.items():
        if key in ("and", "or"):
            out |= set().union(*(fields(s) for s in value))
        elif key == "not":
            out |= fields(value)
        else:
            out.add(key)
    return out


# -- strategies ---------------------------------------------------------------------------------

VALUES: dict[str, list[Any]] = {
    "tenant": ["a", "b", "c", None],
    "audience": ["public", "internal", "sre"],
    "level": [1, 2, 3, 2.0, 2.5, "high"],
    "flag": [True, False, 1, 0],
    "created_at": list(TIMES),
}
LISTABLE = ("tenant", "audience")
IDENTIFIERS = [
    "ERR-4012",
    "ERR-4013",
    "INC-2031",
    "RetryPolicy.MaxAttempts",
    "payments-gateway",
    "ledger_writer",
]
WORDS = ["retry", "ledger", "payout", "refund", "timeout", "storm", "webhook", "settlement"]
MARKERS = ["alfazz", "bravozz", "charliezz", "deltazz", "echozz", "foxtrotzz", "golfzz", "hotelzz"]
"""One word per document that no other document has: its text must never leak."""


@st.composite
def metadata(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, values in VALUES.items():
        if draw(st.booleans()) or draw(st.booleans()):
            if field in LISTABLE and draw(st.booleans()):
                out[field] = draw(st.lists(st.sampled_from(values), min_size=1, max_size=2))
            else:
                out[field] = draw(st.sampled_from(values))
    return out


@st.composite
def paragraph(draw: st.DrawFn) -> str:
    pieces = draw(
        st.lists(st.sampled_from(IDENTIFIERS) | st.sampled_from(WORDS), min_size=4, max_size=12)
    )
    return " ".join(pieces) + "."


@dataclass(frozen=True)
class Corpus:
    docs: tuple[Document, ...]

    @property
    def meta(self) -> dict[str, dict[str, Any]]:
        return {d.doc_id: d.metadata for d in self.docs}


@st.composite
def corpora(draw: st.DrawFn) -> Corpus:
    n = draw(st.integers(min_value=3, max_value=8))
    ids = [f"d{i}" for i in range(n)]
    docs = []
    for i, doc_id in enumerate(ids):
        paragraphs = draw(st.lists(paragraph(), min_size=1, max_size=4))
        at = draw(st.integers(min_value=0, max_value=len(paragraphs) - 1))
        paragraphs[at] = f"{paragraphs[at]} {MARKERS[i]} note."
        links = draw(st.lists(st.sampled_from(ids), max_size=2, unique=True))
        docs.append(
            Document(
                doc_id=doc_id,
                title=f"Note {doc_id}",
                text="\n\n".join(paragraphs),
                source=doc_id,
                metadata=draw(metadata()),
                links=tuple(x for x in links if x != doc_id),
            )
        )
    return Corpus(tuple(docs))


FIELDS = [*VALUES, "ghost"]  # ghost: a field no document has


@st.composite
def conditions(draw: st.DrawFn) -> dict[str, Any]:
    field = draw(st.sampled_from(FIELDS))
    values = VALUES.get(field, ["a", 1])
    kind = draw(st.sampled_from(["eq", "in", "range"]))
    if kind == "eq":
        return {field: draw(st.sampled_from(values))}
    if kind == "in":
        return {field: draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))}
    bounds = st.sampled_from([0, 1, 1.5, 2, 2.5, 3, 4]) | st.sampled_from(list(TIMES))
    ops = draw(st.lists(st.sampled_from(["gt", "gte", "lt", "lte"]), min_size=1, max_size=2))
    return {field: {op: draw(bounds) for op in ops}}


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Several keys in one object (an implicit AND) when their keys differ; else an explicit one."""
    merged: dict[str, Any] = {}
    for p in parts:
        if set(p) & set(merged):
            return {"and": parts}
        merged.update(p)
    return merged


filters = st.recursive(
    conditions(),
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: {"and": xs}),
        st.lists(inner, min_size=1, max_size=3).map(lambda xs: {"or": xs}),
        inner.map(lambda x: {"not": x}),
        st.lists(inner, min_size=2, max_size=2).map(_merge),
    ),
    max_leaves=6,
)
scopes = st.none() | st.sampled_from([{"tenant": "a"}, {"tenant": ["a", "b"]}]) | filters
queries = st.sampled_from(
    [
        "ERR-4012",
        "what else is related to ERR-4012?",
        "ERR-4013 retry storm",
        "RetryPolicy.MaxAttempts payments-gateway",
        "what caused INC-2031 after the ledger_writer timeout?",
        "refund settlement webhook",
        "alfazz bravozz charliezz deltazz echozz foxtrotzz golfzz hotelzz",
    ]
)

# -- engine runs --------------------------------------------------------------------------------

INGEST = EngineConfig().with_overrides(chunk={"max_tokens": 32, "overlap_tokens": 4})
CONFIGS = {
    "default+expand": EngineConfig().with_overrides(
        expand={"enabled": True, "seeds": 3}, rerank={"kind": "features"}
    ),
    "graph-weighted+expand": preset_config("fixed").with_overrides(
        fusion={"graph_weight": 1.0},
        expand={"enabled": True, "seeds": 2},
        trace={"enabled": False},
    ),
    "graph-only+expand": preset_config("graph").with_overrides(
        expand={"enabled": True, "seeds": 1}, trace={"enabled": False}
    ),
    "lexical+expand": preset_config("lexical").with_overrides(
        expand={"enabled": True, "seeds": 2, "max_hops": 2}, trace={"enabled": False}
    ),
}
LEXICAL_ALL = preset_config("lexical").with_overrides(
    fusion={"dedup": False}, trace={"enabled": False}
)


EngineFor = Callable[[Corpus], AbstractContextManager[Engine]]
"""An engine over a corpus, ingested (one per backend)."""
Targets = Callable[[], AbstractContextManager[str | Path]]
"""A fresh, empty index target on one backend (a directory, or a PostgreSQL URL with its own
schema), removed when the block ends."""


@contextmanager
def open_engine(target: str | Path, corpus: Corpus) -> Iterator[Engine]:
    engine = Engine(
        target,
        INGEST,
        create=True,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
    )
    try:
        engine.ingest(list(corpus.docs))
        yield engine
    finally:
        engine.close()


def engine_for(targets: Targets) -> EngineFor:
    """Engines over corpora, each in a fresh target from ``targets``."""

    @contextmanager
    def opened(corpus: Corpus) -> Iterator[Engine]:
        with targets() as target, open_engine(target, corpus) as engine:
            yield engine

    return opened


@contextmanager
def _raises(kind: type[Exception], match: str) -> Iterator[None]:
    """As ``pytest.raises(kind, match=match)``, without pytest."""
    try:
        yield
    except kind as e:
        if not re.search(match, str(e)):
            raise AssertionError(f"{kind.__name__} {str(e)!r} does not match {match!r}") from e
    else:
        raise AssertionError(f"did not raise {kind.__name__} (matching {match!r})")


def doc_of(chunk_id: str) -> str:
    return chunk_id.rsplit("#", 1)[0]


@dataclass
class Checker:
    corpus: Corpus
    shown: set[str]
    """Documents that pass the filter AND the scope."""

    def __post_init__(self) -> None:
        self.hidden = {d.doc_id for d in self.corpus.docs} - self.shown
        self.concepts = {
            concept_key(s, identifier=True)
            for d in self.corpus.docs
            if d.doc_id in self.shown
            for s in find_identifiers(f"{d.title}\n{d.text}")
        }
        self.markers = [MARKERS[int(d[1:])] for d in self.hidden]

    def doc(self, doc_id: str, what: str) -> None:
        assert doc_id in self.shown, f"{what}: document {doc_id!r} is hidden"

    def chunk(self, chunk_id: str, what: str) -> None:
        self.doc(doc_of(chunk_id), f"{what} {chunk_id}")

    def no_hidden_text(self, payload: Any, what: str) -> None:
        """No chunk id nor marker word of a hidden document anywhere in ``payload`` (but in the
        caller's own query, echoed back)."""
        text = json.dumps(without_query(payload), ensure_ascii=False)
        for doc_id in self.hidden:
            assert f'"{doc_id}#' not in text, f"{what}: a chunk of hidden {doc_id} appears"
        for marker in self.markers:
            assert marker not in text, f"{what}: text of a hidden document ({marker}) appears"

    def hit(self, h: Hit, what: str) -> None:
        self.doc(h.doc_id, what)
        self.chunk(h.chunk_id, what)
        for dup in h.duplicates:
            self.chunk(dup, f"{what} duplicate")
        if h.graph is not None:
            trail = set(h.graph.via) | (set(h.graph.concepts) if h.graph.hops == 1 else set())
            assert trail <= self.concepts, f"{what}: graph trail through {trail - self.concepts}"
        for path in h.expansion:
            self.chunk(path.seed, f"{what} expansion seed")
            for step in path.steps:
                self.chunk(step.to, f"{what} expansion step")
                if step.edge in ("LINKS_TO", "LINKED_FROM"):
                    self.doc(step.via, f"{what} {step.edge} step")
                elif step.edge == "MENTIONS":
                    assert step.via in self.concepts, f"{what}: MENTIONS via {step.via!r}"

    def result(self, result: SearchResult, what: str) -> None:
        for h in result.hits:
            self.hit(h, what)
        self.no_hidden_text(result.to_dict()["hits"], what)

    def trace(self, engine: Engine, trace_id: str | None, what: str) -> None:
        assert trace_id is not None
        trace = TraceStore(engine.directory).read(trace_id)
        for name, ranked in trace["lists"].items():
            for chunk_id in ranked["ids"]:
                self.chunk(chunk_id, f"{what} trace list {name}")
        self.no_hidden_text(trace, what)


FILTER_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""The embedded backend's run."""
PG_SETTINGS = settings(FILTER_SETTINGS, max_examples=30)
"""Fewer examples than the embedded run: each one ingests into a fresh schema over SQL."""


def settings_for(backend: str) -> settings:
    """The hypothesis settings of the property on one backend (``embedded``, ``postgres``)."""
    return PG_SETTINGS if backend == "postgres" else FILTER_SETTINGS


def unknown_field(
    meta: dict[str, dict[str, Any]], spec: dict[str, Any] | None, scope: dict[str, Any] | None
) -> bool:
    """Whether the filter names a field no document in the caller's scope has (an error, like
    a typo; with nothing in scope, no filter is one). Fields only documents outside the scope
    have count as unknown: an error must not reveal them."""
    in_scope = [m for m in meta.values() if visible(scope, m)]
    known = set().union(*(set(m) for m in in_scope))
    return bool(in_scope) and bool(fields(spec) - known)


def nothing_hidden_comes_back(
    engine_for: EngineFor,
    corpus: Corpus,
    spec: dict[str, Any] | None,
    scope: dict[str, Any] | None,
    query: str,
) -> None:
    """The property for one example, on engines made by ``engine_for`` (one per backend)."""
    meta = corpus.meta
    shown = {d for d, m in meta.items() if visible(spec, m) and visible(scope, m)}
    typo = unknown_field(meta, spec, scope)
    check = Checker(corpus, shown)
    event("filter names a field no document has" if typo else f"{len(shown)} of {len(meta)} shown")
    with engine_for(corpus) as engine:
        for name, cfg in CONFIGS.items():
            if typo:
                with _raises(FilterError, "appear in no document"):
                    engine.search(query, k=20, filter=spec, scope=scope, config=cfg)
                continue
            result = engine.search(query, k=20, filter=spec, scope=scope, config=cfg)
            check.result(result, name)
            if cfg.trace.enabled:
                check.trace(engine, result.trace_id, name)
        if typo:
            return

        # the filter runs inside the leg: exactly the visible part of the unfiltered list
        everything = engine.search(query, k=1000, config=LEXICAL_ALL).hits
        narrowed = engine.search(query, k=1000, filter=spec, scope=scope, config=LEXICAL_ALL)
        assert {h.chunk_id for h in narrowed.hits} == {
            h.chunk_id for h in everything if h.doc_id in shown
        }

        answer = engine.ask(query, filter=spec, scope=scope, config=CONFIGS["default+expand"])
        for c in answer.citations:
            check.chunk(c.chunk_id, "citation")
            check.doc(c.doc_id, "citation")
            for step in c.why["trail"]:
                check.chunk(step["chunk"], "why trail")
                check.doc(step["document"], "why trail")
                if step["from"] == "graph expansion":
                    check.chunk(step["seed"], "why trail seed")
                    for edge in step["edges"]:
                        check.chunk(edge["to"], "why trail edge")
        for h in answer.hits:
            check.hit(h, "answer hit")
        out = answer.to_dict()
        check.no_hidden_text(out, "answer")
        check.trace(engine, answer.trace_id, "ask")

        in_scope = {d for d, m in meta.items() if visible(scope, m)}
        for doc_id in meta:
            stored = engine.document(doc_id, scope=scope)
            assert (stored is not None) == (doc_id in in_scope), doc_id
            if doc_id not in in_scope:
                with _raises(StoreError, "no document"):
                    engine.similar(doc_id, k=10, filter=spec, scope=scope)
                continue
            for s in engine.similar(doc_id, k=10, filter=spec, scope=scope):
                assert s.doc_id != doc_id
                check.doc(s.doc_id, f"similar to {doc_id}")
                check.chunk(s.chunk_id, f"similar to {doc_id}")


def a_scope_never_widens(
    engine_for: EngineFor, corpus: Corpus, scope: dict[str, Any] | None
) -> None:
    """``{"or": [...]}`` and ``{"not": ...}`` filters that would widen the scope see nothing
    more than the scope itself allows."""
    meta = corpus.meta
    in_scope = {d for d, m in meta.items() if visible(scope, m)}
    widen: list[dict[str, Any]] = [
        {"not": scope or {"tenant": "zzz"}},
        {"or": [scope or {"tenant": "a"}, {"not": {"tenant": "a"}}]},
    ]
    with engine_for(corpus) as engine:
        for spec in widen:
            if unknown_field(meta, spec, scope):
                continue
            for query in ("ERR-4012 retry", "alfazz bravozz charliezz deltazz"):
                hits = engine.search(
                    query, k=100, filter=spec, scope=scope, config=LEXICAL_ALL
                ).hits
                assert {h.doc_id for h in hits} <= in_scope
