"""``TrainConfig.loss_chunks`` in the trainer: the task's loss over row chunks of the final hidden states.

* a run with it logs the same losses as a run without, up to float rounding (the chunks' sums are added in another
  order: not bit for bit), for a GPT and for a label-smoothed translator, both with dropout and gradient
  accumulation; every training micro-batch's loss is chunked, no evaluation's is;
* a resumed run may change it; with ``compile=True`` it is compiled with the loss (translation: for any shape);
* the config's checks; a task or a model without the chunked path, and CUDA graphs, are refused in one line.

Axis legend: none (runs and numbers only).
"""

from __future__ import annotations

import pytest
import torch
from helpers import fit_losses, tiny_gpt_config, tiny_lm_task, tiny_mt_task, tiny_train_config, tiny_transformer_config

from attnkit.models.gpt import GPT
from attnkit.models.transformer import Transformer
from attnkit.training.config import RESUMABLE_CHANGES
from attnkit.training.trainer import Trainer

CLOSE = dict(rel=2e-5, abs=1e-6)  # float32 losses summed in another order


def _fit_losses(*args, **kwargs) -> list[float]:
    return fit_losses(*args, **kwargs)[0]


def _gpt():
    config = tiny_gpt_config(block_size=16, dropout=0.2)
    torch.manual_seed(0)
    return GPT(config), config


def _translator():
    config = tiny_transformer_config(dropout=0.2)
    torch.manual_seed(0)
    return Transformer(config), config


@pytest.mark.parametrize("build, task", [(_gpt, tiny_lm_task), (_translator, tiny_mt_task)], ids=["gpt", "translator"])
def test_a_run_with_it_logs_the_same_losses_to_float_rounding(tmp_path, chunk_calls, build, task):
    plain = _fit_losses(tmp_path, "plain", build(), task(), tiny_train_config())
    assert chunk_calls == []
    chunked_task = task()
    chunked = _fit_losses(tmp_path, "chunked", build(), chunked_task, tiny_train_config(loss_chunks=3))
    assert chunked_task.loss_chunks == 3
    assert len(chunk_calls) == 4 * 2 * 3  # 3 chunks of each of the 2 micro-batches of the 4 updates, none in eval
    assert len(plain) == len(chunked) == 4 + 2
    assert chunked == pytest.approx(plain, **CLOSE)


def test_a_resumed_run_may_change_it(tmp_path, chunk_calls):
    assert "loss_chunks" in RESUMABLE_CHANGES
    straight = _fit_losses(tmp_path, "straight", _gpt(), tiny_lm_task(), tiny_train_config(steps=4, schedule_steps=4))
    _fit_losses(tmp_path, "run", _gpt(), tiny_lm_task(), tiny_train_config(steps=2, schedule_steps=4))
    resumed = _fit_losses(tmp_path, "run", _gpt(), tiny_lm_task(),
                          tiny_train_config(steps=4, schedule_steps=4, loss_chunks=2),
                   resume=True)
    assert len(chunk_calls) == 2 * 2 * 2
    assert resumed == pytest.approx(straight, **CLOSE)


@pytest.mark.parametrize("build, task", [(_gpt, tiny_lm_task), (_translator, tiny_mt_task)], ids=["gpt", "translator"])
def test_with_compile_it_is_compiled_with_the_loss(tmp_path, build, task):
    """Translation compiles for any batch shape (``dynamic=True``), where the label smoothing is a symbol: was an
    error inside the checkpoint's subgraph while the smoothing was one of its arguments."""
    plain = _fit_losses(tmp_path, "plain", build(), task(), tiny_train_config(steps=2))
    compiled = _fit_losses(tmp_path, "compiled", build(), task(),
                           tiny_train_config(steps=2, compile=True, loss_chunks=3))
    assert compiled == pytest.approx(plain, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True, 4097])
def test_the_config_refuses_a_bad_value_by_name(bad):
    with pytest.raises(ValueError, match="TrainConfig.loss_chunks must be"):
        tiny_train_config(loss_chunks=bad)
    assert tiny_train_config(loss_chunks=4096).loss_chunks == 4096  # the most: one row a chunk of 4,096 rows


