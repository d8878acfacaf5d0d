"""The clew web UI: a Streamlit thin client of the HTTP API.

Run it with ``clew ui`` (or :func:`clew.serve.ui.launch`). It reads the API's base URL from
``CLEW_API_URL`` (default ``http://127.0.0.1:8765``) and sends ``CLEW_API_KEY``, when set, as
``Authorization: Bearer``. It never opens an index: everything it shows comes from the API.

Two pages:

- **Ask**: POST /ask; the answer with its citation markers, and for every citation the "why
  these?" explanation: each leg's rank, raw score and fused part, what the reranker did, the
  graph path (query terms or concepts → edges → chunk → document) and documents like the cited
  one (GET /documents/{id}/similar); then the candidates the assembler dropped and why.
- **Eval**: the quality gate (GET /eval/gate) and the last ablation table per dataset
  (GET /eval/table) as a chart and a table.

The functions above :func:`main` are pure (no Streamlit, no network) and unit-tested.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import streamlit as st

DEFAULT_API_URL = "http://127.0.0.1:8765"
RERANKERS: tuple[str, ...] = ("none", "features", "cross-encoder", "llm")
SERVER_DEFAULT = "server default"
PREFERRED_METRICS: tuple[str, ...] = ("ndcg@10", "recall@5", "recall@10", "mrr@10")
OVERALL = "all"  # slice name of the overall row in an eval table
# No bare string expressions at module level below: Streamlit's "magic" would display them.

LEG_LABELS: dict[str, str] = {
    "lexical": "lexical (BM25)",
    "dense": "dense (embeddings)",
    "graph": "graph (concepts)",
    "graph_expansion": "graph expansion",
    "title_link": "title link",
    "title_identifier": "title names the identifier",
    "rerank": "rerank",
}
DROP_REASONS: dict[str, str] = {
    "floor": "score below the floor",
    "near_duplicate": "near-duplicate of a kept chunk",
    "budget": "did not fit the token budget",
}
CONTRIBUTION_COLUMNS: tuple[str, ...] = ("leg", "rank", "raw score", "fused part", "rerank change")


# -- request parts -------------------------------------------------------------------------------


class FilterError(ValueError):
    """The filter text is not a JSON object."""


def parse_filter(text: str) -> dict[str, Any] | None:
    """The access filter typed by the user: ``None`` when blank, else a JSON object.

    Raises :class:`FilterError` with a message that says what is wrong and what is expected.
    """
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FilterError(
            f"The filter is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}). "
            'Expected a JSON object such as {"audience": "public"}.'
        ) from None
    if not isinstance(value, dict):
        raise FilterError(
            f'The filter must be a JSON object such as {{"audience": "public"}}, '
            f"not a {_json_kind(value)}."
        )
    return value


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else type(value).__name__


def ask_payload(
    question: str,
    *,
    k: int,
    expand: bool,
    reranker: str = SERVER_DEFAULT,
    filter: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The POST /ask body; the reranker and filter are left out when not chosen."""
    body: dict[str, Any] = {"question": question.strip(), "k": int(k), "expand": bool(expand)}
    if reranker != SERVER_DEFAULT:
        if reranker not in RERANKERS:
            allowed = ", ".join((SERVER_DEFAULT, *RERANKERS))
            raise ValueError(f"reranker={reranker!r} is invalid; allowed: {allowed}")
        body["rerank"] = reranker
    if filter is not None:
        body["filter"] = filter
    return body


def error_message(status: int, body: Any, text: str = "") -> str:
    """The server's own words for a failed request (FastAPI ``detail``, string or list)."""
    detail = body.get("detail") if isinstance(body, Mapping) else None
    if isinstance(detail, str) and detail:
        return detail
    if isinstance(detail, list) and detail:
        parts = []
        for item in detail:
            if isinstance(item, Mapping):
                loc = [str(p) for p in item.get("loc", []) if p != "body"]
                msg = str(item.get("msg", item))
                parts.append(f"{'.'.join(loc)}: {msg}" if loc else msg)
            else:
                parts.append(str(item))
        return "; ".join(parts)
    if detail:
        return json.dumps(detail)
    snippet = text.strip()[:300]
    return f"HTTP {status}" + (f": {snippet}" if snippet else "")


