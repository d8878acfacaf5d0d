"""The Snapshot suite's checks of what a snapshot is of (:mod:`clew.testing.snapshot_conformance`
has the fixture and the rest): a pinned release, a scope's own release (``view``) and a scope's
own concept kinds. Each takes ``open_engine`` as the other ``check_snapshot_*`` functions do;
:func:`check_snapshot` runs the whole suite."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from clew.filters import filter_key, parse_filter
from clew.ingest.analyze import query_terms
from clew.protocols import Snapshot
from clew.testing.snapshot_conformance import (
    SNAPSHOT_CASES,
    SNAPSHOT_CONFIG,
    SNAPSHOT_DOCS,
    OpenEngine,
    answer_of,
    check_snapshot_dead_chunks,
    check_snapshot_filters,
    check_snapshot_legs,
    check_snapshot_lookups,
    make_doc,
    scope_json,
    snapshot_fixture,
)

__all__ = [
    "check_snapshot",
    "check_snapshot_kinds",
    "check_snapshot_release",
    "check_snapshot_view",
]


def check_snapshot_release(open_engine: OpenEngine) -> None:
    """A snapshot is one release: after a later write and delete it keeps its release and
    live chunks; its filters, masks and lookups still work (even those it had not used yet)
    and allow none of the chunks written since; its legs never return a chunk written since
    and its rows omit chunks deleted since; the engine's next snapshot sees both changes;
    ``reading`` pins one."""
    fx = snapshot_fixture(open_engine)
    try:
        engine, pinned, name = fx.engine, fx.snap, fx.name
        cfg = SNAPSHOT_CONFIG
        live = np.flatnonzero(pinned.live).tolist()
        gone = fx.ordinals("faq-refunds")
        late = make_doc(
            "late-addendum",
            "Addendum",
            {"audience": "public", "tenant": "acme", "created_at": "2026-03-02"},
            ["runbook-gateway"],
            "An addendum on ERR-4012 retry storm handling at the payments-gateway.",
        )
        engine.ingest([late])
        engine.delete("faq-refunds")
        assert pinned.release == fx.snap.release and np.flatnonzero(pinned.live).tolist() == live, (
            f"{name}: a pinned snapshot's release and live chunks change after a write"
        )
        now = engine.snapshot()
        assert now.release > pinned.release, f"{name}: the next snapshot has a newer release"
        now_live = {int(o) for o in np.flatnonzero(now.live)}
        added = now_live - set(live)
        assert added and not now_live & gone, (
            f"{name}: the next snapshot sees the new chunks {sorted(added)} and not the deleted "
            f"{sorted(gone)}"
        )
        assert {r.doc_id for r in now.rows(sorted(added)).values()} == {"late-addendum"}, (
            f"{name}: the new chunks are the new document's"
        )

        # the pinned snapshot's filters, first compiled after the write
        for case in SNAPSHOT_CASES:
            what = f"{name}.mask [{case.name}] of a snapshot pinned before a later write"
            got = answer_of(what, partial(lambda c: pinned.mask(fx.where(c)), case))
            allowed = {int(o) for o in np.flatnonzero(got)}
            assert not allowed & added, f"{what}: allows chunks written since: {sorted(added)}"
            want = fx.allowed(case) - gone
            assert allowed - gone == want, (
                f"{what}: allows {sorted(allowed - gone)}, expected {sorted(want)}"
            )
        what = f"{name}.created of a snapshot pinned before a later write"
        created = answer_of(what, lambda: pinned.created(live, True))
        memory = fx.ordinals(fx.memory_id)
        assert created is not None and all(created[o][1] for o in memory), (
            f"{what}: the memory is not flagged: {created}"
        )

        where = pinned.where(None, None)
        query = "ERR-4012 retry storm"
        legs = {
            "lexical": pinned.lexical(
                query_terms(query), where, replace(cfg.lexical, depth=1000), None
            ),
            "dense": pinned.dense(engine.encoder.encode([query])[0], where, 1000),
        }
        linked = pinned.link(query, cfg.graph, where, None)
        legs["graph"] = pinned.graph(query, where, replace(cfg.graph, depth=1000), linked, None)
        for leg, hits in legs.items():
            assert hits, f"{name} pinned {leg}: nothing found for {query!r}"
            newer = sorted(h.ordinal for h in hits if h.ordinal in added)
            assert not newer, f"{name} pinned {leg}: returned chunks written since: {newer}"
        assert not set(np.flatnonzero(pinned.mask(where)).tolist()) & added, (
            f"{name} pinned mask allows chunks written since"
        )
        assert not pinned.rows(sorted(gone)), f"{name} pinned rows: chunks deleted since come back"

        with engine.reading() as snap:
            assert engine.snapshot() is snap, f"{name}: inside reading() the snapshot is pinned"
            assert snap.release == now.release, f"{name}: reading() pins the current release"
    finally:
        fx.close()


def check_snapshot_view(open_engine: OpenEngine) -> None:
    """``view``: unscoped, the release; for a scope, the last release that wrote a chunk it lets
    through or removed a document it let through (0 when nothing ever passed it). The fixture's
    three releases: the corpus, the stale acme document's delete (audience public), the acme
    memory. A later write and delete of initech's documents move initech's and the public
    audience's views and leave acme's and globex's; a snapshot pinned before keeps its views."""
    fx = snapshot_fixture(open_engine)
    try:
        engine, pinned, name = fx.engine, fx.snap, fx.name
        scopes = {
            "acme": {"tenant": "acme"},
            "globex": {"tenant": "globex"},
            "initech": {"tenant": "initech"},
            "public": {"audience": "public"},
            "ghost": {"ghost": "x"},
        }

        def views(snap: Snapshot) -> dict[str, int]:
            return {
                key: answer_of(f"{name}.view [{key}]", partial(snap.view, scope_json(scope)))
                for key, scope in scopes.items()
            }

        deleted, memory = fx.before_memory.release, pinned.release
        assert pinned.view(None) == pinned.release, f"{name}.view(None) is the release"
        before = views(pinned)
        corpus = before["globex"]
        want = {
            "acme": memory,
            "globex": corpus,
            "initech": corpus,
            "public": deleted,
            "ghost": 0,
        }
        assert before == want and 0 < corpus < deleted, (
            f"{name}.view: {before}, expected {want} (the corpus at a release before {deleted}, "
            f"the delete of a public acme document at {deleted}, the acme memory at {memory})"
        )
        engine.ingest(
            [
                make_doc(
                    "initech-late", "Late", {"audience": "internal", "tenant": "initech"}, [], "x"
                )
            ]
        )
        engine.delete([d.doc_id for d in SNAPSHOT_DOCS if d.metadata.get("tenant") == "initech"])
        now = engine.snapshot()
        after = views(now)
        want = {**before, "initech": now.release, "public": now.release}
        assert after == want, (
            f"{name}.view after initech's write and delete (release {now.release}): {after}, "
            f"expected {want}: another tenant's writes must not move a scope's view"
        )
        assert views(pinned) == before, f"{name}.view of a pinned snapshot changed after writes"
    finally:
        fx.close()


