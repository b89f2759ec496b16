"""LMTask: deterministic windows, shifted targets, loss, evaluation, data checks on resume."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.training.lm_task import LMTask
from attnkit.training.task import Task, batch_seed


def test_task_protocol_and_batch_shapes(token_streams):
    train, valid = token_streams
    task = LMTask(train, valid, block_size=8, batch_size=4, seed=0)
    assert isinstance(task, Task)
    x, y = task.batch("train", 0)
    assert x.shape == y.shape == (4, 8) and x.dtype == y.dtype == torch.long
    # y is x shifted by one: every window is contiguous in the stream
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row_x, row_y in zip(x, y):
        window = torch.cat([row_x, row_y[-1:]])
        starts = [i for i in range(len(train) - 8) if torch.equal(train[i:i + 9], window)]
        assert starts, "every window must come from the training stream"


def test_batches_are_a_function_of_seed_split_step(token_streams):
    train, valid = token_streams
    a = LMTask(train, valid, block_size=8, batch_size=4, seed=0)
    b = LMTask(train, valid, block_size=8, batch_size=4, seed=0)
    c = LMTask(train, valid, block_size=8, batch_size=4, seed=1)
    for step in (0, 1, 17):
        assert all(torch.equal(u, v) for u, v in zip(a.batch("train", step), b.batch("train", step)))
    # later steps first, different object: still the same (no hidden iterator state)
    assert torch.equal(b.batch("train", 17)[0], a.batch("train", 17)[0])
    assert not torch.equal(a.batch("train", 0)[0], a.batch("train", 1)[0])
    assert not torch.equal(a.batch("train", 0)[0], c.batch("train", 0)[0])
    assert batch_seed(0, "train", 3) != batch_seed(0, "valid", 3)


def test_loss_is_mean_cross_entropy_over_all_positions(token_streams, tiny_lm):
    train, valid = token_streams
    task = LMTask(train, valid, block_size=8, batch_size=4)
    model = tiny_lm()
    x, y = task.batch("train", 3)
    loss, n = task.loss(model, (x, y))
    assert n == 32 and loss.ndim == 0 and loss.requires_grad
    expected = F.cross_entropy(model(x).reshape(-1, 32), y.reshape(-1))
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)


def test_evaluate_uses_fixed_valid_batches(token_streams, tiny_lm):
    train, valid = token_streams
    task = LMTask(train, valid, block_size=8, batch_size=4)
    model = tiny_lm().eval()
    out = task.evaluate(model, 3)
    assert set(out) == {"loss", "ppl"}
    with torch.no_grad():
        manual = sum(float(task.loss(model, task.batch("valid", i))[0]) for i in range(3)) / 3
    assert out["loss"] == pytest.approx(manual, rel=1e-6)
    assert out["ppl"] == pytest.approx(math.exp(out["loss"]), rel=1e-12)
    assert task.evaluate(model, 3) == out


def test_numpy_and_list_inputs_are_accepted():
    import numpy as np

    task = LMTask(np.arange(20) % 5, list(range(12)), block_size=4, batch_size=2)
    assert task.batch("valid", 0)[0].dtype == torch.long


@pytest.mark.parametrize("train,message", [
    (torch.zeros(4, 10, dtype=torch.long), r"train_tokens must be 1-D \(N,\), got shape \(4, 10\)"),
    (torch.rand(100), "train_tokens must hold integer token ids, got dtype torch.float32"),
    (torch.arange(8), "train_tokens must hold at least block_size \\+ 1 = 9 tokens, got 8"),
    (torch.arange(20) - 3, "train_tokens must hold token ids >= 0, got min -3"),
    ("hello", "train_tokens must be a 1-D integer tensor"),
])
def test_bad_token_streams(train, message):
    with pytest.raises(ValueError, match=message):
        LMTask(train, torch.arange(50), block_size=8, batch_size=2)


def test_bad_valid_stream():
    with pytest.raises(ValueError, match="valid_tokens must hold at least block_size \\+ 1 = 9 tokens, got 5"):
        LMTask(torch.arange(50), torch.arange(5), block_size=8, batch_size=2)


@pytest.mark.parametrize("kwargs,message", [
    (dict(block_size=0), "block_size must be an int >= 1, got 0"),
    (dict(batch_size=0), "batch_size must be an int >= 1, got 0"),
    (dict(seed=-1), "seed must be an int >= 0, got -1"),
])
def test_bad_sizes(kwargs, message):
    args = dict(block_size=4, batch_size=2, seed=0) | kwargs
    with pytest.raises(ValueError, match=message):
        LMTask(torch.arange(50), torch.arange(50), **args)


def test_bad_split_and_step(token_streams):
    task = LMTask(*token_streams, block_size=8, batch_size=2)
    with pytest.raises(ValueError, match=r"split must be one of \['train', 'valid'\], got 'test'"):
        task.batch("test", 0)
    with pytest.raises(ValueError, match="batch step must be an int >= 0, got -1"):
        task.batch("train", -1)


def test_model_with_wrong_output_shape(token_streams):
    task = LMTask(*token_streams, block_size=8, batch_size=2)
    with pytest.raises(ValueError, match=r"logits \(B, T, V\) = \(2, 8, V\), got \(2, 32\)"):
        task.loss(lambda x: torch.zeros(2, 32), task.batch("train", 0))


def test_token_outside_vocabulary(token_streams):
    task = LMTask(*token_streams, block_size=8, batch_size=2)
    x, y = task.batch("train", 0)
    y = y % 16
    y[0, 0] = 20  # a target id the 16-way output cannot predict
    with pytest.raises(ValueError, match=r"target token id 20 is outside the model's vocabulary \[0, 16\)"):
        task.loss(lambda inp: torch.randn(2, 8, 16), (x, y))


@pytest.mark.parametrize("bad, message", [
    (-100, r"target token id -100 is outside the model's vocabulary \[0, 16\)"),  # was: left out of the mean,
    (-1, r"target token id -1 is outside the model's vocabulary \[0, 16\)"),  # counted in n; was: IndexError
])
def test_negative_target_ids_are_refused_not_dropped_from_the_mean(bad, message, tiny_lm):
    from attnkit.training.lm_task import mean_token_loss, next_token_loss

    x, y = torch.randint(0, 16, (2, 8)), torch.randint(0, 16, (2, 8))
    y[0, :4] = bad
    with pytest.raises(ValueError, match=message):
        mean_token_loss(tiny_lm(vocab_size=16), [(x, y)], next_token_loss)


@pytest.mark.parametrize("y, got", [(torch.zeros(2, 7, dtype=torch.long), r"\(2, 7\) torch.int64"),
                                    (torch.zeros(2, 8), r"\(2, 8\) torch.float32")])
def test_targets_of_another_shape_or_dtype_are_refused(y, got):
    from attnkit.training.lm_task import next_token_loss

    with pytest.raises(ValueError, match=r"targets y must be integer token ids of x's shape \(B, T\) = \(2, 8\), got "
                       + got):  # was: torch's own errors (a RuntimeError for the float targets)
        next_token_loss(lambda inp: torch.randn(2, 8, 16), (torch.zeros(2, 8, dtype=torch.long), y))


def test_state_dict_detects_different_data(token_streams):
    train, valid = token_streams
    state = LMTask(train, valid, block_size=8, batch_size=4).state_dict()
    LMTask(train.clone(), valid, block_size=8, batch_size=4).load_state_dict(state)  # same content: fine
    changed = train.clone()
    changed[100] = (changed[100] + 1) % 32
    with pytest.raises(ValueError, match="train_fingerprint"):
        LMTask(changed, valid, block_size=8, batch_size=4).load_state_dict(state)
    with pytest.raises(ValueError, match=r"block_size \(checkpoint 8, now 4\)"):
        LMTask(train, valid, block_size=4, batch_size=4).load_state_dict(state)


@pytest.mark.parametrize("bad", [-100, -1, 16])
def test_the_chunked_loss_refuses_targets_outside_the_vocabulary_too(bad):
    """next_token_loss(chunks=K) checks the targets against the head's vocabulary as the plain loss does: -100 is not
    silently left out of the chunks' mean while counted in y.numel(), and id V is refused by name (mutation check:
    the chunked path's check_target_ids removed); a max_id past the vocabulary is refused without reading y."""
    from helpers import tiny_gpt_config

    from attnkit.models.gpt import GPT
    from attnkit.training.lm_task import next_token_loss

    torch.manual_seed(0)
    model = GPT(tiny_gpt_config(vocab_size=16))
    x, y = torch.randint(0, 16, (2, 8)), torch.randint(0, 16, (2, 8))
    loss, n = next_token_loss(model, (x, y), chunks=2)
    assert n == 16 and torch.allclose(loss, F.cross_entropy(model(x).reshape(-1, 16), y.reshape(-1)), atol=1e-6)
    with pytest.raises(ValueError, match=r"target token id 16 is outside the model's vocabulary \[0, 16\)"):
        next_token_loss(model, (x, y), max_id=16, chunks=2)  # the host-side bound, as the plain path takes it
    y[0, :4] = bad
    with pytest.raises(ValueError, match=rf"target token id {bad} is outside the model's vocabulary \[0, 16\)"):
        next_token_loss(model, (x, y), chunks=2)
