"""The pure parts of the web UI: filter parsing, request bodies, error messages, the
contributions table, the graph path as DOT, the dropped list and the eval chart data."""

from __future__ import annotations

import re
from typing import Any

import pytest

from clew.compose.answer import why
from clew.serve.ui import app_path, streamlit_command
from clew.serve.ui.app import (
    CONTRIBUTION_COLUMNS,
    ApiClient,
    FilterError,
    answer_markdown,
    ask_payload,
    chart_rows,
    contribution_rows,
    dropped_rows,
    error_message,
    fused_total,
    gate_view,
    main_metric,
    metric_names,
    parse_filter,
    rerank_change,
    similar_path,
    slice_order,
    table_rows,
    why_dot,
)
from clew.types import Contribution, ExpansionPath, GraphTrail, Hit, PathStep

# Citation [2] of `clew ask --json --rerank features "What does ERR-4413 mean?"` on data/sample.
REAL_WHY: dict[str, Any] = {
    "trail": [
        {
            "from": "query terms",
            "terms": ["err-4413", "err", "4413"],
            "edges": [],
            "chunk": "postmortem-inc-2034.md#5:d190adb6",
            "document": "postmortem-inc-2034.md",
        },
        {
            "from": "meaning",
            "cosine": 0.3012,
            "edges": [],
            "chunk": "postmortem-inc-2034.md#5:d190adb6",
            "document": "postmortem-inc-2034.md",
        },
        {
            "from": "linked concepts",
            "concepts": ["err-4413"],
            "edges": [{"edge": "MENTIONS"}],
            "chunk": "postmortem-inc-2034.md#5:d190adb6",
            "document": "postmortem-inc-2034.md",
        },
    ],
    "legs": [
        {"leg": "dense", "rank": 16, "raw_score": 0.30124266283416756, "fused_part": 0.0092105},
        {"leg": "graph", "rank": 7, "raw_score": 3.7406861782073975, "fused_part": 0.0044776},
        {"leg": "lexical", "rank": 9, "raw_score": 6.456085681915283, "fused_part": 0.0217391},
        {"leg": "rerank", "rank": 3, "raw_score": 0.7293840791440425, "fused_part": 0.0010884},
    ],
    "rerank": {
        "reranker": "features:blend",
        "before": 5,
        "after": 3,
        "score": 0.7293840791440425,
        "explain": {"cosine": 0.329384, "concept_overlap": 0.25, "pagerank": 0.15},
    },
    "context": "kept at rank 3 of the assembled context",
}


def _expanded_why() -> dict[str, Any]:
    """A ``why`` built by the engine's own function: 2-hop graph reach and an expansion path."""
    hit = Hit(
        chunk_id="payouts.md#2:aa",
        doc_id="payouts.md",
        title="Payouts",
        text="Payouts settle daily.",
        score=0.03,
        metadata={},
        contributions=(
            Contribution("graph", 4, 2.5, 0.004),
            Contribution("graph_expansion", 1, 0.8, 0.002),
        ),
        graph=GraphTrail(concepts=("ledger-writer",), hops=2, via=("settlement", "payout batch")),
        expansion=(
            ExpansionPath(
                seed="ledger-writer.md#0:bb",
                hops=2,
                steps=(
                    PathStep("LINKS_TO", "settlement-config.md", "settlement-config.md#0:cc"),
                    PathStep("MENTIONS", 'the "batch"', "payouts.md#2:aa"),
                ),
                weight=0.9,
            ),
        ),
    )
    return why(hit, [], kept_rank=2)


# -- filter and request ----------------------------------------------------------------------


def test_parse_filter_blank_is_none() -> None:
    assert parse_filter("") is None
    assert parse_filter("   \n") is None


def test_parse_filter_object() -> None:
    text = '{"and": [{"audience": "public"}, {"tenant": "acme"}]}'
    assert parse_filter(text) == {"and": [{"audience": "public"}, {"tenant": "acme"}]}


def test_parse_filter_bad_json_names_the_place() -> None:
    with pytest.raises(FilterError, match=r"not valid JSON: .*line 1, column \d+.*JSON object"):
        parse_filter('{"audience": public}')


