"""Trainer: run folder contents, refusal rules, resume rules, accumulation, robustness checks."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from attnkit.checkpoints.checkpoint import CheckpointError, read_checkpoint_state
from attnkit.checkpoints.runs import is_run_dir
from attnkit.training.config import TrainConfig
from attnkit.training.lm_task import LMTask
from attnkit.training.metrics import read_metrics
from attnkit.training.trainer import Trainer

BASE = dict(steps=12, batch_size=4, block_size=8, lr=3e-3, min_lr=3e-4, warmup_steps=2, eval_every=5,
            eval_batches=2, log_every=1, ckpt_every=4, keep_last=2, seed=3)


def _trainer(tmp_path, tiny_lm, token_streams, name="run", resume=False, model_seed=0, dropout=0.1, log=True,
             **overrides):
    cfg = TrainConfig(**(BASE | overrides))
    task = LMTask(*token_streams, block_size=cfg.block_size, batch_size=cfg.batch_size, seed=1)
    return Trainer(tiny_lm(model_seed, dropout=dropout), task, cfg, tmp_path / name,
                   model_config={"kind": "tiny", "dim": 16}, extra={"tokenizer": "chars"}, resume=resume,
                   progress=False, log=log)


def _train_losses(out_dir):
    return {r["step"]: r["loss"] for r in read_metrics(out_dir) if "loss" in r}


def test_fresh_run_writes_metrics_plots_checkpoints_and_summary(tmp_path, tiny_lm, token_streams):
    summary = _trainer(tmp_path, tiny_lm, token_streams).fit()
    out = tmp_path / "run"
    assert summary["steps"] == 12 and summary["stopped_by"] == "steps"
    assert summary["tokens"] == 12 * 4 * 8
    assert json.loads((out / "summary.json").read_text())["steps"] == 12
    run = json.loads((out / "run.json").read_text())
    assert run["train_config"]["steps"] == 12 and run["model_config"] == {"kind": "tiny", "dim": 16}

    rows = read_metrics(out)
    train = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "valid_loss" in r]
    assert [r["step"] for r in train] == list(range(1, 13))
    assert [r["step"] for r in evals] == [5, 10, 12]  # every 5 steps + the final one
    assert set(train[0]) == {"step", "loss", "lr", "tokens", "tokens_per_s", "elapsed", "grad_norm"}
    assert train[0]["lr"] == pytest.approx(1.5e-3) and train[1]["lr"] == pytest.approx(3e-3)
    assert train[-1]["loss"] < train[0]["loss"]  # it learns something (random tokens: the unigram stats)
    with open(out / "metrics.csv") as fh:
        csv_rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in csv_rows] == list(range(1, 13))
    assert float(csv_rows[4]["valid_loss"]) == evals[0]["valid_loss"]
    assert (out / "loss.png").read_bytes()[:4] == b"\x89PNG"

    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["best", "step_00000008", "step_00000012"]  # keep_last = 2, plus best
    best_eval = min(evals, key=lambda r: r["valid_loss"])
    best_state = read_checkpoint_state(out / "checkpoints" / "best")
    assert best_state["step"] == best_eval["step"]
    assert best_state["best"] == {"metric": "valid_loss", "value": best_eval["valid_loss"], "step": best_eval["step"]}
    assert best_state["extra"] == {"tokenizer": "chars"}
    assert summary["best"]["step"] == best_eval["step"]
    last = read_checkpoint_state(out / "checkpoints" / "step_00000012")
    assert last["step"] == 12 and last["scheduler"]["step"] == 12 and last["train_config"]["lr"] == 3e-3


def test_without_the_bar_the_evaluation_lines_still_print_and_log_false_silences_them(tmp_path, tiny_lm,
                                                                                       token_streams, capsys):
    _trainer(tmp_path, tiny_lm, token_streams, name="bar-off").fit()
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("step ")] == ["step 5", "step 10",
                                                                                            "step 12"], out
    assert "valid_loss" in out
    _trainer(tmp_path, tiny_lm, token_streams, name="quiet", log=False).fit()
    assert "step " not in capsys.readouterr().out


@pytest.mark.parametrize("name", ["summary.json", "metrics.csv", "loss.png"])
def test_a_folder_holding_files_a_run_writes_is_not_written_into(tmp_path, tiny_lm, token_streams, name):
    """Was: a folder that is no run but holds a file of the user's named like a run's record was trained into and
    the file replaced."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / name).write_text("mine")
    with pytest.raises(ValueError, match=rf"holds {name}, which a run would overwrite, and no training run"):
        _trainer(tmp_path, tiny_lm, token_streams, steps=2)
    assert (tmp_path / "run" / name).read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [name]


