"""Sharded (FSDP2) checkpoints that cannot be written or read: ``torch.distributed.checkpoint`` raises its own
``CheckpointException``, a ``BaseException`` that carries every rank's traceback; attnkit turns it into one
line (``CheckpointError``, or ``OSError`` for a failed write) raised on every rank, with no traceback printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnkit.checkpoints.checkpoint import DCP_DIR, FORMAT, FORMAT_VERSION, CheckpointError
from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from attnkit.training.sharded import convert_sharded

ROOT = Path(__file__).resolve().parents[2]
CONFIG = dict(vocab_size=8, block_size=4, n_layer=1, n_head=1, n_embd=8)


def _sharded_checkpoint(path: Path) -> Path:
    """A sharded checkpoint folder written in one process (``dcp/`` + ``state.json``)."""
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    dcp.save({"model": GPT(GPTConfig(**CONFIG)).state_dict()}, checkpoint_id=str(path / DCP_DIR), no_dist=True)
    (path / "state.json").write_text(json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "step": 1}))
    return path


@pytest.mark.parametrize("damage", ["missing shard", "corrupt metadata"])
def test_converting_a_damaged_sharded_checkpoint_is_one_checkpoint_error(tmp_path, capfd, damage):
    src = _sharded_checkpoint(tmp_path / "step_00000001")
    convert_sharded(src, tmp_path / "intact", GPT(GPTConfig(**CONFIG)))  # the undamaged folder converts
    if damage == "missing shard":
        next((src / DCP_DIR).glob("*.distcp")).unlink()
        expected = "FileNotFoundError"
    else:
        (src / DCP_DIR / ".metadata").write_text("garbage\n")
        expected = "metadata"
    capfd.readouterr()
    with pytest.raises(CheckpointError) as info:
        convert_sharded(src, tmp_path / "out", GPT(GPTConfig(**CONFIG)))
    message = str(info.value)
    assert message.startswith(f"{src / DCP_DIR}: cannot read the model weights: ") and expected in message
    assert "\n" not in message and "Traceback" not in capfd.readouterr().err
    assert not (tmp_path / "out").exists()


CHILD = """
import errno, os, shutil, sys
import torch
torch.set_num_threads(1)
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from attnkit.training import TrainConfig, distributed as D
from attnkit.training.optim import LRScheduler, build_optimizer
from attnkit.training.sharded import load_sharded, save_sharded
world = D.init_from_env(torch.device("cpu"))
model = D.shard_fsdp(GPT(GPTConfig(vocab_size=8, block_size=4, n_layer=1, n_head=1, n_embd=8)))
cfg = TrainConfig(steps=1, warmup_steps=0)
optimizer = build_optimizer(model, cfg)
scheduler = LRScheduler(optimizer, cfg)
saved, failed = sys.argv[1:]
save_sharded(saved, model, optimizer, scheduler, state={"step": 0}, extra={})
D.barrier()
if world.is_main:
    os.remove(os.path.join(saved, "dcp", "__1_0.distcp"))  # a shard lost (a node's disk, a partial copy)
D.barrier()
try:
    load_sharded(saved, model, optimizer, scheduler)
except ValueError as err:
    print(f"rank {world.rank} load: {type(err).__name__}: {err}", flush=True)
original = FileSystemWriter.write_data
def full_disk(self, *args, **kwargs):  # rank 1's disk is full
    if world.rank == 1:
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
    return original(self, *args, **kwargs)
FileSystemWriter.write_data = full_disk
try:
    save_sharded(failed, model, optimizer, scheduler, state={"step": 0}, extra={})
except OSError as err:
    print(f"rank {world.rank} save: {type(err).__name__}: {err}", flush=True)
D.shutdown()
"""


def test_a_failed_sharded_load_or_save_is_one_line_on_every_rank(tmp_path):
    """A lost shard on --resume, a full disk on one rank while saving: every rank raises the same one-line error
    (it used to be DCP's CheckpointException, a BaseException that the CLI printed as a traceback per rank)."""
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    saved, failed = tmp_path / "step_00000001", tmp_path / "step_00000002"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(child), str(saved), str(failed)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shard = saved / DCP_DIR / "__1_0.distcp"
    for rank in (0, 1):
        assert (f"rank {rank} load: CheckpointError: {saved / DCP_DIR}: cannot restore the sharded checkpoint: "
                f"ranks 0, 1: FileNotFoundError: [Errno 2] No such file or directory: '{shard}'") in proc.stdout
        assert (f"rank {rank} save: OSError: {failed}.tmp/{DCP_DIR}: cannot write the sharded checkpoint: rank 1: "
                f"OSError: [Errno 28] No space left on device: '{failed}.tmp/{DCP_DIR}'") in proc.stdout
    assert "Traceback" not in proc.stderr and not failed.exists()