@pytest.mark.parametrize(
    ("text", "kind"),
    [("[1, 2]", "list"), ('"public"', "string"), ("3", "number"), ("null", "null")],
)
def test_parse_filter_must_be_an_object(text: str, kind: str) -> None:
    with pytest.raises(FilterError, match=f"must be a JSON object.*not a {kind}"):
        parse_filter(text)


def test_ask_payload_leaves_out_defaults() -> None:
    assert ask_payload(" What? ", k=20, expand=False) == {
        "question": "What?",
        "k": 20,
        "expand": False,
    }
    body = ask_payload("Q", k=5, expand=True, reranker="features", filter={"audience": "public"})
    assert body == {
        "question": "Q",
        "k": 5,
        "expand": True,
        "rerank": "features",
        "filter": {"audience": "public"},
    }
    with pytest.raises(ValueError, match="reranker='bm25' is invalid; allowed: server default"):
        ask_payload("Q", k=5, expand=False, reranker="bm25")


def test_error_message_uses_the_servers_words() -> None:
    assert error_message(404, {"detail": "no document 'x'"}) == "no document 'x'"
    body = {
        "detail": [
            {"loc": ["body", "k"], "msg": "k=500 is too large; allowed: 1..100", "type": "x"},
            {"loc": ["body"], "msg": "bad", "type": "y"},
        ]
    }
    assert error_message(422, body) == "k: k=500 is too large; allowed: 1..100; bad"
    assert error_message(502, None, "Bad Gateway") == "HTTP 502: Bad Gateway"
    assert error_message(500, None, "") == "HTTP 500"


def test_api_client_from_env_and_headers() -> None:
    api = ApiClient.from_env({"CLEW_API_URL": "http://127.0.0.1:9/", "CLEW_API_KEY": "s3cret"})
    assert api.base_url == "http://127.0.0.1:9"
    assert api.headers() == {"Authorization": "Bearer s3cret"}
    default = ApiClient.from_env({})
    assert default.base_url == "http://127.0.0.1:8765"
    assert default.headers() == {}


def test_similar_path_quotes_the_id() -> None:
    assert similar_path("error-codes.md") == "/documents/error-codes.md/similar"
    assert similar_path("dir/a b#1") == "/documents/dir%2Fa%20b%231/similar"


def test_launch_command_has_no_secret() -> None:
    cmd = streamlit_command(port=8600, host="127.0.0.1")
    assert cmd[1:4] == ["-m", "streamlit", "run"]
    assert cmd[4] == str(app_path())
    assert app_path().is_file()
    pairs = dict(zip(cmd[5::2], cmd[6::2], strict=True))
    assert pairs["--server.port"] == "8600"
    assert pairs["--server.address"] == "127.0.0.1"
    assert pairs["--server.headless"] == "true"
    assert pairs["--browser.gatherUsageStats"] == "false"
    assert not any("key" in part.lower() for part in cmd)


def test_launch_passes_the_key_only_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import clew.serve.ui as ui

    seen: dict[str, Any] = {}

    class FakeStreamlit:
        """Stands in for the Streamlit child: records how it was started, exits with 3."""

        def __init__(self, cmd: list[str], *, env: dict[str, str]) -> None:
            seen.update(cmd=cmd, env=env)

        def wait(self, timeout: float | None = None) -> int:
            return 3

        def poll(self) -> int:
            return 3

    monkeypatch.setattr(ui.subprocess, "Popen", FakeStreamlit)
    assert ui.launch("http://127.0.0.1:8765", key="s3cret-key", port=8502) == 3
    assert seen["env"]["CLEW_API_URL"] == "http://127.0.0.1:8765"
    assert seen["env"]["CLEW_API_KEY"] == "s3cret-key"
    assert not any("s3cret" in part for part in seen["cmd"])
    assert seen["cmd"] == ui.streamlit_command(port=8502)
    with pytest.raises(ValueError, match=re.escape("api_url='127.0.0.1:8765' is invalid")):
        ui.launch("127.0.0.1:8765")


# -- the answer ----------------------------------------------------------------------------------


