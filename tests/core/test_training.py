"""sdr train: pair sampling, losses, and the training loop (loss goes down, model loads, resume)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sdr_search.core.documents import documents_from_records
from sdr_search.core.errors import InvalidInputError
from sdr_search.core.training.sampler import PairSampler, SentencePool, corpus_fingerprint

pytestmark = pytest.mark.unit

TOPICS = {
    "cricket": ["The batsman scored a century in the final over of the match.",
                "The bowler took three wickets before the tea interval.",
                "Spectators cheered as the captain lifted the trophy.",
                "Rain delayed the start of play on the second morning."],
    "tax": ["The assessee claimed a deduction for depreciation on machinery.",
            "The tribunal held that the income was taxable in the relevant year.",
            "The revenue appealed against the order of the commissioner.",
            "Interest on the refund was payable from the date of payment."],
    "murder": ["The accused was convicted under section 302 of the penal code.",
               "The post-mortem report showed injuries caused by a sharp weapon.",
               "Two eyewitnesses identified the appellant at the scene.",
               "The sessions judge sentenced him to imprisonment for life."],
    "land": ["The land was acquired by the state for a public purpose.",
             "Compensation was fixed at the market value on the date of notification.",
             "The claimants sought enhancement of the amount awarded.",
             "The collector's award was challenged before the reference court."],
}


def tiny_docs(n_per_topic: int = 2):
    records = []
    for topic, sents in TOPICS.items():
        for k in range(n_per_topic):
            rot = sents[k:] + sents[:k]
            records.append({"id": f"{topic}-{k}", "paragraphs": [" ".join(rot[:2]) + f" Paragraph {k} of {topic} one.",
                                                                 " ".join(rot[2:]) + f" Paragraph {k} of {topic} two."]})
    return list(documents_from_records(records))


def unique_docs(n_docs: int = 6, pars: int = 3, sents: int = 4):
    records = [{"id": f"d{d}", "paragraphs": [" ".join(f"Document {d} paragraph {p} sentence number {s} is here."
                                                        for s in range(sents)) for p in range(pars)]}
               for d in range(n_docs)]
    return list(documents_from_records(records))


# -- sampler -------------------------------------------------------------------------------------
def _locate(docs):
    where = {}
    for di, doc in enumerate(docs):
        for pi, par in enumerate(doc.paragraphs):
            for s in par:
                where[s] = (di, pi)
    return where


def test_sampler_proportion_and_pair_kinds():
    docs = unique_docs()
    where = _locate(docs)
    sampler = PairSampler(SentencePool.from_documents(docs, min_chars=0), seed=3)
    batch = sampler.pair_batch(4000)
    frac = batch.labels.mean()
    assert abs(frac - 0.5) < 4 * np.sqrt(0.25 / 4000)  # within 4 sigma of 0.5
    for left, right, y, ld, rd in zip(batch.left, batch.right, batch.labels, batch.left_doc, batch.right_doc):
        (d1, p1), (d2, p2) = where[left], where[right]
        assert (d1, d2) == (ld, rd)
        if y == 1:
            assert (d1, p1) == (d2, p2) and left != right  # same paragraph, two different sentences
        else:
            assert d1 != d2  # negatives always from different documents


def test_sampler_respects_caps_and_fraction():
    docs = unique_docs(n_docs=4, pars=2, sents=10)
    pool = SentencePool.from_documents(docs, max_sentences_per_paragraph=3, min_chars=0)
    assert len(pool.sentences) == 4 * 2 * 3
    assert all("sentence number 0" in s or "sentence number 1" in s or "sentence number 2" in s for s in pool.sentences)
    batch = PairSampler(pool, seed=0, positive_fraction=0.8).pair_batch(3000)
    assert abs(batch.labels.mean() - 0.8) < 0.04


def test_sampler_state_round_trip_and_seed():
    docs = unique_docs()
    pool = SentencePool.from_documents(docs, min_chars=0)
    a = PairSampler(pool, seed=1)
    a.pair_batch(5)
    state = json.loads(json.dumps(a.state()))  # checkpoints store it as JSON
    first = a.pair_batch(7)
    a.set_state(state)
    again = a.pair_batch(7)
    assert first.left == again.left and first.right == again.right
    assert PairSampler(pool, seed=1).pair_batch(9).left == PairSampler(pool, seed=1).pair_batch(9).left
    assert PairSampler(pool, seed=1).pair_batch(9).left != PairSampler(pool, seed=2).pair_batch(9).left


def test_anchor_positive_batch_is_intra_paragraph():
    docs = unique_docs()
    where = _locate(docs)
    batch = PairSampler(SentencePool.from_documents(docs, min_chars=0), seed=0).anchor_positive_batch(200)
    assert batch.labels.tolist() == [1] * 200
    for left, right, d in zip(batch.left, batch.right, batch.left_doc):
        assert where[left] == where[right] and where[left][0] == d and left != right


def test_sampler_refuses_unusable_corpora():
    one = unique_docs(n_docs=1)
    with pytest.raises(InvalidInputError, match="at least 2 documents"):
        PairSampler(SentencePool.from_documents(one, min_chars=0))
    singles = list(documents_from_records([{"id": "a", "text": "Only one sentence here."},
                                           {"id": "b", "text": "Another lonely sentence."}]))
    with pytest.raises(InvalidInputError, match="2 or more usable sentences"):
        PairSampler(SentencePool.from_documents(singles, min_chars=0))


def test_corpus_fingerprint_changes_with_content():
    docs = unique_docs()
    assert corpus_fingerprint(docs) == corpus_fingerprint(unique_docs())
    assert corpus_fingerprint(docs) != corpus_fingerprint(unique_docs(sents=5))


# -- losses --------------------------------------------------------------------------------------
def test_contrastive_loss_matches_equation_1():
    torch = pytest.importorskip("torch")
    from sdr_search.core.training.losses import contrastive_loss

    def unit(theta):
        return torch.tensor([[np.cos(theta), np.sin(theta)]], dtype=torch.float32)

    a = unit(0.0)
    # positive at cos 0.6 -> 1 - 0.6; negative at cos 0.6 with m=1 -> 0.6; negative at cos -0.5 -> 0
    b = unit(np.arccos(0.6))
    c = unit(np.arccos(-0.5))
    assert contrastive_loss(a, b, torch.tensor([1])).item() == pytest.approx(0.4, abs=1e-5)
    assert contrastive_loss(a, b, torch.tensor([0])).item() == pytest.approx(0.6, abs=1e-5)
    assert contrastive_loss(a, c, torch.tensor([0])).item() == pytest.approx(0.0, abs=1e-6)
    assert contrastive_loss(a, b, torch.tensor([0]), margin=0.5).item() == pytest.approx(0.1, abs=1e-5)
    both = contrastive_loss(torch.cat([a, a]), torch.cat([b, b]), torch.tensor([1, 0]))
    assert both.item() == pytest.approx(0.5, abs=1e-5)


def test_triplet_loss_uses_hardest_negative_from_other_documents():
    torch = pytest.importorskip("torch")
    from sdr_search.core.training.losses import angular_distance, triplet_hardest_loss

    def unit(theta):
        return [np.cos(theta), np.sin(theta)]

    # pair 0 (doc 0): anchor at 0, positive at 0.2 rad; pair 1 (doc 1): anchor at 0.5, positive at 1.5;
    # pair 2 (doc 0): anchor at 0.1 (same doc as pair 0: never a negative of anchor 0).
    anchors = torch.tensor([unit(0.0), unit(0.5), unit(0.1)], dtype=torch.float32)
    positives = torch.tensor([unit(0.2), unit(1.5), unit(0.3)], dtype=torch.float32)
    docs = torch.tensor([0, 1, 0])
    loss = triplet_hardest_loss(anchors, positives, docs, margin=0.5)
    d = lambda x: float(angular_distance(torch.tensor(np.cos(x))))  # noqa: E731
    expected = [
        max(0.0, 0.5 + d(0.2) - d(0.5)),  # anchor 0 (doc 0): hardest negative = anchor 1, 0.5 rad away
        max(0.0, 0.5 + d(1.0) - d(0.2)),  # anchor 1 (doc 1): positive 2 at 0.3 rad, 0.2 away
        max(0.0, 0.5 + d(0.2) - d(0.4)),  # anchor 2 (doc 0): anchor 1, 0.4 away
    ]
    assert loss.item() == pytest.approx(float(np.mean(expected)), abs=1e-4)
    # one document only: no negative, no loss
    assert triplet_hardest_loss(anchors, positives, torch.tensor([0, 0, 0])).item() == 0.0


def test_mask_tokens_never_touches_special_tokens():
    torch = pytest.importorskip("torch")
    from sdr_search.core.training.losses import mask_tokens

    ids = torch.randint(5, 1000, (64, 50))
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    special[:, 40:] = True  # padding
    g = torch.Generator().manual_seed(0)
    masked, labels = mask_tokens(ids, special, mask_token_id=3, vocab_size=1000, probability=0.15, generator=g)
    assert (labels[special] == -100).all() and (masked[special] == ids[special]).all()
    selected = labels != -100
    frac = selected.sum().item() / (~special).sum().item()
    assert 0.12 < frac < 0.18
    assert (labels[selected] == ids[selected]).all()
    mask_share = (masked[selected] == 3).float().mean().item()
    assert 0.7 < mask_share < 0.9
    assert (masked[~selected] == ids[~selected]).all()


# -- training loop -------------------------------------------------------------------------------
def _settings(**kw):
    from sdr_search.core.training.settings import TrainSettings

    base = dict(steps=16, batch_size=8, learning_rate=5e-4, warmup_fraction=0.0, max_tokens=32,
                checkpoint_every=100, device="cpu", precision="fp32", min_sentence_chars=0, seed=0,
                probe_pairs=8, head_warmup_steps=0)
    base.update(kw)
    return TrainSettings(**base)


@pytest.mark.parametrize("objective", ["sdr", "triplet"])
def test_training_lowers_the_loss_and_saves_a_usable_model(tmp_path, objective):
    from sdr_search.core.encoder import SentenceEncoder
    from sdr_search.core.settings import EncoderSettings
    from sdr_search.core.training.model import read_provenance
    from sdr_search.core.training.trainer import train

    docs = tiny_docs()
    out = tmp_path / "model"
    result = train(docs, out, settings=_settings(objective=objective), progress=False, threads=1)
    rows = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 17))
    first, last = np.mean([r["loss"] for r in rows[:4]]), np.mean([r["loss"] for r in rows[-4:]])
    assert last < first, (first, last)
    prov = read_provenance(out)
    assert prov["objective"] == objective and prov["steps"] == 16
    assert prov["corpus_hash"] == corpus_fingerprint(docs) and prov["mlm_head_initialised"] is True
    enc = SentenceEncoder(settings=EncoderSettings(model=str(out), device="cpu", precision="fp32"))
    vecs = enc.encode(["The bowler took three wickets.", "Compensation for acquired land."])
    assert vecs.shape == (2, 384) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert result.steps == 16 and result.resumed_from == 0
    for when in ("before", "after"):
        cos = prov["probe_cosines"][when]
        assert -1 <= cos["negative"] <= 1 and -1 <= cos["positive"] <= 1
        assert cos["gap"] == pytest.approx(cos["positive"] - cos["negative"], abs=1e-3)


def test_training_is_deterministic_and_resumes_exactly(tmp_path, monkeypatch):
    from safetensors.numpy import load_file

    from sdr_search.core.training import trainer
    from sdr_search.core.training.sampler import PairSampler as Sampler

    docs = tiny_docs()
    settings = _settings(steps=6, checkpoint_every=2)
    trainer.train(docs, tmp_path / "a", settings=settings, progress=False, threads=1)

    calls = {"n": 0}
    real = Sampler.pair_batch

    def flaky(self, size):
        calls["n"] += size == settings.batch_size  # training batches only, not the probe set
        if calls["n"] == 5 and size == settings.batch_size:
            raise KeyboardInterrupt  # the process dies during step 5
        return real(self, size)

    monkeypatch.setattr(Sampler, "pair_batch", flaky)
    with pytest.raises(KeyboardInterrupt):
        trainer.train(docs, tmp_path / "b", settings=settings, progress=False, threads=1)
    monkeypatch.setattr(Sampler, "pair_batch", real)
    assert (tmp_path / "b" / "checkpoints" / "step-0000004").is_dir()
    result = trainer.train(docs, tmp_path / "b", settings=settings, progress=False, threads=1)
    assert result.resumed_from == 4
    log_a = (tmp_path / "a" / "training_log.jsonl").read_text()
    assert (tmp_path / "b" / "training_log.jsonl").read_text() == log_a
    wa, wb = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    assert wa.keys() == wb.keys()
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)


def test_resume_refuses_a_different_run(tmp_path):
    from sdr_search.core.errors import SDRError
    from sdr_search.core.training.trainer import train

    docs = tiny_docs()
    train(docs, tmp_path / "m", settings=_settings(steps=4, checkpoint_every=2), progress=False, threads=1)
    with pytest.raises(SDRError, match="different training run"):
        train(docs, tmp_path / "m", settings=_settings(steps=4, checkpoint_every=2, learning_rate=1e-4), progress=False, threads=1)
    train(docs, tmp_path / "m", settings=_settings(steps=4, checkpoint_every=2, learning_rate=1e-4), restart=True,
          progress=False, threads=1)


def test_cli_train_errors_are_one_line(tmp_path, caplog):
    from sdr_search.cli import main

    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"id": "a", "text": "A lonely document. It has two sentences."}) + "\n")
    assert main(["train", "--corpus", str(one), "--out", str(tmp_path / "m")]) == 2
    assert "at least 2 usable documents" in caplog.text
    two = tmp_path / "two.jsonl"
    two.write_text("".join(json.dumps({"id": d.id, "paragraphs": [" ".join(p) for p in d.paragraphs]}) + "\n" for d in tiny_docs()))
    assert main(["train", "--corpus", str(two), "--out", str(tmp_path / "m"), "--steps", "0"]) == 2
    assert "invalid training setting steps" in caplog.text
    assert main(["train", "--corpus", str(two), "--out", str(tmp_path / "m"), "--positive-fraction", "1"]) == 2
    assert "invalid training setting positive_fraction" in caplog.text


def test_cli_train_flags_reach_the_settings():
    from sdr_search.cli import build_parser
    from sdr_search.cli.train import train_settings

    args = build_parser().parse_args(["train", "--corpus", "c.jsonl", "--out", "m", "--positive-fraction", "0.75",
                                      "--max-tokens", "128", "--margin", "0.5"])
    s = train_settings(args)
    assert (s.positive_fraction, s.max_tokens, s.margin) == (0.75, 128, 0.5)
    default = train_settings(build_parser().parse_args(["train", "--corpus", "c.jsonl", "--out", "m"]))
    assert (default.positive_fraction, default.max_tokens, default.margin) == (0.5, 64, 1.0)


def test_cli_train_writes_model_and_summary(tmp_path, capsys):
    from sdr_search.cli import main

    two = tmp_path / "two.jsonl"
    two.write_text("".join(json.dumps({"id": d.id, "paragraphs": [" ".join(p) for p in d.paragraphs]}) + "\n" for d in tiny_docs()))
    rc = main(["train", "--corpus", str(two), "--out", str(tmp_path / "m"), "--steps", "3", "--batch-size", "4",
               "--max-tokens", "24", "--device", "cpu", "--no-progress", "--threads", "1", "--head-warmup-steps", "2"])
    # (the CLI's probe uses the default 256 pairs: fine on 8 documents)
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 3 and summary["objective"] == "sdr" and summary["corpus_documents"] == 8
    assert summary["segmentation"]["min_paragraph_sentences"] == 8  # the default: positives from merged units
    from sdr_search.core.training.model import read_provenance

    assert read_provenance(tmp_path / "m")["segmentation"] == summary["segmentation"]
    rows = [json.loads(line) for line in (tmp_path / "m" / "training_log.jsonl").read_text().splitlines()]
    assert [r["head_warmup"] for r in rows] == [True, True, False, False, False]
    assert (tmp_path / "m" / "config.json").is_file() and (tmp_path / "m" / "model.safetensors").is_file()


def test_head_warmup_trains_only_the_new_head_then_everything(tmp_path):
    """During the MLM-head warm-up the encoder (with the decoder tied to its word embeddings) keeps
    the base weights and the loss is the MLM loss alone; afterwards the encoder learns too."""
    import torch
    from safetensors.numpy import load_file

    from sdr_search.core.encoder import resolve_model_dir
    from sdr_search.core.training.model import load_for_training, read_provenance
    from sdr_search.core.training.trainer import train

    docs = tiny_docs()
    base, _, _ = load_for_training(resolve_model_dir(None), seed=0)
    base_state = {k: v.detach().numpy().copy() for k, v in base.state_dict().items()}
    out = tmp_path / "m"
    result = train(docs, out, settings=_settings(steps=2, head_warmup_steps=3, head_warmup_lr=1e-3, checkpoint_every=3),
                   progress=False, threads=1)
    rows = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert result.first_loss == pytest.approx(np.mean([r["loss"] for r in rows[3:]]), abs=1e-4)  # joint steps only
    assert [r["head_warmup"] for r in rows] == [True, True, True, False, False]
    assert all(r["loss"] == r["mlm"] for r in rows[:3]) and rows[3]["loss"] > rows[3]["mlm"]
    assert [r["lr"] for r in rows[:3]] == [1e-3] * 3

    warm = torch.load(out / "checkpoints" / "step-0000003" / "training.pt", weights_only=False)["model"]
    encoder_keys = [k for k in base_state if k.startswith("bert.")]
    head_keys = [k for k in base_state if k.startswith("cls.") and k != "cls.predictions.decoder.weight"]
    assert encoder_keys and head_keys
    assert all(np.array_equal(warm[k].numpy(), base_state[k]) for k in encoder_keys)
    assert any(not np.array_equal(warm[k].numpy(), base_state[k]) for k in head_keys)
    final = load_file(str(out / "model.safetensors"))
    changed = [k for k in encoder_keys if k in final and not np.array_equal(final[k], base_state[k])]
    assert changed  # the encoder learned after the warm-up
    assert read_provenance(out)["head_warmup_steps"] == 3


def test_head_warmup_is_skipped_without_the_mlm_term(tmp_path):
    """With ``mlm_weight=0`` the head is out of the loss, so there is nothing to warm up: every
    logged step is a joint step and the provenance records no warm-up."""
    from sdr_search.core.training.model import read_provenance
    from sdr_search.core.training.trainer import train

    out = tmp_path / "m"
    train(tiny_docs(), out, settings=_settings(steps=2, head_warmup_steps=3, mlm_weight=0.0), progress=False, threads=1)
    rows = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert [r["head_warmup"] for r in rows] == [False, False]
    assert all(r["loss"] == r["metric"] for r in rows)
    assert read_provenance(out)["head_warmup_steps"] == 0


# -- in-batch negatives and frozen layers ----------------------------------------------------------
def test_inbatch_loss_is_infonce_over_other_documents_positives():
    torch = pytest.importorskip("torch")
    from sdr_search.core.training.losses import inbatch_negatives_loss

    def unit(theta):
        return [np.cos(theta), np.sin(theta)]

    # pair 0 (doc 0): anchor at 0, positive at 0.2 rad; pair 1 (doc 1): anchor at 1.0, positive at 1.1;
    # pair 2 (doc 0): positive at 0.05 rad is closer to anchor 0 than its own positive, but from the
    # same document, so it is no negative of anchor 0 (nor is positive 0 of anchor 2).
    anchors = torch.tensor([unit(0.0), unit(1.0), unit(0.3)], dtype=torch.float32)
    positives = torch.tensor([unit(0.2), unit(1.1), unit(0.05)], dtype=torch.float32)
    docs = torch.tensor([0, 1, 0])
    t = 0.1
    c = lambda x: float(np.cos(x)) / t  # noqa: E731

    def row(own, others):
        return -own + float(np.log(np.exp(own) + sum(np.exp(o) for o in others)))

    expected = [
        row(c(0.2), [c(1.1)]),  # anchor 0: own positive, positive 1 (doc 1); positive 2 masked
        row(c(0.1), [c(1.0 - 0.2), c(1.0 - 0.05)]),  # anchor 1: both doc-0 positives are negatives
        row(c(0.25), [c(0.8)]),  # anchor 2: positive 1 only
    ]
    loss = inbatch_negatives_loss(anchors, positives, docs, temperature=t)
    assert loss.item() == pytest.approx(float(np.mean(expected)), abs=1e-4)
    # a lower temperature sharpens: the well-separated batch's loss falls
    assert inbatch_negatives_loss(anchors, positives, docs, temperature=0.01).item() < loss.item()
    # swapping the positives of two documents makes every anchor's target the wrong one: the loss rises
    swapped = positives[[1, 0, 2]]
    assert inbatch_negatives_loss(anchors, swapped, docs, temperature=t).item() > loss.item()
    # one document only: no negatives, nothing to learn
    assert inbatch_negatives_loss(anchors, positives, torch.tensor([0, 0, 0])).item() == pytest.approx(0.0, abs=1e-6)


def test_inbatch_training_step_runs_and_logs_the_metric_alone(tmp_path):
    from sdr_search.core.training.model import read_provenance
    from sdr_search.core.training.trainer import train

    out = tmp_path / "m"
    train(tiny_docs(), out, settings=_settings(objective="inbatch", steps=3, mlm_weight=0.0, temperature=0.1),
          progress=False, threads=1)
    rows = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(np.isfinite(r["loss"]) and r["loss"] == r["metric"] > 0 for r in rows)
    assert all(r["mlm"] > 0 for r in rows)  # still computed and logged, without gradients
    prov = read_provenance(out)
    assert prov["objective"] == "inbatch" and prov["settings"]["temperature"] == 0.1


def test_trainable_layers_freeze_embeddings_and_lower_layers(tmp_path):
    """After training with ``trainable_layers=2`` on the 6-layer MiniLM, the embeddings and layers
    0-3 keep the base weights and layers 4-5 have changed."""
    from safetensors.numpy import load_file

    from sdr_search.core.encoder import resolve_model_dir
    from sdr_search.core.training.model import load_for_training, read_provenance
    from sdr_search.core.training.trainer import train

    base, _, _ = load_for_training(resolve_model_dir(None), seed=0)
    base_state = {k: v.detach().numpy().copy() for k, v in base.state_dict().items()}
    out = tmp_path / "m"
    train(tiny_docs(), out, settings=_settings(objective="inbatch", steps=2, mlm_weight=0.0, trainable_layers=2),
          progress=False, threads=1)
    final = load_file(str(out / "model.safetensors"))
    frozen = [k for k in base_state if k.startswith("bert.embeddings.")
              or any(k.startswith(f"bert.encoder.layer.{i}.") for i in range(4))]
    trainable = [k for k in base_state if any(k.startswith(f"bert.encoder.layer.{i}.") for i in (4, 5))]
    assert len(frozen) > 20 and len(trainable) > 10
    assert all(np.array_equal(final[k], base_state[k]) for k in frozen if k in final)
    changed = [k for k in trainable if not np.array_equal(final[k], base_state[k])]
    assert all(k in final for k in trainable)
    assert len(changed) >= len(trainable) // 2  # weights (layer norms' biases aside) moved
    assert any(".attention." in k for k in changed) and any(".output.dense.weight" in k for k in changed)
    prov = read_provenance(out)
    assert prov["trainable_layers"] == 2 and prov["frozen_parameters"] == len(frozen)


def test_trainable_layers_is_checked_against_the_model(tmp_path):
    from sdr_search.core.training.trainer import train

    with pytest.raises(InvalidInputError, match="has 6 layers"):
        train(tiny_docs(), tmp_path / "m", settings=_settings(steps=1, trainable_layers=7), progress=False, threads=1)
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        _settings(trainable_layers=0)


def test_cli_train_new_flags_reach_the_settings(monkeypatch):
    from sdr_search.cli import build_parser
    from sdr_search.core.training.settings import TrainSettings

    monkeypatch.setenv("SDR_TRAIN_TRAINABLE_LAYERS", "3")
    monkeypatch.setenv("SDR_TRAIN_OBJECTIVE", "inbatch")
    assert (TrainSettings().trainable_layers, TrainSettings().objective) == (3, "inbatch")
    monkeypatch.delenv("SDR_TRAIN_TRAINABLE_LAYERS")
    monkeypatch.delenv("SDR_TRAIN_OBJECTIVE")
    from sdr_search.cli.train import train_settings

    args = build_parser().parse_args(["train", "--corpus", "c.jsonl", "--out", "m", "--objective", "inbatch",
                                      "--temperature", "0.1", "--trainable-layers", "2"])
    s = train_settings(args)
    assert (s.objective, s.temperature, s.trainable_layers) == ("inbatch", 0.1, 2)
    default = train_settings(build_parser().parse_args(["train", "--corpus", "c.jsonl", "--out", "m"]))
    assert (default.temperature, default.trainable_layers) == (0.05, None)
