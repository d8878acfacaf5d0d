"""What a scope's own release costs, and what it buys the result cache.

A scoped caller's responses carry its scope's release (``Snapshot.view``: the last release that
wrote a chunk the scope lets through or removed a document it let through), and the result
cache is keyed on it, so another tenant's writes neither show in them nor empty the cache. This
measures, on the SciFact corpus spread over ten tenants (a third of the documents also
``audience: public``, every one with a metadata field of its own, as memories have their
times) with ``--deletes`` documents deleted in batches of 50 (a tombstone each, which the view
reads):

- the one-off work per scope and release, cold: the scope's mask (which both need), then
  ``Snapshot.view``, then the rest of ``scope_stats`` (the statistics every scoped request
  computes anyway), in one process;
- the result cache under another tenant's writes: tenant t0 repeats ``--queries`` SciFact
  queries for ``--rounds`` rounds while tenant t1 writes one document between rounds; the
  share of t0's repeats served from the cache and whether its release moved. Keyed on the
  index's release (before), every write made every repeat a miss.

The encoder is the deterministic fake one (``clew.testing.fakes``): what is measured is
bookkeeping over metadata, not retrieval quality.

Usage: ``python bench/scope_release.py [--docs 5183] [--deletes 1000] [--rounds 5]``
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from _common import (
    Stats,
    log,
    parser,
    read_corpus,
    scifact_dir,
    table,
    test_queries,
    write_result,
)
from clew.testing.fakes import fake_engine
from clew.types import Document

SCOPES = {
    "tenant = t3 (~10%)": {"tenant": "t3"},
    "audience = public (~33%)": {"audience": "public"},
    "t3 or public (~40%)": {"or": [{"tenant": "t3"}, {"audience": "public"}]},
}
REPEATS = 5
"""Cold measurements per scope, each on a new release; the table gives their medians."""


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--docs", type=int, default=5183)
    p.add_argument("--deletes", type=int, default=1000)
    p.add_argument("--queries", type=int, default=50)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    dataset = scifact_dir(args.data)
    corpus = read_corpus(dataset / "corpus.jsonl")[: args.docs]
    docs = []
    for i, d in enumerate(corpus):
        meta: dict[str, object] = {"tenant": f"t{i % 10}", "seq": i}  # each its own
        if i % 3 == 0:
            meta["audience"] = "public"
        docs.append(Document(f"d{i}", d.title, d.text, f"d{i}", meta))
    queries = [q for _, q in test_queries(dataset)][: args.queries]

    with tempfile.TemporaryDirectory() as tmp:
        engine = fake_engine(Path(tmp) / "idx")
        t = time.perf_counter()
        engine.ingest(docs)
        log(f"ingested {len(docs)} documents in {time.perf_counter() - t:.0f} s")
        doomed = [d.doc_id for d in docs[1 : 1 + args.deletes * 2 : 2]]
        for start in range(0, len(doomed), 50):
            engine.delete(doomed[start : start + 50])
        tombstones = len(engine.store.removed_rows())
        log(f"release {engine.release()} after the deletes")

        cold = []
        for name, scope in SCOPES.items():
            key = json.dumps(scope, sort_keys=True)
            times: list[list[float]] = []
            for rep in range(REPEATS):  # each on a new release: nothing cached for the scope
                doc = Document(f"x-{name}-{rep}", "x", "a fresh write", "x", {"tenant": "t9"})
                engine.ingest([doc])
                snap = engine.snapshot()
                t = time.perf_counter()
                snap.allowed(None, key)  # the scope's mask: both need it, once per release
                masked = time.perf_counter()
                view = snap.view(key)
                viewed = time.perf_counter()
                stats = snap.scope_stats(key)
                end = time.perf_counter()
                assert stats is not None
                times.append([(masked - t) * 1e3, (viewed - masked) * 1e3, (end - viewed) * 1e3])
            population = int(stats.population.sum())
            ms = [Stats.of([row[i] for row in times]).p50 for i in range(3)]
            cold.append([name, f"{population:,}", f"{view} of {snap.release}", *ms])
            log(f"{name}: view {view} of release {snap.release} in {ms[1]:.2f} ms (median)")

        scope = {"tenant": "t0"}
        served, repeats, releases = 0, 0, set()
        latency: list[float] = []
        for r in range(args.rounds):
            for q in queries:
                t = time.perf_counter()
                result = engine.search(q, k=10, scope=scope)
                latency.append((time.perf_counter() - t) * 1e3)
                releases.add(result.release)
                if r:
                    repeats += 1
                    served += result.cached
            note = Document(f"t1-{r}", "note", f"tenant t1 note {r}", "n", {"tenant": "t1"})
            engine.ingest([note])
        index_release = engine.release()
        engine.close()

    lat = Stats.of(latency)
    body = "\n".join(
        [
            f"SciFact corpus, {len(docs):,} documents over ten tenants; {len(doomed):,} deleted "
            f"in batches of 50 ({tombstones:,} tombstones, one per distinct metadata).",
            "",
            f"## One-off work per scope and release (cold; median of {REPEATS} new releases)",
            "",
            table(
                [
                    "scope",
                    "chunks in scope",
                    "view (of release)",
                    "mask ms",
                    "view ms",
                    "scope_stats ms (rest)",
                ],
                cold,
            ),
            "",
            "## The result cache while another tenant writes",
            "",
            table(
                [
                    "rounds",
                    "queries",
                    "writes by t1",
                    "t0 repeats cached",
                    "t0 releases seen",
                    "index release at the end",
                    "search p50 ms",
                ],
                [
                    [
                        args.rounds,
                        len(queries),
                        args.rounds,
                        f"{served}/{repeats}",
                        ", ".join(str(x) for x in sorted(releases)),
                        index_release,
                        lat.p50,
                    ]
                ],
            ),
            "",
        ]
    )
    write_result(
        "scope_release",
        "A scope's own release: cost, and the cache under another tenant's writes",
        body,
        notes=[
            "the encoder is the deterministic fake one: bookkeeping is measured, not quality",
            "keyed on the index's release (before this change), each of t1's writes made every "
            "repeat of t0's a cache miss, and t0's responses carried t1's write count",
        ],
    )


if __name__ == "__main__":
    main()
