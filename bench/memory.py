"""Agent memory at scale: ingest of a long conversation, recall latency, forget throughput, and
the memory footprint of 100k memories.

1. A synthetic 5,000-turn incident-channel conversation (speakers, service names, error codes,
   change ids; one turn a minute over ~3.5 days) is written as a JSONL transcript and ingested
   with ``clew ingest`` semantics (one memory per turn, ``follows`` edges) using the default
   model (all-MiniLM-L6-v2, ONNX) and spaCy concepts: turns/s.
2. ``Engine.recall`` p50/p95 for 100 queries: plain, with a session, with a time window, and
   ``as_of`` (result cache off).
3. ``Engine.forget`` of 200 memories one by one (each one a new release: store delete, index
   catch-up, graph rebuild on the next read): forgets/s, and the recall p50 right after.
4. Footprint: 100k one-line memories written with the FAKE hash encoder at the real dimension
   (384) and identifier-only concepts, so the figure is about clew's indexes, not the model:
   process RSS after opening and querying the index, and bytes on disk, per 100k memories.

Usage: ``python bench/memory.py [--turns 5000] [--footprint 100000]``
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import WORK_DIR, Clock, Stats, log, parser, table, uncached, write_result
from clew import Engine
from clew.config import ConceptConfig
from clew.ingest.concepts import ConceptExtractor
from clew.ingest.transcript import load_transcript
from clew.testing.fakes import FakeHashEncoder

SERVICES = ["pgbouncer", "ledger-writer", "payments-gateway", "fraud-scorer", "webhook-relay"]
SPEAKERS = ["ana", "bo", "chen", "dara", "eli", "oncall-bot"]
TEMPLATES = [
    "{svc} latency is up again, p99 at {n} ms",
    "seeing ERR-{code} from {svc} since {hh}:{mm}",
    "rolling back CHG-{chg} on {svc}",
    "{svc} pool exhausted, raising max connections to {n}",
    "customer {cust} reports duplicate charges after the {svc} retry storm",
    "paging the {svc} owner about ERR-{code}",
    "deploy of {svc} {ver} finished, watching dashboards",
    "postmortem INC-{inc}: {svc} saturated after CHG-{chg}",
    "lunch order is in, back in 20",
    "can someone review the runbook change for {svc}?",
]


def conversation(turns: int, seed: int = 7) -> list[dict[str, str]]:
    rng = random.Random(seed)
    start = time.mktime((2026, 3, 1, 8, 0, 0, 0, 0, 0))
    out = []
    for i in range(turns):
        text = rng.choice(TEMPLATES).format(
            svc=rng.choice(SERVICES),
            n=rng.randint(20, 900),
            code=rng.randint(4000, 4099),
            hh=rng.randint(0, 23),
            mm=f"{rng.randint(0, 59):02d}",
            chg=rng.randint(1100, 1299),
            cust=rng.choice(["acme", "globex", "initech", "umbrella"]),
            ver=f"v{rng.randint(1, 9)}.{rng.randint(0, 20)}",
            inc=rng.randint(2000, 2099),
        )
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + 60 * i))
        session = f"day-{1 + i // 1440}"
        out.append(
            {"speaker": rng.choice(SPEAKERS), "text": text, "time": when, "session": session}
        )
    return out


QUERIES = [
    "pgbouncer pool exhausted",
    "duplicate charges retry storm",
    "ERR-4012",
    "who rolled back CHG-1187",
    "ledger-writer latency",
    "payments-gateway deploy",
    "fraud-scorer owner paged",
    "runbook review",
    "INC-2031 postmortem",
    "webhook-relay errors",
]


def recall_stats(engine: Engine, n: int, **kw: object) -> Stats:
    ms = []
    for i in range(n):
        with Clock() as c:
            engine.recall(QUERIES[i % len(QUERIES)] + f" {i % 7}", k=10, **kw)  # type: ignore[arg-type]
        ms.append(c.ms)
    return Stats.of(ms)


_FOOTPRINT = """
import json, sys, time
from pathlib import Path

def rss():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0

from clew import Engine, EngineConfig
from clew.config import ConceptConfig
from clew.ingest.concepts import ConceptExtractor
from clew.testing.fakes import FakeHashEncoder
before = rss()
engine = Engine(sys.argv[1], EngineConfig().with_overrides(cache={"size": 0}),
                encoder=FakeHashEncoder(dim=384),
                extractor=ConceptExtractor(ConceptConfig(spacy=False)))
t = time.perf_counter()
engine.recall("pgbouncer pool exhausted", k=10)
first = (time.perf_counter() - t) * 1000
ms = []
for i in range(50):
    t = time.perf_counter()
    engine.recall(f"ERR-40{i:02d} pgbouncer", k=10)
    ms.append((time.perf_counter() - t) * 1000)
