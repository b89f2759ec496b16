"""CUDA graphs for training (``attnkit.training.cuda_graphs``, ``TrainConfig.cuda_graphs``).

On a machine without CUDA these tests check the refusals (one clear ``ValueError`` each) and the host-side parts
(``batch_tensors``, ``count_tokens``); the recordings themselves run where CUDA exists (``@needs_cuda``): a
graphed run must follow the eager run of the same batches update for update, learn in bf16 with dropout, never
make the host wait, and refuse batches of too many shapes.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from attnkit.training import TrainConfig, Trainer
from attnkit.training.cuda_graphs import GraphedMicroBatch, batch_tensors
from helpers import assert_close, sync_sites

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _pairs(n, seed):
    from attnkit.data.pipeline.mt_batching import EncodedPairs

    g = torch.Generator().manual_seed(seed)

    def ids(extra):
        return torch.randint(4, 60, (int(torch.randint(2, 14, (1,), generator=g)),), generator=g).tolist() + extra

    return EncodedPairs([ids([2]) for _ in range(n)], [ids([]) for _ in range(n)], pad_id=0, bos_id=1, eos_id=2)


def _mt_trainer(out, *, shape_multiple=4, dropout=0.0, word_dropout=0.0, trainer_args=None, **overrides):
    from attnkit.models.builders import build_model
    from attnkit.models.presets import get_preset
    from attnkit.training.mt_task import MTTask

    cfg = get_preset("transformer-small", src_vocab_size=64, tgt_vocab_size=64, d_model=32, num_heads=4,
                     dim_feedforward=64, num_encoder_layers=2, num_decoder_layers=2, norm_first=True,
                     dropout=dropout)
    torch.manual_seed(0)
    model = build_model(cfg)
    task = MTTask(_pairs(96, 0), _pairs(8, 1), max_tokens=64, word_dropout=word_dropout,
                  shape_multiple=shape_multiple)
    tc = TrainConfig(**({"steps": 6, "lr": 1e-3, "warmup_steps": 1, "eval_every": 100, "eval_batches": 1,
                         "log_every": 1, "ckpt_every": 100, "grad_clip": 1.0, "device": "cuda"} | overrides))
    return Trainer(model, task, tc, out, model_config=cfg, progress=False, log=False, **(trainer_args or {}))


def _losses(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r and "step" in r]


# ------------------------------------------------------------------------------------------------------------
# everywhere
# ------------------------------------------------------------------------------------------------------------
def test_batch_tensors_follow_the_batch_structure():
    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    assert [t.numel() for t in batch_tensors((a, {"x": b, "n": 5}, [c]))] == [1, 2, 3]
    assert batch_tensors({"n": 3}) == []


def test_config_refuses_graphs_with_compile_fsdp_or_fp16():
    for bad in ({"compile": True}, {"fsdp": True}, {"autocast": "fp16"}):
        with pytest.raises(ValueError, match="cuda_graphs runs without compile, fsdp and autocast fp16"):
            TrainConfig(steps=1, warmup_steps=0, cuda_graphs=True, **bad)
    cfg = TrainConfig(steps=1, warmup_steps=0, cuda_graphs=True)
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


def test_graphs_on_the_cpu_are_one_clear_error(tmp_path, tiny_lm, fixed_task):
    cfg = TrainConfig(steps=1, warmup_steps=0, batch_size=4, device="cpu", cuda_graphs=True)
    with pytest.raises(ValueError, match=r"cuda_graphs needs a CUDA device \(got cpu\)"):
        Trainer(tiny_lm(), fixed_task(4), cfg, tmp_path / "run", model_config={"d_model": 8}, progress=False)
    assert not (tmp_path / "run").exists()  # refused before anything was written
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device, got cpu"):
        GraphedMicroBatch(tiny_lm(), lambda m, b: (None, 1), torch.device("cpu"))


def test_graphs_refuse_layer_drop(tmp_path):
    """A recorded graph would replay the layers its recording skipped: LayerDrop is refused by name."""
    from attnkit.models.builders import build_model
    from attnkit.models.presets import get_preset
    from attnkit.training.mt_task import MTTask

    cfg = get_preset("transformer-small", src_vocab_size=64, tgt_vocab_size=64, d_model=16, num_heads=2,
                     dim_feedforward=32, num_encoder_layers=2, num_decoder_layers=2, layer_drop=0.5)
    task = MTTask(_pairs(16, 0), _pairs(4, 1), max_tokens=64, shape_multiple=4)
    tc = TrainConfig(steps=1, warmup_steps=0, device="cpu", cuda_graphs=True)
    with pytest.raises(ValueError, match=r"; layer_drop = 0 \(got 0.5: a graph would replay the layers it skipped"):
        Trainer(build_model(cfg), task, tc, tmp_path / "run", model_config=cfg, progress=False)
    assert not (tmp_path / "run").exists()


def test_count_tokens_is_what_the_loss_averages_over(token_streams):
    from attnkit.data.pipeline.mt_batching import collate
    from attnkit.training.lm_task import LMTask
    from attnkit.training.mt_task import MTTask

    lm = LMTask(*token_streams, block_size=16, batch_size=4)
    assert LMTask.count_tokens(lm.batch("train", 0)) == 64
    task = MTTask(_pairs(20, 0), _pairs(4, 1), max_tokens=64, shape_multiple=8)
    batch = task.batch("train", 0)
    assert task.count_tokens(batch) == int((batch.labels != -100).sum())
    plain = collate(task.train, [0, 1, 2])
    assert task.count_tokens(plain) == sum(len(t) + 1 for t in task.train.tgt[:3])


# ------------------------------------------------------------------------------------------------------------
# on a GPU
# ------------------------------------------------------------------------------------------------------------
@needs_cuda
@pytest.mark.parametrize("grad_accum", [1, 2])
def test_a_graphed_mt_run_follows_the_eager_run(tmp_path, grad_accum):
    """Same fixed-shape batches, no dropout: the graphed updates give the eager updates' losses and weights."""
    eager = _mt_trainer(tmp_path / "eager", grad_accum=grad_accum)
    eager.fit()
    graphed = _mt_trainer(tmp_path / "graphed", grad_accum=grad_accum, cuda_graphs=True)
    graphed.fit()
    assert graphed._graphs.shapes >= 2  # the batches came in several shapes, each recorded once
    a, b = _losses(tmp_path / "eager"), _losses(tmp_path / "graphed")
    assert len(a) == len(b) == 6
    assert a == pytest.approx(b, rel=1e-4, abs=1e-5)
    rows = [json.loads(line) for line in (tmp_path / "graphed" / "metrics.jsonl").read_text().splitlines()]
    counts = [r["cuda_graphs"] for r in rows if "loss" in r and "step" in r]  # the shapes recorded so far
    assert counts == sorted(counts) and counts[-1] == graphed._graphs.shapes
    assert all("cuda_graphs" not in json.loads(line) for line in (tmp_path / "eager" / "metrics.jsonl").open())
    # (The weights are not compared: Adam turns the rounding noise of near-zero gradients into steps of about the
    # learning rate, see helpers.without_key_biases. The test below compares gradients.)


