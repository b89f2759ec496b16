"""attnkit GPT <-> Hugging Face transformers (GPT2LMHeadModel, LlamaForCausalLM), with tiny random
configs built locally (nothing is downloaded).

Parity tolerance: logits agree within 1e-4 (absolute) in float32; the weights are redrawn with a large
spread (std 0.2) so that the logits are far from uniform and a wrong mapping cannot pass.
"""

from __future__ import annotations

import json

import pytest
import torch
from helpers import assert_close, spread_weights, tiny_bpe_tokenizer

transformers = pytest.importorskip("transformers")

from attnkit.interop.hf import (  # noqa: E402
    GPT2_KEY_TEMPLATES,
    LLAMA_KEY_TEMPLATES,
    from_hf,
    gpt_config_from_hf,
    hf_config_from_gpt,
    load_hf_folder,
    save_hf,
    state_dict_from_hf,
    to_hf,
)
from attnkit.models import GPT, GPTConfig, build_model  # noqa: E402

V = 67


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # from_pretrained(folder) must never reach the network
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "error")
    torch.manual_seed(0)  # (one thread: tests/conftest.py sets it for every test)
    yield


def _spread(model: torch.nn.Module, std: float = 0.2, seed: int = 0) -> torch.nn.Module:
    return spread_weights(model, std=std, seed=seed).eval()


def _hf_gpt2(tied: bool = True):
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                  tie_word_embeddings=tied, bos_token_id=0, eos_token_id=0)
    return _spread(transformers.GPT2LMHeadModel(cfg))


def _hf_llama(tied: bool = False, head_dim: int | None = None, bias: bool = False):
    kw = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, rope_theta=5000.0, rms_norm_eps=1e-5,
              tie_word_embeddings=tied, attention_bias=bias, mlp_bias=bias, bos_token_id=0, eos_token_id=0)
    if head_dim is not None:
        kw["head_dim"] = head_dim
    return _spread(transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw)))


def _logits(hf_model, idx):
    with torch.no_grad():
        return hf_model(input_ids=idx).logits


HF_MODELS = {
    "gpt2-tied": lambda: _hf_gpt2(tied=True),
    "gpt2-untied": lambda: _hf_gpt2(tied=False),
    "llama-gqa-untied": lambda: _hf_llama(tied=False),
    "llama-gqa-tied": lambda: _hf_llama(tied=True),
    "llama-head_dim16-bias": lambda: _hf_llama(head_dim=16, bias=True),
}


# --------------------------------------------------------------------------- import
@pytest.mark.parametrize("kind", list(HF_MODELS))
def test_from_hf_model_matches_transformers_logits(kind):
    hf_model = HF_MODELS[kind]()
    ours = from_hf(hf_model)
    assert isinstance(ours, GPT) and not ours.training
    assert ours.config.tie_embeddings == hf_model.config.tie_word_embeddings
    if ours.config.tie_embeddings:
        assert ours.lm_head.weight is ours.wte.weight
    idx = torch.randint(0, V, (3, 17))
    expected = _logits(hf_model, idx)
    with torch.no_grad():
        got = ours(idx)
    assert expected.abs().max() > 1.0  # far from uniform: the check is not vacuous
    assert_close(got, expected, "hf_float32")


@pytest.mark.parametrize("kind", ["gpt2-tied", "llama-gqa-untied"])
def test_incremental_decoding_after_import_equals_full_forward(kind):
    hf_model = HF_MODELS[kind]()
    ours = from_hf(hf_model)
    idx = torch.randint(0, V, (2, 14))
    with torch.no_grad():
        full = ours(idx)
        cache = ours.new_cache(2, 16)
        steps = [ours(idx[:, :6], cache=cache)] + [ours(idx[:, t:t + 1], cache=cache) for t in range(6, 14)]
    assert_close(torch.cat(steps, dim=1), full, "hf_float32")
    assert_close(full, _logits(hf_model, idx), "hf_float32")


def test_config_mapping():
    g = gpt_config_from_hf(_hf_gpt2().config)
    assert (g.position, g.norm, g.activation, g.bias, g.block_size, g.n_embd, g.n_head) == \
        ("learned", "layernorm", "gelu_tanh", True, 32, 32, 4)
    ll = gpt_config_from_hf(_hf_llama(head_dim=16).config)
    assert (ll.position, ll.norm, ll.activation, ll.bias, ll.kv_heads, ll.head_size, ll.rope_theta, ll.ffn_size) == \
        ("rope", "rmsnorm", "swiglu", False, 2, 16, 5000.0, 48)
    # the older flat `rope_theta` key (transformers 4.x / GGUF converters) works too
    flat = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 1,
            "intermediate_size": 40, "num_hidden_layers": 1, "vocab_size": 10, "rope_theta": 123.0}
    assert gpt_config_from_hf(flat).rope_theta == 123.0
    # and back
    back = hf_config_from_gpt(ll)
    assert back["model_type"] == "llama" and back["num_key_value_heads"] == 2 and back["head_dim"] == 16
    assert gpt_config_from_hf(back) == ll
    assert gpt_config_from_hf(hf_config_from_gpt(g)) == g
    # settings no eval-mode output shows: GPT-2's dropouts and norm eps, read as given
    hf = transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=32, n_layer=1, n_head=4, resid_pdrop=0.15,
                                 attn_pdrop=0.05, layer_norm_epsilon=1e-6)
    got = gpt_config_from_hf(hf)
    assert (got.dropout, got.attention_dropout, got.norm_eps) == (0.15, 0.05, 1e-6)


