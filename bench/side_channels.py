"""Timing side channel of scoped search: does a word only another tenant has answer slower?

Two tenants whose documents share identifiers and words, each with a codeword only its own
documents contain. Tenant a searches (through its scope, in process) for a question plus either
tenant b's codeword or a control word that no document contains, interleaved, many times; the
medians and a Mann-Whitney U test say whether the two can be told apart by time. Statistics are
computed within the scope, so a word only b has is dropped before scoring (its in-scope document
frequency is 0), as an unknown word is. Constant time is not a goal: the figure says what is left.

Usage: ``python bench/side_channels.py [--reps 2000]``
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from _common import log, parser, table, write_result
from clew import Engine
from clew.config import ConceptConfig, EngineConfig
from clew.ingest.concepts import ConceptExtractor
from clew.testing.fakes import FakeHashEncoder
from clew.types import Document

SECRET = {"a": "AMBERFOX", "b": "BLUEHERON"}
PAGES = [
    ("runbook", "When ERR-4012 appears, raise RetryPolicy.MaxAttempts. Codeword {s}."),
    ("incident", "INC-2031: an ERR-4012 retry storm after the ledger_writer timeout. {s} knew."),
    ("faq", "Refunds settle nightly. ERR-4013 means the issuer declined; {s} keeps the list."),
]


def corpus() -> list[Document]:
    docs = []
    for t in ("a", "b"):
        for slug, text in PAGES:
            for i in range(20 if t == "b" else 1):  # b's codeword has many postings
                docs.append(
                    Document(f"{t}-{slug}-{i}", slug, text.format(s=SECRET[t]), t, {"tenant": t})
                )
    return docs


def mann_whitney_p(x: list[float], y: list[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, no ties correction)."""
    import math

    ranked = sorted([(v, 0) for v in x] + [(v, 1) for v in y])
    r1 = sum(i + 1 for i, (_, g) in enumerate(ranked) if g == 0)
    n1, n2 = len(x), len(y)
    u = r1 - n1 * (n1 + 1) / 2
    mu, sigma = n1 * n2 / 2, math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    z = (u - mu) / sigma
    return math.erfc(abs(z) / math.sqrt(2))


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--reps", type=int, default=2000)
    args = p.parse_args()
    cfg = EngineConfig().with_overrides(cache={"size": 0}, trace={"enabled": False})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(
            Path(tmp) / "idx",
            cfg,
            create=True,
            encoder=FakeHashEncoder(),
            extractor=ConceptExtractor(ConceptConfig(spacy=False)),
        )
        engine.ingest(corpus())
        scope = {"tenant": "a"}
        for preset in ("lexical", "default"):
            times: dict[str, list[float]] = {"theirs": [], "control": []}
            words = {"theirs": SECRET["b"], "control": "QUILLWORT"}
            for i in range(args.reps + 50):
                for name in ("theirs", "control") if i % 2 else ("control", "theirs"):
                    q = f"ERR-4012 retry storm {words[name]}"
                    t = time.perf_counter()
                    engine.search(q, k=10, scope=scope, preset=preset)
                    if i >= 50:  # warm-up
                        times[name].append((time.perf_counter() - t) * 1e6)
            a, b = statistics.median(times["theirs"]), statistics.median(times["control"])
            pval = mann_whitney_p(times["theirs"], times["control"])
            rows.append([preset, a, b, f"{a / b:.3f}", f"{pval:.2g}"])
            log(f"{preset}: theirs {a:.0f} us, control {b:.0f} us, p={pval:.2g}")
        engine.close()
    body = "\n".join(
        [
            f"{args.reps} interleaved searches per word, tenant a's scope, in process.",
            "",
            table(
                ["preset", "b's codeword p50 (us)", "control p50 (us)", "ratio", "Mann-Whitney p"],
                rows,
            ),
            "",
        ]
    )
    write_result(
        "side_channels",
        "Timing of a word only another tenant has",
        body,
        notes=[
            "the result cache is off (a cached answer would hide the work); the first query of "
            "each scope and release counts document frequencies and is excluded as warm-up",
        ],
    )


if __name__ == "__main__":
    main()