def check_snapshot_kinds(open_engine: OpenEngine) -> None:
    """``link`` with a scope's statistics gives each concept the kind its mentions in the scope
    have: ``pgbouncer``, a phrase in acme's chunk and an identifier in globex's, is an
    identifier unscoped and a phrase for acme, as in an index of acme's chunks alone. Written
    as records (the fixture's extractor finds identifiers only)."""
    from clew.testing.conformance import make_record
    from clew.types import Concept, Mention

    engine = open_engine(SNAPSHOT_CONFIG)
    name = type(engine.snapshot()).__name__
    try:
        # a document through ingest first: the index then knows its embedder and dimension
        engine.ingest([make_doc("filler", "Filler", {"tenant": "initech"}, [], "nothing here")])
        dim = int(engine.encoder.dim)  # type: ignore[attr-defined]

        def record(doc_id: str, tenant: str, kind: str, label: str) -> Any:
            rec = make_record(doc_id, [f"{doc_id} restarted {label}"], dim=dim)
            rec = replace(rec, document=replace(rec.document, metadata={"tenant": tenant}))
            return replace(rec, mentions=((Mention(Concept("pgbouncer", label, kind), 1),),))  # type: ignore[arg-type]

        engine.store.write(
            [
                record("theirs", "globex", "identifier", "PgBouncer"),
                record("mine", "acme", "phrase", "pgbouncer"),
                record("other", "acme", "phrase", "pooler"),
            ]
        )
        snap = engine.snapshot()
        cfg = engine.config.graph
        scope = parse_filter({"tenant": "acme"})
        stats = snap.scope_stats(filter_key(scope))
        where = snap.where(None, scope)
        whole = answer_of(
            f"{name}.link", partial(snap.link, "pgbouncer", cfg, snap.where(None, None), None)
        )
        mine = answer_of(f"{name}.link [acme]", partial(snap.link, "pgbouncer", cfg, where, stats))
        assert [c.kind for c in whole] == ["identifier"], f"{name}.link unscoped: {whole}"
        assert [c.kind for c in mine] == ["phrase"], (
            f"{name}.link for acme: {mine}; expected a phrase: only globex's chunk calls "
            "pgbouncer an identifier"
        )
    finally:
        engine.close()


def check_snapshot(open_engine: OpenEngine) -> None:
    """Every Snapshot check, each on a fresh engine."""
    check_snapshot_filters(open_engine)
    check_snapshot_legs(open_engine)
    check_snapshot_lookups(open_engine)
    check_snapshot_dead_chunks(open_engine)
    check_snapshot_release(open_engine)
    check_snapshot_view(open_engine)
    check_snapshot_kinds(open_engine)
