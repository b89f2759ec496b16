"""What a resumed run keeps, from Python: a local data path is recorded as an absolute path (a run resumes from
any working directory), a given option that differs from the run's is refused before anything is read, a
preempted ``average_last`` run averages when resumed; and the options refused when made (``--set block_size``),
a run that ends before its first update, a small ``lr`` alone.

Axis legend: none (runs and files only).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from attnkit import api
from attnkit.api import options
from attnkit.checkpoints.checkpoint import latest_checkpoint, read_checkpoint_state

TINY_LM = dict(preset="char-small", overrides={"n_layer": 1, "n_head": 2, "n_embd": 32}, block_size=16,
               batch_size=8, warmup_steps=2, eval_every=10, eval_batches=2, ckpt_every=5, log_every=5,
               progress=False, device="cpu")
TINY_MT = dict(preset="transformer-cpu", overrides={"d_model": 32, "num_heads": 2, "dim_feedforward": 64,
                                                    "num_encoder_layers": 1, "num_decoder_layers": 1},
               vocab_size=300, max_tokens=256, eval_every=3, eval_batches=2, ckpt_every=3, log_every=3,
               bleu_sentences=4, warmup_steps=1, progress=False, device="cpu")


def quiet(line: str) -> None:
    pass


def _state(run: Path) -> dict:
    return read_checkpoint_state(latest_checkpoint(run / "checkpoints"))


@pytest.fixture(scope="module")
def lm_run(corpus, tmp_path_factory) -> Path:
    """A finished 5-step run (one step checkpoint), to copy and resume."""
    out = tmp_path_factory.mktemp("lm") / "run"
    api.train_lm(data=str(corpus), out=out, steps=5, log=quiet, **TINY_LM)
    return out


@pytest.fixture(scope="module")
def pairs(tmp_path_factory, make_copy_task) -> Path:
    return make_copy_task(tmp_path_factory.mktemp("pairs") / "copy", sizes=(("train", 200), ("valid", 12)))


@pytest.fixture(scope="module")
def mt_run(pairs, tmp_path_factory) -> Path:
    """A finished 3-step translation run with BLEU (one step checkpoint), to copy and resume."""
    out = tmp_path_factory.mktemp("mt") / "run"
    api.train_mt(data=str(pairs), out=out, steps=3, log=quiet, **TINY_MT)
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


# --- 1. relative data paths ---------------------------------------------------------------------------------------

def test_recorded_path_keeps_names_and_makes_local_paths_absolute(tmp_path, monkeypatch):
    (tmp_path / "a.tsv").write_text("x\ty\n")
    (tmp_path / "b.txt").write_text("x\n")
    monkeypatch.chdir(tmp_path)
    assert options.recorded_path("a.tsv") == str(tmp_path.resolve() / "a.tsv")
    here = tmp_path.resolve()
    assert options.recorded_path("a.tsv, b.txt", pairs=True) == f"{here / 'a.tsv'},{here / 'b.txt'}"
    assert options.recorded_path("de-en") == "de-en" and options.recorded_path("missing.txt") == "missing.txt"
    assert options.recorded_path("b.txt", is_name=lambda name: name == "b.txt") == "b.txt"
    (tmp_path / "de,en.tsv").write_text("x\ty\n")  # a file whose name holds a comma is that file, not two
    assert options.recorded_path("de,en.tsv", pairs=True) == str(here / "de,en.tsv")


def test_a_relative_lm_data_path_resumes_from_another_working_directory(corpus, tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.chdir(corpus.parent)
    api.train_lm(data=corpus.name, out=out, steps=5, log=quiet, **TINY_LM)
    assert _state(out)["extra"]["data"] == str(corpus.resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert api.train_lm(out=out, resume=True, steps=10, progress=False, log=quiet).steps == 10
    # the same file by another name is the same data; another file is refused before anything is read
    assert api.train_lm(out=out, resume=True, steps=11, data=str(corpus), progress=False, log=quiet).steps == 11
    with pytest.raises(ValueError, match=r"--resume: the run was trained on --data .*plays.txt', got 'plays.txt'"):
        api.train_lm(out=out, resume=True, steps=12, data="plays.txt", progress=False, log=quiet)


def test_an_old_run_with_a_relative_data_path_resumes_from_its_own_directory(lm_run, corpus, tmp_path, monkeypatch):
    run = _copy(lm_run, tmp_path)
    state_file = latest_checkpoint(run / "checkpoints") / "state.json"
    state = json.loads(state_file.read_text())
    state["extra"]["data"] = corpus.name  # as runs recorded it before
    state_file.write_text(json.dumps(state))
    monkeypatch.chdir(corpus.parent)
    result = api.train_lm(out=run, resume=True, steps=7, data=f"./{corpus.name}", progress=False, log=quiet)
    assert result.steps == 7 and _state(run)["extra"]["data"] == str(corpus.resolve())


def test_a_relative_mt_data_path_resumes_from_another_working_directory(pairs, tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.chdir(pairs.parent)
    api.train_mt(data=pairs.name, valid=f"{pairs.name}/valid.tsv", out=out, steps=3, bleu=False, log=quiet,
                 **TINY_MT)
    extra = _state(out)["extra"]
    assert extra["data"] == str(pairs.resolve())
    assert extra["mt_options"]["valid"] == str((pairs / "valid.tsv").resolve())
    monkeypatch.chdir(tmp_path)
    assert api.train_mt(out=out, resume=True, steps=4, progress=False, log=quiet).steps == 4
    assert api.train_mt(out=out, resume=True, steps=5, data=str(pairs), progress=False, log=quiet).steps == 5


def test_a_relative_finetune_data_path_resumes_from_another_working_directory(lm_run, corpus, tmp_path,
                                                                                 monkeypatch):
    out = tmp_path / "ft"
    monkeypatch.chdir(corpus.parent)
    api.finetune(source=str(lm_run), data=corpus.name, out=out, steps=2, block_size=16, batch_size=4, eval_every=2,
                 eval_batches=1, ckpt_every=2, progress=False, device="cpu", log=quiet)
    assert _state(out)["extra"]["data"] == str(corpus.resolve())
    assert _state(out)["extra"]["from"] == str(lm_run.resolve())
    monkeypatch.chdir(tmp_path)
    assert api.finetune(out=out, resume=True, steps=3, progress=False, log=quiet).steps == 3
    assert api.finetune(out=out, resume=True, steps=4, data=str(corpus), source=str(lm_run), progress=False,
                        log=quiet).steps == 4
    before = _state(out)
    with pytest.raises(ValueError, match=r"is not a `train lm` run; continue it with `attnkit finetune --out "):
        api.train_lm(out=out, resume=True, steps=6, progress=False, log=quiet)
    assert _state(out) == before  # its documents, source and prompting are kept


def test_finetune_resume_refuses_another_tokenizer_file(lm_run, corpus, tmp_path):
    """A ``tokenizer`` given on resume is compared with the run's, as ``data`` and ``source`` are (it was ignored)."""
    from attnkit.checkpoints import load
    from attnkit.data.tokenizers.char_tokenizer import CharTokenizer

    out = tmp_path / "ft"
    api.finetune(source=str(lm_run), data=str(corpus), out=out, steps=2, block_size=16, batch_size=4, eval_every=2,
                 eval_batches=1, ckpt_every=2, progress=False, device="cpu", log=quiet)
    own = load(out).tokenizer.save(tmp_path / "own.json")
    other = CharTokenizer.train("abc").save(tmp_path / "other.json")
    with pytest.raises(ValueError, match=r"the run's tokenizer \(in its checkpoint\) differs from the one in "
                                         r"--tokenizer '.*other.json'"):
        api.finetune(out=out, resume=True, steps=3, tokenizer=str(other), progress=False, log=quiet)
    with pytest.raises(FileNotFoundError, match="nowhere.json does not exist"):
        api.finetune(out=out, resume=True, steps=3, tokenizer=str(tmp_path / "nowhere.json"), progress=False, log=quiet)
    assert api.finetune(out=out, resume=True, steps=3, tokenizer=str(own), progress=False, log=quiet).steps == 3


