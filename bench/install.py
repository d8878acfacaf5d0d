"""What a core install of clew costs: the wheel in a fresh venv, without any extra.

Builds the wheel from the working tree, installs it into a fresh venv with its core dependencies
pinned by ``requirements.lock`` (as ``tests/packaging/test_wheel.py`` does), and reports:

- the venv's size on disk: core only, and core + ``[torch]`` (torch pinned to the CPU build by
  the lock; skipped with ``--no-torch`` or when that build cannot be installed here), beside the
  development venv (``make install``, every extra);
- ``import clew``: ``-X importtime`` cumulative time and the whole process, median of
  ``--runs`` fresh interpreters, core venv against the development venv;
- ``clew ingest data/sample`` and the first query of a fresh process (``clew search``), in
  each venv: the core venv embeds with all-MiniLM-L6-v2 int8, the development venv with fp32.

The venv helpers here (:func:`build_wheel`, :func:`make_venv`, :func:`venv_env`,
:func:`pip_reaches_index`) are what the packaging test uses too.

Usage: ``python bench/install.py [--runs 5] [--no-torch] [--keep]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parents[1]
SAMPLE = REPO_DIR / "data" / "sample"
PIP = "pip==26.3"
"""The pip every venv is upgraded to first (as ``make install`` does)."""
PROBE = "catalogue"
"""A tiny pure-Python package of the lock: a failing ``pip download`` of its pin means pip
cannot reach a package index."""
NOT_CORE = ("torch", "fastapi", "uvicorn", "streamlit", "sentence_transformers", "transformers")
"""Modules a core install must not have."""


def run(
    cmd: Sequence[str | Path],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 900,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; a non-zero exit is a RuntimeError carrying the output's tail."""
    done = subprocess.run(
        [str(c) for c in cmd],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{tail}")
    return done


def lock_pin(name: str) -> str:
    """``name==version`` as ``requirements.lock`` pins it."""
    for line in (REPO_DIR / "requirements.lock").read_text(encoding="utf-8").splitlines():
        if line.split("==", 1)[0].strip().lower() == name:
            return line.strip()
    raise LookupError(f"{name} is not pinned in requirements.lock")


def pip_reaches_index(work: Path) -> str | None:
    """None when pip can download the lock's pin of :data:`PROBE`, else why it cannot."""
    dest = work / "probe"
    shutil.rmtree(dest, ignore_errors=True)
    cmd: list[str | Path] = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", dest]
    cmd += ["--timeout", "15", "--retries", "1", "-q", lock_pin(PROBE)]
    try:
        run(cmd, timeout=180)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        return f"`pip download {lock_pin(PROBE)}` failed: {lines[-1] if lines else exc}"
    return None


def constraints(work: Path) -> Path:
    """``requirements.lock`` without any line about clew itself (the wheel is installed)."""
    keep = []
    for line in (REPO_DIR / "requirements.lock").read_text(encoding="utf-8").splitlines():
        name = re.split(r"[=<>!~ @\[;]", line.strip(), maxsplit=1)[0].lower()
        if name in {"clew", "-e"} or line.strip().startswith(("-e", "file:", ".")):
            continue
        keep.append(line)
    path = work / "constraints.txt"
    path.write_text("\n".join(keep) + "\n", encoding="utf-8")
    return path


def build_wheel(work: Path) -> Path:
    """The wheel of the working tree, built from a copy of it (nothing is written into the
    repository: no build/ or egg-info)."""
    tree = work / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE", "LICENSE.txt", "NOTICE"):
        if (REPO_DIR / name).is_file():
            shutil.copy2(REPO_DIR / name, tree / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(REPO_DIR / "src", tree / "src", ignore=ignore)
    out = work / "wheel"
    shutil.rmtree(out, ignore_errors=True)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, tree])
    wheels = sorted(out.glob("clew-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one clew wheel in {out}, found {wheels}")
    return wheels[0]


def venv_env(venv: Path, cache: Path) -> dict[str, str]:
    """The environment of a process of ``venv``: its bin/ first, nothing of the caller's
    venv or source tree, offline models, clew's cache at ``cache``."""
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env.update(
        VIRTUAL_ENV=str(venv),
        PYTHONNOUSERSITE="1",
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        CLEW_CACHE_DIR=str(cache),
    )
    return env


def make_venv(venv: Path, wheel: Path, work: Path, extras: str = "") -> Path:
    """A fresh venv at ``venv`` holding the wheel (with ``extras``, e.g. ``"torch"``) and its
    dependencies pinned by the lock; pip's cache is used. Returns its python."""
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    env = venv_env(venv, work / "cache")
    run([python, "-m", "pip", "install", "-q", "--upgrade", PIP], env=env)
    target = f"{wheel}[{extras}]" if extras else str(wheel)
    run([python, "-m", "pip", "install", "-q", "-c", constraints(work), target], env=env)
    return python


def disk_mb(path: Path) -> float:
    """Disk usage of a tree in MB (10^6 bytes), each hard-linked file once, as ``du``."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            st = os.lstat(os.path.join(root, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total / 1e6


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise RuntimeError(f"no site-packages under {venv}")
    return found[0]


def largest(venv: Path, n: int = 6) -> str:
    """The ``n`` largest top-level entries of a venv's site-packages."""
    sp = site_packages(venv)
    sizes = [(disk_mb(p) if p.is_dir() else p.stat().st_size / 1e6, p.name) for p in sp.iterdir()]
    sizes.sort(reverse=True)
    return ", ".join(f"{name} {mb:.0f}" for mb, name in sizes[:n])


# -- measurements -------------------------------------------------------------------------------


def import_times(python: Path, env: dict[str, str]) -> tuple[float, float]:
    """One fresh interpreter: (``-X importtime`` cumulative ms of clew, process wall ms)."""
    t = time.perf_counter()
    done = run([python, "-X", "importtime", "-c", "import clew"], env=env, cwd=REPO_DIR.parent)
    wall = (time.perf_counter() - t) * 1000.0
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == "clew":
            return int(parts[1]) / 1000.0, wall
    raise RuntimeError(f"no importtime line for clew in:\n{done.stderr[-2000:]}")


def first_query(clew: Path, index: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """A fresh ``clew search`` process: (wall ms, the query's own total ms, top document)."""
    cmd: list[str | Path] = [clew, "search", "ERR-4413", "--index", index, "--json", "--k", "3"]
    t = time.perf_counter()
    done = run(cmd, env=env)
    wall = (time.perf_counter() - t) * 1000.0
    data = json.loads(done.stdout)
    return wall, float(data["timings_ms"]["total"]), str(data["hits"][0]["doc_id"])


def main() -> None:
    from _common import WORK_DIR, loadavg, log, median, table, wait_quiet, write_result

    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="fresh processes per timing")
    p.add_argument("--no-torch", action="store_true", help="skip the core+[torch] venv")
    p.add_argument("--keep", action="store_true", help="keep the venvs under bench/.work")
    p.add_argument("--quiet-wait", type=float, default=30.0)
    args = p.parse_args()
    work = WORK_DIR / "install"
    work.mkdir(parents=True, exist_ok=True)
    load_start = loadavg()
    notes: list[str] = []

    why = pip_reaches_index(work)
    if why:
        raise SystemExit(f"pip cannot reach a package index: {why}")
    t = time.perf_counter()
    wheel = build_wheel(work)
    build_s = time.perf_counter() - t
    log(f"built {wheel.name} ({wheel.stat().st_size / 1e6:.2f} MB) in {build_s:.1f} s")
    core = work / "venv-core"
    t = time.perf_counter()
    core_py = make_venv(core, wheel, work)
    install_s = time.perf_counter() - t
    log(f"core venv in {install_s:.1f} s (pip cache warm)")
    core_env = venv_env(core, work / "cache")
    present = run(
        [
            core_py,
            "-c",
            f"import importlib.util as u; print([m for m in {NOT_CORE!r} if u.find_spec(m)])",
        ],
        env=core_env,
    ).stdout.strip()
    if present != "[]":
        raise RuntimeError(f"the core venv has modules of extras: {present}")
    n_dists = len(
        json.loads(run([core_py, "-m", "pip", "list", "--format", "json"], env=core_env).stdout)
    )

    dev = Path(sys.prefix)
    size_rows: list[list[object]] = [
        [
            "core (the wheel alone)",
            disk_mb(core),
            disk_mb(site_packages(core)),
            n_dists,
            largest(core),
        ],
    ]
    if not args.no_torch:
        torch_venv = work / "venv-torch"
        try:
            t = time.perf_counter()
            torch_py = make_venv(torch_venv, wheel, work, extras="torch")
            log(f"core+[torch] venv in {time.perf_counter() - t:.1f} s")
            torch_env = venv_env(torch_venv, work / "cache")
            torch_version = run(
                [torch_py, "-c", "import torch; print(torch.__version__)"], env=torch_env
            ).stdout.strip()
            n = len(
                json.loads(
                    run([torch_py, "-m", "pip", "list", "--format", "json"], env=torch_env).stdout
                )
            )
            size_rows.append(
                [
                    f"core + [torch] (torch {torch_version})",
                    disk_mb(torch_venv),
                    disk_mb(site_packages(torch_venv)),
                    n,
                    largest(torch_venv),
                ]
            )
        except RuntimeError as exc:
            notes.append(f"core + [torch] not measured: {str(exc).splitlines()[-1]}")
        finally:
            if not args.keep:
                shutil.rmtree(torch_venv, ignore_errors=True)
    dev_n = len(json.loads(run([sys.executable, "-m", "pip", "list", "--format", "json"]).stdout))
    size_rows.append(
        [
            "development (`make install`, every extra)",
            disk_mb(dev),
            disk_mb(site_packages(dev)),
            dev_n,
            largest(dev),
        ]
    )

    # import clew: alternate the two venvs, fresh interpreters
    dev_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    dev_py = Path(sys.executable)
    wait_quiet(args.quiet_wait)
    imports: dict[str, list[tuple[float, float]]] = {"core": [], "dev": []}
    for _ in range(args.runs):
        imports["core"].append(import_times(core_py, core_env))
        imports["dev"].append(import_times(dev_py, dev_env))
    bare = []
    for _ in range(args.runs):
        t = time.perf_counter()
        run([core_py, "-c", "pass"], env=core_env)
        bare.append((time.perf_counter() - t) * 1000.0)

    # ingest the sample corpus and time fresh processes' first query
    queries: dict[str, list[tuple[float, float, str]]] = {}
    ingest_s: dict[str, float] = {}
    for name, bin_dir, env in (("core", core / "bin", core_env), ("dev", dev / "bin", dev_env)):
        index = work / f"index-{name}"
        shutil.rmtree(index, ignore_errors=True)
        wait_quiet(args.quiet_wait)
        t = time.perf_counter()
        run([bin_dir / "clew", "ingest", SAMPLE, "--index", index], env=env)
        ingest_s[name] = time.perf_counter() - t
        queries[name] = []
        for _ in range(args.runs):
            queries[name].append(first_query(bin_dir / "clew", index, env))
        tops = {q[2] for q in queries[name]}
        if tops != {"error-codes.md"}:
            raise RuntimeError(f"{name}: top document for ERR-4413 is {tops}")

    label = {"core": "core (int8 all-MiniLM-L6-v2)", "dev": "development (fp32)"}
    import_rows = [
        [
            label[k],
            median([a for a, _ in v]),
            median([b for _, b in v]),
            median(bare) if k == "core" else float("nan"),
        ]
        for k, v in imports.items()
    ]
    query_rows = [
        [label[k], ingest_s[k], median([a for a, _, _ in v]), median([b for _, b, _ in v])]
        for k, v in queries.items()
    ]
    body = "\n".join(
        [
            f"Wheel: `{wheel.name}`, {wheel.stat().st_size / 1e6:.2f} MB, built in "
            f"{build_s:.1f} s; "
            f"the core venv installed in {install_s:.1f} s with pip's cache warm "
            f"(`pip install -c requirements.lock clew-*.whl`, after `pip install {PIP}`).",
            "",
            "## Venv size on disk (MB = 10^6 bytes)",
            "",
            table(
                ["venv", "total MB", "site-packages MB", "distributions", "largest (MB)"], size_rows
            ),
            "",
            f"## `import clew` (median of {args.runs} fresh interpreters)",
            "",
            table(
                ["venv", "importtime cumulative ms", "process wall ms", "`python -c pass` ms"],
                import_rows,
            ),
            "",
            f'## `clew search "ERR-4413"` on data/sample (median of {args.runs} fresh processes)',
            "",
            table(
                ["venv", "ingest data/sample s", "process wall ms", "query total ms (in process)"],
                query_rows,
            ),
            "",
            "The query total is the search's own `timings_ms.total`; in a fresh process it "
            "includes loading the ONNX model (the first embed). Top hit in every run: "
            "`error-codes.md`.",
        ]
    )
    notes += [
        f"load average at start: {load_start}; before each timed group the script waits up to "
        f"{args.quiet_wait:.0f} s for other processes to go idle",
        "core venv: fresh clew cache (its first use hashes the 23 MB int8 file once, in the "
        "ingest); development venv: the user's cache (the fp32 ONNX export already made)",
    ]
    write_result(
        "install", "Install: a core-only venv against the development venv", body, notes=notes
    )
    if not args.keep:
        shutil.rmtree(core, ignore_errors=True)


if __name__ == "__main__":
    main()
