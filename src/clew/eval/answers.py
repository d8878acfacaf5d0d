"""Answer evaluation: does the answer say the gold answer, is it short, is it grounded, and does
abstention hold (``clew eval --answers``).

Per question with a gold answer (``metadata.answer`` and ``metadata.answer_aliases`` in
``queries.jsonl``, or ``metadata.answers``), from one :meth:`~clew.Engine.answer` call:

- ``in_answer``: a gold answer, normalised (case, punctuation, articles and whitespace folded, as
  SQuAD scores), occurs in the answer text (an abstention scores 0);
- ``in_cited``: … in the text of a cited chunk;
- ``words``: words of the answer text, citation markers left out (answered questions only);
- ``grounded``: share of the answer's sentences supported by the chunk they cite: at least
  :data:`GROUNDED_OVERLAP` of the sentence's content words (analyzer tokens) occur in that
  chunk. An extractive sentence is cut from its chunk, so anything below 1.0 there means the text
  was altered; for a generative answer it measures how much is the model's own;
- ``answered``: the answer did not abstain (over the questions not marked
  ``metadata.answerable: false``); ``abstained_unanswerable``: the share of those so marked
  that abstained.

Questions without a gold answer count for abstention only. With ``unrelated`` questions (another
corpus's) the report adds the share of them abstained on; with ``hidden`` the questions are asked
once more with their relevant documents hidden (near misses remain), and the share abstained on
is reported as is: a near miss may still answer the question.

Every figure is reported overall, per slice and per question type
(:func:`clew.compose.question.classify`).
"""

from __future__ import annotations

import re
import statistics
import string
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from clew.compose.answer import Answer
from clew.compose.question import classify
from clew.config import EngineConfig
from clew.engine import Engine
from clew.eval.datasets import Dataset, EvalError, EvalQuery, unanswerable_queries
from clew.ingest.analyze import analyze
from clew.memory import said_on

__all__ = [
    "ANSWER_METRICS",
    "GROUNDED_OVERLAP",
    "AnswerRecord",
    "check_answer_gates",
    "format_answers",
    "gold_answers",
    "grounding",
    "normalize_answer",
    "run_answers",
]

GROUNDED_OVERLAP = 0.6
"""Least share of a sentence's content words found in its cited chunk for it to count as
grounded. Measured on the answers to 60 questions each of HotpotQA- and MuSiQue-train100: a
sentence holds all its content words in the chunk it came from (1.0), and a median 0.20 / 0.12
(90th percentile 0.47 / 0.38) in the other top-10 hits of the same question; 4% of those reach
0.6. So 0.6 passes a sentence that keeps most of its source's words and fails one whose source is
another passage on the same topic."""
ANSWER_METRICS: tuple[str, ...] = (
    "in_answer",
    "in_cited",
    "answered",
    "words_median",
    "grounded",
    "abstained_unanswerable",
    "abstained_unrelated",
    "abstained_hidden",
)
_CITE = re.compile(r"\s*\[(\d+)\]")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—"})


@dataclass(frozen=True, slots=True)
class AnswerRecord:
    qid: str
    slice: str
    kind: str
    """Question type (:func:`clew.compose.question.classify`)."""
    has_gold: bool
    answerable: bool
    """False for a question the dataset marks ``metadata.answerable: false``."""
    answered: bool
    in_answer: bool
    in_cited: bool
    words: int
    grounded: float
    confidence: float


def normalize_answer(text: str) -> str:
    """Lower case, punctuation and articles dropped, whitespace folded (SQuAD's normalisation)."""
    text = text.casefold().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def gold_answers(query: EvalQuery) -> tuple[str, ...]:
    """The gold answer strings of a query (empty: none given)."""
    meta = query.metadata or {}
    out: list[str] = []
    for key in ("answer", "answers", "answer_aliases"):
        value = meta.get(key)
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, list):
            out += [v for v in value if isinstance(v, str)]
    return tuple(dict.fromkeys(a for a in out if normalize_answer(a)))


def _contains(text: str, golds: Iterable[str]) -> bool:
    hay = f" {normalize_answer(text)} "
    return any(f" {normalize_answer(g)} " in hay for g in golds)


def _segments(answer: str) -> list[tuple[str, int]]:
    """(sentence, citation number) of an answer text: each sentence ends with its marker."""
    out: list[tuple[str, int]] = []
    pos = 0
    for m in _CITE.finditer(answer):
        sentence = answer[pos : m.start()].strip()
        if sentence:
            out.append((sentence, int(m.group(1))))
        pos = m.end()
    return out


