"""An answer from a retrieval run: assemble the budgeted context, select sentences, weigh the
evidence, abstain or answer (extractive, or generative through an OpenAI-compatible endpoint,
falling back to extractive on any endpoint failure), with citations."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from clew.compose.answer import (
    NOT_FOUND,
    Answer,
    Calibration,
    Citation,
    coverage,
    evidence_features,
    url_of,
    why,
)
from clew.compose.assemble import Context, assemble
from clew.compose.dated import memory_days
from clew.compose.extract import (
    DENSE_WEIGHTS,
    Selected,
    identifiers,
    select_sentences,
    yes_no,
)
from clew.compose.question import classify
from clew.compose.render import answer_text
from clew.config import EngineConfig
from clew.ingest.analyze import STOP_WORDS, analyze, query_terms
from clew.protocols import Encoder
from clew.retrieve.run import Run, elapsed_ms
from clew.types import Hit

__all__ = ["ASK_K", "absent_codes", "answer_pool", "defined_code", "respond"]

ASK_K = 20
"""Hits an answer considers before assembly (the token budget decides how many are kept)."""


def respond(
    run: Run, encoder: Encoder | None, calibration: Callable[[str, Any], Calibration]
) -> tuple[Answer, dict[str, Any]]:
    """The answer to the run's query from its hits (with its config), and what its trace adds.
    ``encoder`` scores sentences by meaning too (None: by terms only); ``calibration`` loads a
    calibration file (``""``: the index's own for the run's scope, else the shipped one)."""
    question, cfg = run.query, run.cfg
    timings = run.timings
    t = time.perf_counter()
    ctx = assemble(run.hits, cfg.assemble)
    timings["assemble"] = elapsed_ms(t)

    t = time.perf_counter()
    snap = run.snap
    asked = list(query_terms(question))
    idf = snap.idf(asked, run.scoped)
    pool = answer_pool(run.hits, ctx, cfg.answer.chunks)
    selected = select_sentences(
        question,
        pool,
        encoder=encoder,
        idf=idf,
        max_sentences=cfg.answer.max_sentences,
        max_words=cfg.answer.max_words,
        embed_limit=cfg.answer.embed_sentences or None,
    )
    coverages = [coverage(idf, set(analyze(f"{h.title} {h.text}"))) for h in run.hits[:3]]
    keys = snap.keys
    evidence = evidence_features(
        leg_scores={leg: [h.score for h in hits] for leg, hits in run.lists.items()},
        leg_top={leg: [keys[h.ordinal][0] for h in hits[:10]] for leg, hits in run.lists.items()},
        hits=run.hits,
        leg_weights=run.route.legs,
        unit=cfg.fusion.top_part(),
        coverages=coverages,
        sentence_overlap=float(selected[0].parts.get("term_overlap", 0.0)) if selected else 0.0,
        dense_top=float(run.lists["dense"][0].score) if run.lists.get("dense") else 0.0,
        sentence_cosine=max((x.parts.get("cosine", 0.0) for x in selected), default=0.0)
        / DENSE_WEIGHTS["cosine"],
    )
    confidence, threshold, calibration_info = 1.0, 0.0, {}
    if cfg.answer.abstain:
        found = calibration(cfg.answer.calibration, run.scope)
        if encoder is None or not run.lists.get("dense"):  # no cosines to read
            found = found.without_cosines()
        confidence = found.probability(evidence)
        threshold, calibration_info = found.threshold, found.info
    missing = absent_codes(question, snap, run.scoped)
    evidence["absent_codes"] = float(len(missing))
    defined = defined_code(question, selected, pool)
    evidence["code_defined"] = float(bool(defined))
    # a code's definition found under the code itself answers, however little the embedder makes
    # of a code ("E-202" and its table row are far apart in MiniLM's space)
    doubtful = confidence < threshold and not defined
    weak = doubtful or not selected or not ctx.kept or bool(missing)
    abstained = cfg.answer.abstain and weak
    timings["answer"] = elapsed_ms(t)

    citations: list[Citation] = []
    text = NOT_FOUND
    mode = cfg.answer.mode
    fallback = ""
    if not abstained and mode == "generative":
        t = time.perf_counter()
        try:
            text, used = generate(question, ctx.kept, cfg)
            if used is None:
                abstained = True
                text = NOT_FOUND
            else:
                for n in used:
                    h = ctx.kept[n - 1]
                    citations.append(
                        Citation(
                            n,
                            h.doc_id,
                            h.chunk_id,
                            h.title,
                            url_of(h),
                            why(h, (), n),
                            page=h.page,
                        )
                    )
        except Exception as exc:  # endpoint failure: the extractive answer, with the reason
            fallback = f"{type(exc).__name__}: {exc}"
            mode = "extractive"
        timings["generate"] = elapsed_ms(t)
    judged = None
    if not abstained and mode == "extractive":
        judged = yes_no(question, pool)
        if judged is not None:  # the verdict, shown on the sentence read for each subject
            selected = judged[1]
        number: dict[int, int] = {}
        terms: dict[int, list[str]] = {}
        for sel in selected:
            i = sel.sentence.hit_index
            number.setdefault(i, len(number) + 1)
            terms.setdefault(i, [])
            terms[i] += [x for x in sel.matched_terms if x not in terms[i]]
        days: dict[int, str] = {}
        if classify(question).kind == "time":  # a memory's day answers "when did I …"
            days = {i: d for i, d in memory_days(pool).items() if i in number}
        text = answer_text(selected, number, days)
        if judged is not None:
            text = f"{judged[0].text} {text}"
        kept_at = {h.chunk_id: r for r, h in enumerate(ctx.kept, 1)}
        for i, n in sorted(number.items(), key=lambda p: p[1]):
            h = pool[i]
            where = kept_at.get(h.chunk_id)
            mine = sorted(
                (x.sentence for x in selected if x.sentence.hit_index == i), key=lambda x: x.start
            )
            citations.append(
                Citation(
                    n,
                    h.doc_id,
                    h.chunk_id,
                    h.title,
                    url_of(h),
                    why(h, terms[i], where),
                    spans=tuple((x.start, x.end) for x in mine),
                    sentences=tuple(x.text for x in mine),
                    page=h.page,
                )
            )
    after = ("assemble", "answer", "generate")  # the stages after retrieval, in sequence
    timings["total"] = round(timings["total"] + sum(timings.get(x, 0.0) for x in after), 3)
    answer = Answer(
        question=question,
        answer=text,
        abstained=abstained,
        mode=mode,
        citations=tuple(citations),
        hits=run.hits,
        context=ctx,
        confidence=confidence,
        threshold=threshold,
        evidence=evidence,
        nearest=run.hits[:3] if abstained else (),
        fallback=fallback,
        timings_ms=timings,
        release=run.release,
        rerank=run.rerank_status,
        verdict=None if judged is None else judged[0].word,
        verdict_reason="" if judged is None else judged[0].reason,
    )
    out = answer.to_dict()
    extra = {
        "answer": {
            key: out[key] for key in out if key not in ("hits", "timings_ms", "trace_id", "release")
        },
        "calibration": calibration_info,
    }
    return answer, extra


_NEVER = "\x00no-such-token"
"""A token no chunk has: its idf is what a term absent from the caller's scope gets."""


