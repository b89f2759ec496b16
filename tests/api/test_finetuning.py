"""``attnkit.api.finetune``'s own rules, without a training run: the LoRA settings a resume compares, and a run
folder at the ``--from`` folder refused before the model is read.

Axis legend: none (options and files only).
"""

from __future__ import annotations

import pytest

from attnkit import api
from attnkit.api.finetuning import FinetuneOptions, lora_settings

SAVED = {"rank": 8, "alpha": 16.0, "dropout": 0.0, "targets": ["out_proj", "qkv_proj"], "merged": False}


def test_resumed_lora_targets_compare_as_a_set():
    """Was: ``--lora-targets qkv_proj out_proj`` on a run started with ``out_proj qkv_proj`` was refused."""
    given = FinetuneOptions(out="run", resume=True, lora_targets=["qkv_proj", "out_proj"])
    assert lora_settings(given, SAVED, resuming=True)["targets"] == ["out_proj", "qkv_proj"]  # the run's order
    for targets in (["qkv_proj"], ["qkv_proj", "out_proj", "w_in"]):
        with pytest.raises(ValueError, match=r"--lora-targets must stay \['out_proj', 'qkv_proj'\] \(the run's\), "
                                             r"got \['qkv_proj'"):
            lora_settings(FinetuneOptions(out="run", resume=True, lora_targets=targets), SAVED, resuming=True)


@pytest.mark.parametrize("where", ["is", "is inside", "contains"])
def test_an_out_at_the_source_folder_is_refused_before_the_model_is_read(tmp_path, monkeypatch, where):
    """Was: ``finetune(source=X, out=X)`` (X a Hugging Face folder) wrote the run among X's files."""
    from attnkit.interop import load

    def boom(*args, **kwargs):
        raise AssertionError("the model was read before the run folder was checked")

    monkeypatch.setattr(load, "load_model", boom)
    src = tmp_path / "models" / "hf"
    src.mkdir(parents=True)
    (src / "config.json").write_text("{}")
    out = {"is": src, "is inside": src / "run", "contains": tmp_path / "models"}[where]
    with pytest.raises(ValueError, match=rf"--out \S+ {where} the --from folder \S+hf: the run would write among the "
                                         rf"source model's files; expected a run folder outside it, e.g. --out "
                                         rf"\S+hf-ft"):
        api.finetune(source=str(src), data="plays.txt", out=out, steps=1, progress=False, log=lambda line: None)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["config.json", "hf", "models"]


def test_muon_with_lora_is_refused_when_the_options_are_made():
    """Was: refused by the optimizer, after the model was loaded and the data encoded."""
    with pytest.raises(ValueError, match=r"^--optimizer muon orthogonalizes the trainable nn.Linear weights, and with "
                                         r"--lora only the adapters train \(plain parameters\): use --optimizer adamw"):
        FinetuneOptions(source="model.gguf", data="jokes.txt", out="run", lora=True, optimizer="muon")
    assert FinetuneOptions(source="model.gguf", data="jokes.txt", out="run", optimizer="muon").optimizer == "muon"
