"""How cost grows with the corpus: latency per stage, memory, disk and bulk throughput against the
number of sentences, for the embedded store and for an OpenSearch node with the sdr plugin.

**Corpus.** Encoding 10M sentences on 2 cores takes about a day, so the corpora are built from real
encoded vectors multiplied: the base is an embedded store (``--base``; by default the 200-article
wiki demo store, 38,599 MiniLM sentence vectors, with its text, per-document statistics and
reference sample). Copy ``c`` of every base document is the same text with its sentence vectors
multiplied by a random orthogonal matrix ``R_c`` (seeded by ``c``; copy 0 is the base) that keeps
the corpus's mean direction fixed and rotates the 383-dimensional rest at random:

- within a copy every inner product is the base's (a rotation keeps them), so each copy has the
  real neighbour structure: the same clusters, near-duplicates and boilerplate as real text;
- between copies the rotated parts are independent random directions, so a sentence of one copy
  is no near-duplicate of another copy's (a noisy tile would be, and the k-NN would return a
  document's own copies); the shared mean direction keeps the cross-copy cosines at what unrelated
  real sentences give (MiniLM vectors share a common component), so the other copies are
  distractors at a realistic distance, not trivially far ones;
- the ANN index must still search the whole graph: it does not know the copies, and its graph,
  entry points and memory grow with the corpus as they would for real text. What it does not
  reproduce: a real 10M corpus packs more *relevant* neighbours around a query (denser local
  regions); here the density near a query is that of its own copy.

Per-document statistics are copied from the base document (a source's statistics are what SDR
normalises its scores with; a copy's statistics against the base reference sample would be the
same numbers for copy 0 and near them for the others); the base's reference sample is kept.

**Measured at each size** (growing one store; each phase in its own process, so peak RSS is that
phase's): bulk ``put()`` throughput (one put of 200 documents per copy, the FAISS graph added to
inside ``put()``) and the build's peak RSS; the store on disk; a fresh process that opens the
store and answers ``--queries`` by id (indexed sources: fixed base documents of copies 0-2) and the
same documents as new text (pre-encoded: the encoder is not timed) through ``MoreLikeThis.run``
(method ``sdr``, K = 100, engine defaults otherwise), p50 / p99 of the whole call and of its
stages (``timings_ms``: source, candidates = nested k-NN + aggregation, prerank, fetch, rerank,
snippets); its peak RSS and its resident anonymous / file-backed memory; then **fidelity**: the
fraction of the exhaustive float32 SDR top-10 (every document scored exactly, the source's
statistics: ``bench/two_stage.py``'s ``exhaustive_top``) found in the engine's top-10, for the
first ``--fidelity-queries`` by-id sources (their true neighbours are known by this exhaustive
pass), up to ``--fidelity-max`` sentences.

``--node URL`` does the same on an OpenSearch node (one shard, the sdr plugin; ``--node-encoder``
none or sq: the lucene engine's scalar quantisation of the ``knn_vector`` field): bulk throughput,
the index on disk by Lucene file type, the node's JVM heap and process RSS, latency through the
engine, fidelity.

Results are appended to ``--out`` (JSON lines, one object per measured point); ``--plot`` draws
p50 and memory against sentences (matplotlib: ``pip install -e .[bench]``).
Usage: python bench/scale.py --store /var/tmp/scale/emb-sq8 --codes sq8 --sizes 100000 1000000
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

logger = logging.getLogger("bench.scale")
BASE = Path("/var/tmp/bench42/demo-store")
STAGES = ("source", "candidates", "prerank", "fetch", "rerank", "snippets")


# =============================================================================================
# the synthetic corpus
# =============================================================================================
def rotation(dim: int, mean: np.ndarray, copy: int) -> np.ndarray:
    """The orthogonal matrix of copy ``copy`` (identity for 0): fixes ``mean``'s direction and
    rotates its orthogonal complement by a random orthogonal matrix seeded by ``copy``."""
    if copy == 0:
        return np.eye(dim, dtype=np.float32)
    rng = np.random.default_rng(copy)
    mu = mean / np.linalg.norm(mean)
    basis, _ = np.linalg.qr(np.column_stack([mu, np.random.default_rng(0).normal(size=(dim, dim - 1))]))
    basis[:, 0] *= np.sign(basis[:, 0] @ mu)  # first column exactly +mu
    inner, _ = np.linalg.qr(rng.normal(size=(dim - 1, dim - 1)))
    block = np.eye(dim)
    block[1:, 1:] = inner
    return (basis @ block @ basis.T).astype(np.float32)


class Base:
    """The base store's documents, vectors, statistics and reference sample, read once."""

    def __init__(self, path: Path) -> None:
        from sdr_search.indexer.embedded import EmbeddedStore

        store = EmbeddedStore(path, read_only=True)
        self.meta, self.reference, self.info = store.meta(), store.reference(), store.stats_info()
        self.docs = [store.get(i) for i in store.iter_ids()]
        store.close()
        self.sentences = sum(d.vectors.n_sentences for d in self.docs)
        stacked = np.concatenate([d.vectors.vectors for d in self.docs])
        self.dim = stacked.shape[1]
        self.mean = stacked.mean(axis=0)

    def copy(self, c: int):
        """The documents of copy ``c``: ``(Document, DocVectors)`` pairs and their statistics."""
        from sdr_search.core.documents import Document
        from sdr_search.core.vectors import DocVectors

        R = rotation(self.dim, self.mean, c)
        items, stats = [], {}
        for d in self.docs:
            doc_id = d.document.id if c == 0 else f"{d.document.id}#{c}"
            v = d.vectors.vectors if c == 0 else np.ascontiguousarray(d.vectors.vectors @ R)
            items.append((Document(doc_id, d.document.paragraphs, d.document.title, d.document.metadata),
                          DocVectors(v, d.vectors.par_offsets)))
            if d.stats is not None:
                stats[doc_id] = d.stats
        return items, stats

    def sources(self, n: int, copies: int) -> list[tuple[int, int]]:
        """``n`` fixed (base document, copy) pairs: documents of 50-400 sentences, copies 0-2
        (fewer when the corpus has fewer)."""
        rng = np.random.default_rng(7)
        pool = [i for i, d in enumerate(self.docs) if 50 <= d.vectors.n_sentences <= 400]
        picks = rng.choice(len(pool), size=min(n, len(pool)), replace=False)
        return [(pool[p], int(j % min(3, copies))) for j, p in enumerate(picks)]


