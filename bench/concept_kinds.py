"""What per-mention concept kinds cost: the graph build, a scope's statistics, the fuzzy index,
and deletes, against a baseline checkout run side by side.

A concept's kind (identifier, entity, phrase) is, for a scope, the highest its mentions in the
scope have, so each mention stores its kind: the graph keeps one more byte per mention and a
scope's statistics take a max over its mentions; the fuzzy index holds every key (the kind
check moved to lookup); a delete lowers the kind of a name it took the last naming mention of.
Measured here, each in a fresh process, for this checkout and (``--baseline SRC``, e.g. a
worktree of the commit before) the baseline:

- ``GraphIndex.build`` on a synthetic graph (``--chunks`` chunks over 10 chunks a document,
  ``--concepts`` concepts drawn Zipf-like, 8 mentions a chunk, one in ten an identifier);
- ``GraphIndex.stats`` for a population of half the chunks (what every new scope and release
  computes once);
- the fuzzy index's first use (one query with a misspelt word);
- ``SQLiteStore.delete`` of one document at a time (``--deletes`` of them) from an index of
  ``--docs`` documents that all mention one identifier hub and a few rarer ones.

Usage: ``git worktree add DIR <commit before>``, then
``python bench/concept_kinds.py --baseline DIR/src``
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from _common import log, median, parser, ratio, table, wait_quiet, write_result

REPEATS = 5


def measure(args: dict[str, int]) -> dict[str, float]:
    """Run in the process of one checkout: medians in ms."""
    import numpy as np

    from clew.backends.embedded.store import SQLiteStore
    from clew.index.graph import GraphIndex
    from clew.protocols import GraphRows
    from clew.testing.conformance import make_record
    from clew.types import Concept, Mention

    rng = np.random.default_rng(7)
    n_chunks, n_concepts = args["chunks"], args["concepts"]
    concepts = [
        (cid, f"concept{cid:06d}", f"Concept{cid}", "identifier" if cid % 10 == 0 else "phrase")
        for cid in range(1, n_concepts + 1)
    ]
    weights = 1.0 / np.arange(1, n_concepts + 1)
    weights /= weights.sum()
    mentions = []
    for o in range(n_chunks):
        for cid in sorted(set(rng.choice(n_concepts, size=8, p=weights).tolist())):
            mentions.append((o, cid + 1, 1))
    chunks = [(o, f"d{o // 10}", o % 10) for o in range(n_chunks)]
    rows = GraphRows(concepts, mentions, chunks, [])
    out: dict[str, float] = {"mentions": float(len(mentions))}

    builds = []
    for _ in range(3):
        t = time.perf_counter()
        g = GraphIndex.build(rows, n_chunks, release=1)
        builds.append((time.perf_counter() - t) * 1000)
    out["build"] = median(builds)
    half = np.zeros(n_chunks, dtype=bool)
    half[::2] = True
    stats = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        g.stats(half)
        stats.append((time.perf_counter() - t) * 1000)
    out["stats"] = median(stats)
    t = time.perf_counter()
    g.link("concepr000123 failures")  # one edit from concept000123: builds the fuzzy index
    out["fuzzy"] = (time.perf_counter() - t) * 1000

    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "s", create=True)
        hub = Concept("hubcache", "HubCache", "identifier")
        recs = []
        for i in range(args["docs"]):
            rec = make_record(f"doc{i}", [f"doc{i} restarted HubCache"], dim=8, seed=i)
            rare = Concept(f"rare{i % 50}", f"Rare{i % 50}", "entity" if i % 2 else "phrase")
            mine = (Mention(hub, 1), Mention(rare, 1))
            recs.append(replace(rec, mentions=(mine,)))
        for start in range(0, len(recs), 500):
            store.write(recs[start : start + 500])
        deletes = []
        for i in range(args["deletes"]):
            t = time.perf_counter()
            store.delete([f"doc{i}"])
            deletes.append((time.perf_counter() - t) * 1000)
        out["delete"] = median(deletes)
        store.close()
    return out


def run(src: Path, args: dict[str, int]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{Path(__file__).parent}"}
    code = (
        "import json, sys; sys.argv = ['x']; import concept_kinds as b; "
        f"print(json.dumps(b.measure({json.dumps(args)})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = parser(__doc__, quiet_wait=5.0)
    p.add_argument("--baseline", type=Path, required=True, help="src/ of the baseline checkout")
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--concepts", type=int, default=50_000)
    p.add_argument("--docs", type=int, default=5_000)
    p.add_argument("--deletes", type=int, default=300)
    a = p.parse_args()
    args = {"chunks": a.chunks, "concepts": a.concepts, "docs": a.docs, "deletes": a.deletes}
    here = Path(__file__).resolve().parents[1] / "src"
    wait_quiet(a.quiet_wait)
    log(f"baseline {a.baseline}")
    base = run(a.baseline.resolve(), args)
    wait_quiet(a.quiet_wait)
    log("this checkout")
    mine = run(here, args)
    names = {
        "build": f"GraphIndex.build ({int(mine['mentions']):,} mentions)",
        "stats": "GraphIndex.stats, half the chunks",
        "fuzzy": "fuzzy index, first use",
        "delete": f"SQLiteStore.delete, one document of {a.docs:,}",
    }
    rows = [[names[k], base[k], mine[k], ratio(mine[k], base[k])] for k in names]
    body = table(["ms (median)", "baseline", "per-mention kinds", "ratio"], rows)
    print(body)
    write_result(
        "concept_kinds",
        "Per-mention concept kinds: cost against the baseline",
        body,
        notes=[
            f"synthetic graph: {a.chunks:,} chunks, {a.concepts:,} concepts, one in ten an "
            "identifier; store: every document mentions one identifier hub",
            "each checkout measured in its own process, one after the other, on this machine",
        ],
    )


if __name__ == "__main__":
    main()