# -- the answer ----------------------------------------------------------------------------------

_MARKER = re.compile(r"\[(\d+)\]")


def answer_markdown(text: str, numbers: Sequence[int] = ()) -> str:
    """The answer as Markdown with its citation markers ``[n]`` in bold.

    Only markers of real citations are highlighted (all of them when ``numbers`` is empty);
    ``$`` is escaped so that amounts are not read as LaTeX.
    """
    known = set(numbers)

    def mark(m: re.Match[str]) -> str:
        return f"**{m.group(0)}**" if not known or int(m.group(1)) in known else m.group(0)

    return _MARKER.sub(mark, text.replace("$", "\\$"))


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$])")


def md_escape(text: str) -> str:
    """``text`` shown as written inside Markdown: a title that starts with ``#`` is no heading,
    ``*`` no emphasis, ``[x](y)`` no link; newlines become spaces."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def passage_html(text: str, spans: Sequence[Sequence[int]]) -> str:
    """A cited passage as HTML, its supporting sentences (character ``spans`` of ``text``) in
    ``<mark>``; everything else escaped, so the passage's own markup shows as text."""
    out: list[str] = []
    pos = 0
    for start, end in sorted((int(a), int(b)) for a, b in spans):
        start, end = max(start, pos), min(end, len(text))
        if start >= end:
            continue
        out.append(html.escape(text[pos:start]))
        out.append(f"<mark>{html.escape(text[start:end])}</mark>")
        pos = end
    out.append(html.escape(text[pos:]))
    body = "".join(out).replace("\n", "<br>")
    return f'<div class="clew-passage">{body}</div>'


def document_link(url: str, doc_id: str) -> str:
    """Where a citation points: its own ``http(s)`` address, else this UI's view of the
    document (``?doc=<id>``, fetched through the API with the UI's key)."""
    if url.startswith(("http://", "https://")):
        return url
    return "?doc=" + quote(doc_id, safe="")


def rerank_change(note: Mapping[str, Any] | None) -> str:
    """What the reranker did to a hit, e.g. ``5 → 3 (up 2)``; empty when it did not run."""
    if not note:
        return ""
    before, after = note.get("before"), note.get("after")
    if not isinstance(before, int) or not isinstance(after, int):
        return ""
    if after < before:
        move = f"up {before - after}"
    elif after > before:
        move = f"down {after - before}"
    else:
        move = "unchanged"
    return f"{before} → {after} ({move})"


