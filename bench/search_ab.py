"""Search latency of two checkouts side by side: the old commit (a worktree) and this one, on
the same index, in alternating rounds, so load on the machine hits both alike.

Each round runs every query once per filter (no filter, a selective ``tenant = t3`` and a broad
``audience in {public, internal}``) in a fresh process of one checkout (``PYTHONPATH`` = its
``src``), with the result cache off and the query embedding computed once per process up front
(``encode`` is then a lookup), so what is compared is the pipeline: filter, link, route, legs,
fusion, dedup, fetch. Prints p50/p95 of ``Engine.search`` wall time per filter for each checkout
(all rounds pooled) and the new/old ratio of the medians.

    git worktree add ../clew-before <old-commit>
    python bench/search_ab.py --old ../clew-before [--index bench/.work/synthetic-100k]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
FILTERS: dict[str, Any] = {
    "no filter": None,
    "tenant = t3 (~10%)": {"tenant": "t3"},
    "audience in public, internal (~67%)": {"audience": ["public", "internal"]},
}


def child(index: str, queries: list[str], warmup: int) -> None:
    import numpy as np

    from clew import Engine, EngineConfig
    from clew.models.embedder import load_encoder

    cfg = EngineConfig().with_overrides(cache={"size": 0}, trace={"enabled": False})
    enc = load_encoder(cfg.embedder)
    vectors = dict(zip(queries, enc.encode(queries), strict=True))

    class Lookup:
        """The real encoder's vectors, precomputed: the query path without model time."""

        name = getattr(enc, "name", "")
        version = getattr(enc, "version", "")
        dim = getattr(enc, "dim", 384)

        def encode(self, texts: list[str]) -> Any:
            return np.stack([vectors[t] for t in texts])

        def count_tokens(self, texts: list[str]) -> list[int]:
            return list(enc.count_tokens(texts))

    engine = Engine(index, cfg, encoder=Lookup(), read_only=True)  # type: ignore[arg-type]
    out: dict[str, list[float]] = {}
    for name, flt in FILTERS.items():
        for q in queries[:warmup]:
            engine.search(q, filter=flt)
        times = []
        for q in queries:
            t = time.perf_counter()
            engine.search(q, filter=flt)
            times.append((time.perf_counter() - t) * 1000)
        out[name] = times
    engine.close()
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, help="the old checkout (a git worktree)")
    ap.add_argument("--index", default=str(ROOT / "bench" / ".work" / "synthetic-100k"))
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    texts = [
        json.loads(line)["text"]
        for line in (DATA / "scifact" / "queries.jsonl").read_text("utf-8").splitlines()
    ][: args.queries]
    if args.child:
        child(args.index, texts, args.warmup)
        return 0
    if args.old is None:
        ap.error("--old is required")
    sides = {"old": args.old.resolve() / "src", "new": ROOT / "src"}
    pooled: dict[str, dict[str, list[float]]] = {s: {f: [] for f in FILTERS} for s in sides}
    for r in range(args.rounds):
        for side, src in sides.items() if r % 2 == 0 else reversed(sides.items()):
            env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
            cmd = [sys.executable, __file__, "--child", "--index", args.index]
            cmd += ["--queries", str(args.queries), "--warmup", str(args.warmup)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            for name, times in json.loads(done.stdout.strip().splitlines()[-1]).items():
                pooled[side][name] += times
            print(f"round {r + 1} {side} done", file=sys.stderr)
    print(
        f"| filter ({args.rounds} rounds) | old p50 ms | new p50 ms | new/old | old p95 | new p95 |"
    )
    print("|---|---|---|---|---|---|")
    for name in FILTERS:
        old, new = pooled["old"][name], pooled["new"][name]
        p50o, p50n = statistics.median(old), statistics.median(new)
        p95o = statistics.quantiles(old, n=20)[-1]
        p95n = statistics.quantiles(new, n=20)[-1]
        print(f"| {name} | {p50o:.2f} | {p50n:.2f} | {p50n / p50o:.2f} | {p95o:.2f} | {p95n:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
