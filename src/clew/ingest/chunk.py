"""Section-aware chunking sized in embedding-tokenizer tokens.

A document is split at markdown headings into sections (the heading path is kept), sections into
paragraphs, and paragraphs are packed into chunks of at most ``max_tokens`` tokens counted by the
embedding model's own tokenizer, the title prefix and special tokens included. A paragraph too
long for one chunk is split at sentences, and a sentence too long at words, with
``overlap_tokens`` repeated between consecutive windows. Every chunk is an exact slice
``text[start:end]`` of the document.

Bounded on any input (:class:`~clew.config.IngestLimits`): no chunk is longer than
``max_chunk_chars`` characters, whatever the tokenizer says (a word it reads as one ``[UNK]``
can be any length): a run without whitespace is cut at that bound, and a word of more than
:data:`LONG_WORD_CHARS` characters over the token budget is cut within it, so a chunk holds about
``max_tokens`` tokens at most whatever its characters. Chunks are sized by the text they are
embedded with, where a run of more than :data:`MAX_PUNCT_RUN` punctuation characters is
:func:`squeezed <squeeze>` (20 KB of ``&`` is one chunk embedded as a few tokens). Texts are
token-counted in calls of about 64 K characters, never a whole document at once, and a text
that cannot be one chunk (longer than the bound) is split without being counted. A document
that makes more than ``max_chunks_per_doc`` chunks is refused with a
:class:`~clew.errors.LoadError`, as soon as that is certain. A heading path (repeated with every
chunk of its section) holds at most :data:`MAX_HEADING_PATH_CHARS` characters.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from clew.config import ChunkConfig, IngestLimits
from clew.errors import LoadError
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
_COUNT_CHARS = 1 << 16
"""Characters counted per tokenizer call (about; a call holds at least one text): the tokenizer
holds a few hundred bytes a token until the call returns, and a character can be a token."""
_FREE_WORDS = 16
"""Words of zero tokens an overlap may repeat beyond ``overlap_tokens`` words."""
MAX_PUNCT_RUN = 256
"""Longest run of punctuation characters embedded and token-counted as it is (:func:`squeeze`)."""
PUNCT_KEEP = 8
"""Characters a longer run is cut to: fewer tokens than the smallest budget (16)."""
# starts only where a run starts (the lookbehind), so each run is scanned once: linear
_PUNCT_RUN = re.compile(rf"(?<![^\w\s])[^\w\s]{{{MAX_PUNCT_RUN + 1},}}")
LONG_WORD_CHARS = 256
"""A word longer than this and over the token budget is cut into pieces within the budget (a
run of ``&`` is a token a character: 32 KB of it would be one chunk of 32,768 tokens)."""
MAX_HEADING_PATH_CHARS = 2_000
"""Most characters of headings in a heading path (a heading past it is cut to what is left):
every chunk of a section is embedded and indexed with its path, so a heading line of megabytes
would be repeated in each of its chunks."""


def content_hash(text: str) -> str:
    """sha256 of the normalized text (NFKC, casefold, whitespace collapsed)."""
    from clew.ingest.analyze import normalize

    canonical = " ".join(normalize(text).split())
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def embedding_text(title: str, heading_path: Sequence[str], text: str) -> str:
    """The text a chunk is embedded and lexically indexed with: title, headings, body, with
    each run of more than MAX_PUNCT_RUN punctuation characters :func:`squeezed <squeeze>`."""
    head = [title.strip()] if title.strip() else []
    head += [h for h in heading_path if h and h not in text[:200]]
    return squeeze("\n".join([*head, text]) if head else text)


def squeeze(text: str) -> str:
    """``text`` with each run of more than MAX_PUNCT_RUN punctuation or symbol characters (no
    letter, digit or blank: ``&&&…``, a rule of ``=``) cut to its first PUNCT_KEEP.

    Such a run is a token a character and means nothing to the analyzer (which drops
    punctuation) or the embedder; the chunker sizes chunks by the squeezed text, so 32 KB of
    ``&`` is one chunk embedded as a few tokens, not 32,768 of them. Ordinary text (no such
    run) comes back as it is."""
    if _PUNCT_RUN.search(text) is None:
        return text
    return _PUNCT_RUN.sub(lambda m: m.group(0)[:PUNCT_KEEP], text)


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


def _bounded(headings: Iterable[str]) -> tuple[str, ...]:
    """A heading path of at most MAX_HEADING_PATH_CHARS characters of headings."""
    out: list[str] = []
    room = MAX_HEADING_PATH_CHARS
    for h in headings:
        if len(h) > room:
            h = h[:room].rstrip()
        if h:
            out.append(h)
        room -= len(h)
        if room <= 0:
            break
    return tuple(out)


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
        current = _bounded(h for _, h in path)
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
    """Turns documents into chunks; one instance per tokenizer, config and limits."""

    def __init__(
        self,
        config: ChunkConfig,
        count_tokens: TokenCounter,
        limits: IngestLimits | None = None,
    ) -> None:
        self.config = config
        self.count = count_tokens
        self.limits = limits or IngestLimits()

    def chunk(self, doc: Document) -> list[Chunk]:
        text = doc.text
        units: list[_Span] = []
        for section in _sections(text):
            units.extend(_split(text, section, _PARAGRAPH_BREAK))
        if not units:
            return self._pack(doc, [], {})
        # chunks never span two heading paths: refuse before any token is counted
        paths_met = 1 + sum(a.headings != b.headings for a, b in itertools.pairwise(units))
        self._check_count(doc, paths_met, "at least ")
        paths = list({u.headings for u in units})
        prefix_cost = dict(
            zip(paths, self._count([embedding_text(doc.title, h, "") for h in paths]), strict=True)
        )
        costs = self._unit_costs(doc, units, max(map(self._budget, prefix_cost.values())))
        pieces: list[_Span] = []
        for unit, cost in zip(units, costs, strict=True):
            budget = self._budget(prefix_cost[unit.headings])
            if cost is not None and cost <= budget:
                pieces.append(unit)
            else:
                pieces.extend(self._split_long(text, unit, budget, doc))
        return self._pack(doc, pieces, prefix_cost)

    def _unit_costs(self, doc: Document, units: Sequence[_Span], budget: int) -> list[int | None]:
        """:meth:`_span_costs` of the units, about 1 MB of text at a time; a chunk holds at
        most ``budget`` tokens, so once the units counted so far hold more than
        ``max_chunks_per_doc`` chunks' worth the document is refused (not 100 MB counted)."""
        costs: list[int | None] = []
        total = 0
        start = 0
        while start < len(units):
            end = start
            size = 0
            while end < len(units) and (end == start or size < 16 * _COUNT_CHARS):
                size += units[end].end - units[end].start
                end += 1
            part = self._span_costs(doc.text, units[start:end])
            costs.extend(part)
            total += sum(c for c in part if c is not None)
            self._check_count(doc, total // budget, "at least ")
            start = end
        return costs

    def _check_count(self, doc: Document, n: int, least: str = "") -> None:
        limit = self.limits.max_chunks_per_doc
        if n > limit:
            raise LoadError(
                f"document {doc.doc_id!r} makes {least}{n:,} chunks; allowed: at most {limit:,} "
                "(ingest.max_chunks_per_doc)"
            )

    def _tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text as it is embedded (:func:`squeeze`)."""
        return self.count([squeeze(t) for t in texts])

    def _count(self, texts: Sequence[str]) -> list[int]:
        """Token counts in calls of at most about :data:`_COUNT_CHARS` characters."""
        out: list[int] = []
        block: list[str] = []
        size = 0
        for t in texts:
            if block and size + len(t) > _COUNT_CHARS:
                out.extend(self._tokens(block))
                block, size = [], 0
            block.append(t)
            size += len(t)
        if block:
            out.extend(self._tokens(block))
        return out

    def _count_spans(self, text: str, spans: Sequence[_Span]) -> list[int]:
        """Token counts of the spans' texts, copying out about :data:`_COUNT_CHARS`
        characters at a time."""
        out: list[int] = []
        start = 0
        while start < len(spans):
            end = start
            size = 0
            while end < len(spans) and (
                end == start or size + spans[end].end - spans[end].start <= _COUNT_CHARS
            ):
                size += spans[end].end - spans[end].start
                end += 1
            out.extend(self._tokens([text[s.start : s.end] for s in spans[start:end]]))
            start = end
        return out

    def _span_costs(self, text: str, spans: Sequence[_Span]) -> list[int | None]:
        """Token counts of the spans; None for one longer than ``max_chunk_chars``, which
        cannot be one chunk and is split without being counted."""
        max_chars = self.limits.max_chunk_chars
        short = [i for i, s in enumerate(spans) if s.end - s.start <= max_chars]
        out: list[int | None] = [None] * len(spans)
        for i, n in zip(short, self._count_spans(text, [spans[i] for i in short]), strict=True):
            out[i] = n
        return out

    def _budget(self, prefix_tokens: int) -> int:
        return max(16, self.config.max_tokens - SPECIAL_TOKENS - prefix_tokens - 1)

    def _split_long(
        self, text: str, unit: _Span, budget: int, doc: Document | None = None
    ) -> list[_Span]:
        sentences = _split(text, unit, _SENTENCE_END)
        costs = self._span_costs(text, sentences)
        out: list[_Span] = []
        for sentence, cost in zip(sentences, costs, strict=True):
            if cost is not None and cost <= budget:
                out.append(sentence)
            else:
                out.extend(self._word_windows(text, sentence, budget, doc))
        return out

    def _words(self, text: str, span: _Span) -> Iterator[tuple[int, int]]:
        """(start, end) of each word of the span; a word longer than ``max_chunk_chars`` comes
        as consecutive pieces of at most that many characters."""
        max_chars = self.limits.max_chunk_chars
        for m in _WORD.finditer(text, span.start, span.end):
            a, b = m.span()
            while b - a > max_chars:
                yield a, a + max_chars
                a += max_chars
            yield a, b

    def _word_windows(
        self, text: str, span: _Span, budget: int, doc: Document | None = None
    ) -> list[_Span]:
        """Windows of whole words, at most ``budget`` tokens each (a longer word alone, or cut
        within the budget when it is longer than LONG_WORD_CHARS) and at most
        ``max_chunk_chars`` characters, consecutive windows repeating about ``overlap_tokens``
        tokens.

        Words are read and counted in blocks (of at most _WORD_BLOCK words and about
        _COUNT_CHARS characters), and only the words from the current window on are kept, so a
        paragraph of any size takes memory for a block, not for all of its words. A step back
        for the overlap covers at most ``overlap_tokens`` + _FREE_WORDS words and half of
        ``max_chunk_chars``, so words the tokenizer drops (zero tokens, such as U+FEFF) cannot
        make windows that advance by one word over a long run."""
        max_chars = self.limits.max_chunk_chars
        found = self._words(text, span)
        starts: list[int] = []
        ends: list[int] = []
        costs: list[int] = []
        base = 0  # index of starts[0] among all the span's words
        exhausted = False

        def have(index: int) -> bool:
            """Whether word ``index`` exists, reading the next block of words when needed."""
            nonlocal exhausted
            while index - base >= len(starts) and not exhausted:
                block: list[tuple[int, int]] = []
                size = 0
                for a, b in found:
                    block.append((a, b))
                    size += b - a
                    if len(block) >= _WORD_BLOCK or size >= _COUNT_CHARS:
                        break
                else:
                    exhausted = True
                counted = self._tokens([text[a:b] for a, b in block]) if block else []
                for (a, b), cost in zip(block, counted, strict=True):
                    if cost > budget and b - a > LONG_WORD_CHARS:
                        for x, y, c in self._fit(text, a, b, cost, budget):
                            starts.append(x)
                            ends.append(y)
                            costs.append(c)
                    else:
                        starts.append(a)
                        ends.append(b)
                        costs.append(cost)
            return index - base < len(starts)

        windows: list[_Span] = []
        i = 0
        while have(i):
            total = 0
            j = i
            first = starts[i - base]
            while have(j) and (
                j == i
                or (total + costs[j - base] <= budget and ends[j - base] - first <= max_chars)
            ):
                total += costs[j - base]
                j += 1
            windows.append(_Span(first, ends[j - 1 - base], span.headings))
            if doc is not None and len(windows) > self.limits.max_chunks_per_doc:
                self._check_count(doc, len(windows), "at least ")  # windows never merge
            if not have(j):
                break
            # step back to repeat about overlap_tokens tokens in the next window
            back = 0
            k = j
            last = ends[j - 1 - base]
            while (
                k - 1 > i
                and back + costs[k - 1 - base] <= self.config.overlap_tokens
                and j - k < self.config.overlap_tokens + _FREE_WORDS
                and last - starts[k - 1 - base] <= max_chars // 2
            ):
                back += costs[k - 1 - base]
                k -= 1
            i = k
            drop = i - base  # words before the new window are never read again
            del starts[:drop], ends[:drop], costs[:drop]
            base = i
        return windows

    def _fit(self, text: str, a: int, b: int, cost: int, budget: int) -> list[tuple[int, int, int]]:
        """A word over the budget as consecutive (start, end, tokens) pieces within it, cut at
        lengths estimated from its tokens a character (a piece still over is cut again)."""
        out: list[tuple[int, int, int]] = []
        todo = [(a, b, cost)]
        while todo:
            a, b, cost = todo.pop()
            if cost <= budget or b - a <= 1:
                out.append((a, b, cost))
                continue
            step = max(1, (b - a) * budget // cost)
            cuts = [(x, min(x + step, b)) for x in range(a, b, step)]
            costs = self._count([text[x:y] for x, y in cuts])
            todo.extend(reversed([(x, y, c) for (x, y), c in zip(cuts, costs, strict=True)]))
        return out

    def _pack(
        self,
        doc: Document,
        pieces: list[_Span],
        prefix_cost: dict[tuple[str, ...], int],
    ) -> list[Chunk]:
        """Greedily pack consecutive pieces of the same section into chunks of at most the
        token budget and ``max_chunk_chars`` characters; refuse more than
        ``max_chunks_per_doc`` of them."""
        text = doc.text
        max_chars = self.limits.max_chunk_chars
        costs = self._count_spans(text, pieces)  # every piece is at most max_chunk_chars long
        pages = doc.pages

        def page_of(offset: int) -> int | None:
            """The 1-based page an offset lies on (a paged document), else None."""
            return bisect.bisect_right(pages, offset) if pages else None

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
                and piece.end - cur.start <= max_chars
                and page_of(piece.start) == page_of(cur.start)  # a chunk keeps to one page
            ):
                cur = _Span(cur.start, piece.end, cur.headings)
                cur_cost += cost + 1
            else:
                if cur is not None:
                    groups.append((cur, cur_cost))
                cur, cur_cost = piece, cost
        if cur is not None:
            groups.append((cur, cur_cost))
        self._check_count(doc, len(groups))
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
                    page=page_of(span.start),
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
