"""Make the repository root importable (``benchmarks`` is a top-level folder, not an installed package); one thread
per test; ``tiny_run``, a translator trained here on a letter-copy task, for the scripts that read a trained run."""

import random
import sys
from pathlib import Path

import pytest
import torch

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared: stay on one core
    yield
    torch.set_num_threads(threads)


def _copy_task(folder, n_train=600, n_eval=24):
    rng = random.Random(0)
    folder.mkdir()
    for name, n in (("train", n_train), ("valid", n_eval), ("test", n_eval), ("test-docs", n_eval // 2)):
        words = [[rng.choice("abcdefgh") for _ in range(rng.randint(3, 6))] for _ in range(n)]
        (folder / f"{name}.tsv").write_text("".join(" ".join(w) + "\t" + " ".join(w).upper() + "\n" for w in words))
    return folder


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A trained run folder with checkpoints/best and checkpoints/averaged, and its data folder."""
    from attnkit.cli.main import main

    tmp = tmp_path_factory.mktemp("choose")
    data, run = _copy_task(tmp / "copy"), tmp / "run"
    assert main(["train", "mt", "--data", str(data), "--out", str(run), "--preset", "transformer-cpu",
                 "--set", "d_model=32", "--set", "dim_feedforward=64", "--set", "num_encoder_layers=1",
                 "--set", "num_decoder_layers=1", "--vocab-size", "300", "--max-tokens", "256", "--steps", "60",
                 "--lr", "3e-3", "--warmup-steps", "10", "--eval-every", "30", "--eval-batches", "2",
                 "--ckpt-every", "20", "--average-last", "2", "--no-progress"]) == 0
    return data, run
