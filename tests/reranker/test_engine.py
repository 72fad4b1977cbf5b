"""Two-stage engine and the store commands, end to end on a small real corpus (real encoder)."""

import json
import re

import numpy as np
import pytest

from sdr_search.indexer.embedded import EmbeddedStore
from sdr_search.indexer.pipeline import index_documents
from sdr_search.indexer.stats_job import refresh_stats
from sdr_search.reranker.prerank import prerank_order
from sdr_search.reranker.engine import MLTSettings, MoreLikeThis, Query
from sdr_search.cli import main
from sdr_search.core.documents import parse_record
from sdr_search.core.errors import (
    DocumentNotFoundError,
    IndexNotFoundError,
    InvalidInputError,
    ModelMismatchError,
    StatsUnavailableError,
)
from sdr_search.core.reference import reference_sdr_score
from sdr_search.core.scoring import rank
from sdr_search.core.settings import SegmentationSettings

pytestmark = pytest.mark.integration

AS_GIVEN = SegmentationSettings.from_recorded({})  # three paragraphs per document, as written

TOPICS = {
    "tax": ["The assessee claimed a deduction under the Income Tax Act.", "The revenue disputed the capital gain assessed for that year.",
            "The tribunal held that the income was taxable in the hands of the assessee.", "Depreciation was disallowed by the officer."],
    "murder": ["The accused was convicted of murder under Section 302 of the Penal Code.", "The eyewitness saw the accused strike the deceased with a knife.",
               "The post-mortem report confirmed the injuries caused death.", "The motive for the crime was a land dispute."],
    "land": ["The State acquired the land for a public purpose.", "The owners sought higher compensation for the acquired agricultural land.",
             "The collector fixed the market value of the land on the notification date.", "The reference court enhanced the award."],
    "service": ["The employee was dismissed without an inquiry.", "The tribunal ordered reinstatement with back wages.",
                "The rules of natural justice were violated by the employer.", "The appointment was made on probation."],
}


def _records():
    out = []
    for t, sents in TOPICS.items():
        for k in range(6):
            rot = sents[k % 4 :] + sents[: k % 4]
            out.append({"id": f"{t}_{k}", "title": f"{t} case {k}", "paragraphs": [" ".join(rot[:2]), " ".join(rot[2:3]), rot[3]]})
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory, encoder):
    path = tmp_path_factory.mktemp("store") / "s"
    docs = [parse_record(r, settings=AS_GIVEN) for r in _records()]
    with EmbeddedStore(path, create=True) as store:
        summary = index_documents(store, docs, encoder)
        assert summary.indexed == 24
        refresh_stats(store, exact=True, sample_size=30, seed=0)
    return path, docs


def test_two_stage_equals_exhaustive_sdr_with_the_same_stats(built, encoder):
    path, docs = built
    with EmbeddedStore(path) as store:
        engine = MoreLikeThis(store=store, encoder=encoder, settings=MLTSettings(candidates=24, knn_k=24))
        corpus = store.all_vectors()
        for doc in docs[::5]:
            src = engine.source_from_id(doc.id)
            assert src.stats_origin == "stored"
            res = engine.run(Query(id=doc.id, size=23, method="sdr"))
            # brute force over every other document with the same (stored, exact) statistics
            stat_paras = [corpus.doc(k).paragraph(j) for k in range(corpus.n_docs) if corpus.ids[k] != doc.id
                          for j in range(corpus.doc(k).n_paragraphs)]
            sp = [src.vectors.paragraph(i) for i in range(src.vectors.n_paragraphs)]
            ids = [i for i in corpus.ids if i != doc.id]
            ref = np.array([reference_sdr_score(sp, [corpus.doc(corpus.ids.index(c)).paragraph(j)
                            for j in range(corpus.doc(corpus.ids.index(c)).n_paragraphs)], stat_paras) for c in ids])
            order = rank(ids, ref)
            got = {h.id: h.score for h in res.hits}
            assert [h.id for h in res.hits][:5] == [ids[i] for i in order][:5]
            for i in order:
                assert got[ids[i]] == pytest.approx(ref[i], abs=1e-4)
            assert doc.id not in got