# =============================================================================================
# memory and disk
# =============================================================================================
def proc_status(pid: int | str = "self") -> dict[str, float]:
    """MiB of VmHWM (peak RSS), VmRSS, RssAnon and RssFile of process ``pid``."""
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key = line.split(":")[0]
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(line.split()[1]) / 1024
    return out


def dir_bytes(path: Path) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for p in path.rglob("*"):
        if p.is_file():
            key = p.name if p.parent == path else p.parent.name.split("-")[0]
            sizes[key] = sizes.get(key, 0) + p.stat().st_size
    return sizes


def percentiles(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "mean": float(a.mean())}


# =============================================================================================
# phases (each one a process of its own: --phase)
# =============================================================================================
def embedded_store(path: Path, codes: str, save_every: int, create: bool):
    from sdr_search.indexer.embedded import EmbeddedStore
    from sdr_search.indexer.settings import EmbeddedStoreSettings

    settings = EmbeddedStoreSettings(ann_codes=codes, faiss_save_every=save_every)
    return EmbeddedStore(path, create=create, settings=settings)


def phase_grow(args, base: Base) -> dict[str, Any]:
    """Put copies until the store holds ``args.copies`` of them; statistics copied, reference kept."""
    store = embedded_store(args.store, args.codes, args.save_every, create=True)
    store.ensure_meta(base.meta)
    have = store.counts()["documents"] // len(base.docs)
    t_put = t_stats = 0.0
    rows = 0
    for c in range(have, args.copies):
        items, stats = base.copy(c)
        t = time.perf_counter()
        store.put(items)
        t_put += time.perf_counter() - t
        rows += sum(v.n_sentences for _, v in items)
        t = time.perf_counter()
        store.write_stats(stats, mode=base.info.mode or "sampled", sample_size=base.info.sample_size, seed=base.info.seed)
        t_stats += time.perf_counter() - t
        logger.info("copy %d: %d sentences in %.0f s of puts", c, rows, t_put)
    if have == 0 and base.reference is not None:
        store.set_reference(base.reference)
    t = time.perf_counter()
    store.close()
    t_close = time.perf_counter() - t
    return {"phase": "grow", "copies_before": have, "rows_added": rows, "put_s": t_put, "stats_s": t_stats,
            "close_s": t_close, "rows_per_s": rows / max(t_put + t_close, 1e-9), **proc_status()}


