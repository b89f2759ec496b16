"""MTTask: batches from the data team's token-budget batcher, loss, evaluation with BLEU, and the Trainer
driving a tiny encoder-decoder Transformer (the same loop as language modelling)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.data.pipeline.mt_batching import IGNORE_INDEX, EncodedPairs
from attnkit.models.configs import TransformerConfig
from attnkit.models.transformer import Transformer
from attnkit.training.config import TrainConfig
from attnkit.training.metrics import read_metrics
from attnkit.training.mt_task import MTTask, greedy_translator
from helpers import assert_close
from attnkit.training.task import Task
from attnkit.training.trainer import Trainer

PAD, BOS, EOS = 0, 1, 2
V = 12  # ids 4..11 are "words"


def _pairs(n: int, seed: int) -> EncodedPairs:
    """A reversal task: target = reversed source (source ids end with <eos>, targets have no specials)."""
    g = torch.Generator().manual_seed(seed)
    src, tgt = [], []
    for _ in range(n):
        length = int(torch.randint(2, 6, (1,), generator=g))
        words = torch.randint(4, V, (length,), generator=g).tolist()
        src.append(words + [EOS])
        tgt.append(words[::-1])
    return EncodedPairs(src, tgt, pad_id=PAD, bos_id=BOS, eos_id=EOS)


def _model(seed: int = 0, dropout: float = 0.0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=32, num_heads=2,
                                         num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64,
                                         dropout=dropout, max_len=32, pad_id=PAD))


class _WordTokenizer:
    """Ids <-> space-separated words, for BLEU on the toy task."""

    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(f"w{i}" for i in ids if not (skip_special_tokens and i < 4))


def _references(data: EncodedPairs) -> list[str]:
    return [_WordTokenizer().decode(t) for t in data.tgt]


def test_batches_come_from_the_token_budget_batcher_deterministically():
    train, valid = _pairs(64, 0), _pairs(16, 1)
    a = MTTask(train, valid, max_tokens=48, seed=3)
    b = MTTask(train, valid, max_tokens=48, seed=3)
    assert isinstance(a, Task)
    for step in (0, 5, 40):  # 40 is in a later epoch
        x, y = a.batch("train", step), b.batch("train", step)
        assert all(torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v for u, v in zip(x, y))
        B, S = x.src.shape
        assert B * max(S, x.tgt_in.shape[1]) <= 48
        assert x.tgt_in.shape == x.labels.shape == x.tgt_key_padding_mask.shape
    assert not torch.equal(a.batch("train", 0).index, a.batch("train", 1).index)


def test_loss_is_token_mean_over_non_padding_labels():
    task = MTTask(_pairs(32, 0), _pairs(8, 1), max_tokens=40, label_smoothing=0.0)
    model = _model()
    b = task.batch("train", 2)
    loss, n = task.loss(model, b)
    assert n == int((b.labels != IGNORE_INDEX).sum()) == b.n_tokens
    logits = model(b.src, b.tgt_in, src_key_padding_mask=b.src_key_padding_mask,
                   tgt_key_padding_mask=b.tgt_key_padding_mask)  # (B, T, V)
    expected = F.cross_entropy(logits.reshape(-1, V), b.labels.reshape(-1), ignore_index=IGNORE_INDEX)
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)


def test_label_smoothing_in_training_loss_only():
    train, valid = _pairs(32, 0), _pairs(8, 1)
    plain = MTTask(train, valid, max_tokens=40, label_smoothing=0.0)
    smooth = MTTask(train, valid, max_tokens=40, label_smoothing=0.1)
    model = _model().eval()
    b = plain.batch("train", 0)
    with torch.no_grad():
        assert float(smooth.loss(model, b)[0]) != pytest.approx(float(plain.loss(model, b)[0]), abs=1e-4)
    assert smooth.evaluate(model, 3) == plain.evaluate(model, 3)


def test_evaluate_loss_ppl_and_bleu():
    train, valid = _pairs(32, 0), _pairs(8, 1)
    refs = _references(valid)
    perfect = MTTask(train, valid, max_tokens=40, translate_fn=lambda m, srcs: refs[:len(srcs)], references=refs)
    out = perfect.evaluate(_model().eval(), 100)  # capped at one pass over the validation set
    assert set(out) == {"loss", "ppl", "bleu", "chrf"}
    assert out["bleu"] == pytest.approx(100.0) and out["chrf"] == pytest.approx(100.0)
    wrong = MTTask(train, valid, max_tokens=40, translate_fn=lambda m, srcs: ["w5"] * len(srcs), references=refs)
    assert wrong.evaluate(_model().eval(), 1)["bleu"] < 10.0


def test_translate_fn_must_return_one_text_per_source():
    valid = _pairs(8, 1)
    task = MTTask(_pairs(16, 0), valid, max_tokens=40, translate_fn=lambda m, s: ["x"], references=_references(valid))
    with pytest.raises(ValueError, match="must return a list of 8 strings, got list of length 1"):
        task.evaluate(_model().eval(), 1)


def test_greedy_translator_with_the_generation_module():
    valid = _pairs(6, 1)
    translate = greedy_translator(_WordTokenizer(), batch_size=4, max_len_b=6)
    texts = translate(_model().eval(), [list(s) for s in valid.src])
    assert len(texts) == 6 and all(isinstance(t, str) for t in texts)


@pytest.mark.parametrize("kwargs,message", [
    (dict(max_tokens=0), "max_tokens must be an int >= 1, got 0"),
    (dict(max_tokens=40, seed=-1), "seed must be an int >= 0, got -1"),
    (dict(max_tokens=40, label_smoothing=1.0), r"label_smoothing must be in \[0, 1\), got 1.0"),
    (dict(max_tokens=40, translate_fn=lambda m, s: s), r"references must hold one text per validation pair \(8\)"),
    (dict(max_tokens=40, translate_fn="greedy", references=["a"] * 8), "translate_fn must be callable"),
    (dict(max_tokens=40, bleu_sentences=0), "bleu_sentences must be an int >= 1, got 0"),
    (dict(max_tokens=40, word_dropout=1.0), r"word_dropout must be in \[0, 1\), got 1.0"),
    (dict(max_tokens=40, n_samples=-1), "n_samples must be an int >= 0, got -1"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MTTask(_pairs(16, 0), _pairs(8, 1), **kwargs)


def test_pairs_must_be_encoded_pairs():
    with pytest.raises(ValueError, match="train must be EncodedPairs .* got list"):
        MTTask([([4, 2], [5])], _pairs(8, 1), max_tokens=40)


def test_budget_smaller_than_the_longest_pair():
    with pytest.raises(ValueError, match="max_tokens must be at least the longest pair"):
        MTTask(_pairs(16, 0), _pairs(8, 1), max_tokens=3)


def test_state_dict_detects_different_data():
    train, valid = _pairs(16, 0), _pairs(8, 1)
    state = MTTask(train, valid, max_tokens=40).state_dict()
    MTTask(_pairs(16, 0), _pairs(8, 1), max_tokens=40).load_state_dict(state)
    with pytest.raises(ValueError, match="translation data differ.*train_fingerprint"):
        MTTask(_pairs(16, 5), valid, max_tokens=40).load_state_dict(state)
    with pytest.raises(ValueError, match=r"max_tokens \(checkpoint 40, now 30\)"):
        MTTask(train, valid, max_tokens=30).load_state_dict(state)


def test_fixed_shape_batches_give_the_same_loss_and_gradients_as_plain_ones():
    """Padding to a fixed shape (longer rows, rows of padding only) changes neither the loss nor its gradients."""
    from attnkit.data.pipeline.mt_batching import collate

    task = MTTask(_pairs(40, 0), _pairs(8, 1), max_tokens=48, shape_multiple=4)
    for step in range(4):
        fixed = task.batch("train", step)
        plain = collate(task.train, fixed.index[fixed.index >= 0].tolist())
        results = []
        for b in (fixed, plain):
            model = _model(seed=3).train()
            loss, n = task.loss(model, b)
            loss.backward()
            results.append((loss.detach(), n, [p.grad for p in model.parameters()]))
        (la, na, ga), (lb, nb, gb) = results
        assert na == nb
        assert_close(la, lb, "float32")  # (the loss is taken in float32)
        for a, b in zip(ga, gb):
            assert_close(a, b, "float32")


def test_shape_multiple_is_part_of_the_task_state():
    train, valid = _pairs(16, 0), _pairs(8, 1)
    plain = MTTask(train, valid, max_tokens=40).state_dict()
    fixed = MTTask(train, valid, max_tokens=40, shape_multiple=8).state_dict()
    assert "shape_multiple" not in plain and fixed["shape_multiple"] == 8  # absent at 1: older runs resume as before
    with pytest.raises(ValueError, match=r"shape_multiple \(checkpoint 8, now None\)"):
        MTTask(train, valid, max_tokens=40).load_state_dict(fixed)
    with pytest.raises(ValueError, match=r"shape_multiple \(checkpoint None, now 8\)"):
        MTTask(train, valid, max_tokens=40, shape_multiple=8).load_state_dict(plain)
    with pytest.raises(ValueError, match="MTTask shape_multiple must be"):
        MTTask(train, valid, max_tokens=40, shape_multiple=0)


def test_trainer_trains_a_tiny_transformer_and_keeps_the_best_bleu(tmp_path):
    train, valid = _pairs(200, 0), _pairs(16, 1)
    refs = _references(valid)
    task = MTTask(train, valid, max_tokens=64, seed=0, label_smoothing=0.1,
                  translate_fn=greedy_translator(_WordTokenizer(), max_len_b=6), references=refs, bleu_sentences=8)
    model = _model(dropout=0.1)
    cfg = TrainConfig(steps=40, lr=3e-3, warmup_steps=4, min_lr=3e-4, eval_every=20, eval_batches=4,
                      log_every=5, ckpt_every=40, best_metric="valid_bleu", best_mode="max", seed=0)
    summary = Trainer(model, task, cfg, tmp_path / "mt", model_config=model.config.to_dict(),
                      progress=False).fit()
    evals = [r for r in read_metrics(tmp_path / "mt") if "valid_loss" in r]
    assert [r["step"] for r in evals] == [20, 40]
    assert set(evals[0]) == {"step", "valid_loss", "valid_ppl", "valid_bleu", "valid_chrf"}
    train_losses = [r["loss"] for r in read_metrics(tmp_path / "mt") if "loss" in r]
    assert train_losses[-1] < train_losses[0]
    assert summary["best"]["metric"] == "valid_bleu"
    assert summary["best"]["value"] == max(r["valid_bleu"] for r in evals)


def test_bf16_autocast_training_evaluates_bleu_with_the_cached_decoder(tmp_path):
    """Under bf16 autocast the BLEU decoding still runs (in the weights' fp32: the KV caches hold fp32), and
    the BLEU it reports is the one of plain fp32 decoding of the same weights."""
    train, valid = _pairs(64, 0), _pairs(8, 1)
    refs = _references(valid)
    translate = greedy_translator(_WordTokenizer(), max_len_b=6)
    task = MTTask(train, valid, max_tokens=64, seed=0, translate_fn=translate, references=refs, bleu_sentences=8)
    model = _model()
    cfg = TrainConfig(steps=4, lr=3e-3, warmup_steps=1, eval_every=4, eval_batches=2, log_every=2, ckpt_every=4,
                      seed=0, autocast="bf16")
    Trainer(model, task, cfg, tmp_path / "mt", model_config=model.config.to_dict(), progress=False).fit()
    evals = [r for r in read_metrics(tmp_path / "mt") if "valid_bleu" in r]
    assert len(evals) == 1
    model.eval()
    with torch.no_grad():
        fp32 = task.evaluate(model, 1)["bleu"]
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            under_autocast = task.evaluate(model, 1)["bleu"]
    assert under_autocast == fp32 == evals[0]["valid_bleu"]


def test_best_checkpoint_is_chosen_by_bleu_not_by_loss(tmp_path):
    """The validation loss falls at every evaluation, but the (scripted) translations are perfect only at the
    second one: best/ must be that step's weights, not the last (lowest-loss) ones."""
    from attnkit.checkpoints.checkpoint import read_checkpoint_state

    train, valid = _pairs(200, 0), _pairs(16, 1)
    refs = _references(valid)
    calls = []

    def scripted(model, sources):
        calls.append(len(sources))
        return refs[:len(sources)] if len(calls) == 2 else ["w5"] * len(sources)

    task = MTTask(train, valid, max_tokens=64, seed=0, translate_fn=scripted, references=refs, bleu_sentences=8)
    model = _model()
    cfg = TrainConfig(steps=30, lr=3e-3, warmup_steps=2, eval_every=10, eval_batches=4, log_every=5,
                      ckpt_every=10, best_metric="valid_bleu", best_mode="max", seed=0)
    summary = Trainer(model, task, cfg, tmp_path / "mt", model_config=model.config.to_dict(), progress=False).fit()
    evals = [r for r in read_metrics(tmp_path / "mt") if "valid_loss" in r]
    assert [r["step"] for r in evals] == [10, 20, 30]
    assert evals[2]["valid_loss"] < evals[1]["valid_loss"]  # the loss alone would pick step 30
    assert summary["best"] == {"metric": "valid_bleu", "value": pytest.approx(100.0), "step": 20}
    assert read_checkpoint_state(tmp_path / "mt" / "checkpoints" / "best")["step"] == 20


def test_sample_translations_are_printed_after_each_evaluation(tmp_path, capsys):
    train, valid = _pairs(64, 0), _pairs(8, 1)
    refs = _references(valid)
    task = MTTask(train, valid, max_tokens=64, translate_fn=lambda m, s: ["w5 w6"] * len(s), references=refs,
                  bleu_sentences=8, n_samples=2)
    assert task.eval_report() == []  # nothing translated yet
    model = _model()
    cfg = TrainConfig(steps=4, lr=1e-3, warmup_steps=1, eval_every=2, eval_batches=1, ckpt_every=4,
                      best_metric="valid_bleu", best_mode="max")
    Trainer(model, task, cfg, tmp_path / "mt", model_config=model.config.to_dict(), progress=True).fit()
    out = capsys.readouterr()
    text = out.out + out.err
    # no source texts attached (built from ids): the source ids are shown
    first = f"  src: {' '.join(map(str, valid.src[0]))}\n  ref: {refs[0]}\n  out: w5 w6"
    assert text.count(first) == 2, text  # at steps 2 and 4
    assert text.count("  ref: ") == 4  # two samples per evaluation
    assert [s[1] for s in task.last_samples] == refs[:2]


def test_translation_scores_on_all_valid_sentences_keep_the_mode():
    valid = _pairs(8, 1)
    refs = _references(valid)
    task = MTTask(_pairs(16, 0), valid, max_tokens=40, translate_fn=lambda m, s: refs[:len(s)], references=refs)
    model = _model().train()
    scores = task.translation_scores(model)
    assert scores["sentences"] == 8 and scores["bleu"] == pytest.approx(100.0) and len(scores["hypotheses"]) == 8
    assert model.training  # put back in training mode
    with pytest.raises(ValueError, match="needs a translate_fn"):
        MTTask(_pairs(16, 0), valid, max_tokens=40).translation_scores(model)


def test_word_dropout_replaces_source_words_in_training_only():
    train, valid = _pairs(200, 0), _pairs(8, 1)
    task = MTTask(train, valid, max_tokens=400, word_dropout=0.5, unk_id=3)
    b = task.batch("train", 0)
    torch.manual_seed(0)
    dropped = task._drop_words(b)
    real = ~b.src_key_padding_mask & (b.src != EOS)
    assert torch.equal(dropped.src[~real], b.src[~real])  # padding and <eos> untouched
    changed = dropped.src[real] != b.src[real]
    assert torch.all(dropped.src[real][changed] == 3)
    assert 0.4 < changed.float().mean().item() < 0.6  # about half of the words
    assert torch.equal(dropped.tgt_in, b.tgt_in) and torch.equal(dropped.labels, b.labels)
    model = _model()
    plain = MTTask(train, valid, max_tokens=400)
    with torch.no_grad():
        assert float(task.loss(model.eval(), b)[0]) == pytest.approx(float(plain.loss(model.eval(), b)[0]))
        torch.manual_seed(1)
        assert float(task.loss(model.train(), b)[0]) != pytest.approx(float(plain.loss(model.eval(), b)[0]))


def _varied_pairs(n: int, seed: int) -> EncodedPairs:
    """Source and target of 1 to 9 words, so the batches hold different numbers of labels."""
    g = torch.Generator().manual_seed(seed)
    src, tgt = [], []
    for _ in range(n):
        words = torch.randint(4, V, (int(torch.randint(1, 10, (1,), generator=g)),), generator=g).tolist()
        src.append(words + [EOS])
        tgt.append(words[::-1])
    return EncodedPairs(src, tgt, pad_id=PAD, bos_id=BOS, eos_id=EOS)


def test_validation_loss_weights_every_label_equally():
    """Mutation check: summing the batch means and dividing by the number of batches gave another number."""
    task = MTTask(_varied_pairs(16, 0), _varied_pairs(12, 1), max_tokens=30, label_smoothing=0.1)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=16, num_heads=2,
                                          num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32,
                                          dropout=0.0, max_len=32, pad_id=PAD)).eval()
    n_batches = task.batchers["valid"].num_batches
    total, count, counts = 0.0, 0, set()
    with torch.no_grad():
        for i in range(n_batches):
            b = task.batch("valid", i)
            logits = model(b.src, b.tgt_in, src_key_padding_mask=b.src_key_padding_mask,
                           tgt_key_padding_mask=b.tgt_key_padding_mask)  # (B, T, V)
            total += float(F.cross_entropy(logits.reshape(-1, V).double(), b.labels.reshape(-1),
                                           ignore_index=IGNORE_INDEX, reduction="sum"))
            count += b.n_tokens
            counts.add(b.n_tokens)
    assert n_batches > 1 and len(counts) > 1  # batches of different sizes: the two means differ
    assert task.evaluate(model, n_batches)["loss"] == pytest.approx(total / count, rel=1e-6)
