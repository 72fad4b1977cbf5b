"""Payload of the rerank fetch from OpenSearch: JSON float arrays vs base64 float32.

The exact rerank fetches the sentence vectors of K candidates with one ``_mget``. This compares
the two ways the vectors can travel in that response body, for K candidates of S sentences x d
dimensions (default 100 x 200 x 384, random unit vectors):

* **JSON floats** - each vector a JSON array of numbers (``ndarray.tolist()`` + ``json.dumps``,
  17 significant digits, as a Python client writes them and ``_source`` returns them);
* **base64 float32** - all of a document's vectors as one little-endian float32 string (the
  ``vectors_b64`` field of the sdr-search mapping).

For each: the body size in bytes (and gzip level 1, as with ``http_compress``), the time to build
and ``json.dumps`` the body (encode), and the time to ``json.loads`` it and turn every document
into a float32 array (decode). Times are the best of ``--repeat`` runs.

    python bench/experiments/opensearch_payload.py [--candidates 100] [--sentences 200] [--dim 384] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from typing import Any, Callable

import numpy as np

from sdr_search.indexer.opensearch.requests import decode_vectors_b64, encode_vectors_b64


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def mget_body(docs: list[np.ndarray], par_sizes: list[int], source: Callable[[np.ndarray], dict[str, Any]]) -> dict:
    return {"docs": [
        {"_index": "sdr", "_id": f"d{i:05d}", "_version": 1, "_seq_no": i, "_primary_term": 1, "found": True,
         "_source": {"doc_id": f"d{i:05d}", "par_sizes": par_sizes, **source(v)}}
        for i, v in enumerate(docs)
    ]}


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument("--sentences", type=int, default=200)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    docs = [unit_rows(rng, args.sentences, args.dim) for _ in range(args.candidates)]
    par_sizes = [20] * (args.sentences // 20) + ([args.sentences % 20] if args.sentences % 20 else [])
    dim = args.dim

    forms = {
        "JSON floats": (
            lambda v: {"vectors": v.tolist()},
            lambda src: np.asarray(src["vectors"], dtype=np.float32),
        ),
        "base64 float32": (
            lambda v: {"vectors_b64": encode_vectors_b64(v)},
            lambda src: decode_vectors_b64(src["vectors_b64"], dim),
        ),
    }
    rows = {}
    for name, (encode, decode) in forms.items():
        t_enc, text = best_of(args.repeat, lambda: json.dumps(mget_body(docs, par_sizes, encode)))
        raw = text.encode("utf-8")
        t_dec, arrays = best_of(args.repeat, lambda: [decode(d["_source"]) for d in json.loads(raw)["docs"]])
        for got, want in zip(arrays, docs):  # both forms must give the vectors back
            np.testing.assert_array_equal(got, want)
        rows[name] = (len(raw), len(gzip.compress(raw, compresslevel=1)), t_enc * 1e3, t_dec * 1e3)

    floats = args.candidates * args.sentences * args.dim
    print(f"_mget response for {args.candidates} candidates x {args.sentences} sentences x {args.dim} dims "
          f"({floats:,} float32 = {4 * floats / 1e6:.1f} MB raw); best of {args.repeat}")
    names = list(rows)
    print(f"{'':24}" + "".join(f"{n:>18}" for n in names) + f"{'ratio':>10}")
    labels = ["body bytes", "gzip-1 bytes", "encode ms (dumps)", "decode ms (loads+array)"]
    for k, label in enumerate(labels):
        vals = [rows[n][k] for n in names]
        fmt = (lambda x: f"{x:>18,.0f}") if k < 2 else (lambda x: f"{x:>18,.1f}")
        print(f"{label:24}" + "".join(fmt(v) for v in vals) + f"{vals[0] / vals[1]:>9.1f}x")
    total = [rows[n][2] + rows[n][3] for n in names]
    print(f"{'encode + decode ms':24}" + "".join(f"{v:>18,.1f}" for v in total) + f"{total[0] / total[1]:>9.1f}x")


if __name__ == "__main__":
    main()
