"""The CPU translation recipe: what `attnkit train mt` does with no recipe flags (preset, schedule over the time
budget, BLEU-selected best checkpoint, sample translations, the final valid BLEU/chrF line)."""

from __future__ import annotations

import json
import math
import types

import pytest

from attnkit.cli.main import main
from attnkit.recipes import MT_DEFAULTS
from attnkit.models.presets import get_preset
from attnkit.training.config import TrainConfig
from attnkit.training.metrics import read_metrics
from attnkit.training.optim import LRScheduler


@pytest.mark.parametrize("bar", [[], ["--no-progress"]], ids=["bar", "no-bar"])
def test_recipe_defaults_preset_schedule_bleu_and_final_summary(tmp_path, capsys, make_copy_task, bar):
    data = make_copy_task(tmp_path / "copy")
    run = tmp_path / "run"
    # the evaluation lines and sample translations are printed as a user sees them, with or without the bar
    assert main(["train", "mt", "--data", str(data), "--out", str(run), "--steps", "20", "--eval-every", "10",
                 "--eval-batches", "2", *bar]) == 0
    saved = json.loads((run / "run.json").read_text())
    cfg, model = saved["train_config"], saved["model_config"]
    assert (cfg["schedule"], cfg["lr"], cfg["min_lr"], cfg["betas"]) == ("cosine", 1.4e-3, 1e-5, [0.9, 0.98])
    assert cfg["warmup_steps"] == 2  # a 20-step run warms up for its first tenth (150 for a timed run)
    assert cfg["best_metric"] == "valid_bleu" and cfg["best_mode"] == "max"
    cpu = get_preset("transformer-cpu")
    assert (model["d_model"], model["num_encoder_layers"], model["num_decoder_layers"], model["norm_first"],
            model["dropout"], model["attention_dropout"], model["activation"], model["dim_feedforward"]) == (
        128, 2, 2, True, 0.0, 0.0, "swiglu", 344) == (
        cpu.d_model, cpu.num_encoder_layers, cpu.num_decoder_layers, cpu.norm_first, cpu.dropout, cpu.attention_dropout,
        cpu.activation, cpu.dim_feedforward)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best"]["metric"] == "valid_bleu"
    final = summary["final_valid"]
    assert final["sentences"] == 60 and final["decoding"] == "greedy" and final["step"] == summary["best"]["step"]
    assert 0.0 <= final["bleu"] <= 100.0 and 0.0 <= final["chrf"] <= 100.0
    out = capsys.readouterr()
    text = out.out + out.err
    assert f"valid (60 sentences, greedy, best/ at step {final['step']}): BLEU {final['bleu']:.2f}" in text
    # three samples per evaluation (steps 10 and 20), the source next to its reference
    first_src, first_ref = (data / "valid.tsv").read_text().splitlines()[0].split("\t")
    assert text.count(f"  src: {first_src}\n  ref: {first_ref}\n  out: ") == 2, text
    assert text.count("  ref: ") == 6
    opts = json.loads((run / "checkpoints" / "best" / "state.json").read_text())["extra"]["mt_options"]
    assert (opts["vocab_size"], opts["max_tokens"], opts["bleu"], opts["word_dropout"]) == (2000, 512, True, 0.0)


def test_schedule_runs_over_the_time_budget(tmp_path, monkeypatch, make_copy_task):
    """With --max-time only, the learning rate warms up and then decays to min_lr at the end of the budget.
    The trainer's clock is faked (1 s per reading) so that the test does not depend on this machine's speed."""
    import attnkit.training.trainer as trainer_module

    clock = {"t": 0.0}

    def perf_counter():
        clock["t"] += 1.0
        return clock["t"]

    monkeypatch.setattr(trainer_module, "time", types.SimpleNamespace(perf_counter=perf_counter))
    data = make_copy_task(tmp_path / "copy")
    run = tmp_path / "run"
    assert main(["train", "mt", "--data", str(data), "--out", str(run), "--max-time", "3", "--warmup-steps", "3",
                 "--log-every", "1", "--eval-every", "1000", "--no-bleu", "--no-progress",
                 "--set", "d_model=32", "--set", "dim_feedforward=64", "--set", "num_heads=2"]) == 0
    rows = [r for r in read_metrics(run) if "lr" in r]
    lrs = [r["lr"] for r in rows]
    assert json.loads((run / "summary.json").read_text())["stopped_by"] == "max_time"
    assert 15 < len(lrs) < 100  # a 180-"second" budget, a few clock readings per update
    assert lrs[0] < lrs[1] < lrs[2] <= 1.4e-3  # warmup
    after = lrs[3:]
    assert all(a >= b for a, b in zip(after, after[1:]))  # cosine decay over the budget ...
    assert after[-1] < 0.05 * 1.4e-3  # ... down to (almost) min_lr at its end
    for r in rows[3:]:
        frac = r["elapsed"] / 180
        assert r["lr"] >= 1e-5 - 1e-12
        expected = 1e-5 + (1.4e-3 - 1e-5) * 0.5 * (1 + math.cos(math.pi * frac))
        assert r["lr"] == pytest.approx(expected, abs=2.5e-4)


def test_recipe_defaults_make_a_valid_timed_config():
    cfg = TrainConfig(**MT_DEFAULTS, steps=None, max_time=15)
    assert cfg.steps is None and cfg.schedule == "cosine"
    import torch

    clock = {"s": 0.0}
    sched = LRScheduler(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))]), cfg, clock=lambda: clock["s"])
    lrs = {}
    for frac in (0.0, 0.5, 1.0):
        clock["s"] = frac * 15 * 60
        lrs[frac] = sched.lr_at(10_000)
    assert lrs[0.0] == pytest.approx(1.4e-3) and lrs[0.5] == pytest.approx((1.4e-3 + 1e-5) / 2)
    assert lrs[1.0] == pytest.approx(1e-5)


def test_word_dropout_flag_is_validated(tmp_path, capsys, make_copy_task):
    data = make_copy_task(tmp_path / "copy")
    assert main(["train", "mt", "--data", str(data), "--out", str(tmp_path / "r"), "--steps", "2",
                 "--word-dropout", "1.5", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "word_dropout must be in [0, 1), got 1.5" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()
