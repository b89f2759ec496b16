"""``attnkit.api.evaluate_lm``: the loss it reports is the mean next-token cross-entropy over the very tokens of
the validation split the run held out, computed here by hand.

Axis legend: T block size (windows of T + 1 ids).
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from attnkit import api
from attnkit.checkpoints import load
from attnkit.data.pipeline.documents import prepare_finetune_data

TINY_LM = dict(preset="char-small", overrides={"n_layer": 1, "n_head": 2, "n_embd": 32}, block_size=16,
               batch_size=8, warmup_steps=2, eval_every=10, eval_batches=2, progress=False)


def _mean_loss_by_hand(model: torch.nn.Module, ids: torch.Tensor, T: int) -> tuple[float, int]:
    """Non-overlapping windows of T + 1 ids at 0, T, 2T, ...: every target once (a tail shorter than T left out)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, (ids.numel() - 1) // T * T, T):
            window = ids[start:start + T + 1]  # (T + 1,)
            total += float(F.cross_entropy(model(window[None, :-1])[0], window[1:], reduction="sum"))
            count += T
    return total / count, count


def test_a_finetuned_run_is_scored_on_its_own_documents_each_ending_with_eos(tmp_path):
    """Was: the fortune file's valid text scored as one plain stream, its ``%`` lines included and no ``<eos>``
    (176 tokens here instead of the 128 of the documents the run held out), a loss the run never measured."""
    rng = random.Random(3)
    words = "the cat sat on a mat and dog ran far".split()
    entries = [" ".join(rng.choice(words) for _ in range(6)) for _ in range(200)]
    text = tmp_path / "fortunes.txt"
    text.write_text("\n%\n".join(entries) + "\n%\n", encoding="utf-8")
    base = api.train_lm(api.TrainLMOptions(data=str(text), out=tmp_path / "base", steps=2, tokenizer="bpe",
                                           vocab_size=300, **TINY_LM),
                        log=lambda line: None).out
    tuned = tmp_path / "tuned"
    api.finetune(source=str(base), data=str(text), out=tuned, steps=2, block_size=16, batch_size=8,
                 eval_batches=2, progress=False, log=lambda line: None)

    result = api.evaluate_lm(ckpt=tuned, data=str(text), json=tmp_path / "eval.json").metrics

    loaded = load(tuned, expect_kind="lm")
    _, valid, info = prepare_finetune_data(str(text), loaded.tokenizer, "fortune")
    assert info["documents"] == "fortune" and int((valid == loaded.tokenizer.eos_id).sum()) > 0
    loss, count = _mean_loss_by_hand(loaded.model, valid, 16)
    assert result["tokens"] == count
    assert result["loss"] == pytest.approx(loss, rel=1e-5)
    assert result["ppl"] == pytest.approx(torch.tensor(loss, dtype=torch.float64).exp().item(), rel=1e-5)


def test_a_best_checkpoint_replaced_during_the_evaluation_gets_no_record_of_the_old_one(tmp_path, monkeypatch):
    """Was: ``eval lm --ckpt RUN`` of a run that is training wrote ``eval_lm.json`` into whatever ``best/`` was
    there at the end: a newer checkpoint, with the older one's step and loss (or a raw FileNotFoundError when the
    swap came during the write)."""
    import shutil

    import attnkit.training.lm_task as lm_task

    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 60, encoding="utf-8")
    run = api.train_lm(data=str(text), out=tmp_path / "run", steps=10, **TINY_LM).out
    best = run / "checkpoints" / "best"
    step = load(run).state["step"]
    real = lm_task.mean_token_loss

    def swap_then_score(*args, **kwargs):  # the trainer publishes a new best/ while this evaluation runs
        shutil.copytree(best, tmp_path / "new")
        shutil.rmtree(best)
        (tmp_path / "new").rename(best)
        return real(*args, **kwargs)

    monkeypatch.setattr(lm_task, "mean_token_loss", swap_then_score)
    with pytest.raises(ValueError, match=rf"best was replaced or removed by its training run while it was evaluated, "
                                         rf"so the record \(step {step}: valid loss \d+\.\d{{4}}, perplexity "
                                         rf"[\d.]+\) is not written into it; pass --json FILE to keep one"):
        api.evaluate_lm(ckpt=str(run), data=str(text))
    assert not (best / "eval_lm.json").exists()
    kept = tmp_path / "eval.json"  # a record elsewhere is written
    assert api.evaluate_lm(ckpt=str(run), data=str(text), json=kept).path == kept and kept.exists()
    monkeypatch.setattr(lm_task, "mean_token_loss", real)
    assert api.evaluate_lm(ckpt=str(run), data=str(text)).path == best / "eval_lm.json"  # in place: written