def test_answer_markdown_bolds_real_markers_and_escapes_dollars() -> None:
    text = "Refunds over $500 need approval [1]. See also [3] and [2]."
    assert answer_markdown(text, [1, 2]) == (
        "Refunds over \\$500 need approval **[1]**. See also [3] and **[2]**."
    )
    assert answer_markdown("a [7]") == "a **[7]**"


def test_contribution_rows_of_a_real_why() -> None:
    rows = contribution_rows(REAL_WHY)
    assert [tuple(r) for r in rows] == [CONTRIBUTION_COLUMNS] * 4
    assert [r["leg"] for r in rows] == [
        "dense (embeddings)",
        "graph (concepts)",
        "lexical (BM25)",
        "rerank (features:blend)",
    ]
    assert [r["rank"] for r in rows] == [16, 7, 9, 3]
    assert rows[0]["raw score"] == 0.3012
    assert rows[2]["fused part"] == 0.021739
    assert [r["rerank change"] for r in rows] == ["", "", "", "5 → 3 (up 2)"]
    assert fused_total(REAL_WHY) == pytest.approx(0.0092105 + 0.0044776 + 0.0217391)


def test_contribution_rows_note_without_contribution() -> None:
    w = {
        "legs": [{"leg": "lexical", "rank": 1, "raw_score": 9.0, "fused_part": 0.016}],
        "rerank": {"reranker": "cross-encoder", "before": 1, "after": 4, "score": -2.0},
    }
    rows = contribution_rows(w)
    assert rows[-1] == {
        "leg": "rerank (cross-encoder)",
        "rank": 4,
        "raw score": -2.0,
        "fused part": None,
        "rerank change": "1 → 4 (down 3)",
    }
    assert contribution_rows({"legs": [], "rerank": None}) == []


def test_rerank_change() -> None:
    assert rerank_change(None) == ""
    assert rerank_change({"before": 2, "after": 2}) == "2 → 2 (unchanged)"
    assert rerank_change({"before": None, "after": 2}) == ""


def test_dropped_rows_name_titles_and_reasons() -> None:
    answer = {
        "hits": [{"chunk_id": "faq.md#1:aa", "title": "FAQ"}],
        "dropped": [
            {"chunk_id": "faq.md#1:aa", "reason": "floor", "detail": "score 0.01 < 0.5 × top"},
            {"chunk_id": "x#0:bb", "reason": "budget", "detail": "900 tokens do not fit"},
            {"chunk_id": "y#0:cc", "reason": "new_reason", "detail": ""},
        ],
    }
    assert dropped_rows(answer) == [
        {
            "chunk": "faq.md#1:aa",
            "title": "FAQ",
            "reason": "score below the floor",
            "detail": "score 0.01 < 0.5 × top",
        },
        {
            "chunk": "x#0:bb",
            "title": "",
            "reason": "did not fit the token budget",
            "detail": "900 tokens do not fit",
        },
        {"chunk": "y#0:cc", "title": "", "reason": "new_reason", "detail": ""},
    ]


# -- the graph path ------------------------------------------------------------------------------