def grounding(answer: Answer) -> float:
    """Share of the answer's cited sentences whose content words are at least
    :data:`GROUNDED_OVERLAP` in the chunk they cite (1.0 for an answer with no sentence)."""
    texts = {c.n: c.chunk_id for c in answer.citations}
    by_id = {h.chunk_id: h for h in (*answer.context.kept, *answer.hits)}
    segments = _segments(answer.answer)
    if not segments:
        return 1.0
    good = 0
    for sentence, n in segments:
        hit = by_id.get(texts.get(n, ""))
        tokens = set(analyze(sentence))
        if hit is None or not tokens:
            continue
        day = said_on(hit.metadata) or ""  # the day a memory's sentence is shown with
        chunk = set(analyze(f"{hit.title} {hit.text} {day}"))
        good += len(tokens & chunk) / len(tokens) >= GROUNDED_OVERLAP
    return good / len(segments)


def _words(answer: str) -> int:
    return len(_CITE.sub(" ", answer).split())


def _record(q: EvalQuery, answer: Answer) -> AnswerRecord:
    golds = gold_answers(q)
    by_id = {h.chunk_id: h for h in (*answer.context.kept, *answer.hits)}
    cited = [by_id[c.chunk_id] for c in answer.citations if c.chunk_id in by_id]
    answered = not answer.abstained
    return AnswerRecord(
        qid=q.qid,
        slice=q.slice or "all",
        kind=classify(q.text).kind,
        has_gold=bool(golds),
        answerable=(q.metadata or {}).get("answerable", True) is not False,
        answered=answered,
        in_answer=answered and bool(golds) and _contains(answer.answer, golds),
        in_cited=answered and any(_contains(f"{h.title} {h.text}", golds) for h in cited),
        words=_words(answer.answer) if answered else 0,
        grounded=grounding(answer) if answered else 0.0,
        confidence=answer.confidence,
    )


def _summary(
    records: Sequence[AnswerRecord],
    unrelated: Sequence[bool] = (),
    hidden: Sequence[bool] = (),
) -> dict[str, float]:
    gold = [r for r in records if r.has_gold]
    answered = [r for r in records if r.answered]
    answerable = [r for r in records if r.answerable]
    trap = [r for r in records if not r.answerable]
    out: dict[str, float] = {"n": float(len(records))}
    if gold:
        out["in_answer"] = sum(r.in_answer for r in gold) / len(gold)
        out["in_cited"] = sum(r.in_cited for r in gold) / len(gold)
    if answerable:
        out["answered"] = sum(r.answered for r in answerable) / len(answerable)
    if trap:
        out["abstained_unanswerable"] = sum(not r.answered for r in trap) / len(trap)
    if answered:
        out["words_median"] = float(statistics.median(r.words for r in answered))
        out["grounded"] = sum(r.grounded for r in answered) / len(answered)
    if unrelated:
        out["abstained_unrelated"] = sum(unrelated) / len(unrelated)
    if hidden:
        out["abstained_hidden"] = sum(hidden) / len(hidden)
    return {k: round(v, 4) for k, v in out.items()}