def absent_codes(question: str, snap: Any, scoped: Any) -> list[str]:
    """The codes the question names (identifiers with a digit: ``LOCK-E35``, ``PK-48``,
    ``4.2.0``; and versions after a name, ``firmware 3.5``, unless the sources have a ``3.5.x``)
    that no chunk in the caller's scope contains: sources that never mention the code cannot say
    what it is, however close the rest of the evidence looks (notes of firmware 3.4 do not say
    whether 3.5 fixes anything)."""
    from clew.ingest.concepts import identifier_spans

    codes: dict[str, tuple[str, tuple[str, ...]]] = {}  # token -> (as asked, forms it may take)
    for surface, _, _ in identifier_spans(question):
        tokens = analyze(surface)
        if tokens and any(c.isdigit() for c in surface):
            codes[tokens[0]] = (surface, (tokens[0],))
    for m in _VERSION.finditer(question):
        before, number, after = m.group(1).casefold(), m.group(2), m.group(3).casefold()
        if before in STOP_WORDS or after in _UNITS or number.casefold() in codes:
            continue  # "is 2.5 enough", "2.5 km": a quantity, not a version
        # a release the sources call 3.5.1 is the 3.5 asked about
        codes[number] = (f"{m.group(1)} {number}", (number, *(f"{number}.{n}" for n in range(10))))
    if not codes:
        return []
    idf = snap.idf([*(t for _, forms in codes.values() for t in forms), _NEVER], scoped)
    never = idf[_NEVER]
    return [surface for surface, forms in codes.values() if all(idf[t] >= never for t in forms)]