def _graph(dot: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """Node id → label and (from label, to label, edge label) of a DOT string from why_dot."""
    labels = dict(re.findall(r'^\s+(n\d+) \[label="((?:[^"\\]|\\.)*)"', dot, re.M))
    edges = []
    for a, b, attrs in re.findall(r"^\s+(n\d+) -> (n\d+)(.*);$", dot, re.M):
        m = re.search(r'label="((?:[^"\\]|\\.)*)"', attrs)
        edges.append((labels[a], labels[b], m.group(1) if m else ""))
    return labels, edges


def test_why_dot_of_a_real_why() -> None:
    dot = why_dot(REAL_WHY, question="What does ERR-4413 mean?", title="Postmortem INC-2034")
    assert dot.startswith("digraph why {") and dot.rstrip().endswith("}")
    assert dot.count("{") == dot.count("}")
    labels, edges = _graph(dot)
    query = "query\\nWhat does ERR-4413 mean?"
    chunk = "chunk\\npostmortem-inc-2034.md#5:d190adb6"
    doc = "document\\nPostmortem INC-2034\\n(postmortem-inc-2034.md)"
    terms = "query terms\\nerr-4413, err, 4413"
    concept = "concept\\nerr-4413"
    assert set(labels.values()) == {query, chunk, doc, terms, "meaning\\ncosine 0.3012", concept}
    assert (chunk, doc, "part of") in edges
    assert (query, terms, "analyzed") in edges
    assert (terms, chunk, "BM25 match") in edges
    assert (query, "meaning\\ncosine 0.3012", "embedded") in edges
    assert (query, concept, "mentions") in edges
    assert (concept, chunk, "MENTIONS") in edges
    assert len(edges) == len(set(edges)) == 7


def test_why_dot_expansion_and_related_concepts() -> None:
    w = _expanded_why()
    kinds = [step["from"] for step in w["trail"]]
    assert kinds == ["linked concepts", "graph expansion"]
    labels, edges = _graph(why_dot(w))
    chunk = "chunk\\npayouts.md#2:aa"
    seed = "seed chunk\\nledger-writer.md#0:bb"
    middle = "chunk\\nsettlement-config.md#0:cc"
    assert ("query", "concept\\nledger-writer", "mentions") in edges
    for via in ("settlement", "payout batch"):
        assert ("concept\\nledger-writer", f"concept\\n{via}", "RELATED_TO") in edges
        assert (f"concept\\n{via}", chunk, "MENTIONS") in edges
    assert ("query", seed, "fused seed") in edges
    assert (seed, middle, "LINKS_TO\\nsettlement-config.md") in edges
    # quotes inside labels are escaped, and the walk ends on the cited chunk itself
    assert (middle, chunk, 'MENTIONS\\nthe \\"batch\\"') in edges
    assert (chunk, "document\\npayouts.md", "part of") in edges
    assert list(labels.values()).count(chunk) == 1


def test_why_dot_without_trail_is_still_a_graph() -> None:
    dot = why_dot({"trail": [], "legs": []})
    labels, edges = _graph(dot)
    assert list(labels.values()) == ["query"]
    assert edges == []


# -- eval ----------------------------------------------------------------------------------------

TABLE: dict[str, dict[str, dict[str, float]]] = {
    "lexical": {
        "all": {"ndcg@10": 0.61, "recall@5": 0.5, "n": 20},
        "2hop": {"ndcg@10": 0.55, "recall@5": 0.4, "n": 12},
    },
    "default": {
        "2hop": {"ndcg@10": 0.66, "recall@5": 0.58, "n": 12},
        "all": {"ndcg@10": 0.71, "recall@5": 0.6, "mrr@10": 0.7, "n": 20},
    },
}


def test_metrics_and_slices() -> None:
    assert metric_names(TABLE) == ["ndcg@10", "recall@5", "mrr@10"]
    assert main_metric(TABLE) == "ndcg@10"
    assert main_metric({"x": {"all": {"map": 0.1, "n": 3}}}) == "map"
    assert main_metric({}) is None
    assert slice_order(["b", "all", "a"]) == ["all", "a", "b"]


def test_chart_rows_one_bar_per_slice() -> None:
    assert chart_rows(TABLE, "ndcg@10") == [
        {"config": "lexical", "slice": "all", "ndcg@10": 0.61},
        {"config": "lexical", "slice": "2hop", "ndcg@10": 0.55},
        {"config": "default", "slice": "all", "ndcg@10": 0.71},
        {"config": "default", "slice": "2hop", "ndcg@10": 0.66},
    ]
    assert chart_rows(TABLE, "mrr@10") == [{"config": "default", "slice": "all", "mrr@10": 0.7}]


def test_table_rows() -> None:
    rows = table_rows(TABLE)
    assert rows[0] == {
        "config": "lexical",
        "slice": "all",
        "n": 20,
        "ndcg@10": 0.61,
        "recall@5": 0.5,
        "mrr@10": None,
    }
    assert [(r["config"], r["slice"]) for r in rows] == [
        ("lexical", "all"),
        ("lexical", "2hop"),
        ("default", "all"),
        ("default", "2hop"),
    ]


def test_gate_view() -> None:
    ok = gate_view(200, {"passed": True, "datasets": ["sample"], "reasons": []})
    assert ok.passed and ok.datasets == ("sample",) and ok.reasons == ()
    failed = gate_view(422, {"passed": False, "datasets": [], "reasons": ["scifact: low"]})
    assert not failed.passed and failed.reasons == ("scifact: low",)
    wrapped = gate_view(422, {"detail": {"passed": False, "reasons": ["r1", "r2"]}})
    assert wrapped.reasons == ("r1", "r2")
    odd = gate_view(422, {"detail": [{"loc": ["query"], "msg": "nope", "type": "x"}]})
    assert not odd.passed and odd.reasons == ("query: nope",)


def test_app_has_no_module_level_magic() -> None:
    """Streamlit's "magic" writes any bare expression of the script to the page: only the
    module docstring and the ``main()`` call may stand alone at module level."""
    import ast

    tree = ast.parse(app_path().read_text(encoding="utf-8"))
    bare = [n for n in tree.body[1:] if isinstance(n, ast.Expr)]
    assert bare == []
    guard = tree.body[-1]
    assert isinstance(guard, ast.If)
    assert ast.unparse(guard) == "if __name__ == '__main__':\n    main()"


def _walked_why(seed: str) -> dict[str, Any]:
    steps = (PathStep("MENTIONS", "err-4413", "a.md#0:aa"), PathStep("NEXT", "", "a.md#1:bb"))
    if seed != "err-4413":
        steps = (PathStep("MENTIONS", "pool", "a.md#1:bb"),)
    h = Hit(
        chunk_id="a.md#1:bb",
        doc_id="a.md",
        title="A",
        text="t",
        score=0.5,
        metadata={},
        contributions=(Contribution("graph", 1, 0.02, 0.5),),
        graph=GraphTrail(("err-4413",), len(steps), seed=seed, steps=steps),
    )
    return why(h, [], 1)  # type: ignore[return-value]


def test_why_dot_of_a_pagerank_path_from_a_concept() -> None:
    w = _walked_why("err-4413")
    step = w["trail"][0]
    assert step["from"] == "graph walk" and step["seed_kind"] == "concept"
    _, edges = _graph(why_dot(w))
    assert ("query", "concept\\nerr-4413", "mentions") in edges
    assert ("concept\\nerr-4413", "chunk\\na.md#0:aa", "MENTIONS") in edges
    assert ("chunk\\na.md#0:aa", "chunk\\na.md#1:bb", "NEXT") in edges


def test_why_dot_of_a_pagerank_path_from_a_seed_passage() -> None:
    w = _walked_why("c.md#0:cc")
    assert w["trail"][0]["seed_kind"] == "passage"
    _, edges = _graph(why_dot(w))
    assert ("query", "seed chunk\\nc.md#0:cc", "fused seed") in edges
    assert ("seed chunk\\nc.md#0:cc", "chunk\\na.md#1:bb", "MENTIONS\\npool") in edges


def test_md_escape_keeps_titles_as_written() -> None:
    from clew.serve.ui.app import md_escape

    assert md_escape("# payments-gateway") == "\\# payments\\-gateway"
    assert md_escape("**VX-220** [CHG-1187](c.md) $5") == (
        "\\*\\*VX\\-220\\*\\* \\[CHG\\-1187\\]\\(c\\.md\\) \\$5"
    )
    assert md_escape("two\nlines") == "two lines"


def test_passage_html_marks_the_supporting_sentences_and_escapes_the_rest() -> None:
    from clew.serve.ui.app import passage_html

    text = "Keys <b>matter</b>. Kept for 24 hours.\nAfter that, reused."
    start = text.index("Kept")
    html = passage_html(text, [[start, start + len("Kept for 24 hours.")]])
    assert "<mark>Kept for 24 hours.</mark>" in html
    assert "&lt;b&gt;matter&lt;/b&gt;" in html and "<br>" in html
    assert passage_html("abc", [[5, 9], [1, 0]]) == '<div class="clew-passage">abc</div>'


def test_document_link_resolves_to_the_url_or_the_document_view() -> None:
    from clew.serve.ui.app import document_link

    assert document_link("https://docs.example/a", "a") == "https://docs.example/a"
    assert document_link("error-codes.md", "error codes.md") == "?doc=error%20codes.md"
