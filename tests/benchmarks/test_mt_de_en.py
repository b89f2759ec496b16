"""benchmarks/mt_de_en.py: what a record says about the machine that ran it, and how a trained run's checkpoint
and decoding are chosen on valid before the test sets are scored (``choose_and_score``, shared with
mt_domain_tags.py), on a tiny run of a letter-copy task trained here."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import mt_de_en

from attnkit.cli.main import main


def test_a_cpu_run_records_the_cpu_and_its_cores():
    text = mt_de_en.machine_description("cpu")
    assert "cores" in text and torch.__version__ in text


def test_a_cuda_run_records_the_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: f"NVIDIA H200 #{index}")
    assert mt_de_en.machine_description("cuda").startswith("NVIDIA H200 #0 (torch ")
    assert mt_de_en.machine_description("cuda:1").startswith("NVIDIA H200 #1 ")
    assert mt_de_en.machine_description(None).startswith("NVIDIA H200 #0 ")  # auto picks CUDA where present
    assert "cores" in mt_de_en.machine_description("cpu")


@pytest.mark.parametrize("device", [None, "auto"])
def test_auto_without_cuda_records_the_cpu(monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "cores" in mt_de_en.machine_description(device)


def _run_attnkit(args):
    rc = main(args)
    if rc:
        raise RuntimeError(f"attnkit {' '.join(args)} exited {rc}")


def test_the_checkpoint_and_the_decoding_are_chosen_on_valid_and_then_score_every_test_set(tiny_run):
    data, run = tiny_run
    grid = [(1, 1.0), (2, 0.6), (2, 1.0)]
    scored = mt_de_en.choose_and_score(run, valid=["--data", str(data), "--split", "valid"],
                                       tests={"test": ["--data", str(data), "--split", "test"],
                                              "test-docs": ["--data", str(data / "test-docs.tsv")]},
                                       grid=grid, run_attnkit=_run_attnkit, prefix="p_")
    # both checkpoints decoded valid greedily; the better one is kept
    greedy = {c: json.loads((run / f"p_valid_{c}.json").read_text()) for c in ("best", "averaged")}
    assert {c: g["bleu"] for c, g in greedy.items()} == {c: g["bleu"] for c, g in scored["valid_greedy"].items()}
    assert all(g["beam"] == 1 and g["split"] == "valid" and g["sentences"] == 24 for g in greedy.values())
    assert scored["chosen"] == max(greedy, key=lambda c: greedy[c]["bleu"])
    chosen_dir = str(run / "checkpoints" / scored["chosen"])
    # every decoding of the grid was tried on valid with that checkpoint (greedy reused), the best is kept
    assert scored["valid_decoding"]["greedy"]["bleu"] == greedy[scored["chosen"]]["bleu"]
    for alpha in (0.6, 1.0):
        j = json.loads((run / f"p_valid_{scored['chosen']}_beam2_lp{alpha:g}.json").read_text())
        assert (j["ckpt"], j["beam"], j["length_penalty"]) == (chosen_dir, 2, alpha)
        assert scored["valid_decoding"][f"beam 2, lp {alpha:g}"]["bleu"] == j["bleu"]
    best = max(scored["valid_decoding"].values(), key=lambda d: d["bleu"])
    assert scored["decoding"] == {"beam": best["beam"], "length_penalty": best["length_penalty"]}
    # each test set is decoded once, with the chosen checkpoint and decoding, and its translations are kept
    for name, n in (("test", 24), ("test-docs", 12)):
        result = scored["tests"][name]
        assert result == json.loads((run / f"p_{name}.json").read_text())
        assert (result["ckpt"], result["beam"], result["sentences"]) == (chosen_dir, best["beam"], n)
        assert scored["hyps"][name] == run / f"p_{name}_hyps.txt"
        assert len(scored["hyps"][name].read_text().splitlines()) == n
        assert scored["commands"][name][:4] == ["eval", "mt", "--ckpt", chosen_dir]
    assert not list(run.glob("p_test*_beam*"))  # the test sets never took part in a choice


def test_a_run_without_best_or_averaged_checkpoints_is_refused(tmp_path):
    with pytest.raises(ValueError, match="expected checkpoints/best or checkpoints/averaged"):
        mt_de_en.choose_and_score(tmp_path, valid=["--data", "x"], tests={}, grid=[(1, 1.0)],
                                  run_attnkit=_run_attnkit)
    with pytest.raises(ValueError, match="grid must hold"):
        mt_de_en.choose_and_score(tmp_path, valid=["--data", "x"], tests={}, grid=[], run_attnkit=_run_attnkit)


def test_a_failed_attnkit_child_ends_the_script_with_one_line():
    import subprocess

    from benchmarks.mt_de_en import run_script

    def fails() -> int:
        raise subprocess.CalledProcessError(2, ["attnkit", "train", "mt", "--preset", "nope"])

    with pytest.raises(SystemExit) as exit_:
        run_script(fails, "mt_de_en.py")
    assert exit_.value.code == "mt_de_en.py: `attnkit train mt --preset nope` exited with 2 (its message is above)"
    with pytest.raises(SystemExit) as exit_:
        run_script(lambda: 0, "mt_de_en.py")
    assert exit_.value.code == 0
