"""``attnkit sample --model`` with a Hugging Face folder (README: "HF folders go both ways"; docs/design.md: ``sample
--model`` loads through ``interop/load.py``'s ``load_model``).

Axis legend: none (command lines and their output only).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnkit import api
from attnkit.cli.main import main

from helpers import tiny_bpe_tokenizer, tiny_hf_folder


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    return tiny_hf_folder(tmp_path_factory.mktemp("hf") / "model", tiny_bpe_tokenizer(("<|endoftext|>", "<|im_end|>")))


def test_sample_model_takes_a_hugging_face_folder(hf_folder, capsys):
    """Was: exit 2, "attnkit sample: error: unknown pretrained model '<folder>'; known models: ..."."""
    argv = ["sample", "--model", str(hf_folder), "--prompt", "the cat", "--max-new-tokens", "5", "--seed", "2"]
    assert main([*argv, "--no-stream"]) == 0
    out, err = capsys.readouterr()
    want = api.sample(model=str(hf_folder), prompt="the cat", max_new_tokens=5, seed=2)[0]
    assert out == want + "\n" and err == ""
    assert main(argv) == 0 and capsys.readouterr().out == want + "\n"  # streamed: the same text
    with pytest.raises(SystemExit) as exc:
        main(["sample", "--help"])
    assert exc.value.code == 0
    assert "Hugging Face folder" in " ".join(capsys.readouterr().out.split())


def test_sample_model_errors_name_the_model_flag(tmp_path, capsys):
    """load_model's messages name the flag of the command that called it: sample has --model, not finetune's --from
    (nor its --tokenizer)."""
    (tmp_path / "empty").mkdir()
    assert main(["sample", "--model", str(tmp_path / "empty")]) == 2
    assert f"attnkit sample: error: --model {tmp_path / 'empty'}: not a model folder" in capsys.readouterr().err
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"")
    assert main(["sample", "--model", str(hf)]) == 2
    err = capsys.readouterr().err
    assert "without tokenizer.json; put its tokenizer.json beside config.json" in err and "--tokenizer" not in err


def test_sample_system_flag_is_the_chat_system_turn(tmp_path, capsys):
    """``--system TEXT`` reaches the chat prompt (also a text that starts with '-'); without ``--chat`` it is one
    line of error, exit 2."""
    from helpers import CHATML

    folder = tiny_hf_folder(tmp_path / "chat", tiny_bpe_tokenizer(("<|endoftext|>", "<|im_end|>")),
                            chat_template=CHATML)
    argv = ["sample", "--model", str(folder), "--prompt", "the cat", "--chat", "--max-new-tokens", "4", "--greedy",
            "--no-stream"]
    for system in ("Be brief.", "-- terse --"):
        assert main([*argv, "--system", system]) == 0
        want = api.sample(model=str(folder), prompt="the cat", chat=True, system=system, max_new_tokens=4,
                          greedy=True)[0]
        assert capsys.readouterr().out == want + "\n"
    sampler = api.Sampler(model=str(folder), prompt="the cat", chat=True, system="Be brief.", max_new_tokens=4)
    assert "<|im_start|>system" in sampler.tokenizer.decode(sampler.prompt_ids)
    capsys.readouterr()
    assert main(["sample", "--model", str(folder), "--prompt", "hi", "--system", "Be brief."]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs --chat" in err


def test_sample_min_p_flag_reaches_the_sampler(hf_folder, capsys):
    """``--min-p 1`` keeps only the most likely token: sampling then gives the greedy text."""
    argv = ["sample", "--model", str(hf_folder), "--prompt", "the cat", "--max-new-tokens", "6", "--no-stream"]
    assert main([*argv, "--seed", "3", "--temperature", "1.5", "--min-p", "1"]) == 0
    greedy = api.sample(model=str(hf_folder), prompt="the cat", max_new_tokens=6, greedy=True)[0]
    assert capsys.readouterr().out == greedy + "\n"


def test_sample_min_p_flag_is_a_fraction_and_off_by_default():
    """``--min-p 0.05`` parses as the float 0.05 and reaches the generation config; without it min-p is None."""
    from attnkit.cli.flags import options_from
    from attnkit.cli.main import build_parser

    parser = build_parser()
    options = options_from(api.SampleOptions, parser.parse_args(["sample", "--model", "m", "--min-p", "0.05"]))
    assert options.generation_config().min_p == 0.05
    assert options_from(api.SampleOptions, parser.parse_args(["sample", "--model", "m"])).min_p is None


def test_sample_no_repeat_ngram_size_flag_is_an_int_and_off_by_default(capsys):
    """``--no-repeat-ngram-size 2`` parses as the int 2 and reaches the generation config (0, off, without it); a
    size that is no int is a usage error naming the flag (exit 2)."""
    from attnkit.cli.flags import options_from
    from attnkit.cli.main import build_parser

    def size(*flags: str) -> int:
        args = build_parser().parse_args(["sample", "--model", "m", *flags])
        return options_from(api.SampleOptions, args).generation_config().no_repeat_ngram_size

    assert (size("--no-repeat-ngram-size", "2"), size()) == (2, 0)
    with pytest.raises(SystemExit) as exc:
        size("--no-repeat-ngram-size", "1.5")
    assert exc.value.code == 2
    assert "argument --no-repeat-ngram-size: invalid int value: '1.5'" in capsys.readouterr().err


def test_sample_system_takes_a_value_that_starts_with_a_dash():
    """``--system -terse`` (one word, no space) is the system text, not an unknown flag: --system is a text option."""
    from attnkit.cli.main import build_parser, join_text_values

    argv = ["sample", "--model", "m", "--chat", "--system", "-terse", "--prompt", "-hi"]
    args = build_parser().parse_args(join_text_values(argv))
    assert args.system == "-terse" and args.prompt == "-hi"
