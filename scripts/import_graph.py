"""The import graph of the sdr_search package (every import statement, function-level ones
included, resolved to sdr_search modules) and its cycles.

    python scripts/import_graph.py          # modules, edges, and each cycle (exit 1 when any)
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def package_dirs(repo: Path, mapping: dict[str, str]) -> list[tuple[str, Path]]:
    """(package name, folder) for every folder with an ``__init__.py`` under the mapped roots."""
    out = []
    for name, folder in mapping.items():
        root = repo / folder
        for init in sorted(root.rglob("__init__.py")):
            rel = init.parent.relative_to(root).parts
            if any(p.startswith(("_", ".")) for p in rel):
                continue
            sub = ".".join((name, *rel))
            if not any(sub != other and sub.startswith(other + ".") and (repo / mapping[other]) == root
                       for other in mapping if other != name):
                out.append((sub, init.parent))
    # a nested mapping (sdr_search.core under sdr_search) is listed once, by its own mapping
    seen: dict[str, Path] = {}
    for sub, folder in out:
        seen.setdefault(sub, folder)
    return sorted(seen.items())


def modules(repo: Path = REPO) -> dict[str, Path]:
    cfg = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    out: dict[str, Path] = {}
    for pkg, folder in package_dirs(repo, cfg["package-dir"]):
        for path in folder.glob("*.py"):
            out[pkg if path.stem == "__init__" else f"{pkg}.{path.stem}"] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(repo: Path = REPO) -> dict[str, set[str]]:
    """module -> the sdr_search modules it imports (anywhere in the file)."""
    known = modules(repo)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for mod, path in known.items():
        package = mod if path.stem == "__init__" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(p for p in (*parts, base) if p)
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                hit = _resolve(t, known)
                if hit and hit != mod and not mod.startswith(hit + "."):  # importing one's own package is not an edge
                    graph[mod].add(hit)
                    break
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
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

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def main() -> int:
    graph = import_graph()
    found = cycles(graph)
    print(f"{len(graph)} modules, {sum(len(v) for v in graph.values())} import edges, {len(found)} cycles")
    for comp in found:
        print("cycle:", " <-> ".join(comp))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
