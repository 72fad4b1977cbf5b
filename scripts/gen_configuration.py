"""Write docs/configuration.md from the settings classes: every ``SDR_*`` variable, its default and
its help text, as the code defines them.

    .venv/bin/python scripts/gen_configuration.py          # rewrite docs/configuration.md
    .venv/bin/python scripts/gen_configuration.py --check  # exit 1 when the file is out of date

``tests/test_configuration_doc.py`` runs ``--check``, so the document cannot drift from the code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "configuration.md"

# (module, class, what it configures); a variable shared by two classes is listed under the first.
SETTINGS = [
    ("sdr_search.core.settings", "EncoderSettings", "Encoder (`sdr index`, `mlt`, `eval`, `serve`, `worker`)"),
    ("sdr_search.core.settings", "SegmentationSettings", "Segmentation (documents into paragraphs and sentences)"),
    ("sdr_search.core.settings", "CacheSettings", "Embedding cache"),
    ("sdr_search.reranker.engine", "MLTSettings", "Query engine (`sdr mlt`, `sdr eval --store`, `sdr serve`)"),
    ("sdr_search.indexer.settings", "EmbeddedStoreSettings", "Embedded store (`--store DIR`)"),
    ("sdr_search.indexer.opensearch.settings", "OpenSearchSettings", "OpenSearch store (`--opensearch URL`)"),
    ("sdr_search.reranker.service.settings", "ServiceSettings", "HTTP service (`sdr serve`)"),
    ("sdr_search.workers.settings", "WorkerSettings", "Workers and `sdr reindex` (Celery over Redis)"),
    ("sdr_search.core.training.settings", "TrainSettings", "Training (`sdr train`)"),
]

HEADER = """# Configuration

Every setting is an environment variable; command-line flags override them for one run. Generated
from the settings classes by `scripts/gen_configuration.py` (do not edit by hand; a test fails when
this file and the code disagree). Besides these, the local OpenSearch node of
`scripts/opensearch-node.sh` reads `SDR_NODE_VERSION`, `SDR_NODE_PORT`, `SDR_NODE_HEAP`,
`SDR_NODE_DIR`, `SDR_NODE_JAVA_HOME` and `SDR_NODE_ARGS` (see the script's header).
"""


def env_names(cls: Any, name: str, field: Any) -> list[str]:
    """The environment variables that set ``field`` (its aliases, else prefix + name)."""
    alias = field.validation_alias
    choices = getattr(alias, "choices", None) or ([alias] if isinstance(alias, str) else [])
    names = [c.upper() for c in choices if isinstance(c, str) and c.upper() != name.upper()]
    if names:
        return names
    return [(cls.model_config.get("env_prefix", "") + name).upper()]


def default_text(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    else:
        value = field.default
    if value is None:
        return "unset"
    if hasattr(value, "get_secret_value"):
        return "(secret)"
    if isinstance(value, Path):
        value = str(value).replace(str(Path.home()), "~")
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    return f"`{value}`"


def cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render() -> str:
    seen: set[str] = set()
    parts = [HEADER]
    for module, name, title in SETTINGS:
        cls = getattr(importlib.import_module(module), name)
        rows = []
        for field_name, field in cls.model_fields.items():
            envs = [e for e in env_names(cls, field_name, field) if e not in seen]
            if not envs:
                continue
            seen.update(envs)
            rows.append(f"| {' / '.join(f'`{e}`' for e in envs)} | {cell(default_text(field))} | "
                        f"{cell(field.description or '')} |")
        doc = (cls.__doc__ or "").strip().split("\n\n")[0]
        parts.append(f"## {title}\n\n`{module}.{name}`: {cell(doc)}\n\n| variable | default | what it does |\n"
                     "| --- | --- | --- |\n" + "\n".join(rows) + "\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/configuration.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            sys.stderr.write(f"{OUT.relative_to(ROOT)} is out of date: run scripts/gen_configuration.py\n")
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    sys.stderr.write(f"wrote {OUT.relative_to(ROOT)}\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
