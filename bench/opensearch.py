"""The OpenSearch backend against the embedded store, side by side in one run, on the same documents.

Both stores are filled here from one embedded store (``--store``, e.g. what ``sdr index`` built
for IRLeD): its documents, sentence vectors, per-document statistics and reference sample are read
into memory once, then written with ``put()`` in batches of ``--batch-docs`` into a new embedded
store and into a new index on an OpenSearch node (``--url``). No encoder runs while writing, so
the encoder is not what is timed. Then, in this order:

1. **Bulk indexing throughput** (sentences/s): the ``put()`` calls, as ``sdr index`` /
   ``sdr reindex`` make them. Node: with the store's refresh policy (``SDR_OPENSEARCH_REFRESH``,
   ``wait_for`` by default), then also until a refresh returns and no merge runs any more (the
   HNSW graphs of merged segments are rebuilt in the background). Embedded: its FAISS HNSW is
   added to inside ``put()``; ``close()`` saves it (shown apart).
2. **Index size on disk** per million sentences, statistics and reference sample included: the
   node's document index plus its state index (``_stats`` store size of the primaries, flushed,
   no merge running; with the document index's Lucene file types) and the embedded store's
   directory (``store.sqlite``, ``vectors.float32``, ``faiss.index``; no lexical index, which
   ``sdr index`` adds: docs/results/opensearch.md, "Size on disk").
3. **Fidelity** on IRLeD dev (``--queries``, new text; statistics from the reference sample,
   identical in both stores): the fraction of the exhaustive SDR top-10 (every document, the same
   statistics; ``bench/two_stage.py``'s ``exhaustive_top``) found in the engine's two-stage
   top-10 (method ``sdr``: nested k-NN, centroid pre-rank, exact rerank of K = ``--candidates``),
   per store, and the overlap of the two stores' top-10s.
4. **Latency** of ``more_like_this`` (method ``sdr``, K = 100, engine defaults otherwise) **by id**,
   for ``--latency-queries`` indexed sources of 150-250 sentences, and **by text**, for the first
   ``--max-queries`` of ``--queries`` as new text (their vectors from the embedding cache, given to
   the engine pre-encoded, so the encoder is not timed; ``--skip-latency-text``: by id only). The ways
   alternate query by query (round n: the n-th id source through every way, then the n-th text
   source), each query after a pause of ``--pause-ms`` (a thread team of the previous way, e.g. numpy's
   BLAS threads, which spin for a while after each product, would otherwise share the 2 cores with the
   next way's node: measured, the engine on the plugin by id at 181 ms right after an embedded query
   against 151 after a 0.5 s pause): p50 / p99 of the whole call and of the engine's stages (``timings_ms``: source =
   resolving the source (by id: reading its vectors and statistics; by text: its statistics against
   the reference sample), candidates = nested k-NN + aggregation (on the plugin: one search),
   prerank = paragraph centroids + fusion (on the plugin: exact SDR of the pool on the node), fetch,
   rerank, snippets = the presented hits (their vectors read); ``other`` = the rest). For the node,
   every HTTP request is recorded (which store method sent it, time on the wire, response bytes,
   JSON decoding), so the table says which request the time goes to. ``--fidelity-by-id``: also
   each way's top-10 against the exhaustive SDR top-10 of the same sources, by id and by text.
   ``--latency-after`` says whether this runs on the node's index as written, after ``--force-merge
   N`` (the index force-merged to N segments, timed, size measured again: Lucene searches every
   segment's HNSW graph separately), or both (default).

With ``--json`` every measurement is written after each section and each latency round, so a run
cut short leaves what it measured; ``--report-from`` prints the tables of such a file.

``--recovery-source-excludes`` (a variant, not the product's mapping): the node's index is
created with ``_source.recovery_source_excludes: ["sentences.vector"]`` as well. On 2.x, with
``_source.excludes`` alone, OpenSearch still stores the whole source, JSON float vectors included,
as ``_recovery_source`` until merges prune it (OpenSearch 2.15+ documents the setting for k-NN
fields); this measures what leaving the vectors out of it changes in throughput and size.

Without ``--store`` an embedded store of the first ``--docs`` IRLeD documents is built in the
work directory from the embedding cache (``bench/two_stage.py``'s ``build_store``; encodes what
the cache lacks). ``--docs N`` with ``--store`` takes its first N documents (a development slice).
The node's index is deleted at the start and, unless ``--keep-index``, at the end.

Start a node with ``SDR_NODE_PORT=9220 SDR_NODE_HEAP=4g scripts/opensearch-node.sh start``.
Usage: python bench/opensearch.py --url http://127.0.0.1:9220 --store /tmp/bench/irled-store
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from two_stage import DATA, build_store, dir_mb, exhaustive_top  # noqa: E402

import sdr_search.indexer.opensearch.indices as opensearch_indices  # noqa: E402
from sdr_search.indexer.embedded import EmbeddedStore  # noqa: E402
from sdr_search.indexer.opensearch import OpenSearchStore  # noqa: E402
from sdr_search.indexer.opensearch.settings import OpenSearchSettings  # noqa: E402
from sdr_search.indexer.settings import EmbeddedStoreSettings  # noqa: E402
from sdr_search.indexer.store import DocumentStore, ReferenceParagraphs, StatsInfo  # noqa: E402
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query  # noqa: E402
from sdr_search.core.cache import EmbeddingCache  # noqa: E402
from sdr_search.core.documents import Document, read_documents  # noqa: E402
from sdr_search.core.embed import embed_documents  # noqa: E402
from sdr_search.core.encoder import SentenceEncoder  # noqa: E402
from sdr_search.core.scoring import NormStats, rank  # noqa: E402
from sdr_search.core.settings import CacheSettings  # noqa: E402
from sdr_search.core.vectors import DocVectors  # noqa: E402

logger = logging.getLogger("bench.opensearch")

STAGES = ("candidates", "prerank", "fetch", "rerank")
ALL_STAGES = ("source", *STAGES, "snippets")  # source: resolving the query's source (by id: its vectors and
# statistics read from the store); snippets: the presented hits' titles, metadata and snippets (their vectors read)
MODES = ("id", "text")  # latency by indexed id, and by new text (pre-encoded: the encoder is not timed)


# =============================================================================================
# the documents both stores are filled with
# =============================================================================================
@dataclass
class Corpus:
    """Everything read from the source store: documents with vectors, statistics, reference."""

    items: list[tuple[Document, DocVectors]]
    stats: dict[str, NormStats]
    reference: ReferenceParagraphs | None
    stats_info: StatsInfo
    meta: Any  # IndexMeta

    @property
    def sentences(self) -> int:
        return sum(v.n_sentences for _, v in self.items)


def read_corpus(store: EmbeddedStore, limit: int | None) -> Corpus:
    ids = list(itertools.islice(store.iter_ids(), limit))
    items, stats = [], {}
    for doc_id in ids:
        stored = store.get(doc_id)  # vectors copied out of the memory map
        items.append((stored.document, stored.vectors))
        if stored.stats is not None:
            stats[doc_id] = stored.stats
    return Corpus(items, stats, store.reference(), store.stats_info(), store.meta())


def wait_for_stats(corpus: Corpus, path: Path, poll: float = 30, timeout: float = 3600) -> None:
    """``--wait-for-stats``: the source store's statistics were still being computed when its documents
    were read (``sdr index`` writes them last, in one transaction); wait until it has them for every
    document, then read them and its reference sample into ``corpus``. Nothing timed runs meanwhile
    but the writes, which need no statistics."""
    t0 = time.perf_counter()
    while True:
        source = EmbeddedStore(path, read_only=True)
        try:
            info = source.stats_info()
            if not info.stale and not info.docs_without_stats:
                corpus.stats = {d.id: stats for d, _ in corpus.items if (stats := source.get(d.id).stats) is not None}
                corpus.reference, corpus.stats_info = source.reference(), info
                logger.info("statistics of the source store read (%d documents) after waiting %.0f s",
                            len(corpus.stats), time.perf_counter() - t0)
                return
        finally:
            source.close()
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"{path}: statistics still missing after {timeout:.0f} s")
        logger.info("waiting for the source store's statistics (%d documents without)", info.docs_without_stats)
        time.sleep(poll)


def copy_stats(corpus: Corpus, store: DocumentStore) -> None:
    """The source's reference sample and per-document statistics, as ``sdr stats`` wrote them."""
    if corpus.reference is not None:
        store.set_reference(corpus.reference)
    info = corpus.stats_info
    store.write_stats(corpus.stats, mode=info.mode or "sampled", sample_size=info.sample_size, seed=info.seed)


