"""Checkpoint averaging: the result is the element-wise mean, loads like any checkpoint, and bad input is refused."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from attnkit.models.builders import build_model
from attnkit.models.configs import TransformerConfig
from attnkit.checkpoints.averaging import average_checkpoints, average_last_checkpoints, average_state_dicts
from attnkit.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from attnkit.checkpoints import load

CONFIG = TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=16, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, dim_feedforward=32, max_len=32, share_embeddings=True,
                           tie_output=True)


def _run_with_checkpoints(root, n, steps=None):
    """A fake run folder with ``n`` step checkpoints of freshly initialised (different) models."""
    models = []
    for i, step in enumerate(steps or [10 * (k + 1) for k in range(n)]):
        torch.manual_seed(100 + i)
        m = build_model(CONFIG)
        save_checkpoint(root / "checkpoints" / f"step_{step:08d}", m,
                        state={"model_config": CONFIG.to_dict(), "step": step},
                        extra={"kind": "mt", "note": f"ckpt {i}"})
        models.append(m)
    return models


def test_average_is_the_elementwise_mean_of_the_last_n(tmp_path):
    models = _run_with_checkpoints(tmp_path, 4)
    out = average_last_checkpoints(tmp_path, 3)
    assert out == tmp_path / "checkpoints" / "averaged"
    avg = build_model(CONFIG)
    load_checkpoint(out, avg)
    last3 = [dict(m.named_parameters()) for m in models[1:]]
    for name, p in avg.named_parameters():
        expected = (last3[0][name].double() + last3[1][name].double() + last3[2][name].double()) / 3
        torch.testing.assert_close(p.detach().double(), expected, atol=1e-7, rtol=0)
    # tied weights stay tied after loading; the oldest checkpoint did not contribute
    assert avg.generator.weight.data_ptr() == avg.tgt_embed.tok.weight.data_ptr()
    assert not torch.allclose(avg.generator.weight, models[0].generator.weight)
    state = json.loads((out / "state.json").read_text())
    assert state["averaged_steps"] == [20, 30, 40] and state["extra"]["note"] == "ckpt 3"
    assert "optimizer" not in state and "rng" not in state


def test_averaged_checkpoint_loads_with_load(tmp_path):
    _run_with_checkpoints(tmp_path, 2)
    out = average_last_checkpoints(tmp_path, 2, out=tmp_path / "avg")
    loaded = load(out, expect_kind="mt", require_tokenizer=False)
    model, tok, state = loaded.model, loaded.tokenizer, loaded.state
    assert tok is None and state["step"] == 20
    src = torch.randint(4, 40, (2, 5))
    tgt = torch.randint(4, 40, (2, 3))
    assert model(src, tgt).shape == (2, 3, 40)


def test_average_of_one_checkpoint_is_that_checkpoint(tmp_path):
    models = _run_with_checkpoints(tmp_path, 1)
    out = average_last_checkpoints(tmp_path, 1)
    avg = build_model(CONFIG)
    load_checkpoint(out, avg)
    for (name, a), b in zip(avg.state_dict().items(), models[0].state_dict().values()):
        assert torch.equal(a, b), name


def test_too_few_checkpoints(tmp_path):
    _run_with_checkpoints(tmp_path, 2)
    with pytest.raises(ValueError, match=r"last 3 checkpoints .* holds 2 \(\[10, 20\]\)"):
        average_last_checkpoints(tmp_path, 3)


def test_n_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="n must be an int >= 1, got 0"):
        average_last_checkpoints(tmp_path, 0)


def test_different_model_configs_are_refused(tmp_path):
    _run_with_checkpoints(tmp_path, 1)
    other = CONFIG.replace(dropout=0.3)
    save_checkpoint(tmp_path / "checkpoints" / "step_00000099", build_model(other),
                    state={"model_config": other.to_dict(), "step": 99}, extra={"kind": "mt"})
    with pytest.raises(ValueError, match="model configs differ"):
        average_last_checkpoints(tmp_path, 2)


def test_different_tokenizers_are_refused(tmp_path):
    """The averaged checkpoint took the last one's tokenizer, whatever the others were trained with."""
    torch.manual_seed(0)
    for step, vocab in ((10, "a"), (20, "b")):
        save_checkpoint(tmp_path / "checkpoints" / f"step_{step:08d}", build_model(CONFIG),
                        state={"model_config": CONFIG.to_dict(), "step": step},
                        extra={"kind": "mt", "tokenizer": {"type": "char", "chars": vocab}})
    with pytest.raises(ValueError, match="their tokenizers differ"):
        average_last_checkpoints(tmp_path, 2)


def test_unmerged_lora_adapters_are_refused(tmp_path):
    """They were dropped from the average (the rebuilt model has no place for them) and the result could not load."""
    from attnkit.modules.lora import apply_lora

    for step in (10, 20):
        torch.manual_seed(step)
        model = build_model(CONFIG)
        apply_lora(model, rank=2, alpha=2.0, targets=("qkv_proj",))
        save_checkpoint(tmp_path / "checkpoints" / f"step_{step:08d}", model,
                        state={"model_config": CONFIG.to_dict(), "step": step}, extra={"kind": "mt"})
    with pytest.raises(ValueError, match=r"un-merged LoRA adapter tensors \(e\.g\. .*lora_A\)"):
        average_last_checkpoints(tmp_path, 2)
    assert not (tmp_path / "checkpoints" / "averaged").exists()