def test_existing_run_is_never_overwritten(tmp_path, tiny_lm, token_streams):
    _trainer(tmp_path, tiny_lm, token_streams, steps=4, eval_every=4).fit()
    before = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    assert is_run_dir(tmp_path / "run")
    with pytest.raises(ValueError, match=r"already holds a training run; pass --resume \(resume=True\)"):
        _trainer(tmp_path, tiny_lm, token_streams, steps=4)
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == before


def test_a_run_that_stopped_before_its_first_checkpoint_says_to_remove_its_folder(tmp_path, tiny_lm, token_streams):
    with pytest.raises(FloatingPointError, match="no checkpoint was written yet"):
        _trainer(tmp_path, tiny_lm, token_streams, steps=4, eval_every=4, ckpt_every=4, lr=1e30).fit()
    with pytest.raises(ValueError, match="stopped before its first checkpoint, so it cannot be resumed; remove"):
        _trainer(tmp_path, tiny_lm, token_streams, steps=4)
    with pytest.raises(CheckpointError, match="no checkpoint in .*; start a fresh run in a new folder instead, or "
                                              "remove this one"):
        _trainer(tmp_path, tiny_lm, token_streams, steps=4, resume=True)


def test_a_resume_that_fails_as_it_starts_releases_the_folder(tmp_path, tiny_lm, token_streams):
    _trainer(tmp_path, tiny_lm, token_streams, steps=4, eval_every=4, ckpt_every=4).fit()
    state_file = tmp_path / "run" / "checkpoints" / "step_00000004" / "state.json"
    state = json.loads(state_file.read_text())
    state["rng"]["torch_cpu"] = "AAAA"
    state_file.write_text(json.dumps(state))
    kept = []  # the failed Trainers stay alive in their tracebacks, as in a notebook
    for _ in range(2):
        with pytest.raises(CheckpointError, match="torch_cpu") as err:
            _trainer(tmp_path, tiny_lm, token_streams, steps=8, eval_every=4, ckpt_every=4, resume=True).fit()
        kept.append(err.value)  # the second would say "in use by another training process" if the lock were held


def test_the_folder_stays_locked_until_the_summary_is_written(tmp_path, tiny_lm, token_streams, monkeypatch):
    """Was: ``fit`` released the folder before it wrote summary.json, so a resume started in that moment wrote its
    run under the finished one's summary (and the lock's promise, nothing written unlocked, was broken)."""
    from attnkit.checkpoints.run_lock import RunLock

    write_summary, locked = Trainer._write_summary, []

    def checked(self, stopped_by):
        try:
            RunLock(self.out_dir).release()
        except ValueError:  # "in use by another training process": the run holds it still
            locked.append(True)
        return write_summary(self, stopped_by)

    monkeypatch.setattr(Trainer, "_write_summary", checked)
    _trainer(tmp_path, tiny_lm, token_streams, steps=2, eval_every=2, ckpt_every=2).fit()
    assert locked == [True]
    RunLock(tmp_path / "run").release()  # and released once fit() is over


def test_empty_existing_folder_is_fine(tmp_path, tiny_lm, token_streams):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    _trainer(tmp_path, tiny_lm, token_streams, steps=2, eval_every=2, ckpt_every=2).fit()
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine"


def test_resume_without_checkpoint(tmp_path, tiny_lm, token_streams):
    with pytest.raises(CheckpointError, match="cannot resume: the run folder .*missing does not exist"):
        _trainer(tmp_path, tiny_lm, token_streams, name="missing", resume=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="cannot resume: no checkpoint in .*checkpoints"):
        _trainer(tmp_path, tiny_lm, token_streams, name="empty", resume=True)


def test_resume_below_the_checkpoints_step_is_refused_and_changes_nothing(tmp_path, tiny_lm, token_streams):
    _trainer(tmp_path, tiny_lm, token_streams, steps=4, eval_every=4, ckpt_every=4).fit()
    files = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()}
    with pytest.raises(ValueError, match=r"cannot resume with steps=3 \(--steps\): .*step_00000004 is at step 4 "
                                         r"already; give at least that"):
        _trainer(tmp_path, tiny_lm, token_streams, steps=3, eval_every=4, ckpt_every=4, resume=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()} == files


