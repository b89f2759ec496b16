"""LayerDrop in a training run (``TransformerConfig.layer_drop``): the layers a run skips come from the RNG state
that checkpoints keep, so a stopped run resumes with the draws the uninterrupted run made, bit for bit; and a run
with LayerDrop is a different run from one without it. (DDP and FSDP: tests/cli/test_scale_cli.py; CUDA graphs:
tests/training/test_cuda_graphs.py.)"""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.data.pipeline.mt_batching import EncodedPairs
from attnkit.models.configs import TransformerConfig
from attnkit.models.transformer import Transformer
from attnkit.training.config import TrainConfig
from attnkit.training.mt_task import MTTask
from attnkit.training.trainer import Trainer

V = 16


def _pairs(n: int, seed: int) -> EncodedPairs:
    g = torch.Generator().manual_seed(seed)
    src, tgt = [], []
    for _ in range(n):
        words = torch.randint(4, V, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist()
        src.append(words + [2])
        tgt.append(words[::-1])
    return EncodedPairs(src, tgt, pad_id=0, bos_id=1, eos_id=2)


class _Stop(Exception):
    pass


class _Stoppable(MTTask):
    stop_at: int | None = None

    def batch(self, split, step):
        if split == "train" and step == self.stop_at:
            raise _Stop
        return super().batch(split, step)


def _trainer(out, layer_drop: float, *, stop_at: int | None = None, resume: bool = False) -> Trainer:
    torch.manual_seed(0)
    cfg = TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=16, num_heads=2, num_encoder_layers=3,
                            num_decoder_layers=3, dim_feedforward=32, dropout=0.1, max_len=16, norm_first=True,
                            layer_drop=layer_drop)
    task = _Stoppable(_pairs(64, 0), _pairs(8, 1), max_tokens=30, seed=0)
    task.stop_at = stop_at
    tc = TrainConfig(steps=12, lr=3e-3, warmup_steps=2, eval_every=6, eval_batches=2, log_every=1, ckpt_every=5,
                     keep_last=5, seed=0)
    return Trainer(Transformer(cfg), task, tc, out, model_config=cfg, resume=resume, progress=False, log=False)


def _losses(out) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r and "step" in r]


def test_a_run_with_layer_drop_resumes_bit_for_bit(tmp_path):
    full = _trainer(tmp_path / "full", 0.3)
    full.fit()
    with pytest.raises(_Stop):  # stopped before update 8; the last checkpoint is step 5
        _trainer(tmp_path / "part", 0.3, stop_at=7).fit()
    resumed = _trainer(tmp_path / "part", 0.3, resume=True)
    assert resumed.step == 5
    resumed.fit()
    assert _losses(tmp_path / "part") == _losses(tmp_path / "full")
    for name, value in resumed.model.state_dict().items():
        torch.testing.assert_close(value, full.model.state_dict()[name], rtol=0, atol=0)

    plain = _trainer(tmp_path / "plain", 0.0)
    plain.fit()
    assert _losses(tmp_path / "plain")[0] != _losses(tmp_path / "full")[0]  # the draws change the very first update