def run_queries(engine, base: Base, picks, by_text: bool) -> tuple[list[float], list[dict[str, float]], list[list[str]]]:
    from sdr_search.core.documents import Document
    from sdr_search.reranker.engine import Query

    lat, parts, tops = [], [], []
    for i, c in picks:
        d = base.docs[i]
        if by_text:
            q = Query(document=Document(f"new-{d.document.id}", d.document.paragraphs, d.document.title, {}),
                      vectors=d.vectors, size=10)
        else:
            q = Query(id=d.document.id if c == 0 else f"{d.document.id}#{c}", size=10)
        t = time.perf_counter()
        res = engine.run(q)
        lat.append((time.perf_counter() - t) * 1e3)
        parts.append(dict(res.timings_ms))
        tops.append([h.id for h in res.hits])
    return lat, parts, tops


def summarise(lat, parts) -> dict[str, Any]:
    out = {"total": percentiles(lat)}
    for s in STAGES:
        out[s] = percentiles([p.get(s, 0.0) for p in parts])
    return out


def phase_query(args, base: Base, store=None, node: dict[str, Any] | None = None) -> dict[str, Any]:
    """Open the store, answer the by-id and by-text queries, then (optionally) fidelity. numpy's BLAS
    runs on one thread (as ``bench/opensearch.py``'s latency: on a machine shared with other work a
    2-thread BLAS team waits for descheduled threads); FAISS keeps its OpenMP threads."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _phase_query(args, base, store, node)


def _phase_query(args, base: Base, store, node: dict[str, Any] | None) -> dict[str, Any]:
    from sdr_search.reranker.engine import MLTSettings, MoreLikeThis

    t = time.perf_counter()
    if store is None:
        store = embedded_store(args.store, args.codes, args.save_every, create=False)
    engine = MoreLikeThis(store=store, settings=MLTSettings(method="sdr", candidates=100))
    picks = base.sources(args.queries, args.copies)
    run_queries(engine, base, picks[:1], by_text=False)  # opens the index (loads the graph)
    t_open = time.perf_counter() - t
    run_queries(engine, base, picks[1:3], by_text=True)  # warm-up
    out: dict[str, Any] = {"phase": "query", "open_s": t_open, "queries": len(picks)}
    lat, parts, tops = run_queries(engine, base, picks, by_text=False)
    out["by_id"] = summarise(lat, parts)
    lat, parts, _ = run_queries(engine, base, picks, by_text=True)
    out["by_text"] = summarise(lat, parts)
    out["memory"] = proc_status() if node is None else node_memory(store, node)
    variants = {}
    for ef in args.ef_search if node is None else []:  # the same by-id queries with another efSearch
        store.settings = store.settings.model_copy(update={"hnsw_ef_search": ef})
        lat, parts, vtops = run_queries(engine, base, picks, by_text=False)
        variants[ef] = (summarise(lat, parts), vtops)
    n = store.counts()["sentences"]
    if args.fidelity_queries and n <= args.fidelity_max:
        truth = exhaustive_tops(engine, store, base, picks[: args.fidelity_queries])
        out["fidelity"] = overlap(truth, tops)
        for ef, (summary, vtops) in variants.items():
            summary["fidelity"] = overlap(truth, vtops)
    if variants:
        out["ef_search"] = {str(ef): summary for ef, (summary, _) in variants.items()}
    return out


def exhaustive_tops(engine, store, base: Base, picks) -> list[list[str]]:
    """The exhaustive float32 SDR top-10 of each by-id source: every document scored exactly with
    the source's statistics (as ``bench/two_stage.py``'s ``exhaustive_top``)."""
    from sdr_search.core.scoring import document_max, paragraph_scores, rank, sdr_scores

    corpus = store.all_vectors()
    out = []
    for i, c in picks:
        src = engine.source_from_id(base.docs[i].document.id if c == 0 else f"{base.docs[i].document.id}#{c}")
        scores = sdr_scores(document_max(paragraph_scores(src.vectors, corpus), corpus.doc_par_offsets), src.stats)
        out.append([corpus.ids[j] for j in rank(list(corpus.ids), scores) if corpus.ids[j] != src.indexed_id][:10])
    return out


def overlap(truth: list[list[str]], tops: list[list[str]]) -> dict[str, Any]:
    """Mean (and worst) fraction of each exhaustive top-10 found in the engine's top-10."""
    fractions = [len(set(t) & set(top[:10])) / max(1, len(t)) for t, top in zip(truth, tops)]
    return {"top10": float(np.mean(fractions)), "min": float(np.min(fractions)), "n": len(fractions)}


