"""``attnkit viz ...`` end to end, in-process: every figure writes a valid PNG and prints its path; --help;
bad input gives exit code 2 and one clear line on stderr."""

from __future__ import annotations

import pytest

from attnkit.cli.main import main

LOW_DPI = ["--dpi", "40"]  # small PNGs: the tests check files and numbers, not looks


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["viz", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _draws(capsys, is_png, path, *argv: str) -> str:
    """``attnkit viz ARGV --out PATH`` (low dpi) exits 0, prints the path and writes a PNG there; returns stderr."""
    code, out, err = _run(capsys, *argv, "--out", str(path), *LOW_DPI)
    assert code == 0 and out.strip() == str(path)
    is_png(path)
    return err


@pytest.mark.parametrize("figure", ["positions", "mask", "attention", "predict", "params"])
def test_help(figure, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["viz", figure, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: attnkit viz {figure}") and "--out" in out and "--dpi" in out


def test_viz_lists_its_figures(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["viz", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for figure in ("positions", "mask", "attention", "predict", "params"):
        assert figure in out


def test_positions(tmp_path, capsys, is_png):
    _draws(capsys, is_png, tmp_path / "figs" / "pe.png", "positions", "--dim", "32", "--len", "40",
           "--dims", "0,1,9")


@pytest.mark.parametrize("args", [
    ["--kind", "causal", "--len", "4", "--key-len", "7"],
    ["--kind", "banded", "--len", "8", "--masked-len", "3"],
    ["--kind", "padding", "--lengths", "5,3,7"],
])
def test_mask(args, tmp_path, capsys, is_png):
    _draws(capsys, is_png, tmp_path / "mask.png", "mask", *args)


def test_params(tmp_path, capsys, is_png):
    _draws(capsys, is_png, tmp_path / "params.png", "params", "llama-tiny")


def test_attention_of_a_language_model_checkpoint(lm_checkpoint, tmp_path, capsys, is_png):
    _draws(capsys, is_png, tmp_path / "attn.png", "attention", "--ckpt", str(lm_checkpoint), "--text", "ROMEO: hi",
           "--layer", "0")


def test_attention_one_head(lm_checkpoint, tmp_path, capsys, is_png):
    _draws(capsys, is_png, tmp_path / "head.png", "attention", "--ckpt", str(lm_checkpoint), "--text", "to be",
           "--head", "3")


@pytest.mark.parametrize("kind", ["cross", "encoder"])
def test_attention_of_a_translation_checkpoint(kind, mt_checkpoint, tmp_path, capsys, is_png):
    err = _draws(capsys, is_png, tmp_path / f"{kind}.png", "attention", "--ckpt", str(mt_checkpoint),
                 "--src", "das haus ist gross", "--tgt", "the house", "--attn", kind)
    assert "translation" not in err


def test_attention_of_the_greedy_translation(mt_checkpoint, tmp_path, capsys, is_png):
    err = _draws(capsys, is_png, tmp_path / "dec.png", "attention", "--ckpt", str(mt_checkpoint), "--src", "der hund",
                 "--attn", "decoder")
    assert "translation (greedy):" in err  # the decoder input it drew is reported, on stderr


def test_predict(lm_checkpoint, tmp_path, capsys, is_png):
    _draws(capsys, is_png, tmp_path / "pred.png", "predict", "--ckpt", str(lm_checkpoint), "--text", "romeo",
           "--top-k", "3")


# --------------------------------------------------------------------------- bad input
def test_attention_top_k_without_html_is_refused(lm_checkpoint, tmp_path, capsys):
    """Was: ignored (the PNG shows no candidates), so a user asking for them got a figure without them."""
    code, out, err = _run(capsys, "attention", "--ckpt", str(lm_checkpoint), "--text", "hi", "--top-k", "3",
                          "--out", str(tmp_path / "x.png"))
    assert code == 2 and out == "" and not (tmp_path / "x.png").exists()
    assert err.strip().endswith("--top-k is for --html (the page's next-token candidates; the PNG shows none), got "
                                "--top-k 3 without --html"), err


def test_layer_out_of_range(lm_checkpoint, tmp_path, capsys):
    code, out, err = _run(capsys, "attention", "--ckpt", str(lm_checkpoint), "--text", "hi", "--layer", "2",
                          "--out", str(tmp_path / "x.png"))
    assert code == 2 and out == ""
    assert "layer must be in [0, 2) (the model has 2 layers), got 2" in err
    assert not (tmp_path / "x.png").exists()


def test_head_out_of_range(lm_checkpoint, tmp_path, capsys):
    code, _, err = _run(capsys, "attention", "--ckpt", str(lm_checkpoint), "--text", "hi", "--head", "4",
                        "--out", str(tmp_path / "x.png"))
    assert code == 2 and "head must be in [0, 4)" in err


def test_missing_checkpoint(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    code, _, err = _run(capsys, "attention", "--ckpt", str(missing), "--text", "hi", "--out", str(tmp_path / "x.png"))
    assert code == 2 and f"no such checkpoint or run folder: {missing}" in err


def test_language_model_needs_text(lm_checkpoint, tmp_path, capsys):
    code, _, err = _run(capsys, "attention", "--ckpt", str(lm_checkpoint), "--out", str(tmp_path / "x.png"))
    assert code == 2 and "needs --text" in err


def test_language_model_refuses_src(lm_checkpoint, tmp_path, capsys):
    code, _, err = _run(capsys, "attention", "--ckpt", str(lm_checkpoint), "--src", "hi",
                        "--out", str(tmp_path / "x.png"))
    assert code == 2 and "--src/--tgt are for translation checkpoints" in err


def test_language_model_refuses_cross_attention(lm_checkpoint, tmp_path, capsys):
    code, _, err = _run(capsys, "attention", "--ckpt", str(lm_checkpoint), "--text", "hi", "--attn", "cross",
                        "--out", str(tmp_path / "x.png"))
    assert code == 2 and "causal self-attention only; got --attn cross" in err


def test_translation_model_takes_one_source(mt_checkpoint, tmp_path, capsys):
    code, _, err = _run(capsys, "attention", "--ckpt", str(mt_checkpoint), "--src", "ab", "--text", "cd", "--out",
                        str(tmp_path / "a.png"))
    assert code == 2 and "give --src (or --text), not both" in err


def test_translation_model_needs_src(mt_checkpoint, tmp_path, capsys):
    code, _, err = _run(capsys, "attention", "--ckpt", str(mt_checkpoint), "--out", str(tmp_path / "x.png"))
    assert code == 2 and "needs --src" in err


@pytest.mark.parametrize("kind, flags", [("causal", ["--masked-len", "3"]), ("causal", ["--lengths", "3,4"]),
                                         ("banded", ["--lengths", "3,4"]),
                                         ("padding", ["--lengths", "3", "--masked-len", "1"])])
def test_a_mask_flag_of_another_kind_is_refused_not_ignored(kind, flags, tmp_path, capsys):
    out = tmp_path / "m.png"
    code, _, err = _run(capsys, "mask", "--kind", kind, *flags, "--out", str(out))
    name = "masked-len" if "--masked-len" in flags else "lengths"
    needs = "banded" if name == "masked-len" else "padding"
    assert code == 2 and f"error: --{name} is for --kind {needs}, got it with --kind {kind}" in err, err
    assert not out.exists()


def test_padding_mask_needs_lengths(tmp_path, capsys):
    code, _, err = _run(capsys, "mask", "--kind", "padding", "--out", str(tmp_path / "m.png"))
    assert code == 2 and "--kind padding needs --lengths" in err


def test_a_key_length_shorter_than_a_row_names_the_flags(tmp_path, capsys):
    code, _, err = _run(capsys, "mask", "--kind", "padding", "--lengths", "3,1", "--key-len", "2",
                        "--out", str(tmp_path / "m.png"))  # was: "max_len must be >= max(lengths) = 3, got 2"
    assert code == 2 and err.strip().endswith("--key-len must be >= the longest of --lengths, 3, got 2"), err
    assert not (tmp_path / "m.png").exists()


def test_bad_lengths_list(tmp_path, capsys):
    code, _, err = _run(capsys, "mask", "--kind", "padding", "--lengths", "3,x", "--out", str(tmp_path / "m.png"))
    assert code == 2 and "--lengths must be comma-separated integers, got '3,x'" in err


def test_out_must_be_png(tmp_path, capsys):
    code, _, err = _run(capsys, "positions", "--out", str(tmp_path / "pe.svg"))
    assert code == 2 and "must end in .png" in err


def test_out_never_overwrites_a_runs_file_a_folder_or_a_file_that_is_no_figure(lm_checkpoint, tmp_path, capsys,
                                                                                 is_png):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    _draws(capsys, is_png, tmp_path / "loss.png", "positions")
    (run / "loss.png").write_bytes((tmp_path / "loss.png").read_bytes())  # the run's own curve, a PNG too
    before = (run / "loss.png").read_bytes()
    notes = tmp_path / "notes.png"
    notes.write_text("my notes")
    (tmp_path / "folder.png").mkdir()
    for target, message in ((run / "loss.png", "is a file of a training run"),
                            (notes, "exists and is not a file this command wrote (an earlier PNG figure)"),
                            (tmp_path / "folder.png", "is a folder; give a file name")):
        code, _, err = _run(capsys, "predict", "--ckpt", str(lm_checkpoint), "--text", "abc", "--out", str(target))
        assert code == 2 and message in err, err
    assert (run / "loss.png").read_bytes() == before and notes.read_text() == "my notes"
    code, _, err = _run(capsys, "positions", "--out", str(run / "checkpoints" / "new.png"))  # new, but the run's
    assert code == 2 and "is a file of a training run" in err and not (run / "checkpoints" / "new.png").exists()
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "state.json").write_text('{"app": "not attnkit"}')  # another program's state.json
    for _ in range(2):
        _draws(capsys, is_png, tmp_path / "proj" / "figs" / "a.png", "positions")
    _draws(capsys, is_png, tmp_path / "again.png", "positions")
    _draws(capsys, is_png, tmp_path / "again.png", "mask", "--kind", "causal")  # an earlier figure is replaced
    page, text = tmp_path / "attn.html", tmp_path / "text.html"
    text.write_text("<p>mine</p>")
    for _ in range(2):  # an earlier page is replaced
        assert _run(capsys, "attention", "--ckpt", str(lm_checkpoint), "--text", "abc", "--html", str(page))[0] == 0
    code, _, err = _run(capsys, "attention", "--ckpt", str(lm_checkpoint), "--text", "abc", "--html", str(text))
    assert code == 2 and "exists and is not a file this command wrote (an earlier attention page)" in err
    assert text.read_text() == "<p>mine</p>"


def test_figures_too_large_are_refused_before_they_are_built(tmp_path, capsys, is_png):
    code, _, err = _run(capsys, "mask", "--kind", "causal", "--len", "100000", "--out", str(tmp_path / "m.png"))
    assert code == 2 and ("this 100000 x 100000 mask (a 12002 x 12002 inch figure) is too large to draw: even at "
                          "dpi 10 (the least)") in err, err
    code, _, err = _run(capsys, "mask", "--kind", "causal", "--len", "3000", "--out", str(tmp_path / "m.png"))
    assert code == 2 and "dpi 100 would make a " in err and "i.e. dpi <= 27 for this" in err, err
    code, _, err = _run(capsys, "positions", "--len", "1000000000", "--dim", "1000000", "--out",
                        str(tmp_path / "p.png"))
    assert code == 2 and "too large to draw: at most 16,777,216 values" in err, err
    code, _, err = _run(capsys, "positions", "--len", "0", "--out", str(tmp_path / "p.png"))
    assert code == 2 and "--len must be an int >= 1, got 0" in err, err
    assert not list(tmp_path.iterdir())
    _draws(capsys, is_png, tmp_path / "b.png", "mask", "--kind", "banded", "--len", "8", "--key-len", "100000")


def test_unknown_preset(tmp_path, capsys):
    code, _, err = _run(capsys, "params", "gpt5", "--out", str(tmp_path / "p.png"))
    assert code == 2 and "gpt5" in err


@pytest.mark.parametrize("base", ["-5", "0", "nan", "1"])
def test_positions_bad_base(base, tmp_path, capsys):
    code, out, err = _run(capsys, "positions", "--dim", "8", "--len", "5", "--base", base,
                          "--out", str(tmp_path / "pe.png"))
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.strip().endswith(f"base must be a finite number in (1.0, inf), got {float(base)}")
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "pe.png").exists()


@pytest.mark.parametrize("figure", [["positions"], ["params", "llama-tiny"], ["mask", "--kind", "causal"]])
def test_dpi_out_of_range(figure, tmp_path, capsys):
    code, _, err = _run(capsys, *figure, "--dpi", "100000", "--out", str(tmp_path / "x.png"))
    assert code == 2 and err.strip().endswith("dpi must be a finite number in [10, 1200], got 100000.0")
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x.png").exists()


def test_dpi_checked_before_the_model_is_loaded(tmp_path, capsys):
    code, _, err = _run(capsys, "attention", "--ckpt", str(tmp_path / "nowhere"), "--text", "hi", "--dpi", "100000",
                        "--out", str(tmp_path / "x.png"))
    assert code == 2 and "dpi must be a finite number in [10, 1200], got 100000.0" in err


@pytest.fixture(scope="module")
def dollar_checkpoint(tmp_path_factory):
    """A tiny byte-level-BPE GPT whose tokenizer learned the token '$$' (LaTeX display math), which matplotlib's
    mathtext refused with a multi-line ParseException when drawn as a tick label."""
    import torch

    from attnkit.checkpoints.checkpoint import save_checkpoint
    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
    from attnkit.models import build_model
    from helpers import tiny_gpt_config

    text = ["We solve $$x^2 = 4$$ and then $$y = 2x$$ again.", "The sum $$a + b$$ is known."] * 30
    tok = BPETokenizer.train(text, 300, special_tokens=["<bos>", "<eos>"], bos="<bos>", eos="<eos>")
    assert "$$" in [tok.id_to_token(i) for i in tok.encode(DOLLAR_TEXT)]
    torch.manual_seed(0)
    model = build_model(tiny_gpt_config(vocab_size=tok.vocab_size, block_size=32)).eval()
    path = tmp_path_factory.mktemp("dollar") / "ckpt"
    return save_checkpoint(path, model, state={"model_config": model.config.to_dict()},
                           extra={"kind": "lm", "tokenizer": tok.to_dict()}, include_rng=False)


DOLLAR_TEXT = "Solve $$x^2$$ now"


@pytest.mark.parametrize("figure", ["attention", "predict"])
def test_dollar_tokens_are_drawn(figure, dollar_checkpoint, tmp_path, capsys, is_png):
    _draws(capsys, is_png, tmp_path / f"{figure}.png", figure, "--ckpt", str(dollar_checkpoint), "--text", DOLLAR_TEXT)
