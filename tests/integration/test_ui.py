"""The web UI against the real HTTP API (uvicorn in a thread over a copy of the sample index):
Streamlit's AppTest for the pages, and Chromium through Playwright for the rendered result.

Every test that talks to the API is ``slow``: the sample index is built with the real model.
The browser test saves screenshots to ``$CLEW_TEST_ARTIFACTS`` (default ``tests/artifacts/``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from streamlit.testing.v1 import AppTest

from clew.serve.auth import KeyStore
from clew.serve.ui import app_path

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What does ERR-4413 mean?"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
EVAL_RESULT = {
    "dataset": "sample",
    "split": "test",
    "runs": [
        {
            "name": "lexical",
            "slices": {"all": {"ndcg@10": 0.61, "n": 6}, "identifiers": {"ndcg@10": 0.8, "n": 3}},
        },
        {
            "name": "dense",
            "slices": {"all": {"ndcg@10": 0.55, "n": 6}, "identifiers": {"ndcg@10": 0.4, "n": 3}},
        },
        {
            "name": "default",
            "slices": {"all": {"ndcg@10": 0.72, "n": 6}, "identifiers": {"ndcg@10": 0.83, "n": 3}},
        },
    ],
}
GATES = """gates:
  - dataset: sample
    min: {ndcg@10: 0.70}
    no_worse_than_best_leg: 0.01
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Api:
    url: str
    key: str
    results: Path


@pytest.fixture(scope="module")
def api(sample_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """``clew serve`` over a copy of the sample index, with one API key and one eval result."""
    import uvicorn

    from clew.serve.api import create_app
    from clew.serve.settings import ServeSettings

    base = tmp_path_factory.mktemp("ui-api")
    index = base / "idx"
    shutil.copytree(sample_index, index)
    results = base / "eval"
    results.mkdir()
    (results / "sample.json").write_text(json.dumps(EVAL_RESULT), encoding="utf-8")
    (results / "gates.yaml").write_text(GATES, encoding="utf-8")
    key, _ = KeyStore.add(base / "keys.yaml", "ui-test")
    settings = ServeSettings(index=index, keys=base / "keys.yaml", eval_results=results)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the API server did not start")
        time.sleep(0.05)
    try:
        yield Api(f"http://127.0.0.1:{port}", key, results)
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture
def ui_env(api: Api, monkeypatch: pytest.MonkeyPatch) -> Api:
    monkeypatch.setenv("CLEW_API_URL", api.url)
    monkeypatch.setenv("CLEW_API_KEY", api.key)
    return api


def _app() -> AppTest:
    at = AppTest.from_file(str(app_path()), default_timeout=180)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


# -- AppTest ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_ask_shows_cited_answer_and_why(ui_env: Api) -> None:
    at = _app()
    assert "ui-test" not in str(at.sidebar.caption)  # the key never shows
    at.text_input(key="question").input(QUESTION)
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]

    texts = [m.value for m in at.markdown]
    answer = next(t for t in texts if "ERR-4413" in t and "**[1]**" in t)
    assert "**[1]**" in answer
    assert any(t.startswith("**[1]** ") and "error-codes.md" in t for t in texts)

    labels = [e.label for e in at.expander]
    assert labels[0] == "Why these? [1]"
    why = at.expander[0]
    table = why.dataframe[0].value
    assert list(table.columns) == ["leg", "rank", "raw score", "fused part", "rerank change"]
    assert {"lexical (BM25)", "dense (embeddings)"} <= set(table["leg"])
    assert (table["rank"] >= 1).all()
    graphs = why.get("graphviz_chart")
    assert len(graphs) == 1
    dot = graphs[0].proto.spec
    assert dot.startswith("digraph why {") and "error-codes.md" in dot and "query terms" in dot
    more = [m.value for m in why.markdown]
    assert any(m.startswith("- ") and "score" in m for m in more), more  # "More like this"
    subheaders = [s.value for s in at.subheader]
    assert subheaders == ["Answer", "Citations", "Dropped candidates"]


@pytest.mark.slow
def test_ask_with_filter_expand_and_reranker(ui_env: Api) -> None:
    at = _app()
    at.text_input(key="question").input(QUESTION)
    at.text_area(key="filter").input('{"audience": "public"}')
    at.checkbox(key="expand").check()
    at.selectbox(key="reranker").select("features")
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    why = at.expander[0].dataframe[0].value
    [change] = [c for c in why["rerank change"] if c]
    assert re.fullmatch(r"\d+ → \d+ \((up \d+|down \d+|unchanged)\)", change)
    assert why["leg"].iloc[-1] == "rerank (features)"  # the shipped weights


@pytest.mark.slow
def test_abstention_is_said_clearly(ui_env: Api) -> None:
    at = _app()
    at.text_input(key="question").input("How do I bake sourdough bread at high altitude?")
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    [warning] = [w.value for w in at.warning]
    assert warning.startswith("**No answer.** clew abstained: confidence")
    assert "Nearest misses" in [m.value.strip("*") for m in at.markdown]
    nearest = at.dataframe[0].value
    assert list(nearest.columns) == ["title", "chunk", "score"] and len(nearest) >= 1
    assert not at.expander
    assert "Dropped candidates" in [s.value for s in at.subheader]


@pytest.mark.slow
def test_bad_filter_is_explained_before_any_request(ui_env: Api) -> None:
    at = _app()
    at.text_input(key="question").input(QUESTION)
    at.text_area(key="filter").input("{audience: public}")
    at.button[0].click().run()
    [error] = [e.value for e in at.error]
    assert error.startswith("The filter is not valid JSON")
    assert not at.expander