# =============================================================================================
# the node
# =============================================================================================
def node_memory(store, node: dict[str, Any]) -> dict[str, Any]:
    """The node's JVM heap (used, committed, max) and its process RSS (from /proc, same machine)."""
    stats = store._os().nodes.stats(metric="jvm,process")
    (_, n), = stats["nodes"].items()
    heap = n["jvm"]["mem"]
    pid = node.get("pid")
    out = {"heap_used_mb": heap["heap_used_in_bytes"] / 2**20, "heap_committed_mb": heap["heap_committed_in_bytes"] / 2**20,
           "heap_max_mb": heap["heap_max_in_bytes"] / 2**20}
    if pid:
        out.update({f"node_{k}": v for k, v in proc_status(pid).items()})
    out.update({f"client_{k}": v for k, v in proc_status().items()})
    return out


def node_store(args, create: bool):
    from sdr_search.indexer.opensearch import OpenSearchStore
    from sdr_search.indexer.opensearch.settings import OpenSearchSettings

    settings = OpenSearchSettings(plugin="on", shards=1, replicas=0, refresh="false",
                                  **({"knn_encoder": args.node_encoder} if args.node_encoder != "none" else {}))
    return OpenSearchStore(args.node, index=args.node_index, settings=settings)


def node_grow(args, base: Base) -> dict[str, Any]:
    store = node_store(args, create=True)
    store.ensure_meta(base.meta)
    have = store.counts()["documents"] // len(base.docs)
    t_put = 0.0
    rows = 0
    for c in range(have, args.copies):
        items, stats = base.copy(c)
        for a in range(0, len(items), args.node_batch):
            t = time.perf_counter()
            store.put(items[a : a + args.node_batch])
            t_put += time.perf_counter() - t
        rows += sum(v.n_sentences for _, v in items)
        store.write_stats(stats, mode=base.info.mode or "sampled", sample_size=base.info.sample_size, seed=base.info.seed)
        logger.info("node copy %d: %d sentences in %.0f s of puts", c, rows, t_put)
    if have == 0 and base.reference is not None:
        store.set_reference(base.reference)
    client = store._os()
    t = time.perf_counter()
    client.indices.refresh(index=args.node_index)
    client.indices.flush(index=args.node_index)
    while client.indices.stats(index=args.node_index, metric="merge")["indices"][args.node_index]["primaries"]["merges"]["current"]:
        time.sleep(0.5)  # merged segments' HNSW graphs are rebuilt in the background
    client.indices.flush(index=args.node_index)
    client.indices.refresh(index=args.node_index)
    t_refresh = time.perf_counter() - t
    st = client.indices.stats(index=args.node_index, metric="store,segments", params={"include_segment_file_sizes": "true"})
    prim = st["indices"][args.node_index]["primaries"]
    files = {k: v["size_in_bytes"] for k, v in prim["segments"].get("file_sizes", {}).items()}
    return {"phase": "grow", "copies_before": have, "rows_added": rows, "put_s": t_put, "refresh_s": t_refresh,
            "rows_per_s": rows / max(t_put + t_refresh, 1e-9), "disk_bytes": prim["store"]["size_in_bytes"],
            "page_cache_graph_bytes": sum(v for k, v in files.items() if k in ("vex", "veq", "vemq")),
            "float_vector_bytes": files.get("vec", 0),
            "segments": prim["segments"]["count"], "files": files, "memory": node_memory(store, {"pid": args.node_pid})}


