"""``attnkit.api``: every run as a function. A tiny LM and MT run from Python, resume from Python, the other
runs (evaluate, translate, sample, trace, viz, data, params), and the errors, with nothing on stdout.

Axis legend: none (runs and files only).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnkit import api
from attnkit.checkpoints import load

TINY_LM = dict(preset="char-small", overrides={"n_layer": 1, "n_head": 2, "n_embd": 32}, block_size=16,
               batch_size=8, warmup_steps=2, eval_every=10, eval_batches=2, ckpt_every=5, log_every=5,
               progress=False)
TINY_MT = dict(preset="transformer-cpu", overrides={"d_model": 32, "num_heads": 2, "dim_feedforward": 64,
                                                    "num_encoder_layers": 1, "num_decoder_layers": 1},
               vocab_size=300, max_tokens=256, eval_every=10, eval_batches=2, ckpt_every=5, log_every=5,
               bleu_sentences=8, progress=False)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory, make_copy_task) -> Path:
    """A prepared translation folder (train/valid/test.tsv) of letter sequences and their upper-cased copies."""
    return make_copy_task(tmp_path_factory.mktemp("pairs") / "copy", sizes=(("train", 400), ("valid", 20),
                                                                             ("test", 20)))


@pytest.fixture(scope="module")
def lm_run(corpus, tmp_path_factory) -> api.RunResult:
    out = tmp_path_factory.mktemp("lm") / "run"
    return api.train_lm(api.TrainLMOptions(data=str(corpus), out=out, steps=10, **TINY_LM), log=lambda line: None)


def test_train_lm_returns_the_run_folder_and_its_summary(lm_run):
    assert lm_run.out.is_dir() and (lm_run.out / "summary.json").is_file()
    assert lm_run.steps == 10 and lm_run.summary == json.loads((lm_run.out / "summary.json").read_text())
    assert lm_run.valid_loss is not None and lm_run.best_checkpoint == lm_run.out / "checkpoints" / "best"
    loaded = load(lm_run.out)
    assert loaded.state["extra"]["kind"] == "lm" and loaded.model.config.n_layer == 1


def test_train_lm_logs_through_the_given_function(corpus, tmp_path, capsys):
    lines: list[str] = []
    api.train_lm(data=str(corpus), out=tmp_path / "run", steps=2, log=lines.append, **{**TINY_LM, "eval_every": 2})
    assert any(line.startswith("data ") for line in lines) and lines[-1].startswith("done: 2 steps")
    assert any(line.startswith("step 2: valid_loss") for line in lines)  # the evaluation lines too, not stdout
    assert capsys.readouterr().out == ""


def test_resume_from_python_equals_the_uninterrupted_run(corpus, tmp_path):
    straight = api.train_lm(data=str(corpus), out=tmp_path / "straight", steps=10, log=lambda s: None, **TINY_LM)
    # the same run stopped after step 5: its folder as it was then (the step-5 checkpoint, no later files)
    cut = tmp_path / "resumed"
    shutil.copytree(straight.out, cut)
    shutil.rmtree(cut / "checkpoints" / "step_00000010")
    shutil.rmtree(cut / "checkpoints" / "best")
    resumed = api.train_lm(out=cut, resume=True, progress=False, log=lambda s: None)
    assert resumed.steps == 10 and resumed.summary["train_loss"] == straight.summary["train_loss"]
    a = load(straight.out / "checkpoints" / "step_00000010").model.state_dict()
    b = load(resumed.out / "checkpoints" / "step_00000010").model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_evaluate_lm_and_sample(lm_run, corpus, tmp_path):
    result = api.evaluate_lm(ckpt=lm_run.out, data=str(corpus), json=tmp_path / "eval.json")
    assert result.path == tmp_path / "eval.json" and json.loads(result.path.read_text()) == result.metrics
    assert result.metrics["ppl"] == pytest.approx(2.718281828459045 ** result.metrics["loss"])
    texts = api.sample(ckpt=lm_run.out, prompt="ROMEO:", max_new_tokens=8, seed=1, num_samples=2)
    assert len(texts) == 2 and all(t.startswith("ROMEO:") for t in texts)
    assert api.sample(ckpt=lm_run.out, prompt="ROMEO:", max_new_tokens=8, seed=1)[0] == texts[0]
    sampler = api.Sampler(ckpt=lm_run.out, prompt="ROMEO:", max_new_tokens=8, seed=1)
    assert sampler.sample(1) == texts[1]  # sample i is drawn with seed + i
    with pytest.raises(ValueError, match=r"index must be an int >= 0, got '1' \(str\)"):
        sampler.sample("1")
    short = tmp_path / "short.txt"  # its valid part is far shorter than a window of the model
    short.write_text(corpus.read_text()[:200])
    with pytest.raises(ValueError, match=r"the valid split of '.*short.txt' \(a text file's last 10%\) has \d+ tokens, "
                                         r"but this model reads windows of 16 \(the block size the model was trained "
                                         r"with\) and needs at least 17: give more text"):
        api.evaluate_lm(ckpt=lm_run.out, data=str(short), json=tmp_path / "short.json")


def test_evaluate_refuses_outputs_that_would_overwrite_the_data_the_run_or_a_users_file(lm_run, corpus, tmp_path):
    before = corpus.read_bytes()
    with pytest.raises(ValueError, match=r"--json .* is \(or is inside\) the data being scored"):
        api.evaluate_lm(ckpt=lm_run.out, data=str(corpus), json=corpus)
    state = lm_run.out / "checkpoints" / "best" / "state.json"
    state_before = state.read_bytes()
    for victim in (state, lm_run.out / "summary.json"):
        with pytest.raises(ValueError, match=r"is a file of a training run; give a new file name"):
            api.evaluate_lm(ckpt=lm_run.out, data=str(corpus), json=victim)
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}\n')
    with pytest.raises(ValueError, match=r"exists and is not a file this command wrote \(an evaluation record\)"):
        api.evaluate_lm(ckpt=lm_run.out, data=str(corpus), json=notes)
    assert corpus.read_bytes() == before and state.read_bytes() == state_before and notes.read_text() == '{"mine": 1}\n'
    for _ in range(2):  # an earlier record is replaced
        result = api.evaluate_lm(ckpt=lm_run.out, data=str(corpus), json=tmp_path / "e.json", max_batches=1)
        assert result.path.is_file() and result.metrics["step"] == 10


def test_train_mt_translate_and_evaluate(pairs, tmp_path, monkeypatch):
    run = api.train_mt(data=str(pairs), out=tmp_path / "mt", steps=10, log=lambda s: None, **TINY_MT)
    assert run.summary["final_valid"]["sentences"] == 20 and load(run.out).state["extra"]["kind"] == "mt"
    hyps = api.translate(["a b c", "", "d e"], ckpt=run.out, beam=2)
    assert len(hyps) == 3 and hyps[1] == ""
    translator = api.Translator(ckpt=run.out, beam=1, batch_size=2)
    batches = list(translator.stream(["a b", "c d", "e f"]))
    assert [len(b) for b in batches] == [2, 1] and translator.n_lines == 3
    with pytest.raises(ValueError, match=r"line 2 to translate must be a str, got bytes b'c d'"):
        api.translate(["a b", b"c d"], ckpt=run.out)
    with pytest.raises(ValueError, match=r"batch_size must be an int >= 1, got 2.5 \(float\)"):
        list(translator.stream(["a b"], batch_size=2.5))
    with pytest.raises(ValueError, match=r"got one string 'a b'; wrap it in a list"):  # not one line per character
        translator.translate("a b")
    assert translator.n_lines == 3
    terminal = io.StringIO()
    terminal.isatty = lambda: True  # a terminal's stderr: a bar of the sentences by default, erased when done
    monkeypatch.setattr(sys, "stderr", terminal)
    scores = api.evaluate_mt(ckpt=run.out, data=str(pairs), split="test", beam=1, hyps=tmp_path / "hyps.txt")
    assert "translating" in terminal.getvalue() and "/20" in terminal.getvalue() and "\n" not in terminal.getvalue()
    terminal.seek(0)
    terminal.truncate()
    api.evaluate_mt(ckpt=run.out, data=str(pairs), split="test", beam=1, json=tmp_path / "quiet.json", progress=False)
    assert terminal.getvalue() == ""
    assert scores.metrics["sentences"] == 20 and 0.0 <= scores.metrics["bleu"] <= 100.0
    assert len((tmp_path / "hyps.txt").read_text().splitlines()) == 20
    new = tmp_path / "new" / "folder" / "hyps.txt"  # was: the record was written, then the translations failed
    record = api.evaluate_mt(ckpt=run.out, data=str(pairs), split="test", beam=1, hyps=new, json=tmp_path / "n.json")
    assert len(new.read_text().splitlines()) == 20 and json.loads(record.path.read_text())["hyps"] == str(new.resolve())
    test_tsv = (pairs / "test.tsv").read_bytes()
    with pytest.raises(ValueError, match=r"--hyps .* is \(or is inside\) the data being scored"):
        api.evaluate_mt(ckpt=run.out, data=str(pairs), beam=1, hyps=pairs / "test.tsv")
    with pytest.raises(ValueError, match=r"--json and --hyps name the same file"):
        api.evaluate_mt(ckpt=run.out, data=str(pairs), beam=1, hyps=tmp_path / "x", json=tmp_path / "x")
    default = run.out / "checkpoints" / "best" / f"eval_mt_{pairs.name}_test.json"  # the --json left unset
    with pytest.raises(ValueError, match=r"--json and --hyps name the same file"):
        api.evaluate_mt(ckpt=run.out, data=str(pairs), beam=1, hyps=default)
    src, tgt = tmp_path / "t.de", tmp_path / "t.en"  # two files: both stems (was eval_mt_t.json, the last alone)
    src.write_text("haus\n"), tgt.write_text("house\n")
    with pytest.raises(ValueError, match=r"--json and --hyps name the same file"):
        api.evaluate_mt(ckpt=run.out, data=f"{src},{tgt}", beam=1, hyps=default.with_name("eval_mt_t_t.json"))
    linked = tmp_path / "linked.txt"  # was: a hard link to the references (one line, no tab) was taken as earlier
    os.link(tgt, linked)              # translations and replaced
    with pytest.raises(ValueError, match=r"--hyps .*linked.txt' is \(or is inside\) the data being scored"):
        api.evaluate_mt(ckpt=run.out, data=f"{src},{tgt}", beam=1, hyps=linked, json=tmp_path / "l.json")
    assert linked.samefile(tgt) and tgt.read_text() == "house\n" and not (tmp_path / "l.json").exists()
    assert (pairs / "test.tsv").read_bytes() == test_tsv
    mine = tmp_path / "mine.txt"
    mine.write_text("keep me\n")
    with pytest.raises(ValueError, match=r"--hyps .*mine.txt' exists and is not a file this command wrote"):
        api.evaluate_mt(ckpt=run.out, data=str(pairs), beam=1, hyps=mine, json=tmp_path / "r.json")
    assert mine.read_text() == "keep me\n"
    for json_path in (tmp_path / "r.json", None, tmp_path / "r.json"):  # a rerun replaces its translations, also
        record = api.evaluate_mt(ckpt=run.out, data=str(pairs), beam=1, hyps=tmp_path / "h.txt",  # after one
                                 json=json_path).metrics                                          # elsewhere
    assert record["hyps"] == str((tmp_path / "h.txt").resolve()) and record["step"] == 10
    assert record["checkpoint"] == str(run.out / "checkpoints" / "best")


def test_trace_viz_params_and_data(lm_run, tmp_path):
    torch.manual_seed(123)
    traced = api.trace_model(api.TracePreset(preset="char-small", batch=1, length=5))
    after = torch.rand(1)
    torch.manual_seed(123)
    assert torch.equal(after, torch.rand(1))  # the caller's random stream is not reseeded
    assert "blocks.0.attn" in traced.format(1) or "blocks" in traced.format(1)
    png = api.draw_attention(api.ModelText(ckpt=lm_run.out, text="ROMEO:"), out=tmp_path / "a.png",
                             log=lambda s: None)
    assert png.is_file() and png.stat().st_size > 1000
    assert api.draw_mask(tmp_path / "m.png", kind="causal", length=4).is_file()
    assert "124,439,808" in api.parameter_table("gpt2")
    assert {r.name for r in api.data_recipes()} >= {"shakespeare", "fortunes", "de-en"}


@pytest.mark.parametrize("make, message", [
    (lambda: api.TrainLMOptions(steps="10"), r"TrainLMOptions.steps must be an int or None, got '10' \(str\)"),
    (lambda: api.TrainLMOptions(autocast="fp8"), r"autocast must be one of bf16, fp16, off or None, got 'fp8'"),
    (lambda: api.TrainMTOptions(average_last=-1), r"--average-last must be >= 0, got -1"),
    (lambda: api.TrainLMOptions(overrides={1: 2}),
     r"TrainLMOptions.overrides must map model config field names \(str\) to values, got the key 1 \(int\)"),
    # an empty string read as not given: finetune(out="") trained into the working directory, data="" on shakespeare
    (lambda: api.FinetuneOptions(out=""), r"FinetuneOptions.out must not be empty, got '' \(None: the default\)"),
    (lambda: api.TrainLMOptions(data=" "), r"TrainLMOptions.data must not be empty, got ' '"),
    (lambda: api.TrainMTOptions(device=""), r"TrainMTOptions.device must not be empty, got ''"),
    (lambda: api.FinetuneOptions(lora=True, lora_targets=[]), r"--lora-targets must name at least one module"),
    (lambda: api.FinetuneOptions(preset="gpt2"), r"finetune takes the architecture from --from; --preset does not"),
    (lambda: api.FinetuneOptions(overrides={"n_layer": 3}), r"finetune can only --set dropout .*got \['n_layer'\]"),
    (lambda: api.TranslateOptions(ckpt="x", beam=0), r"--beam must be >= 1, got 0"),
    (lambda: api.TranslateOptions(ckpt="x", length_penalty=1e308), r"--length-penalty must be in \[-10, 10\]"),
    (lambda: api.EvalMTOptions(ckpt="x", max_len_a=1e308), r"--max-len-a must be at most 1e6, got 1e\+308"),
    (lambda: api.SampleOptions(), r"exactly one of ckpt .* and model"),
    (lambda: api.SampleOptions(ckpt=""), r"exactly one of ckpt .* and model .*got ckpt='', model=None"),
    (lambda: api.ModelText(ckpt="", text="a"), r"exactly one of ckpt .* and model .*got ckpt='', model=None"),
    (lambda: api.EvalLMOptions(ckpt="x"), r"evaluate_lm needs data"),
    (lambda: api.EvalLMOptions(data="x"), r"evaluate_lm needs exactly one of ckpt .* and model .*got ckpt=None"),
    (lambda: api.EvalLMOptions(ckpt="x", model="y", data="x"), r"evaluate_lm needs exactly one of ckpt"),
    (lambda: api.EvalLMOptions(ckpt="x", data="x", block_size=-1), r"--block-size must be an int from 1 .*got -1"),
    (lambda: api.EvalMTOptions(ckpt="x", data=""), r"--data must name the pairs to score .*got ''"),
])
def test_bad_options_are_refused_when_made(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("position", ["learned", "rope"])
def test_a_text_longer_than_the_models_context(position):
    """viz and trace read ``--text`` whole: past ``block_size`` learned positions have no embedding (a clear refusal,
    not "sequence length must be <= block_size ... (cached 0 + new 300)"), other models get a note."""
    from types import SimpleNamespace

    from attnkit.api.inputs import lm_ids

    loaded = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(block_size=8, position=position)),
                             encode_prompt=lambda text: list(range(len(text))))
    notes: list[str] = []
    assert lm_ids(api.ModelText(ckpt="x", text="a" * 8), loaded, notes.append) == list(range(8)) and notes == []
    if position == "learned":
        with pytest.raises(ValueError, match=r"^--text is 9 tokens, but this model \(learned positions\) reads at "
                                             r"most 8: give a shorter text$"):
            lm_ids(api.ModelText(ckpt="x", text="a" * 9), loaded, notes.append)
    else:
        assert len(lm_ids(api.ModelText(ckpt="x", text="a" * 9), loaded, notes.append)) == 9
        assert notes == ["note: --text is 9 tokens, longer than the model's context of 8: what it shows past token 8 "
                         "is the model read beyond what it was trained on"]


def test_a_path_is_taken_where_a_file_name_is():
    """``data``, ``source``, ``tokenizer`` and the other fields that name a file or a recipe are typed ``str`` (a
    recipe name, or ``SRC,TGT`` files) but take a ``pathlib.Path`` as a notebook gives it, kept as its str."""
    from pathlib import Path

    assert api.TrainLMOptions(data=Path("corpus.txt"), tokenizer=Path("tok.json")).data == "corpus.txt"
    assert api.FinetuneOptions(source=Path("hf")).source == "hf"
    assert api.TrainMTOptions(data=Path("pairs.tsv"), valid=Path("v.tsv")).valid == "v.tsv"
    assert api.EvalLMOptions(ckpt="x", data=Path("corpus.txt")).data == "corpus.txt"
    with pytest.raises(ValueError, match=r"TrainLMOptions.data must be a string or None, got 3 \(int\)"):
        api.TrainLMOptions(data=3)


def test_errors_come_before_any_work(corpus, tmp_path):
    with pytest.raises(ValueError, match=r"--resume needs --out"):
        api.train_lm(resume=True)
    with pytest.raises(ValueError, match=r"unknown preset|no-such-preset"):
        api.train_lm(data=str(tmp_path / "missing.txt"), preset="no-such-preset", out=tmp_path / "x")
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="train lm needs a decoder-only"):
        api.train_lm(data=str(corpus), preset="transformer-small", out=tmp_path / "y")
    with pytest.raises(FileNotFoundError):
        api.translate(["a"], ckpt=tmp_path / "nowhere")
    with pytest.raises(ValueError, match="one string"):
        api.translate("a b", ckpt=tmp_path / "nowhere")


def test_an_existing_run_is_never_overwritten(lm_run, corpus):
    before = (lm_run.out / "summary.json").read_bytes()
    with pytest.raises(ValueError, match="resume"):
        api.train_lm(data=str(corpus), out=lm_run.out, steps=2, log=lambda s: None, **TINY_LM)
    assert (lm_run.out / "summary.json").read_bytes() == before


def test_importing_the_api_imports_no_torch():
    code = "import sys, attnkit.api; assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_options_are_checked_against_their_annotations_and_made_from_keywords():
    from attnkit.api.options import field_kind

    assert [field_kind(a) for a in ("int | None", "str | Path", "list[str] | None", "dict[str, Any]", "bool")] == \
        ["int?", "path", "strs?", "dict", "bool"]
    base = api.TrainLMOptions(steps=3)
    assert api.TrainLMOptions.make(base, {"max_time": 1.5}) == api.TrainLMOptions(steps=3, max_time=1.5)
    assert api.TrainLMOptions.make(None, {"steps": 4}).steps == 4
    with pytest.raises(ValueError, match="expected TrainLMOptions, got TrainMTOptions"):
        api.TrainLMOptions.make(api.TrainMTOptions(), {})
    with pytest.raises(ValueError, match=r"TrainMTOptions.overrides must be a dict, got \['n_layer=2'\]"):
        api.TrainMTOptions(overrides=["n_layer=2"])
    with pytest.raises(ValueError, match=r"TrainLMOptions has no field 'stpes'; did you mean 'steps'\?"):
        api.train_lm(stpes=3)
    with pytest.raises(ValueError, match=r"SampleOptions has no field 'bogus'; its fields: device, autocast, ckpt, "):
        api.SampleOptions.make(api.SampleOptions(ckpt="x"), {"bogus": 1})


def test_a_misspelt_field_made_directly_is_a_value_error_too():
    """The README: "Options are checked when made (a wrong type, a misspelt field: ValueError)" -- also when the
    dataclass is made directly (it was the dataclass's own TypeError); copies and replace() still work."""
    import copy
    import pickle

    with pytest.raises(ValueError, match=r"TrainLMOptions has no field 'stpes'; did you mean 'steps'\?"):
        api.TrainLMOptions(stpes=3)
    with pytest.raises(ValueError, match=r"TranslateOptions has no field 'sentences'; its fields: "):
        api.TranslateOptions(sentences=["a"])
    made = api.TrainLMOptions(steps=3, overrides={"n_layer": 1})
    assert copy.deepcopy(made) == made == pickle.loads(pickle.dumps(made)) and made.replace(steps=4).steps == 4


def test_log_stream_and_lines_of_the_wrong_kind_are_value_errors_before_any_work(corpus, tmp_path):
    """``log=False`` (or a str), ``stream="out.txt"`` and ``translate(5)`` raised TypeError / AttributeError
    mid-run (``train_lm``: after the data was read; ``sample``: only when a note was logged); now ValueError first."""
    with pytest.raises(ValueError, match=r"log must be a function .* got False \(bool\)"):
        api.train_lm(data=str(corpus), out=tmp_path / "run", steps=2, log=False, **TINY_LM)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match=r"log must be a function .* got 'quiet' \(str\)"):
        api.sample(ckpt=tmp_path / "nowhere", log="quiet")
    with pytest.raises(ValueError, match=r"stream must be a text stream .* got 'out.txt' \(str\)"):
        api.sample(ckpt=tmp_path / "nowhere", stream="out.txt")
    with pytest.raises(ValueError, match=r"lines to translate must be an iterable of strings .* got int 5"):
        api.translate(5, ckpt=tmp_path / "nowhere")


