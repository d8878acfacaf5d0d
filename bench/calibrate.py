"""Abstention across corpora: collect the evidence of every train corpus, fit one calibration,
and report the answer / abstain trade-off per corpus with each corpus left out of the fit.

    python bench/calibrate.py [--limit 100] [--write]

Corpora (train and dev data only): SciFact train, NFCorpus train, HotpotQA-train100,
MuSiQue-train100 and our dev sets eval/dev/support and eval/dev/memory. Per corpus: up to
``--limit`` questions as is (answerable), the same with their relevant documents hidden (near
misses), 60 questions of corpora of another domain (unrelated), and its own questions marked
unanswerable; and clew's 40 off-topic questions (what ``clew calibrate --self`` reads). The
evidence is cached in
``bench/.work/evidence-<key>.json``.
``--write`` also writes the fit on all corpora to ``src/clew/compose/abstain.json`` (the shipped
calibration). Writes ``bench/results/calibrate.md``.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import replace

from _common import REPO_DIR, WORK_DIR, log, parser, table, write_result
from clew.compose.answer import COSINE_EVIDENCE, EVIDENCE
from clew.compose.offtopic import (
    OFF_TOPIC,
    OFF_TOPIC_QUANTILE,
    PORTABLE_QUANTILE,
    THRESHOLD_CAP,
    offtopic_threshold,
)
from clew.config import EngineConfig
from clew.eval.datasets import load_dataset
from clew.eval.runner import ingest_key, open_index
from clew.train.calibrate import corpus_evidence, fit_across, rates, unrelated_evidence

CORPORA = (
    ("scifact", "train"),
    ("nfcorpus", "train"),
    ("hotpotqa-train100", "train"),
    ("musique-train100", "train"),
    ("support", "dev"),
    ("memory", "dev"),
)
TARGET_ANSWERED = 0.9
TARGET_UNRELATED = 0.8
PORTABLE = tuple(f for f in EVIDENCE if f not in COSINE_EVIDENCE)
"""The portable fit's features: rank- and distribution-based, no embedder cosine."""
RULE = "min"
"""The threshold answers 90% of every corpus in the fit (with cosines, unrelated questions still
score far below; the portable fit keeps the median rule, under which they pass less often)."""


DOMAIN = {
    "scifact": "biomedical",
    "nfcorpus": "biomedical",
    "hotpotqa-train100": "wikipedia",
    "musique-train100": "wikipedia",
    "support": "support",
    "memory": "memory",
}
"""Unrelated questions come from corpora of another domain: SciFact's claims are not unrelated
to NFCorpus, nor HotpotQA's questions to MuSiQue's Wikipedia passages."""


def _fit(kinds: dict[str, list[dict[str, float]]]) -> dict[str, list[dict[str, float]]]:
    """What a fit reads: answerable against unrelated and marked-unanswerable questions. The
    hidden-evidence questions are measured, not fitted: a near miss often does answer."""
    return {k: v for k, v in kinds.items() if k != "hidden"}


def _row(name: str, threshold: float, got: dict[str, float]) -> list[object]:
    return [
        name,
        f"{threshold:.4f}",
        got.get("answered", "–"),
        got.get("abstained_unrelated", "–"),
        got.get("abstained_hidden", "–"),
        got.get("abstained_unanswerable", "–"),
    ]


COLUMNS = [
    "corpus",
    "threshold",
    "answered (answerable)",
    "abstained (unrelated)",
    "abstained (evidence hidden)",
    "abstained (marked unanswerable)",
]