def test_key_templates_cover_every_parameter():
    for cfg, templates in ((GPTConfig(vocab_size=V, block_size=8, n_layer=1, n_head=2, n_embd=8, tie_embeddings=False),
                            GPT2_KEY_TEMPLATES),
                           (GPTConfig(vocab_size=V, block_size=8, n_layer=1, n_head=2, n_embd=8, position="rope",
                                      norm="rmsnorm", activation="swiglu", bias=True, tie_embeddings=False),
                            LLAMA_KEY_TEMPLATES)):
        names = {t.format(i=0) for t, _, _ in templates}
        assert set(build_model(cfg).state_dict()) <= names


# --------------------------------------------------------------------------- export
@pytest.mark.parametrize("kind", ["gpt2-tied", "gpt2-untied", "llama-tied", "llama-untied-bias"])
def test_save_hf_folder_loads_in_transformers(kind, tmp_path):
    if kind.startswith("gpt2"):
        cfg = GPTConfig(vocab_size=V, block_size=32, n_layer=2, n_head=4, n_embd=32,
                        tie_embeddings=kind == "gpt2-tied")
    else:
        cfg = GPTConfig(vocab_size=V, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=48,
                        position="rope", norm="rmsnorm", activation="swiglu", bias=kind.endswith("bias"),
                        rope_theta=2500.0, tie_embeddings=kind == "llama-tied")
    ours = _spread(build_model(cfg))
    folder = save_hf(ours, tmp_path / "export")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    cls = transformers.GPT2LMHeadModel if kind.startswith("gpt2") else transformers.LlamaForCausalLM
    hf_model = cls.from_pretrained(str(folder)).eval()
    idx = torch.randint(0, V, (2, 13))
    with torch.no_grad():
        expected = ours(idx)
    assert_close(_logits(hf_model, idx), expected, "hf_float32")
    # to_hf gives the same model in memory, and from_hf(folder) round-trips exactly
    assert_close(_logits(to_hf(ours), idx), expected, "hf_float32")
    again = from_hf(folder)
    assert again.config == ours.config
    for name, tensor in ours.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor), name


def test_load_hf_folder_reads_pytorch_model_bin(tmp_path):
    hf_model = _hf_llama()
    (tmp_path / "config.json").write_text(json.dumps(hf_model.config.to_dict()))
    torch.save(hf_model.state_dict(), tmp_path / "pytorch_model.bin")
    config, state = load_hf_folder(tmp_path)
    assert config["model_type"] == "llama" and "model.embed_tokens.weight" in state
    idx = torch.randint(0, V, (1, 9))
    with torch.no_grad():
        assert_close(from_hf(tmp_path)(idx), _logits(hf_model, idx), "hf_float32")


def test_export_rejects_a_config_no_hf_architecture_can_hold():
    cfg = GPTConfig(vocab_size=V, block_size=8, n_layer=1, n_head=2, n_embd=8, position="sinusoidal")
    with pytest.raises(ValueError, match="matches no Hugging Face architecture.*position='sinusoidal'"):
        hf_config_from_gpt(cfg)


# --------------------------------------------------------------------------- errors
def test_config_of_one_family_with_weights_of_another():
    llama = _hf_llama()
    gpt2 = _hf_gpt2()
    with pytest.raises(ValueError, match="config describes a gpt2 model but the weights are llama-style"):
        from_hf(llama.state_dict(), config=gpt2.config)
    with pytest.raises(ValueError, match="config describes a llama model but the weights are gpt2-style"):
        from_hf(gpt2.state_dict(), config=llama.config)


def test_missing_tensors_are_listed():
    hf_model = _hf_gpt2(tied=False)
    state = dict(hf_model.state_dict())
    del state["transformer.h.1.mlp.c_fc.bias"]
    del state["lm_head.weight"]
    with pytest.raises(ValueError) as err:
        from_hf(state, config=hf_model.config)
    msg = str(err.value)
    assert "missing 2 tensor(s)" in msg and "'transformer.h.1.mlp.c_fc.bias'" in msg and "'lm_head.weight'" in msg


def test_extra_tensors_are_listed():
    hf_model = _hf_llama()
    state = dict(hf_model.state_dict())
    state["model.layers.2.self_attn.q_proj.weight"] = torch.zeros(32, 32)  # a third layer the config lacks
    state["model.extra.weight"] = torch.zeros(3)
    with pytest.raises(ValueError) as err:
        from_hf(state, config=hf_model.config)
    msg = str(err.value)
    assert "unexpected 2 tensor(s)" in msg
    assert "'model.layers.2.self_attn.q_proj.weight'" in msg and "'model.extra.weight'" in msg


