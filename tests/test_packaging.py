"""One import package: everything is importable as ``sdr_search.*`` (the design card's folders
mapped by setuptools), nothing imports the old top-level names, the package has no import cycle
(imports anywhere in a module, function-level ones included), and imports go one way: the layers
(core, indexer, the engine, its HTTP service, workers) import only downward, only the CLI
(``sdr_search.cli``) knows argparse, and no subpackage imports the top package back."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from import_graph import cycles, import_graph, modules, package_dirs  # noqa: E402

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


def _imported_names(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, module name) of every import in ``path`` (function-level ones included), relative
    ones resolved; ``from X import a`` gives ``X.a``."""
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(p for p in (*parts, base) if p)
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return out


def test_only_the_cli_knows_argparse_and_nothing_imports_the_top_package_back():
    """argparse only in sdr_search.cli; outside the top package (core, indexer, reranker, workers)
    no import of the CLI or of the top package's own modules (``sdr_search``: its ``__init__``,
    ``sdr_search.api``, ``sdr_search.__main__``); in the top package only ``__main__`` imports the CLI."""
    found = modules(REPO)
    top = {"sdr_search", "sdr_search.api", "sdr_search.__main__"}
    assert "sdr_search.cli" in found and "sdr_search.cli.parser" in found

    def resolve(name: str) -> str | None:  # the sdr_search module an imported name lives in
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    def in_cli(mod: str) -> bool:
        return mod == "sdr_search.cli" or mod.startswith("sdr_search.cli.")

    bad = []
    for mod, path in sorted(found.items()):
        for line, name in _imported_names(mod, path):
            target = resolve(name)
            if name.split(".")[0] == "argparse" and not in_cli(mod):
                bad.append(f"{path.relative_to(REPO)}:{line} {name} (argparse outside the CLI)")
            elif target and in_cli(target) and not in_cli(mod) and mod != "sdr_search.__main__":
                bad.append(f"{path.relative_to(REPO)}:{line} {name} (the CLI imported back)")
            elif target in top and mod not in top and not in_cli(mod):
                bad.append(f"{path.relative_to(REPO)}:{line} {name} (the top package imported back)")
    assert bad == []


# Each layer and the layers it may import (itself included); a module belongs to the longest layer
# name it starts with. The engine (sdr_search.reranker) never imports its HTTP service.
LAYERS = {
    "sdr_search.core": {"sdr_search.core"},
    "sdr_search.indexer": {"sdr_search.core", "sdr_search.indexer"},
    "sdr_search.reranker": {"sdr_search.core", "sdr_search.indexer", "sdr_search.reranker"},
    "sdr_search.reranker.service": {"sdr_search.core", "sdr_search.indexer", "sdr_search.reranker", "sdr_search.reranker.service"},
    "sdr_search.workers": {"sdr_search.core", "sdr_search.indexer", "sdr_search.workers"},
}


def _layer(module: str) -> str | None:
    return max((name for name in LAYERS if module == name or module.startswith(name + ".")), key=len, default=None)


def test_the_layers_import_downward():
    """core imports no other layer, indexer only core, the engine (reranker) indexer and core, the
    HTTP service (reranker.service) the engine too, workers indexer and core; imports anywhere in a
    module, function-level ones included (the top package and the CLI: the test above)."""
    found = modules(REPO)
    assert "sdr_search.reranker.service.app" in found and "sdr_search.reranker.engine" in found

    def resolve(name: str) -> str | None:
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    bad = []
    for mod, path in sorted(found.items()):
        layer = _layer(mod)
        if layer is None:
            continue
        for line, name in _imported_names(mod, path):
            target = resolve(name)
            to = _layer(target) if target else None
            if to is not None and to not in LAYERS[layer]:
                bad.append(f"{path.relative_to(REPO)}:{line} {name} ({layer} imports {to})")
    assert bad == []


def test_the_front_door_loads_nothing_at_import():
    import subprocess

    code = ("import sys, sdr_search; heavy = [m for m in ('torch', 'transformers', 'faiss', 'opensearchpy', 'fastapi') "
            "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-c", "import sdr_search; sdr_search.no_such_name"], capture_output=True, text=True)
    assert "has no attribute 'no_such_name'" in r.stderr
