"""The data of a run (before stage 2): IRLeD's corpus, dev queries and qrels (``.gpu``'s or
``../shared``'s), or for a dry run a tiny slice of them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from .common import IRLED
from .record import Recorder


class DataStage(Recorder):
    def stage_data(self) -> None:
        a = self.args
        d = self.work / "data"
        d.mkdir(exist_ok=True)
        packed = self.data.get("packed")
        if a.dry_run:
            info = make_dry_data(d, IRLED if (IRLED / "corpus.jsonl.gz").exists() else None, a.dry_queries, a.dry_docs)
            corpus, queries, qrels = d / "corpus.jsonl", d / "queries.jsonl", d / "qrels.txt"
        else:
            base = Path(a.data) if a.data else (Path(packed) if packed else IRLED)
            corpus = base / "corpus.jsonl" if (base / "corpus.jsonl").exists() else base / "corpus.jsonl.gz"
            queries = base / "queries-dev.jsonl" if (base / "queries-dev.jsonl").exists() else base / "queries-dev.jsonl.gz"
            qrels = base / "qrels-dev.txt"
            info = {"source": str(base)}
        for p in (corpus, queries, qrels):
            if not p.exists():
                raise FileNotFoundError(f"{p} is missing (IRLeD: ../shared/data/irled, or .gpu/irled through --prepare)")
        opener = gzip.open if corpus.suffix == ".gz" else open
        with opener(corpus, "rt", encoding="utf-8") as fh:
            n_docs = sum(1 for line in fh if line.strip())
        opener = gzip.open if queries.suffix == ".gz" else open
        with opener(queries, "rt", encoding="utf-8") as fh:
            n_queries = sum(1 for line in fh if line.strip())
        pack = (self.r["stages"].get("env") or {}).get("pack") or {}
        whole = (pack.get("corpus") or {}).get("whole", True) if packed and not a.data and not a.dry_run else None
        self.data.update(corpus=str(corpus), queries=str(queries), qrels=str(qrels))
        self.r["data"] = {**info, "corpus": str(corpus), "corpus_documents": n_docs, "queries": str(queries),
                          "query_documents": n_queries, "qrels": str(qrels),
                          "corpus_whole": whole if whole is not None else (not a.dry_run)}
        if whole is False:
            self.r["data"]["note"] = (f"the corpus is a subset ({pack['corpus']['documents']} of {pack['corpus']['of']} "
                                      "documents, every dev-relevant one kept): it did not fit the 64 MiB a call carries")
        self.event(f"data: {n_docs} corpus documents, {n_queries} queries ({'dry-run slice' if a.dry_run else 'IRLeD dev'})")
        self.save()


def make_dry_data(d: Path, irled: Path | None, n_queries: int, n_other: int) -> dict:
    """A tiny corpus, queries and qrels for the dry run: the first dev queries (first 6 lines each),
    their relevant documents and a few others (first 3 lines each); synthetic text without IRLeD."""
    corpus, queries, qrels = [], [], []
    if irled is not None:
        with gzip.open(irled / "queries-dev.jsonl.gz", "rt", encoding="utf-8") as fh:
            for line in fh:
                q = json.loads(line)
                queries.append({"id": q["id"], "paragraphs": q["paragraphs"][:6]})
                if len(queries) >= n_queries:
                    break
        qids = {q["id"] for q in queries}
        qrels = [line for line in (irled / "qrels-dev.txt").read_text().splitlines() if line.split()[:1] and line.split()[0] in qids]
        wanted = {line.split()[2] for line in qrels}
        others = 0
        with gzip.open(irled / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
            for line in fh:
                head = line[:80]
                is_rel = any(f'"{w}"' in head for w in wanted)
                if not is_rel and others >= n_other:
                    if len(corpus) - others >= len(wanted):
                        break
                    continue
                doc = json.loads(line)
                paras = [p for p in doc.get("paragraphs", []) if p.strip()][:3]
                if not paras:
                    continue
                corpus.append({"id": doc["id"], "paragraphs": paras})
                others += 0 if is_rel else 1
        source = f"IRLeD slice: {len(queries)} dev queries (first 6 lines), their relevant documents and {others} others (first 3 lines)"
    else:
        import random

        rnd = random.Random(0)
        words = ("court appeal judgment evidence witness contract party claim statute section order held decision trial "
                 "defendant plaintiff law right duty breach damages tenant lease notice").split()

        def para() -> str:
            return " ".join(" ".join(rnd.choice(words) for _ in range(rnd.randint(7, 12))).capitalize() + "." for _ in range(4))

        corpus = [{"id": f"d{i:02d}", "paragraphs": [para() for _ in range(3)]} for i in range(12)]
        queries = [{"id": f"q{i}", "paragraphs": [para() for _ in range(3)]} for i in range(n_queries)]
        qrels = [f"q{i} 0 d{(i * 3 + k) % 12:02d} 1" for i in range(n_queries) for k in range(3)]
        source = "synthetic (no ../shared/data/irled)"
    for name, rows in (("corpus.jsonl", corpus), ("queries.jsonl", queries)):
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "qrels.txt").write_text("\n".join(qrels) + "\n")
    return {"source": source}