def test_shape_mismatch_names_tensor_and_both_shapes():
    hf_model = _hf_llama()
    state = dict(hf_model.state_dict())
    state["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(32, 32)  # as if K = H (no GQA)
    with pytest.raises(ValueError, match=r"tensor 'model.layers.0.self_attn.k_proj.weight' has shape \(32, 32\), "
                                         r"expected \(16, 32\)"):
        from_hf(state, config=hf_model.config)
    gpt2 = _hf_gpt2()
    state = dict(gpt2.state_dict())
    state["transformer.h.0.attn.c_attn.weight"] = state["transformer.h.0.attn.c_attn.weight"].t()  # un-transposed
    with pytest.raises(ValueError, match=r"'transformer.h.0.attn.c_attn.weight' has shape \(96, 32\), expected \(32, 96\)"):
        from_hf(state, config=gpt2.config)


def test_unsupported_options_and_bad_sources(tmp_path):
    with pytest.raises(ValueError, match="unsupported Hugging Face model_type 'bert'"):
        gpt_config_from_hf({"model_type": "bert"})
    with pytest.raises(ValueError, match="RoPE scaling is not supported.*'linear'"):
        gpt_config_from_hf({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2,
                            "rope_scaling": {"rope_type": "linear", "factor": 2.0}})
    with pytest.raises(ValueError, match="attention_bias and mlp_bias must be equal"):
        gpt_config_from_hf({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2,
                            "attention_bias": True, "mlp_bias": False})
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        gpt_config_from_hf({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": True})
    with pytest.raises(ValueError, match="needs config="):
        from_hf({"lm_head.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="no config.json"):
        from_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="has no weights: expected one of"):
        load_hf_folder(tmp_path)


def test_bare_base_model_names_are_accepted():
    """Checkpoints of GPT2Model (keys 'h.0...', 'wte.weight') load like GPT2LMHeadModel ones."""
    hf_model = _hf_gpt2(tied=True)
    bare = {k.removeprefix("transformer."): v for k, v in hf_model.state_dict().items() if k != "lm_head.weight"}
    cfg, sd = state_dict_from_hf(bare, hf_model.config)
    assert cfg.tie_embeddings and torch.equal(sd["wte.weight"], hf_model.transformer.wte.weight)


def test_truncated_safetensors_is_a_clear_error(tmp_path):
    model = build_model(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16))
    save_hf(model, tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match="model.safetensors"):
        from_hf(tmp_path)


class _Payload:
    """An object whose unpickling would run code: a weights file must never be unpickled like this."""

    def __reduce__(self):
        return (print, ("this must never run",))


def test_pickle_with_code_offered_as_weights_is_refused(tmp_path, capsys):
    model = build_model(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16))
    save_hf(model, tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save({"model": _Payload()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pickle|weights_only"):
        from_hf(tmp_path)
    assert "this must never run" not in capsys.readouterr().out


# --------------------------------------------------------------------------- malformed .bin state dicts
def _bin_folder(tmp_path, mutate) -> "Path":
    model = build_model(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16))
    save_hf(model, tmp_path)
    (tmp_path / "model.safetensors").unlink()
    from attnkit.interop.hf import state_dict_to_hf

    _, sd = state_dict_to_hf(model, include_tied=False)
    torch.save(mutate(dict(sd)), tmp_path / "pytorch_model.bin")
    return tmp_path


@pytest.mark.parametrize("mutate, message", [
    (lambda sd: {**sd, "transformer.wte.weight": 5},
     r"pytorch_model.bin must map tensor names to tensors, got int for 'transformer.wte.weight'$"),
    (lambda sd: {**sd, 7: torch.zeros(1)},
     r"pytorch_model.bin must map tensor names \(str\) to tensors, got the key 7 \(int\)$"),
    (lambda sd: {**sd, "transformer.ln_f.weight": [1.0] * 16},
     r"pytorch_model.bin must map tensor names to tensors, got list for 'transformer.ln_f.weight'$"),
    (lambda sd: {k: None for k in sd}, r"got NoneType for 'transformer.wte.weight'$"),
])
def test_bin_with_non_tensor_values_or_non_string_keys_is_a_clear_error(tmp_path, mutate, message):
    # these crashed `finetune --from DIR` with AttributeError ('int' object has no attribute 'shape'/'startswith');
    # `finetune --from DIR` (load_model) now refuses a .bin-only folder without reading it
    from attnkit.interop.load import load_model

    folder = _bin_folder(tmp_path, mutate)
    with pytest.raises(ValueError, match=message):
        load_hf_folder(folder)
    with pytest.raises(ValueError, match="pytorch_model.bin holds pickled weights.*never unpickles"):
        load_model(str(folder))


def test_state_dict_from_hf_names_the_first_bad_entry():
    config, sd = _hf_state_and_config()
    with pytest.raises(ValueError, match=r"^state_dict must map tensor names to tensors, got int for 'transformer.h.0"):
        state_dict_from_hf({**sd, "transformer.h.0.ln_1.weight": 3}, config)
    with pytest.raises(ValueError, match=r"^state_dict must map tensor names \(str\) to tensors, got the key "
                                         r"\('a', 1\) \(tuple\)"):
        state_dict_from_hf({("a", 1): torch.zeros(1), **sd}, config)


def test_float8_weights_load():
    """The finiteness check must not refuse a dtype that has no torch.isfinite (float8_e4m3fn)."""
    config, sd = _hf_state_and_config()
    fp8 = {k: v.to(torch.float8_e4m3fn) if v.is_floating_point() else v for k, v in sd.items()}
    model = from_hf(fp8, config=config)
    assert torch.equal(model.wte.weight, fp8["transformer.wte.weight"].float())


@pytest.mark.parametrize("dtype", [torch.int64, torch.complex64, "float16"])
def test_from_hf_refuses_a_dtype_that_is_not_floating(dtype):
    """Was: a TypeError from deep inside nn.Module.to (int64, "float16"), or a complex model (complex64)."""
    config, sd = _hf_state_and_config()
    with pytest.raises(ValueError, match=rf"^dtype must be a floating torch.dtype or None, got {dtype!r}$"):
        from_hf(sd, config=config, dtype=dtype)


@pytest.mark.parametrize("change, message", [
    (lambda t: t.fill_(float("nan")), r"holds non-finite values \(NaN or inf\); expected finite weights"),
    (lambda t: t.fill_(float("-inf")), r"holds non-finite values \(NaN or inf\); expected finite weights"),
    (lambda t: t.round().to(torch.int64), r"has dtype torch.int64, expected a floating-point dtype"),
    (lambda t: t.to(torch.complex64), r"has dtype torch.complex64, expected a floating-point dtype"),
], ids=["nan", "inf", "int64", "complex64"])
def test_weights_that_are_not_finite_floats_are_refused(tmp_path, change, message):
    """Was: a folder whose weights held NaN loaded silently (every logit NaN), and integer or complex tensors were
    cast into the model's float parameters."""
    from safetensors.torch import load_file, save_file

    folder = save_hf(build_model(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16)),
                     tmp_path / "export")
    sd = load_file(folder / "model.safetensors")
    name = "transformer.h.0.mlp.c_fc.weight"
    sd[name] = change(sd[name].clone())
    save_file(sd, folder / "model.safetensors")
    with pytest.raises(ValueError, match=f"^tensor '{name}' {message}$"):
        from_hf(folder)


def _hf_state_and_config():
    hf_model = _hf_gpt2()
    return hf_model.config, dict(hf_model.state_dict())


# --------------------------------------------------------------------------- file modes
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_save_hf_files_get_the_users_umask(tmp_path, umask):
    import os
    import stat

    model = build_model(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16))
    old = os.umask(umask)
    try:
        save_hf(model, tmp_path / "a")
        save_hf(model, tmp_path / "a")  # written again over the first export
    finally:
        os.umask(old)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["config.json", "model.safetensors"]  # no temporary file left behind
    for name in names:
        assert stat.S_IMODE((tmp_path / "a" / name).stat().st_mode) == 0o666 & ~umask, name  # mkstemp gave 0600


def test_save_hf_leaves_no_file_when_writing_fails(tmp_path, monkeypatch):
    import safetensors.torch

    model = build_model(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16))
    save_hf(model, tmp_path)
    before = (tmp_path / "model.safetensors").read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", broken)
    with torch.no_grad():
        model.wte.weight.add_(1.0)
    with pytest.raises(OSError, match="disk full"):
        save_hf(model, tmp_path)
    assert (tmp_path / "model.safetensors").read_bytes() == before  # the old export is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]


# --------------------------------------------------------------------------- nothing of the user's is overwritten
def _folder_with(tmp_path, files: dict[str, bytes]):
    folder = tmp_path / "theirs"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


@pytest.mark.parametrize("files", [
    {"config.json": b'{"model_type": "llama"}'},
    {"config.json": b'{"model_type": "gpt2"}', "model.safetensors": b"their weights"},
    {"model.safetensors.index.json": b"{}"},
    {"pytorch_model.bin": b"their weights"},
])
def test_save_hf_never_overwrites_another_models_files(tmp_path, files):
    """Was: save_hf wrote over the config.json and model.safetensors of any folder it was given."""
    model = build_model(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16))
    folder = _folder_with(tmp_path, files)
    with pytest.raises(ValueError, match=r"already holds .*not an earlier save_hf export.*choose another folder"):
        save_hf(model, folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files



def test_save_hf_checks_the_folder_a_path_through_a_missing_folder_names(tmp_path):
    """Was: ``save_hf(model, "new/../theirs")`` (``new`` missing) found no files at that spelling, made ``new`` and
    then wrote over ``theirs/config.json`` and ``model.safetensors``, another model's files."""
    model = build_model(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16))
    files = {"config.json": b'{"model_type": "gpt2"}', "model.safetensors": b"their weights"}
    folder = _folder_with(tmp_path, files)
    with pytest.raises(ValueError, match=r"already holds .*not an earlier save_hf export"):
        save_hf(model, tmp_path / "new" / ".." / folder.name)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files and not (tmp_path / "new").exists()
    spelled = tmp_path / "new" / ".." / "export"  # a new folder so spelled is written where the path leads
    assert save_hf(model, spelled) == spelled
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["config.json", "model.safetensors"]

