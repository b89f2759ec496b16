"""Training from token stores: the same LM batches as in-memory tensors, bit-exact resume (also of a run that kept
its ids in memory before the store existed), and DDP ranks (gloo, torchrun) sharing one store that rank 0 built."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from attnkit.checkpoints.checkpoint import latest_checkpoint
from attnkit.data.pipeline.lm_dataset import eval_batches
from attnkit.data.pipeline.mt_batching import encode_pairs, train_joint_bpe
from attnkit.data.pipeline.mt_store import encode_pairs_stored
from attnkit.data.pipeline.token_store import TokenStore, TokenStoreWriter
from attnkit.training.config import TrainConfig
from attnkit.training.lm_task import LMTask
from attnkit.training.metrics import read_metrics
from attnkit.training.mt_task import MTTask
from attnkit.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
BASE = dict(batch_size=4, block_size=8, grad_accum=2, lr=3e-3, min_lr=3e-4, warmup_steps=2, eval_every=4,
            eval_batches=2, log_every=1, ckpt_every=3, keep_last=5, seed=3)


def _store(path: Path, ids: torch.Tensor, vocab_size: int = 32) -> TokenStore:
    with TokenStoreWriter(path, vocab_size=vocab_size) as writer:
        writer.append(ids.numpy())
        return writer.finish({"test": path.name})


@pytest.fixture
def streams(tmp_path, token_streams):
    """``(tensors, stores)``: the same ids (V = 32) as in-memory tensors and as token stores."""
    train, valid = token_streams
    return (train, valid), (_store(tmp_path / "train.tokens", train), _store(tmp_path / "valid.tokens", valid))


def test_lm_batches_from_a_store_equal_the_tensor_ones(streams):
    tensors, stores = streams
    a, b = (LMTask(*s, block_size=16, batch_size=8, seed=7) for s in (tensors, stores))
    for split in ("train", "valid"):
        for step in (0, 1, 2, 99, 12345):
            for x, y in zip(a.batch(split, step), b.batch(split, step)):
                assert x.dtype == y.dtype == torch.long and torch.equal(x, y)
    assert a._max_id == b._max_id and a.state_dict()["n_train"] == b.state_dict()["n_train"]
    for (x1, y1), (x2, y2) in zip(eval_batches(tensors[1], 16, 5), eval_batches(stores[1], 16, 5)):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)


class _Stop(Exception):
    pass


class _StoppingLMTask(LMTask):
    """Fails when asked for the training batch of update ``stop_at + 1``: a run that dies after update ``stop_at``."""

    stop_at: int | None = None

    def batch(self, split, step):
        if split == "train" and self.stop_at is not None and step == self.stop_at * BASE["grad_accum"]:
            raise _Stop
        return super().batch(split, step)


def _run(out: Path, tiny_lm, streams, *, stop_at: int | None = None, resume: bool = False) -> None:
    cfg = TrainConfig(steps=12, **BASE)
    task = _StoppingLMTask(*streams, block_size=cfg.block_size, batch_size=cfg.batch_size, seed=1)
    task.stop_at = stop_at
    trainer = Trainer(tiny_lm(0, dropout=0.1), task, cfg, out, model_config={"kind": "tiny"}, resume=resume,
                      progress=False, log=False)
    if stop_at is None:
        trainer.fit()
    else:
        with pytest.raises(_Stop):
            trainer.fit()


def _same_run(a: Path, b: Path) -> None:
    rows = [[(r["step"], r.get("loss"), r.get("valid_loss")) for r in read_metrics(p)] for p in (a, b)]
    assert rows[0] == rows[1] and len(rows[0]) > 10  # exact floats: bit for bit
    wa, wb = (load_file(str(latest_checkpoint(p / "checkpoints") / "model.safetensors")) for p in (a, b))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("before", ["store", "tensors"])
def test_a_run_from_a_store_resumes_bit_exactly(tmp_path, tiny_lm, streams, before):
    """Die after update 7 (checkpoint 6), resume to 12 from the store: the run an uninterrupted store run makes.
    ``tensors``: the first half kept its ids in memory (a run from before the store), its checkpoint's
    fingerprints are tensor hashes."""
    tensors, stores = streams
    _run(tmp_path / "straight", tiny_lm, stores)
    _run(tmp_path / "split", tiny_lm, stores if before == "store" else tensors, stop_at=7)  # checkpoint at 6
    _run(tmp_path / "split", tiny_lm, stores, resume=True)
    _same_run(tmp_path / "straight", tmp_path / "split")


def test_a_store_of_other_ids_is_refused_on_resume(tmp_path, tiny_lm, streams):
    tensors, stores = streams
    _run(tmp_path / "run", tiny_lm, stores, stop_at=4)
    other = _store(tmp_path / "other.tokens", tensors[0].flip(0))
    with pytest.raises(ValueError, match="differ from the checkpoint's in train_fingerprint"):
        _run(tmp_path / "run", tiny_lm, (other, stores[1]), resume=True)


def test_mt_batches_and_resume_from_stored_pairs(tmp_path):
    """The stored pairs make the batches of the in-memory pairs, and a run started on in-memory pairs resumes on
    stored ones."""
    import random

    rng = random.Random(0)
    src = [" ".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 6))) for _ in range(200)]
    tgt = [s.upper() for s in src]
    tok = train_joint_bpe(src, tgt, 300)
    memory = [encode_pairs(tok, src[i:i + 160], tgt[i:i + 160], max_src_len=16) for i in (0, 160)]
    stored = [encode_pairs_stored(tok, src[i:i + 160], tgt[i:i + 160], max_src_len=16, cache_dir=tmp_path)
              for i in (0, 160)]
    tasks = [MTTask(*pairs, max_tokens=64, seed=2) for pairs in (memory, stored)]
    for step in range(0, 40, 3):
        for a, b in zip(tasks[0].batch("train", step), tasks[1].batch("train", step)):
            assert a == b if not isinstance(a, torch.Tensor) else torch.equal(a, b)
    tasks[1].load_state_dict(tasks[0].state_dict())  # the in-memory run's fingerprints name the same pairs
    assert tasks[1].state_dict()["train_fingerprint"].startswith("store:")


DDP_CHILD = textwrap.dedent("""
    import os, sys
    import torch
    torch.set_num_threads(1)
    from attnkit.api import train_lm
    from attnkit.training import distributed
    out, corpus = sys.argv[1], sys.argv[2]
    rank = os.environ.get("RANK", "0")
    lines = []
    try:
        train_lm(data=corpus, out=out, preset="char-small", overrides={"n_layer": 1, "n_head": 2, "n_embd": 16},
                 block_size=16, batch_size=4, steps=2, eval_every=2, eval_batches=1, device="cpu", progress=False,
                 log=lines.append)
    finally:
        distributed.shutdown()
    with open(os.path.join(out, f"log-rank{rank}.txt"), "w") as fh:
        fh.write("\\n".join(lines))
""")


def test_ddp_ranks_read_the_store_rank_0_built(tmp_path):
    corpus = tmp_path / "corpus.txt"
    rng = np.random.default_rng(0)
    corpus.write_text("".join(" ".join(rng.choice(["ab", "cd", "ef", "gh"], 8)) + "\n" for _ in range(400)))
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               ATTNKIT_HOME=str(tmp_path / "home"))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    out, child = tmp_path / "run", tmp_path / "child.py"
    child.write_text(DDP_CHILD)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(child), str(out), str(corpus)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = {r: (out / f"log-rank{r}.txt").read_text() for r in (0, 1)}
    stores = {r: [line for line in logs[r].splitlines() if line.startswith("token store")] for r in (0, 1)}
    assert len(stores[0]) == len(stores[1]) == 2
    assert all("; built in" in line for line in stores[0]) and all("; reused in" in line for line in stores[1])
    paths = {r: [line.split(": ", 1)[1].split(" (")[0] for line in stores[r]] for r in (0, 1)}
    assert paths[0] == paths[1] and len(list((tmp_path / "home").rglob("*.tokens"))) == 2
    assert not list((tmp_path / "home").rglob("*.tmp"))
