"""GenerationConfig: every option checked when it is made, JSON round trip, model checks before any work."""

import json

import pytest

from attnkit.cli.main import main
from attnkit.generation import GenerationConfig, generate


def test_json_round_trip():
    cfg = GenerationConfig(max_new_tokens=5, do_sample=True, top_k=3, eos_token_id=[4, 2], stop_strings="x", seed=1)
    back = GenerationConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and back.eos_token_id == (2, 4) and back.stop_strings == ("x",)


@pytest.mark.parametrize("options,message", [
    (dict(max_new_tokens=-1), "max_new_tokens must be an int >= 0, got -1"),
    (dict(max_new_tokens=3, top_p=2.0), "top_p must satisfy 0 < top_p <= 1, got 2.0"),
    (dict(max_new_tokens=3, temperature=0),
     r"temperature must be a finite number > 0, got 0 \(for greedy decoding: do_sample=False, "
     r"`attnkit sample --greedy`\)"),
    (dict(max_new_tokens=3, temperature=-1.0), r"temperature must be a finite number > 0, got -1.0$"),
    (dict(max_new_tokens=3, top_k=0), "top_k must be an int >= 1, got 0"),
    (dict(max_new_tokens=3, do_sample="yes"), "do_sample must be a bool, got 'yes'"),
    (dict(max_new_tokens=3, seed=1.5), "seed must be None or an int, got 1.5"),
    (dict(max_new_tokens=3, seed=2 ** 64), r"seed must be an int in \[-2\*\*63, 2\*\*64 - 1\].* 18446744073709551616"),
    (dict(max_new_tokens=3, seed=-(2 ** 63) - 1), r"seed must be an int in \[-2\*\*63, 2\*\*64 - 1\]"),
    (dict(max_new_tokens=3, pad_token_id=-1), "pad_token_id must be an int >= 0, got -1"),
    (dict(max_new_tokens=3, compile=True, sliding_window=True), "compile=True needs use_cache=True and sliding_window=False"),
    (dict(max_new_tokens=3, beams=2), r"unknown generation option\(s\) \['beams'\]"),
    (dict(), "max_new_tokens is required"),
])
def test_bad_options_are_refused_before_the_model_runs(options, message):
    class Untouchable:  # any call would fail the test with another error
        def __call__(self, *a, **k):
            raise AssertionError("the model ran")

    with pytest.raises(ValueError, match=message):
        generate(Untouchable(), [[1]], **options)
    with pytest.raises(ValueError, match=message):
        GenerationConfig.from_options(**options)


def test_config_and_options_combine(gpt):
    cfg = GenerationConfig(max_new_tokens=4)
    assert generate(gpt, [[1, 2]], cfg) == generate(gpt, [[1, 2]], max_new_tokens=4)
    assert len(generate(gpt, [[1, 2]], cfg, max_new_tokens=2)[0]) == 2


def test_stop_strings_need_a_tokenizer(gpt):
    with pytest.raises(ValueError, match="stop_strings need a tokenizer"):
        generate(gpt, [[1]], max_new_tokens=2, stop_strings=["x"])


@pytest.mark.parametrize("flag", [["--top-p", "2"], ["--temperature", "0"], ["--top-k", "0"],
                                  ["--max-new-tokens", "-1"], ["--num-samples", "0"],
                                  ["--repetition-penalty", "-1"], ["--min-p", "2"]])
def test_sample_cli_checks_options_before_any_output(flag, tmp_path, capsys):
    # the run folder does not exist: the options must be refused before it is even opened
    assert main(["sample", "--ckpt", str(tmp_path / "nowhere"), "--prompt", "ROMEO:", *flag]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and flag[0].lstrip("-").replace("-", "_")[:5] in err.replace("-", "_")


@pytest.mark.parametrize("seed", [-(2 ** 63), 2 ** 64 - 1])
def test_every_seed_torch_takes_is_accepted_and_samples(gpt, seed):
    """The ends of the range torch.Generator.manual_seed takes pass the config and run."""
    out = generate(gpt, [[1, 2]], max_new_tokens=2, do_sample=True, seed=seed)
    assert len(out[0]) == 2


def test_sample_options_check_the_seed_of_the_last_sample():
    """Sample i is drawn with seed + i: the last one must still be a seed torch takes, and the check comes when
    the options are made (before a model is loaded or a prompt printed)."""
    from attnkit.api import SampleOptions

    assert SampleOptions(ckpt="x", seed=2 ** 64 - 2, num_samples=2).seed == 2 ** 64 - 2
    with pytest.raises(ValueError, match=r"--seed \+ --num-samples - 1 must be <= 2\*\*64 - 1.*= 18446744073709551616"):
        SampleOptions(ckpt="x", seed=2 ** 64 - 1, num_samples=2)
    with pytest.raises(ValueError, match=r"--seed must be an int in \[-2\*\*63, 2\*\*64 - 1\]"):
        SampleOptions(ckpt="x", seed=-(2 ** 63) - 1)