def test_save_hf_refuses_a_checkpoint_folder_and_a_file(tmp_path):
    """Was: save_hf into an attnkit checkpoint folder replaced its model.safetensors with HF-named tensors, and the
    checkpoint no longer loaded."""
    from attnkit.checkpoints.checkpoint import load_checkpoint, save_checkpoint

    model = build_model(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16))
    ckpt = save_checkpoint(tmp_path / "ckpt", model)
    for folder in (ckpt, ckpt / "hf"):  # the checkpoint, and a new folder inside it (a prune would delete it)
        with pytest.raises(ValueError, match="is a file of a training run"):
            save_hf(model, folder)
    assert sorted(p.name for p in ckpt.iterdir()) == ["model.safetensors", "state.json"]
    load_checkpoint(ckpt, build_model(model.config))  # still an attnkit checkpoint
    (tmp_path / "file").write_text("mine")
    with pytest.raises(ValueError, match="save_hf needs a folder, got .*which is a file"):
        save_hf(model, tmp_path / "file")
    assert (tmp_path / "file").read_text() == "mine"


# --------------------------------------------------------------------------- LoRA adapters
def _lora_gpt(kind: str):
    from attnkit.modules.lora import apply_lora

    if kind == "gpt2":
        cfg = GPTConfig(vocab_size=V, block_size=32, n_layer=2, n_head=4, n_embd=32)
        targets = ("qkv_proj", "out_proj")
    else:
        cfg = GPTConfig(vocab_size=V, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=48,
                        position="rope", norm="rmsnorm", activation="swiglu", tie_embeddings=False)
        targets = ("qkv_proj", "out_proj", "w_in", "w_gate", "w_out", "lm_head")
    model = _spread(build_model(cfg))
    apply_lora(model, rank=2, alpha=4.0, targets=targets)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lora_B"):
                p.normal_(0.0, 0.5)  # as after some fine-tuning steps (B starts at zero)
    return model.eval()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_save_hf_and_to_hf_export_merged_lora_weights(kind, tmp_path):
    # the un-merged adapters were dropped: the export computed the frozen base model (logits off by 0.2)
    from attnkit.modules.lora import LoRALinear, lora_state_dict, merge_lora

    model = _lora_gpt(kind)
    adapters = {k: v.clone() for k, v in lora_state_dict(model).items()}
    idx = torch.randint(0, V, (2, 13))
    with torch.no_grad():
        expected = model(idx)
    folder = save_hf(model, tmp_path / "export")
    with torch.no_grad():
        back = from_hf(folder)(idx)
    assert_close(back, expected, "float32")
    assert_close(_logits(to_hf(model), idx), expected, "hf_float32")
    hf_model = (transformers.GPT2LMHeadModel if kind == "gpt2" else transformers.LlamaForCausalLM).from_pretrained(
        str(folder)).eval()
    assert_close(_logits(hf_model, idx), expected, "hf_float32")
    # the model itself still has its adapters, unchanged
    assert any(isinstance(m, LoRALinear) for m in model.modules())
    assert all(torch.equal(v, adapters[k]) for k, v in lora_state_dict(model).items())
    # and the export is exactly what merge_lora gives
    merged = merge_lora(model)
    for name, tensor in merged.state_dict().items():
        assert torch.equal(from_hf(folder).state_dict()[name], tensor), name