def test_out_may_not_be_an_input(tmp_path):
    _run_with_checkpoints(tmp_path, 2)
    first = tmp_path / "checkpoints" / "step_00000010"
    with pytest.raises(ValueError, match="is one of the inputs"):
        average_checkpoints([first, tmp_path / "checkpoints" / "step_00000020"], first)


@pytest.mark.parametrize("out", ["mine", "run/checkpoints", "run/checkpoints/best", "notes.txt"])
def test_out_that_is_not_an_earlier_average_is_refused(tmp_path, out):
    """A user's folder, the folder holding the inputs, or best/ was deleted and replaced by the average."""
    _run_with_checkpoints(tmp_path / "run", 2)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    (tmp_path / "notes.txt").write_text("keep me")
    save_checkpoint(tmp_path / "run" / "checkpoints" / "best", build_model(CONFIG),
                    state={"model_config": CONFIG.to_dict(), "step": 5})
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    inputs = [tmp_path / "run" / "checkpoints" / f"step_{s:08d}" for s in (10, 20)]
    with pytest.raises(ValueError, match="exists and is not an averaged checkpoint"):
        average_checkpoints(inputs, tmp_path / out)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert load(tmp_path / "run" / "checkpoints" / "best", require_tokenizer=False).state["step"] == 5


def test_an_earlier_average_is_replaced(tmp_path):
    _run_with_checkpoints(tmp_path, 3)
    average_last_checkpoints(tmp_path, 2)
    out = average_last_checkpoints(tmp_path, 3)
    assert json.loads((out / "state.json").read_text())["averaged_steps"] == [10, 20, 30]


def test_an_edited_oversized_config_is_refused_before_the_model_is_built(tmp_path):
    """The model was built from the newest state.json unchecked: max_len 2 * 10**6 allocated its position tables
    (hundreds of MiB; 10**8: gigabytes) before anything compared the config with the weights."""
    _run_with_checkpoints(tmp_path, 2)
    for step in (10, 20):
        file = tmp_path / "checkpoints" / f"step_{step:08d}" / "state.json"
        state = json.loads(file.read_text())
        state["model_config"]["max_len"] = 2 * 10**6
        file.write_text(json.dumps(state))
    with pytest.raises(ValueError, match=r"position tables for length 2000000 would take"):
        average_last_checkpoints(tmp_path, 2)
    assert not (tmp_path / "checkpoints" / "averaged").exists()


def test_the_average_of_bfloat16_checkpoints_stays_bfloat16(tmp_path):
    """Was: the weights were loaded into a float32 model and saved as float32."""
    models = []
    for step in (10, 20):
        torch.manual_seed(step)
        models.append(build_model(CONFIG).to(torch.bfloat16))
        save_checkpoint(tmp_path / "checkpoints" / f"step_{step:08d}", models[-1],
                        state={"model_config": CONFIG.to_dict(), "step": step}, extra={"kind": "mt"})
    out = average_last_checkpoints(tmp_path, 2)
    weights = load_file(str(out / "model.safetensors"))
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}
    expected = (models[0].generator.weight.double() + models[1].generator.weight.double()) / 2
    assert torch.equal(weights["generator.weight"], expected.to(torch.bfloat16))


def test_state_dicts_with_different_shapes_are_refused():
    a = {"w": torch.randn(2, 3)}
    b = {"w": torch.randn(3, 2)}
    with pytest.raises(ValueError, match=r"w has shape \(3, 2\) torch.float32, expected \(2, 3\)"):
        average_state_dicts([a, b])


def test_state_dicts_with_different_names_are_refused():
    with pytest.raises(ValueError, match=r"missing \['w'\], unexpected \['v'\]"):
        average_state_dicts([{"w": torch.randn(2)}, {"v": torch.randn(2)}])


def test_integer_tensors_must_agree():
    a = {"n": torch.tensor([1, 2]), "w": torch.randn(2)}
    b = {"n": torch.tensor([1, 3]), "w": torch.randn(2)}
    with pytest.raises(ValueError, match="non-float tensor n"):
        average_state_dicts([a, b])
    out = average_state_dicts([a, {"n": torch.tensor([1, 2]), "w": b["w"]}])
    assert torch.equal(out["n"], a["n"])
    torch.testing.assert_close(out["w"], (a["w"] + b["w"]) / 2)


def test_low_precision_tensors_are_summed_in_float64():
    """The mean of three bfloat16 tensors is rounded once: summed in bfloat16, 256 + 1 + 1 rounds to 256 and the
    mean to 85.5 instead of 86 (mutation check: the sum accumulated in the tensors' own dtype)."""
    sds = [{"w": torch.tensor([v], dtype=torch.bfloat16)} for v in (256.0, 1.0, 1.0)]
    out = average_state_dicts(sds)["w"]
    assert out.dtype == torch.bfloat16
    assert out.item() == torch.tensor(258.0 / 3, dtype=torch.bfloat16).item() == 86.0
