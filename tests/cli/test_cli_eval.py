"""`sdr eval` end to end on a tiny corpus written by the test (real encoder, real BM25)."""

import json
import subprocess
import sys

import pytest

from sdr_search.cli import main

pytestmark = pytest.mark.integration

TOPICS = {
    "tax": [
        "The assessee claimed a deduction under the Income Tax Act.",
        "The revenue disputed the capital gain assessed for that year.",
        "The tribunal held that the income was taxable in the hands of the assessee.",
    ],
    "murder": [
        "The accused was convicted of murder under Section 302 of the Penal Code.",
        "The eyewitness saw the accused strike the deceased with a knife.",
        "The post-mortem report confirmed the injuries caused death.",
    ],
    "land": [
        "The State acquired the land for a public purpose under the Land Acquisition Act.",
        "The owners sought higher compensation for the acquired agricultural land.",
        "The collector fixed the market value of the land on the notification date.",
    ],
}


def _doc(doc_id, topic, k):
    sents = TOPICS[topic]
    return {"id": doc_id, "paragraphs": [" ".join(sents[k % 3 :] + sents[: k % 3]), sents[(k + 1) % 3]]}


@pytest.fixture()
def dataset(tmp_path):
    corpus = [_doc(f"{t}_{k}", t, k) for t in TOPICS for k in range(3)]
    corpus.append({"id": "empty_doc", "paragraphs": []})
    queries = [_doc(f"q_{t}", t, 5) for t in TOPICS]
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in corpus) + "\n")
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(d) for d in queries) + "\n")
    qrels = [f"q_{t} 0 {t}_{k} 1" for t in TOPICS for k in range(3)]
    (tmp_path / "qrels.txt").write_text("\n".join(qrels) + "\n")
    return tmp_path


def _args(d, method, *extra):
    return [
        "--log-level", "WARNING", "eval",
        "--corpus", str(d / "corpus.jsonl"), "--queries", str(d / "queries.jsonl"),
        "--qrels", str(d / "qrels.txt"), "--method", method, "--no-progress",
        "--cache-dir", str(d / "cache"), "--precision", "fp32", *extra,
    ]


@pytest.mark.parametrize("method", ["sdr", "sdr-nonorm", "mean", "bm25", "hybrid"])
def test_eval_prints_metrics_and_writes_a_run(dataset, method, capsys):
    run = dataset / "run.trec"
    assert main(_args(dataset, method, "--run", str(run))) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("queries", "MPR", "MRR", "HR@10", "MAP", "P@10", "Recall@100", "nDCG@10"):
        assert key in out
    assert out["queries"] == 3 and out["method"] == method
    assert out["skipped"] == {"corpus": 1, "queries": 0}
    assert out["corpus_documents"] == 9
    assert out["segmentation"] == {"paragraph_unit": "paragraph", "min_paragraph_sentences": 8, "min_sentence_chars": 20}
    # the topics are well separated: every relevant document is in the top 3
    assert out["HR@10"] == 1.0 and out["MAP"] == pytest.approx(1.0)
    lines = run.read_text().splitlines()
    assert len(lines) == 27
    qid, q0, docid, rnk, score, tag = lines[0].split()
    assert q0 == "Q0" and rnk == "1" and tag == method


@pytest.mark.parametrize("fusion,weights", [("zscore", "bm25=1,mean=1,sdr=0.5"), ("minmax", "sdr=1"), ("rrf", "bm25=2,mean=1")])
def test_eval_hybrid_fusion_options(dataset, capsys, fusion, weights):
    assert main(_args(dataset, "hybrid", "--fusion", fusion, "--weights", weights, "--candidates", "2",
                      "--run", str(dataset / "h.trec"))) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "hybrid" and out["MAP"] == pytest.approx(1.0)
    assert out["hybrid"]["fusion"] == fusion and out["hybrid"]["candidates"] == 2
    assert out["hybrid"]["weights"] == dict(zip(("bm25", "sdr", "mean"), [0.0] * 3)) | {
        k: float(v) for k, v in (p.split("=") for p in weights.split(","))}
    scores = [float(line.split()[4]) for line in (dataset / "h.trec").read_text().splitlines() if line.startswith("q_tax")]
    assert len(scores) == 9 and scores == sorted(scores, reverse=True)  # the fused set first, the rest below