def test_resume_with_changed_config_names_the_fields(tmp_path, tiny_lm, token_streams):
    _trainer(tmp_path, tiny_lm, token_streams, steps=4, eval_every=4).fit()
    with pytest.raises(ValueError, match=r"changed in 2 field\(s\): batch_size \(checkpoint 4, now 2\); "
                                         r"lr \(checkpoint 0.003, now 0.001\)"):
        _trainer(tmp_path, tiny_lm, token_streams, resume=True, steps=4, eval_every=4, lr=1e-3, batch_size=2)
    cfg = TrainConfig(**(BASE | dict(steps=4, eval_every=4)))
    task = LMTask(*token_streams, block_size=8, batch_size=4, seed=1)
    with pytest.raises(ValueError, match=r"model_config.dim \(checkpoint 16, now 32\)"):
        Trainer(tiny_lm(), task, cfg, tmp_path / "run", model_config={"kind": "tiny", "dim": 32}, resume=True)


def test_resume_fills_config_fields_added_since_the_checkpoint(tmp_path, tiny_lm, token_streams):
    """A checkpoint written before a config field existed resumes with that field's default; a real change of
    the field is still refused by name."""
    cfg = TrainConfig(**(BASE | dict(steps=4, eval_every=4)))
    config = GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16)
    task = LMTask(*token_streams, block_size=8, batch_size=4, seed=1)
    Trainer(tiny_lm(), task, cfg, tmp_path / "run", model_config=config, progress=False).fit()
    state_file = tmp_path / "run" / "checkpoints" / "step_00000004" / "state.json"
    state = json.loads(state_file.read_text())
    del state["model_config"]["attention_dropout"]  # as written before the field was added
    state_file.write_text(json.dumps(state))

    task = LMTask(*token_streams, block_size=8, batch_size=4, seed=1)
    summary = Trainer(tiny_lm(), task, cfg.replace(steps=6), tmp_path / "run", model_config=config, resume=True,
                      progress=False).fit()
    assert summary["steps"] == 6 and summary["resumed_from"].endswith("step_00000004")

    state_file = tmp_path / "run" / "checkpoints" / "step_00000006" / "state.json"
    state = json.loads(state_file.read_text())
    del state["model_config"]["attention_dropout"]
    state_file.write_text(json.dumps(state))
    with pytest.raises(ValueError, match=r"model_config.attention_dropout \(checkpoint None, now 0.0\)"):
        Trainer(tiny_lm(), task, cfg.replace(steps=8), tmp_path / "run", model_config=config.replace(
            attention_dropout=0.0), resume=True, progress=False)


def test_resume_with_different_data_is_refused(tmp_path, tiny_lm, token_streams):
    _trainer(tmp_path, tiny_lm, token_streams, steps=4, eval_every=4).fit()
    train, valid = token_streams
    cfg = TrainConfig(**(BASE | dict(steps=8, eval_every=4)))
    task = LMTask(train.flip(0), valid, block_size=8, batch_size=4, seed=1)
    with pytest.raises(ValueError, match="language-modelling data differ.*train_fingerprint"):
        Trainer(tiny_lm(), task, cfg, tmp_path / "run", model_config={"kind": "tiny", "dim": 16}, resume=True)


def test_resume_to_more_steps_continues_like_one_long_run(tmp_path, tiny_lm, token_streams):
    """In-process version of the exact-resume property (the SIGKILL version is in test_exact_resume.py)."""
    common = dict(schedule="constant", eval_every=3, ckpt_every=3)
    _trainer(tmp_path, tiny_lm, token_streams, name="long", steps=9, **common).fit()
    _trainer(tmp_path, tiny_lm, token_streams, name="split", steps=6, **common).fit()
    summary = _trainer(tmp_path, tiny_lm, token_streams, name="split", resume=True, model_seed=7, steps=9,
                       **common).fit()
    assert summary["resumed_from"].endswith("step_00000006") and summary["steps"] == 9
    long, split = _train_losses(tmp_path / "long"), _train_losses(tmp_path / "split")
    assert list(split) == list(range(1, 10))  # no duplicated steps
    assert split == long  # bit-identical floats
    steps = [r["step"] for r in read_metrics(tmp_path / "split")]
    assert steps == [r["step"] for r in read_metrics(tmp_path / "long")]


