"""The Snapshot conformance suite: every backend's :class:`~clew.protocols.Snapshot` must pass
it (``tests/backends`` runs it on each through one ``backend`` fixture). Each ``check_*`` function
takes ``open_engine(config) -> Engine`` for a fresh, empty index, ingests a small fixture corpus
and raises ``AssertionError`` naming the method, case and chunks on the first violation. The
checks of what a snapshot is of (release, a scope's view and kinds) and ``check_snapshot``, the
whole suite, are in :mod:`clew.testing.snapshot_releases`."""

from __future__ import annotations

import datetime as dt
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from clew.config import DenseConfig, EngineConfig
from clew.errors import FilterError
from clew.filters import filter_key, parse_filter
from clew.ingest.analyze import analyze, concept_key, query_terms
from clew.ingest.concepts import find_identifiers
from clew.protocols import ChunkRow, ScopeStats, Snapshot, Where
from clew.types import Document, LegHit

if TYPE_CHECKING:
    from clew.engine import Engine

# -- the Snapshot suite ---------------------------------------------------------------------------
#
# Each ``check_snapshot_*`` function takes ``open_engine``: a factory for a fresh, empty Engine on
# the backend under test, given the config to open it with, using a deterministic encoder
# (:class:`clew.testing.fakes.FakeHashEncoder`) and identifier-only concepts. It ingests the small
# corpus below (linked documents with identifiers such as ERR-4012, one document deleted again,
# one memory) and checks :meth:`Engine.snapshot` against what the corpus says by construction:
# the expected chunks of every filter are written here by hand, not computed by the backend's
# filter code. The engine is closed at the end.

SNAPSHOT_CONFIG = EngineConfig().with_overrides(
    chunk={"max_tokens": 32, "overlap_tokens": 4}, trace={"enabled": False}
)
"""Small chunks, so most documents have several; no traces."""

OpenEngine = Callable[[EngineConfig], "Engine"]
"""A fresh, empty engine on the backend under test, opened with the given config."""


def make_doc(
    doc_id: str, title: str, meta: dict[str, Any], links: Sequence[str], *text: str
) -> Document:
    return Document(doc_id, title, "\n\n".join(text), doc_id, dict(meta), tuple(links))


SNAPSHOT_DOCS: tuple[Document, ...] = (
    make_doc(
        "runbook-gateway",
        "Gateway runbook",
        {"audience": "public", "tenant": "acme"},
        ["incident-2031"],
        "When ERR-4012 fires the payments-gateway starts failing requests and every client "
        "retries at once, so the queue grows quickly and latency climbs for all tenants.",
        "Raise RetryPolicy.MaxAttempts only after the payments-gateway recovers; a retry storm "
        "that follows ERR-4012 otherwise doubles the load on the ledger.",
    ),
    make_doc(
        "incident-2031",
        "Incident review",
        {"audience": "internal", "tenant": "acme"},
        ["runbook-gateway"],
        "INC-2031 began with ERR-4012 in ledger_writer during the nightly settlement batch, "
        "when the database connection pool was exhausted by long transactions.",
        "The ledger_writer timeout caused a retry storm against the payments-gateway that "
        "lasted forty minutes before the on-call engineer paused the batch.",
    ),
    make_doc(
        "postmortem-ledger",
        "Ledger postmortem",
        {"audience": "internal", "tenant": "globex"},
        ["incident-2031"],
        "The ledger_writer postmortem for INC-2031 lists ERR-4012 as the first symptom and a "
        "missing index on the journal table as the cause.",
    ),
    make_doc(
        "faq-refunds",
        "Refund questions",
        {"audience": "public", "tenant": "globex"},
        [],
        "Refund settlement webhook errors show ERR-4013 when the merchant account is closed; "
        "the webhook is retried hourly for a day.",
    ),
    make_doc(
        "mirror-a",
        "Cutoff",
        {"audience": "public", "tenant": "initech"},
        [],
        "Settlement cutoff hour for ERR-4013 payouts is noon.",
    ),
    make_doc(
        "mirror-b",
        "Cutoff",
        {"audience": "public", "tenant": "initech"},
        [],
        "Settlement cutoff hour for ERR-4013 payouts is noon.",
    ),
    make_doc(
        "notes-untagged",
        "Loose notes",
        {"audience": "public"},
        ["runbook-gateway"],
        "Loose notes: ERR-4012 again, check the payments-gateway dashboard first.",
    ),
)
"""The corpus. ``mirror-a`` and ``mirror-b`` have the same title and text, so every leg scores
them equally and must order them by ordinal. ``notes-untagged`` has no tenant."""

