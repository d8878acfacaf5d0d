"""The service commands as real processes: ``clew ui`` stops its children when it is told to
stop, and the API's ``/docs`` page renders in a browser that may reach nothing but the service.

``clew ui --index`` starts two children (a loopback ``clew serve`` and Streamlit); the index here
is built with the FAKE hash encoder, so neither loads a model."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from clew import Engine
from clew.testing.fakes import FakeHashEncoder, fake_engine
from clew.types import Document

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")


def _artifacts() -> Path:
    folder = Path(os.environ.get("CLEW_TEST_ARTIFACTS") or ROOT / "tests" / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def fake_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("procs") / "idx"
    with fake_engine(path) as engine:
        engine.ingest([Document("a", "A", "The ERR-7001 code means the vault is sealed.", "a")])
    return path


def _children(pid: int) -> dict[int, str]:
    """The live child processes of ``pid``: pid → command line."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out[int(entry.name)] = cmdline
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)]
)
def test_clew_ui_stops_its_children(
    fake_index: Path, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    ui_port = _free_port()
    log = tmp_path / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "clew",
                "ui",
                "--index",
                str(fake_index),
                "--port",
                str(ui_port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the test can always clean up the whole group
            # Ctrl-C reaches a foreground command whose SIGINT is at its default; a test run in
            # a background job (``make check &``) inherits it ignored, and so would clew ui
            preexec_fn=_default_sigint,
        )
    try:
        deadline = time.monotonic() + 120
        api_url = None
        while True:
            assert proc.poll() is None, f"clew ui exited early: {log.read_text()[-2000:]}"
            kids = _children(proc.pid)
            serve = [(p, c) for p, c in kids.items() if " serve " in c]
            streamlit = [p for p, c in kids.items() if "streamlit" in c]
            if serve and api_url is None:
                argv = serve[0][1].split()
                api_url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}/health"
            if (
                api_url
                and streamlit
                and _answers(api_url)
                and _answers(f"http://127.0.0.1:{ui_port}/_stcore/health")
            ):
                break
            assert time.monotonic() < deadline, f"no UI: {log.read_text()[-2000:]}"
            time.sleep(0.3)
        pids = [serve[0][0], *streamlit]
        os.kill(proc.pid, sig)  # the parent alone, as a service manager's stop does
        assert proc.wait(timeout=60) == code, log.read_text()[-2000:]
        assert not _answers(api_url), "the loopback API must be gone with clew ui"
        assert [p for p in pids if _alive(p)] == [], "every child stopped and reaped"
        assert "Traceback" not in log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # anything the test failed on


@pytest.fixture
def served(fake_index: Path) -> Iterator[str]:
    """``clew serve --no-auth`` over the fake index, on uvicorn in a thread."""
    import uvicorn

    from clew.serve.api import create_app
    from clew.serve.settings import ServeSettings

    app = create_app(
        ServeSettings(index=fake_index, no_auth=True),
        Engine(fake_index, encoder=FakeHashEncoder()),
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        app.state.clew.engine.close()


def test_docs_page_renders_without_the_internet(served: str) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing; the browser test drives that Chromium binary")
    from playwright.sync_api import Route, expect, sync_playwright

    outside: list[str] = []

    def only_the_service(route: Route) -> None:
        if route.request.url.startswith(served):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page()
            page.route("**/*", only_the_service)
            page.goto(f"{served}/docs")
            expect(page.locator(".swagger-ui .info .title")).to_contain_text("clew")
            expect(page.locator(".opblock-summary-path", has_text="/search").first).to_be_visible()
            page.screenshot(path=str(_artifacts() / "api-docs.png"), full_page=False)
        finally:
            browser.close()
    assert outside == [], f"the docs page asked for outside resources: {outside}"