def test_resume_of_a_finished_run_is_a_no_op(tmp_path, tiny_lm, token_streams):
    _trainer(tmp_path, tiny_lm, token_streams, steps=4, eval_every=4).fit()
    before = read_metrics(tmp_path / "run")
    summary = _trainer(tmp_path, tiny_lm, token_streams, steps=4, eval_every=4, resume=True).fit()
    assert summary["steps"] == 4 and read_metrics(tmp_path / "run") == before


def test_grad_accumulation_equals_a_big_batch(tmp_path, tiny_lm, fixed_task):
    cfg = dict(steps=3, block_size=8, lr=1e-2, warmup_steps=0, schedule="constant", eval_every=100,
               eval_batches=1, log_every=1, ckpt_every=100, grad_clip=1.0)
    runs = {}
    for name, bs, accum in (("accum", 4, 2), ("big", 8, 1)):
        model = tiny_lm(0, dropout=0.0)
        t = Trainer(model, fixed_task(bs), TrainConfig(batch_size=bs, grad_accum=accum, **cfg), tmp_path / name,
                    model_config={}, progress=False)
        t.fit()
        runs[name] = (model, read_metrics(tmp_path / name))
    (m1, rows1), (m2, rows2) = runs["accum"], runs["big"]
    l1 = [r["loss"] for r in rows1 if "loss" in r]
    l2 = [r["loss"] for r in rows2 if "loss" in r]
    assert len(l1) == 3 and l1 == pytest.approx(l2, abs=1e-6)
    g1 = [r["grad_norm"] for r in rows1 if "grad_norm" in r]
    g2 = [r["grad_norm"] for r in rows2 if "grad_norm" in r]
    assert g1 == pytest.approx(g2, abs=1e-6)
    assert [r["tokens"] for r in rows1 if "loss" in r] == [64, 128, 192]
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, rtol=0, atol=1e-6)


def test_evaluating_more_often_does_not_change_training(tmp_path, tiny_lm, token_streams):
    _trainer(tmp_path, tiny_lm, token_streams, name="a", steps=6, eval_every=2, ckpt_every=100).fit()
    _trainer(tmp_path, tiny_lm, token_streams, name="b", steps=6, eval_every=100, ckpt_every=100).fit()
    assert _train_losses(tmp_path / "a") == _train_losses(tmp_path / "b")


def test_seed_makes_runs_repeatable_and_dropout_matters(tmp_path, tiny_lm, token_streams):
    _trainer(tmp_path, tiny_lm, token_streams, name="a", steps=3, eval_every=100, ckpt_every=100).fit()
    _trainer(tmp_path, tiny_lm, token_streams, name="b", steps=3, eval_every=100, ckpt_every=100).fit()
    _trainer(tmp_path, tiny_lm, token_streams, name="c", steps=3, eval_every=100, ckpt_every=100, seed=4).fit()
    a, b, c = (_train_losses(tmp_path / n) for n in "abc")
    assert a == b
    assert a != c  # only the dropout seed differs (the data seed is the task's)


def test_max_time_stops_a_time_only_run(tmp_path, tiny_lm, token_streams):
    summary = _trainer(tmp_path, tiny_lm, token_streams, steps=None, max_time=0.002, schedule="constant",
                       eval_every=10_000, ckpt_every=10_000).fit()
    assert summary["stopped_by"] == "max_time"
    # whatever was reached got a final evaluation and checkpoint
    assert (tmp_path / "run" / "checkpoints" / f"step_{summary['steps']:08d}").is_dir()
    assert read_metrics(tmp_path / "run")[-1]["step"] == summary["steps"]


