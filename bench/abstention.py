"""Abstention on the sample corpus: the shipped calibration and one from ``clew calibrate
--self`` on the 12 example queries of ``data/sample-queries.md`` plus one more, and on 10
questions the corpus cannot answer. Prints, per query, P(answerable) against each threshold,
and writes ``bench/results/abstention.md``.

Usage: ``python bench/abstention.py``
"""

from __future__ import annotations

import shutil
from pathlib import Path

from _common import log, table, write_result
from clew import Engine, EngineConfig
from clew.compose.answer import load_calibration
from clew.train.calibrate import calibrate_self

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / ".work" / "sample-index"
ANSWERABLE = [
    "ERR-4413",
    "ERR-4012",
    "RetryPolicy.MaxAttempts",
    "ledger.settlement.cutoff_hour",
    "customer was billed twice",
    "how do I stop charging someone for a while without cancelling their subscription",
    "when will I actually get the money from today's orders",
    "how many days until my customer gets their money back",
    "what else broke after the pgbouncer migration",
    "which earlier incident led to the duplicate charges, and what caused that one",
    "why were merchant webhooks delayed on February 12",
    "which services are affected if pgbouncer-core runs out of connections",
    "What does ERR-4413 mean?",
]
UNRELATED = [
    "Which volcano erupted in Iceland in 2010 and grounded flights across Europe?",
    "What is the capital of France?",
    "how do I bake sourdough bread",
    "who won the 1998 football world cup",
    "what is the boiling point of nitrogen",
    "best hiking trails in the alps",
    "how does photosynthesis work",
    "recommend a good science fiction novel",
    "what is the tallest mountain in Africa",
    "how to change a bicycle tire",
]


def main() -> None:
    shipped = load_calibration("")
    cfg = EngineConfig().with_overrides(trace={"enabled": False}, answer={"abstain": False})
    if WORK.exists():
        shutil.rmtree(WORK)
    rows = []
    right = {(c, k): 0 for c in ("shipped", "self") for k in ("answerable", "unrelated")}
    with Engine(WORK, cfg, create=True) as engine:
        engine.ingest([ROOT / "data" / "sample"])
        own, _ = calibrate_self(engine, cfg)
        for kind, queries in (("answerable", ANSWERABLE), ("unrelated", UNRELATED)):
            for q in queries:
                evidence = engine.ask(q, config=cfg).evidence
                verdicts = []
                for name, cal in (("shipped", shipped), ("self", own)):
                    p = cal.probability(evidence)
                    answered = p >= cal.threshold
                    right[(name, kind)] += answered == (kind == "answerable")
                    verdicts += [f"{p:.3f}", "answer" if answered else "abstain"]
                rows.append([kind, q, *verdicts])
                log(f"{kind}: {verdicts} {q}")
    lines = [
        f"- {name} calibration (threshold {cal.threshold:.3f}): answered "
        f"{right[(name, 'answerable')]}/{len(ANSWERABLE)} answerable queries, abstained on "
        f"{right[(name, 'unrelated')]}/{len(UNRELATED)} unrelated ones"
        for name, cal in (("shipped", shipped), ("self", own))
    ]
    body = "\n".join(
        [
            "## Sample corpus (34 documents)",
            "",
            "The shipped calibration (fitted across six train corpora, `bench/calibrate.py`) and "
            "the same weights with the sample's own threshold from `clew calibrate --self` (how "
            "clew's 40 off-topic questions score on this corpus; none of them is asked below).",
            "",
            *lines,
            "",
            table(
                ["kind", "query", "P shipped", "shipped", "P self", "self"],
                rows,
            ),
            "",
            "Per corpus, leave-one-corpus-out and self-calibrated: `bench/results/calibrate.md`.",
        ]
    )
    write_result("abstention", "Abstention", body)


if __name__ == "__main__":
    main()