def batches(items: Sequence[Any], n: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


# =============================================================================================
# the node: HTTP requests recorded, waiting for merges, sizes
# =============================================================================================
@dataclass
class RequestLog:
    """Every HTTP request an :class:`OpenSearchStore` sends: which store method sent it, the time
    on the wire (request sent -> response read), the time to JSON-decode it, response bytes."""

    rows: list[tuple[str, str, float, float, int]] = field(default_factory=list)  # caller, path, wire, decode, bytes
    _pending: list[tuple[float, int]] = field(default_factory=list)

    def install(self, client: Any) -> None:
        transport = client.transport
        connection = transport.get_connection()
        send, perform = connection.perform_request, transport.perform_request

        def timed_send(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            status, headers, data = send(*args, **kwargs)
            self._pending.append((time.perf_counter() - t, len(data or b"")))
            return status, headers, data

        def timed_perform(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return perform(method, url, *args, **kwargs)
            finally:
                total = time.perf_counter() - t
                wire, size = self._pending.pop() if self._pending else (total, 0)
                path = "/".join(p for p in url.split("?")[0].split("/") if p.startswith("_")) or url
                self.rows.append((caller(), f"{method} {path}", wire * 1e3, (total - wire) * 1e3, size))

        connection.perform_request = timed_send
        transport.perform_request = timed_perform

    def mark(self) -> int:
        return len(self.rows)

    def since(self, mark: int) -> list[tuple[str, str, float, float, int]]:
        return self.rows[mark:]


def caller() -> str:
    """The store method that sent the current request: the outermost frame in ``indexer/`` below the
    engine or the bench (e.g. ``sentence_knn``, ``sdr_candidates``, ``sdr_scores``, ``fetch_documents``;
    the store's retry and its closures, in between, are skipped)."""
    frame = sys._getframe(2)
    name = "?"
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if "/reranker/" in path or path.endswith("bench/opensearch.py"):
            break
        if "/indexer/" in path and not frame.f_code.co_name.startswith(("_", "<")) and frame.f_code.co_name != "once":
            name = frame.f_code.co_name
        frame = frame.f_back
    return name


def wait_for_merges(os_store: OpenSearchStore, index: str, poll: float = 0.5, timeout: float = 3600) -> None:
    """Refresh, then wait until the index has no running merge (twice in a row)."""
    client = os_store._os()
    client.indices.refresh(index=index)
    quiet, t0 = 0, time.perf_counter()
    while quiet < 2:
        merges = client.indices.stats(index=index, metric="merge")["_all"]["primaries"]["merges"]
        quiet = quiet + 1 if merges["current"] == 0 else 0
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"merges of {index} still running after {timeout:.0f} s")
        time.sleep(poll)


def node_sizes(os_store: OpenSearchStore, index: str, state: str) -> dict[str, Any]:
    """Store size of the two indices' primaries, once flushed and no merge runs (files of merged-away
    segments are deleted after the commit and a refresh), and the Lucene file types of the document index."""
    client = os_store._os()
    client.indices.flush(index=f"{index},{state}")
    wait_for_merges(os_store, index)
    client.indices.flush(index=f"{index},{state}")
    client.indices.refresh(index=f"{index},{state}")
    stats = client.indices.stats(index=f"{index},{state}", metric="store,docs,segments",
                                 params={"include_segment_file_sizes": "true"})["indices"]
    doc, st = stats[index]["primaries"], stats[state]["primaries"]
    files = {k: v["size_in_bytes"] for k, v in doc["segments"].get("file_sizes", {}).items()}
    return {"index_bytes": doc["store"]["size_in_bytes"], "state_bytes": st["store"]["size_in_bytes"],
            "segments": doc["segments"]["count"], "lucene_docs": doc["docs"]["count"], "files": files}


def force_merge(os_store: OpenSearchStore, index: str, segments: int) -> float:
    """``_forcemerge`` to ``segments`` segments, then wait for merges; seconds."""
    client = os_store._os()
    t = time.perf_counter()
    client.indices.forcemerge(index=index, params={"max_num_segments": segments, "request_timeout": 3600})
    wait_for_merges(os_store, index)
    return time.perf_counter() - t


@contextmanager
def recovery_source_excluded(enabled: bool) -> Iterator[None]:
    """While active, indices the store creates also leave the sentence vectors out of
    ``_recovery_source`` (bench variant; the product mapping is unchanged)."""
    if not enabled:
        yield
        return
    original = opensearch_indices.build_index_body

    def patched(*args: Any, **kwargs: Any) -> dict[str, Any]:
        body = original(*args, **kwargs)
        source = body["mappings"].get("_source")
        if source is not None and "excludes" in source:
            source["recovery_source_excludes"] = list(source["excludes"])
        return body

    opensearch_indices.build_index_body = patched
    try:
        yield
    finally:
        opensearch_indices.build_index_body = original


def node_description(os_store: OpenSearchStore, index: str) -> str:
    client = os_store._os()
    info = client.info()
    jvm = next(iter(client.nodes.stats(metric="jvm")["nodes"].values()))["jvm"]["mem"]
    mapping = client.indices.get_mapping(index=index)[index]["mappings"]
    sdr = mapping.get("_meta", {}).get("sdr", {})
    hnsw = sdr.get("hnsw", {})
    return (f"OpenSearch {info['version']['number']} (heap {jvm['heap_max_in_bytes'] / 2**30:.0f} GiB), k-NN engine "
            f"{sdr.get('engine')}, {sdr.get('space_type')}, HNSW m={hnsw.get('m')} ef_construction="
            f"{hnsw.get('ef_construction')} ef_search={os_store.settings.hnsw_ef_search}")


# =============================================================================================
# sections
# =============================================================================================
def timed_puts(store: DocumentStore, items: Sequence[tuple[Document, DocVectors]], batch: int, name: str) -> float:
    total, done, t0 = 0.0, 0, time.perf_counter()
    for chunk in batches(items, batch):
        t = time.perf_counter()
        store.put(chunk)
        total += time.perf_counter() - t
        done += len(chunk)
        if time.perf_counter() - t0 > 30 or done == len(items):
            logger.info("%s: %d / %d documents written, %.0f s in put()", name, done, len(items), total)
            t0 = time.perf_counter()
    return total


def fill(args, corpus: Corpus, work: Path) -> tuple[EmbeddedStore, dict[str, OpenSearchStore], dict[str, Any]]:
    """Section 1 and 2: write the corpus into every store (timed), measure their sizes, copy the statistics.
    Node stores: ``opensearch`` (the Python path: SDR_OPENSEARCH_PLUGIN=off, so the base64 copy and a k-NN
    query per source sentence), and with ``--plugin`` also ``plugin`` (a second index on the same node,
    created and queried through the node's sdr plugin: vectors stored once)."""
    out: dict[str, Any] = {"sentences": corpus.sentences, "documents": len(corpus.items), "node": {}}
    path = work / "embedded"
    if path.exists():
        shutil.rmtree(path)
    emb = EmbeddedStore(path, create=True)
    emb.ensure_meta(corpus.meta)
    out["embedded_put_s"] = timed_puts(emb, corpus.items, args.batch_docs, "embedded")
    t = time.perf_counter()
    emb.close()  # saves faiss.index
    out["embedded_close_s"] = time.perf_counter() - t

    nodes: dict[str, OpenSearchStore] = {} if args.plugin_only else {
        "opensearch": OpenSearchStore(args.url, index=args.index,
                                      settings=OpenSearchSettings(plugin="off") if args.plugin else None)}
    if args.plugin or args.plugin_only:
        nodes["plugin"] = OpenSearchStore(args.url, index=f"{args.index}-plugin", settings=OpenSearchSettings(plugin="on"))
    for label, os_store in nodes.items():
        os_store.drop()
        with recovery_source_excluded(args.recovery_source_excludes):
            os_store.ensure_meta(corpus.meta)
        name = os_store.index_name
        mapping = os_store._os().indices.get_mapping(index=name)[name]["mappings"]
        node: dict[str, Any] = {"source_mapping": mapping.get("_source"),
                                "vectors": mapping.get("_meta", {}).get("sdr", {}).get("vectors", "b64")}
        node["put_s"] = timed_puts(os_store, corpus.items, args.batch_docs, label)
        t = time.perf_counter()
        wait_for_merges(os_store, name)
        node["settle_s"] = time.perf_counter() - t
        node["description"] = node_description(os_store, name)
        out["node"][label] = node
    out["refresh"] = next(iter(nodes.values())).settings.refresh

    if args.wait_for_stats and (corpus.stats_info.stale or corpus.stats_info.docs_without_stats):
        wait_for_stats(corpus, args.store)
    emb = EmbeddedStore(path)
    copy_stats(corpus, emb)
    emb.close()  # sizes with statistics and reference sample, the SQLite WAL checkpointed
    out["embedded_bytes"] = dir_mb(path) * 1e6
    out["embedded_files"] = {p.name: p.stat().st_size for p in sorted(path.iterdir()) if p.is_file()}
    for label, os_store in nodes.items():
        copy_stats(corpus, os_store)
        name = os_store.index_name
        out["node"][label].update(node_sizes(os_store, name, f"{name}-sdr-state"))
    emb = EmbeddedStore(path)
    for store in (emb, *nodes.values()):
        info = store.stats_info()
        if info.stale or info.docs_without_stats:
            logger.warning("%r: statistics stale=%s, %d documents without", store, info.stale, info.docs_without_stats)
    return emb, nodes, out


# =============================================================================================
# the ways of answering a query: the engine on a store, or the plugin path
# =============================================================================================
Runner = Callable[[Query], tuple[list[str], dict[str, float]]]


def engine_runner(engine: MoreLikeThis) -> Runner:
    def run(query: Query) -> tuple[list[str], dict[str, float]]:
        res = engine.run(query)
        return [h.id for h in res.hits], dict(res.timings_ms)
    return run


def plugin_runner(engine: MoreLikeThis, store: OpenSearchStore, pool: int) -> Runner:
    """``more_like_this`` (method sdr, one like source) through the node's sdr plugin, as the engine is
    to run it once wired (issue 33 item 4): the source as the engine reads it (by id: the document's
    vectors through the plugin's vector fetch, its statistics), then ``store.sdr_candidates`` (the
    candidate stage on the node: one search; the engine's knn_k and aggregation) for the best ``pool``
    documents, then ``store.sdr_scores`` (exact SDR of all of them on the node: one search), ranked
    by score (ties by id). No centroid pre-rank: the pool is scored exactly."""
    settings = engine.settings

    def run(query: Query) -> tuple[list[str], dict[str, float]]:
        t0 = time.perf_counter()
        src = engine.source(query)
        t1 = time.perf_counter()
        exclude = [src.indexed_id] if src.indexed_id else []
        ids, _ = store.sdr_candidates(src.vectors, settings.knn_k, pool, stats=src.stats,
                                      aggregation=settings.aggregation, exclude_ids=exclude)
        t2 = time.perf_counter()
        scored = store.sdr_scores([(src.vectors, src.stats)], ids)
        t3 = time.perf_counter()
        order = rank(ids, scored.scores[0])[: query.size]
        return [ids[i] for i in order], {"source": (t1 - t0) * 1e3, "candidates": (t2 - t1) * 1e3,
                                         "rerank": (t3 - t2) * 1e3}
    return run


def one_blas_thread(run: Runner) -> Runner:
    """``run`` with numpy's BLAS on one thread (threadpoolctl): on a machine busy with other work, its
    default thread team waits for descheduled threads (the embedded rerank's p50 went from about 100 ms
    to 1.2 s at load 7 with 2 threads)."""
    from threadpoolctl import threadpool_limits

    def limited(query: Query) -> tuple[list[str], dict[str, float]]:
        with threadpool_limits(1):
            return run(query)
    return limited


def runners(emb: EmbeddedStore, nodes: dict[str, OpenSearchStore], pools: Sequence[int], K: int,
            encoder: Any = None, blas1: bool = False) -> dict[str, Runner]:
    settings = MLTSettings(candidates=K, method="sdr")
    out: dict[str, Runner] = {"embedded": engine_runner(MoreLikeThis(store=emb, encoder=encoder, settings=settings))}
    if "opensearch" in nodes:
        out["opensearch"] = engine_runner(MoreLikeThis(store=nodes["opensearch"], encoder=encoder, settings=settings))
    if "plugin" in nodes:
        engine = MoreLikeThis(store=nodes["plugin"], encoder=encoder, settings=settings)
        out["plugin-engine"] = engine_runner(engine)  # the engine's in-store path (SDR_IN_STORE, issue 33 item 4)
        for pool in pools:
            out[f"plugin-{pool}"] = plugin_runner(engine, nodes["plugin"], pool)
    if blas1:
        out["embedded-blas1"] = one_blas_thread(engine_runner(MoreLikeThis(store=emb, encoder=encoder, settings=settings)))
    return out


def fidelity(args, emb: EmbeddedStore, nodes: dict[str, OpenSearchStore], encoder, cache) -> dict[str, Any]:
    """Section 3: two-stage top-10 vs exhaustive SDR, on new-text queries, per store and K."""
    queries = list(itertools.islice(read_documents(args.queries), args.max_queries))
    pairs = list(embed_documents(queries, encoder, cache=cache))
    corpus = emb.all_vectors()
    out: dict[str, Any] = {"queries": len(pairs), "rows": []}
    base = {name: MoreLikeThis(store=s, encoder=encoder) for name, s in {"embedded": emb, **nodes}.items()}
    queries_, truth = [], []
    for d, v in pairs:
        query = Query(document=d, vectors=v, size=10, method="sdr")
        src = {name: e.source(query) for name, e in base.items()}
        for name in nodes:
            a, b = src["embedded"].stats, src[name].stats
            if not (np.allclose(a.mu, b.mu) and np.allclose(a.sigma, b.sigma)):
                raise RuntimeError(f"query {d.id}: the stores give different statistics (reference samples differ)")
        queries_.append(query)
        truth.append(set(exhaustive_top(base["embedded"], src["embedded"], corpus)))
    for K in args.candidates:
        ways = runners(emb, nodes, [p * K // 100 for p in args.plugin_pools], K, encoder)
        recall: dict[str, list[float]] = defaultdict(list)
        ms: dict[str, list[float]] = defaultdict(list)
        agree: dict[str, list[float]] = defaultdict(list)
        for n, (query, true) in enumerate(zip(queries_, truth), 1):
            tops = {}
            for name, run in ways.items():
                t = time.perf_counter()
                top, _ = run(query)
                ms[name].append((time.perf_counter() - t) * 1e3)
                tops[name] = set(top)
                recall[name].append(len(tops[name] & true) / max(1, len(true)))
            for name in ways:
                agree[name].append(len(tops["embedded"] & tops[name]) / 10)
            logger.info("fidelity K=%d: query %d/%d, recall %s", K, n, len(queries_),
                        " / ".join(f"{name} {recall[name][-1]:.1f}" for name in ways))
        out["rows"].append({"K": K, "ways": {name: {"recall": float(np.mean(recall[name])), "min": float(np.min(recall[name])),
                                                    "ms_p50": float(np.median(ms[name])),
                                                    "agreement": float(np.mean(agree[name]))} for name in ways}})
    return out


def latency_sources(args, corpus: Corpus) -> list[str]:
    """The indexed sources of the by-id latency: ``--latency-queries`` documents of 150-250 sentences."""
    rng = np.random.default_rng(1)
    pool = [d.id for d, v in corpus.items if 150 <= v.n_sentences <= 250]
    return [pool[i] for i in rng.choice(len(pool), size=min(args.latency_queries, len(pool)), replace=False)]


def text_sources(args, encoder, cache) -> list[tuple[Document, DocVectors]]:
    """The new-text sources of the by-text latency: the first ``--max-queries`` of ``--queries``
    (IRLeD dev), their vectors from the embedding cache (the encoder runs only for what it lacks,
    before anything is timed)."""
    queries = list(itertools.islice(read_documents(args.queries), args.max_queries))
    return list(embed_documents(queries, encoder, cache=cache))


def exhaustive_truth(emb: EmbeddedStore, ids: Sequence[str], texts: Sequence[tuple[Document, DocVectors]]
                     ) -> dict[tuple[str, str], set[str]]:
    """The exhaustive SDR top-10 (every document, the store's statistics) of each source, by mode."""
    every = emb.all_vectors()
    reference = MoreLikeThis(store=emb)
    truth: dict[tuple[str, str], set[str]] = {}
    t = time.perf_counter()
    for doc_id in ids:
        truth["id", doc_id] = set(exhaustive_top(reference, reference.source(Query(id=doc_id, size=10)), every))
    for d, v in texts:
        query = Query(document=d, vectors=v, size=10, method="sdr")
        truth["text", d.id] = set(exhaustive_top(reference, reference.source(query), every))
    logger.info("exhaustive SDR top-10 of %d + %d sources in %.0f s", len(ids), len(texts), time.perf_counter() - t)
    return truth


def latency(args, emb: EmbeddedStore, nodes: dict[str, OpenSearchStore], corpus: Corpus, log: RequestLog,
            picks: Sequence[str], texts: Sequence[tuple[Document, DocVectors]],
            truth: dict[tuple[str, str], set[str]],
            on_round: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Section 4: more_like_this by id (``picks``) and by new text (``texts``, pre-encoded), the ways
    alternating query by query (round n: the n-th id source through every way, then the n-th text
    source through every way); with ``truth`` also each way's top-10 against the exhaustive SDR top-10.
    ``on_round`` is given what is measured so far after every round (the bench saves it)."""
    ways = runners(emb, nodes, args.plugin_pools, 100, blas1=args.embedded_blas1)
    queries: dict[str, list[tuple[str, Query]]] = {
        "id": [(doc_id, Query(id=doc_id, size=10)) for doc_id in picks],
        "text": [(d.id, Query(document=d, vectors=v, size=10, method="sdr")) for d, v in texts]}
    sentences = {"id": [next(v.n_sentences for d, v in corpus.items if d.id == i) for i in picks],
                 "text": [v.n_sentences for _, v in texts]}
    for run in ways.values():  # warm up (the embedded store computes its centroids here)
        for mode in MODES:
            for _, query in queries[mode][:2]:
                run(query)
    parts = {m: {name: defaultdict(list) for name in ways} for m in MODES}
    recall: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in MODES}
    requests: dict[str, dict[str, list[Any]]] = {m: defaultdict(list) for m in MODES}
    rounds = max(len(q) for q in queries.values())

    def summary() -> dict[str, Any]:  # what is measured so far
        done = {m: len(parts[m]["embedded"]["total"]) for m in MODES}
        return {"sources": done,
                "source_sentences": {m: [int(min(s)), int(np.median(s)), int(max(s))] if s else [0, 0, 0]
                                     for m, s in ((m, sentences[m][: done[m]]) for m in MODES)},
                "parts": {m: {w: {k: list(v) for k, v in p.items()} for w, p in parts[m].items()} for m in MODES},
                "requests": {m: dict(r) for m, r in requests.items()},
                "recall": {m: {k: [float(np.mean(v)), float(np.min(v))] for k, v in r.items()} for m, r in recall.items()},
                "load": os.getloadavg()}

    for n in range(rounds):
        for mode in MODES:
            if n >= len(queries[mode]):
                continue
            key, query = queries[mode][n]
            for name, run in ways.items():
                time.sleep(args.pause_ms / 1e3)
                mark = log.mark()
                t = time.perf_counter()
                top, stages = run(query)
                total = (time.perf_counter() - t) * 1e3
                p = parts[mode][name]
                p["total"].append(total)
                for stage in ALL_STAGES:
                    p[stage].append(stages.get(stage, 0.0))
                p["other"].append(total - sum(stages.get(s, 0.0) for s in ALL_STAGES))
                if not name.startswith("embedded"):
                    requests[mode][name].append(log.since(mark))
                if (mode, key) in truth:
                    true = truth[mode, key]
                    recall[mode][name].append(len(set(top) & true) / max(1, len(true)))
        logger.info("latency: %d/%d rounds", n + 1, rounds)
        if on_round is not None:
            on_round(summary())
    return summary()


# =============================================================================================
# report
# =============================================================================================
def per_million(nbytes: float, sentences: int) -> float:
    return nbytes / 1e6 / (sentences / 1e6)


def report(fill_out: dict[str, Any], fid: dict[str, Any] | None, lats: list[tuple[str, dict[str, Any]]],
           merged: dict[str, Any] | None, emb_settings) -> None:
    n = fill_out["sentences"]
    nodes = fill_out["node"]
    print(f"\n== corpus: {fill_out['documents']} documents, {n:,} sentences; node: {next(iter(nodes.values()))['description']}; "
          f"embedded: faiss HNSW M={emb_settings.hnsw_m} efConstruction={emb_settings.hnsw_ef_construction} "
          f"efSearch={emb_settings.hnsw_ef_search}")
    labels = ["embedded", *nodes]
    head = "".join(f"{label:>14}" for label in labels)

    print("\n== bulk indexing (put() in batches; vectors given, no encoder), sentences/s")
    emb_put, emb_all = fill_out["embedded_put_s"], fill_out["embedded_put_s"] + fill_out["embedded_close_s"]
    print(f"{'':44}{head}")
    print(f"{'put() calls: seconds':44}{emb_put:14.1f}" + "".join(f"{nodes[k]['put_s']:14.1f}" for k in nodes))
    print(f"{'put() calls: sentences/s':44}{n / emb_put:14,.0f}" + "".join(f"{n / nodes[k]['put_s']:14,.0f}" for k in nodes))
    print(f"{'until searchable and settled: sentences/s':44}{n / emb_all:14,.0f}"
          + "".join(f"{n / (nodes[k]['put_s'] + nodes[k]['settle_s']):14,.0f}" for k in nodes))
    print(f"(node refresh policy {fill_out['refresh']!r}; segments after merges: "
          + ", ".join(f"{k} {v['segments']}" for k, v in nodes.items()) + ")")

    print("\n== size on disk (statistics and reference sample included; node: document index + state index)")
    emb_b = fill_out["embedded_bytes"]
    print(f"{'':44}{head}")
    sizes = {k: v["index_bytes"] + v["state_bytes"] for k, v in nodes.items()}
    print(f"{'MB, as written':44}{emb_b / 1e6:14,.0f}" + "".join(f"{sizes[k] / 1e6:14,.0f}" for k in nodes))
    print(f"{'MB per million sentences':44}{per_million(emb_b, n):14,.0f}"
          + "".join(f"{per_million(sizes[k], n):14,.0f}" for k in nodes))
    print(f"{'ratio to the embedded store':44}{1:14.2f}" + "".join(f"{sizes[k] / emb_b:14.2f}" for k in nodes))
    if merged is not None:
        m = {k: v["index_bytes"] + v["state_bytes"] for k, v in merged["node"].items()}
        print(f"{'MB after _forcemerge to 1 segment':44}{emb_b / 1e6:14,.0f}" + "".join(f"{m[k] / 1e6:14,.0f}" for k in nodes))
        print(f"{'ratio to the embedded store, merged':44}{1:14.2f}" + "".join(f"{m[k] / emb_b:14.2f}" for k in nodes))
        print("force merge seconds: " + ", ".join(f"{k} {v['seconds']:.0f}" for k, v in merged["node"].items()))
    print(f"raw float32 vectors: {per_million(n * 384 * 4, n):,.0f} MB per million sentences")
    print("embedded files: " + ", ".join(f"{k}={v / 1e6:,.0f}MB" for k, v in fill_out["embedded_files"].items()))
    for k, v in nodes.items():
        print(f"node {k} (vectors: {v['vectors']}; _source {json.dumps(v['source_mapping'])}): state index "
              f"{v['state_bytes'] / 1e6:,.0f} MB; Lucene files as written: " + ", ".join(
                  f"{f}={b / 1e6:,.0f}MB" for f, b in sorted(v["files"].items(), key=lambda kv: -kv[1]) if b >= 1e6))
        if merged is not None:
            mv = merged["node"][k]
            print("  merged: " + ", ".join(f"{f}={b / 1e6:,.0f}MB" for f, b in
                                           sorted(mv["files"].items(), key=lambda kv: -kv[1]) if b >= 1e6))

    if fid is not None:
        print(f"\n== fidelity: exhaustive SDR top-10 found in the two-stage top-10 ({fid['queries']} new-text queries, "
              f"statistics from the reference sample); plugin-N: the node's plugin, exact SDR of the best N candidates")
        for r in fid["rows"]:
            print(f"K = {r['K']}")
            print(f"{'':14} {'recall':>8} {'worst':>7} {'agree w/ emb':>13} {'ms p50':>8}")
            for name, w in r["ways"].items():
                print(f"{name:14} {w['recall']:8.3f} {w['min']:7.1f} {w['agreement']:13.3f} {w['ms_p50']:8.0f}")

    for label, lat in lats:
        for mode in MODES:
            if lat["sources"].get(mode):
                latency_table(label, lat, mode)


def latency_table(label: str, lat: dict[str, Any], mode: str) -> None:
    """One latency section's table for one mode (by id / by text): p50 / p99 of the call and of each
    stage per way, ratios to the faster embedded way, fidelity, and the node requests per query."""
    lo, med, hi = lat["source_sentences"][mode]
    parts = lat["parts"][mode]
    ways = list(parts)
    what = "by id, indexed sources" if mode == "id" else "by text, new-text sources (IRLeD dev queries, pre-encoded)"
    print(f"\n== latency, node index {label}: more_like_this {what}, method sdr, K=100, {lat['sources'][mode]} sources of "
          f"{lo}-{hi} sentences (median {med}); the ways alternate query by query; ms p50 / p99; load average "
          f"{' '.join(f'{x:.1f}' for x in lat['load'])}")
    print(f"{'':12}" + "".join(f"{w:>20}" for w in ways))
    for part in ("total", *ALL_STAGES, "other"):
        if any(np.percentile(np.asarray(parts[w][part]), 99) > 0 for w in ways):
            print(f"{part:12}" + "".join(f"{np.percentile(parts[w][part], 50):9.1f} /{np.percentile(parts[w][part], 99):8.1f}"
                                         .rjust(20) for w in ways))
    base = "embedded-blas1" if "embedded-blas1" in parts and np.percentile(
        parts["embedded-blas1"]["total"], 50) < np.percentile(parts["embedded"]["total"], 50) else "embedded"
    e = np.asarray(parts[base]["total"])
    print(f"(ratios to the faster embedded way: {base})")
    print(f"{'ratio p50/p99':12}" + "".join(
        f"{np.percentile(parts[w]['total'], 50) / np.percentile(e, 50):9.2f}x/{np.percentile(parts[w]['total'], 99) / np.percentile(e, 99):7.2f}x"
        .rjust(20) for w in ways))
    recall = lat["recall"][mode]
    if recall:
        print(f"{'top-10 fid.':12}" + "".join(f"{recall[w][0]:9.3f} /{recall[w][1]:8.1f}".rjust(20) for w in ways)
              + f"   (mean / worst vs exhaustive SDR, {what.split(',')[0]})")
    print(f"\nnode requests per query {what.split(',')[0]} (median over queries): way, store method, request, count, "
          "wire ms, JSON decode ms, response MB")
    for way, per_query in lat["requests"][mode].items():
        grouped: dict[tuple[str, str], list[list[float]]] = defaultdict(list)
        for rows in per_query:
            per: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0])
            for who, path, wire, decode, size in rows:
                acc = per[who, path]
                acc[0] += 1
                acc[1] += wire
                acc[2] += decode
                acc[3] += size
            for key, acc in per.items():
                grouped[key].append(acc)
        for (who, path), accs in sorted(grouped.items(), key=lambda kv: -np.median([a[1] for a in kv[1]])):
            a = np.asarray(accs, dtype=np.float64)
            print(f"{way:>14} {who:>22} {path:>18} {np.median(a[:, 0]):6.0f} {np.median(a[:, 1]):9.1f} "
                  f"{np.median(a[:, 2]):10.1f} {np.median(a[:, 3]) / 1e6:8.2f}")
    for way, per_query in lat["requests"][mode].items():  # the order they are sent in (the median query)
        if per_query:
            one = per_query[int(np.argsort([sum(r[2] for r in rows) for rows in per_query])[len(per_query) // 2])]
            print(f"{way}: {len(one)} requests of one query (the median by wire time), in order: " + ", ".join(
                f"{who} {path} {wire:.1f} ms" for who, path, wire, _, _ in one))


# =============================================================================================
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=OpenSearchSettings().url,
                    help="the OpenSearch node (default: SDR_OPENSEARCH_URL, else %(default)s)")
    ap.add_argument("--index", default="sdr-bench-opensearch", help="index created (and deleted) on the node")
    ap.add_argument("--keep-index", action="store_true", help="leave the node's index in place at the end")
    ap.add_argument("--store", type=Path, default=None,
                    help="embedded store whose documents, vectors and statistics fill both stores (default: build "
                         "one of the first --docs IRLeD documents in the work directory)")
    ap.add_argument("--wait-for-stats", action="store_true",
                    help="start writing while --store's statistics are still being computed (sdr index writes them "
                         "last), and wait for them before they are copied")
    ap.add_argument("--docs", type=int, default=None, help="only the first N documents (default: all)")
    ap.add_argument("--sample", type=int, default=5000, help="reference sample R when the store is built here")
    ap.add_argument("--batch-docs", type=int, default=32,
                    help="documents per put() (sdr index writes batches of 32)")
    ap.add_argument("--queries", type=Path, default=DATA / "irled" / "queries-dev.jsonl.gz")
    ap.add_argument("--max-queries", type=int, default=None, help="only the first N queries (default: all)")
    ap.add_argument("--candidates", type=int, nargs="+", default=[100], help="K values for the fidelity section")
    ap.add_argument("--latency-queries", type=int, default=100)
    ap.add_argument("--pause-ms", type=float, default=300,
                    help="pause before each timed query, so that no way's idle threads (numpy's BLAS team spins after "
                    "each product) run beside the next one's (0: back to back, as before issue 44's last runs)")
    ap.add_argument("--force-merge", type=int, default=1, metavar="N",
                    help="after the first latency run, force-merge the node's index to N segments and time again "
                         "(0: skip)")
    ap.add_argument("--recovery-source-excludes", action="store_true",
                    help="variant: create the node's index with _source.recovery_source_excludes for the vectors")
    ap.add_argument("--plugin", action="store_true",
                    help="also measure the node's sdr plugin: a second index on the node created and queried through "
                         "it (the node must have it); the plain node index then runs with SDR_OPENSEARCH_PLUGIN=off")
    ap.add_argument("--plugin-only", action="store_true",
                    help="only the node's sdr plugin index (as --plugin, without the plain node index and its "
                         "Python-path way, which takes most of a run's time)")
    ap.add_argument("--plugin-pools", type=int, nargs="*", default=[200], metavar="N",
                    help="also the bench's own plugin pipeline (sdr_candidates then sdr_scores of N candidates, per "
                         "K = 100; default: 200), beside the engine on the plugin store (plugin-engine)")
    ap.add_argument("--embedded-blas1", action="store_true",
                    help="in the latency section, also the embedded store with numpy's BLAS on one thread")
    ap.add_argument("--fidelity-by-id", action="store_true",
                    help="in the latency section, also each way's top-10 against exhaustive SDR of the same sources "
                         "(by id and by text)")
    ap.add_argument("--skip-latency-text", action="store_true",
                    help="latency by id only (by default also by new text: the first --max-queries of --queries, "
                         "pre-encoded from the embedding cache)")
    ap.add_argument("--latency-after", choices=("written", "merged", "both"), default="both",
                    help="measure latency on the node's index as written, after --force-merge, or both (default)")
    ap.add_argument("--skip-fidelity", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--workdir", type=Path, default=None, help="where the embedded copy is written (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None,
                    help="also write every measurement here (after each section and each latency round)")
    ap.add_argument("--report-from", type=Path, default=None, metavar="JSON",
                    help="print the tables of a run saved with --json (also a run cut short), measure nothing")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("urllib3", "faiss.loader", "sdr_search.core.documents"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("opensearch").setLevel(logging.ERROR)  # the expected 404 while the index does not exist

    if args.report_from:  # the tables of a saved run (also one cut short: the sections and rounds it finished)
        saved = json.loads(args.report_from.read_text())
        report(saved["fill"], saved["fidelity"], list(saved["latency"].items()), saved["merged"], EmbeddedStoreSettings())
        return
    started = time.perf_counter()
    encoder = SentenceEncoder()
    cache = EmbeddingCache(CacheSettings().cache_dir / "embeddings.sqlite")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="sdr-bench-os-"))
    work.mkdir(parents=True, exist_ok=True)
    nodes: dict[str, OpenSearchStore] = {}
    try:
        if args.store is None:
            docs = list(itertools.islice(read_documents(DATA / "irled" / "corpus.jsonl.gz"), args.docs))
            source = build_store(work / "source", docs, encoder, cache, sample=args.sample)
        else:
            source = EmbeddedStore(args.store, read_only=True)
        t = time.perf_counter()
        corpus = read_corpus(source, args.docs)
        source.close()
        logger.info("read %d documents, %d sentences, %d with statistics in %.0f s", len(corpus.items),
                    corpus.sentences, len(corpus.stats), time.perf_counter() - t)

        saved: dict[str, Any] = {"args": vars(args), "fill": None, "fidelity": None, "latency": {}, "merged": None,
                                 "complete": False}

        def save() -> None:  # every measurement so far (a run cut short still leaves its sections)
            if args.json:
                args.json.write_text(json.dumps(saved, indent=1, default=str))

        emb, nodes, fill_out = fill(args, corpus, work)
        saved["fill"] = fill_out
        save()
        log = RequestLog()
        for os_store in nodes.values():
            log.install(os_store._os())
        fid = None if args.skip_fidelity else fidelity(args, emb, nodes, encoder, cache)
        saved["fidelity"] = fid
        save()
        lats: list[tuple[str, dict[str, Any]]] = []
        picks, texts, truth = [], [], {}
        if not args.skip_latency:
            picks = latency_sources(args, corpus)
            texts = [] if args.skip_latency_text else text_sources(args, encoder, cache)
            truth = exhaustive_truth(emb, picks, texts) if args.fidelity_by_id else {}

        def measure(label: str) -> None:
            def on_round(partial: dict[str, Any]) -> None:
                saved["latency"][label] = partial
                save()
            lats.append((label, latency(args, emb, nodes, corpus, log, picks, texts, truth, on_round)))

        if not args.skip_latency and args.latency_after in ("written", "both"):
            segments = ", ".join(f"{k} {v['segments']}" for k, v in fill_out["node"].items())
            measure(f"as indexed ({segments} segments)")
        merged = None
        if args.force_merge:
            merged = {"node": {}}
            for label, os_store in nodes.items():
                name = os_store.index_name
                seconds = force_merge(os_store, name, args.force_merge)
                merged["node"][label] = {"seconds": seconds, **node_sizes(os_store, name, f"{name}-sdr-state")}
                logger.info("force-merged %s to %d segment(s) in %.0f s", name, merged["node"][label]["segments"], seconds)
            saved["merged"] = merged
            save()
            if not args.skip_latency and args.latency_after in ("merged", "both"):
                measure(f"force-merged to {args.force_merge} segment(s)")
        report(fill_out, fid, lats, merged, EmbeddedStoreSettings())
        print(f"\nbench wall time: {time.perf_counter() - started:.0f} s")
        saved["complete"] = True
        saved["wall_s"] = time.perf_counter() - started
        save()
        emb.close()
    finally:
        for os_store in nodes.values():
            if not args.keep_index:
                os_store.drop()
            os_store.close()
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
