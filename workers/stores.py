"""Store specs: the small JSON dict that names a store inside a task message.

``{"kind": "embedded", "path": "/abs/dir"}`` or ``{"kind": "opensearch", "url": "http://...",
"index": "name"}``. :func:`open_store_spec` is the one place that turns a spec into a
:class:`~sdr_search.indexer.store.DocumentStore`; workers and ``sdr reindex`` both go through it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from sdr_search.core.errors import InvalidInputError

__all__ = ["embedded_spec", "opensearch_spec", "validate_spec", "spec_label", "open_store_spec"]


def embedded_spec(path: str | os.PathLike[str]) -> dict[str, str]:
    """Spec of the embedded store in directory ``path`` (made absolute, symlinks NOT resolved here)."""
    return {"kind": "embedded", "path": os.path.abspath(os.fspath(path))}


def opensearch_spec(url: str, index: str) -> dict[str, str]:
    return {"kind": "opensearch", "url": str(url), "index": str(index)}


def validate_spec(spec: Any) -> dict[str, str]:
    """The spec as a plain dict, checked; raises :class:`InvalidInputError` naming what is wrong."""
    if not isinstance(spec, Mapping):
        raise InvalidInputError(f"a store spec must be an object, got {type(spec).__name__}")
    kind = spec.get("kind")
    required = {"embedded": ("path",), "opensearch": ("url", "index")}.get(kind)  # type: ignore[arg-type]
    if required is None:
        raise InvalidInputError(f"store spec kind must be 'embedded' or 'opensearch', got {kind!r}")
    for key in required:
        if not isinstance(spec.get(key), str) or not spec[key]:
            raise InvalidInputError(f"{kind} store spec needs a non-empty string {key!r}")
    return {"kind": kind, **{k: spec[k] for k in required}}


def spec_label(spec: Mapping[str, Any]) -> str:
    spec = validate_spec(spec)
    return spec["path"] if spec["kind"] == "embedded" else f"{spec['url']}/{spec['index']}"


def _bulk_embedded_store_class():
    from sdr_search.indexer.embedded import EmbeddedStore

    class BulkEmbeddedStore(EmbeddedStore):
        """An :class:`EmbeddedStore` for bulk writers: ``put`` does not maintain the FAISS index.

        The FAISS index is a cache of the vector file that the store catches up on first use.
        Maintained by every worker process, each would insert every row of every worker into its
        own in-memory HNSW graph (a share of the encoder's time per worker that multiplies with the
        workers: docs/results/indexing.md, "The FAISS index"). A bulk load builds it once at the
        end instead (:meth:`build_ann`, multi-threaded for large additions).

        TODO(sdr_search.indexer.embedded): this overrides two private methods; replace it with a public
        ``EmbeddedStore(..., maintain_ann=False)`` and ``build_ann()`` when the store has them.
        Correctness never depends on it: without the override put() maintains FAISS as usual.
        """

        def _after_append(self, conn, start: int) -> None:  # noqa: D401 - see the class docstring
            return

        def build_ann(self) -> int:
            """Bring ``faiss.index`` up to date with every committed row and save it; returns its rows."""
            with self._writing() as conn:
                if self._row_map().committed == 0:
                    return 0
                index = self._faiss(prior_rows=0)
                self._save_faiss(conn)
                return int(index.ntotal)

    return BulkEmbeddedStore


def open_store_spec(spec: Mapping[str, Any], *, create: bool = False, bulk: bool = False):
    """Open (lazily: nothing connects until first use) the store named by ``spec``.

    ``create`` creates a missing embedded store; workers never pass it, so a worker that does not
    see the directory (another machine, no shared disk) fails loudly instead of indexing into a
    private copy. ``bulk`` (workers): an embedded store that leaves its FAISS index to be built
    once at the end (``build_ann()``). An OpenSearch store creates its index on first write.
    """
    spec = validate_spec(spec)
    if spec["kind"] == "embedded":
        if bulk:
            return _bulk_embedded_store_class()(Path(spec["path"]), create=create)
        from sdr_search.indexer.embedded import EmbeddedStore

        return EmbeddedStore(Path(spec["path"]), create=create)
    from sdr_search.indexer.opensearch import OpenSearchSettings, OpenSearchStore

    return OpenSearchStore(spec["url"], index=spec["index"], settings=OpenSearchSettings())