def main() -> int:
    p = parser(__doc__, quiet_wait=0.0)
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    config = EngineConfig()
    sets = {}
    for name, split in CORPORA:
        root = REPO_DIR / "eval" / "dev" / name if split == "dev" else args.data / name
        sets[name] = load_dataset(root, split)
    questions = {n: [q.text for q in d.queries] for n, d in sets.items()}
    key = hashlib.sha256(
        json.dumps([args.limit, EVIDENCE, *(ingest_key(d, config) for d in sets.values())]).encode()
        + b"".join(
            (REPO_DIR / "src" / "clew" / "compose" / f"{m}.py").read_bytes()
            for m in ("extract", "question", "verdict", "offtopic")
        )
    ).hexdigest()[:12]
    cache = WORK_DIR / f"evidence-{key}.json"
    if cache.exists():
        evidence, own = json.loads(cache.read_text())
    else:
        evidence, own = {}, {}
        for name, dataset in sets.items():
            rng = random.Random(name)
            others = [q for n, qs in questions.items() if DOMAIN[n] != DOMAIN[name] for q in qs]
            engine = open_index(dataset, config, progress=True)
            log(f"{name}: collecting evidence")
            evidence[name] = corpus_evidence(
                engine,
                dataset,
                config,
                unrelated=rng.sample(others, 60),
                limit=args.limit,
                progress=True,
            )
            own[name] = {"unrelated": unrelated_evidence(engine, OFF_TOPIC, config, progress=True)}
            engine.close()
        WORK_DIR.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps([evidence, own]))
    fits = {n: _fit(k) for n, k in evidence.items()}
    loco, loco_portable, selfs, selfs_portable, notes = [], [], [], [], []

    def ok(got: dict[str, float]) -> str:
        hit = (
            got.get("answered", 0) >= TARGET_ANSWERED
            and got.get("abstained_unrelated", 0) >= TARGET_UNRELATED
        )
        return "ok" if hit else "MISSED"

    for name, kinds in evidence.items():
        rest = {n: k for n, k in fits.items() if n != name}
        cal = fit_across(rest, answer_rate=TARGET_ANSWERED, rule=RULE)
        portable = fit_across(rest, answer_rate=TARGET_ANSWERED, features=PORTABLE)
        got = rates(cal, kinds)
        loco.append(_row(name, cal.threshold, got))
        loco_portable.append(_row(name, portable.threshold, rates(portable, kinds)))
        notes.append(f"{name} left out, shipped-style fit: {ok(got)}")
        offtopic = own[name]["unrelated"]
        mine = replace(cal, threshold=offtopic_threshold(cal, offtopic))
        got = rates(mine, kinds)
        selfs.append(_row(name, mine.threshold, got))
        theirs = offtopic_threshold(portable, offtopic, quantile=PORTABLE_QUANTILE)
        selfs_portable.append(_row(name, theirs, rates(replace(portable, threshold=theirs), kinds)))
        notes.append(
            f"{name} left out, self-calibrated: answered {got.get('answered')}, unrelated "
            f"abstained {got.get('abstained_unrelated')} ({ok(got)} against "
            f"{TARGET_ANSWERED:.0%} / {TARGET_UNRELATED:.0%})"
        )
    info = {"dataset": "six train corpora", "embedder": config.embedder.model}
    portable_fit = fit_across(fits, answer_rate=TARGET_ANSWERED, features=PORTABLE, info=info)
    fitted = replace(
        fit_across(fits, answer_rate=TARGET_ANSWERED, rule=RULE, info=info), portable=portable_fit
    )
    shipped_self = []
    for name, kinds in evidence.items():
        mine = replace(fitted, threshold=offtopic_threshold(fitted, own[name]["unrelated"]))
        shipped_self.append(_row(name, mine.threshold, rates(mine, kinds)))
    counts = [
        [n, *(len(evidence[n][k]) for k in evidence[n]), len(own[n]["unrelated"])] for n in evidence
    ]
    body = "\n".join(
        [
            f"Features: {', '.join(EVIDENCE)}. A fit reads answerable questions against unrelated "
            "ones (60 questions of corpora of another domain) and questions marked unanswerable; "
            "the same questions with their relevant documents hidden are measured, not fitted. "
            "Each corpus weighs the same. The shipped fit reads every feature, the embedder's raw "
            f"cosines ({', '.join(sorted(COSINE_EVIDENCE))}) among them; its threshold is the "
            f"lowest of the corpora's thresholds that answer {TARGET_ANSWERED:.0%} of their "
            "answerable questions, so every corpus in the fit answers that share. Its *portable* "
            f"fit ({', '.join(PORTABLE)}: ranks and score distributions only) is what answers "
            "use with another embedder or without a dense leg; its threshold is the median of "
            "those thresholds (the lowest lets too many unrelated questions pass without "
            "cosines).",
            "",
            "## One calibration, each corpus left out of the fit",
            "",
            table(COLUMNS, loco),
            "",
            "The portable fit, each corpus left out:",
            "",
            table(COLUMNS, loco_portable),
            "",
            "## Self-calibrated: the left-out weights, the corpus's own threshold",
            "",
            "What `clew calibrate --self` does on a new corpus, and what an ingest does by itself "
            "(`answer.self_calibrate`: once a corpus holds 20 chunks, again when it has grown or "
            "shrunk by half): the weights of the fit on the other five, the threshold under which "
            f"{OFF_TOPIC_QUANTILE:.0%} of clew's 40 off-topic questions score on this corpus "
            f"({PORTABLE_QUANTILE:.0%} for the portable fit), at most {THRESHOLD_CAP:g} "
            "(quantiles and cap chosen on these six, so in-sample for those numbers). The "
            "unrelated questions measured are not the off-topic ones.",
            "",
            table(COLUMNS, selfs),
            "",
            "The portable fit, self-calibrated:",
            "",
            table(COLUMNS, selfs_portable),
            "",
            f"The shipped calibration (all six corpora): threshold {fitted.threshold:.4f}; "
            f"portable {portable_fit.threshold:.4f}.",
            "",
            "## The default on these corpora: the shipped weights, each corpus's own threshold",
            "",
            "What answers use after an ingest of one of these corpora (the weights are fitted "
            "on all six, so in-sample; the left-out figures above are the ones that say how it "
            "holds on a corpus never seen):",
            "",
            table(COLUMNS, shipped_self),
            "",
            "## Questions per corpus",
            "",
            table(["corpus", *next(iter(evidence.values())).keys(), "off-topic"], counts),
        ]
    )
    if args.write:
        target = REPO_DIR / "src" / "clew" / "compose" / "abstain.json"
        target.write_text(json.dumps(fitted.to_json(), indent=2) + "\n", encoding="utf-8")
        log(f"wrote {target}")
    write_result("calibrate", "Abstention across corpora", body, notes=notes)
    print("\n".join(notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
