"""Yes or no, for a yes/no question about two or more named subjects, from the sentences that
name them. No model: the same question and sentences always give the same verdict.

``Are X and Y both Z?`` (``Is X, like Y, a Z?``, ``Were X and Y Z?``): the subjects are the names
on either side of the question's ``and``; the *predicate* is the question's analyzer terms that
are not the subjects' own (``film``, ``director``). A subject's evidence is the sentences that
name it, and the first sentence of a hit titled by it. The verdict is

- **yes** when every subject has a sentence holding every predicate term;
- **no** when every subject has evidence and some subject's evidence never holds them all;
- for ``the same Z`` (``same state``, ``same band``): **no** when the names the subjects'
  evidence brings (other than the subjects and the question's own) have none in common, and no
  verdict otherwise (a shared ``United States`` does not make two states one);
- no verdict (``None``) when fewer than two subjects are named or one has no evidence: the
  answer is then the supporting sentences alone.

A verdict always carries the sentence it read for each subject, so the answer shows its grounds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from clew.compose.question import names
from clew.ingest.analyze import analyze

__all__ = ["Verdict", "subjects", "verdict"]

_LEAD = re.compile(
    r"^\s*(?:is|are|was|were|do|does|did|has|have|had|can|could|will|would)\s+(?:both\s+)?",
    re.IGNORECASE,
)
_AND = re.compile(r",?\s+and\s+", re.IGNORECASE)
_BOTH = re.compile(r"(.+?)\s+both\b", re.IGNORECASE)
_SAME = re.compile(r"\bsame\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Verdict:
    """``yes`` or ``no``, and the evidence sentence read for each subject (indices into the
    sentences given to :func:`verdict`, one per subject, in the question's order)."""

    word: str
    subjects: tuple[str, ...]
    evidence: tuple[int, ...]
    reason: str

    @property
    def text(self) -> str:
        return "Yes." if self.word == "yes" else "No."


def subjects(question: str) -> tuple[str, ...]:
    """The named subjects of ``Are X and Y …?``: the last name before each ``and`` and the first
    after the last one (``Christopher Nolan``, ``Sathish Kalathil``); empty when the question
    names fewer than two."""
    body = _LEAD.sub("", question.strip().rstrip("?").strip(), count=1)
    parts = _AND.split(body)
    if len(parts) < 2:
        return ()
    found: list[str] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        before = _BOTH.match(part) if last else None
        if before and before.group(1)[:1].isupper():  # "Escape from the Dark both …"
            found.append(before.group(1).strip(" ,"))
            continue
        runs = [n for n in names(part) if n.casefold() not in ("both", "same")]
        if not runs:
            return ()
        found.append(runs[0] if last else runs[-1])
    out = tuple(dict.fromkeys(found))
    return out if len(out) >= 2 else ()


def _evidence(
    subject: str, texts: Sequence[str], firsts: Sequence[bool], titles: Sequence[str]
) -> list[int]:
    low = subject.casefold()
    return [
        i
        for i, text in enumerate(texts)
        if low in text.casefold() or (firsts[i] and low in titles[i].casefold())
    ]


def verdict(
    question: str,
    texts: Sequence[str],
    *,
    firsts: Sequence[bool],
    titles: Sequence[str],
) -> Verdict | None:
    """The verdict on a yes/no ``question`` from candidate sentences ``texts`` (``firsts[i]``:
    sentence ``i`` opens its hit, whose title is ``titles[i]``); None when there is none (see the
    module docstring)."""
    if not (len(texts) == len(firsts) == len(titles)):
        raise ValueError(
            f"texts, firsts and titles must be as long: {len(texts)}, {len(firsts)}, {len(titles)}"
        )
    named = subjects(question)
    if not named:
        return None
    own = {t for s in named for t in analyze(s)}
    predicate = [t for t in dict.fromkeys(analyze(question)) if t not in own and t != "same"]
    evidence = [_evidence(s, texts, firsts, titles) for s in named]
    if any(not e for e in evidence):
        return None
    tokens = [set(analyze(t)) for t in texts]
    if _SAME.search(question):
        asked = question.casefold()
        brought: list[set[str]] = []
        for subject, found in zip(named, evidence, strict=True):
            mine = {
                n.casefold()
                for i in found
                for n in names(texts[i])
                if n.casefold() not in asked and subject.casefold() not in n.casefold()
            }
            brought.append(mine)
        if all(brought) and not set.intersection(*brought):
            return Verdict(
                "no",
                named,
                tuple(found[0] for found in evidence),
                "the subjects' sentences name nothing in common",
            )
        return None
    if not predicate:
        return None
    best: list[int] = []
    holds: list[bool] = []
    for found in evidence:
        scored = sorted(found, key=lambda i: (-sum(t in tokens[i] for t in predicate), i))
        best.append(scored[0])
        holds.append(all(t in tokens[scored[0]] for t in predicate))
    terms = ", ".join(predicate)
    if all(holds):
        return Verdict("yes", named, tuple(best), f"every subject's sentence says {terms}")
    lacking = [s for s, ok in zip(named, holds, strict=True) if not ok]
    return Verdict("no", named, tuple(best), f"no sentence on {', '.join(lacking)} says {terms}")