def run_answers(
    engine: Engine,
    dataset: Dataset,
    config: EngineConfig | None = None,
    *,
    unrelated: Sequence[str] = (),
    hidden: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Answer every query of ``dataset`` and score the answers (see the module docstring):
    ``{"dataset", "split", "overall", "slices", "types", "records"}``."""
    cfg = config or engine.config
    cfg = replace(cfg, trace=replace(cfg.trace, enabled=False))
    records: list[AnswerRecord] = []
    held: list[bool] = []
    bar: Any = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc=f"{dataset.name}:answers", unit="q")
    for q in (*dataset.queries, *unanswerable_queries(dataset)):
        answer = engine.answer(q.text, filter=q.filter, config=cfg).answer
        records.append(_record(q, answer))
        relevant = sorted(d for d, g in dataset.qrels.get(q.qid, {}).items() if g > 0)
        if hidden and relevant:
            gone = engine.answer(q.text, filter=q.filter, config=cfg, exclude_docs=relevant)
            held.append(gone.answer.abstained)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    far = [engine.answer(text, config=cfg).answer.abstained for text in unrelated]
    slices: dict[str, list[AnswerRecord]] = defaultdict(list)
    types: dict[str, list[AnswerRecord]] = defaultdict(list)
    for r in records:
        slices[r.slice].append(r)
        types[r.kind].append(r)
    return {
        "dataset": dataset.name,
        "split": dataset.split,
        "overall": _summary(records, far, held),
        "slices": {s: _summary(rs) for s, rs in sorted(slices.items())},
        "types": {t: _summary(rs) for t, rs in sorted(types.items())},
        "records": [
            {
                "qid": r.qid,
                "slice": r.slice,
                "type": r.kind,
                "answered": r.answered,
                "in_answer": r.in_answer,
                "in_cited": r.in_cited,
                "words": r.words,
                "grounded": round(r.grounded, 4),
                "confidence": round(r.confidence, 4),
            }
            for r in records
        ],
    }


def format_answers(report: Mapping[str, Any]) -> str:
    """The report as a markdown table: overall, then per slice and per question type."""
    cols = ("n", *ANSWER_METRICS)
    lines = [
        f"answers: {report['dataset']} ({report['split']})",
        "",
        "| rows | " + " | ".join(cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]

    def row(name: str, values: Mapping[str, float]) -> str:
        cells = [f"{values[c]:g}" if c in values else "–" for c in cols]
        return f"| {name} | " + " | ".join(cells) + " |"

    lines.append(row("all", report["overall"]))
    for name, values in report["slices"].items():
        if len(report["slices"]) > 1:
            lines.append(row(f"slice {name}", values))
    for name, values in report["types"].items():
        lines.append(row(f"type {name}", values))
    return "\n".join(lines)


def check_answer_gates(path: str | Path, report: Mapping[str, Any]) -> list[str]:
    """Failures of the answer gates in ``path`` for this report's dataset: a YAML list under
    ``answer_gates`` of ``{dataset, slice (default all; or type:<kind>), min: {metric: v},
    max: {metric: v}}`` with metrics from :data:`ANSWER_METRICS`."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise EvalError(f"cannot read answer gates {str(path)!r}: {exc}") from exc
    entries = data.get("answer_gates", []) if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        raise EvalError(f"{path}: 'answer_gates' must be a list of gates")
    reasons: list[str] = []
    for i, gate in enumerate(entries):
        if not isinstance(gate, Mapping) or "dataset" not in gate:
            raise EvalError(f"{path}: answer gate {i} needs at least 'dataset' and 'min' or 'max'")
        if gate["dataset"] != report["dataset"]:
            continue
        where = str(gate.get("slice", "all"))
        if where == "all":
            values = report["overall"]
        elif where.startswith("type:"):
            values = report["types"].get(where[5:], {})
        else:
            values = report["slices"].get(where, {})
        for bound, sign in (("min", 1), ("max", -1)):
            for metric, limit in (gate.get(bound) or {}).items():
                if metric not in ANSWER_METRICS:
                    raise EvalError(
                        f"{path}: answer gate {i}: metric {metric!r} is unknown; allowed: "
                        + ", ".join(ANSWER_METRICS)
                    )
                got = values.get(metric)
                if got is None:
                    reasons.append(f"{where}: {metric} was not measured")
                elif sign * (got - float(limit)) < -1e-9:
                    reasons.append(f"{where}: {metric} {got:g} {'<' if sign > 0 else '>'} {limit}")
    return reasons


def answers_command(args: Any, dataset: Dataset) -> int:
    """``clew eval --answers``: answer the split's questions, print the report (``--json``: as
    JSON), save it (``--save DIR``: ``DIR/<dataset>-answers.json``) and check ``--gate`` (its
    ``answer_gates``). Exit status 1 when a gate fails."""
    import json

    from clew.eval.datasets import load_dataset
    from clew.eval.gate import report_gates
    from clew.eval.runner import open_index

    config = EngineConfig.from_yaml(args.config) if args.config else EngineConfig()
    unrelated: list[str] = []
    if args.unrelated:
        others = load_dataset(args.unrelated, "test")
        unrelated = [q.text for q in others.queries][: args.limit or None]
    engine = open_index(dataset, config, args.index, progress=not args.no_progress)
    try:
        report = run_answers(
            engine,
            dataset,
            config,
            unrelated=unrelated,
            hidden=args.hidden,
            progress=not args.no_progress,
        )
    finally:
        engine.close()
    print(json.dumps(report, indent=2) if args.json else format_answers(report))
    if args.save:
        out = Path(args.save) / f"{Path(dataset.name).name}-answers.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({k: v for k, v in report.items() if k != "records"}, indent=2))
        tmp.replace(out)
    if args.gate:
        return report_gates("answer gate", dataset.name, check_answer_gates(args.gate, report))
    return 0