def test_export_refuses_tensors_the_hf_layout_has_no_place_for():
    model = build_model(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16))
    model.blocks[0].register_parameter("extra_scale", torch.nn.Parameter(torch.ones(16)))
    with pytest.raises(ValueError, match=r"^cannot export to the Hugging Face gpt2 layout: expected only its tensors, "
                                         r"got 1 more .*'blocks.0.extra_scale'"):
        to_hf(model)


def test_export_of_an_int8_model_says_it_is_quantized(tmp_path):
    """Was: "expected only its tensors, got 18 more ...: 'blocks.0.attn.out_proj.scale', ..." (what the layout
    lacked, not that the model is quantized); nothing is written."""
    from attnkit.modules.quantized_linear import quantize_linear_layers

    model = build_model(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16))
    quantize_linear_layers(model)
    with pytest.raises(ValueError, match=r"^save_hf exports float weights, but \d+ Linear layers of this model are "
                                         r"quantized to int8 \(blocks\.0\.attn\.qkv_proj, \.\.\.\): export the model "
                                         r"before quantize_linear_layers$"):
        save_hf(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_a_weight_beyond_the_range_of_the_requested_dtype_is_refused(tmp_path):
    """Was: from_hf(folder, dtype=torch.float16) of bf16 weights holding 1e5 (finite in bf16) cast it to inf
    silently, and every logit was NaN; the same weights given already in float16 were refused."""
    from safetensors.torch import load_file, save_file

    model = build_model(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16)).to(torch.bfloat16)
    folder = save_hf(model, tmp_path / "export")
    sd = load_file(folder / "model.safetensors")
    sd["transformer.h.0.mlp.c_fc.weight"][0, 0] = 1e5
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"^tensor 'blocks.0.mlp.w_in.weight' does not fit dtype=torch.float16: "
                                         r"expected magnitudes up to its largest finite value 65504, got 99840 "):
        from_hf(folder, dtype=torch.float16)
    assert from_hf(folder, dtype=torch.bfloat16).blocks[0].mlp.w_in.weight[0, 0].item() == 99840


# --------------------------------------------------------------------------- an export with its tokenizer
_CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _bpe_tokenizer():
    return tiny_bpe_tokenizer(bos="<|im_start|>", pad="<|endoftext|>")