def test_evaluate_mt_scores_a_reversed_run_the_other_way_round(pairs, tmp_path, monkeypatch):
    import attnkit.training.bleu as bleu

    run = api.train_mt(data=str(pairs), out=tmp_path / "rev", steps=4, reverse=True, log=lambda s: None, **TINY_MT)
    seen = {}
    real = bleu.score_translations
    monkeypatch.setattr(bleu, "score_translations",
                        lambda hyps, refs: seen.setdefault("refs", refs) and real(hyps, refs))
    scores = api.evaluate_mt(ckpt=run.out, data=str(pairs), split="test", beam=1)
    assert scores.metrics["reverse"] is True and scores.metrics["sentences"] == 20
    # the references are the source side of test.tsv (lower case; the targets are upper case)
    assert seen["refs"] == [line.split("\t")[0] for line in (pairs / "test.tsv").read_text().splitlines()]


def test_a_named_recipe_fills_the_fields_left_unset(corpus, tmp_path):
    """``recipe=`` (``--recipe``): the recipe's values where nothing was given, the given ones where they were, its
    model overrides under the given ones; a run made with it trains with those values."""
    from attnkit.recipes import LM_RECIPES

    recipe = LM_RECIPES["shakespeare-char-gpu"]
    got = api.TrainLMOptions(recipe="shakespeare-char-gpu", lr=1e-3, overrides={"n_layer": 1}).with_recipe()
    assert (got.lr, got.min_lr, got.schedule_steps, got.stop_at_loss, got.cuda_graphs, got.batch_size) == \
        (1e-3, recipe["min_lr"], 2000, 1.47, True, 64)
    assert got.overrides == dict(recipe["overrides"], n_layer=1) and got.data == "shakespeare"
    assert api.TrainLMOptions(steps=3).with_recipe() == api.TrainLMOptions(steps=3)  # no recipe: unchanged
    with pytest.raises(ValueError, match="TrainLMOptions.recipe must be one of shakespeare-char-gpu, got 'fast'"):
        api.TrainLMOptions(recipe="fast")
    with pytest.raises(ValueError, match="recipe starts a run; resume=True continues one"):
        api.TrainLMOptions(recipe="shakespeare-char-gpu", resume=True, out=tmp_path / "r")
    with pytest.raises(ValueError, match="--cuda-graphs needs a CUDA device"):  # the recipe is for a GPU
        api.train_lm(recipe="shakespeare-char-gpu", device="cpu", data=str(corpus), out=tmp_path / "gpu")
    assert not (tmp_path / "gpu").exists()
    # on the CPU, with the GPU's settings and the model's size given: a short run of the recipe
    run = api.train_lm(recipe="shakespeare-char-gpu", device="cpu", cuda_graphs=False, autocast="off",
                       data=str(corpus), out=tmp_path / "cpu", steps=3, batch_size=4, block_size=32,
                       overrides={"n_layer": 1, "n_head": 2, "n_embd": 32}, progress=False, log=lambda s: None)
    from attnkit.checkpoints.runs import read_saved_run

    saved = read_saved_run(run.out)
    assert run.summary["steps"] == 3 and {k: saved["train_config"][k] for k in (
        "lr", "min_lr", "warmup_steps", "schedule_steps", "eval_every", "eval_batches", "stop_at_loss")} == \
        {k: recipe[k] for k in ("lr", "min_lr", "warmup_steps", "schedule_steps", "eval_every", "eval_batches",
                                "stop_at_loss")}
    model = load(run.out).model.config
    assert (model.n_layer, model.n_embd, model.dropout, model.bias) == (1, 32, 0.2, False)