def test_a_bf16_finetune_resumes_in_bf16_as_it_would_have_gone_on(lm_run, corpus, tmp_path):
    """A run fine-tuning bf16 weights stores bf16 checkpoints; resumed, it goes on in bf16 (it went on in float32:
    the resumed steps differed from those of a run that was never stopped)."""
    import torch

    from attnkit.checkpoints import load
    from attnkit.checkpoints.checkpoint import RESERVED_KEYS, save_checkpoint, stored_float_dtype
    from attnkit.training.metrics import read_metrics

    loaded = load(lm_run)
    state = {k: v for k, v in loaded.state.items() if k not in (*RESERVED_KEYS, "format", "version")}
    save_checkpoint(tmp_path / "bf16", loaded.model.to(torch.bfloat16), state=state, extra=loaded.state["extra"],
                    include_rng=False)
    flags = dict(source=str(tmp_path / "bf16"), data=str(corpus), block_size=16, batch_size=4, eval_every=2,
                 log_every=1, eval_batches=1, ckpt_every=2, schedule="constant", warmup_steps=0,  # lr: not by --steps
                 progress=False, device="cpu", log=quiet)
    api.finetune(out=tmp_path / "straight", steps=4, **flags)
    api.finetune(out=tmp_path / "stopped", steps=2, **flags)
    api.finetune(out=tmp_path / "stopped", resume=True, steps=4, progress=False, log=quiet)
    for run in ("straight", "stopped"):
        assert stored_float_dtype(tmp_path / run / "checkpoints" / "step_00000004" / "model.safetensors") == \
            torch.bfloat16
    losses = [[(r["step"], r["loss"]) for r in read_metrics(tmp_path / run) if "loss" in r]
              for run in ("straight", "stopped")]
    assert losses[0] == losses[1] and [step for step, _ in losses[0]] == [1, 2, 3, 4]