SNAPSHOT_STALE = make_doc(
    "stale-draft",
    "Draft",
    {"audience": "public", "tenant": "acme"},
    [],
    "A zebrafish draft about ERR-4012 and INC-9999 that was deleted again.",
)
"""Ingested, then deleted: its chunks are dead in the snapshot (``zebrafish`` and ``INC-9999``
appear nowhere else)."""

SNAPSHOT_MEMORY = "ERR-4012 recurred after the ledger_writer deploy and was rolled back."
SNAPSHOT_MEMORY_AT = "2026-03-01T12:00:00Z"
SNAPSHOT_MEMORY_META: dict[str, Any] = {"tenant": "acme", "audience": "internal"}
MEMORY = "@memory"
"""Stands for the memory's document id in :data:`SNAPSHOT_CASES`."""

_ALL = frozenset(d.doc_id for d in SNAPSHOT_DOCS) | {MEMORY}
_PUBLIC = frozenset({"runbook-gateway", "faq-refunds", "mirror-a", "mirror-b", "notes-untagged"})


@dataclass(frozen=True)
class SnapshotCase:
    """One request's filter, scope and hidden documents, and the documents they allow."""

    name: str
    filter: Any
    scope: Any
    exclude: tuple[str, ...]
    docs: frozenset[str]


SNAPSHOT_CASES: tuple[SnapshotCase, ...] = (
    SnapshotCase("nothing", None, None, (), _ALL),
    SnapshotCase("filter audience=public", {"audience": "public"}, None, (), _PUBLIC),
    SnapshotCase(
        "scope tenant=acme",
        None,
        {"tenant": "acme"},
        (),
        frozenset({"runbook-gateway", "incident-2031", MEMORY}),
    ),
    SnapshotCase(
        "filter internal, scope tenant in [acme, globex]",
        {"audience": "internal"},
        {"tenant": ["acme", "globex"]},
        (),
        frozenset({"incident-2031", "postmortem-ledger", MEMORY}),
    ),
    SnapshotCase(
        "filter or, excluding faq-refunds",
        {"or": [{"tenant": "globex"}, {"audience": "public"}]},
        None,
        ("faq-refunds",),
        frozenset(
            {"postmortem-ledger", "runbook-gateway", "mirror-a", "mirror-b", "notes-untagged"}
        ),
    ),
    SnapshotCase(
        "filter not tenant=acme",
        {"not": {"tenant": "acme"}},
        None,
        (),
        frozenset({"postmortem-ledger", "faq-refunds", "mirror-a", "mirror-b", "notes-untagged"}),
    ),
    SnapshotCase(
        "excluding incident-2031 and the memory",
        None,
        None,
        ("incident-2031", MEMORY),
        _ALL - {"incident-2031", MEMORY},
    ),
    SnapshotCase(
        "filter kind=memory, scope tenant=acme",
        {"kind": "memory"},
        {"tenant": "acme"},
        (),
        frozenset({MEMORY}),
    ),
    SnapshotCase(
        "filter public, scope acme, excluding runbook-gateway (nothing left)",
        {"audience": "public"},
        {"tenant": "acme"},
        ("runbook-gateway",),
        frozenset(),
    ),
    SnapshotCase("scope on an unknown field", None, {"ghost": "x"}, (), frozenset()),
)

SNAPSHOT_QUERIES = (
    "ERR-4012 retry storm",
    "what else is related to ERR-4012 and INC-2031?",
    "settlement cutoff ERR-4013",
    "ledger_writer timeout",
    "zebrafish INC-9999",
)
"""Queries for every leg. The last names only words of the deleted document."""