_VERSION = re.compile(r"([^\W\d_][\w-]*)\s+v?(\d+(?:\.\d+)+)(?![\w.])\s*([^\W\d_]*|%)")
"""A dotted number after a word (``firmware 3.5``, ``dockfw 4.14``, ``Console 2024.11``), with
the word after it: a version unless the word before is a stop word or the one after a unit."""
_UNITS = frozenset(
    {"%", "percent", "x", "times", "km", "m", "cm", "mm", "mi", "miles", "ft", "in", "kg", "g"}
    | {"lb", "lbs", "kwh", "wh", "v", "w", "kw", "a", "mah", "h", "hr", "hrs", "hour", "hours"}
    | {"min", "mins", "minute", "minutes", "s", "sec", "secs", "second", "seconds", "ms"}
    | {"day", "days", "week", "weeks", "month", "months", "year", "years", "gb", "mb", "tb"}
    | {"kb", "ghz", "mhz", "eur", "usd", "gbp", "euro", "euros", "dollars", "pounds", "stars"}
)
"""Words after a number that make it a quantity (``2.5 km``, ``1.5 hours``)."""


def defined_code(question: str, selected: Sequence[Selected], pool: Sequence[Hit]) -> str:
    """The code a definition question asks about (``what does E-202 mean``, ``BUG-771``) when
    the best sentence names it exactly, or the title or innermost heading of its hit does (a
    table row ``E-202 | DNS timeout``, an article titled ``SW-2207: Unlock request timed out``);
    "" otherwise. Sources that say the code where they say something of it are the answer to
    what it means: such a question is answered whatever the calibrated confidence."""
    asked = classify(question)
    if asked.kind != "definition" or not selected:
        return ""
    code = asked.subject.casefold()
    if not code or not any(c.isdigit() for c in code) or code not in identifiers(asked.subject):
        return ""
    best = selected[0].sentence
    hit = pool[best.hit_index]
    said = " ".join([best.text, hit.title, *hit.heading_path[-1:]])
    return asked.subject if code in identifiers(said) else ""


def answer_pool(hits: Sequence[Hit], ctx: Context, n: int) -> list[Hit]:
    """The chunks whose sentences compete for the extractive answer: the best ``n`` hits in
    rank order, less those the assembler dropped as near-duplicates of a kept one. The score
    floor does not apply here: a hit under it may still say the answer in one sentence (on the
    multi-hop train sets the 3rd and 4th hits held it for 14% of the questions the top two
    missed)."""
    twins = {d.chunk_id for d in ctx.dropped if d.reason == "near_duplicate"}
    return [h for h in hits if h.chunk_id not in twins][:n]


def generate(
    question: str, kept: Sequence[Hit], cfg: EngineConfig
) -> tuple[str, tuple[int, ...] | None]:
    """A generative answer over the kept chunks; None citations = the model found none."""
    from clew.errors import LLMError
    from clew.models.llm import ChatClient, answer_messages, parse_cited, settings_for

    a = cfg.answer
    settings = settings_for(a.base_url, a.model, a.timeout_s)
    passages = [(i + 1, h.title, h.text) for i, h in enumerate(kept)]
    with ChatClient(settings) as client:
        text = client.complete(answer_messages(question, passages)).strip()
    if text.strip().rstrip(".") == "NOT_FOUND":
        return text, None
    cited, invalid = parse_cited(text, range(1, len(kept) + 1))
    if not cited:
        extra = f" (it cited {list(invalid)}, allowed 1..{len(kept)})" if invalid else ""
        raise LLMError(f"the generated answer cites no source{extra}")
    return text, cited