@pytest.mark.slow
def test_server_errors_are_shown(ui_env: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app()
    at.text_input(key="question").input(QUESTION)
    at.number_input(key="k").set_value(100)
    at.text_area(key="filter").input('{"audience": {"$regex": "x"}}')
    at.button[0].click().run()
    [error] = [e.value for e in at.error]
    assert error.startswith("POST /ask failed (422): filter")

    monkeypatch.setenv("CLEW_API_KEY", "not-a-key")
    at = _app()
    at.text_input(key="question").input(QUESTION)
    at.button[0].click().run()
    [error] = [e.value for e in at.error]
    assert error.startswith("POST /ask failed (401): missing or invalid API key")


def test_unreachable_api_names_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("CLEW_API_URL", url)
    monkeypatch.delenv("CLEW_API_KEY", raising=False)
    at = _app()
    [side] = [e.value for e in at.sidebar.error]
    assert side.startswith(f"Cannot reach the clew API at {url}/health")


@pytest.mark.slow
def test_eval_page_shows_gate_chart_and_table(ui_env: Api) -> None:
    at = _app()
    at.sidebar.radio(key="page").set_value("Eval").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [s.value for s in at.success] == ["Quality gate passed: sample."]
    assert [s.value for s in at.subheader] == ["sample"]
    assert at.selectbox(key="metric-sample").value == "ndcg@10"
    assert len(at.get("vega_lite_chart")) == 1
    table = at.dataframe[0].value
    assert list(table.columns) == ["config", "slice", "n", "ndcg@10"]
    assert list(zip(table["config"], table["slice"], strict=True)) == [
        ("lexical", "all"),
        ("lexical", "identifiers"),
        ("dense", "all"),
        ("dense", "identifiers"),
        ("default", "all"),
        ("default", "identifiers"),
    ]


@pytest.mark.slow
def test_eval_gate_failure_lists_reasons(ui_env: Api) -> None:
    worse = json.loads(json.dumps(EVAL_RESULT))
    worse["runs"][2]["slices"]["all"]["ndcg@10"] = 0.5
    newer = ui_env.results / "sample-newer.json"  # the newest result file per dataset counts
    newer.write_text(json.dumps(worse), encoding="utf-8")
    os.utime(newer, (time.time() + 5, time.time() + 5))
    try:
        at = _app()
        at.sidebar.radio(key="page").set_value("Eval").run()
    finally:
        newer.unlink()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.success
    [error] = [e.value for e in at.error]
    assert error.startswith("Quality gate failed:")
    assert "sample/all: ndcg@10 0.5000" in error
    assert "below best leg lexical" in error


# -- the browser ------------------------------------------------------------------------------


def _artifacts() -> Path:
    folder = Path(os.environ.get("CLEW_TEST_ARTIFACTS") or ROOT / "tests" / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the UI exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the UI did not answer at {url} within {seconds:g} s")
        time.sleep(0.3)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the UI process group this test started (launch → streamlit)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.mark.slow
def test_browser_why_these(api: Api) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing; the browser test drives that Chromium binary")
    from playwright.sync_api import expect, sync_playwright

    artifacts = _artifacts()
    log = artifacts / "ui-streamlit.log"
    port = _free_port()
    env = {**os.environ, "CLEW_API_KEY": api.key}  # launch(key=None) passes it on, off argv
    code = (
        "import sys; from clew.serve.ui import launch; "
        "raise SystemExit(launch(sys.argv[1], port=int(sys.argv[2])))"
    )
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, api.url, str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(f"{url}/_stcore/health", proc, log, 120)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 2200})
                page.set_default_timeout(120_000)
                page.goto(url)
                box = page.get_by_role("textbox", name="Question")
                box.fill(QUESTION)
                page.get_by_role("button", name="Ask", exact=True).click()
                summary = page.get_by_text("Why these? [1]", exact=True)
                summary.wait_for(state="visible", timeout=180_000)
                answer = page.get_by_test_id("stMarkdown").filter(has_text="ERR-4413").first
                expect(answer).to_contain_text("[1]")
                summary.click()
                why = page.get_by_test_id("stExpander").filter(has_text="Why these? [1]")
                graph = why.get_by_test_id("stGraphVizChart").locator("svg").first
                expect(graph).to_be_visible(timeout=120_000)
                expect(graph.locator("g.node").first).to_be_visible()
                expect(why.get_by_test_id("stDataFrame").first).to_be_visible()
                expect(why).to_contain_text("More like this")
                # each citation shows its passage, the sentence the answer took marked
                mark = page.locator("div.clew-passage mark").first
                expect(mark).to_be_visible()
                expect(mark).not_to_have_text("")
                link = page.get_by_test_id("stMarkdown").locator("a[href^='?doc=']").first
                href = link.get_attribute("href")
                assert href and href.startswith("?doc=")
                page.wait_for_timeout(1_000)  # let the grid paint its canvas
                page.screenshot(path=str(artifacts / "ui-why-these.png"), full_page=True)

                page.get_by_test_id("stSidebar").get_by_text("Eval", exact=True).click()
                expect(page.get_by_text("Quality gate passed: sample.")).to_be_visible()
                chart = page.get_by_test_id("stVegaLiteChart").first
                expect(chart.locator("canvas, svg").first).to_be_visible()
                page.wait_for_timeout(1_000)
                page.screenshot(path=str(artifacts / "ui-eval.png"), full_page=True)

                page.goto(f"{url}/{href}")  # a citation's link resolves to the document view
                expect(page.get_by_text("· source", exact=False).first).to_be_visible(
                    timeout=60_000
                )
                expect(page.locator("div.clew-passage").first).to_be_visible()
            finally:
                browser.close()
    finally:
        _stop(proc)