def test_save_hf_with_tokenizer_is_a_folder_attnkit_and_transformers_load(tmp_path):
    """Was: save_hf wrote only config.json + model.safetensors, so the export that docs/finetune.md shows
    (``save_hf(load("runs/ft").model, "runs/ft/hf")``) could not be read back by ``finetune --from`` / load_model
    ("without tokenizer.json; pass --tokenizer FILE") nor tokenized by transformers, and its config.json had no
    eos_token_id (transformers' generate did not stop)."""
    from attnkit.interop.load import load_model

    tok = _bpe_tokenizer()
    model = _spread(build_model(GPTConfig(vocab_size=tok.vocab_size, block_size=32, n_layer=1, n_head=2, n_kv_head=1,
                                          n_embd=16, ffn_hidden=32, activation="swiglu", norm="rmsnorm", bias=False,
                                          position="rope", tie_embeddings=True)))
    folder = save_hf(model, tmp_path / "export", tokenizer=tok, chat_template=_CHAT)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json",
                                                        "tokenizer_config.json"]
    config = json.loads((folder / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (tok.bos_id, tok.eos_id,
                                                                                         tok.pad_id)
    text = "line 7: the cat ran away."
    ids = torch.tensor([tok.encode(text)])
    loaded = load_model(str(folder))  # what `attnkit finetune --from FOLDER` reads
    assert loaded.tokenizer.encode(text) == ids[0].tolist()
    assert (loaded.tokenizer.bos_id, loaded.tokenizer.eos_id, loaded.tokenizer.pad_id) == (tok.bos_id, tok.eos_id,
                                                                                             tok.pad_id)
    assert loaded.chat_template == _CHAT and loaded.stop_ids == [tok.eos_id]
    with torch.no_grad():
        assert torch.equal(loaded.model(ids), model(ids))
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert hf_tok(text)["input_ids"] == ids[0].tolist()
    assert (hf_tok.bos_token, hf_tok.eos_token, hf_tok.pad_token) == ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
    messages = [{"role": "user", "content": "Hi"}]
    assert hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == loaded.format_chat("Hi")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    assert hf_model.generation_config.eos_token_id == tok.eos_id
    with torch.no_grad():
        assert_close(hf_model(ids).logits, model(ids), "hf_float32")
    save_hf(model, folder, tokenizer=tok)  # an earlier export, tokenizer files included, is replaced
    assert "chat_template" not in json.loads((folder / "tokenizer_config.json").read_text())


def test_save_hf_keeps_the_stop_ids_and_the_bos_convention(tmp_path):
    """Was: save_hf had no way to export a run's ``prompting``: generation_config.json was not written, so
    transformers' generate stopped only at ``<eos>`` (not at the other end-of-turn ids the run stops at), and a
    model whose prompts start with ``<bos>`` was exported without ``add_bos_token`` (AutoTokenizer added none)."""
    from attnkit.interop.load import load_model

    tok = _bpe_tokenizer()
    model = build_model(GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2, n_kv_head=1,
                                  n_embd=16, ffn_hidden=32, activation="swiglu", norm="rmsnorm", bias=False,
                                  position="rope"))
    stops = [tok.eos_id, tok.token_to_id("<|endoftext|>")]
    folder = save_hf(model, tmp_path / "export", tokenizer=tok, stop_token_ids=stops, add_bos=True)
    generation = transformers.GenerationConfig.from_pretrained(str(folder))
    assert (generation.eos_token_id, generation.bos_token_id, generation.pad_token_id) == (stops, tok.bos_id,
                                                                                           tok.pad_id)
    assert transformers.AutoModelForCausalLM.from_pretrained(str(folder)).generation_config.eos_token_id == stops
    assert json.loads((folder / "tokenizer_config.json").read_text())["add_bos_token"] is True
    text = "the cat sat."
    assert transformers.AutoTokenizer.from_pretrained(str(folder))(text)["input_ids"] == [tok.bos_id, *tok.encode(text)]
    loaded = load_model(str(folder))  # attnkit reads the convention back, and its encode adds no <bos> itself
    assert loaded.add_bos is True and loaded.tokenizer.encode(text) == tok.encode(text)
    save_hf(model, folder, tokenizer=tok, stop_token_ids=stops[:1], add_bos=False)  # the earlier export, replaced
    assert transformers.GenerationConfig.from_pretrained(str(folder)).eos_token_id == tok.eos_id
    assert transformers.AutoTokenizer.from_pretrained(str(folder))(text)["input_ids"] == tok.encode(text)
    assert load_model(str(folder)).add_bos is False
    with pytest.raises(ValueError, match=r"stop_token_ids=\) must be a non-empty list of token ids in \[0, \d+\), "
                                         r"got \[1, 100000\]"):
        save_hf(model, tmp_path / "a", tokenizer=tok, stop_token_ids=[1, 100000])
    with pytest.raises(ValueError, match=r"add_bos=\) needs tokenizer= too .*got add_bos=True and tokenizer=None"):
        save_hf(model, tmp_path / "a", add_bos=True)
    assert not (tmp_path / "a").exists()
    folder = save_hf(model, tmp_path / "b", stop_token_ids=stops)  # stop ids alone: no tokenizer files
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "generation_config.json", "model.safetensors"]


def test_save_hf_tokenizer_refusals_write_nothing(tmp_path):
    from attnkit.data.tokenizers.char_tokenizer import CharTokenizer

    tok = _bpe_tokenizer()
    model = build_model(GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=16))
    files = {"tokenizer.json": b"their tokenizer", "tokenizer_config.json": b"{}"}
    folder = _folder_with(tmp_path, files)
    with pytest.raises(ValueError, match=r"already holds tokenizer.json, tokenizer_config.json, not part of an "
                                         r"earlier save_hf export"):
        save_hf(model, folder, tokenizer=tok)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files
    with pytest.raises(ValueError, match=r"chat_template=\) needs tokenizer= too.*got tokenizer=None"):
        save_hf(model, tmp_path / "a", chat_template=_CHAT)
    with pytest.raises(ValueError, match="needs a byte-level BPE tokenizer.*got CharTokenizer"):
        save_hf(model, tmp_path / "a", tokenizer=CharTokenizer.train("abc"))
    small = build_model(GPTConfig(vocab_size=200, block_size=16, n_layer=1, n_head=2, n_embd=16))
    with pytest.raises(ValueError, match=r"the tokenizer has \d+ tokens but the model only 200 embeddings"):
        save_hf(small, tmp_path / "a", tokenizer=tok)
    assert not (tmp_path / "a").exists()


# --------------------------------------------------------------------------- replacing an earlier export
def _llama_like(vocab_size: int, **overrides) -> GPT:
    return _spread(build_model(GPTConfig(**{**dict(vocab_size=vocab_size, block_size=16, n_layer=1, n_head=2,
                                                   n_embd=16, ffn_hidden=32, activation="swiglu", norm="rmsnorm",
                                                   bias=False, position="rope"), **overrides})))