def test_same_topic_ranks_first_and_explain_has_three_levels(built, encoder):
    path, _ = built
    with EmbeddedStore(path) as store:
        engine = MoreLikeThis(store=store, encoder=encoder, settings=MLTSettings(method="sdr"))
        res = engine.run(Query(id="land_0", size=5, explain=True))
        assert all(h.id.startswith("land_") for h in res.hits)
        ex = res.hits[0].explanation.model_dump(exclude_none=True)
        assert ex["score"] == pytest.approx(res.hits[0].score, abs=1e-4)
        pair = ex["paragraph_pairs"][0]
        assert {"source_paragraph", "candidate_paragraph", "normalised_score", "sentence_pairs"} <= set(pair)
        best = pair["sentence_pairs"][0]
        land_0 = {s for p in store.get("land_0").document.paragraphs for s in p}
        assert best["source_sentence"] in land_0 and best["cosine"] > 0.5
        assert any(best["candidate_sentence"] in p for p in store.get(res.hits[0].id).document.paragraphs)
        text = "The employer dismissed the worker without any inquiry.  He asked to be reinstated."
        res = engine.run(Query(text=text, size=3))
        assert res.stats_origin == "reference-sample"
        assert all(h.id.startswith("service_") for h in res.hits)
        # each hit reads: its title, and the best-matching sentence pair with offsets into both texts
        top = res.hits[0]
        assert top.title == f"service case {top.id.split('_')[1]}" and top.metadata == {}
        snip = top.snippet.model_dump(exclude_none=True)
        assert snip["candidate_sentence"] in {"The employee was dismissed without an inquiry.",
                                              "The tribunal ordered reinstatement with back wages."}
        assert snip["cosine"] > 0.5 and res.source_offsets == "request"
        assert text[snip["source_start"]:snip["source_end"]] == snip["source_sentence"]
        stored = store.get(top.id).document
        assert stored.text[snip["candidate_start"]:snip["candidate_end"]] == snip["candidate_sentence"]


def test_errors(built, encoder, tmp_path):
    path, _ = built
    with EmbeddedStore(path) as store:
        engine = MoreLikeThis(store=store, encoder=encoder)
        with pytest.raises(DocumentNotFoundError):
            engine.run(Query(id="nope"))
    with pytest.raises(IndexNotFoundError, match="sdr index"):
        EmbeddedStore(tmp_path / "missing").counts()
    from sdr_search.core.encoder import SentenceEncoder
    from sdr_search.core.settings import EncoderSettings

    other = SentenceEncoder(settings=EncoderSettings(precision="fp32", device="cpu", max_tokens=16))
    with EmbeddedStore(path) as store:
        with pytest.raises(ModelMismatchError, match="re-index"):
            MoreLikeThis(store=store, encoder=other).run(Query(text="A new text."))


def test_text_source_without_reference_sample_is_a_clear_error(tmp_path, encoder):
    with EmbeddedStore(tmp_path / "s", create=True) as store:
        index_documents(store, [parse_record(r) for r in _records()[:3]], encoder)
        with pytest.raises(StatsUnavailableError, match="sdr stats"):
            MoreLikeThis(store=store, encoder=encoder).run(Query(text="Some text here."))