@needs_cuda
def test_a_replayed_micro_batch_gives_the_eager_loss_and_gradients(tmp_path):
    """Batch after batch (recorded at a shape's first sight, replayed after): the graph's loss and its weighted
    gradients equal those of the eager forward and backward pass on the same batch and weights."""
    from attnkit.training.task import move_to_device

    trainer = _mt_trainer(tmp_path / "run", cuda_graphs=True)
    model, task, graphs = trainer.model, trainer.task, trainer._graphs
    eager = copy.deepcopy(model)  # the same weights; its own gradients (its backward passes run eagerly)
    model.train(), eager.train()
    for step in range(12):
        batch = task.batch("train", step)
        model.zero_grad(set_to_none=False)
        loss_graphed = graphs.run(batch, 0.5)
        eager.zero_grad(set_to_none=True)
        loss, _ = task.loss(eager, move_to_device(batch, trainer.device))
        (loss * 0.5).backward()
        assert_close(loss_graphed, loss.detach(), "float32")
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            assert_close(q.grad, p.grad, "float32", msg=name)
    assert 2 <= graphs.shapes < 12  # several shapes, and replays of recorded ones


@needs_cuda
def test_a_graphed_lm_run_follows_the_eager_run(tmp_path, token_streams):
    from attnkit.models.builders import build_model
    from attnkit.models.presets import get_preset
    from attnkit.training.lm_task import LMTask

    cfg = get_preset("llama-tiny").replace(vocab_size=32, n_layer=2)
    runs = {}
    for name, graphs in (("eager", False), ("graphed", True)):
        torch.manual_seed(0)
        tc = TrainConfig(steps=5, batch_size=4, block_size=16, lr=1e-3, warmup_steps=1, eval_every=100,
                         log_every=1, ckpt_every=100, grad_clip=1.0, device="cuda", cuda_graphs=graphs)
        trainer = Trainer(build_model(cfg), LMTask(*token_streams, block_size=16, batch_size=4), tc,
                          tmp_path / name, model_config=cfg, progress=False, log=False)
        trainer.fit()
        runs[name] = trainer
    assert runs["graphed"]._graphs.shapes == 1
    assert _losses(tmp_path / "eager") == pytest.approx(_losses(tmp_path / "graphed"), rel=1e-4, abs=1e-5)


@needs_cuda
def test_graphed_bf16_training_with_dropout_learns_and_resumes(tmp_path):
    trainer = _mt_trainer(tmp_path / "run", dropout=0.1, word_dropout=0.1, steps=40, lr=3e-3, log_every=4,
                          autocast="bf16", cuda_graphs=True, ckpt_every=20)
    trainer.fit()
    losses = _losses(tmp_path / "run")
    assert len(losses) == 10 and all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    resumed = _mt_trainer(tmp_path / "run", dropout=0.1, word_dropout=0.1, steps=48, lr=3e-3, log_every=4,
                          autocast="bf16", cuda_graphs=True, ckpt_every=20, trainer_args={"resume": True})
    summary = resumed.fit()
    assert summary["steps"] == 48 and math.isfinite(summary["valid_loss"])


@needs_cuda
def test_a_replayed_update_never_waits_for_the_gpu(tmp_path):
    trainer = _mt_trainer(tmp_path / "run", cuda_graphs=True, autocast="bf16", dropout=0.1)
    trainer.model.train()
    for _ in range(8):  # record every shape of the first batches
        trainer._update(trainer.model)
        trainer.step += 1
    trainer.step = 0  # the same batches again: replays only
    sites = sync_sites(lambda: [trainer._update(trainer.model) for _ in range(4)])
    assert sites == [], f"the update waited for the GPU at {sites}"


@needs_cuda
def test_batches_of_too_many_shapes_are_refused(tmp_path, monkeypatch):
    import attnkit.training.cuda_graphs as cg

    monkeypatch.setattr(cg, "MAX_SHAPES", 1)
    trainer = _mt_trainer(tmp_path / "run", shape_multiple=1, cuda_graphs=True)
    with pytest.raises(ValueError, match="CUDA graphs need batches of a few fixed shapes, got more than 1"):
        trainer.fit()
