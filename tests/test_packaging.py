"""One import package: everything is importable as ``sdr_search.*`` (the design card's folders
mapped by setuptools), nothing imports the old top-level names, and the package has no import
cycle (imports anywhere in a module, function-level ones included)."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from import_graph import cycles, import_graph, package_dirs  # noqa: E402

OLD = ("sdr_core", "indexer", "reranker", "workers")


def test_every_package_folder_is_listed_in_pyproject():
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = {name for name, _ in package_dirs(REPO, cfg["package-dir"])}
    assert found == listed


@pytest.mark.parametrize("top", ["sdr_search", "bench", "tests", "scripts"])
def test_nothing_imports_the_old_top_level_names(top):
    bad = []
    roots = [REPO / d for d in ("sdr_search", "sdr_core", "indexer", "reranker", "workers")] if top == "sdr_search" else [REPO / top]
    for root in roots:
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
                bad += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names if n.split(".")[0] in OLD]
    assert bad == []


def test_no_import_cycle():
    graph = import_graph(REPO)
    assert len(graph) > 50
    assert cycles(graph) == []


def test_the_front_door_loads_nothing_at_import():
    import subprocess

    code = ("import sys, sdr_search; heavy = [m for m in ('torch', 'transformers', 'faiss', 'opensearchpy', 'fastapi') "
            "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-c", "import sdr_search; sdr_search.no_such_name"], capture_output=True, text=True)
    assert "has no attribute 'no_such_name'" in r.stderr
