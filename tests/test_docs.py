"""The docs stay true to the code: every ``sdr`` command they name exists, every relative link
resolves (file and heading), nothing links out of the repository, and the README stays short."""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import re
import unicodedata
from pathlib import Path

import pytest

from sdr_search.cli import build_parser

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 320


def doc_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


DOCS = doc_files()

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_INLINE_CODE = re.compile(r"`+[^`\n]*`+")
_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_IMAGE = re.compile(r"!\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
# `sdr <word>`: sdr at a word start (not sdr-search, sdr_core, .../sdr.trec), then a space and a word
_SDR_COMMAND = re.compile(r"(?<![\w.-])sdr[ \t]+(?!plugin\b)([a-z][a-z0-9_-]*)")  # "the sdr plugin": the OpenSearch plugin
# `sdr` as an argument value, not a command: --method sdr, --objective sdr, --index sdr, SDR_METHOD=sdr
_NOT_A_COMMAND = re.compile(r"(--method|--objective|--index|=)\s*$")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _without_code(text: str) -> str:
    """The text with fenced blocks and inline code blanked (links there are code, not links)."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _INLINE_CODE.sub(lambda m: " " * len(m.group(0)), text)


def links(path: Path) -> list[str]:
    text = _without_code(_text(path))
    return _LINK.findall(text) + _IMAGE.findall(text) + _REF_DEF.findall(text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup removed, lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = text.replace("`", "").lower()
    out = []
    for ch in text:
        if ch in " -_" or ch.isalnum() or unicodedata.category(ch).startswith("M"):
            out.append("-" if ch == " " else ch)
    return "".join(out)


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    for _, title in _HEADING.findall(re.sub(_FENCE, "", _text(path))):
        base = slug(title)
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def named_commands(path: Path) -> list[tuple[int, str, str | None]]:
    """``(line, command, next word)`` for every ``sdr COMMAND`` in the file, prose and code alike."""
    out = []
    for lineno, line in enumerate(_text(path).splitlines(), 1):
        for m in _SDR_COMMAND.finditer(line):
            if _NOT_A_COMMAND.search(line[: m.start()]):
                continue
            rest = re.match(r"[ \t]+([a-z][a-z0-9_-]*)", line[m.end():])
            out.append((lineno, m.group(1), rest.group(1) if rest else None))
    return out


def test_there_are_docs_to_check():
    assert (ROOT / "README.md").is_file()
    names = {p.name for p in DOCS}
    assert {"architecture.md", "scoring.md", "configuration.md"} <= names


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_every_sdr_command_named_exists(path):
    commands = subcommands(build_parser())
    assert commands, "the CLI parser has no subcommands"
    missing = []
    for lineno, name, following in named_commands(path):
        if name not in commands:
            missing.append(f"line {lineno}: sdr {name}")
            continue
        nested = subcommands(commands[name])
        if nested and following is not None and following not in nested:
            missing.append(f"line {lineno}: sdr {name} {following}")
    assert not missing, f"{path.name} names commands the CLI does not have: {missing}"


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_every_relative_link_resolves(path):
    broken = []
    for target in links(path):
        if _SCHEME.match(target) or target.startswith("//"):
            continue  # http(s), mailto: not checked here
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{path.relative_to(ROOT)} has broken links: {broken}"


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_no_link_leaves_the_repository(path):
    outside = []
    for target in links(path):
        if _SCHEME.match(target) or target.startswith("//"):
            continue
        file_part = target.partition("#")[0]
        if "shared/" in file_part or (file_part and not (path.parent / file_part).resolve().is_relative_to(ROOT)):
            outside.append(target)
    assert not outside, f"{path.relative_to(ROOT)} links outside the repository: {outside}"


# a script under bench/ (.py or .sh) as docs, docstrings and comments name it
_BENCH_PATH = re.compile(r"(?<![\w./-])bench/[\w./-]*?\.(?:py|sh)\b")
_CODE_DIRS = ("sdr_core", "indexer", "reranker", "workers", "sdr_search", "bench", "scripts", "tests")


def named_bench_paths(path: Path) -> list[tuple[int, str]]:
    return [(lineno, m.group(0)) for lineno, line in enumerate(_text(path).splitlines(), 1)
            for m in _BENCH_PATH.finditer(line)]


def test_every_bench_script_named_exists():
    """A bench script moved (bench/experiments/) or split leaves no doc, docstring or comment
    naming its old path."""
    sources = [*DOCS, *(p for d in _CODE_DIRS for p in sorted((ROOT / d).rglob("*.py")))]
    missing = [f"{p.relative_to(ROOT)}:{lineno} {name}" for p in sources for lineno, name in named_bench_paths(p)
               if not (ROOT / name).is_file()]
    assert not missing, f"these name bench scripts that do not exist: {missing}"


def test_readme_is_short():
    n = len(_text(ROOT / "README.md").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}); move detail to docs/"


def test_readme_keeps_the_test_command():
    """.ci/run and scripts/test.sh call this "the README's test command"."""
    assert "./scripts/setup.sh && ./scripts/test.sh" in _text(ROOT / "README.md")


def demo_ids() -> set[str]:
    """The ids of the articles scripts/demo.sh indexes with its defaults: the first N lines of its
    wiki file (the slice is made at run time; reading 200 lines of the gzip is cheap)."""
    demo = _text(ROOT / "scripts" / "demo.sh")
    n = int(re.search(r"^N=\$\{1:-(\d+)\}", demo, re.M).group(1))
    wiki = ROOT / re.search(r"^WIKI=\$\{SDR_DEMO_WIKI:-([^}]+)\}", demo, re.M).group(1)
    if not wiki.is_file():
        pytest.fail(f"the demo's articles come from the shared data, not found: {wiki}", pytrace=False)
    with gzip.open(wiki, "rt", encoding="utf-8") as fh:
        return {json.loads(line)["id"] for line in itertools.islice(fh, n)}


def test_the_readme_tour_names_articles_of_the_demo_store():
    """The tour runs against the store scripts/demo.sh builds: every wiki id it names is in it."""
    named = set(re.findall(r"\bwiki_\d+\b", _text(ROOT / "README.md")))
    assert named, "the README names no wiki article"
    missing = sorted(named - demo_ids())
    assert not missing, f"README.md names articles that scripts/demo.sh does not index: {missing}"


# -- the checker itself ------------------------------------------------------------------------------
def test_slug_follows_github():
    assert slug("More like this: `sdr mlt`") == "more-like-this-sdr-mlt"
    assert slug("2. Centroid pre-rank") == "2-centroid-pre-rank"
    assert slug("OpenSearch lexical query: terms or more_like_this") == "opensearch-lexical-query-terms-or-more_like_this"
    assert slug("Exact k-NN, and what the pre-rank adds") == "exact-k-nn-and-what-the-pre-rank-adds"


def test_command_finder(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "Run `sdr compact --store DIR`, then .venv/bin/sdr mlt --method sdr --size 3.\n"
        "sdr-search and sdr_search are names; `--objective sdr`, `--index sdr x.jsonl` and SDR_METHOD=sdr are values.\n"
        "```\ndocker compose run --rm sdr dashboards import --url U\n```\n",
        encoding="utf-8",
    )
    assert [(n, f) for _, n, f in named_commands(doc)] == [("compact", None), ("mlt", None), ("dashboards", "import")]


def test_bench_path_finder(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("Run `python bench/two_stage.py --reuse`, bench/experiments/feedback.py and bench/gpu.sh;\n"
                   "not tests/bench/test_gpu_script.py, /var/tmp/sdr-bench/irled or bench/ alone.\n", encoding="utf-8")
    assert [n for _, n in named_bench_paths(doc)] == ["bench/two_stage.py", "bench/experiments/feedback.py", "bench/gpu.sh"]


def test_link_finder(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "[a](docs/a.md#part) and `[not](a link)` and [b](https://example.org)\n"
        "```\n[c](in-code.md)\n```\n[ref]: ../shared/SPEC.md\n",
        encoding="utf-8",
    )
    assert links(doc) == ["docs/a.md#part", "https://example.org", "../shared/SPEC.md"]
