"""The house's shape, checked: the import layers (pyproject's import-linter contracts), no
import cycles between modules, and no module importing another's private name."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "clew"


def test_import_layers_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def _cycles(adj: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(adj):
        if root in index:
            continue
        work = [(root, iter(sorted(adj[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(adj.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    graph = grimp.build_graph("clew", exclude_type_checking_imports=True)
    adj = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(adj) == []


def _private_imports(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clew"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {alias.name}")
    return found


def test_no_module_imports_a_private_name_of_another() -> None:
    bad = [hit for path in sorted(SRC.rglob("*.py")) for hit in _private_imports(path)]
    assert bad == []


def test_the_private_name_check_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from clew.filters import _clip, __all__\n", encoding="utf-8")
    assert _private_imports(probe, tmp_path) == ["probe.py:2 _clip"]