ms.sort()
print(json.dumps({"memories": engine.store.counts()["documents"], "rss_before": before,
                  "rss_after": rss(), "first_ms": first, "p50": ms[len(ms) // 2],
                  "p95": ms[int(len(ms) * 0.95)]}))
"""


def disk_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def main() -> None:
    p = parser(__doc__, quiet_wait=5.0)
    p.add_argument("--turns", type=int, default=5_000)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--forget", type=int, default=200)
    p.add_argument("--footprint", type=int, default=100_000)
    args = p.parse_args()
    work = WORK_DIR / "memory"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sections = []

    # 1. ingest a long conversation (real model, spaCy concepts)
    chat = work / "incident-channel.jsonl"
    chat.write_text("\n".join(json.dumps(t) for t in conversation(args.turns)) + "\n")
    engine = Engine(work / "conv", uncached(), create=True)
    engine.encoder.encode(["warm-up"])
    with Clock() as parse:
        docs = load_transcript(chat)
    with Clock() as ingest:
        report = engine.ingest(docs)
    rate = len(report.added) / ingest.seconds
    log(f"ingest: {len(report.added)} turns in {ingest.seconds:.1f} s ({rate:.1f}/s)")
    rows = [
        ["turns ingested", f"{len(report.added):,}"],
        ["transcript parse", f"{parse.seconds:.2f} s"],
        ["ingest (chunk, embed, concepts, write, index)", f"{ingest.seconds:.1f} s"],
        ["throughput", f"{rate:.1f} turns/s"],
    ]
    sections.append(f"## Ingest of a {args.turns:,}-turn conversation\n\n{table(['', ''], rows)}")

    # 2. recall latency
    engine.recall("warm-up", k=10)
    plain = recall_stats(engine, args.queries)
    session = recall_stats(engine, args.queries, session="day-2")
    window = recall_stats(engine, args.queries, since="2026-03-02", until="2026-03-03")
    as_of = recall_stats(engine, args.queries, as_of="2026-03-02T12:00:00Z")
    rows = [
        [name, s.n, f"{s.p50:.1f}", f"{s.p95:.1f}"]
        for name, s in (
            ("recall", plain),
            ("recall, one session", session),
            ("recall, one-day window", window),
            ("recall, as of day 2 noon", as_of),
        )
    ]
    sections.append(
        f"## Recall over {args.turns:,} memories\n\n"
        + table(["query", "n", "p50 ms", "p95 ms"], rows)
    )

    # 3. forget throughput
    victims = [d.doc_id for d in docs[: args.forget]]
    with Clock() as forget:
        for memory_id in victims:
            engine.forget(memory_id)
    after = recall_stats(engine, args.queries)
    rows = [
        ["memories forgotten (one release each)", f"{len(victims)}"],
        ["time", f"{forget.seconds:.2f} s"],
        ["throughput", f"{len(victims) / forget.seconds:.1f} forgets/s"],
        ["recall p50 / p95 after", f"{after.p50:.1f} / {after.p95:.1f} ms"],
    ]
    sections.append(f"## Forget\n\n{table(['', ''], rows)}")
    engine.close()

    # 4. footprint per 100k memories (fake encoder at 384 dims: clew's own indexes)
    fake = Engine(
        work / "footprint",
        uncached(),
        create=True,
        encoder=FakeHashEncoder(dim=384),
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
    )
    turns = conversation(args.footprint, seed=11)
    with Clock() as write:
        batch = 5_000
        for start in range(0, len(turns), batch):
            part = work / "part.jsonl"
            part.write_text("\n".join(json.dumps(t) for t in turns[start : start + batch]))
            fake.ingest(load_transcript(part, session="bulk"))
    fake.close()
    child = subprocess.run(
        [sys.executable, "-c", _FOOTPRINT, str(work / "footprint")],
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(child.stdout.strip().splitlines()[-1])
    count = int(got["memories"])
    size = disk_mb(work / "footprint")
    scale = 100_000 / max(count, 1)
    rows = [
        ["memories", f"{count:,}"],
        ["write time (fake encoder, identifier concepts)", f"{write.seconds:.0f} s"],
        ["first recall (loads every index)", f"{got['first_ms']:.0f} ms"],
        ["recall p50 / p95 after", f"{got['p50']:.1f} / {got['p95']:.1f} ms"],
        [
            "RSS of a fresh process: before opening / after opening and querying",
            f"{got['rss_before']:.0f} / {got['rss_after']:.0f} MB",
        ],
        [
            "RSS added by the open index, per 100k memories",
            f"{(got['rss_after'] - got['rss_before']) * scale:.0f} MB",
        ],
        ["index on disk per 100k memories", f"{size * scale:.0f} MB"],
    ]
    sections.append(f"## Footprint of {count:,} memories\n\n{table(['', ''], rows)}")
    notes = [
        "conversation: synthetic incident channel, 6 speakers, 5 services, error codes, change "
        "ids, one turn a minute; sessions are days",
        "ingest and recall use the default model (all-MiniLM-L6-v2 on onnxruntime) and spaCy "
        "concepts; the result cache is off so every recall does the work",
        "the footprint index uses the FAKE hash encoder at 384 dimensions (the real model's "
        "size) and identifier-only concepts, so it measures clew's store and indexes; RSS is "
        "VmRSS of a fresh process before and after opening the index and running 50 recalls",
    ]
    write_result(
        "memory",
        "Agent memory: ingest, recall, forget, footprint",
        "\n\n".join(sections),
        notes=notes,
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