@dataclass
class SnapshotFixture:
    """The corpus ingested into one engine, and what the checks compare against."""

    engine: Engine
    snap: Snapshot
    before_memory: Snapshot
    """The release before the memory was written."""
    before_has_memories: bool
    """Its ``has_memories()``, asked before the memory was written."""
    before_created: Mapping[int, tuple[float, bool]] | None
    """Its ``created(live, True)``, asked before the memory was written."""
    memory_id: str
    doc_of: dict[int, str]
    """Live ordinal → its document."""
    rows: dict[int, ChunkRow]
    """Live ordinal → its row (read once, from the release's snapshot)."""
    dead: list[int]
    """Ordinals of the deleted document's chunks."""
    name: str
    """The snapshot's class, to name the backend in messages."""

    def docs(self, case: SnapshotCase) -> set[str]:
        return {self.memory_id if d == MEMORY else d for d in case.docs}

    def exclude(self, case: SnapshotCase) -> list[str]:
        return [self.memory_id if d == MEMORY else d for d in case.exclude]

    def allowed(self, case: SnapshotCase) -> set[int]:
        docs = self.docs(case)
        return {o for o, d in self.doc_of.items() if d in docs}

    def ordinals(self, doc_id: str) -> set[int]:
        return {o for o, d in self.doc_of.items() if d == doc_id}

    def where(self, case: SnapshotCase, *, filter: bool = True, exclude: bool = True) -> Where:
        return self.snap.where(
            parse_filter(case.filter) if filter else None,
            parse_filter(case.scope),
            self.exclude(case) if exclude else (),
        )

    def stats(self, case: SnapshotCase) -> ScopeStats | None:
        return self.snap.scope_stats(scope_json(case.scope))

    def label(self, ordinal: int) -> str:
        row = self.rows.get(ordinal)
        return f"#{ordinal} ({row.chunk_id if row else 'not a live chunk'})"

    def mentions(self, ordinal: int) -> set[str]:
        """Identifier concept keys in a live chunk's text."""
        return _identifier_keys(self.rows[ordinal].text)

    def tokens(self, ordinal: int) -> set[str]:
        """The analyzer tokens of a live chunk (its title and headings included)."""
        row = self.rows[ordinal]
        return set(analyze("\n".join([row.title, *row.heading_path, row.text])))

    def close(self) -> None:
        self.engine.close()


def scope_json(scope: Any) -> str | None:
    return filter_key(parse_filter(scope))


def _identifier_keys(text: str) -> set[str]:
    return {concept_key(s, identifier=True) for s in find_identifiers(text)}


