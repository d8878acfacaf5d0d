"""Load test of ``clew serve`` on loopback: 1, 4 and 16 concurrent clients on the SciFact index.

Starts a real ``clew serve`` (uvicorn, API keys on) in a subprocess over ``bench/.work/
scifact-index`` (built by ``bench/ingest.py``), then, for each concurrency level, sends SciFact
test queries to ``POST /search`` and ``POST /ask`` and ``GET /health`` from that many client
threads (one keep-alive connection each). Each run is bounded in count and in time. Prints
throughput and p50/p95 per endpoint, and the ratio to the same searches made in-process on an
``Engine`` with the same number of threads (the cost of HTTP, JSON and the event loop).

Usage: ``python bench/serve.py [--requests 200] [--ask-requests 40] [--max-seconds 60]``
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from _common import (
    Stats,
    corpus_source,
    indexed_docs,
    log,
    parser,
    ratio,
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


def main() -> None:
    p = parser(__doc__, quiet_wait=10.0)
    p.add_argument("--requests", type=int, default=200, help="searches per concurrency level")
    p.add_argument("--ask-requests", type=int, default=40, help="asks per concurrency level")
    p.add_argument("--max-seconds", type=float, default=60.0, help="time bound per run")
    args = p.parse_args()
    dataset = scifact_dir(args.data)
    _, _, total = corpus_source(dataset, None)
    index = scifact_index_dir(total, total)
    if indexed_docs(index) == 0:
        sys.exit(f"no SciFact index at bench/.work/{index.name}: run bench/ingest.py first")
    queries = [q for _, q in test_queries(dataset)]

    tmp = Path(tempfile.mkdtemp(prefix="clew-bench-serve-"))
    key, _ = KeyStore.add(tmp / "keys.yaml", "bench")
    (tmp / "config.yaml").write_text("cache: {size: 0}\n")  # measure the work, not the cache
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    server = subprocess.Popen(
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
            str(tmp / "keys.yaml"),
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    rows: list[list[object]] = []
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("clew serve did not start")
            time.sleep(0.5)
        local = threading.local()
        headers = {"Authorization": f"Bearer {key}"}

        def client() -> httpx.Client:
            c = getattr(local, "client", None)
            if c is None:
                c = local.client = httpx.Client(base_url=url, headers=headers, timeout=120)
            return c

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
        server.terminate()
        server.wait(timeout=30)

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
    ]
    write_result("serve", "HTTP service under load", table(head, rows), notes=notes)


if __name__ == "__main__":
    main()