def test_cli_index_info_mlt_stats_and_eval_store(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in _records()) + "\n" + json.dumps({"id": "blank", "text": ""}) + "\n")
    store = tmp_path / "store"
    common = ["--cache-dir", str(tmp_path / "cache"), "--precision", "fp32"]
    as_given = ["--min-paragraph-sentences", "1", "--min-sentence-chars", "0"]
    assert main(["--log-level", "WARNING", "index", "--store", str(store), str(corpus), "--no-progress", "--sample", "40",
                 *as_given, *common]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["indexed"] == 24 and out["skipped"] == 1 and out["failed"] == 0
    assert out["stats"]["mode"] == "sampled" and not out["stats"]["stale"]
    # a second run resumes: nothing re-indexed (no segmentation flags: the store's recorded one is used)
    assert main(["--log-level", "WARNING", "index", "--store", str(store), str(corpus), "--no-progress", *common]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["indexed"] == 0 and out["unchanged"] == 24
    # an explicit flag that differs from the store's record is refused
    assert main(["--log-level", "WARNING", "index", "--store", str(store), str(corpus), "--no-progress",
                 "--min-paragraph-sentences", "8", *common]) == 2

    assert main(["info", "--store", str(store), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["documents"] == 24 and info["paragraphs"] == 72 and info["sentences"] == 96
    assert info["meta"]["dim"] == 384 and info["stats"]["version"] == 1
    seg = info["meta"]["segmentation"]
    assert (seg["paragraph_unit"], seg["min_paragraph_sentences"], seg["min_sentence_chars"]) == ("paragraph", 1, 0)
    assert main(["info", "--store", str(store)]) == 0
    assert "merged to >= 1 sentences" in capsys.readouterr().out

    assert main(["mlt", "--store", str(store), "--id", "tax_1", "--size", "3", "--json", "--explain"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [h["id"][:4] for h in res["hits"]] == ["tax_"] * 3
    assert res["hits"][0]["explanation"]["paragraph_pairs"]

    assert main(["mlt", "--store", str(store), "--text", "The accused killed the deceased with a knife.", "--size", "2", *common]) == 0
    text = capsys.readouterr().out
    assert "murder_" in text.splitlines()[1]
    assert "document feedback: ranked again with murder_" in text  # a one-sentence source: its top hits join it
    assert main(["mlt", "--store", str(store), "--text", "The accused killed the deceased with a knife.", "--size", "2",
                 "--no-feedback", *common]) == 0
    assert "document feedback" not in capsys.readouterr().out

    assert main(["stats", "--store", str(store), "--no-progress"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["mode"] == "exact" and st["version"] == 2

    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"id": "q1", "text": "The land was acquired and compensation was enhanced."}) + "\n")
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"q1 0 land_{k} 1\n" for k in range(6)))
    assert main(["--log-level", "WARNING", "eval", "--store", str(store), "--queries", str(queries), "--qrels", str(qrels),
                 "--no-progress", *common]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["engine"] == "two-stage" and ev["queries"] == 1 and ev["HR@10"] == 1.0

    assert main(["mlt", "--store", str(store), "--id", "does-not-exist"]) == 2


# -- hybrid ---------------------------------------------------------------------------------------
def test_hybrid_fuses_every_signal_over_the_union_of_both_sides(built, encoder):
    from sdr_search.reranker.ranking import mean_cosines
    from sdr_search.core.evaluation import mean_vectors
    from sdr_search.core.fusion import HybridSpec, fuse
    from sdr_search.core.vectors import CorpusVectors

    path, _ = built
    with EmbeddedStore(path) as store:
        engine = MoreLikeThis(store=store, encoder=encoder, settings=MLTSettings(candidates=4, knn_k=4))
        src = engine.source_from_id("murder_2")
        pool, scores = engine.stage.aggregated(src, 8, ["murder_2"])  # 2K by aggregation, then the centroid pre-rank
        vector_ids = [pool[i] for i in prerank_order(pool, scores, src.vectors, store.paragraph_centroids(pool))[:4]]
        lexical = store.lexical_search(src.document.text, 4, exclude_ids=["murder_2"])
        union = vector_ids + [i for i in lexical.ids if i not in vector_ids]
        spec = HybridSpec("zscore", {"bm25": 1, "mean": 1, "sdr": 0.5})
        res = engine.run(Query(id="murder_2", size=len(union), fusion="zscore", weights=spec.weights))
        applied = res.hybrid.pop("weights_applied")  # zscore applies the configured weights, as shares of 1
        assert applied == pytest.approx({"bm25": 0.4, "mean": 0.4, "sdr": 0.2})
        assert res.method == "hybrid" and res.hybrid == spec.to_dict()
        assert res.candidates == len(union) and {h.id for h in res.hits} == set(union)
        assert set(res.timings_ms) == {"source", "candidates", "prerank", "lexical", "fetch", "rerank", "snippets"}
        # recompute every signal and the fusion independently
        cv = store.fetch(union)
        docs = store.fetch_documents(union)
        sdr = engine.run(Query(id="murder_2", size=len(union), method="sdr", candidate_ids=union))
        sdr_by_id = {h.id: h.score for h in sdr.hits}
        all_lex = store.lexical_search(src.document.text, 0, score_ids=union)
        signals = {"bm25": np.array([all_lex.scored[i] for i in union]),
                   "sdr": np.array([sdr_by_id[i] for i in union]), "mean": mean_cosines(src.vectors, docs)}
        q = mean_vectors(CorpusVectors.from_docs(["_source"], [src.vectors]))[0]
        np.testing.assert_allclose(signals["mean"], mean_vectors(cv) @ q, atol=1e-6)  # the plain definition
        fused = fuse(union, signals, spec)
        assert [h.id for h in res.hits] == [union[i] for i in fused.order(union)]
        for h in res.hits:
            k = union.index(h.id)
            assert h.score == pytest.approx(fused.scores[k])
            assert h.signals["bm25"].raw == pytest.approx(signals["bm25"][k], rel=1e-6)
            assert h.signals["sdr"].raw == pytest.approx(signals["sdr"][k], abs=1e-9)
            assert h.signals["mean"].normalised == pytest.approx(fused.normalised["mean"][k])
        # BM25 alone: the lexical top hit wins whether or not the vector side found it
        bm25_only = engine.run(Query(id="murder_2", size=3, fusion="minmax", weights={"bm25": 1}))
        assert bm25_only.hits[0].id == lexical.ids[0]


def test_hybrid_explain_and_sdr_only_weights(built, encoder):
    path, _ = built
    with EmbeddedStore(path) as store:
        engine = MoreLikeThis(store=store, encoder=encoder, settings=MLTSettings(candidates=24, knn_k=24))
        exact = engine.run(Query(id="service_1", size=23, method="sdr"))
        sdr_only = engine.run(Query(id="service_1", size=23, fusion="zscore", weights={"sdr": 1}))
        assert [h.id for h in sdr_only.hits] == [h.id for h in exact.hits]  # all candidates, one signal: SDR's order
        res = engine.run(Query(id="service_1", size=2, explain=True, method="hybrid", fusion="rrf",
                                     weights={"bm25": 1, "sdr": 1}))
        ex = res.hits[0].explanation.model_dump(exclude_none=True)
        assert ex["hybrid"]["score"] == res.hits[0].score and ex["hybrid"]["fusion"] == "rrf"
        assert ex["hybrid"]["rank_constant"] == 60
        assert set(ex["hybrid"]["signals"]) == {"bm25", "sdr", "mean"}
        assert "normalised" in ex["hybrid"]["signals"]["bm25"] and "normalised" not in ex["hybrid"]["signals"]["mean"]
        assert ex["paragraph_pairs"] and ex["score"] == pytest.approx(ex["hybrid"]["signals"]["sdr"]["raw"], abs=1e-4)
        assert all(h.id.startswith("service_") for h in res.hits)


def test_method_and_fusion_resolution(tmp_path, encoder):
    from sdr_search.core.fusion import DEFAULT_HYBRID

    with EmbeddedStore(tmp_path / "s", create=True) as store:
        index_documents(store, [parse_record(r) for r in _records()[:8]], encoder)
        engine = MoreLikeThis(store=store, encoder=encoder)
        assert engine.resolve() == DEFAULT_HYBRID  # product default: hybrid (measured, docs/results/relevance.md)
        assert MoreLikeThis(store=store, encoder=encoder, settings=MLTSettings(method="sdr")).resolve() is None
        assert engine.resolve(method="hybrid") == DEFAULT_HYBRID
        assert engine.resolve(method="hybrid", weights={"sdr": 1}).weights == {"bm25": 0.0, "sdr": 1.0, "mean": 0.0}
        env = MoreLikeThis(store=store, encoder=encoder, settings=MLTSettings(method="hybrid", fusion="minmax"))
        assert env.resolve().fusion == "minmax"
        store.set_search_defaults({"method": "hybrid", "fusion": "rrf", "weights": {"bm25": 3, "mean": 1}})
        got = env.resolve()  # the index's defaults win over the environment
        assert (got.fusion, got.weights["bm25"]) == ("rrf", 3.0)
        assert env.resolve(fusion="zscore").fusion == "zscore"  # the request wins over the index
        assert engine.resolve(method="sdr") is None
        assert MoreLikeThis(store=store, encoder=encoder).resolve(weights={"sdr": 1}) is not None  # options imply hybrid
        with pytest.raises(InvalidInputError, match="hybrid"):
            engine.resolve(method="sdr", fusion="rrf")
        with pytest.raises(InvalidInputError):
            engine.resolve(method="hybrid", weights={"bm25": 0})
        with pytest.raises(InvalidInputError):
            engine.resolve(method="bm25")


def test_cli_mlt_and_eval_store_hybrid(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in _records()) + "\n")
    store = tmp_path / "store"
    common = ["--cache-dir", str(tmp_path / "cache"), "--precision", "fp32"]
    assert main(["--log-level", "WARNING", "index", "--store", str(store), str(corpus), "--no-progress", "--sample", "40", *common]) == 0
    assert json.loads(capsys.readouterr().out)["lexical_documents"] == 24
    assert main(["mlt", "--store", str(store), "--id", "tax_1", "--size", "3", "--json", "--method", "hybrid",
                 "--weights", "bm25=1,sdr=1", "--explain"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["method"] == "hybrid" and res["hybrid"]["weights"] == {"bm25": 1.0, "sdr": 1.0, "mean": 0.0}
    assert [h["id"][:4] for h in res["hits"]] == ["tax_"] * 3
    assert set(res["hits"][0]["explanation"]["hybrid"]["signals"]) == {"bm25", "sdr", "mean"}
    assert main(["mlt", "--store", str(store), "--text", "The accused killed the deceased with a knife.", "--size", "2",
                 "--method", "hybrid", "--explain", *common]) == 0
    text = capsys.readouterr().out
    assert "murder_" in text.splitlines()[1] and "bm25 " in text and "fused (adaptive" in text
    # the footer gives the weights this query applied (the hits' signal weights), not only the configured ones
    footer = text.strip().splitlines()[-1]
    applied = re.search(r"weights applied bm25 ([0-9.]+), sdr ([0-9.]+), mean ([0-9.]+) from bm25=1,sdr=1,mean=1", footer)
    assert applied is not None, footer
    signal = re.search(r"bm25 [-0-9.]+ -> [-0-9.]+ x([0-9.e-]+)\s+sdr [-0-9.]+ -> [-0-9.]+ x([0-9.e-]+)", text)
    bm25_w, sdr_w = float(signal.group(1)), float(signal.group(2))
    assert float(applied.group(1)) == pytest.approx(bm25_w / (bm25_w + sdr_w + float(applied.group(3))), abs=2e-3)
    assert main(["mlt", "--store", str(store), "--id", "tax_1", "--method", "sdr", "--fusion", "rrf"]) == 2
    assert main(["mlt", "--store", str(store), "--id", "tax_1", "--fusion", "rrf", "--json"]) == 0  # implies hybrid
    assert json.loads(capsys.readouterr().out)["method"] == "hybrid"
    assert main(["mlt", "--store", str(store), "--id", "tax_1", "--method", "hybrid", "--weights", "bm25=-1"]) == 2
    assert main(["defaults", "--store", str(store), "--method", "hybrid", "--fusion", "minmax"]) == 0
    assert json.loads(capsys.readouterr().out)["search_defaults"] == {"method": "hybrid", "fusion": "minmax"}
    assert main(["mlt", "--store", str(store), "--id", "land_1", "--size", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hybrid"]["fusion"] == "minmax"  # the index default applies
    assert main(["defaults", "--store", str(store), "--clear"]) == 0
    assert json.loads(capsys.readouterr().out)["search_defaults"] == {}

    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"id": "q1", "text": "The land was acquired and compensation was enhanced."}) + "\n")
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"q1 0 land_{k} 1\n" for k in range(6)))
    assert main(["--log-level", "WARNING", "eval", "--store", str(store), "--queries", str(queries), "--qrels", str(qrels),
                 "--method", "hybrid", "--fusion", "rrf", "--no-progress", *common]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["method"] == "hybrid" and ev["hybrid"]["fusion"] == "rrf" and ev["HR@10"] == 1.0


def test_default_segmentation_merges_paragraphs_and_sources_follow_the_store(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in _records()) + "\n")
    store = tmp_path / "store"
    common = ["--cache-dir", str(tmp_path / "cache"), "--precision", "fp32"]
    assert main(["--log-level", "WARNING", "index", "--store", str(store), str(corpus), "--no-progress", "--sample", "40",
                 *common]) == 0
    capsys.readouterr()
    assert main(["info", "--store", str(store), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    # four sentences per document, fewer than the default 8: each document is one SDR paragraph
    assert info["paragraphs"] == 24 and info["sentences"] == 96
    assert info["meta"]["segmentation"]["min_paragraph_sentences"] == 8
    text = " ".join(TOPICS["murder"][:3]) + "\n\n" + TOPICS["murder"][3]
    assert main(["mlt", "--store", str(store), "--text", text, "--size", "2", "--json", "--explain", *common]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["hits"][0]["id"].startswith("murder_")
    assert {p["source_paragraph"] for p in res["hits"][0]["explanation"]["paragraph_pairs"]} == {0}  # one unit


# -- one query path ---------------------------------------------------------------------------------
def _court(doc_id: str) -> str:
    return "supreme" if int(doc_id.rsplit("_", 1)[1]) % 2 == 0 else "high"


@pytest.fixture(scope="module")
def with_metadata(tmp_path_factory, encoder):
    path = tmp_path_factory.mktemp("meta") / "s"
    docs = [parse_record({**r, "metadata": {"court": _court(r["id"])}}, settings=AS_GIVEN) for r in _records()]
    with EmbeddedStore(path, create=True) as store:
        index_documents(store, docs, encoder)
        refresh_stats(store, exact=True, sample_size=30, seed=0)
    return path


def test_a_filtered_query_ranks_the_matching_documents_as_exhaustive_sdr_does(with_metadata, encoder):
    with EmbeddedStore(with_metadata) as store:
        engine = MoreLikeThis(store=store, encoder=encoder, settings=MLTSettings(knn_k=24))
        res = engine.run(Query(id="tax_1", method="sdr", size=11, filter={"court": "supreme"}))
        matching = [d for d in store.iter_ids() if _court(d) == "supreme"]  # 12, none of them tax_1
        assert len(res.hits) == 11 and {h.id for h in res.hits} <= set(matching)
        full = engine.run(Query(id="tax_1", method="sdr", size=23, candidates=23))
        assert [h.id for h in res.hits] == [h.id for h in full.hits if _court(h.id) == "supreme"][:11]
        for h in res.hits:
            assert h.score == pytest.approx(next(f.score for f in full.hits if f.id == h.id), abs=1e-9)
        hybrid = engine.run(Query(id="tax_1", size=5, filter={"court": ["high"]}))
        assert hybrid.method == "hybrid" and all(_court(h.id) == "high" for h in hybrid.hits)
        assert engine.run(Query(id="tax_1", filter={"court": "nowhere"})).hits == []


def test_a_filter_matching_at_most_k_documents_ranks_them_all_without_a_search(with_metadata, encoder, monkeypatch):
    with EmbeddedStore(with_metadata) as store:
        engine = MoreLikeThis(store=store, encoder=encoder, settings=MLTSettings(knn_k=24))
        searched = []
        real = store.sentence_knn
        monkeypatch.setattr(store, "sentence_knn", lambda *a, **k: searched.append(k.get("filter")) or real(*a, **k))
        matching = [d for d in store.iter_ids() if _court(d) == "supreme"]  # 12
        for method in ("sdr", "hybrid"):
            # feedback off: one search per query (feedback would search again with the top hits)
            every = engine.run(Query(id="tax_1", method=method, size=12, candidates=12, filter={"court": "supreme"},
                                     feedback=False))
            assert searched == [] and every.candidates == 12 and {h.id for h in every.hits} == set(matching)
            # K under the matches: the filtered k-NN (the same top, found by search)
            found = engine.run(Query(id="tax_1", method=method, size=3, candidates=11, filter={"court": "supreme"},
                                     feedback=False))
            assert searched == [{"court": "supreme"}]
            assert [h.id for h in found.hits] == [h.id for h in every.hits][:3]
            searched.clear()


def test_a_query_reads_the_store_state_once(with_metadata, encoder, monkeypatch):
    with EmbeddedStore(with_metadata) as store:
        engine = MoreLikeThis(store=store, encoder=encoder)
        calls = []
        real = store.query_state
        monkeypatch.setattr(store, "query_state", lambda **kw: calls.append(kw) or real(**kw))
        for name in ("meta", "search_defaults", "stats_info", "reference"):
            monkeypatch.setattr(store, name, lambda *a, _n=name, **k: pytest.fail(f"the engine called store.{_n}()"))
        for query in (Query(text="The accused killed the deceased with a knife.", size=3, explain=True),
                      Query(id="land_2", size=3, method="sdr"), Query(id="land_2", filter={"court": "high"})):
            engine.run(query)
        assert len(calls) == 3
        assert calls[1]["reference_version"] is not None
        assert [c["ids"] for c in calls] == [(), ("land_2",), ("land_2",)]  # the sources by id read with the state


def test_queries_by_id_read_the_reference_sample_once_per_version(with_metadata, encoder, monkeypatch):
    # a query by id with stored statistics never needs the sample, and used to read and decode it on
    # every request (the engine only adopted it when a text query needed it)
    with EmbeddedStore(with_metadata) as store:
        engine = MoreLikeThis(store=store, encoder=encoder)
        samples = []
        real = store.query_state
        monkeypatch.setattr(store, "query_state", lambda **kw: (lambda st: samples.append(st.reference) or st)(real(**kw)))
        first = [engine.run(Query(id=i, size=3, method="sdr")) for i in ("land_2", "tax_1", "land_2")]
        assert [r is not None for r in samples] == [True, False, False]
        text = engine.run(Query(text="The accused killed the deceased with a knife.", size=3))  # the adopted copy
        assert samples[-1] is None and text.hits
        assert first[0].hits == first[2].hits
        refresh_stats(store, exact=True, sample_size=30, seed=1)  # a new version: read once more
        engine.run(Query(id="tax_1", size=3, method="sdr"))
        engine.run(Query(id="tax_1", size=3, method="sdr"))
        assert [r is not None for r in samples[-2:]] == [True, False]


def test_query_objects_refuse_bad_input():
    with pytest.raises(InvalidInputError, match="exactly one source"):
        Query()
    with pytest.raises(InvalidInputError, match="exactly one source"):
        Query(id="a", text="b")
    with pytest.raises(InvalidInputError, match="size"):
        Query(id="a", size=-1)
    with pytest.raises(InvalidInputError, match="candidates"):
        Query(id="a", candidates=0)
    with pytest.raises(InvalidInputError, match="filter"):
        Query(id="a", filter=["court"])
    with pytest.raises(InvalidInputError, match="filter.court: expected a string, a number, a boolean or a list"):
        Query(id="a", filter={"court": {"nested": 1}})


def test_one_sentence_cap_for_every_door(with_metadata, encoder, monkeypatch, capsys, caplog):
    from sdr_search.core.errors import SourceTooLargeError

    text = " ".join(f"Sentence number {k} is about the case." for k in range(6))
    with EmbeddedStore(with_metadata) as store:
        with pytest.raises(SourceTooLargeError, match="SDR_MAX_QUERY_SENTENCES"):
            MoreLikeThis(store=store, encoder=encoder, settings=MLTSettings(max_query_sentences=5)).run(Query(text=text))
    monkeypatch.setenv("SDR_SERVICE_MAX_SOURCE_SENTENCES", "7")  # the service's older name is still read
    assert MLTSettings().max_query_sentences == 7
    monkeypatch.setenv("SDR_MAX_QUERY_SENTENCES", "5")
    assert MLTSettings().max_query_sentences == 5
    assert main(["mlt", "--store", str(with_metadata), "--text", text, "--precision", "fp32", "--no-cache"]) == 2
    assert "SDR_MAX_QUERY_SENTENCES" in caplog.text


def test_cli_mlt_filter(with_metadata, capsys):
    assert main(["mlt", "--store", str(with_metadata), "--id", "murder_3", "--size", "4", "--json", "--method", "sdr",
                 "--filter", '{"court": "supreme"}']) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["index"] == "default" and len(res["hits"]) == 4
    assert all(_court(h["id"]) == "supreme" for h in res["hits"])
    assert main(["mlt", "--store", str(with_metadata), "--id", "murder_3", "--size", "2", "--from", "2", "--json",
                 "--method", "sdr", "--filter", '{"court": "supreme"}']) == 0
    assert [h["id"] for h in json.loads(capsys.readouterr().out)["hits"]] == [h["id"] for h in res["hits"][2:]]
    assert main(["mlt", "--store", str(with_metadata), "--id", "murder_3", "--filter", "court=supreme"]) == 2
    assert main(["mlt", "--store", str(with_metadata), "--id", "murder_3", "--filter", '["court"]']) == 2


def test_library_front_door(tmp_path, encoder):
    import sdr_search
    from sdr_search import Query as FrontQuery, index_files, more_like_this, open_store

    assert FrontQuery is Query and set(sdr_search.__all__) >= {"Query", "open_store", "index_files", "more_like_this"}
    for name in sdr_search.__all__:  # every name the front door lists is there
        assert getattr(sdr_search, name) is not None, name
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in _records()) + "\n")
    with open_store(tmp_path / "store", create=True) as store:
        summary = index_files(store, [corpus], encoder=encoder, sample=40)
        assert summary["indexed"] == 24 and summary["stats"]["mode"] == "sampled" and summary["lexical_documents"] == 24
        result = more_like_this(store, Query(text="The accused killed the deceased with a knife.", size=3), encoder=encoder)
        assert result.hits and result.hits[0].id.startswith("murder_")
        by_id = more_like_this(store, Query(id="land_1", size=2, method="sdr"))
        assert [h.id[:5] for h in by_id.hits] == ["land_"] * 2
    with pytest.raises(ValueError, match="OpenSearch"):
        open_store(tmp_path / "store", index="x")
