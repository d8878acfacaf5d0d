"""Synonym edges between concepts whose label embeddings are very close: do they help? (issue
#16; measured, not kept)

    HF_HUB_OFFLINE=1 python bench/synonym_seeds.py [--tau 0.9 0.85 0.8] [--neighbours 3]

HippoRAG adds an edge between two concept nodes whose embeddings have a cosine above a
threshold (its synonym edges were worth 2.4 points of Recall@5). Here the same idea is measured
on clew's own graph, where the concepts come from spaCy entities, identifiers and noun phrases
rather than from an LLM: every entity and multi-word concept label is embedded with the
shipped MiniLM encoder, and each concept the query links also seeds its ``--neighbours``
nearest labels with a cosine of at least ``tau``, weighted by the linked concept's weight times
the cosine. In the graph's Personalized PageRank that is one synonym edge from every seed to
each close label. Identifiers are left out: they link exactly (issue #16). The seeds are added
by wrapping :meth:`clew.index.graph.GraphIndex.link` in this process; the product is
unchanged.

Runs the default config on the train and dev sets only (test splits are never read) with the
synonym seeds off and at each ``tau``. Output: ``bench/results/synonym-seeds.md``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import clew.index.graph as graph_module
from _common import log, parser, setting_row, write_settings
from clew.config import EngineConfig
from clew.eval.datasets import load_dataset
from clew.eval.runner import open_index, run_config
from clew.index.graph import GraphIndex, LinkedConcept
from clew.models.embedder import load_encoder
from rerank import dataset_dir

SETS = (
    ("musique-train100", "train", "recall@5"),
    ("hotpotqa-train100", "train", "recall@5"),
    ("support", "dev", "ndcg@10"),
    ("memory", "dev", "recall@10"),
)


class SynonymSeeds:
    """Wraps ``GraphIndex.link``: each linked entity or multi-word concept also seeds its
    nearest concept labels by embedding (cosine >= ``tau``, at most ``neighbours``)."""

    def __init__(self, encode: Callable[[list[str]], Any], neighbours: int) -> None:
        self.encode = encode
        self.neighbours = neighbours
        self.tau = 1.01  # off
        self.original = GraphIndex.link
        self._labels: dict[int, tuple[dict[int, int], np.ndarray, np.ndarray]] = {}
        self.added = 0
        self.linked = 0

    def _embedded(self, g: GraphIndex) -> tuple[dict[int, int], np.ndarray, np.ndarray]:
        if id(g) not in self._labels:
            rows = np.array(
                [
                    r
                    for r, (key, kind) in enumerate(zip(g.keys, g.kinds, strict=True))
                    if kind == "entity" or (kind == "phrase" and " " in key)
                ],
                dtype=np.int64,
            )
            vectors = np.asarray(self.encode([g.labels[r] for r in rows]), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-12
            self._labels[id(g)] = ({int(r): i for i, r in enumerate(rows)}, rows, vectors)
            log(f"  embedded {len(rows)} concept labels of {len(g.keys)}")
        return self._labels[id(g)]

    def link(self, g: GraphIndex, query: str, **kw: Any) -> list[LinkedConcept]:
        found: list[LinkedConcept] = self.original(g, query, **kw)
        self.linked += len(found)
        if self.tau > 1.0 or not found:
            return found
        position, rows, vectors = self._embedded(g)
        have = {c.key for c in found}
        extra: dict[str, LinkedConcept] = {}
        for c in found:
            at = position.get(g.key_to_row.get(c.key, -1))
            if at is None:
                continue
            sims = vectors @ vectors[at]
            for i in np.argsort(-sims)[: self.neighbours + 1]:
                row, cosine = int(rows[i]), float(sims[i])
                key = g.keys[row]
                if i == at or cosine < self.tau or key in have:
                    continue
                weight = c.weight * cosine
                if key not in extra or extra[key].weight < weight:
                    extra[key] = LinkedConcept(
                        g.concept_ids[row], key, g.labels[row], "fuzzy", weight, g.kinds[row]
                    )
        self.added += len(extra)
        return sorted([*found, *extra.values()], key=lambda c: (-c.weight, c.key))


def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__, quiet_wait=0.0)
    p.add_argument("--tau", type=float, nargs="+", default=[0.9, 0.85, 0.8])
    p.add_argument("--neighbours", type=int, default=3)
    args = p.parse_args(argv)
    config = EngineConfig()
    # no result cache: every setting must search anew
    config = dataclasses.replace(config, cache=dataclasses.replace(config.cache, size=0))
    seeds = SynonymSeeds(load_encoder(config.embedder).encode, args.neighbours)
    graph_module.GraphIndex.link = lambda g, query, **kw: seeds.link(g, query, **kw)  # type: ignore[method-assign]
    settings = [("off", 1.01), *((f"tau {t:g}", t) for t in args.tau)]
    rows: list[list[object]] = []
    for name, split, metric in SETS:
        dataset = load_dataset(dataset_dir(name), split)
        engine = open_index(dataset, config, progress=False)
        scores: list[float] = []
        added: list[float] = []
        for label, tau in settings:
            seeds.tau, seeds.added, seeds.linked = tau, 0, 0
            run = run_config(engine, dataset, label, config, 10)
            scores.append(run.slices["all"][metric])
            added.append(seeds.added / max(len(dataset.queries), 1))
            log(f"{name}: {label} {metric} {scores[-1]:.4f} (+{added[-1]:.2f} seeds/query)")
        engine.close()
        rows.append(setting_row(f"{name}:{split} {metric}", scores))
        rows.append(["  synonym seeds per query", *added, *([""] * len(args.tau))])
    write_settings(
        "synonym-seeds",
        "Synonym seeds from concept-label embeddings (measured, not kept)",
        [label for label, _ in settings],
        rows,
        notes=[
            f"neighbours per linked concept: {args.neighbours}; entity and multi-word concept "
            "labels embedded with the shipped MiniLM encoder",
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
