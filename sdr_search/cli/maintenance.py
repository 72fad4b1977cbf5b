"""``sdr delete`` and ``sdr compact``."""

from __future__ import annotations

import json
import logging
import sys
import time

from sdr_search.core.errors import InputReadError, InvalidInputError

from .args import open_store

__all__ = ["cmd_delete", "cmd_compact", "read_ids"]

logger = logging.getLogger("sdr")


def read_ids(args) -> list[str]:
    """The ids named on the command line and in ``--ids-file`` (blank lines skipped), in order,
    without repeats."""
    ids = list(args.ids or [])
    if args.ids_file is not None:
        try:
            text = sys.stdin.read() if str(args.ids_file) == "-" else args.ids_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputReadError(f"cannot read ids from {args.ids_file}: {e}") from e
        ids += [line.rstrip("\r\n") for line in text.splitlines() if line.strip()]
    if not ids:
        raise InvalidInputError("no id given: name ids as arguments or in --ids-file")
    return list(dict.fromkeys(ids))


def cmd_delete(args) -> int:
    ids = read_ids(args)
    t0 = time.perf_counter()
    with open_store(args) as store:
        present = set(store.content_keys(ids))
        deleted = store.delete([i for i in ids if i in present]) if present else 0
        stale = store.stats_info().stale
    missing = [i for i in ids if i not in present]
    if missing:
        logger.warning("%d of %d ids are not in the store", len(missing), len(ids))
    out = {"deleted": deleted, "missing": missing[:50], "n_missing": len(missing), "stats_stale": stale,
           "seconds": round(time.perf_counter() - t0, 2)}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def cmd_compact(args) -> int:
    from sdr_search.indexer.embedded import EmbeddedStore

    t0 = time.perf_counter()
    with EmbeddedStore(args.store) as store:
        out = store.compact()
    sys.stdout.write(json.dumps({**out, "seconds": round(time.perf_counter() - t0, 2)}) + "\n")
    return 0
