"""How to keep metadata filterable on OpenSearch: three mappings of the same documents, measured.

- ``layout-1``: ``metadata`` mapped field by field by dynamic mapping (sdr-search before layout 2),
  filtered with ``term`` queries on each field's exact-value path (OR-ed per field);
- ``flat_object``: ``metadata`` as one ``flat_object`` field (OpenSearch 2.7+), filtered with
  ``term`` queries on ``metadata.<path>``;
- ``layout-2``: ``metadata`` kept in ``_source`` only (``enabled: false``) and its typed terms in one
  ``keyword`` field (``metadata_terms``), filtered with one ``terms`` query per field (what the
  store sends, :func:`sdr_search.indexer.opensearch.requests.build_metadata_filter`).

``--docs`` documents (default 3,000) of ``--sentences`` random 16-d unit vectors each, with 9
metadata keys (strings, an integer, a float, a boolean, a list, a nested object and a 400-character
string). Prints per mapping: the index size after a force-merge to one segment; p50 / p95 latency
(ms, ``--runs`` runs) of a filtered count (what ``ids_matching`` scans) and of a filtered nested
k-NN search (k = 10), for a rare filter (1 %) and a broad one (about 33 %); the documents the k-NN
search returns, and whether each is a match (the k-NN plugin must join the filter down to the
nested sentences); and the equality checks the filter contract needs (``2001.0`` = ``2001``,
``"true"`` ≠ ``true``, ``"2001"`` ≠ ``2001``) as each mapping answers them.

    python bench/metadata_layout.py --opensearch http://127.0.0.1:9240
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import uuid

import numpy as np

DIM = 16


def metadata(i: int) -> dict:
    return {"court": ["supreme", "high", "district"][i % 3], "year": 1990 + i % 30, "score": round((i % 7) * 0.25, 2),
            "final": i % 2 == 0, "rare": i % 100 == 7, "tags": [f"t{i % 5}", f"t{i % 11}"],
            "where": {"city": ["Oslo", "Lima", "Pune", "Kyiv"][i % 4], "zip": 1000 + i % 50},
            "summary": f"Summary {i}: " + "words of a long metadata string " * 12}


def bodies(kind: str):
    """``(index body, document source -> source, filter -> query)`` of one mapping."""
    from sdr_search.indexer.opensearch.requests import build_index_body, build_metadata_filter

    body = build_index_body(DIM, m=16, ef_construction=100, shards=1, replicas=0, meta={"sdr": {}})
    props = body["mappings"]["properties"]
    if kind == "layout-2":
        return body, (lambda src: src), build_metadata_filter
    del props["metadata_terms"]

    def drop_terms(src: dict) -> dict:
        return {k: v for k, v in src.items() if k != "metadata_terms"}

    if kind == "layout-1":
        props["metadata"] = {"type": "object", "dynamic": True}

        def exact(path: str, value) -> str:  # the exact-value path dynamic mapping gives each JSON type
            return f"metadata.{path}.keyword" if isinstance(value, str) else f"metadata.{path}"
    else:
        props["metadata"] = {"type": "flat_object"}

        def exact(path: str, value) -> str:
            return f"metadata.{path}"

    def query(flt: dict) -> dict:
        clauses = []
        for path, wanted in flt.items():
            values = wanted if isinstance(wanted, list) else [wanted]
            terms = [{"term": {exact(path, v): v}} for v in values]
            clauses.append({"bool": {"should": terms, "minimum_should_match": 1}})
        return {"bool": {"filter": clauses}}

    return body, drop_terms, query


def timed(fn, runs: int) -> tuple[float, float]:
    fn()  # warm
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), float(np.percentile(times, 95))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--opensearch", required=True, metavar="URL")
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--sentences", type=int, default=4)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()

    from opensearchpy import OpenSearch, helpers

    from sdr_search.core.documents import Document
    from sdr_search.core.filters import matches
    from sdr_search.core.vectors import DocVectors
    from sdr_search.indexer.opensearch.requests import build_bulk_actions, build_nested_knn_query

    client = OpenSearch([args.opensearch], timeout=120)
    rng = np.random.default_rng(0)
    items = []
    for i in range(args.docs):
        v = rng.standard_normal((args.sentences, DIM)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        doc = Document(f"d{i:05d}", (tuple(f"Sentence {s} of document {i}." for s in range(args.sentences)),), None, metadata(i))
        items.append((doc, DocVectors(v, [0, args.sentences])))
    meta_of = {d.id: d.metadata for d, _ in items}
    q = items[0][1].vectors[0].tolist()
    filters = {"rare (1 %)": {"rare": True}, "broad (33 %)": {"court": "high"},
               "two fields": {"where.city": ["Oslo", "Lima"], "year": [1991, 1992, 1993]}}
    checks = {"year 2001.0 (= 2001)": {"year": 2001.0}, "final \"true\" (≠ true)": {"final": "true"},
              "year \"2001\" (≠ 2001)": {"year": "2001"}}
    print(f"{args.docs} documents x {args.sentences} sentences, {DIM}-d; node {client.info()['version']['number']}")
    for kind in ("layout-1", "flat_object", "layout-2"):
        name = f"sdr-bench-meta-{kind.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
        body, source, query = bodies(kind)
        client.indices.create(index=name, body=body)
        try:
            actions = build_bulk_actions(items, index=name, encoder_tag="t", model_id="m", vector_copy=False)
            for a in actions:
                a["_source"] = source(a["_source"])
            t = time.perf_counter()
            helpers.bulk(client, actions, chunk_size=500, refresh=True)
            write_s = time.perf_counter() - t
            client.indices.forcemerge(index=name, max_num_segments=1)
            client.indices.refresh(index=name)
            size = client.indices.stats(index=name, metric="store")["indices"][name]["total"]["store"]["size_in_bytes"]
            fields = len(client.indices.get_mapping(index=name)[name]["mappings"]["properties"].get("metadata", {})
                         .get("properties", {}))
            print(f"\n{kind}: {size / 1e6:.2f} MB after force-merge, bulk write {write_s:.1f} s, "
                  f"{fields} metadata fields in the mapping")
            for label, flt in filters.items():
                want = {i for i, m in meta_of.items() if matches(m, flt)}
                qry = query(flt)
                count = lambda qry=qry: client.count(index=name, body={"query": qry})["count"]  # noqa: E731
                knn_body = build_nested_knn_query(q, 10, filter=copy.deepcopy(qry))
                knn = lambda b=knn_body: client.search(index=name, body=b)  # noqa: E731
                got = [h["fields"]["doc_id"][0] for h in knn()["hits"]["hits"]]
                c50, c95 = timed(count, args.runs)
                k50, k95 = timed(knn, args.runs)
                print(f"  {label:14s} count {count():5d} (want {len(want)}) p50 {c50:6.2f} p95 {c95:6.2f} ms | "
                      f"k-NN {len(got):2d} hits, {sum(g in want for g in got):2d} matching, p50 {k50:6.2f} p95 {k95:6.2f} ms")
            for label, flt in checks.items():
                want = sum(matches(m, flt) for m in meta_of.values())
                print(f"  {label:24s} count {client.count(index=name, body={'query': query(flt)})['count']:5d} "
                      f"(the contract: {want})")
        finally:
            client.indices.delete(index=name)
    client.close()


if __name__ == "__main__":
    main()
