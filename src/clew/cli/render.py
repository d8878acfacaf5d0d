"""Readable text for what the CLI prints: search results with their provenance, answers with
their citations and why, and plain aligned tables."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from clew.types import SearchResult

__all__ = ["columns", "render", "render_answer"]


def columns(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, widest: Sequence[int] = ()
) -> str:
    """An aligned text table: a header line, then one line per row (cells separated by two
    spaces, numbers right-aligned). ``widest``: per column, the longest cell shown; longer ones
    are cut with "…" (0: never cut). Control characters in cells print as spaces."""
    limits = [*widest, *([0] * (len(headers) - len(widest)))]
    text = [[_cell(v, limits[i]) for i, v in enumerate(row)] for row in rows]
    numeric = [
        bool(rows) and all(isinstance(r[i], int | float) for r in rows) for i in range(len(headers))
    ]
    width = [max([len(h), *(len(r[i]) for r in text)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(width[i]) if numeric[i] else c.ljust(width[i]) for i, c in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(r) for r in text)])


def _cell(value: Any, limit: int) -> str:
    text = "".join(" " if ch < " " or ch == "\x7f" else ch for ch in str(value))
    if limit and len(text) > limit:
        return text[: limit - 1] + "…"
    return text


def render(result: SearchResult, *, explain: bool = False) -> str:
    """Readable text for a result; with ``explain`` the provenance table of every hit."""
    legs = ", ".join(f"{leg} {w:g}" for leg, w in result.route.legs.items()) or "none"
    lines = [
        f"query: {result.query}",
        f"route: {legs}   features: {', '.join(result.route.features) or '-'}",
        *(
            [f"weighed by {result.route.weighed_by}: {result.route.reason}"]
            if result.route.reason
            else []
        ),
        f"release {result.release}   "
        + "  ".join(f"{k} {v:.1f}ms" for k, v in result.timings_ms.items()),
        "",
    ]
    if not result.hits:
        lines.append("no hits")
    for i, hit in enumerate(result.hits, start=1):
        heading = " > ".join(hit.heading_path)
        lines.append(f"{i:>2}. {hit.score:.5f}  {hit.title}  [{hit.chunk_id}]")
        if heading:
            lines.append(f"    section: {heading}")
        snippet = " ".join(hit.text.split())
        lines.append(f"    {snippet[:200]}{'…' if len(snippet) > 200 else ''}")
        if explain:
            lines.append(
                contribution_table(hit.contributions, hit.graph, hit.duplicates, hit.metadata)
            )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render_answer(answer: Any) -> str:
    """Readable text for an answer: the answer, its citations and why each was chosen."""
    lines = [answer.answer, ""]
    if answer.fallback:
        lines += [f"(generative answer failed, extractive shown: {answer.fallback})", ""]
    lines.append(
        f"confidence {answer.confidence:.2f} (abstains below {answer.threshold:.2f})"
        + ("  → abstained" if answer.abstained else "")
        + (" (a code it names is in no source)" if answer.evidence.get("absent_codes") else "")
    )
    if answer.verdict:
        lines.append(f"verdict {answer.verdict}: {answer.verdict_reason}")
    if answer.abstained and answer.nearest:
        lines.append("nearest misses:")
        for h in answer.nearest:
            lines.append(f"  - {h.title} [{h.chunk_id}] score {h.score:.4f}")
    for c in answer.citations:
        lines.append(f"[{c.n}] {c.where} — {c.url}  ({c.chunk_id})")
        for step in c.why.get("trail", []):
            lines.append(f"      why: {trail_text(step)}")
        legs = ", ".join(
            f"{x['leg']} #{x['rank']}" for x in c.why.get("legs", []) if x["leg"] != "rerank"
        )
        lines.append(f"      found by: {legs}")
        rr = c.why.get("rerank")
        if rr:
            lines.append(f"      reranker {rr['reranker']}: rank {rr['before']} → {rr['after']}")
    dropped: dict[str, int] = {}
    for d in answer.context.dropped:
        dropped[d.reason] = dropped.get(d.reason, 0) + 1
    lines.append(
        f"context: {len(answer.context.kept)} chunks, {answer.context.tokens} tokens; dropped "
        + (", ".join(f"{n} {r}" for r, n in sorted(dropped.items())) or "none")
    )
    if answer.trace_id:
        lines.append(f"trace: {answer.trace_id}  (clew replay {answer.trace_id} --index ...)")
    return "\n".join(lines) + "\n"


def trail_text(step: dict[str, Any]) -> str:
    end = f"chunk {step['chunk']} → document {step['document']}"
    kind = step.get("from")
    if kind == "query terms":
        return f"query terms {', '.join(step['terms'])} → {end}"
    if kind == "meaning":
        return f"embedding similarity (cosine {step['cosine']}) → {end}"
    if kind == "linked concepts":
        edges = " → ".join(
            e["edge"] + (f" ({', '.join(e['via'])})" if e.get("via") else "") for e in step["edges"]
        )
        return f"concepts {', '.join(step['concepts'])} → {edges} → {end}"
    if kind == "identifier title":
        return f"its title or heading names the query's identifier ({step['title']}) → {end}"
    if kind in ("graph expansion", "graph walk", "title link"):
        edges = " → ".join(
            f"{e['edge']}{' ' + repr(e['via']) if e['via'] else ''} → {e['to']}"
            for e in step["edges"]
        )
        seed = step["seed"]
        if kind == "graph walk":
            seed = f"PageRank from {step.get('seed_kind', 'passage')} {seed or '(none in reach)'}"
        else:
            seed = f"seed {seed}"
        return f"{seed} → {edges} → document {step['document']}" if edges else f"{seed} → {end}"
    return json.dumps(step)


def contribution_table(
    contribs: Sequence[Any], graph: Any, duplicates: Sequence[str], metadata: dict[str, Any]
) -> str:
    rows = ["    leg        rank   raw score   fused part"]
    for c in contribs:
        rows.append(f"    {c.leg:<9} {c.rank:>5}   {c.raw_score:>9.4f}   {c.fused_part:>10.6f}")
    if graph is not None and (graph.seed or graph.steps):
        path = "".join(f" -{s.edge}{f' {s.via}' if s.via else ''}-> {s.to}" for s in graph.steps)
        rows.append(f"    graph: PageRank from {graph.seed or '(no seed in reach)'}{path}")
    elif graph is not None:
        via = f" via {', '.join(graph.via)}" if graph.via else ""
        rows.append(f"    graph: {graph.hops} hop(s) from {', '.join(graph.concepts)}{via}")
    if duplicates:
        rows.append(f"    same content as: {', '.join(duplicates)}")
    if metadata:
        rows.append(f"    metadata: {json.dumps(metadata, ensure_ascii=False)}")
    return "\n".join(rows)