def test_a_time_limited_schedule_runs_each_update_at_the_lr_it_logs_also_after_a_resume(tmp_path, tiny_lm,
                                                                                         token_streams):
    """The cosine of a time-only run follows the clock: each update must run at the lr of its own time (the one
    logged), not at the lr set after the update before, and a resumed run not at the lr of time 0."""
    import os
    import signal

    from attnkit.training.preemption import Interrupted

    def run(resume: bool, max_time: float, stop_after: int | None) -> list[float]:
        trainer = _trainer(tmp_path, tiny_lm, token_streams, resume=resume, steps=None, max_time=max_time,
                           min_lr=0.0, eval_every=10_000, ckpt_every=10_000)
        applied, step = [], trainer.optimizer.step

        def recording_step(*args, **kwargs):
            applied.append(trainer.optimizer.param_groups[0]["lr"])
            if len(applied) == stop_after:
                os.kill(os.getpid(), signal.SIGINT)  # preemption: a checkpoint at this step, then Interrupted
            return step(*args, **kwargs)

        trainer.optimizer.step = recording_step
        try:
            trainer.fit()
        except Interrupted:
            pass
        return applied

    first = run(False, 0.01, None)  # to the end of a 0.6 s budget
    resumed = run(True, 0.5, 3)  # the same run with a longer budget, stopped after three updates
    logged = [r["lr"] for r in read_metrics(tmp_path / "run") if "lr" in r]
    assert len(first) >= 3 and len(resumed) == 3
    assert first + resumed == logged
    assert resumed[0] < BASE["lr"]  # past its warmup and some of its budget: below the peak, the lr of time 0


def test_bf16_autocast_trains(tmp_path, tiny_lm, token_streams):
    summary = _trainer(tmp_path, tiny_lm, token_streams, steps=3, eval_every=3, autocast="bf16").fit()
    assert summary["steps"] == 3 and summary["valid_loss"] > 0


def test_tiny_gpt_with_inverse_sqrt_takes_d_model_from_its_config(tmp_path, token_streams):
    gcfg = GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.1)
    torch.manual_seed(0)
    model = GPT(gcfg)
    cfg = TrainConfig(steps=4, batch_size=2, block_size=8, schedule="inverse_sqrt", lr=1.0, warmup_steps=2,
                      eval_every=4, eval_batches=1, log_every=1, ckpt_every=4)
    task = LMTask(*token_streams, block_size=8, batch_size=2)
    trainer = Trainer(model, task, cfg, tmp_path / "gpt", model_config=gcfg, progress=False)
    trainer.fit()
    lrs = [r["lr"] for r in read_metrics(tmp_path / "gpt") if "lr" in r]
    assert lrs == pytest.approx([16 ** -0.5 * min(n ** -0.5, n * 2 ** -1.5) for n in (1, 2, 3, 4)])
    state = read_checkpoint_state(tmp_path / "gpt" / "checkpoints" / "step_00000004")
    assert GPTConfig.from_dict(state["model_config"]) == gcfg


# --- robustness -------------------------------------------------------------------------------------
class _NaNAfter(LMTask):
    def loss(self, model, batch):
        loss, n = super().loss(model, batch)
        self.calls = getattr(self, "calls", 0) + 1
        return (loss * float("nan") if self.calls >= 3 else loss), n


def test_diverging_loss_raises(tmp_path, tiny_lm, token_streams):
    cfg = TrainConfig(**(BASE | dict(steps=5)))
    task = _NaNAfter(*token_streams, block_size=8, batch_size=4)
    with pytest.raises(FloatingPointError, match="training loss is nan at step 3"):
        Trainer(tiny_lm(), task, cfg, tmp_path / "nan", model_config={}, progress=False).fit()


class _NaNAtStep(LMTask):
    """Finite losses until micro-batch ``at`` (1-based), NaN from then on."""

    at = 7

    def loss(self, model, batch):
        loss, n = super().loss(model, batch)
        self.calls = getattr(self, "calls", 0) + 1
        return (loss * float("nan") if self.calls >= self.at else loss), n


def test_non_finite_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path, tiny_lm, token_streams):
    cfg = TrainConfig(**(BASE | dict(steps=12, ckpt_every=3, eval_every=100)))
    task = _NaNAtStep(*token_streams, block_size=8, batch_size=4)
    out = tmp_path / "nan"
    with pytest.raises(FloatingPointError, match=r"training loss is nan at step 7 .*the last good checkpoint is "
                                                  r".*step_00000006"):
        Trainer(tiny_lm(), task, cfg, out, model_config={}, progress=False).fit()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000003", "step_00000006"]
    state = read_checkpoint_state(out / "checkpoints" / "step_00000006")
    assert state["step"] == 6 and state["last_loss"] == pytest.approx(_train_losses(out)[6])