def _epoch(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def snapshot_fixture(open_engine: OpenEngine) -> SnapshotFixture:
    """Ingest the corpus (and the stale document, deleted again), then write the memory."""
    engine = open_engine(SNAPSHOT_CONFIG)
    try:
        engine.ingest([*SNAPSHOT_DOCS, SNAPSHOT_STALE])
        first = engine.snapshot()
        ords = [int(o) for o in np.flatnonzero(first.live)]
        dead = sorted(o for o, r in first.rows(ords).items() if r.doc_id == SNAPSHOT_STALE.doc_id)
        assert dead, "the stale document has chunks before it is deleted"
        engine.delete(SNAPSHOT_STALE.doc_id)
        before = engine.snapshot()
        before_live = [int(o) for o in np.flatnonzero(before.live)]
        before_has, before_created = before.has_memories(), before.created(before_live, True)
        memory_id = engine.remember(
            SNAPSHOT_MEMORY,
            session="s-1",
            timestamp=SNAPSHOT_MEMORY_AT,
            metadata=SNAPSHOT_MEMORY_META,
        )
        snap = engine.snapshot()
        live = [int(o) for o in np.flatnonzero(snap.live)]
        rows = snap.rows(live)
        name = type(snap).__name__
        assert sorted(rows) == live, f"{name}.rows(live ordinals) returns a row for each one"
        doc_of = {o: r.doc_id for o, r in rows.items()}
        want = {d.doc_id for d in SNAPSHOT_DOCS} | {memory_id}
        assert set(doc_of.values()) == want, (
            f"{name}: the live chunks belong to {sorted(set(doc_of.values()))}, "
            f"expected {sorted(want)}"
        )
        return SnapshotFixture(
            engine, snap, before, before_has, before_created, memory_id, doc_of, rows, dead, name
        )
    except BaseException:
        engine.close()
        raise


def _ranked(fx: SnapshotFixture, hits: Sequence[LegHit], k: int, what: str) -> None:
    """At most k hits, no chunk twice, ranked by score descending then ordinal ascending."""
    assert len(hits) <= k, f"{fx.name} {what}: {len(hits)} hits for k={k}"
    ords = [h.ordinal for h in hits]
    assert len(set(ords)) == len(ords), f"{what}: a chunk comes back twice: {ords}"
    for a, b in itertools.pairwise(hits):
        assert (-a.score, a.ordinal) < (-b.score, b.ordinal), (
            f"{fx.name} {what}: {fx.label(a.ordinal)} score {a.score} is ranked before "
            f"{fx.label(b.ordinal)} score {b.score}; the order is score desc, then ordinal asc"
        )


def _only_allowed(
    fx: SnapshotFixture, hits: Sequence[LegHit], allowed: set[int], what: str
) -> None:
    bad = [fx.label(h.ordinal) for h in hits if h.ordinal not in allowed]
    assert not bad, f"{fx.name} {what}: returned chunks the filter, scope or exclusions hide: {bad}"


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-4 * max(1.0, abs(a), abs(b))


def _same_hits(
    fx: SnapshotFixture, got: Sequence[LegHit], want: Sequence[LegHit], what: str
) -> None:
    assert [h.ordinal for h in got] == [h.ordinal for h in want], (
        f"{fx.name} {what}: got {[fx.label(h.ordinal) for h in got]}, "
        f"expected {[fx.label(h.ordinal) for h in want]}"
    )
    for g, w in zip(got, want, strict=True):
        assert _close(g.score, w.score), (
            f"{fx.name} {what}: {fx.label(g.ordinal)} scores {g.score}, expected {w.score}"
        )


def check_snapshot_filters(open_engine: OpenEngine) -> None:
    """``where`` and ``mask``: each case's mask is exactly its allowed live chunks (filter AND
    scope, minus hidden documents, never a deleted chunk); ``filtered`` says whether anything
    was given; an unknown filter field, or one only documents outside the scope have, is a
    FilterError; an unknown scope field hides everything without error; ``scope_stats`` is None
    unscoped and its population is the scope's mask."""
    fx = snapshot_fixture(open_engine)
    try:
        snap = fx.snap
        live = {int(o) for o in np.flatnonzero(snap.live)}
        assert live == set(fx.doc_of), f"{fx.name}.live is the live chunks"
        assert not live & set(fx.dead), f"{fx.name}.live still holds deleted chunks"
        for case in SNAPSHOT_CASES:
            where = fx.where(case)
            given = case.filter is not None or case.scope is not None or bool(case.exclude)
            assert where.filtered == given, (
                f"{fx.name}.where [{case.name}].filtered is {where.filtered}, expected {given}"
            )
            got = {int(o) for o in np.flatnonzero(snap.mask(where))}
            want = fx.allowed(case)
            assert got == want, (
                f"{fx.name}.mask [{case.name}]: allows {sorted(map(fx.label, got - want))} it "
                f"should hide and hides {sorted(map(fx.label, want - got))} it should allow"
            )

        for spec, scope, why in (
            ({"ghost": "x"}, None, "a field no document has"),
            ({"or": [{"audience": "public"}, {"ghost": 1}]}, None, "a field no document has"),
            (
                {"session": "s-1"},
                {"tenant": "globex"},
                "a field only documents outside the scope have",
            ),
        ):
            try:
                snap.where(parse_filter(spec), parse_filter(scope))
            except FilterError as e:
                assert "ghost" in str(e) or "session" in str(e), (
                    f"{fx.name}.where({spec}, scope={scope}): the FilterError names the field: {e}"
                )
                if scope is not None:
                    assert "kind" not in str(e), (
                        f"{fx.name}.where({spec}, scope={scope}): the FilterError names a field "
                        f"only documents outside the scope have: {e}"
                    )
            else:
                raise AssertionError(
                    f"{fx.name}.where({spec}, scope={scope}) must raise FilterError ({why})"
                )
        # a scope is not strict: over an unknown field it hides everything, without an error
        where = snap.where(None, parse_filter({"ghost": "x"}))
        assert not snap.mask(where).any(), f"{fx.name}: a scope on an unknown field hides all"
        # a filter inside an empty scope is valid, whatever its fields
        where = snap.where(parse_filter({"ghost": 1}), parse_filter({"tenant": "nobody"}))
        assert not snap.mask(where).any(), f"{fx.name}: an empty scope allows nothing"

        assert snap.scope_stats(None) is None, f"{fx.name}.scope_stats(None) is None (unscoped)"
        for case in SNAPSHOT_CASES:
            if case.scope is None:
                continue
            stats = fx.stats(case)
            assert stats is not None, f"{fx.name}.scope_stats [{case.name}] is None"
            got = {int(o) for o in np.flatnonzero(stats.population)}
            want = {
                int(o)
                for o in np.flatnonzero(snap.mask(snap.where(None, parse_filter(case.scope))))
            }
            assert got == want, (
                f"{fx.name}.scope_stats [{case.name}]: the population {sorted(got)} is not the "
                f"scope's mask {sorted(want)}"
            )
    finally:
        fx.close()


def check_snapshot_legs(open_engine: OpenEngine) -> None:
    """The legs under every case and query: ``lexical``, ``dense`` and ``graph`` return only
    chunks the compiled ``where`` allows, at most k, ranked by score desc then ordinal asc, the
    same top k as a deeper search; lexical and dense return exactly the allowed part of what
    they return without the filter and exclusions (the filter runs inside the leg); dense
    covers every allowed chunk; graph hits come from linked concepts and cover every allowed
    chunk that mentions one; ``link`` returns only concepts an allowed chunk mentions, and
    every identifier of the query that one mentions."""
    fx = snapshot_fixture(open_engine)
    try:
        snap = fx.snap
        cfg = SNAPSHOT_CONFIG
        deep_lex = replace(cfg.lexical, depth=1000)
        deep_graph = replace(cfg.graph, depth=1000)
        k = 3
        graph_hits = 0
        for case in SNAPSHOT_CASES:
            allowed = fx.allowed(case)
            where = fx.where(case)
            base = fx.where(case, filter=False, exclude=False)
            stats = fx.stats(case)
            assert where.scoped == (case.scope is not None), (
                f"{fx.name} where [{case.name}]: scoped={where.scoped} (the dense leg scans a "
                "caller's scope exactly)"
            )
            for query in SNAPSHOT_QUERIES:
                at = f"[{case.name}] {query!r}"
                terms = query_terms(query, cfg.lexical.part_weight)

                lex = snap.lexical(terms, where, deep_lex, stats)
                _only_allowed(fx, lex, allowed, f"lexical {at}")
                _ranked(fx, lex, deep_lex.depth, f"lexical {at}")
                assert all(h.score > 0 for h in lex), f"{fx.name} lexical {at}: a score <= 0"
                top = snap.lexical(terms, where, replace(cfg.lexical, depth=k), stats)
                _ranked(fx, top, k, f"lexical {at} at depth {k}")
                _same_hits(fx, top, lex[:k], f"lexical {at} at depth {k} vs the deeper list")
                wide = snap.lexical(terms, base, deep_lex, stats)
                _same_hits(
                    fx,
                    lex,
                    [h for h in wide if h.ordinal in allowed],
                    f"lexical {at} vs the allowed part of the list without filter/exclusions",
                )
                for h in lex:
                    assert set(terms) & fx.tokens(h.ordinal), (
                        f"{fx.name} lexical {at}: {fx.label(h.ordinal)} has no query term"
                    )

                vector = fx.engine.encoder.encode([query])[0]
                dense = snap.dense(vector, where, 1000)
                _only_allowed(fx, dense, allowed, f"dense {at}")
                _ranked(fx, dense, 1000, f"dense {at}")
                missing = allowed - {h.ordinal for h in dense}
                assert not missing, (
                    f"{fx.name} dense {at}: an exact scan with k above the allowed count returns "
                    f"every allowed chunk; missing {sorted(map(fx.label, missing))}"
                )
                top = snap.dense(vector, where, k)
                _ranked(fx, top, k, f"dense {at} at k={k}")
                _same_hits(fx, top, dense[:k], f"dense {at} at k={k} vs the deeper list")
                wide_dense = snap.dense(vector, base, 1000)
                _same_hits(
                    fx,
                    dense,
                    [h for h in wide_dense if h.ordinal in allowed],
                    f"dense {at} vs the allowed part of the list without filter/exclusions",
                )
                cos = snap.cosines(np.asarray([h.ordinal for h in dense], dtype=np.int64), vector)
                for h, c in zip(dense, cos, strict=True):
                    assert _close(h.score, float(c)), (
                        f"{fx.name} dense {at}: {fx.label(h.ordinal)} scores {h.score}, its "
                        f"cosine is {c}"
                    )

                linked = snap.link(query, cfg.graph, where, stats)
                mentioned = set().union(*(fx.mentions(o) for o in allowed))
                keys = [c.key for c in linked]
                assert len(set(keys)) == len(keys), f"{fx.name} link {at}: a concept twice: {keys}"
                assert set(keys) <= mentioned, (
                    f"{fx.name} link {at}: linked {sorted(set(keys) - mentioned)}, which no "
                    "allowed chunk mentions"
                )
                named = _identifier_keys(query) & mentioned
                assert named <= set(keys), (
                    f"{fx.name} link {at}: did not link {sorted(named - set(keys))}, named by the "
                    "query and mentioned by an allowed chunk"
                )
                graph = snap.graph(query, where, deep_graph, linked, stats)
                _only_allowed(fx, graph, allowed, f"graph {at}")
                _ranked(fx, graph, deep_graph.depth, f"graph {at}")
                top_graph = snap.graph(query, where, replace(cfg.graph, depth=k), linked, stats)
                _ranked(fx, top_graph, k, f"graph {at} at depth {k}")
                _same_hits(fx, top_graph, graph[:k], f"graph {at} at depth {k} vs the deeper list")
                graph_hits += len(graph)
                for h in graph:
                    assert h.score > 0, f"{fx.name} graph {at}: {fx.label(h.ordinal)} scores <= 0"
                    trail = h.trail
                    assert trail is not None, (
                        f"{fx.name} graph {at}: {fx.label(h.ordinal)} has no trail"
                    )
                    assert set(trail.concepts) <= set(keys), (
                        f"{fx.name} graph {at}: {fx.label(h.ordinal)} reached through "
                        f"{sorted(set(trail.concepts) - set(keys))}, which were not linked"
                    )
                    if trail.hops == 1:
                        assert set(trail.concepts) <= fx.mentions(h.ordinal), (
                            f"{fx.name} graph {at}: {fx.label(h.ordinal)} is a 1-hop hit via "
                            f"{trail.concepts} but does not mention them"
                        )
                    else:
                        assert set(trail.via) <= mentioned, (
                            f"{fx.name} graph {at}: {fx.label(h.ordinal)} reached via "
                            f"{sorted(set(trail.via) - mentioned)}, which no allowed chunk mentions"
                        )
                reached = {h.ordinal for h in graph}
                expected = {o for o in allowed if fx.mentions(o) & set(keys)}
                assert expected <= reached, (
                    f"{fx.name} graph {at}: allowed chunks mentioning a linked concept are "
                    f"missing: {sorted(map(fx.label, expected - reached))}"
                )
                if case.docs == _ALL and _identifier_keys(query) & mentioned:
                    assert graph, f"{fx.name} graph {at}: nothing found for a linked identifier"
        assert graph_hits, f"{fx.name}: the graph leg returned nothing in any case"
    finally:
        fx.close()


def check_snapshot_lookups(open_engine: OpenEngine) -> None:
    """What the later stages read: ``release`` and ``live``, ``rows`` (every live chunk, none
    deleted), ``keys`` after ``load_keys``, ``idf`` (rarer terms weigh more; a term absent from
    the scope, or only in deleted chunks, gets the highest), ``cosines`` and ``vectors`` (the
    stored unit vectors; 0 and absent where a chunk has none), ``bm25`` (one score per ordinal,
    the lexical leg's scores, 0 where no term occurs), ``created`` (the memory's time and flag),
    ``has_memories``, ``visible``, the graph index's chunks, and ``uses_hnsw`` on a small index."""
    fx = snapshot_fixture(open_engine)
    try:
        snap, engine, name = fx.snap, fx.engine, fx.name
        cfg = SNAPSHOT_CONFIG
        live = sorted(fx.doc_of)
        docs = {d.doc_id: d for d in SNAPSHOT_DOCS}
        memory = sorted(fx.ordinals(fx.memory_id))
        assert memory, f"{name}: the memory has a chunk"

        assert snap.release == engine.store.release(), f"{name}.release is the store's release"
        assert fx.before_memory.release < snap.release, f"{name}: a write makes a new release"
        assert int(snap.live.sum()) == engine.store.counts()["chunks"], (
            f"{name}.live counts {int(snap.live.sum())} chunks, the store "
            f"{engine.store.counts()['chunks']}"
        )

        # rows and keys
        assert snap.rows([]) == {}, f"{name}.rows([]) is empty"
        got = snap.rows([*live, *fx.dead])
        assert sorted(got) == live, (
            f"{name}.rows: deleted chunks {sorted(set(got) & set(fx.dead))} come back"
        )
        snap.load_keys(live)
        for o, row in got.items():
            assert row.ordinal == o, f"{name}.rows[{o}].ordinal is {row.ordinal}"
            assert row.chunk_id.startswith(f"{row.doc_id}#"), (
                f"{name}.rows[{o}]: chunk id {row.chunk_id!r} is not one of {row.doc_id!r}"
            )
            assert snap.keys[o] == (row.chunk_id, row.content_hash), (
                f"{name}.keys[{o}] is {snap.keys[o]}, its row says "
                f"{(row.chunk_id, row.content_hash)}"
            )
            assert row.text.strip(), f"{name}.rows[{o}] has no text"
            doc = docs.get(row.doc_id)
            if doc is None:
                meta = row.metadata
                assert meta.get("kind") == "memory" and meta.get("session") == "s-1", (
                    f"{name}.rows[{o}]: the memory's metadata is {meta}"
                )
                assert all(meta.get(k) == v for k, v in SNAPSHOT_MEMORY_META.items()), (
                    f"{name}.rows[{o}]: the memory's metadata {meta} lacks {SNAPSHOT_MEMORY_META}"
                )
            else:
                assert row.metadata == doc.metadata, (
                    f"{name}.rows[{o}] metadata {row.metadata}, the document's {doc.metadata}"
                )
                assert row.title == doc.title, f"{name}.rows[{o}] title {row.title!r}"
                assert row.text in doc.text, f"{name}.rows[{o}] text is not in its document"

        # idf (unscoped statistics may still count deleted chunks until the index is rebuilt:
        # the embedded BM25 index drops them through the live mask only; a scope's are exact)
        absent, deleted, rare, common = "absentzzq", "zebrafish", "webhook", "err-4012"
        idf = snap.idf([absent, deleted, rare, common], None)
        assert set(idf) == {absent, deleted, rare, common}, f"{name}.idf keys: {sorted(idf)}"
        assert all(math.isfinite(v) and v > 0 for v in idf.values()), f"{name}.idf: {idf}"
        assert idf[absent] >= max(idf.values()) - 1e-9 and idf[rare] > idf[common], (
            f"{name}.idf: expected absent (the highest) >= rare > common: {idf}"
        )
        acme = SnapshotCase("acme", None, {"tenant": "acme"}, (), frozenset())
        scoped = snap.idf([absent, deleted, rare, common], fx.stats(acme))
        assert scoped[absent] >= max(scoped.values()) - 1e-9, (
            f"{name}.idf in scope tenant=acme: an absent term gets the highest idf: {scoped}"
        )
        for term, why in (
            (rare, "only documents outside the scope have"),
            (deleted, "only deleted chunks had"),
        ):
            assert _close(scoped[term], scoped[absent]), (
                f"{name}.idf in scope tenant=acme: {term!r}, a term {why}, weighs "
                f"{scoped[term]}; an absent term {scoped[absent]}"
            )
        assert scoped[common] < scoped[absent] and scoped[rare] > idf[rare], (
            f"{name}.idf: the scope's numbers are its own: {scoped} vs unscoped {idf}"
        )

        # vectors and cosines
        beyond = max(live) + 1000
        vecs = snap.vectors([*live, beyond])
        assert sorted(vecs) == live, f"{name}.vectors: ordinals {sorted(vecs)}, expected {live}"
        dim = None
        for o, v in vecs.items():
            arr = np.asarray(v, dtype=np.float64)
            dim = dim or arr.shape
            assert arr.ndim == 1 and arr.shape == dim, f"{name}.vectors[{o}] shape {arr.shape}"
            assert abs(float(np.linalg.norm(arr)) - 1.0) < 1e-4, f"{name}.vectors[{o}] not unit"
        query = engine.encoder.encode(["ERR-4012 retry storm"])[0]
        ords = np.asarray([*live, beyond], dtype=np.int64)
        cos = snap.cosines(ords, query)
        assert cos.shape == (len(ords),), f"{name}.cosines shape {cos.shape}"
        for o, c in zip(live, cos, strict=False):
            want = float(np.asarray(vecs[o], dtype=np.float64) @ query)
            assert _close(float(c), want), f"{name}.cosines[{o}] is {c}, its vector gives {want}"
        assert cos[-1] == 0.0, f"{name}.cosines of an ordinal without a chunk is {cos[-1]}, not 0"

        # bm25: the lexical leg's scores, per ordinal
        terms = query_terms("ERR-4012 retry storm", cfg.lexical.part_weight)
        deep = replace(cfg.lexical, depth=1000)
        for case in (SNAPSHOT_CASES[0], acme):
            stats = fx.stats(case)
            where = fx.where(case)
            ords = np.asarray(sorted(np.flatnonzero(snap.mask(where))), dtype=np.int64)
            scores = snap.bm25(terms, ords, cfg.lexical, stats)
            assert scores.shape == (len(ords),) and scores.dtype == np.float64, (
                f"{name}.bm25 [{case.name}]: shape {scores.shape} dtype {scores.dtype}"
            )
            leg = {h.ordinal: h.score for h in snap.lexical(terms, where, deep, stats)}
            for o, s in zip(ords.tolist(), scores.tolist(), strict=True):
                if o in leg:
                    assert _close(s, leg[o]), (
                        f"{name}.bm25 [{case.name}]: {fx.label(o)} is {s}, the lexical leg "
                        f"scores it {leg[o]}"
                    )
                else:
                    assert s == 0.0 and not set(terms) & fx.tokens(o), (
                        f"{name}.bm25 [{case.name}]: {fx.label(o)} is {s} but the lexical leg "
                        "does not return it"
                    )
            none = snap.bm25({absent: 1.0}, ords, cfg.lexical, stats)
            assert none.shape == (len(ords),) and not none.any(), (
                f"{name}.bm25 [{case.name}] of an absent term is not all zeros: {none}"
            )

        # created and memories
        when = _epoch(SNAPSHOT_MEMORY_AT)
        for flag in (True, False):
            created = snap.created(live, flag)
            assert created is not None, f"{name}.created(memories={flag}) is None with a memory"
            for o in live:
                t, is_memory = created.get(o, (math.nan, False))
                if o in memory:
                    assert t == when, f"{name}.created: the memory's time is {t}, not {when}"
                    assert is_memory or not flag, f"{name}.created: the memory is not flagged"
                else:
                    assert math.isnan(t) and not is_memory, (
                        f"{name}.created: {fx.label(o)} is ({t}, {is_memory}), a document "
                        "without created_at is (nan, False)"
                    )
        earlier = fx.before_created
        assert earlier is None or all(math.isnan(t) and not m for t, m in earlier.values()), (
            f"{name}.created before any memory: no chunk has a creation time ({earlier})"
        )
        assert fx.before_has_memories is False, f"{name}.has_memories() before any memory"
        assert snap.has_memories() is True, f"{name}.has_memories() after engine.remember"

        # visible
        in_acme = sorted(fx.ordinals("runbook-gateway") | set(memory))
        outside = min(fx.ordinals("postmortem-ledger"))
        checks: list[tuple[list[int], Any, bool]] = [
            (live, None, True),
            ([], {"tenant": "acme"}, True),
            (in_acme, {"tenant": "acme"}, True),
            ([*in_acme, outside], {"tenant": "acme"}, False),
            (memory, {"and": [{"tenant": "acme"}, {"kind": "memory"}]}, True),
            (memory, {"ghost": "x"}, False),
            (fx.dead, {"tenant": "acme"}, False),
        ]
        for ordinals, scope, want in checks:
            got_visible = snap.visible(ordinals, parse_filter(scope))
            assert got_visible is want, (
                f"{name}.visible({[fx.label(o) for o in ordinals]}, scope={scope}) is "
                f"{got_visible}, expected {want}"
            )

        # the graph index holds exactly the live chunks
        chunk_doc = snap.graph_index.chunk_doc
        assert {o: chunk_doc.get(o) for o in live} == fx.doc_of, (
            f"{name}.graph_index: its chunks' documents differ from the rows'"
        )
        assert not set(chunk_doc) & set(fx.dead), f"{name}.graph_index holds deleted chunks"
        assert snap.uses_hnsw(DenseConfig()) is False, f"{name}.uses_hnsw on a tiny index"
    finally:
        fx.close()


def check_snapshot_dead_chunks(open_engine: OpenEngine) -> None:
    """A deleted chunk is not live, and asking for it is answered as for any missing chunk:
    ``visible`` of it is False even unscoped (it is not live)."""
    fx = snapshot_fixture(open_engine)
    try:
        got = fx.snap.visible(fx.dead, None)
        assert got is False, (
            f"{fx.name}.visible({fx.dead} (deleted chunks), scope=None) is {got}, expected False: "
            "'whether every given chunk is live and passes scope'"
        )
    finally:
        fx.close()


def answer_of(what: str, call: Callable[[], Any]) -> Any:
    """``call()``, with an exception it raises turned into an AssertionError naming ``what``."""
    try:
        return call()
    except AssertionError:
        raise
    except Exception as e:
        raise AssertionError(f"{what} raised {type(e).__name__}: {e}") from e