# =============================================================================================
# the plot
# =============================================================================================
def plot(results: Path, png: Path, series: Sequence[str] = ()) -> None:
    """p50 by id and by text, and peak RSS (indexing, querying), against sentences: one line per series
    (``series``: those labels only, in that order; default every label of ``results``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points: dict[str, list[dict[str, Any]]] = {}
    for line in Path(results).read_text().splitlines():
        if line.strip():
            pt = json.loads(line)
            points.setdefault(pt["label"], []).append(pt)
    missing = [s for s in series if s not in points]
    if missing:
        raise SystemExit(f"--series: no point labelled {', '.join(missing)} in {results} (labels: {', '.join(sorted(points))})")
    labels = list(series) or sorted(points)
    colours = {label: plt.get_cmap("tab10")(i % 10) for i, label in enumerate(labels)}  # one colour per series
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 9))
    for label in labels:
        pts = sorted(points[label], key=lambda p: p["sentences"])
        x = [p["sentences"] for p in pts]

        def line(ax: Any, ys: list[float], style: str, what: str) -> None:
            ax.plot(x, ys, style, color=colours[label], label=f"{label}: {what}")

        line(ax1, [p["query"]["by_id"]["total"]["p50"] for p in pts], "o-", "by id")
        line(ax1, [p["query"]["by_text"]["total"]["p50"] for p in pts], "s--", "by text")
        line(ax1, [p["query"]["by_id"]["candidates"]["p50"] for p in pts], "v:", "candidate stage (by id)")
        if label.startswith("node"):
            line(ax2, [p["query"]["memory"].get("node_VmRSS", float("nan")) / 1024 for p in pts], "o-",
                 "node RSS after the queries")
            line(ax2, [p["grow"]["disk_bytes"] / 2**30 for p in pts], "x:", "index on disk")
        else:
            line(ax2, [p["grow"]["VmHWM"] / 1024 for p in pts], "^-.", "peak RSS indexing")
            line(ax2, [p["query"]["memory"]["VmHWM"] / 1024 for p in pts], "o-", "peak RSS querying")
            line(ax2, [p["query"]["memory"]["RssAnon"] / 1024 for p in pts], "o--",
                 "anonymous RSS querying (no mapped file pages)")
            line(ax2, [sum(p["disk"].values()) / 2**30 for p in pts], "x:", "store on disk")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("sentences")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=1)
    ax1.set_ylabel("p50 ms (MoreLikeThis.run, method sdr, K = 100)")
    ax2.set_ylabel("GiB")
    ax1.set_title("latency")
    ax2.set_title("memory and disk")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


GROWTH = {
    "by id p50": lambda p: p["query"]["by_id"]["total"]["p50"],
    **{f"{s} p50": (lambda s: lambda p: p["query"]["by_id"][s]["p50"])(s) for s in ("candidates", "prerank", "fetch", "rerank")},
    "by text p50": lambda p: p["query"]["by_text"]["total"]["p50"],
    "peak RSS querying": lambda p: p["query"]["memory"].get("VmHWM", p["query"]["memory"].get("node_VmHWM", float("nan"))),
    "peak RSS indexing": lambda p: p["grow"].get("VmHWM", float("nan")),
    "disk": lambda p: sum(p["disk"].values()) if "disk" in p else p["grow"]["disk_bytes"],
}


def growth(points: list[dict[str, Any]]) -> dict[str, float]:
    """Log-log slope of each measure against sentences (1: linear, 0: flat), least squares."""
    x = np.log([p["sentences"] for p in points])
    out = {}
    for name, get in GROWTH.items():
        y = np.array([get(p) for p in points], dtype=float)
        ok = np.isfinite(y) & (y > 0)
        if ok.sum() >= 2:
            out[name] = float(np.polyfit(x[ok], np.log(y[ok]), 1)[0])
    return out


def table(results: Path) -> None:
    """Print the points of ``results`` (JSON lines) as the markdown table of docs/results/scale.md."""
    print("| series | sentences | build sent/s | peak RSS build / query (MiB) | disk (MB) | by id p50 / p99 | "
          "candidates p50 / p99 | rerank p50 | by text p50 / p99 | top-10 fidelity | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    series: dict[str, list[dict[str, Any]]] = {}
    for line in Path(results).read_text().splitlines():
        if not line.strip():
            continue
        pt = json.loads(line)
        g, q = pt["grow"], pt["query"]
        if pt["label"].startswith("node"):
            rss = f"node {q['memory'].get('node_VmHWM', float('nan')):,.0f} / heap {q['memory']['heap_used_mb']:,.0f}"
            disk = g["disk_bytes"] / 1e6
        else:
            rss = f"{g['VmHWM']:,.0f} / {q['memory']['VmHWM']:,.0f}"
            disk = sum(pt["disk"].values()) / 1e6
        fid = q.get("fidelity", {}).get("top10")
        bi, bt = q["by_id"], q["by_text"]
        load = q.get("loadavg", [float("nan")])[0]
        print(f"| {pt['label']} | {pt['sentences']:,} | {g['rows_per_s']:,.0f} | {rss} | {disk:,.0f} | "
              f"{bi['total']['p50']:,.0f} / {bi['total']['p99']:,.0f} | {bi['candidates']['p50']:,.0f} / "
              f"{bi['candidates']['p99']:,.0f} | {bi['rerank']['p50']:,.0f} | {bt['total']['p50']:,.0f} / "
              f"{bt['total']['p99']:,.0f} | {'' if fid is None else f'{fid:.3f}'} | {load:.1f} |")
        series.setdefault(pt["label"], []).append(pt)
        for ef, v in q.get("ef_search", {}).items():
            f = v.get("fidelity", {}).get("top10")
            print(f"| {pt['label']}, efSearch {ef} | {pt['sentences']:,} | | | | {v['total']['p50']:,.0f} / "
                  f"{v['total']['p99']:,.0f} | {v['candidates']['p50']:,.0f} / {v['candidates']['p99']:,.0f} | "
                  f"{v['rerank']['p50']:,.0f} | | {'' if f is None else f'{f:.3f}'} | |")
    print("\nlog-log slope against sentences (1 = linear):")
    for label, pts in series.items():
        if len(pts) >= 2:
            print(f"- {label} ({len(pts)} points): " + ", ".join(f"{k} {v:.2f}" for k, v in growth(pts).items()))


# =============================================================================================
# driver
# =============================================================================================
def child(args, phase: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--phase", phase, "--copies", str(args.copies)] + args.passthrough
    res = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(res.stderr[-3000:])  # before the check: a failed phase shows why
    res.check_returncode()
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, default=BASE, help="embedded store whose vectors are multiplied")
    p.add_argument("--store", type=Path, help="embedded store to grow (kept: grown further by a later run)")
    p.add_argument("--codes", default="sq8", choices=["float32", "fp16", "sq8"], help="SDR_STORE_ANN_CODES of the store")
    p.add_argument("--save-every", type=int, default=1_000_000,
                   help="SDR_STORE_FAISS_SAVE_EVERY while growing (the default 50,000 rewrites the whole graph "
                        "file every 50k rows: at millions of rows most of the build's I/O)")
    p.add_argument("--node", help="OpenSearch URL (a node with the sdr plugin): measure the node instead")
    p.add_argument("--node-index", default="scale-sdr")
    p.add_argument("--node-encoder", default="none", choices=["none", "sq"],
                   help="lucene scalar quantisation of the knn_vector field (SDR_OPENSEARCH_KNN_ENCODER)")
    p.add_argument("--node-pid", type=int, help="the node's java pid, for its RSS")
    p.add_argument("--node-batch", type=int, default=20, help="documents per put on the node")
    p.add_argument("--sizes", type=float, nargs="+", default=[1e5], help="sentence counts to measure at")
    p.add_argument("--queries", type=int, default=30)
    p.add_argument("--fidelity-queries", type=int, default=15)
    p.add_argument("--ef-search", type=int, nargs="*", default=[],
                   help="also time the by-id queries (and their fidelity) with these SDR_STORE_HNSW_EF_SEARCH values")
    p.add_argument("--fidelity-max", type=float, default=2.1e6, help="no exhaustive fidelity pass above this many sentences")
    p.add_argument("--out", type=Path, help="JSON lines file to append each measured point to")
    p.add_argument("--label", default=None, help="name of the series in --out (default: embedded-<codes> / node-<encoder>)")
    p.add_argument("--phase", choices=["grow", "query"], help=argparse.SUPPRESS)
    p.add_argument("--copies", type=int, help=argparse.SUPPRESS)
    p.add_argument("--plot", type=Path, nargs=2, metavar=("RESULTS", "PNG"), help="draw RESULTS (JSON lines) into PNG")
    p.add_argument("--series", nargs="+", default=(), metavar="LABEL",
                   help="with --plot: draw these series (labels of RESULTS) only, in this order")
    p.add_argument("--table", type=Path, metavar="RESULTS", help="print RESULTS (JSON lines) as a markdown table")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.plot:
        plot(*args.plot, series=args.series)
        return
    if args.table:
        table(args.table)
        return
    base = Base(args.base)
    args.node_pid = args.node_pid
    if args.phase:
        if args.node:
            node = {"pid": args.node_pid}
            res = node_grow(args, base) if args.phase == "grow" else phase_query(args, base, node_store(args, False), node)
        else:
            res = phase_grow(args, base) if args.phase == "grow" else phase_query(args, base)
        res["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        res["loadavg"] = os.getloadavg()  # the machine is shared: other work running meanwhile shows here
        print(json.dumps(res))
        return
    args.passthrough = [a for a in (argv if argv is not None else sys.argv[1:])]
    label = args.label or (f"node-{args.node_encoder}" if args.node else f"embedded-{args.codes}")
    for size in sorted(args.sizes):
        args.copies = int(np.ceil(size / base.sentences))
        t = time.perf_counter()
        grow = child(args, "grow")
        grow["wall_s"] = time.perf_counter() - t
        query = child(args, "query")
        point = {"label": label, "copies": args.copies, "sentences": args.copies * base.sentences,
                 "documents": args.copies * len(base.docs), "at": time.strftime("%Y-%m-%d %H:%M:%S"),
                 "cpus": os.cpu_count(), "grow": grow, "query": query}
        if not args.node:
            point["disk"] = dir_bytes(args.store)
        logger.info("point %s", json.dumps(point)[:2000])
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(point) + "\n")


if __name__ == "__main__":
    main()