def test_numbers_read_every_few_updates_still_name_the_update_that_diverged(tmp_path, tiny_lm, token_streams):
    # log_every=5: the losses of updates 1-4 stay on the device until the checkpoint due after update 4 reads
    # them; the NaN of update 3 is named and that checkpoint is never written
    cfg = TrainConfig(**(BASE | dict(steps=12, log_every=5, ckpt_every=2, eval_every=100)))
    task = _NaNAfter(*token_streams, block_size=8, batch_size=4)
    out = tmp_path / "nan"
    with pytest.raises(FloatingPointError, match=r"training loss is nan at step 3 \(micro-batch 0\).*the last good "
                                                  r"checkpoint is .*step_00000002"):
        Trainer(tiny_lm(), task, cfg, out, model_config={}, progress=False).fit()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000002"]


def test_reading_the_numbers_later_changes_no_number(tmp_path, tiny_lm, token_streams):
    """The rows logged when every update is read at once equal those of a run that reads in threes."""
    rows = {}
    for log_every in (1, 3):
        out = f"log{log_every}"
        summary = _trainer(tmp_path, tiny_lm, token_streams, name=out, log_every=log_every, grad_accum=2,
                           grad_clip=1.0).fit()
        rows[log_every] = {r["step"]: r for r in read_metrics(tmp_path / out) if "loss" in r}
        assert summary["tokens"] == 12 * 2 * 4 * 8 and summary["train_loss"] == rows[log_every][12]["loss"]
    assert sorted(rows[3]) == [3, 6, 9, 12]
    for step, row in rows[3].items():
        for key in ("loss", "lr", "tokens", "grad_norm"):
            assert row[key] == rows[1][step][key], (step, key)


def test_diverged_weights_are_never_saved(tmp_path, tiny_lm, token_streams):
    trainer = _trainer(tmp_path, tiny_lm, token_streams, steps=4, ckpt_every=2, grad_clip=None)
    original = trainer.optimizer.step

    def poisoned_step(*args, **kwargs):  # the update at step 4 writes inf into a weight (finite loss before it)
        original(*args, **kwargs)
        if trainer.step == 3:
            with torch.no_grad():
                next(trainer.model.parameters()).view(-1)[0] = float("inf")

    trainer.optimizer.step = poisoned_step
    with pytest.raises(FloatingPointError, match=r"hold NaN/inf at step 4.*last good checkpoint is .*step_00000002"):
        trainer.fit()
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step_00000002"]


def test_unknown_best_metric(tmp_path, tiny_lm, token_streams):
    with pytest.raises(ValueError, match=r"best_metric 'valid_bleu' is not among the evaluation results "
                                         r"\['valid_loss', 'valid_ppl'\]"):
        _trainer(tmp_path, tiny_lm, token_streams, steps=2, eval_every=2, best_metric="valid_bleu").fit()


class _BadTokens(LMTask):
    def loss(self, model, batch):
        loss, _ = super().loss(model, batch)
        return loss, 0


def test_bad_n_tokens_from_task(tmp_path, tiny_lm, token_streams):
    cfg = TrainConfig(**(BASE | dict(steps=2)))
    with pytest.raises(ValueError, match="n_tokens as an int >= 1, got 0"):
        Trainer(tiny_lm(), _BadTokens(*token_streams, block_size=8, batch_size=4), cfg, tmp_path / "x",
                model_config={}, progress=False).fit()


def test_bad_constructor_arguments(tmp_path, tiny_lm, token_streams):
    cfg = TrainConfig(**BASE)
    task = LMTask(*token_streams, block_size=8, batch_size=4)
    with pytest.raises(ValueError, match="expects an nn.Module model, got function"):
        Trainer(lambda x: x, task, cfg, tmp_path / "a", model_config={})
    with pytest.raises(ValueError, match=r"missing \['loss', 'evaluate', 'state_dict', 'load_state_dict'\]"):
        Trainer(tiny_lm(), type("T", (), {"batch": lambda self, s, i: None})(), cfg, tmp_path / "a", model_config={})
    with pytest.raises(ValueError, match="expects a TrainConfig, got dict"):
        Trainer(tiny_lm(), task, BASE, tmp_path / "a", model_config={})
    with pytest.raises(ValueError, match="model_config must be JSON-serialisable"):
        Trainer(tiny_lm(), task, cfg, tmp_path / "a", model_config={"w": torch.zeros(1)})
    with pytest.raises(ValueError, match="extra must map str -> str | dict, got 'vocab' -> list"):
        Trainer(tiny_lm(), task, cfg, tmp_path / "a", model_config={}, extra={"vocab": ["a"]})
    with pytest.raises(ValueError, match="model_config must be a dict"):
        Trainer(tiny_lm(), task, cfg, tmp_path / "a", model_config=[1, 2])
    with pytest.raises(ValueError, match=r"device must be one of \['auto', 'cpu', 'cuda', 'cuda:N', 'mps'\], got 'gpu0'"):
        Trainer(tiny_lm(), task, cfg.replace(device="gpu0"), tmp_path / "a", model_config={})
    assert not (tmp_path / "a").exists()  # no run folder claimed by a rejected trainer


