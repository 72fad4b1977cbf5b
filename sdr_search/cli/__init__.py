"""The ``sdr`` command line: the one place that knows argparse. Each subcommand has ``--help``.

- :mod:`.parser` - :func:`build_parser`: every subcommand's flags; each handler is imported only
  when its command runs
- :mod:`.args` - flags to settings, stores and encoders (shared by the handlers)
- one module per command group, each holding its handlers (``cmd_*``): :mod:`.eval` (``sdr eval``),
  :mod:`.index` (``index``, ``stats``, ``info``, ``defaults``), :mod:`.mlt` (``mlt`` and its text
  output), :mod:`.maintenance` (``delete``, ``compact``), :mod:`.serve`, :mod:`.dashboards`,
  :mod:`.workers` (``reindex``, ``worker``), :mod:`.train`

The handlers call the library (``sdr_search.core``, ``.indexer``, ``.reranker``, ``.workers``);
nothing there imports this package. Errors that a user can cause end in one line on stderr and
exit status 2 (no stack trace); ``--debug`` shows the trace.
"""

from __future__ import annotations

import logging
import sys
from typing import Sequence

from sdr_search.core.errors import SDRError

from .parser import build_parser

__all__ = ["main", "build_parser"]

logger = logging.getLogger("sdr")


def _settings_error(e: Exception) -> str:
    """A pydantic settings error (from the environment or a flag) as one line."""
    parts = []
    for err in e.errors():  # type: ignore[attr-defined]
        where = ".".join(str(x) for x in err.get("loc", ())) or "setting"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}")
    return f"invalid setting ({type(e).__name__}): " + "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level), format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.log_level != "DEBUG":
        # opensearch-py logs every request (INFO) and every failed one with its traceback (WARNING);
        # the OpenSearch store raises each failure as one SDRError, reported below in one line
        logging.getLogger("opensearch").setLevel(logging.ERROR)
    else:  # the FAISS loader's lines (each CPU variant it tries) are silenced below DEBUG (indexer/embedded/ann.py)
        logging.getLogger("faiss.loader").setLevel(logging.DEBUG)
    try:
        return args.handler(args)
    except SDRError as e:
        if args.debug:
            raise
        logger.error("%s", e)
        return 2
    except KeyboardInterrupt:
        logger.error("interrupted")
        return 130
    except Exception as e:
        from pydantic import ValidationError

        if args.debug or not isinstance(e, ValidationError):
            raise
        logger.error("%s", _settings_error(e))  # a setting from the environment or a flag out of its range
        return 2