def test_eval_hybrid_bad_weights_is_one_line_exit_2(dataset, capsys):
    assert main(_args(dataset, "hybrid", "--weights", "bm25=-1")) == 2
    assert main(_args(dataset, "hybrid", "--weights", "tfidf=1")) == 2


def test_sampled_stats_record_the_sample(dataset, capsys):
    assert main(_args(dataset, "sdr", "--stats", "sampled", "--sample", "4", "--seed", "3")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stats"] == "sampled(R=4, seed=3)"
    assert out["queries"] == 3


def test_missing_model_dir_is_one_line_exit_2(dataset, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sdr_search", *_args(dataset, "sdr", "--model", str(tmp_path / "no-such-model"))],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert "no-such-model" in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_missing_input_path_is_one_line_exit_2(dataset, capsys):
    args = _args(dataset, "bm25")
    args[args.index("--corpus") + 1] = str(dataset / "nope.jsonl")
    assert main(args) == 2


def test_every_subcommand_has_help():
    for argv in (["--help"], ["eval", "--help"]):
        proc = subprocess.run([sys.executable, "-m", "sdr_search", *argv], capture_output=True, text=True)
        assert proc.returncode == 0 and "usage: sdr" in proc.stdout


@pytest.mark.parametrize("fusion", ["adaptive", "zscore"])
def test_eval_prints_the_fusion_weights_per_query_kind(dataset, capsys, caplog, fusion):
    # whole queries have two paragraphs ("several paragraphs", paragraphs not merged); cut to 2
    # sentences they have one
    for cut, kind in (("full", "several paragraphs"), ("sentences:2", "one paragraph")):
        with caplog.at_level("INFO", logger="sdr"):
            assert main(_args(dataset, "hybrid", "--fusion", fusion, "--candidates", "2", "--source-cut", cut,
                              "--min-paragraph-sentences", "1")) == 0
        out = json.loads(capsys.readouterr().out)
        used = out["hybrid"]["weights_used"]
        assert list(used) == [kind] and used[kind]["queries"] == 3
        assert sum(used[kind][s]["mean"] for s in ("bm25", "sdr", "mean")) == pytest.approx(1.0, abs=2e-3)
        assert f"fusion weights, {kind}" in caplog.text
        assert out.get("source_cut") == (None if cut == "full" else cut)
        if fusion == "zscore":  # fixed: the given weights, divided by their sum
            assert used[kind]["bm25"] == {"mean": 0.333, "min": 0.333, "max": 0.333}
        else:
            assert out["hybrid"]["adaptive"]["half_sentences"] == 32.0
        if fusion == "adaptive":  # document feedback's share: f h / (h + n), n sentences; here every n is short
            n = used[kind]["sentences"][0]
            assert used[kind]["feedback"]["min"] == pytest.approx(8 / (8 + n), abs=1e-3) or n != used[kind]["sentences"][1]
            assert used[kind]["feedback"]["max"] > 0 and "document feedback share" in caplog.text
        else:
            assert "feedback" not in used[kind]
        if cut != "full":
            assert used[kind]["sentences"] == [2, 2]
    if fusion == "adaptive":  # --no-feedback: one ranking, no share reported
        assert main(_args(dataset, "hybrid", "--no-feedback", "--candidates", "2", "--min-paragraph-sentences", "1")) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["hybrid"]["adaptive"]["feedback_docs"] == 0
        assert "feedback" not in out["hybrid"]["weights_used"]["several paragraphs"]


def test_eval_bad_source_cut_is_one_line_exit_2(dataset):
    assert main(_args(dataset, "bm25", "--source-cut", "words:3")) == 2
    assert main(_args(dataset, "bm25", "--source-cut", "sentences:0")) == 2