class _PlainTask:
    """An LM task without the chunked path."""

    def __init__(self):
        self.inner = tiny_lm_task()

    def __getattr__(self, name):
        if name == "loss_chunks":
            raise AttributeError(name)
        return getattr(self.inner, name)


class _Wrapped(torch.nn.Module):
    """A GPT behind a forward without ``output_fn``."""

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, idx):
        return self.gpt(idx)


def test_refused_combinations_are_one_line_errors(tmp_path):
    model, config = _gpt()
    with pytest.raises(ValueError, match=r"^loss_chunks=2 needs a task with a chunked loss \(LMTask, MTTask\), got "
                                         r"_PlainTask$"):
        Trainer(model, _PlainTask(), tiny_train_config(loss_chunks=2), tmp_path / "a", model_config=config,
                progress=False,
                log=False)
    with pytest.raises(ValueError, match=r"^loss_chunks=2 needs a model whose forward takes output_fn \(GPT, "
                                         r"Transformer\), got _Wrapped$"):
        Trainer(_Wrapped(model), tiny_lm_task(), tiny_train_config(loss_chunks=2), tmp_path / "b", model_config=config,
                progress=False, log=False)
    # off: such a task and model train as they are
    Trainer(_Wrapped(model), _PlainTask(), tiny_train_config(), tmp_path / "c", model_config=config, progress=False,
            log=False)
    trainer = Trainer(model, tiny_lm_task(), tiny_train_config(loss_chunks=2), tmp_path / "d", model_config=config,
                      progress=False, log=False)
    with pytest.raises(ValueError, match=r"loss_chunks = 0 \(got 2: each chunk's recomputation reads the CUDA random "
                                         r"state, which a capture forbids\)") as err:
        trainer._graphed(trainer.task)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("build, task", [(_gpt, tiny_lm_task), (_translator, tiny_mt_task)], ids=["gpt", "translator"])
def test_only_a_training_loss_with_gradients_on_is_chunked(chunk_calls, build, task):
    """task.loss chunks only when the model is in training mode and gradients are on: a training-mode loss under
    no_grad and an eval-mode loss with gradients on are the plain loss (mutation check: either condition dropped);
    all three are the same number up to float rounding."""
    model, _ = build()
    t = task()
    t.loss_chunks = 3
    batch = t.batch("train", 0)
    model.eval()
    with torch.no_grad():
        want = float(t.loss(model, batch)[0])
    model.train()  # dropout 0.2: compare under eval only, count under train
    with torch.no_grad():
        t.loss(model, batch)
    assert chunk_calls == []
    model.eval()
    got = t.loss(model, batch)[0]
    assert chunk_calls == [] and float(got) == pytest.approx(want, **CLOSE)
    model.train()
    t.loss(model, batch)[0].backward()
    assert len(chunk_calls) == 3


@pytest.mark.parametrize("chunks", [0, 2])
def test_a_translation_label_outside_the_target_vocabulary_is_refused_by_name(chunks):
    """MTTask's chunked loss checks the batch's largest label against the output layer's vocabulary as the plain loss
    does: a batch whose largest label is id V is a one-line ValueError (mutation check: ``max_label > V``)."""
    t = tiny_mt_task()
    t.loss_chunks = chunks
    model, _ = _translator()
    V = model.config.tgt_vocab_size
    batch = t.batch("train", 0)._replace(max_label=V)  # the host-side count says a label is id V
    with pytest.raises(ValueError, match=rf"^MTTask: label id {V} is outside the model's target vocabulary "
                                         rf"\[0, {V}\)$"):
        t.loss(model, batch)


def test_a_trainer_without_it_switches_a_chunked_task_off(tmp_path):
    """loss_chunks=0 in the config sets the task's loss_chunks to 0 (a task reused from a chunked run trains on the
    plain loss, as the config says), and K sets K (mutation check: the off path left the task as it was)."""
    model, config = _gpt()
    task = tiny_lm_task()
    task.loss_chunks = 3
    Trainer(model, task, tiny_train_config(), tmp_path / "a", model_config=config, progress=False, log=False)
    assert task.loss_chunks == 0
    Trainer(model, task, tiny_train_config(loss_chunks=2), tmp_path / "b", model_config=config, progress=False,
            log=False)
    assert task.loss_chunks == 2
