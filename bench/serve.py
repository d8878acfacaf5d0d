"""Load test of ``clew serve`` on loopback: 1, 4 and 16 concurrent clients on the SciFact index,
and search throughput while ingest jobs run.

Part ``load``: starts a real ``clew serve`` (uvicorn, API keys on) in a subprocess over
``bench/.work/scifact-index`` (built by ``bench/ingest.py``), then, for each concurrency level,
sends SciFact test queries to ``POST /search`` and ``POST /ask`` and ``GET /health`` from that
many client threads (one keep-alive connection each). Each run is bounded in count and in time.
Prints throughput and p50/p95 per endpoint, and the ratio to the same searches made in-process
on an ``Engine`` with the same number of threads (the cost of HTTP, JSON and the event loop).

Part ``ingest``: on a copy of that index, 8 search clients for ``--ingest-seconds``, idle and
then while a job of ``--job-docs`` SciFact documents (new ids, so really ingested) is posted
every ``--job-every`` seconds, side by side, for each server variant: the job thread yielding to
readers (``ingest_share`` 0.5, the default), not yielding (``CLEW_INGEST_SHARE=1``), and, with
``--baseline-src DIR``, a server run from another source tree (e.g. a checkout of main). The
section "Search while ingesting" of ``bench/results/serve.md`` is replaced (the rest is kept
when only this part runs). Part ``side``: median time of ``GET /documents/{id}`` for a document
the key's scope hides vs a missing id (a timing side channel), over HTTP.

Usage: ``python bench/serve.py [--part all|load|ingest|side] [--requests 200]
[--ask-requests 40] [--max-seconds 60] [--ingest-seconds 30] [--baseline-src DIR]``
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from _common import (
    RESULTS_DIR,
    CorpusDoc,
    Stats,
    _busy_cpu_seconds,
    _own_cpu_seconds,
    corpus_source,
    indexed_docs,
    loadavg,
    log,
    parser,
    ratio,
    read_corpus,
    scifact_dir,
    scifact_index_dir,
    table,
    test_queries,
    uncached,
    wait_quiet,
    write_result,
)
from clew import Engine
from clew.serve.auth import KeyStore

LEVELS = (1, 4, 16)
INGEST_CLIENTS = 8
SECTION = "## Search while ingesting"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load(
    call: Callable[[str], None],
    queries: Sequence[str],
    clients: int,
    count: int,
    max_seconds: float,
) -> tuple[Stats, float, int]:
    """``count`` calls from ``clients`` threads (stops early after ``max_seconds``):
    latency stats (ms), throughput (calls/s) and calls made."""
    latencies: list[float] = []
    lock = threading.Lock()
    next_i = [0]
    deadline = time.monotonic() + max_seconds

    def worker() -> None:
        while True:
            with lock:
                i = next_i[0]
                if i >= count or time.monotonic() > deadline:
                    return
                next_i[0] += 1
            t = time.perf_counter()
            call(queries[i % len(queries)])
            ms = (time.perf_counter() - t) * 1000.0
            with lock:
                latencies.append(ms)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(worker) for _ in range(clients)]:
            f.result()
    seconds = time.perf_counter() - started
    return Stats.of(latencies), len(latencies) / seconds, len(latencies)


class Server:
    """A ``clew serve`` subprocess over ``index`` with a read key and an admin key."""

    def __init__(self, index: Path, tmp: Path, env: dict[str, str] | None = None) -> None:
        keys = tmp / "keys.yaml"  # written by _add_keys
        self.key = _key(tmp, "bench")
        self.admin_key = _key(tmp, "bench-writer")
        (tmp / "config.yaml").write_text("cache: {size: 0}\n")  # measure the work, not the cache
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "clew",
                "serve",
                "--index",
                str(index),
                "--config",
                str(tmp / "config.yaml"),
                "--keys",
                str(keys),
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        )
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                sys.exit("clew serve did not start")
            time.sleep(0.5)

    def cpu_seconds(self) -> float:
        """CPU seconds of the server process and its children (the writer process) so far."""
        total, todo, seen = 0.0, [self.proc.pid], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
                for task in Path(f"/proc/{pid}/task").iterdir():
                    kids = (task / "children").read_text().split()
                    todo.extend(int(k) for k in kids)
            except (OSError, ValueError):
                continue
        return total

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_KEYS: dict[tuple[str, str], str] = {}


def _key(tmp: Path, name: str) -> str:
    return _KEYS[(str(tmp), name)]


def _add_keys(tmp: Path) -> None:
    keys = tmp / "keys.yaml"
    for name, admin in (("bench", False), ("bench-writer", True)):
        _KEYS[(str(tmp), name)], _ = KeyStore.add(keys, name, admin=admin)


def _clients(url: str, key: str) -> Callable[[], httpx.Client]:
    local = threading.local()
    headers = {"Authorization": f"Bearer {key}"}

    def client() -> httpx.Client:
        c = getattr(local, "client", None)
        if c is None:
            c = local.client = httpx.Client(base_url=url, headers=headers, timeout=120)
        return c

    return client


def part_load(args: Any, index: Path, queries: list[str]) -> tuple[str, list[str]]:
    tmp = Path(tempfile.mkdtemp(prefix="clew-bench-serve-"))
    _add_keys(tmp)
    server = Server(index, tmp)
    rows: list[list[object]] = []
    try:
        client = _clients(server.url, server.key)

        def search(q: str) -> None:
            r = client().post("/search", json={"query": q, "k": 10})
            r.raise_for_status()

        def ask(q: str) -> None:
            client().post("/ask", json={"question": q}).raise_for_status()

        def health(q: str) -> None:
            client().get("/health").raise_for_status()

        for q in queries[:5]:  # warm the model and the caches
            search(q)
            ask(q)
        http: dict[tuple[str, int], tuple[Stats, float, int]] = {}
        for clients in LEVELS:
            for name, fn, count in (
                ("search", search, args.requests),
                ("ask", ask, args.ask_requests),
                ("health", health, args.requests),
            ):
                wait_quiet(args.quiet_wait)
                log(f"HTTP {name}, {clients} clients")
                http[(name, clients)] = load(fn, queries, clients, count, args.max_seconds)
    finally:
        server.stop()

    log("in-process baseline")
    with Engine(index, uncached()) as engine:
        for q in queries[:5]:
            engine.search(q, k=10)
        inproc: dict[int, tuple[Stats, float, int]] = {}
        for clients in LEVELS:
            wait_quiet(args.quiet_wait)
            inproc[clients] = load(
                lambda q: engine.search(q, k=10) and None,
                queries,
                clients,
                args.requests,
                args.max_seconds,
            )
    for clients in LEVELS:
        base_stats, base_rps, _ = inproc[clients]
        rows.append(
            [
                "in-process search",
                clients,
                inproc[clients][2],
                f"{base_rps:.1f}",
                f"{base_stats.p50:.1f} / {base_stats.p95:.1f}",
                "1.00x",
                "1.00x",
            ]
        )
        for name in ("search", "ask", "health"):
            st, rps, n = http[(name, clients)]
            rows.append(
                [
                    f"HTTP {name}",
                    clients,
                    n,
                    f"{rps:.1f}",
                    f"{st.p50:.1f} / {st.p95:.1f}",
                    ratio(st.p50, base_stats.p50) if name == "search" else "-",
                    ratio(base_rps, rps) if name == "search" else "-",
                ]
            )
    head = [
        "what",
        "clients",
        "requests",
        "throughput /s",
        "p50 / p95 ms",
        "p50 vs in-process",
        "in-process rps / HTTP rps",
    ]
    notes = [
        "server: `clew serve` (uvicorn, one process, API keys on, traces on as by default, "
        "result cache off) on "
        "loopback; clients are threads of the bench process with one keep-alive connection each, "
        "on the same 2 cores",
        "in-process: `Engine.search` (result cache off) called from the same number of threads",
        f"each run: at most {args.requests} searches / {args.ask_requests} asks / "
        f"{args.requests} health checks, and at most {args.max_seconds:g} s",
        "health: a key without metrics rights gets the key-less liveness answer "
        '(`{"status": "ok"}`, no corpus counts)',
    ]
    return table(head, rows), notes


class _Poster:
    """Posts a job of ``size`` new SciFact documents every ``every`` seconds until stopped."""

    def __init__(self, server: Server, docs: list[CorpusDoc], size: int, every: float) -> None:
        self.server, self.docs, self.size, self.every = server, docs, size, every
        self.jobs: list[str] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.round = 0

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        with httpx.Client(
            base_url=self.server.url,
            headers={"Authorization": f"Bearer {self.server.admin_key}"},
            timeout=60,
        ) as c:
            while not self.stop_event.is_set():
                start = self.round * self.size
                batch = [self.docs[(start + i) % len(self.docs)] for i in range(self.size)]
                body = {
                    "documents": [
                        {
                            "id": f"bench-{os.getpid()}-{self.round}-{i}",
                            "title": d.title,
                            "text": d.text or d.title or "empty",
                        }
                        for i, d in enumerate(batch)
                    ]
                }
                r = c.post("/documents", json=body)
                r.raise_for_status()
                self.jobs.append(r.json()["job_id"])
                self.round += 1
                self.stop_event.wait(self.every)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=60)

    def progress(self) -> tuple[int, int]:
        """(documents ingested, documents posted) so far."""
        done = posted = 0
        with httpx.Client(
            base_url=self.server.url,
            headers={"Authorization": f"Bearer {self.server.admin_key}"},
            timeout=60,
        ) as c:
            for job_id in list(self.jobs):
                snap = c.get(f"/jobs/{job_id}").json()
                done += int(snap["done"])
                posted += int(snap["total"])
        return done, posted


def _cores(before: tuple[float | None, float, float, float], server: Server) -> float:
    """Cores other processes (not this one, not the server) kept busy since ``before``."""
    busy0, own0, srv0, wall0 = before
    busy = _busy_cpu_seconds()
    if busy is None or busy0 is None:
        return float("nan")
    wall = max(time.perf_counter() - wall0, 1e-9)
    other = (busy - busy0) - (_own_cpu_seconds() - own0) - (server.cpu_seconds() - srv0)
    return max(other, 0.0) / wall


def part_ingest(args: Any, index: Path, dataset: Path, queries: list[str]) -> str:
    work = Path(tempfile.mkdtemp(prefix="clew-bench-ingest-"))
    docs = read_corpus(dataset / "corpus.jsonl")
    variants: list[tuple[str, dict[str, str]]] = [
        ("default: writer process, yields to readers", {}),
        ("writer thread, yields (`CLEW_INGEST_PROCESS=0`)", {"CLEW_INGEST_PROCESS": "0"}),
    ]
    if args.no_yield:
        variants.append(
            (
                "writer thread, no yield (`…PROCESS=0`, `CLEW_INGEST_SHARE=1`)",
                {"CLEW_INGEST_PROCESS": "0", "CLEW_INGEST_SHARE": "1"},
            )
        )
    if args.baseline_src:
        src = str(Path(args.baseline_src).resolve())
        variants.append((f"baseline: server from `{args.baseline_src}`", {"PYTHONPATH": src}))
    rows: list[list[object]] = []
    ratios: list[str] = []
    try:
        for label, env in variants:
            copy = work / "idx"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(index, copy, ignore=shutil.ignore_patterns("write.lock"))
            tmp = Path(tempfile.mkdtemp(prefix="clew-bench-serve-", dir=work))
            _add_keys(tmp)
            log(f"server: {label}")
            server = Server(copy, tmp, env)
            try:
                client = _clients(server.url, server.key)

                errors = [0]

                def search(
                    q: str, client: Callable[[], httpx.Client] = client, errors: list[int] = errors
                ) -> None:
                    try:
                        r = client().post("/search", json={"query": q, "k": 10})
                        ok = r.status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    if not ok:
                        errors[0] += 1  # a 504 (request_timeout_s) or a dropped connection

                # warm: the ingest path (spaCy loads on the first write) and the snapshot after it
                warm = {"documents": [{"id": f"bench-warm-{os.getpid()}", "text": docs[0].text}]}
                with httpx.Client(
                    base_url=server.url,
                    headers={"Authorization": f"Bearer {server.admin_key}"},
                    timeout=300,
                ) as admin:
                    admin.post("/documents?wait=true", json=warm).raise_for_status()
                for q in queries[:10]:
                    search(q)
                count = 1_000_000
                wait_quiet(args.quiet_wait)
                before = (
                    _busy_cpu_seconds(),
                    _own_cpu_seconds(),
                    server.cpu_seconds(),
                    time.perf_counter(),
                )
                log(f"  idle, {INGEST_CLIENTS} clients, {args.ingest_seconds:g} s")
                idle = load(search, queries, INGEST_CLIENTS, count, args.ingest_seconds)
                idle_bg = _cores(before, server)
                idle_errors, errors[0] = errors[0], 0
                wait_quiet(args.quiet_wait)
                poster = _Poster(server, docs, args.job_docs, args.job_every)
                poster.start()
                time.sleep(min(2.0, args.job_every))  # the first job is running
                before = (
                    _busy_cpu_seconds(),
                    _own_cpu_seconds(),
                    server.cpu_seconds(),
                    time.perf_counter(),
                )
                log(f"  with ingest ({args.job_docs} docs every {args.job_every:g} s)")
                busy = load(search, queries, INGEST_CLIENTS, count, args.ingest_seconds)
                busy_bg = _cores(before, server)
                busy_errors = errors[0]
                done, posted = poster.progress()
                poster.stop()
            finally:
                server.stop()
            (st_i, rps_i, n_i), (st_b, rps_b, n_b) = idle, busy
            rps_i *= (n_i - idle_errors) / max(n_i, 1)  # answers per second
            rps_b *= (n_b - busy_errors) / max(n_b, 1)
            window = args.ingest_seconds + min(2.0, args.job_every)
            rows.append(
                [
                    label,
                    "idle",
                    n_i,
                    idle_errors,
                    f"{rps_i:.1f}",
                    f"{st_i.p50:.0f} / {st_i.p95:.0f}",
                    "1.00×",
                    "-",
                    f"{idle_bg:.2f}",
                ]
            )
            rows.append(
                [
                    label,
                    "ingesting",
                    n_b,
                    busy_errors,
                    f"{rps_b:.1f}",
                    f"{st_b.p50:.0f} / {st_b.p95:.0f}",
                    ratio(rps_b, rps_i),
                    f"{done} of {posted} ({done / window:.1f}/s)",
                    f"{busy_bg:.2f}",
                ]
            )
            ratios.append(f"{label}: {ratio(rps_b, rps_i)}")
            log(
                f"  idle {rps_i:.1f}/s, ingesting {rps_b:.1f}/s ({ratio(rps_b, rps_i)}), "
                f"{done}/{posted} docs ingested"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    head = [
        "server",
        "while",
        "searches",
        "errors",
        "throughput /s",
        "p50 / p95 ms",
        "vs idle",
        "documents ingested in the window",
        "other cores busy",
    ]
    notes = [
        f"{INGEST_CLIENTS} search clients (threads of this process, one keep-alive connection "
        f"each), SciFact test queries, `k` 10, result cache off, {args.ingest_seconds:g} s per "
        "run, on a fresh copy of the SciFact index per server",
        f"ingesting: an admin posts a job of {args.job_docs} SciFact documents (new ids, so "
        f"really chunked, embedded and indexed) every {args.job_every:g} s, from "
        f"{min(2.0, args.job_every):g} s before the run to its end; 'documents ingested' counts "
        "what those jobs finished by the end of the run (posted = what was queued)",
        "target: search throughput while ingesting ≥ 0.5× idle at 8 clients; " + "; ".join(ratios),
        "other cores busy: CPU of processes other than this bench and the server (with its "
        "writer process), in cores "
        "(the machine is shared; a figure above ~0.3 means the run was disturbed)",
        "throughput counts answers (200s); errors: searches that got none (a 504 after "
        "`request_timeout_s`, 60 s)",
        f"load average at the end (1/5/15 min): {loadavg()}",
    ]
    return "\n".join([SECTION, "", table(head, rows), "", *[f"- {n}" for n in notes], ""])


def part_side(args: Any, index: Path) -> str:
    """GET /documents/{id}: a document the scope hides vs a missing id, over HTTP."""
    work = Path(tempfile.mkdtemp(prefix="clew-bench-side-"))
    try:
        copy = work / "idx"
        shutil.copytree(index, copy, ignore=shutil.ignore_patterns("write.lock"))
        tmp = work / "keys"
        tmp.mkdir()
        _add_keys(tmp)
        tenant_key, _ = KeyStore.add(tmp / "keys.yaml", "tenant-a", scope={"tenant": "a"})
        server = Server(copy, tmp)
        try:
            admin = httpx.Client(
                base_url=server.url,
                headers={"Authorization": f"Bearer {server.admin_key}"},
                timeout=300,
            )
            hidden = {
                "documents": [
                    {"id": "side-b", "text": "tenant b only", "metadata": {"tenant": "b"}}
                ]
            }
            admin.post("/documents?wait=true", json=hidden).raise_for_status()
            c = httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {tenant_key}"}, timeout=60
            )
            times: dict[str, list[float]] = {"hidden": [], "missing": []}
            wait_quiet(args.quiet_wait)
            for i in range(args.side_requests):
                for name, doc_id in (("hidden", "side-b"), ("missing", f"side-none-{i}")):
                    t = time.perf_counter()
                    assert c.get(f"/documents/{doc_id}").status_code == 404
                    times[name].append((time.perf_counter() - t) * 1000.0)
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    h, m = (statistics.median(times[n]) for n in ("hidden", "missing"))
    log(f"hidden {h:.3f} ms, missing {m:.3f} ms")
    rows = [
        ["hidden (scope hides it)", len(times["hidden"]), f"{h:.3f}", ratio(h, m)],
        ["missing", len(times["missing"]), f"{m:.3f}", "1.00×"],
    ]
    return "\n".join(
        [
            "## Timing: hidden vs missing document",
            "",
            table(["GET /documents/{id} of", "requests", "median ms", "vs missing"], rows),
            "",
            "- a tenant-scoped key asks, alternately, for a document of another tenant and for an "
            "id that does not exist; both are 404 with the same body. Both paths fetch, then run "
            "the scope check (a missing id on a stand-in), so they do the same work; the store "
            "read of an existing row is what remains",
            "",
        ]
    )


def _replace_section(text: str, heading: str, section: str) -> str:
    """``text`` with the section starting at ``heading`` replaced by ``section`` (inserted
    before "## Notes" when there is none)."""
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        return pattern.sub(lambda _: section.rstrip() + "\n\n", text, count=1)
    at = text.find("\n## Notes")
    if at < 0:
        return text.rstrip() + "\n\n" + section
    return text[: at + 1] + section.rstrip() + "\n\n" + text[at + 1 :]


def main() -> None:
    p = parser(__doc__, quiet_wait=10.0)
    p.add_argument("--part", choices=["all", "load", "ingest", "side"], default="all")
    p.add_argument("--requests", type=int, default=200, help="searches per concurrency level")
    p.add_argument("--ask-requests", type=int, default=40, help="asks per concurrency level")
    p.add_argument("--max-seconds", type=float, default=60.0, help="time bound per run")
    p.add_argument("--ingest-seconds", type=float, default=30.0, help="seconds per ingest run")
    p.add_argument("--job-docs", type=int, default=20, help="documents per posted job")
    p.add_argument("--job-every", type=float, default=2.0, help="seconds between jobs")
    p.add_argument("--side-requests", type=int, default=300, help="requests per side-channel path")
    p.add_argument("--no-yield", action="store_true", help="also: writer thread, no yielding")
    p.add_argument(
        "--baseline-src",
        help="also measure a server run from this source tree (PYTHONPATH), e.g. main's src/",
    )
    args = p.parse_args()
    dataset = scifact_dir(args.data)
    _, _, total = corpus_source(dataset, None)
    index = scifact_index_dir(total, total)
    if indexed_docs(index) == 0:
        sys.exit(f"no SciFact index at bench/.work/{index.name}: run bench/ingest.py first")
    queries = [q for _, q in test_queries(dataset)]
    sections: list[tuple[str, str]] = []
    if args.part in ("all", "ingest"):
        sections.append((SECTION, part_ingest(args, index, dataset, queries)))
    if args.part in ("all", "side"):
        sections.append(("## Timing: hidden vs missing document", part_side(args, index)))
    if args.part in ("all", "load"):
        body, notes = part_load(args, index, queries)
        path = write_result("serve", "HTTP service under load", body, notes=notes)
    else:
        path = RESULTS_DIR / "serve.md"
    text = path.read_text(encoding="utf-8") if path.exists() else "# HTTP service under load\n"
    for heading, section in sections:
        text = _replace_section(text, heading, section)
    path.write_text(text, encoding="utf-8")
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
