"""Device selection and autocast (``attnkit.training.device``), on whatever this machine has.

The CUDA-only branches are exercised where CUDA exists (``@needs_cuda``); everywhere else the tests check
that asking for a missing device is one clear ``ValueError``.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnkit.training import TrainConfig, Trainer
from attnkit.checkpoints.checkpoint import load_checkpoint
from attnkit.training.device import autocast_context, check_autocast, grad_scaler, resolve_device
from helpers import sync_sites as _sync_sites

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")


def test_auto_and_cpu():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(" CPU ") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    expected = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    assert resolve_device("auto") == expected
    assert resolve_device(None) == expected


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "tpu", "", 3])
def test_unknown_device_names_are_refused(name):
    with pytest.raises(ValueError, match=r"device must be one of \['auto', 'cpu', 'cuda', 'cuda:N', 'mps'\]"):
        resolve_device(name)


@no_cuda
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_cuda_is_one_clear_error(name):
    with pytest.raises(ValueError, match=f"device '{name}' was asked for, but CUDA is not available here"):
        resolve_device(name)


def test_mps_without_mps_is_one_clear_error():
    if torch.backends.mps.is_available():
        assert resolve_device("mps") == torch.device("mps")
    else:
        with pytest.raises(ValueError, match="no Apple-GPU \\(MPS\\) support"):
            resolve_device("mps")


@needs_cuda
def test_cuda_index_and_local_rank():
    assert resolve_device("cuda", local_rank=0) == torch.device("cuda", 0)
    n = torch.cuda.device_count()
    with pytest.raises(ValueError, match=f"this machine has {n} CUDA device"):
        resolve_device(f"cuda:{n}")


def test_autocast_checks():
    cpu = torch.device("cpu")
    check_autocast(None, cpu)
    check_autocast("bf16", cpu)
    with pytest.raises(ValueError, match="autocast fp16 needs a GPU"):
        check_autocast("fp16", cpu)
    with pytest.raises(ValueError, match="autocast must be one of"):
        check_autocast("fp8", cpu)
    assert grad_scaler("bf16", cpu) is None and grad_scaler(None, cpu) is None


def test_bf16_autocast_on_the_cpu_computes_in_bf16():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with autocast_context("bf16", torch.device("cpu")):
        out = a @ b
    assert out.dtype == torch.bfloat16
    with autocast_context(None, torch.device("cpu")):
        assert (a @ b).dtype == torch.float32


def _train(tmp_path, name, tiny_lm, fixed_task, **overrides):
    torch.manual_seed(0)
    model = tiny_lm()
    cfg = TrainConfig(steps=4, batch_size=4, lr=1e-2, warmup_steps=0, eval_every=4, eval_batches=1, log_every=1,
                      ckpt_every=4, **overrides)
    return Trainer(model, fixed_task(4), cfg, tmp_path / name, model_config={"d_model": 16}, progress=False).fit()


def test_training_under_bf16_autocast_on_the_cpu(tmp_path, tiny_lm, fixed_task):
    full = _train(tmp_path, "fp32", tiny_lm, fixed_task)
    bf16 = _train(tmp_path, "bf16", tiny_lm, fixed_task, autocast="bf16")
    # bf16 keeps ~3 significant digits: the same training, not the same bits
    assert bf16["train_loss"] == pytest.approx(full["train_loss"], rel=0.05)
    assert bf16["train_loss"] != full["train_loss"]


def test_fp16_training_on_the_cpu_is_refused(tmp_path, tiny_lm, fixed_task):
    with pytest.raises(ValueError, match="autocast fp16 needs a GPU"):
        _train(tmp_path, "fp16", tiny_lm, fixed_task, autocast="fp16")


def test_checkpoints_are_device_free(tmp_path, tiny_lm, fixed_task):
    """Weights are saved from the CPU and load onto whatever device the model is on (``device=`` too);
    a run may resume on another device (the config's ``device`` may change on resume)."""
    summary = _train(tmp_path, "run", tiny_lm, fixed_task, device="auto")
    model = tiny_lm()
    load_checkpoint(summary["checkpoint"], model, device="cpu")
    assert next(model.parameters()).device.type == "cpu"
    cfg = TrainConfig(steps=6, batch_size=4, lr=1e-2, warmup_steps=0, eval_every=4, eval_batches=1, log_every=1,
                      ckpt_every=4, device="cpu")
    resumed = Trainer(tiny_lm(), fixed_task(4), cfg, tmp_path / "run", model_config={"d_model": 16},
                      resume=True, progress=False).fit()
    assert resumed["steps"] == 6


def test_an_update_the_grad_scaler_skips_logs_no_grad_norm(tmp_path, tiny_lm, fixed_task):
    # fp16's first updates overflow by design (the scaler starts at 2**16 and halves until the gradients are
    # finite): such an update is skipped and must not stop the run. A scale of 2**127 on the CPU makes the
    # first update overflow the same way (fp16 autocast itself needs a GPU); the back-off then brings it to 2**27.
    torch.manual_seed(0)
    cfg = TrainConfig(steps=4, batch_size=4, lr=1e-2, warmup_steps=0, eval_every=4, eval_batches=1, log_every=1,
                      ckpt_every=4, grad_clip=1.0)
    trainer = Trainer(tiny_lm(), fixed_task(4), cfg, tmp_path / "scaled", model_config={"d_model": 16},
                      progress=False)
    trainer._scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 127, backoff_factor=2.0 ** -100)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    assert trainer.fit()["steps"] == 4
    rows = [json.loads(line) for line in (tmp_path / "scaled" / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "loss" in r]
    assert [("grad_norm" in r) for r in train_rows] == [False, True, True, True]  # the skipped update: no norm
    assert all(math.isfinite(r["grad_norm"]) for r in train_rows[1:])
    assert trainer._scaler.get_scale() == 2.0 ** 27
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


@needs_cuda
def test_fp16_training_with_a_grad_scaler_on_cuda(tmp_path, tiny_lm, fixed_task):
    summary = _train(tmp_path, "fp16", tiny_lm, fixed_task, autocast="fp16", device="cuda")
    assert summary["steps"] == 4


def _mt_trainer(tmp_path, **overrides):
    from attnkit.data.pipeline.mt_batching import EncodedPairs
    from attnkit.models.builders import build_model
    from attnkit.models.presets import get_preset
    from attnkit.training.mt_task import MTTask

    g = torch.Generator().manual_seed(0)

    def pairs(n):
        def ids(extra):
            return torch.randint(4, 60, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist() + extra
        return EncodedPairs([ids([2]) for _ in range(n)], [ids([]) for _ in range(n)], pad_id=0, bos_id=1, eos_id=2)

    cfg = get_preset("transformer-small", src_vocab_size=64, tgt_vocab_size=64, d_model=32, num_heads=4,
                     dim_feedforward=64, num_encoder_layers=2, num_decoder_layers=2, norm_first=True)
    torch.manual_seed(0)
    task = MTTask(pairs(64), pairs(8), max_tokens=64, word_dropout=0.1)
    tc = TrainConfig(**({"steps": 4, "lr": 1e-3, "warmup_steps": 1, "eval_every": 2, "eval_batches": 1,
                         "log_every": 2, "ckpt_every": 100, "grad_clip": 1.0, "device": "cuda"} | overrides))
    return Trainer(build_model(cfg), task, tc, tmp_path / "mt", model_config=cfg, progress=False)


@needs_cuda
@pytest.mark.parametrize("autocast,optimizer", [(None, "adamw"), ("bf16", "adamw"), ("bf16", "muon")])
def test_a_training_update_never_waits_for_the_gpu(tmp_path, autocast, optimizer):
    """Between two reads of its numbers the trainer only queues work: no update (batch copy, forward with its
    id and mask checks, loss, backward, clipping, AdamW or Muon) makes the host wait for the GPU."""
    trainer = _mt_trainer(tmp_path, autocast=autocast, optimizer=optimizer)
    trainer._update(trainer.model)  # the first update allocates the optimizer state
    sites = _sync_sites(lambda: [trainer._update(trainer.model) for _ in range(2)])
    assert sites == [], f"the update waited for the GPU at {sites}"


@needs_cuda
def test_lm_update_never_waits_for_the_gpu(tmp_path, token_streams):
    from attnkit.models.builders import build_model
    from attnkit.models.presets import get_preset
    from attnkit.training.lm_task import LMTask

    cfg = get_preset("llama-tiny").replace(vocab_size=32, n_layer=2)
    tc = TrainConfig(steps=4, batch_size=4, block_size=16, lr=1e-3, warmup_steps=1, eval_every=100, log_every=10,
                     ckpt_every=100, grad_clip=1.0, device="cuda")
    trainer = Trainer(build_model(cfg), LMTask(*token_streams, block_size=16, batch_size=4), tc, tmp_path / "lm",
                      model_config=cfg, progress=False)
    trainer._update(trainer.model)
    sites = _sync_sites(lambda: [trainer._update(trainer.model) for _ in range(2)])
    assert sites == [], f"the update waited for the GPU at {sites}"


@needs_cuda
def test_mt_training_on_cuda_reads_its_numbers_back_and_learns(tmp_path):
    trainer = _mt_trainer(tmp_path, steps=30, lr=3e-3)
    summary = trainer.fit()
    rows = [json.loads(line) for line in (tmp_path / "mt" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert summary["steps"] == 30 and len(losses) == 15 and all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0] and summary["tokens"] > 0