def test_train_lm_resume_refuses_a_translation_run(mt_run, tmp_path):
    with pytest.raises(ValueError, match=r"is not a `train lm` run; continue it with `attnkit train mt --out "):
        api.train_lm(out=_copy(mt_run, tmp_path), resume=True, steps=9, progress=False, log=quiet)


# --- 3, 4. changed options on resume --------------------------------------------------------------------------------

@pytest.mark.parametrize("given, message", [
    (dict(preset="llama-tiny"), r"trained with --preset 'char-small', got 'llama-tiny'"),
    (dict(tokenizer="bpe"), r"trained with --tokenizer 'char', got 'bpe'"),
    (dict(vocab_size=500), r"trained with --vocab-size \d+, got 500"),
])
def test_train_lm_resume_refuses_another_preset_tokenizer_or_vocab_size(lm_run, tmp_path, given, message):
    run = _copy(lm_run, tmp_path)
    with pytest.raises(ValueError, match=message):
        api.train_lm(out=run, resume=True, steps=10, progress=False, log=quiet, **given)
    assert _state(run)["step"] == 5  # nothing was trained


def test_train_lm_resume_accepts_the_runs_own_values(lm_run, tmp_path):
    run = _copy(lm_run, tmp_path)
    size = _state(run)["extra"]["source"]["vocab_size"]
    result = api.train_lm(out=run, resume=True, steps=6, preset="char-small", tokenizer="char", vocab_size=size,
                          progress=False, log=quiet)
    assert result.steps == 6 and _state(run)["extra"]["preset"] == "char-small"


@pytest.mark.parametrize("given, message", [
    (dict(word_dropout=0.5), r"trained with --word-dropout 0.0, got 0.5"),
    (dict(bleu_sentences=2), r"trained with --bleu-sentences 4, got 2"),
    (dict(vocab_size=999), r"trained with --vocab-size 300, got 999"),
    (dict(preset="transformer-base"), r"trained with --preset 'transformer-cpu', got 'transformer-base'"),
    (dict(bleu=False), r"trained with --bleu, got --no-bleu"),
    (dict(max_len=24), r"trained with --max-len 128, got 24"),
    (dict(label_smoothing=0.2), r"trained with --label-smoothing 0.1, got 0.2"),
    (dict(strict=True), r"trained without --strict, got --strict"),
    (dict(max_tokens=128), r"token budget of 256 .*got --max-tokens 128"),
])
def test_train_mt_resume_refuses_changed_options_before_training(mt_run, tmp_path, given, message):
    run = _copy(mt_run, tmp_path)
    rows = (run / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match=message):
        api.train_mt(out=run, resume=True, steps=9, progress=False, log=quiet, **given)
    assert (run / "metrics.jsonl").read_text() == rows and _state(run)["step"] == 3


