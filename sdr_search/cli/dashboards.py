"""``sdr dashboards import``: the saved objects of ``mappings/dashboards.ndjson`` (or ``--file``)
posted to OpenSearch Dashboards (:func:`sdr_search.indexer.dashboards.import_saved_objects`); one
JSON summary on stdout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sdr_search.indexer.dashboards import default_ndjson_path, import_saved_objects

__all__ = ["cmd_dashboards_import"]


def cmd_dashboards_import(args) -> int:
    """Handler of ``sdr dashboards import --url URL [--index NAME] [--file PATH]``: prints one JSON summary.

    ``--index`` defaults like every store command's: env ``SDR_OPENSEARCH_INDEX``, else ``sdr``.
    """
    index = getattr(args, "index", None)
    if not index:
        from sdr_search.indexer.opensearch.settings import OpenSearchSettings

        index = OpenSearchSettings().index
    path = Path(args.file) if getattr(args, "file", None) else default_ndjson_path()
    overwrite = not getattr(args, "no_overwrite", False)
    timeout = getattr(args, "timeout", None) or 30
    answer = import_saved_objects(args.url, path, index=index, overwrite=overwrite, timeout=timeout)
    summary = {
        "url": args.url,
        "index": index,
        "file": str(path),
        "overwrite": overwrite,
        "success": answer["success"],
        "successCount": answer.get("successCount", 0),
        "errors": answer.get("errors", []),
    }
    sys.stdout.write(json.dumps(summary) + "\n")
    return 0