def test_save_hf_re_export_removes_the_earlier_exports_files_and_only_those(tmp_path):
    """Was: exporting again without tokenizer= (or stop_token_ids= / add_bos=) into an earlier export left its
    tokenizer.json, tokenizer_config.json and generation_config.json beside the new weights, and load_model (as
    transformers) paired the new model with the old tokenizer, stop ids and <bos> convention."""
    from attnkit.interop.load import load_model

    tok = _bpe_tokenizer()
    folder = tmp_path / "export"
    save_hf(_llama_like(tok.vocab_size), folder, tokenizer=tok, chat_template=_CHAT,
            stop_token_ids=[tok.eos_id, tok.pad_id], add_bos=True)
    (folder / "README.md").write_text("my notes")  # not an export file: it stays
    assert load_model(str(folder)).stop_ids == [tok.eos_id, tok.pad_id]
    save_hf(_llama_like(tok.vocab_size), folder, tokenizer=tok)  # no stop ids, no add_bos: no generation config
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors",
                                                        "tokenizer.json", "tokenizer_config.json"]
    loaded = load_model(str(folder))
    assert loaded.stop_ids == [tok.eos_id] and loaded.add_bos is False and loaded.chat_template is None
    model = _llama_like(tok.vocab_size, rope_theta=500.0)
    save_hf(model, folder)  # no tokenizer: the earlier export's tokenizer files go too
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert (folder / "README.md").read_text() == "my notes"
    with pytest.raises(ValueError, match="without tokenizer.json"):
        load_model(str(folder))
    assert from_hf(folder).config.rope_theta == 500.0
    # files no export wrote stay: a tokenizer put beside an export without one, a folder that held no export
    tok.backend.save(str(folder / "tokenizer.json"))
    save_hf(model, folder)
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors",
                                                        "tokenizer.json"]
    mine = (folder / "tokenizer.json").read_bytes()
    with pytest.raises(ValueError, match="already holds tokenizer.json, not part of an earlier save_hf export"):
        save_hf(model, folder, tokenizer=tok)  # the user's tokenizer beside it is not the export's to replace
    assert (folder / "tokenizer.json").read_bytes() == mine and not (folder / "tokenizer_config.json").exists()
    theirs = _folder_with(tmp_path, {"generation_config.json": b'{"eos_token_id": 3}'})
    save_hf(model, theirs)
    assert (theirs / "generation_config.json").read_bytes() == b'{"eos_token_id": 3}'


def test_save_hf_export_of_an_earlier_attnkit_counts_as_having_written_its_tokenizer_files(tmp_path):
    """An export written before exports listed their files (no ``files`` in its metadata) keeps being replaceable
    as a whole: a re-export with a tokenizer replaces its tokenizer files, one without removes them."""
    from safetensors.torch import load_file, save_file

    tok = _bpe_tokenizer()
    folder = tmp_path / "export"
    save_hf(_llama_like(tok.vocab_size), folder, tokenizer=tok, stop_token_ids=[tok.eos_id])
    weights = folder / "model.safetensors"
    save_file(load_file(str(weights)), str(weights), metadata={"format": "pt", "writer": "attnkit.save_hf"})
    save_hf(_llama_like(tok.vocab_size), folder, tokenizer=tok)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json",
                                                        "tokenizer_config.json"]
    save_file(load_file(str(weights)), str(weights), metadata={"format": "pt", "writer": "attnkit.save_hf"})
    save_hf(_llama_like(tok.vocab_size), folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("first", [False, True], ids=["re-export", "first-export"])
@pytest.mark.parametrize("crash_at", ["model.safetensors", "tokenizer.json", "config.json"])
def test_save_hf_interrupted_export_refuses_to_load_and_a_rerun_completes_it(tmp_path, monkeypatch, first,
                                                                             crash_at):
    """Was: each file was replaced atomically but the export was not: a crash after the new model.safetensors
    and before config.json left new weights with the old config.json (loaded silently, with the old rope_theta
    and norm eps), and after a first export's weights a folder that save_hf refused to write into again."""
    import os

    tok = _bpe_tokenizer()
    folder = tmp_path / "export"
    if not first:
        save_hf(_llama_like(tok.vocab_size), folder, tokenizer=tok, stop_token_ids=[tok.eos_id])
    model = _llama_like(tok.vocab_size, rope_theta=500.0, norm_eps=1e-3)
    replace = os.replace

    def crash(src, dst):  # the process dies as this file is put in place
        if os.path.basename(dst) == crash_at:
            raise KeyboardInterrupt("killed")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        save_hf(model, folder, tokenizer=tok)
    monkeypatch.setattr(os, "replace", replace)
    assert not (folder / "config.json").exists()  # neither the old config with the new weights, nor a mix
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # no temporary file left
    hint = ": an interrupted save_hf export \\(run save_hf again\\)" if (folder / "model.safetensors").exists() else "$"
    with pytest.raises(ValueError, match=f"has no config.json{hint}"):
        from_hf(folder)
    if (folder / "model.safetensors").exists():  # what sample / finetune --from say (was: "not a model folder")
        from attnkit.interop.load import load_model

        with pytest.raises(ValueError, match=f"has no config.json{hint}"):
            load_model(str(folder))
    assert save_hf(model, folder, tokenizer=tok) == folder  # the re-run is not refused, and completes the export
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json",
                                                        "tokenizer_config.json"]
    ids = torch.tensor([tok.encode("the cat sat.")])
    with torch.no_grad():
        assert torch.equal(from_hf(folder)(ids), model(ids))


