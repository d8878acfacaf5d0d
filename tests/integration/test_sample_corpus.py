"""The demo queries on the bundled sample corpus, with the real model and spaCy."""

from __future__ import annotations

from clew import Engine


def test_exact_identifier_wins_over_near_miss(sample_engine: Engine) -> None:
    result = sample_engine.search("ERR-4413", k=3)
    assert "identifier" in result.route.features
    top = result.hits[0]
    assert "ERR-4413" in top.text
    assert top.doc_id == "error-codes.md"
    legs = {c.leg for c in top.contributions}
    assert {"lexical", "graph"} <= legs


def test_paraphrase_found_by_dense_leg(sample_engine: Engine) -> None:
    result = sample_engine.search("customer was billed twice", k=5)
    docs = [h.doc_id for h in result.hits]
    assert "duplicate-charges.md" in docs[:3]
    best = next(h for h in result.hits if h.doc_id == "duplicate-charges.md")
    assert any(c.leg == "dense" and c.rank <= 3 for c in best.contributions)


def test_relation_query_uses_the_graph(sample_engine: Engine) -> None:
    result = sample_engine.search("what else broke after the pgbouncer migration", k=10)
    assert {"entity", "relation"} <= set(result.route.features)
    cfg = sample_engine.config
    assert result.route.legs.get("graph", 0) == cfg.router.relation_graph_weight
    assert cfg.router.relation_graph_weight > cfg.fusion.graph_weight
    docs = {h.doc_id for h in result.hits}
    assert "postmortem-inc-2031.md" in docs
    assert any(h.graph is not None for h in result.hits)


def test_access_filter_hides_sre_documents(sample_engine: Engine) -> None:
    result = sample_engine.search(
        "pgbouncer pool exhaustion", k=20, filter={"audience": ["public", "internal"]}
    )
    assert result.hits
    assert all(h.metadata.get("audience") in {"public", "internal"} for h in result.hits)