def test_train_mt_resume_refuses_another_tokenizer_file(mt_run, tmp_path):
    from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
    from attnkit.data.tokenizers.tokenizer import save_tokenizer, tokenizer_from_dict

    run = _copy(mt_run, tmp_path)
    own = save_tokenizer(tokenizer_from_dict(_state(run)["extra"]["tokenizer"]), tmp_path / "own.json")
    other = save_tokenizer(CharTokenizer.train(["abc"]), tmp_path / "other.json")
    with pytest.raises(ValueError, match=r"the run's tokenizer \(in its checkpoint\) differs from the one in "
                                         r"--tokenizer '.*other.json'"):
        api.train_mt(out=run, resume=True, steps=4, tokenizer=str(other), progress=False, log=quiet)
    result = api.train_mt(out=run, resume=True, steps=4, tokenizer=str(own), bleu=True, word_dropout=0.0,
                          preset="transformer-cpu", vocab_size=300, progress=False, log=quiet)
    assert result.steps == 4


# --- 5. --set block_size / max_len, --vocab-size 0, --set vocab_size ----------------------------------------------

@pytest.mark.parametrize("make, message", [
    (lambda: api.TrainLMOptions(overrides={"block_size": 8}),
     r"train lm sets the model's block_size from --block-size .*got --set block_size=8: use --block-size 8"),
    (lambda: api.TrainLMOptions(tokenizer="bpe", vocab_size=0),
     r"--vocab-size must be in \[257 \(256 bytes \+ 1 special token\), 4,194,304\], got 0"),
    (lambda: api.TrainLMOptions(tokenizer="bpe", vocab_size=256),  # was accepted, refused after the data was read
     r"--vocab-size must be in \[257 \(256 bytes \+ 1 special token\), 4,194,304\], got 256"),
    (lambda: api.TrainLMOptions(tokenizer="bpe", vocab_size=99999999999), r"--vocab-size must be in \[257 "),
    (lambda: api.TrainMTOptions(vocab_size=100),
     r"--vocab-size must be in \[260 \(256 bytes \+ 4 special tokens\), 4,194,304\], got 100"),
    (lambda: api.TrainMTOptions(vocab_size=99999999999), r"--vocab-size must be in \[260 "),
    (lambda: api.TrainMTOptions(max_len=1),  # was refused after the BPE was trained, naming max_src_len
     r"^--max-len must be >= 2 \(one token plus <bos>/<eos>\), got 1$"),
    (lambda: api.TrainMTOptions(max_tokens=0), r"^--max-tokens must be >= 2 \(a pair of one token and <eos>\), got 0$"),
    (lambda: api.TrainMTOptions(max_len=2**63),  # was "Python int too large to convert to C long" (no flag named)
     r"^--max-len must be at most 2\*\*31 - 1 = 2,147,483,647 \(torch's index range\), got 9,223,372,036,854,775,808$"),
    (lambda: api.TrainMTOptions(max_tokens=2**31), r"^--max-tokens must be at most 2\*\*31 - 1 = 2,147,483,647 "),
    (lambda: api.TrainMTOptions(max_len=2**31), r"^--max-len must be at most 2\*\*31 - 1 = 2,147,483,647 "),
    (lambda: api.TrainLMOptions(vocab_size=0, resume=True, out="run"),
     r"--vocab-size must be in \[1, 4,194,304\], got 0"),
    (lambda: api.TrainMTOptions(tokenizer="tok.json", vocab_size=500),
     r"--tokenizer 'tok.json' brings its own vocabulary, got --vocab-size 500"),
    (lambda: api.TrainLMOptions(vocab_size=500), r"--tokenizer 'char' brings its own vocabulary, got --vocab-size 500"),
    (lambda: api.TrainLMOptions(tokenizer="gpt2", vocab_size=500), r"--tokenizer 'gpt2' brings its own vocabulary"),
    (lambda: api.TrainMTOptions(overrides={"max_len": 4}),
     r"train mt sets the model's max_len from --max-len .*got --set max_len=4: use --max-len 4"),
    (lambda: api.TrainMTOptions(batch_size=8), r"train mt sizes its batches by --max-tokens .*got batch_size=8"),
])
def test_train_options_refuse_what_the_run_sets_itself(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_train_mt_options_take_max_len_and_max_tokens_up_to_torchs_index_range():
    options_made = api.TrainMTOptions(max_len=2**31 - 1, max_tokens=2**31 - 1)
    assert (options_made.max_len, options_made.max_tokens) == (2**31 - 1, 2**31 - 1)


def test_set_vocab_size_pads_the_vocabulary_but_never_cuts_it(corpus, tmp_path):
    """GPU recipes pad GPT-2's vocabulary to a multiple of 64 with --set vocab_size; below the tokenizer's it is
    refused (ids past the embedding would fail inside torch)."""
    result = api.train_lm(data=str(corpus), out=tmp_path / "pad", steps=2, log=quiet,
                          **{**TINY_LM, "overrides": {**TINY_LM.get("overrides", {}), "vocab_size": 128}})
    assert _state(result.out)["model_config"]["vocab_size"] == 128
    with pytest.raises(ValueError, match=r"--set vocab_size must be >= the tokenizer's \d+ tokens .*got 3"):
        api.train_lm(data=str(corpus), out=tmp_path / "cut", steps=2, log=quiet,
                     **{**TINY_LM, "overrides": {**TINY_LM.get("overrides", {}), "vocab_size": 3}})


def test_train_mt_set_vocab_size_pads_the_vocabulary_but_never_cuts_it(pairs, tmp_path):
    """As train lm's --set vocab_size: below the tokenizer's it is refused before the run folder is made (an id past
    the embedding would fail inside torch at the first step, leaving a run that can be neither resumed nor redone)."""
    small = {**TINY_MT["overrides"], "src_vocab_size": 50, "tgt_vocab_size": 50}
    with pytest.raises(ValueError, match=r"--set src_vocab_size must be >= the tokenizer's \d+ tokens .*got 50"):
        api.train_mt(data=str(pairs), out=tmp_path / "cut", steps=2, log=quiet, **{**TINY_MT, "overrides": small})
    assert not (tmp_path / "cut").exists()
    one = {**TINY_MT["overrides"], "src_vocab_size": 400}  # was: "... got 400 and 2000", the preset's 2000
    with pytest.raises(ValueError, match=r"--set src_vocab_size alone: the source and target share one embedding "
                                         r"\(share_embeddings\), so give src_vocab_size and tgt_vocab_size the same "
                                         r"value, got src_vocab_size=400"):
        api.train_mt(data=str(pairs), out=tmp_path / "one", steps=2, log=quiet, **{**TINY_MT, "overrides": one})
    assert not (tmp_path / "one").exists()


# --- 6. --average-last on resume ------------------------------------------------------------------------------------

def test_average_last_is_recorded_and_reused_by_the_resume_command(pairs, tmp_path):
    out = tmp_path / "run"
    api.train_mt(data=str(pairs), out=out, steps=4, bleu=False, average_last=2, log=quiet,
                 **dict(TINY_MT, ckpt_every=2, eval_every=2))
    for name in ("averaged", "best", "step_00000004"):  # the folder as a run stopped after step 2 left it
        shutil.rmtree(out / "checkpoints" / name)
    assert _state(out)["extra"]["mt_options"]["average_last"] == 2
    lines: list[str] = []
    result = api.train_mt(out=out, resume=True, progress=False, log=lines.append)  # the printed resume command
    assert result.steps == 4 and (out / "checkpoints" / "averaged").is_dir()
    assert any(line.startswith("averaged 2 checkpoints") for line in lines)
    shutil.rmtree(out / "checkpoints" / "averaged")
    lines.clear()
    result = api.train_mt(out=out, resume=True, steps=6, average_last=0, progress=False, log=lines.append)
    assert result.steps == 6 and not (out / "checkpoints" / "averaged").exists()  # 0 turns the run's N off
    assert not any(line.startswith("averaged") for line in lines)
    assert "average_last" not in _state(out)["extra"]["mt_options"]


def test_average_last_above_the_resumed_runs_keep_last_names_what_may_be_given(mt_run, tmp_path):
    run = _copy(mt_run, tmp_path)
    keep = _state(run)["train_config"]["keep_last"]
    with pytest.raises(ValueError, match=rf"the run keeps the last {keep} \(its --keep-last, fixed on resume\); "
                                         rf"resume with --average-last {keep} or less"):
        api.train_mt(out=run, resume=True, steps=6, average_last=keep + 1, progress=False, log=quiet)


# --- 7. a run without an update --------------------------------------------------------------------------------------

def test_done_line_of_a_run_that_made_no_update():
    summary = {"steps": 0, "elapsed": 0.4, "stopped_by": "max_time", "train_loss": None, "valid_loss": 3.5}
    assert options.done_line(summary, "run folder r") == \
        "done: 0 steps in 0 s (max_time); valid loss 3.5000; run folder r"
    summary.update(train_loss=3.25, valid_bleu=1.5)
    assert options.done_line(summary, "x") == ("done: 0 steps in 0 s (max_time); train loss 3.2500, valid loss "
                                               "3.5000, valid BLEU (greedy) 1.50; x")


# --- 8. a small lr alone ----------------------------------------------------------------------------------------------

def test_scaled_min_lr_lowers_the_recipes_min_lr_under_a_given_lr_only():
    recipe = {"lr": 4e-3, "min_lr": 1e-4}
    assert options.scaled_min_lr(recipe, 5e-5, None)["min_lr"] == pytest.approx(5e-6)
    assert options.scaled_min_lr(recipe, 5e-5, 1e-5) is recipe and options.scaled_min_lr(recipe, None, None) is recipe
    assert options.scaled_min_lr(recipe, 1e-2, None)["min_lr"] == 1e-4
    # an --lr above the recipe's min_lr keeps it (commands that ran before keep their schedule); finetune's rule
    # lowers it to a tenth of any --lr given
    assert options.scaled_min_lr(recipe, 6e-4, None) is recipe
    assert options.scaled_min_lr(recipe, 6e-4, None, always=True)["min_lr"] == pytest.approx(6e-5)


def test_train_lm_and_mt_take_an_lr_below_the_recipes_min_lr(corpus, pairs, tmp_path):
    lm = api.train_lm(data=str(corpus), out=tmp_path / "lm", steps=2, lr=5e-5, log=quiet, **TINY_LM)
    assert read_checkpoint_state(lm.out / "checkpoints" / "step_00000002")["train_config"]["min_lr"] == \
        pytest.approx(5e-6)
    mt = api.train_mt(data=str(pairs), out=tmp_path / "mt", steps=2, lr=5e-6, bleu=False, log=quiet, **TINY_MT)
    assert read_checkpoint_state(mt.out / "checkpoints" / "step_00000002")["train_config"]["min_lr"] == \
        pytest.approx(5e-7)


# --- 9. a bad run folder is refused before the data is read ----------------------------------------------------------

def _no_data_work(monkeypatch) -> None:
    """Make reading the data (train lm, finetune) or building the translation task (train mt) fail loudly."""
    from attnkit.data.pipeline import documents, lm_dataset
    from attnkit.training import MTTask

    def boom(*args, **kwargs):
        raise AssertionError("the data was read before the run folder was checked")

    monkeypatch.setattr(lm_dataset, "prepare_lm_data", boom)
    monkeypatch.setattr(documents, "prepare_finetune_data", boom)
    monkeypatch.setattr(MTTask, "from_data", boom)


def _start(command: str, out: Path, lm_run: Path, corpus: Path, pairs: Path):
    if command == "lm":
        return api.train_lm(data=str(corpus), out=out, steps=2, log=quiet, **TINY_LM)
    if command == "mt":
        return api.train_mt(data=str(pairs), out=out, steps=2, bleu=False, log=quiet, **TINY_MT)
    return api.finetune(source=str(lm_run), data=str(corpus), out=out, steps=2, block_size=16, batch_size=4,
                        progress=False, device="cpu", log=quiet)


@pytest.mark.parametrize("command", ["lm", "mt", "finetune"])
@pytest.mark.parametrize("kind, message", [
    ("file", r"out_dir \S+notes.txt exists and is not a folder"),
    ("below a file", r"out_dir \S+notes.txt/run: \S+notes.txt is a file, not a folder"),
    ("run", r"out_dir \S+run already holds a training run; pass --resume \(resume=True\)"),
    ("run without a checkpoint", r"already holds a training run that stopped before its first checkpoint"),
    ("records", r"holds metrics.csv, which a run would overwrite, and no training run"),
])
def test_a_bad_out_is_refused_before_the_data_is_read(lm_run, corpus, pairs, tmp_path, monkeypatch, command, kind,
                                                      message):
    (tmp_path / "notes.txt").write_text("mine\n")
    out = {"file": tmp_path / "notes.txt", "below a file": tmp_path / "notes.txt" / "run"}.get(kind, tmp_path / "run")
    if kind == "run":
        _copy(lm_run, tmp_path)
    elif kind != "file" and kind != "below a file":
        out.mkdir()
        (out / ("run.json" if kind == "run without a checkpoint" else "metrics.csv")).write_text("{}")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    _no_data_work(monkeypatch)
    with pytest.raises(ValueError, match=message):
        _start(command, out, lm_run, corpus, pairs)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_a_setting_a_resume_may_not_change_is_refused_by_its_flag_before_the_data_is_read(lm_run, mt_run, tmp_path,
                                                                                          monkeypatch):
    lm, mt = _copy(lm_run, tmp_path / "lm"), _copy(mt_run, tmp_path / "mt")
    _no_data_work(monkeypatch)
    with pytest.raises(ValueError, match=r"--resume: the run was trained with --batch-size 8, got 4 \(a resumed run "
                                         r"keeps its settings; only --steps, --max-time"):
        api.train_lm(out=lm, resume=True, steps=10, batch_size=4, progress=False, log=quiet)
    with pytest.raises(ValueError, match=r"trained with --grad-accum 1, got 2; --lr .*, got 0.5 \("):
        api.train_mt(out=mt, resume=True, steps=10, grad_accum=2, lr=0.5, progress=False, log=quiet)


# --- 10. a resume with nothing left to train -------------------------------------------------------------------------

def test_resuming_a_run_that_ran_its_steps_is_refused_naming_the_flag_to_raise(lm_run, tmp_path):
    run = _copy(lm_run, tmp_path)
    metrics = (run / "metrics.jsonl").read_text()
    for steps in (None, 5):  # --steps 5 trains nothing either
        with pytest.raises(ValueError, match=r"run already ran its 5 steps \(--steps 5\): nothing to resume; pass "
                                             r"--steps N > 5 \(or --max-time MIN without --steps\) to train more"):
            api.train_lm(out=run, resume=True, steps=steps, progress=False, log=quiet)
    with pytest.raises(ValueError, match=r"cannot resume with --steps 4: \S+run is at step 5 already; pass --steps "
                                         r"N > 5 to train more"):
        api.train_lm(out=run, resume=True, steps=4, progress=False, log=quiet)
    assert (run / "metrics.jsonl").read_text() == metrics  # not even evaluated again
    assert api.train_lm(out=run, resume=True, steps=6, progress=False, log=quiet).steps == 6


def test_a_run_whose_end_is_not_recorded_resumes_to_finish(lm_run, tmp_path):
    run = _copy(lm_run, tmp_path)
    (run / "summary.json").unlink()  # a signal during its last update: a checkpoint at step 5, no summary
    result = api.train_lm(out=run, resume=True, progress=False, log=quiet)
    assert result.steps == 5 and result.summary["stopped_by"] == "steps" and (run / "summary.json").is_file()


def test_a_timed_run_whose_last_checkpoint_was_written_before_its_time_ran_out_is_spent_too(corpus, tmp_path):
    """Was: when --ckpt-every wrote the last step's checkpoint just before the clock passed --max-time, the run
    ended without another checkpoint, whose ``elapsed`` (below the budget) let a resume train on (a flaky test
    below, under load): a run its clock stopped at this step has used at least its own budget."""
    import json

    from attnkit.checkpoints.checkpoint import latest_checkpoint

    timed = api.train_lm(data=str(corpus), out=tmp_path / "timed", max_time=0.002, log=quiet, **TINY_LM)
    assert timed.summary["stopped_by"] == "max_time"
    state_file = latest_checkpoint(timed.out / "checkpoints") / "state.json"
    state = json.loads(state_file.read_text())
    assert state["step"] == timed.steps
    state_file.write_text(json.dumps(dict(state, elapsed=0.9 * 0.002 * 60)))  # as saved before the clock ran out
    with pytest.raises(ValueError, match=r"timed already used its time budget \(--max-time 0.002: "):
        api.train_lm(out=timed.out, resume=True, progress=False, log=quiet)


@pytest.mark.parametrize("summary, refused", [
    ({"steps": 10, "stopped_by": "max_time"}, True),  # its clock passed its own budget of 30 s at this step
    ({"steps": 9, "stopped_by": "max_time"}, False),  # the end of another step: not this checkpoint's
    ({"steps": 10, "stopped_by": "steps"}, False),
    ("[10, 61.0]", False),  # not an object
    ("{not json", False),
    ("\udcff", False),  # not UTF-8
])
def test_refuse_spent_resume_counts_the_runs_own_budget_when_its_clock_stopped_it_at_this_step(tmp_path, summary,
                                                                                                refused):
    from types import SimpleNamespace

    cfg = SimpleNamespace(steps=None, max_time=0.5, max_time_s=30.0, stop_at_loss=None)
    text = summary if isinstance(summary, str) else json.dumps(summary)
    (tmp_path / "summary.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    saved = {"step": 10, "elapsed": 29.5, "train_config": {"max_time": 0.5}}
    if refused:
        with pytest.raises(ValueError, match=r"already used its time budget \(--max-time 0.5: 30.0 s of training"):
            options.refuse_spent_resume(tmp_path, saved, cfg)
    else:
        options.refuse_spent_resume(tmp_path, saved, cfg)


def test_refuse_spent_resume_lets_a_larger_budget_resume_and_reads_no_budget_it_cannot(tmp_path, monkeypatch):
    """The end's time after the stop (the final evaluation, the tables) is not counted: a resume with a larger
    --max-time trains on (was refused in the docs' example when the first run's final evaluation was slow)."""
    from types import SimpleNamespace

    from attnkit.data import json_files

    (tmp_path / "summary.json").write_text(json.dumps({"steps": 10, "stopped_by": "max_time", "elapsed": 36.0}))
    larger = SimpleNamespace(steps=None, max_time=0.55, max_time_s=33.0, stop_at_loss=None)
    options.refuse_spent_resume(tmp_path, {"step": 10, "elapsed": 29.5, "train_config": {"max_time": 0.5}}, larger)
    same = SimpleNamespace(steps=None, max_time=0.5, max_time_s=30.0, stop_at_loss=None)
    for train_config in ({}, {"max_time": None}, {"max_time": "0.5"}):  # no budget to read: the checkpoint's time
        options.refuse_spent_resume(tmp_path, {"step": 10, "elapsed": 29.5, "train_config": train_config}, same)

    def unreadable(path, make_error):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(json_files, "read_json_file", unreadable)
    options.refuse_spent_resume(tmp_path, {"step": 10, "elapsed": 29.5, "train_config": {"max_time": 0.5}}, same)


def test_resuming_a_run_that_used_its_time_or_reached_its_target_is_refused(corpus, tmp_path):
    timed = api.train_lm(data=str(corpus), out=tmp_path / "timed", max_time=0.002, log=quiet, **TINY_LM)
    assert timed.summary["stopped_by"] == "max_time"
    for steps in (None, 1000):  # --steps alone keeps the time budget
        with pytest.raises(ValueError, match=r"timed already used its time budget \(--max-time 0.002: [\d.]+ s of "
                                             r"training, \d+ steps\): nothing to resume; pass a larger --max-time"):
            api.train_lm(out=timed.out, resume=True, steps=steps, progress=False, log=quiet)
    more = api.train_lm(out=timed.out, resume=True, max_time=10, steps=timed.steps + 2, progress=False, log=quiet)
    assert more.steps == timed.steps + 2
    target = api.train_lm(data=str(corpus), out=tmp_path / "target", steps=30, stop_at_loss=100.0, log=quiet,
                          **TINY_LM)
    assert target.summary["stopped_by"] == "target" and target.steps == 10
    with pytest.raises(ValueError, match=r"target already reached its target \(--stop-at-loss 100\) at step 10: "
                                         r"nothing to resume; pass a lower --stop-at-loss"):
        api.train_lm(out=target.out, resume=True, progress=False, log=quiet)
    assert api.train_lm(out=target.out, resume=True, stop_at_loss=0.0, progress=False, log=quiet).steps == 30


def test_train_mt_resumes_a_spent_run_only_to_finish_its_scores_or_averaging(mt_run, tmp_path):
    run = _copy(mt_run, tmp_path)
    with pytest.raises(ValueError, match=r"run already ran its 3 steps \(--steps 3\): nothing to resume"):
        api.train_mt(out=run, resume=True, progress=False, log=quiet)
    summary = json.loads((run / "summary.json").read_text())
    del summary["final_valid"]  # stopped while scoring best/ on the whole validation set
    (run / "summary.json").write_text(json.dumps(summary))
    result = api.train_mt(out=run, resume=True, progress=False, log=quiet)
    assert result.steps == 3 and "final_valid" in json.loads((run / "summary.json").read_text())
    lines: list[str] = []  # an N to average that the run has not averaged: averaging is left to do
    assert api.train_mt(out=run, resume=True, average_last=1, progress=False, log=lines.append).steps == 3
    assert any(line.startswith("averaged 1 checkpoints") for line in lines)
    with pytest.raises(ValueError, match=r"already ran its 3 steps"):  # done now
        api.train_mt(out=run, resume=True, progress=False, log=quiet)
