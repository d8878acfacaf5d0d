"""Answers on the shared sets: gold answer in the answer text and in the cited chunks, length,
grounding and abstention, overall, per slice and per question type.

    python bench/answers.py [--sets NAME:SPLIT ...]

Runs :func:`clew.eval.answers.run_answers` (what ``clew eval --answers`` runs) with the default
config on HotpotQA-200 and MuSiQue-200 (test, reported, never tuned on) and on the train100 sets,
eval/dev/support and eval/dev/memory (training data, in-sample). Each set is also asked 50
questions of another set (unrelated) and, with ``--hidden``, its questions again with the
relevant documents hidden. Checks ``eval/answer-gates.yaml``; writes
``bench/results/answers.md``.
"""

from __future__ import annotations

from _common import REPO_DIR, log, parser, table, write_result
from clew.config import EngineConfig
from clew.eval.answers import ANSWER_METRICS, check_answer_gates, run_answers
from clew.eval.datasets import load_dataset
from clew.eval.runner import open_index

SETS = (
    "hotpotqa-migres200:test",
    "musique-migres200:test",
    "hotpotqa-train100:train",
    "musique-train100:train",
    "support:dev",
    "memory:dev",
)
UNRELATED_FROM = {
    "hotpotqa": ("scifact", "test"),
    "musique": ("scifact", "test"),
    "support": ("hotpotqa-train100", "train"),
    "memory": ("scifact", "test"),
}


def main() -> int:
    p = parser(__doc__, quiet_wait=0.0)
    p.add_argument("--sets", nargs="*", default=list(SETS))
    p.add_argument("--hidden", action="store_true")
    args = p.parse_args()
    config = EngineConfig()
    gates = REPO_DIR / "eval" / "answer-gates.yaml"
    sections, notes = [], []
    cols = ["rows", "n", *ANSWER_METRICS]
    for spec in args.sets:
        name, split = spec.split(":")
        root = REPO_DIR / "eval" / "dev" / name if split == "dev" else args.data / name
        dataset = load_dataset(root, split)
        other, other_split = next(v for k, v in UNRELATED_FROM.items() if name.startswith(k))
        unrelated = [q.text for q in load_dataset(args.data / other, other_split).queries][:50]
        engine = open_index(dataset, config, progress=True)
        log(f"{name}: answering {len(dataset.queries)} questions")
        report = run_answers(
            engine, dataset, config, unrelated=unrelated, hidden=args.hidden, progress=True
        )
        engine.close()

        def row(label: str, values: dict[str, float]) -> list[object]:
            return [label, *(values.get(c, "–") for c in cols[1:])]

        rows = [row("all", report["overall"])]
        rows += [row(f"slice {s}", v) for s, v in report["slices"].items() if s != "all"]
        rows += [row(f"type {t}", v) for t, v in report["types"].items()]
        kind = "test split, reported" if split == "test" else f"{split} data, in-sample"
        sections += [f"## {name} ({kind})", "", table(cols, rows), ""]
        reasons = check_answer_gates(gates, report)
        notes += [f"{name}: gate {'FAILED: ' + '; '.join(reasons) if reasons else 'passed'}"]
    body = "\n".join(
        [
            "Default config, extractive answers. `in_answer`: a gold answer (normalised as SQuAD "
            "does) in the answer text, abstentions counting 0; `in_cited`: in a cited chunk; "
            "`words_median`: of the answered; `grounded`: share of answer sentences whose content "
            "words are at least 60% in the chunk they cite; `answered`: of the questions not "
            "marked unanswerable; `abstained_*`: of the questions marked unanswerable, of 50 "
            "questions from another corpus, and (with `--hidden`) of the same questions with the "
            "relevant documents hidden. Question types: `clew.compose.question.classify`.",
            "",
            *sections,
        ]
    )
    write_result("answers", "Answers on the shared sets", body, notes=notes)
    print("\n".join(notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