def test_fit_runs_once(tmp_path, tiny_lm, token_streams):
    t = _trainer(tmp_path, tiny_lm, token_streams, steps=1, eval_every=1, ckpt_every=1, warmup_steps=0)
    t.fit()
    with pytest.raises(RuntimeError, match="can run once"):
        t.fit()


def test_progress_bar_shows_loss_lr_throughput_and_time_left(tmp_path, tiny_lm, token_streams, capsys):
    cfg = TrainConfig(**(BASE | dict(steps=3, eval_every=3, ckpt_every=3, max_time=10.0)))
    task = LMTask(*token_streams, block_size=8, batch_size=4, seed=1)
    Trainer(tiny_lm(), task, cfg, tmp_path / "a", model_config={}, progress=True).fit()
    captured = capsys.readouterr()
    assert "3/3" in captured.err
    for field in ("loss=", "lr=", "tok/s=", "left="):
        assert field in captured.err, field
    assert "step 3: valid_loss" in captured.out  # the evaluation line

    cfg = TrainConfig(**(BASE | dict(steps=None, max_time=0.005, schedule="constant", eval_every=10_000)))
    Trainer(tiny_lm(), task, cfg, tmp_path / "b", model_config={}, progress=True).fit()
    err = capsys.readouterr().err
    assert "train (time budget)" in err and "step=" in err


def test_a_summary_that_cannot_be_written_says_which_file_and_that_training_ended(tmp_path, tiny_lm, token_streams,
                                                                                   monkeypatch):
    """A full disk at ``summary.json`` (after the last checkpoint) used to surface as a bare "[Errno 28] No space
    left on device": no file named, nothing saying the training itself was done and how to finish the run."""
    from attnkit.training import trainer as trainer_module

    real = trainer_module.write_text_atomic

    def full_disk(path, text):
        if path.name == "summary.json":
            raise OSError(28, "No space left on device")
        return real(path, text)

    monkeypatch.setattr(trainer_module, "write_text_atomic", full_disk)
    with pytest.raises(OSError) as caught:
        _trainer(tmp_path, tiny_lm, token_streams).fit()
    out = tmp_path / "run"
    assert str(caught.value) == (f"cannot write {out / 'summary.json'}: [Errno 28] No space left on device. Training "
                                 f"itself ended at step 12 (checkpoint {out / 'checkpoints' / 'step_00000012'}); free "
                                 f"some space and --resume to finish the run")
    monkeypatch.setattr(trainer_module, "write_text_atomic", real)
    assert _trainer(tmp_path, tiny_lm, token_streams, resume=True).fit()["steps"] == 12
    assert (out / "summary.json").is_file()


class _ConstantEval(LMTask):
    """Every evaluation gives the same numbers: each one ties the best so far."""

    def evaluate(self, model, n_batches):
        return {"loss": 1.25, "score": 7.0}


@pytest.mark.parametrize("metric,mode", [("valid_loss", "min"), ("valid_score", "max")])
def test_a_tie_does_not_replace_the_best_checkpoint(tmp_path, tiny_lm, token_streams, metric, mode):
    """best/ holds the first evaluation that reached the best value; an equal later one is not better (mutation
    check: ``<=`` / ``>=`` rewrote best/ at every tie)."""
    cfg = TrainConfig(**(BASE | dict(steps=6, eval_every=2, ckpt_every=2, best_metric=metric, best_mode=mode)))
    task = _ConstantEval(*token_streams, block_size=cfg.block_size, batch_size=cfg.batch_size, seed=1)
    out = tmp_path / "run"
    summary = Trainer(tiny_lm(0), task, cfg, out, model_config={"kind": "tiny", "dim": 16}, progress=False,
                      log=False).fit()
    value = 1.25 if metric == "valid_loss" else 7.0
    assert read_checkpoint_state(out / "checkpoints" / "best")["best"] == {"metric": metric, "value": value, "step": 2}
    assert summary["best"]["step"] == 2
