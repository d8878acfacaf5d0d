"""Abstention across corpora: collect the evidence of every train corpus, fit one calibration,
and report the answer / abstain trade-off per corpus with each corpus left out of the fit.

    python bench/calibrate.py [--limit 100] [--write]

Corpora (train and dev data only): SciFact train, NFCorpus train, HotpotQA-train100,
MuSiQue-train100 and our dev sets eval/dev/support and eval/dev/memory. Per corpus: up to
``--limit`` questions as is (answerable), the same with their relevant documents hidden (near
misses), 60 questions of the other corpora plus clew's off-topic list (unrelated), and its own
questions marked unanswerable. The evidence is cached in ``bench/.work/evidence-<key>.json``.
``--write`` also writes the fit on all corpora to ``src/clew/compose/abstain.json`` (the shipped
calibration). Writes ``bench/results/calibrate.md``.
"""

from __future__ import annotations

import hashlib
import json
import random

from _common import REPO_DIR, WORK_DIR, log, parser, table, write_result
from clew.compose.answer import EVIDENCE
from clew.config import EngineConfig
from clew.eval.datasets import load_dataset
from clew.eval.runner import ingest_key, open_index
from clew.train.calibrate import corpus_evidence, fit_across, leave_one_out, rates
from clew.train.offtopic import OFF_TOPIC

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
        + (REPO_DIR / "src" / "clew" / "compose" / "extract.py").read_bytes()
    ).hexdigest()[:12]
    cache = WORK_DIR / f"evidence-{key}.json"
    if cache.exists():
        evidence = json.loads(cache.read_text())
    else:
        evidence = {}
        for name, dataset in sets.items():
            rng = random.Random(name)
            others = [q for n, qs in questions.items() if n != name for q in qs]
            unrelated = [*rng.sample(others, 60), *OFF_TOPIC]
            engine = open_index(dataset, config, progress=True)
            log(f"{name}: collecting evidence")
            evidence[name] = corpus_evidence(
                engine, dataset, config, unrelated=unrelated, limit=args.limit, progress=True
            )
            engine.close()
        WORK_DIR.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(evidence))
    loco = leave_one_out(evidence, answer_rate=TARGET_ANSWERED)
    fitted = fit_across(evidence, answer_rate=TARGET_ANSWERED)
    rows, notes = [], []
    for name, got in loco.items():
        inside = rates(fitted, evidence[name])
        rows.append(
            [
                name,
                got["threshold"],
                got.get("answered", "–"),
                got.get("abstained_unrelated", "–"),
                got.get("abstained_hidden", "–"),
                got.get("abstained_unanswerable", "–"),
                inside.get("answered", "–"),
                inside.get("abstained_unrelated", "–"),
            ]
        )
        ok = (
            got.get("answered", 0) >= TARGET_ANSWERED
            and got.get("abstained_unrelated", 0) >= TARGET_UNRELATED
        )
        notes.append(
            f"{name} left out: answered {got.get('answered')}, unrelated abstained "
            f"{got.get('abstained_unrelated')} ({'ok' if ok else 'MISSED'} against "
            f"{TARGET_ANSWERED:.0%} / {TARGET_UNRELATED:.0%})"
        )
    counts = [[n, *(len(evidence[n][k]) for k in evidence[n])] for n in evidence]
    body = "\n".join(
        [
            f"Features: {', '.join(EVIDENCE)}. Each corpus weighs the same in the fit; the "
            f"threshold is the highest at which every corpus in the fit still answers "
            f"{TARGET_ANSWERED:.0%} of its answerable questions.",
            "",
            "## Leave one corpus out",
            "",
            "Fitted on the other five corpora, measured on the one left out; the last two "
            "columns are the fit on all six (the shipped calibration), in-sample.",
            "",
            table(
                [
                    "left out",
                    "threshold",
                    "answered (answerable)",
                    "abstained (unrelated)",
                    "abstained (evidence hidden)",
                    "abstained (marked unanswerable)",
                    "all-six fit: answered",
                    "all-six fit: abstained unrelated",
                ],
                rows,
            ),
            "",
            f"The shipped calibration (all six): threshold {fitted.threshold:.4f}.",
            "",
            "## Questions per corpus",
            "",
            table(["corpus", *next(iter(evidence.values())).keys()], counts),
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
