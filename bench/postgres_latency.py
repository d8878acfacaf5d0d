"""Query latency of one clew index alone in this process: per preset, with and without a filter.

    HF_HUB_OFFLINE=1 python bench/postgres_latency.py --store URL [--queries 25] [--name NAME]
    HF_HUB_OFFLINE=1 python bench/postgres_latency.py --index DIR ...

``bench/postgres_scale.py`` runs both backends side by side in one process, query by query,
which at a million chunks puts two 10 GB stores in one machine's page cache; this script measures
one store alone (make a PostgreSQL copy with ``clew migrate --from DIR --to URL``). SciFact test
queries, result cache off, default config; the first query of each preset is a warm-up (the
graph leg loads its graph for PageRank on first use) and is not counted.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from _common import (
    Clock,
    Stats,
    log,
    parser,
    read_queries,
    scifact_dir,
    table,
    uncached,
    write_result,
)
from clew import Engine
from clew.engine import display_target

PRESETS = ("default", "lexical", "dense", "graph")
FILTERS: dict[str, dict[str, Any] | None] = {"no filter": None, "tenant=t3 (10%)": {"tenant": "t3"}}


def public(target: str | Path) -> str:
    """A target fit for a results file: no password, no socket directory of this machine."""
    return re.sub(r"host=[^&]*", "host=HOST", display_target(target))


def main() -> None:
    p = parser(__doc__, quiet_wait=0)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--store", help="PostgreSQL URL of the index")
    where.add_argument("--index", type=Path, help="or an embedded index directory")
    p.add_argument("--queries", type=int, default=25)
    p.add_argument("--name", default="postgres_latency", help="result file name (bench/results)")
    args = p.parse_args()
    target: str | Path = args.store or args.index
    queries = list(read_queries(scifact_dir(args.data) / "queries.jsonl").values())
    queries = queries[: args.queries + 1]
    engine = Engine(target, uncached())
    with Clock() as opened:
        engine.refresh()
    chunks = engine.store.counts()["chunks"]
    rows: list[list[Any]] = []
    for name, flt in FILTERS.items():
        for preset in PRESETS:
            times: list[float] = []
            stages: dict[str, list[float]] = {}
            for i, query in enumerate(queries):
                with Clock() as c:
                    result = engine.search(query, k=10, preset=preset, filter=flt)
                if i == 0:
                    continue  # warm-up
                times.append(c.ms)
                for stage in ("lexical", "dense", "graph"):
                    if stage in result.timings_ms:
                        stages.setdefault(stage, []).append(result.timings_ms[stage])
            s = Stats.of(times)
            legs = ", ".join(f"{k} {Stats.of(v).p50:.0f}" for k, v in stages.items())
            rows.append([name, preset, f"{s.p50:.1f} / {s.p95:.1f}", legs])
            log(f"{name} {preset}: p50 {s.p50:.0f} ms")
    engine.close()
    body = (
        f"{chunks:,} chunks at `{public(target)}`; first engine refresh "
        f"{opened.seconds:.1f} s.\n\n"
        + table(["filter", "preset", "p50 / p95 ms", "leg p50 ms"], rows)
    )
    notes = [
        f"{len(queries) - 1} SciFact queries per row after one warm-up query, result cache off, "
        "default config, this index alone in the process",
    ]
    sys.argv = [public(a) if a == args.store else a for a in sys.argv]  # the command, redacted
    write_result(
        args.name, f"Query latency of one index alone ({chunks:,} chunks)", body, notes=notes
    )


if __name__ == "__main__":
    main()
