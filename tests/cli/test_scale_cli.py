"""The device flags and torchrun from the command line.

* every command with ``--device`` refuses a device this machine lacks in one line, before it reads
  anything (on a machine without CUDA: ``--device cuda``);
* ``--autocast bf16`` trains, samples and evaluates on the CPU; ``--autocast fp16`` on the CPU is refused, and so
  is ``--cuda-graphs``;
* ``torchrun --nproc_per_node=2 -m attnkit train lm --batch-size 4`` trains like one process with
  ``--batch-size 8`` and says so once ("global batch 8 = 4 per process x 2 processes");
* an ``--fsdp`` run's sharded checkpoint becomes an ordinary one with ``attnkit convert``, which ``sample``
  loads in one plain process.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnkit.cli.main import main
from attnkit.checkpoints.checkpoint import latest_checkpoint
from helpers import assert_close, without_key_biases

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--preset", "char-small", "--set", "n_layer=2", "--set", "n_head=2", "--set", "n_embd=32",
        "--block-size", "16", "--warmup-steps", "2", "--eval-every", "6", "--eval-batches", "2",
        "--ckpt-every", "3", "--log-every", "1", "--no-progress", "--steps", "6", "--lr", "1e-2",
        "--device", "cpu"]  # CPU even where CUDA exists: the exactness checks compare CPU runs (gloo)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rng = random.Random(0)
    words = "love night day sweet death fair light moon star heart hand kiss name rose dream".split()
    text = "\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(600))
    path = tmp_path_factory.mktemp("corpus") / "plays.txt"
    path.write_text(text, encoding="utf-8")
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def _attnkit(*args: str, nproc: int = 1) -> subprocess.CompletedProcess:
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
                if nproc > 1 else [sys.executable])
    proc = subprocess.run([*launcher, "-m", "attnkit", *args], env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(latest_checkpoint(run / "checkpoints") / "model.safetensors"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
@pytest.mark.parametrize("command", [
    ["train", "lm", "--steps", "2"],
    ["train", "mt", "--data", "nowhere.tsv", "--steps", "2"],
    ["finetune", "--from", "nowhere", "--data", "nowhere.txt", "--steps", "2"],
    ["sample", "--ckpt", "nowhere"],
    ["translate", "--ckpt", "nowhere"],
    ["eval", "lm", "--ckpt", "nowhere", "--data", "nowhere.txt"],
    ["eval", "mt", "--ckpt", "nowhere"],
    ["viz", "attention", "--ckpt", "nowhere", "--text", "hi"],
    ["viz", "predict", "--ckpt", "nowhere", "--text", "hi"],
])
def test_cuda_on_a_machine_without_it_is_one_line(command, tmp_path, capsys):
    out = ["--out", str(tmp_path / "run")] if command[0] in ("train", "finetune") else []
    assert main([*command, *out, "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "CUDA is not available here" in err and "--device cpu" in err
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.parametrize("command", [["train", "lm", "--steps", "2"],
                                     ["train", "mt", "--data", "nowhere.tsv", "--steps", "2"]])
def test_cuda_graphs_on_the_cpu_are_one_line_before_reading_anything(command, tmp_path, capsys):
    assert main([*command, "--out", str(tmp_path / "run"), "--device", "cpu", "--cuda-graphs"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == ["attnkit train: error: --cuda-graphs needs a CUDA device (--device cuda), got cpu"]
    assert not (tmp_path / "run").exists()


def test_fp16_on_the_cpu_is_refused_and_bf16_works(corpus, tmp_path, capsys):
    assert main(["train", "lm", "--data", str(corpus), "--out", str(tmp_path / "fp16"), *TINY, "--device", "cpu",
                 "--autocast", "fp16"]) == 2
    assert "autocast fp16 needs a GPU" in capsys.readouterr().err
    run = tmp_path / "bf16"
    assert main(["train", "lm", "--data", str(corpus), "--out", str(run), *TINY, "--device", "cpu",
                 "--autocast", "bf16"]) == 0
    assert json.loads((run / "run.json").read_text())["train_config"]["autocast"] == "bf16"
    capsys.readouterr()
    assert main(["sample", "--ckpt", str(run), "--max-new-tokens", "5", "--seed", "0", "--autocast", "bf16",
                 "--device", "cpu", "--no-stream"]) == 0
    assert main(["eval", "lm", "--ckpt", str(run), "--data", str(corpus), "--max-batches", "1", "--autocast", "bf16",
                 "--json", str(tmp_path / "eval.json")]) == 0
    assert json.loads((tmp_path / "eval.json").read_text())["loss"] > 0


def test_torchrun_two_processes_equal_one_process_from_the_cli(corpus, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    _attnkit("train", "lm", "--data", str(corpus), "--out", str(one), *TINY, "--batch-size", "8")
    proc = _attnkit("train", "lm", "--data", str(corpus), "--out", str(two), *TINY, "--batch-size", "4", nproc=2)
    assert proc.stderr.count("global batch 8 = 4 per process x 2 processes; x 1 accumulation = 8 per update; DDP") == 1
    assert proc.stderr.count("done: 6 steps") == 1  # rank 0 reports, once
    assert json.loads((two / "run.json").read_text())["train_config"]["batch_size"] == 8  # stored: the global batch
    a, b = _weights(one), _weights(two)
    for name in a:
        assert_close(b[name], a[name], "trained_float32", msg=name)
    # resume the two-process run in one process (per-process batch 8 = the same global batch)
    _attnkit("train", "lm", "--out", str(two), "--resume", "--steps", "8", "--no-progress", "--device", "cpu")
    assert json.loads((two / "summary.json").read_text())["steps"] == 8


def test_fsdp_run_then_convert_then_sample_in_one_process(corpus, tmp_path):
    run = tmp_path / "fsdp"
    _attnkit("train", "lm", "--data", str(corpus), "--out", str(run), *TINY, "--batch-size", "4", "--fsdp", nproc=2)
    proc = _attnkit("convert", str(run), str(tmp_path / "single"))
    assert "sharded over 2 processes" in proc.stdout
    assert (tmp_path / "single" / "model.safetensors").is_file()
    out = _attnkit("sample", "--ckpt", str(tmp_path / "single"), "--max-new-tokens", "5", "--seed", "0",
                   "--no-stream", "--device", "cpu")
    assert out.stdout.strip()
    sampled_best = _attnkit("sample", "--ckpt", str(run), "--max-new-tokens", "5", "--seed", "0", "--no-stream",
                            "--device", "cpu")
    assert sampled_best.stdout.strip()  # best/ was converted at the end of the run
    with pytest.raises(AssertionError, match="already exists"):
        _attnkit("convert", str(run), str(tmp_path / "single"))
    # its sharded step checkpoints resume from the command line: in one process a one-line refusal, under torchrun
    # re-sharded (here over the same two processes)
    with pytest.raises(AssertionError, match=r"attnkit train: error: fsdp=True needs several processes"):
        _attnkit("train", "lm", "--out", str(run), "--resume", "--steps", "9", "--no-progress", "--device", "cpu")
    from attnkit.checkpoints.run_lock import RunLock

    lock = RunLock(run)  # another process training in the folder: every rank says so, not a gloo error
    with pytest.raises(AssertionError) as err:
        _attnkit("train", "lm", "--out", str(run), "--resume", "--steps", "9", "--no-progress", "--device", "cpu",
                 nproc=2)
    assert str(err.value).count("is in use by another training process") == 2 and "gloo" not in str(err.value)
    lock.release()
    _attnkit("train", "lm", "--out", str(run), "--resume", "--steps", "9", "--no-progress", "--device", "cpu",
             nproc=2)
    assert json.loads((run / "summary.json").read_text())["steps"] == 9


def _reversals(make_copy_task, tmp_path: Path) -> Path:
    """train.tsv (120 pairs) and valid.tsv (10): short strings of a-f and their reversals."""
    return make_copy_task(tmp_path / "data", seed=3, sizes=(("train", 120), ("valid", 10)), letters="abcdef",
                          lengths=(2, 6), target="reversed")


def _tiny_mt(data: Path, layers: int = 1) -> list[str]:
    return ["--data", str(data), "--preset", "transformer-small", "--set", "d_model=32", "--set", "num_heads=2",
            "--set", f"num_encoder_layers={layers}", "--set", f"num_decoder_layers={layers}", "--set",
            "dim_feedforward=64", "--set", "dropout=0.0", "--vocab-size", "300", "--max-len", "24", "--no-bleu",
            "--steps", "6", "--warmup-steps", "2", "--log-every", "1", "--ckpt-every", "3", "--eval-every", "3",
            "--eval-batches", "2", "--no-progress", "--device", "cpu"]


def test_torchrun_train_mt_shares_the_token_budget_batches(tmp_path, make_copy_task):
    """Translation: 2 processes x --max-tokens 64 see the batches of 1 process x --max-tokens 128; the evaluations'
    greedy BLEU decodes with the model inside DDP's wrapper (it used to crash at the first evaluation)."""
    tiny = [a for a in _tiny_mt(_reversals(make_copy_task, tmp_path)) if a != "--no-bleu"] + ["--bleu-sentences", "5"]
    one, two = tmp_path / "one", tmp_path / "two"
    _attnkit("train", "mt", "--out", str(one), *tiny, "--max-tokens", "128")
    proc = _attnkit("train", "mt", "--out", str(two), *tiny, "--max-tokens", "64", nproc=2)
    assert proc.stderr.count("global token budget 128 = 64 per process x 2 processes") == 1
    bleu = [json.loads((run / "summary.json").read_text())["valid_bleu"] for run in (one, two)]
    assert bleu[0] == bleu[1], bleu
    # key biases are not determined by training (helpers.without_key_biases): the same weights without them ...
    a, b = without_key_biases(_weights(one), 32), without_key_biases(_weights(two), 32)
    assert sorted(a) == sorted(b)
    for name in a:
        assert_close(b[name], a[name], "trained_float32", msg=name)
    # ... and the same outputs with them
    from attnkit.checkpoints import load

    models = [load(latest_checkpoint(run / "checkpoints")).model.eval() for run in (one, two)]
    config = models[0].config
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, config.src_vocab_size, (3, 7), generator=g)  # (B, S)
    tgt = torch.randint(4, config.tgt_vocab_size, (3, 5), generator=g)  # (B, T)
    with torch.no_grad():
        assert_close(models[1](src, tgt), models[0](src, tgt), "trained_float32")


def test_torchrun_train_mt_with_layer_drop(tmp_path, capsys, make_copy_task):
    """LayerDrop leaves layers out of some forward passes, a different set on each rank: DDP must not wait for
    their gradients (find_unused_parameters); FSDP, whose ranks gather each layer together, refuses it in one line."""
    tiny = _tiny_mt(_reversals(make_copy_task, tmp_path), layers=3) + ["--set", "layer_drop=0.5", "--max-tokens", "64"]
    _attnkit("train", "mt", "--out", str(tmp_path / "two"), *tiny, nproc=2)
    rows = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert max(r.get("step", 0) for r in rows) == 6 and any("valid_loss" in r for r in rows)
    state = json.loads((latest_checkpoint(tmp_path / "two" / "checkpoints") / "state.json").read_text())
    assert state["model_config"]["layer_drop"] == 0.5
    assert main(["train", "mt", "--out", str(tmp_path / "fsdp"), *tiny, "--fsdp"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == ("attnkit train: error: fsdp=True needs layer_drop = 0 (got 0.5): the ranks would "
                                            "skip different layers and wait for each other's shards; use DDP (no fsdp) "
                                            "instead")
    assert "Traceback" not in err and not (tmp_path / "fsdp" / "checkpoints").exists()
