"""Title links end to end: a top hit that names another document by its title brings it up,
with its provenance and path, in the plan; a scope hides a named document as if it were never
ingested; the link survives reopening the index (the saved graph keeps it)."""

from __future__ import annotations

from pathlib import Path

from clew import Document, Engine
from clew.cli.render import trail_text
from clew.compose.answer import why
from clew.config import EngineConfig
from clew.retrieve.titles import EDGE, LEG
from clew.testing.fakes import fake_engine

QUERY = "gateway timeouts logged with the pool size after CHG-7"
RUNBOOK = Document(
    "runbook",
    "Gateway timeouts runbook",
    "Gateway timeouts followed the pool resize of CHG-7. Each one is logged as ERR-4012 "
    "with the pool size at the time it happened.",
    "runbook",
    metadata={"team": "sre"},
)
CODE = Document(
    "code",
    "ERR-4012",
    "Raised by payments when a connection waits longer than its budget; retried twice.",
    "code",
    metadata={"team": "payments"},
)
FILLER = [
    Document(
        f"note-{i}", f"Note {i}", f"Note {i} about {topic}.", f"note-{i}", metadata={"team": "sre"}
    )
    for i, topic in enumerate(
        [
            "gateway maintenance windows and the pool of spare routers",
            "timeouts in the reporting job after the nightly resize",
            "which dashboards followed the office move",
            "pool tables in the staff lounge",
            "the gateway arch in the town square",
            "resize handles in the image editor",
        ]
    )
]
NEAR = [
    Document(f"near-{i}", f"CHG-7 review {i}", text, f"near-{i}", metadata={"team": "sre"})
    for i, text in enumerate(
        [
            "CHG-7 resized the pool; gateway timeouts were checked and none followed.",
            "After CHG-7 the pool resize was reviewed for gateway timeouts.",
            "Which gateway owners signed off CHG-7 before the pool resize.",
        ]
    )
]
DOCS = [RUNBOOK, CODE, *NEAR, *FILLER]


def config(**graph: object) -> EngineConfig:
    """Title links on their own: the near documents are titled by the query's ``CHG-7``, so the
    identifier-title step (``fusion.title_identifier``, tested in ``test_named``) is off."""
    return EngineConfig().with_overrides(
        trace={"enabled": False}, fusion={"title_identifier": 0.0}, graph=graph
    )


def test_named_document_joins_with_its_path_and_plan(fake_engine: Engine) -> None:
    fake_engine.ingest(DOCS)
    off = fake_engine.search(QUERY, k=5, config=config(title_links=0))
    result = fake_engine.search(QUERY, k=5, config=config())
    assert result.hits[0].doc_id == "runbook"
    assert all(LEG not in {c.leg for c in h.contributions} for h in off.hits)
    linked = next(h for h in result.hits if h.doc_id == "code")
    assert result.hits.index(linked) <= 2
    assert LEG in {c.leg for c in linked.contributions}
    (path,) = [p for p in linked.expansion if p.steps[0].edge == EDGE]
    assert path.seed == result.hits[0].chunk_id
    assert (path.steps[0].via, path.steps[0].to) == ("err-4012", linked.chunk_id)
    steps = [s.step for s in result.route.plan]
    assert "graph.titles" in steps
    (step,) = [t for t in why(linked, [], None)["trail"] if t["from"] == "title link"]
    assert step["seed"] == path.seed
    assert trail_text(step) == (
        f"seed {path.seed} → ABOUT 'err-4012' → {linked.chunk_id} → document code"
    )


def test_without_the_graph_leg_nothing_is_linked(fake_engine: Engine) -> None:
    fake_engine.ingest(DOCS)
    result = fake_engine.search(QUERY, k=5, preset="hybrid")
    assert all(LEG not in {c.leg for c in h.contributions} for h in result.hits)
    assert "graph.titles" not in [s.step for s in result.route.plan]


def test_scope_hides_the_named_document_as_if_never_ingested(tmp_path: Path) -> None:
    sre = {"team": "sre"}
    with fake_engine(tmp_path / "all") as everything, fake_engine(tmp_path / "some") as some:
        everything.ingest(DOCS)
        some.ingest([d for d in DOCS if d.metadata.get("team") != "payments"])
        unscoped = everything.search(QUERY, k=5, config=config())
        got = everything.search(QUERY, k=5, config=config(), scope=sre)
        want = some.search(QUERY, k=5, config=config(), scope=sre)
    assert "code" in [h.doc_id for h in unscoped.hits]
    assert "code" not in [h.doc_id for h in got.hits]
    assert [(h.chunk_id, round(h.score, 9)) for h in got.hits] == [
        (h.chunk_id, round(h.score, 9)) for h in want.hits
    ]


def test_link_survives_reopening(tmp_path: Path) -> None:
    with fake_engine(tmp_path / "idx") as engine:
        engine.ingest(DOCS)
        before = [h.chunk_id for h in engine.search(QUERY, k=5, config=config()).hits]
    with fake_engine(tmp_path / "idx", create=False) as engine:
        assert engine.snapshot().graph_index.about  # loaded from the saved graph
        after = engine.search(QUERY, k=5, config=config())
    assert [h.chunk_id for h in after.hits] == before
    assert any(LEG in {c.leg for c in h.contributions} for h in after.hits)


def test_typed_link_relations_survive_reopening(tmp_path: Path) -> None:
    docs = [
        Document("inc-1", "INC-1", "The pool was resized.", "inc-1"),
        Document("inc-2", "INC-2", "Payments timed out.", "inc-2", links=("caused_by::inc-1",)),
    ]
    with fake_engine(tmp_path / "idx") as engine:
        engine.ingest(docs)
        before = engine.snapshot().graph_index.link_types
    assert before == {"inc-2": {"inc-1": "caused_by"}}
    with fake_engine(tmp_path / "idx", create=False) as engine:
        assert engine.snapshot().graph_index.link_types == before  # read from the saved graph