def contribution_rows(why: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per contribution to a cited hit's score (the "why these?" table).

    Columns: :data:`CONTRIBUTION_COLUMNS`. The reranker's row carries its move; a reranker
    that left a note but no contribution still gets a row.
    """
    note = why.get("rerank")
    change = rerank_change(note)
    rows: list[dict[str, Any]] = []
    has_rerank = False
    for c in why.get("legs", []):
        leg = str(c.get("leg", ""))
        is_rerank = leg == "rerank"
        has_rerank = has_rerank or is_rerank
        label = LEG_LABELS.get(leg, leg)
        if is_rerank and isinstance(note, Mapping) and note.get("reranker"):
            label = f"rerank ({note['reranker']})"
        rows.append(
            {
                "leg": label,
                "rank": c.get("rank"),
                "raw score": _round(c.get("raw_score"), 4),
                "fused part": _round(c.get("fused_part"), 6),
                "rerank change": change if is_rerank else "",
            }
        )
    if isinstance(note, Mapping) and not has_rerank:
        rows.append(
            {
                "leg": f"rerank ({note.get('reranker', '?')})",
                "rank": note.get("after"),
                "raw score": _round(note.get("score"), 4),
                "fused part": None,
                "rerank change": change,
            }
        )
    return rows


def fused_total(why: Mapping[str, Any]) -> float:
    """The score the legs and expansion gave the hit (reranking excluded)."""
    return sum(
        float(c.get("fused_part") or 0.0) for c in why.get("legs", []) if c.get("leg") != "rerank"
    )


def _round(value: Any, digits: int) -> float | None:
    return round(float(value), digits) if isinstance(value, int | float) else None


def dropped_rows(answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The candidates the assembler left out, with their titles and reasons."""
    titles = {h.get("chunk_id"): h.get("title", "") for h in answer.get("hits", [])}
    return [
        {
            "chunk": d.get("chunk_id", ""),
            "title": titles.get(d.get("chunk_id"), ""),
            "reason": DROP_REASONS.get(str(d.get("reason")), str(d.get("reason", ""))),
            "detail": d.get("detail", ""),
        }
        for d in answer.get("dropped", [])
    ]


# -- the graph path ------------------------------------------------------------------------------


def _dot_text(value: object) -> str:
    """A DOT double-quoted string; ``\\n`` between lines."""
    lines = str(value).split("\n")
    escaped = [ln.replace("\\", "\\\\").replace('"', '\\"') for ln in lines]
    return '"' + "\\n".join(escaped) + '"'


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(slots=True)
class _Dot:
    """A small DOT builder: nodes keyed by identity, edges deduplicated, stable order."""

    nodes: dict[tuple[str, str], str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    edges: set[tuple[str, str, str]] = field(default_factory=set)

    def node(self, kind: str, name: str, label: str, **attrs: str) -> str:
        key = (kind, name)
        if key not in self.nodes:
            node_id = f"n{len(self.nodes)}"
            self.nodes[key] = node_id
            extra = "".join(f", {k}={_dot_text(v)}" for k, v in attrs.items())
            self.lines.append(f"  {node_id} [label={_dot_text(label)}{extra}];")
        return self.nodes[key]

    def edge(self, a: str, b: str, label: str = "", **attrs: str) -> None:
        if (a, b, label) in self.edges:
            return
        self.edges.add((a, b, label))
        parts = [f"label={_dot_text(label)}"] if label else []
        parts += [f"{k}={_dot_text(v)}" for k, v in attrs.items()]
        self.lines.append(f"  {a} -> {b}" + (f" [{', '.join(parts)}]" if parts else "") + ";")


_QUERY = {"shape": "oval", "style": "filled", "fillcolor": "#dbeafe"}
_CONCEPT = {"shape": "oval", "style": "filled", "fillcolor": "#fef3c7"}
_CHUNK = {"shape": "box", "style": "rounded,filled", "fillcolor": "#dcfce7"}
_OTHER_CHUNK = {"shape": "box", "style": "rounded", "color": "#64748b"}
_DOC = {"shape": "note", "style": "filled", "fillcolor": "#f1f5f9"}


def why_dot(why: Mapping[str, Any], *, question: str = "", title: str = "") -> str:
    """The graph path of a citation's ``why`` as a Graphviz DOT digraph.

    Every trail step becomes a path from the query to the cited chunk and on to its document:
    query → query terms → chunk (lexical), query → meaning → chunk (dense), query → concepts
    (→ RELATED_TO concepts) → MENTIONS → chunk (graph leg), and for graph expansion query →
    seed chunk → edge → … → chunk. ``title`` labels the document node.
    """
    dot = _Dot()
    query = dot.node("query", "", "query\n" + _short(question) if question else "query", **_QUERY)
    for step in why.get("trail", []):
        chunk_id = str(step.get("chunk", ""))
        doc_id = str(step.get("document", ""))
        chunk = dot.node("chunk", chunk_id, f"chunk\n{chunk_id}", **_CHUNK)
        doc_label = f"document\n{_short(title, 40)}\n({doc_id})" if title else f"document\n{doc_id}"
        doc = dot.node("document", doc_id, doc_label, **_DOC)
        dot.edge(chunk, doc, "part of")
        kind = step.get("from")
        if kind == "query terms":
            terms = ", ".join(str(t) for t in step.get("terms", []))
            node = dot.node("terms", terms, f"query terms\n{_short(terms, 40)}", **_QUERY)
            dot.edge(query, node, "analyzed")
            dot.edge(node, chunk, "BM25 match")
        elif kind == "meaning":
            node = dot.node("meaning", "", f"meaning\ncosine {step.get('cosine', '?')}", **_QUERY)
            dot.edge(query, node, "embedded")
            dot.edge(node, chunk, "dense neighbour")
        elif kind == "linked concepts":
            current = [
                dot.node("concept", str(c), f"concept\n{c}", **_CONCEPT)
                for c in step.get("concepts", [])
            ]
            for c in current:
                dot.edge(query, c, "mentions")
            for e in step.get("edges", []):
                name = str(e.get("edge", ""))
                via = [str(v) for v in e.get("via", []) or []]
                targets = (
                    [dot.node("concept", v, f"concept\n{v}", **_CONCEPT) for v in via]
                    if via
                    else [chunk]
                )
                for a in current:
                    for b in targets:
                        dot.edge(a, b, name)
                current = targets
            for a in current:
                if a != chunk:
                    dot.edge(a, chunk)
        elif kind in ("graph expansion", "graph walk", "title link"):
            seed_id = str(step.get("seed", ""))
            if step.get("seed_kind") == "concept":
                current_node = dot.node("concept", seed_id, f"concept\n{seed_id}", **_CONCEPT)
                dot.edge(query, current_node, "mentions")
            else:
                current_node = dot.node("chunk", seed_id, f"seed chunk\n{seed_id}", **_OTHER_CHUNK)
                dot.edge(query, current_node, "fused seed", style="dashed")
            steps = list(step.get("edges", []))
            if step.get("seed_kind") == "concept" and steps:
                first = steps.pop(0)  # the concept's MENTIONS of the first chunk
                to = str(first.get("to", ""))
                target = chunk if to == chunk_id else dot.node("chunk", to, f"chunk\n{to}")
                dot.edge(current_node, target, "MENTIONS")
                current_node = target
            for e in steps:
                to = str(e.get("to", ""))
                target = chunk if to == chunk_id else dot.node("chunk", to, f"chunk\n{to}")
                step_via = str(e.get("via", "") or "")
                label = f"{e.get('edge', '')}\n{_short(step_via, 30)}".strip()
                dot.edge(current_node, target, label)
                current_node = target
            if current_node != chunk:
                dot.edge(current_node, chunk)
        else:
            dot.edge(query, chunk, str(kind or "found"))
    header = [
        "digraph why {",
        "  rankdir=LR;",
        '  graph [fontname="Helvetica", nodesep=0.3, ranksep=0.45];',
        '  node [fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9, color="#475569"];',
    ]
    return "\n".join([*header, *dot.lines, "}"])


# -- eval ----------------------------------------------------------------------------------------

# config → slice → metric → value (one dataset of GET /eval/table)
EvalTable = Mapping[str, Mapping[str, Mapping[str, float]]]


@dataclass(frozen=True, slots=True)
class GateView:
    passed: bool
    datasets: tuple[str, ...]
    reasons: tuple[str, ...]


def gate_view(status: int, body: Any) -> GateView:
    """GET /eval/gate: 200 ``{passed, datasets}`` or 422 ``{passed: false, reasons}``.

    A ``detail`` wrapper (an HTTPException carrying the same object) is unwrapped.
    """
    if isinstance(body, Mapping) and isinstance(body.get("detail"), Mapping):
        body = body["detail"]
    data: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
    passed = bool(data.get("passed", status == 200)) and status == 200
    reasons = tuple(str(r) for r in data.get("reasons", []) or [])
    if not passed and not reasons:
        reasons = (error_message(status, body),)
    return GateView(passed, tuple(str(d) for d in data.get("datasets", []) or []), reasons)


def slice_order(slices: Sequence[str]) -> list[str]:
    """The overall row first, then the slices by name."""
    return sorted(set(slices), key=lambda s: (s != OVERALL, s))


def metric_names(table: EvalTable) -> list[str]:
    """Every metric in the table, preferred ones first (the query count ``n`` is not one)."""
    seen = {m for slices in table.values() for row in slices.values() for m in row if m != "n"}
    first = [m for m in PREFERRED_METRICS if m in seen]
    return first + sorted(seen - set(first))


def main_metric(table: EvalTable) -> str | None:
    names = metric_names(table)
    return names[0] if names else None


def chart_rows(table: EvalTable, metric: str) -> list[dict[str, Any]]:
    """Long-form rows ``{config, slice, <metric>}`` for a grouped bar chart."""
    rows: list[dict[str, Any]] = []
    for config, slices in table.items():
        for slice_name in slice_order(list(slices)):
            value = slices[slice_name].get(metric)
            if isinstance(value, int | float):
                rows.append({"config": config, "slice": slice_name, metric: float(value)})
    return rows


def table_rows(table: EvalTable) -> list[dict[str, Any]]:
    """One row per (config, slice) with every metric as a column."""
    metrics = metric_names(table)
    rows: list[dict[str, Any]] = []
    for config, slices in table.items():
        for slice_name in slice_order(list(slices)):
            row = slices[slice_name]
            out: dict[str, Any] = {"config": config, "slice": slice_name}
            if "n" in row:
                out["n"] = row["n"]
            for m in metrics:
                out[m] = row.get(m)
            rows.append(out)
    return rows


# -- the API -------------------------------------------------------------------------------------


class ApiError(Exception):
    """A request to the API failed; the message is meant for the user."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class ApiClient:
    base_url: str
    key: str | None = None
    timeout: float = 180.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiClient:
        env = os.environ if env is None else env
        url = env.get("CLEW_API_URL", "").strip() or DEFAULT_API_URL
        return cls(url.rstrip("/"), env.get("CLEW_API_KEY") or None)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        ok: Sequence[int] = (200,),
    ) -> tuple[int, Any]:
        """``(status, JSON body)``; raises :class:`ApiError` for other statuses or no answer."""
        url = self.base_url + path
        try:
            with httpx.Client(timeout=self.timeout, headers=self.headers()) as client:
                response = client.request(method, url, json=body, params=params)
        except httpx.TimeoutException:
            raise ApiError(
                f"The clew API at {url} did not answer within {self.timeout:g} s."
            ) from None
        except httpx.HTTPError as exc:
            raise ApiError(f"Cannot reach the clew API at {url}: {exc}") from None
        try:
            data: Any = response.json()
        except ValueError:
            data = None
        if response.status_code not in ok:
            message = error_message(response.status_code, data, response.text)
            raise ApiError(
                f"{method} {path} failed ({response.status_code}): {message}",
                response.status_code,
            )
        return response.status_code, data


def similar_path(doc_id: str) -> str:
    return f"/documents/{quote(doc_id, safe='')}/similar"


# -- the pages -----------------------------------------------------------------------------------


def _sidebar(api: ApiClient) -> str:
    st.sidebar.title("clew")
    page = st.sidebar.radio("Page", ["Ask", "Eval"], key="page")
    st.sidebar.caption(f"API: {api.base_url}" + (" (with key)" if api.key else ""))
    try:
        _, health = api.call("GET", "/health")
        health = health if isinstance(health, dict) else {}
        if "documents" in health:  # counts only for a key with the metrics right
            st.sidebar.caption(
                f"release {health.get('release')} · {health.get('documents')} documents · "
                f"{health.get('chunks')} chunks"
            )
        else:
            st.sidebar.caption(f"service {health.get('status', 'unreachable')}")
    except ApiError as exc:
        st.sidebar.error(str(exc))
    return str(page)


def _ask_page(api: ApiClient) -> None:
    st.header("Ask")
    with st.form("ask"):
        question = st.text_input("Question", key="question", placeholder="What does ERR-4413 mean?")
        filter_text = st.text_area(
            "Filter (JSON, optional)",
            key="filter",
            placeholder='{"audience": "public"}',
            height=68,
        )
        c1, c2, c3 = st.columns(3)
        k = c1.number_input("Hits (k)", min_value=1, max_value=100, value=20, step=1, key="k")
        reranker = c2.selectbox("Reranker", [SERVER_DEFAULT, *RERANKERS], key="reranker")
        expand = c3.checkbox("Expand graph", key="expand")
        submitted = st.form_submit_button("Ask", type="primary")
    if submitted:
        st.session_state.pop("ask_result", None)
        if not (question or "").strip():
            st.error("Type a question first.")
            return
        try:
            flt = parse_filter(filter_text or "")
        except FilterError as exc:
            st.error(str(exc))
            return
        payload = ask_payload(
            question or "", k=int(k), expand=bool(expand), reranker=str(reranker), filter=flt
        )
        with st.spinner("Asking…"):
            try:
                _, answer = api.call("POST", "/ask", body=payload)
            except ApiError as exc:
                st.error(str(exc))
                return
            similar: dict[str, Any] = {}
            for c in answer.get("citations", []):
                doc_id = str(c.get("doc_id", ""))
                if doc_id in similar:
                    continue
                try:
                    _, data = api.call("GET", similar_path(doc_id), params={"k": 5})
                    similar[doc_id] = {"items": data.get("similar", [])}
                except ApiError as exc:
                    similar[doc_id] = {"error": str(exc)}
        st.session_state["ask_result"] = {"answer": answer, "similar": similar}
    result = st.session_state.get("ask_result")
    if result:
        _show_answer(result["answer"], result["similar"])


def _show_answer(answer: Mapping[str, Any], similar: Mapping[str, Any]) -> None:
    citations = list(answer.get("citations", []))
    confidence = float(answer.get("confidence", 0.0))
    threshold = float(answer.get("threshold", 0.0))
    if answer.get("abstained"):
        st.warning(
            f"**No answer.** clew abstained: confidence {confidence:.2f} is below the "
            f"threshold {threshold:.2f}. {answer.get('answer', '')}"
        )
        nearest = list(answer.get("nearest", []))
        if nearest:
            st.markdown("**Nearest misses**")
            st.dataframe(
                [
                    {
                        "title": h.get("title", ""),
                        "chunk": h.get("chunk_id", ""),
                        "score": _round(h.get("score"), 5),
                    }
                    for h in nearest
                ],
                hide_index=True,
            )
    else:
        st.subheader("Answer")
        st.markdown(answer_markdown(str(answer.get("answer", "")), [c["n"] for c in citations]))
    meta = [f"confidence {confidence:.2f} (abstains below {threshold:.2f})"]
    if answer.get("mode"):
        meta.append(f"mode {answer['mode']}")
    if answer.get("context_tokens") is not None:
        meta.append(f"{answer['context_tokens']} context tokens")
    if answer.get("trace_id"):
        meta.append(f"trace {answer['trace_id']}")
    st.caption(" · ".join(meta))
    if answer.get("fallback"):
        st.info(f"The generative answer failed; the extractive one is shown: {answer['fallback']}")

    if citations:
        st.subheader("Citations")
        texts = {h.get("chunk_id"): str(h.get("text", "")) for h in answer.get("hits", [])}
        for c in citations:
            url = str(c.get("url", ""))
            link = document_link(url, str(c.get("doc_id", "")))
            page = c.get("page")
            where = md_escape(str(c.get("title", ""))) + (f", p. {page}" if page else "")
            st.markdown(f"**[{c['n']}]** {where} — [{md_escape(url)}]({link})")
            passage = texts.get(c.get("chunk_id"))
            if passage:
                st.markdown(passage_html(passage, c.get("spans") or []), unsafe_allow_html=True)
        for c in citations:
            _why_expander(c, str(answer.get("question", "")), similar.get(str(c.get("doc_id"))))

    dropped = dropped_rows(answer)
    st.subheader("Dropped candidates")
    if dropped:
        counts: dict[str, int] = {}
        for d in dropped:
            counts[d["reason"]] = counts.get(d["reason"], 0) + 1
        st.caption(", ".join(f"{n} × {r}" for r, n in sorted(counts.items())))
        st.dataframe(dropped, hide_index=True)
    else:
        st.caption("None: every candidate fit into the context.")


def _why_expander(c: Mapping[str, Any], question: str, similar: Mapping[str, Any] | None) -> None:
    why: Mapping[str, Any] = c.get("why") or {}
    n = c.get("n")
    with st.expander(f"Why these? [{n}]"):
        st.markdown(f"**[{n}] {md_escape(c.get('title', ''))}** · chunk `{c.get('chunk_id', '')}`")
        st.markdown("**Score contributions**")
        st.dataframe(
            contribution_rows(why),
            hide_index=True,
            column_order=list(CONTRIBUTION_COLUMNS),
            column_config={
                "rank": st.column_config.NumberColumn(format="%d"),
                "raw score": st.column_config.NumberColumn(format="%.4f"),
                "fused part": st.column_config.NumberColumn(format="%.6f"),
            },
            key=f"contrib-{n}",
        )
        notes = [f"fused score {fused_total(why):.6f}"]
        if why.get("context"):
            notes.append(str(why["context"]))
        rr = why.get("rerank")
        if isinstance(rr, Mapping) and rr.get("explain"):
            notes.append(
                "reranker features: " + ", ".join(f"{k} {v:g}" for k, v in rr["explain"].items())
            )
        st.caption(" · ".join(notes))
        st.markdown("**Graph path**")
        st.graphviz_chart(why_dot(why, question=question, title=str(c.get("title", ""))))
        st.markdown("**More like this**")
        if similar is None:
            st.caption("Not fetched.")
        elif "error" in similar:
            st.error(similar["error"])
        elif not similar.get("items"):
            st.caption("No similar documents.")
        else:
            st.markdown(
                "\n".join(
                    f"- {md_escape(s.get('title') or s.get('doc_id'))} (`{s.get('doc_id')}`, "
                    f"score {float(s.get('score', 0.0)):.3f})"
                    for s in similar["items"]
                )
            )


def _eval_page(api: ApiClient) -> None:
    st.header("Eval")
    try:
        status, body = api.call("GET", "/eval/gate", ok=(200, 422))
    except ApiError as exc:
        st.error(str(exc))
    else:
        gate = gate_view(status, body)
        if gate.passed:
            names = ", ".join(gate.datasets) or "every dataset with results"
            st.success(f"Quality gate passed: {names}.")
        else:
            st.error("Quality gate failed:\n\n" + "\n".join(f"- {r}" for r in gate.reasons))
    try:
        _, data = api.call("GET", "/eval/table")
    except ApiError as exc:
        st.error(str(exc))
        return
    datasets: Mapping[str, EvalTable] = data.get("datasets", {}) if isinstance(data, dict) else {}
    if not datasets:
        st.info("No eval results yet: run `clew eval --json` into the server's results folder.")
        return
    for name, table in sorted(datasets.items()):
        st.subheader(name)
        metrics = metric_names(table)
        if not metrics:
            st.caption("No metrics in these results.")
            continue
        metric = st.selectbox("Metric", metrics, key=f"metric-{name}")
        st.bar_chart(
            chart_rows(table, str(metric)),
            x="config",
            y=str(metric),
            color="slice",
            horizontal=True,
            stack=False,
        )
        st.dataframe(table_rows(table), hide_index=True, key=f"table-{name}")


def _document_page(api: ApiClient, doc_id: str) -> None:
    """One document, as a citation links to it: its title (as written), source and text."""
    try:
        _, doc = api.call("GET", "/documents/" + quote(doc_id, safe=""))
    except ApiError as exc:
        st.error(str(exc))
        return
    st.header(md_escape(doc.get("title") or doc_id))
    st.caption(f"document `{doc_id}` · source {md_escape(doc.get('source', ''))}")
    for chunk in doc.get("chunks", []):
        st.markdown(f"**chunk** `{chunk.get('chunk_id', '')}`")
        st.markdown(passage_html(str(chunk.get("text", "")), []), unsafe_allow_html=True)


def main() -> None:
    st.set_page_config(page_title="clew", layout="wide")
    api = ApiClient.from_env()
    page = _sidebar(api)
    doc = st.query_params.get("doc")
    if doc:
        _document_page(api, str(doc))
    elif page == "Eval":
        _eval_page(api)
    else:
        _ask_page(api)


if __name__ == "__main__":
    main()
