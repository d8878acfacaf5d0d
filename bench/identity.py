"""Bit-identical retrieval across a change: TREC run files before and after, compared byte for byte.

``run`` writes, for each dataset, the TREC run file of every ablation row (``clew eval --ablate``,
plus ``+rerank-features`` with the committed SciFact feature model) into ``OUT/<dataset>/``. Each
checkout builds its own index (``OUT/<dataset>/index``), so ingest is compared too, not only search.
``compare`` says, file by file, whether two such directories are byte-identical and exits 1 on the
first difference (with the first differing line).

Typical use, the old commit in a worktree and this checkout side by side::

    git worktree add ../clew-before <old-commit>
    PYTHONPATH=../clew-before/src python bench/identity.py run --out bench/.work/identity/before
    python bench/identity.py run --out bench/.work/identity/after
    python bench/identity.py compare bench/.work/identity/before bench/.work/identity/after
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
DATASETS = ("scifact", "nfcorpus", "musique-migres200", "hotpotqa-migres200")
FEATURES = ROOT / "eval" / "features-scifact.json"


def run(out: Path, datasets: list[str], data: Path, limit: int | None) -> int:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for name in datasets:
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "clew",
            "eval",
            "--dataset",
            str(data / name),
            "--index",
            str(target / "index"),
            "--ablate",
            "--feature-model",
            str(FEATURES),
            "--run-out",
            str(target / "run.trec"),
            "--no-progress",
        ]
        if limit is not None:
            cmd += ["--limit", str(limit)]
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        took = time.perf_counter() - start
        (target / "table.txt").write_text(done.stdout, encoding="utf-8")
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            print(f"{name}: clew eval failed (exit {done.returncode})", file=sys.stderr)
            return 1
        files = sorted(p.name for p in target.glob("run.*.trec"))
        print(f"{name}: {len(files)} run files in {took:.0f} s")
    return 0


DEMO = [
    ["ingest", "data/sample"],
    ["search", "ERR-4413", "--k", "3", "--explain"],
    ["search", "customer was billed twice", "--k", "3", "--explain"],
    ["search", "what else broke after the pgbouncer migration", "--k", "3", "--explain"],
    ["ask", "What does ERR-4413 mean?"],
    [
        "ask",
        "which services are affected if pgbouncer-core runs out of connections",
        "--expand",
        "--rerank",
        "features",
    ],
    ["ask", "Which volcano erupted in Iceland in 2010?"],
]
"""The commands of ``make demo``."""
VOLATILE = re.compile(r"\d+(\.\d+)? ?(ms|s)\b|trace[ _-]?id\S*\s*\S+|[0-9a-f]{16,}", re.I)
"""Timings and trace ids: what may differ between two runs of the demo."""


def demo(out: Path) -> int:
    """``make demo``'s commands into ``out/demo.txt`` (a fresh index), volatile parts masked."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    index = out / "demo-index"
    shutil.rmtree(index, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for args in DEMO:
        cmd = [sys.executable, "-m", "clew", *args, "--index", str(index)]
        if args[0] == "ingest":
            cmd.append("--no-progress")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        lines += [f"$ clew {' '.join(args)}", done.stdout, f"(exit {done.returncode})"]
    text = "\n".join(lines)
    (out / "demo.txt").write_text(VOLATILE.sub("<volatile>", text), encoding="utf-8")
    print(f"demo output in {out / 'demo.txt'}")
    return 0


def compare(before: Path, after: Path, datasets: list[str] | None = None) -> int:
    def runs(root: Path) -> list[Path]:
        found = sorted(p.relative_to(root) for p in root.glob("*/run*.trec"))
        return [p for p in found if datasets is None or p.parts[0] in datasets]

    left, right = runs(before), runs(after)
    if not left:
        print(f"no run files under {before}", file=sys.stderr)
        return 1
    if left != right:
        print(f"different file sets: {sorted(set(left) ^ set(right))}", file=sys.stderr)
        return 1
    bad = 0
    for rel in left:
        a = (before / rel).read_bytes()
        b = (after / rel).read_bytes()
        if a == b:
            print(f"identical  {rel}  ({len(a.splitlines())} lines)")
            continue
        bad += 1
        for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines(), strict=False), 1):
            if x != y:
                print(f"DIFFERENT  {rel}  line {i}:\n  - {x.decode()}\n  + {y.decode()}")
                break
        else:
            print(f"DIFFERENT  {rel}  (lengths {len(a)} vs {len(b)} bytes)")
    print(f"{len(left) - bad}/{len(left)} run files byte-identical")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="write the run files of this checkout")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--datasets", nargs="+", default=list(DATASETS))
    r.add_argument("--data", type=Path, default=DATA)
    r.add_argument("--limit", type=int, default=None)
    c = sub.add_parser("compare", help="byte-compare two run directories")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--datasets", nargs="+", default=None, help="only these (default: all)")
    d = sub.add_parser("demo", help="write make demo's output, timings and trace ids masked")
    d.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.cmd == "demo":
        return demo(args.out)
    if args.cmd == "run":
        return run(args.out, args.datasets, args.data, args.limit)
    return compare(args.before, args.after, args.datasets)


if __name__ == "__main__":
    raise SystemExit(main())
