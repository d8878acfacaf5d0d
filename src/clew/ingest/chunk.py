"""Section-aware chunking sized in embedding-tokenizer tokens.

A document is split at markdown headings into sections (the heading path is kept), sections into
paragraphs, and paragraphs are packed into chunks of at most ``max_tokens`` tokens counted by the
embedding model's own tokenizer, the title prefix and special tokens included. A paragraph too
long for one chunk is split at sentences, and a sentence too long at words, with
``overlap_tokens`` repeated between consecutive windows. Every chunk is an exact slice
``text[start:end]`` of the document.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clew.config import ChunkConfig
from clew.types import Chunk, Document

TokenCounter = Callable[[Sequence[str]], list[int]]
"""Counts tokens of each text, without special tokens (the embedder's tokenizer)."""

SPECIAL_TOKENS = 2  # [CLS] and [SEP]

HEADING = re.compile(r"^(#{1,6})[ \t]+([^\n]+)$", re.MULTILINE)
"""An ATX heading line (``## Title ##``); its text is :func:`heading_text` of group 2.

No two quantifiers compete for the same characters, so matching is linear on any input (the
former ``(.+?)[ \t]*#*[ \t]*$`` took minutes on a heading followed by a few thousand blanks)."""
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_WORD = re.compile(r"\S+")
_WORD_BLOCK = 4096
"""Words counted per tokenizer call when a sentence is split into word windows."""


def content_hash(text: str) -> str:
    """sha256 of the normalized text (NFKC, casefold, whitespace collapsed)."""
    from clew.ingest.analyze import normalize

    canonical = " ".join(normalize(text).split())
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def embedding_text(title: str, heading_path: Sequence[str], text: str) -> str:
    """The text a chunk is embedded and lexically indexed with: title, headings, body."""
    head = [title.strip()] if title.strip() else []
    head += [h for h in heading_path if h and h not in text[:200]]
    return "\n".join([*head, text]) if head else text


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int
    headings: tuple[str, ...]


def heading_text(raw: str) -> str:
    """A heading's text: surrounding blanks and a closing ``#`` run (``## Title ##``) removed.

    A closing run counts only after a blank, so ``## C#`` keeps its ``#`` (as CommonMark)."""
    text = raw.strip(" \t")
    bare = text.rstrip("#")
    if bare != text and (not bare or bare[-1] in " \t"):
        text = bare.rstrip(" \t")
    return text


def _sections(text: str) -> list[_Span]:
    """Split at headings; each section keeps the path of headings above it."""
    spans: list[_Span] = []
    path: list[tuple[int, str]] = []
    pos = 0
    current: tuple[str, ...] = ()
    for m in HEADING.finditer(text):
        title = heading_text(m.group(2))
        if not title:
            continue
        if m.start() > pos:
            spans.append(_Span(pos, m.start(), current))
        level = len(m.group(1))
        path = [(lvl, h) for lvl, h in path if lvl < level] + [(level, title)]
        current = tuple(h for _, h in path)
        pos = m.start()
    spans.append(_Span(pos, len(text), current))
    return [s for s in spans if text[s.start : s.end].strip()]


def _split(text: str, span: _Span, pattern: re.Pattern[str]) -> list[_Span]:
    """Split a span at a separator pattern, trimming whitespace; offsets stay exact."""
    out: list[_Span] = []
    pos = span.start
    piece = text[span.start : span.end]
    for m in pattern.finditer(piece):
        out.append(_Span(pos, span.start + m.start(), span.headings))
        pos = span.start + m.end()
    out.append(_Span(pos, span.end, span.headings))
    trimmed = []
    for s in out:
        raw = text[s.start : s.end]
        left = len(raw) - len(raw.lstrip())
        right = len(raw.rstrip())
        if right > left:
            trimmed.append(_Span(s.start + left, s.start + right, s.headings))
    return trimmed


class Chunker:
    """Turns documents into chunks; one instance per tokenizer and config."""

    def __init__(self, config: ChunkConfig, count_tokens: TokenCounter) -> None:
        self.config = config
        self.count = count_tokens

    def chunk(self, doc: Document) -> list[Chunk]:
        text = doc.text
        units: list[_Span] = []
        for section in _sections(text):
            units.extend(_split(text, section, _PARAGRAPH_BREAK))
        if not units:
            return self._pack(doc, [], {})
        prefix_cost = {
            h: n
            for h, n in zip(
                {u.headings for u in units},
                self.count([embedding_text(doc.title, h, "") for h in {u.headings for u in units}]),
                strict=True,
            )
        }
        costs = self.count([text[u.start : u.end] for u in units])
        pieces: list[_Span] = []
        for unit, cost in zip(units, costs, strict=True):
            budget = self._budget(prefix_cost[unit.headings])
            if cost <= budget:
                pieces.append(unit)
            else:
                pieces.extend(self._split_long(text, unit, budget))
        return self._pack(doc, pieces, prefix_cost)

    def _budget(self, prefix_tokens: int) -> int:
        return max(16, self.config.max_tokens - SPECIAL_TOKENS - prefix_tokens - 1)

    def _split_long(self, text: str, unit: _Span, budget: int) -> list[_Span]:
        sentences = _split(text, unit, _SENTENCE_END)
        costs = self.count([text[s.start : s.end] for s in sentences])
        out: list[_Span] = []
        for sentence, cost in zip(sentences, costs, strict=True):
            if cost <= budget:
                out.append(sentence)
            else:
                out.extend(self._word_windows(text, sentence, budget))
        return out

    def _word_windows(self, text: str, span: _Span, budget: int) -> list[_Span]:
        """Windows of whole words, at most ``budget`` tokens each (a longer word alone),
        consecutive windows repeating about ``overlap_tokens`` tokens.

        Words are read and counted in blocks, and only the words from the current window on are
        kept, so a paragraph of any size takes memory for a block, not for all of its words."""
        found = (m.span() for m in _WORD.finditer(text, span.start, span.end))
        starts: list[int] = []
        ends: list[int] = []
        costs: list[int] = []
        base = 0  # index of starts[0] among all the span's words
        exhausted = False

        def have(index: int) -> bool:
            """Whether word ``index`` exists, reading the next block of words when needed."""
            nonlocal exhausted
            while index - base >= len(starts) and not exhausted:
                block = list(itertools.islice(found, _WORD_BLOCK))
                exhausted = len(block) < _WORD_BLOCK
                starts.extend(a for a, _ in block)
                ends.extend(b for _, b in block)
                costs.extend(self.count([text[a:b] for a, b in block]))
            return index - base < len(starts)

        windows: list[_Span] = []
        i = 0
        while have(i):
            total = 0
            j = i
            while have(j) and (total + costs[j - base] <= budget or j == i):
                total += costs[j - base]
                j += 1
            windows.append(_Span(starts[i - base], ends[j - 1 - base], span.headings))
            if not have(j):
                break
            # step back to repeat about overlap_tokens tokens in the next window
            back = 0
            k = j
            while k - 1 > i and back + costs[k - 1 - base] <= self.config.overlap_tokens:
                back += costs[k - 1 - base]
                k -= 1
            i = k
            drop = i - base  # words before the new window are never read again
            del starts[:drop], ends[:drop], costs[:drop]
            base = i
        return windows

    def _pack(
        self,
        doc: Document,
        pieces: list[_Span],
        prefix_cost: dict[tuple[str, ...], int],
    ) -> list[Chunk]:
        """Greedily pack consecutive pieces of the same section into chunks."""
        text = doc.text
        costs = self.count([text[p.start : p.end] for p in pieces])
        groups: list[tuple[_Span, int]] = []
        cur: _Span | None = None
        cur_cost = 0
        for piece, cost in zip(pieces, costs, strict=True):
            budget = self._budget(prefix_cost[piece.headings])
            if (
                cur is not None
                and cur.headings == piece.headings
                and piece.start >= cur.end
                and cur_cost + cost + 1 <= budget
            ):
                cur = _Span(cur.start, piece.end, cur.headings)
                cur_cost += cost + 1
            else:
                if cur is not None:
                    groups.append((cur, cur_cost))
                cur, cur_cost = piece, cost
        if cur is not None:
            groups.append((cur, cur_cost))
        chunks: list[Chunk] = []
        for seq, (span, cost) in enumerate(groups):
            body = text[span.start : span.end]
            digest = content_hash(body)
            chunks.append(
                Chunk(
                    chunk_id=f"{doc.doc_id}#{seq}:{digest[:8]}",
                    doc_id=doc.doc_id,
                    seq=seq,
                    text=body,
                    content_hash=digest,
                    token_count=cost + prefix_cost[span.headings] + SPECIAL_TOKENS,
                    heading_path=span.headings,
                    start=span.start,
                    end=span.end,
                )
            )
        if not chunks and doc.title.strip():
            digest = content_hash(doc.title)
            chunks.append(
                Chunk(
                    chunk_id=f"{doc.doc_id}#0:{digest[:8]}",
                    doc_id=doc.doc_id,
                    seq=0,
                    text="",
                    content_hash=digest,
                    token_count=0,
                )
            )
        return chunks