def test_save_hf_failure_while_writing_leaves_the_earlier_export_whole(tmp_path, monkeypatch):
    """A write that fails before anything is replaced (here config.json's, the last) leaves the earlier export
    exactly as it was: was its new model.safetensors beside the old config.json."""
    import attnkit.interop.hf as hf

    tok = _bpe_tokenizer()
    folder = save_hf(_llama_like(tok.vocab_size), tmp_path / "export", tokenizer=tok)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    write_atomic = hf.write_atomic

    def failing(path, write):
        if "config.json" in str(path) and "tokenizer" not in str(path):
            raise OSError("disk full")
        write_atomic(path, write)

    monkeypatch.setattr(hf, "write_atomic", failing)
    with pytest.raises(OSError, match="disk full"):
        save_hf(_llama_like(tok.vocab_size, rope_theta=500.0), folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


@pytest.mark.parametrize("with_config", [True, False], ids=["model", "weights-only"])
def test_save_hf_never_overwrites_safetensors_another_writer_saved(tmp_path, with_config):
    """Only a model.safetensors whose metadata names save_hf as its writer is an earlier export: transformers'
    save_pretrained writes {"format": "pt"}, and its folder (or its weights alone) is the user's model."""
    from safetensors.torch import save_file

    folder = tmp_path / "theirs"
    folder.mkdir()
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if with_config:
        (folder / "config.json").write_text('{"model_type": "llama"}')
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(ValueError, match=r"already holds .*not an earlier save_hf export"):
        save_hf(_llama_like(V), folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


@pytest.mark.parametrize("files", ["not json", json.dumps("tokenizer.json tokenizer_config.json")])
def test_save_hf_export_with_an_unreadable_file_list_removes_no_tokenizer_file(tmp_path, files):
    """An export whose metadata lists its files in a form save_hf cannot read (not JSON, not a list) counts as having
    written none of the optional ones: a re-export removes no tokenizer file (it might be the user's)."""
    from safetensors.torch import load_file, save_file

    tok = _bpe_tokenizer()
    folder = save_hf(_llama_like(tok.vocab_size), tmp_path / "export", tokenizer=tok)
    weights = folder / "model.safetensors"
    save_file(load_file(str(weights)), str(weights), metadata={"format": "pt", "writer": "attnkit.save_hf",
                                                                "files": files})
    save_hf(_llama_like(tok.vocab_size), folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json",
                                                        "tokenizer_config.json"]


def test_save_hf_re_export_syncs_each_step_before_the_next(tmp_path, monkeypatch):
    """The order that makes a crash leave the old export, the new one or a folder without config.json: the old
    config.json and the files dropped are removed and that made durable, the new files put in place and that made
    durable, then config.json put in place and made durable."""
    import os
    import pathlib

    import attnkit.interop.hf as hf

    tok = _bpe_tokenizer()
    folder = save_hf(_llama_like(tok.vocab_size), tmp_path / "export", tokenizer=tok, stop_token_ids=[tok.eos_id])
    events = []
    replace, unlink, fsync_dir = os.replace, pathlib.Path.unlink, hf.fsync_dir

    def recording_replace(src, dst):
        if not os.path.basename(dst).startswith("."):
            events.append(("replace", os.path.basename(dst)))
        replace(src, dst)

    def recording_unlink(path, missing_ok=False):
        if not path.name.startswith("."):
            events.append(("unlink", path.name))
        unlink(path, missing_ok=missing_ok)

    def recording_fsync_dir(path):
        events.append(("fsync", os.path.realpath(path)))
        fsync_dir(path)

    monkeypatch.setattr(os, "replace", recording_replace)
    monkeypatch.setattr(pathlib.Path, "unlink", recording_unlink)
    monkeypatch.setattr(hf, "fsync_dir", recording_fsync_dir)
    save_hf(_llama_like(tok.vocab_size), folder)  # no tokenizer: the earlier one's files go
    synced = ("fsync", os.path.realpath(folder))
    assert events == [("unlink", "config.json"), ("unlink", "tokenizer.json"), ("unlink", "tokenizer_config.json"),
                      ("unlink", "generation_config.json"), synced, ("replace", "model.safetensors"), synced,
                      ("replace", "config.json"), synced]


def test_save_hf_re_export_writes_through_a_symbolic_link(tmp_path, monkeypatch):
    """A model.safetensors that is a symbolic link (weights kept on another disk) stays one: the file it points to
    is replaced, and that file's folder is synced too."""
    import os

    import attnkit.interop.hf as hf

    store, folder = tmp_path / "store", tmp_path / "export"
    store.mkdir()
    save_hf(_llama_like(V), folder)
    (folder / "model.safetensors").rename(store / "weights.safetensors")
    (folder / "model.safetensors").symlink_to(store / "weights.safetensors")
    synced = []
    fsync_dir = hf.fsync_dir
    monkeypatch.setattr(hf, "fsync_dir", lambda path: (synced.append(os.path.realpath(path)), fsync_dir(path)))
    model = _llama_like(V, rope_theta=500.0)
    save_hf(model, folder)
    assert os.readlink(folder / "model.safetensors") == str(store / "weights.safetensors")
    assert sorted(p.name for p in store.iterdir()) == ["weights.safetensors"]  # no temporary file left
    assert os.path.realpath(store) in synced
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(from_hf(folder)(ids), model(ids))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_config_defaults_follow_transformers_for_omitted_keys(family):
    """A config.json that leaves out tie_word_embeddings or layer_norm_epsilon (GPT-2's own file has neither) means
    transformers' defaults: GPT-2 tied with eps 1e-5, Llama untied."""
    ref = transformers.GPT2Config() if family == "gpt2" else transformers.LlamaConfig()
    minimal = {"model_type": family}
    if family == "llama":
        minimal.update(hidden_size=32, num_attention_heads=4, intermediate_size=40, num_hidden_layers=1, vocab_size=10)
    got = gpt_config_from_hf(minimal)
    assert got.tie_embeddings is ref.tie_word_embeddings
    eps = ref.layer_norm_epsilon if family == "gpt2" else ref.rms_norm_eps
    assert got.norm_eps == eps


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_export_keeps_a_non_default_norm_eps(family):
    import dataclasses

    base = gpt_config_from_hf(_hf_gpt2().config if family == "gpt2" else _hf_llama(head_dim=16).config)
    cfg = dataclasses.replace(base, norm_eps=3e-6)
    hf = hf_config_from_gpt(cfg)
    assert hf["layer_norm_epsilon" if family == "gpt2" else "rms_norm_eps"] == 3e-6
    assert gpt_config_from_hf(hf) == cfg