def test_prepared_data_summary_shows_a_package_list_as_its_length(tmp_path):
    prepared = api.PreparedData("de-en", tmp_path, {"packages": [{"name": "a"}, {"name": "b"}], "version": "1",
                                                    "license": "MIT", "other": 1}, [])
    assert prepared.summary() == {"packages": f"2 (listed in {tmp_path / 'SOURCE.json'})", "version": '"1"',
                                  "license": '"MIT"'}


@pytest.mark.parametrize("force", ["no", 0, None])
def test_prepare_data_refuses_a_force_that_is_not_a_bool(force, monkeypatch):
    from attnkit.data.corpora import registry

    def prepare(name, *, force=False):  # force="no" was truthy: the cached recipe was fetched and built again
        raise AssertionError(f"prepared {name} with force={force!r}")

    monkeypatch.setattr(registry, "prepare", prepare)
    with pytest.raises(ValueError, match=rf"force must be a bool, got {force!r}"):
        api.prepare_data("shakespeare", force=force)


@pytest.mark.parametrize("batch, world, shown", [(8, 1, "8 per process x 1 process"), (8, 2, "4 per process x 2 "),
                                                 (8, 3, "3 + 3 + 2 per process x 3 processes")])
def test_the_batch_line_shows_each_process_share(batch, world, shown, monkeypatch):
    """Was: "global batch 8 = 2.6666666666666665 per process x 3 processes" (rows are whole: split_batch gives the
    first ranks one more)."""
    from types import SimpleNamespace

    import attnkit.api.lm_training as lm_training

    monkeypatch.setattr(lm_training, "world_size", lambda: world)
    line = lm_training.describe_batch(SimpleNamespace(batch_size=batch, grad_accum=2, fsdp=False))
    tail = f"x 2 accumulation = {2 * batch} per update" + ("; DDP" if world > 1 else "")
    assert line.startswith(f"global batch {batch} = {shown}") and line.endswith(tail), line
