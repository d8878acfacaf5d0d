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
    assert {"entity", "named", "relation"} <= set(result.route.features)
    cfg = sample_engine.config
    want = max(cfg.router.relation_graph_weight, cfg.router.named_graph_weight)
    assert result.route.legs.get("graph", 0) == want > cfg.fusion.graph_weight
    docs = {h.doc_id for h in result.hits}
    assert "postmortem-inc-2031.md" in docs
    walked = [h for h in result.hits if h.graph is not None]
    assert walked and all(h.graph.seed for h in walked)


def test_the_plan_seeds_the_walk_with_the_text_legs(sample_engine: Engine) -> None:
    result = sample_engine.search("what else broke after the pgbouncer migration", k=10)
    steps = {s.step: s for s in result.route.plan}
    assert list(steps) == ["lexical", "dense", "graph.ppr", "graph.titles"]
    walk = steps["graph.ppr"]
    assert walk.after == ("lexical", "dense")
    assert walk.params["passages"] == sample_engine.config.graph.seed_passages
    assert result.route.to_dict()["plan"][2]["step"] == "graph.ppr"  # type: ignore[index]
    titles = steps["graph.titles"]  # the top hit's title links, read after fusion
    assert titles.after == ("lexical", "dense", "graph.ppr")
    assert titles.params == {"sources": 1, "links": 1, "rank": 3, "shown": 0}
    plain = sample_engine.search("customer was billed twice", k=5)
    assert "graph.ppr" not in {s.step for s in plain.route.plan}  # no concept: no walk


def test_a_walked_hit_explains_its_path(sample_engine: Engine) -> None:
    result = sample_engine.search("which services depend on pgbouncer-core", k=10)
    paths = [h.graph for h in result.hits if h.graph is not None and h.graph.steps]
    assert paths
    named = [t for t in paths if t.seed == "pgbouncer-core"]
    assert named, [t.seed for t in paths]  # the identifier the query names seeds the walk
    for trail in paths:
        first = trail.steps[0]
        from_concept = first.edge == "MENTIONS" and first.via == trail.seed
        assert from_concept or "#" in trail.seed  # a query concept, or a seed passage's id
        assert trail.hops == len(trail.steps)
        assert all(s.to for s in trail.steps)


def test_access_filter_hides_sre_documents(sample_engine: Engine) -> None:
    result = sample_engine.search(
        "pgbouncer pool exhaustion", k=20, filter={"audience": ["public", "internal"]}
    )
    assert result.hits
    assert all(h.metadata.get("audience") in {"public", "internal"} for h in result.hits)
