"""Graph expansion on a hand-built graph: edges, hop penalty, caps and the access mask."""

from __future__ import annotations

import numpy as np

from clew.config import ExpandConfig
from clew.index.graph import GraphIndex
from clew.protocols import GraphRows
from clew.retrieve.expand import LEG, expand
from clew.retrieve.fuse import Fused
from clew.types import Contribution

# ordinal: doc, seq
CHUNKS = [
    (0, "a", 0),  # seed; mentions ERR-1 and pool
    (1, "a", 1),  # NEXT of 0
    (2, "b", 0),  # mentions ERR-1 (1 hop via MENTIONS)
    (3, "c", 0),  # mentions pool and ERR-2 (1 hop), bridge to 4
    (4, "d", 0),  # mentions ERR-2 only (2 hops: 0 -pool-> 3 -ERR-2-> 4)
    (5, "e", 0),  # linked from doc a
    (6, "f", 0),  # mentions ERR-2 too, makes ERR-2 shared by 3 chunks
    (7, "g", 0),  # filler chunks so the concepts are not hubs
]
CONCEPTS = [
    (1, "err-1", "ERR-1", "identifier"),
    (2, "pool", "pool", "phrase"),
    (3, "err-2", "ERR-2", "identifier"),
]
MENTIONS = [(0, 1, 1), (0, 2, 1), (2, 1, 1), (3, 2, 1), (3, 3, 1), (4, 3, 1), (6, 3, 1)]
LINKS = [("a", "e")]


def graph(n_filler: int = 40) -> GraphIndex:
    chunks = CHUNKS + [(8 + i, f"x{i}", 0) for i in range(n_filler)]
    rows = GraphRows(CONCEPTS, MENTIONS, chunks, LINKS)
    return GraphIndex.build(rows, len(chunks), release=1)


def ids(o: int) -> str:
    return f"c{o}"


def seed(o: int, score: float = 0.03) -> Fused:
    return Fused(o, score, (Contribution("lexical", 1, 5.0, score),), None)


def run(allowed: np.ndarray | None = None, **cfg: object):
    g = graph()
    mask = np.ones(g.mentions.shape[1], dtype=bool) if allowed is None else allowed
    config = ExpandConfig(enabled=True, **cfg)  # type: ignore[arg-type]
    return expand([seed(0)], g, mask, config, ids)


def by_ordinal(pool: list[Fused]) -> dict[int, Fused]:
    return {f.ordinal: f for f in pool}


def test_reaches_each_edge_kind_with_its_path() -> None:
    pool, stats = run()
    got = by_ordinal(pool)
    assert {1, 2, 3, 4, 5} <= set(got)
    assert got[1].expansion[0].steps[0].edge == "NEXT"
    assert got[2].expansion[0].steps[0].edge == "MENTIONS"
    assert got[2].expansion[0].steps[0].via == "err-1"
    assert got[5].expansion[0].steps[0].edge == "LINKS_TO"
    assert got[5].expansion[0].steps[0].via == "e"
    two = got[4].expansion[0]
    assert two.hops == 2 and two.seed == "c0"
    assert [(s.edge, s.via, s.to) for s in two.steps] == [
        ("MENTIONS", "pool", "c3"),
        ("MENTIONS", "err-2", "c4"),
    ]
    assert stats.added == len(pool) - 1
    contribution = got[4].contributions[0]
    assert contribution.leg == LEG and contribution.fused_part == got[4].score


def test_seed_outranks_neighbours_and_hops_are_penalised() -> None:
    pool, _ = run(hop_penalty=0.5)
    assert pool[0].ordinal == 0
    got = by_ordinal(pool)
    assert all(f.score < got[0].score for o, f in got.items() if o != 0)
    assert got[1].score == 0.03 * 0.5  # NEXT, weight 1, one hop
    assert got[4].score < got[3].score  # two hops below its one-hop parent


def test_max_hops_one_stops_at_neighbours() -> None:
    pool, _ = run(max_hops=1)
    assert 4 not in by_ordinal(pool)
    assert all(p.hops == 1 for f in pool for p in f.expansion)


def test_hidden_chunks_are_never_reached_nor_bridges() -> None:
    g = graph()
    allowed = np.ones(g.mentions.shape[1], dtype=bool)
    allowed[3] = False  # the bridge to chunk 4 is hidden
    allowed[5] = False  # the linked document is hidden
    pool, _ = run(allowed)
    got = by_ordinal(pool)
    assert 3 not in got and 5 not in got
    # chunk 4 mentions only ERR-2; without the hidden bridge nothing leads there
    assert 4 not in got
    for f in pool:
        for path in f.expansion:
            assert all(step.to not in ("c3", "c5") for step in path.steps)


def test_cap_on_nodes() -> None:
    pool, stats = run(max_nodes=2)
    assert stats.added == 2 and stats.reached > 2
    assert len(pool) == 3


def test_existing_candidate_keeps_its_better_score() -> None:
    g = graph()
    mask = np.ones(g.mentions.shape[1], dtype=bool)
    strong = Fused(2, 0.029, (Contribution("dense", 2, 0.8, 0.029),), None)
    weak = Fused(3, 0.001, (Contribution("dense", 40, 0.1, 0.001),), None)
    pool, stats = expand([seed(0), strong, weak], g, mask, ExpandConfig(enabled=True, seeds=1), ids)
    got = by_ordinal(pool)
    assert got[2].score == 0.029  # already above what expansion offers: unchanged
    assert got[2].contributions[-1].leg == LEG and got[2].contributions[-1].fused_part == 0.0
    assert got[3].score > 0.001 and stats.lifted >= 1  # lifted to its expansion score
    assert [f.ordinal for f in pool[:2]] == [0, 2]


def test_deterministic() -> None:
    a, _ = run()
    b, _ = run()
    assert [(f.ordinal, f.score, f.expansion) for f in a] == [
        (f.ordinal, f.score, f.expansion) for f in b
    ]
