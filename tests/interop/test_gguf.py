"""GGUF reading on small files written here with gguf.GGUFWriter: a tiny random Llama in F32/F16/Q8_0/Q4_1
(compared against transformers' LlamaForCausalLM holding the same weights), its tokenizer and chat template,
and one test per bad-input rule (truncated file, unsupported tensor type, pickle, ...).

The files are written the way llama.cpp's converter writes them, including its q/k row permutation, which is
re-implemented here independently of attnkit.interop.gguf so that the un-permutation is really checked.
"""

from __future__ import annotations

import pickle

import gguf
import numpy as np
import pytest
import torch
from gguf.constants import GGMLQuantizationType as Q

from attnkit.data.tokenizers.bpe_tokenizer import bytes_to_unicode
from attnkit.interop import gguf as g

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

# A tiny Llama: every weight has a column count that is a multiple of 32 (the Q4_1/Q8_0 block size).
TINY = dict(vocab_size=0, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=128, rms_norm_eps=1e-5,
            rope_theta=5000.0, tie_word_embeddings=False, hidden_act="silu")

# A tiny byte-level BPE vocabulary: 3 control tokens, the 256 byte characters, 5 merges.
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a"]
TOKENS = SPECIALS + list(bytes_to_unicode().values()) + ["Ġt", "he", "Ġthe", "in", "Ġa"]
CHAT = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

HF_TO_GGUF_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def llama_cpp_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """What llama.cpp's HF->GGUF converter does to q/k rows: pair (i, i + D/2) becomes rows (2i, 2i + 1)."""
    D = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, D // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_to_gguf_name(name: str) -> str:
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if name in fixed:
        return fixed[name]
    _, _, i, rest = name.split(".", 3)
    return f"blk.{i}.{HF_TO_GGUF_LAYER[rest]}"


def tiny_hf_model(tie: bool = False, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(**{**TINY, "vocab_size": len(TOKENS), "tie_word_embeddings": tie,
                         "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2})
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # fresh random values everywhere, norms included (they start as ones)
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if "norm" in name else 0.2 * torch.randn_like(p))
    return model


K_QUANTS = (Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K)


def random_blocks(rows: int, cols: int, qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """Random k-quant blocks (gguf cannot quantize to these in NumPy). Any bytes are valid quantized data; only
    the float16 scale fields must be finite: clearing bit 14 of every 16-bit word keeps each f16 below 2 in size
    (all the f16 fields of these block layouts sit at even offsets)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, cols // block * size), dtype=np.uint8)
    raw.view(np.uint16)[...] &= np.uint16(0xBFFF)
    return raw


def write_gguf(path, model: LlamaForCausalLM, *, qtype: Q = Q.F32, arch: str = "llama", tokenizer: bool = True,
               drop: tuple[str, ...] = (), extra: dict[str, np.ndarray] | None = None, meta_overrides=None,
               nan_in: str | None = None, raw_out: dict | None = None):
    """Write `model` as llama.cpp would: q/k rows permuted, 2-D weights in `qtype`, 1-D norms in F32.

    For the k-quants the 2-D weights are random blocks instead (stored into `raw_out` by GGUF name)."""
    cfg = model.config
    w = gguf.GGUFWriter(str(path), arch)
    p = arch
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_vocab_size(cfg.vocab_size)
    for key, value in (meta_overrides or {}).items():
        w.add_string(f"{p}.{key}", value) if isinstance(value, str) else w.add_uint32(f"{p}.{key}", value)
    if tokenizer:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(TOKENS)
        w.add_token_types([3] * len(SPECIALS) + [1] * (len(TOKENS) - len(SPECIALS)))
        w.add_token_merges(MERGES)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_pad_token_id(2)
        w.add_add_bos_token(False)
        w.add_chat_template(CHAT)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    for name, arr in sd.items():
        if name in drop:
            continue
        if name.endswith("q_proj.weight"):
            arr = llama_cpp_permute(arr, cfg.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            arr = llama_cpp_permute(arr, cfg.num_key_value_heads)
        if name == nan_in:
            arr = arr.copy()
            arr[0, 0] = np.nan
        gname = hf_to_gguf_name(name)
        if arr.ndim == 1 or qtype == Q.F32:
            w.add_tensor(gname, arr)
        elif qtype == Q.F16:
            w.add_tensor(gname, arr.astype(np.float16))
        elif qtype in K_QUANTS:
            raw = random_blocks(*arr.shape, qtype, np.random.default_rng(len(gname)))
            raw_out[gname] = raw
            w.add_tensor(gname, raw, raw_dtype=qtype)
        else:
            w.add_tensor(gname, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
    for gname, arr in (extra or {}).items():
        w.add_tensor(gname, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def quantized_reference(model: LlamaForCausalLM, qtype: Q) -> dict[str, torch.Tensor]:
    """HF weights after a quantize -> dequantize round trip (rows are quantized independently, so the
    q/k row permutation does not change the values)."""
    out = {}
    for name, t in model.state_dict().items():
        arr = t.detach().numpy().astype(np.float32)
        if arr.ndim == 2 and qtype != Q.F32:
            if qtype == Q.F16:
                arr = arr.astype(np.float16).astype(np.float32)
            else:
                arr = gguf.quants.dequantize(gguf.quants.quantize(arr, qtype), qtype)
        out[name] = torch.from_numpy(np.ascontiguousarray(arr))
    return out


@pytest.fixture(scope="module")
def hf_model():
    return tiny_hf_model()


@pytest.fixture(scope="module")
def f32_file(hf_model, tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny-f32.gguf", hf_model)


# --------------------------------------------------------------------------------------------------------
# the permutation
# --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_heads,D", [(4, 16), (3, 64), (1, 2)])
def test_unpermute_inverts_llama_cpp_permutation(n_heads, D):
    w = np.random.default_rng(n_heads).standard_normal((n_heads * D, 24)).astype(np.float32)
    permuted = llama_cpp_permute(w, n_heads)
    if D > 2:  # with D = 2 the permutation is the identity
        assert not np.array_equal(permuted, w)
    np.testing.assert_array_equal(g.unpermute_rotary_rows(permuted, n_heads), w)
    # torch tensors work too
    assert torch.equal(g.unpermute_rotary_rows(torch.from_numpy(permuted), n_heads), torch.from_numpy(w))


def test_unpermute_rejects_odd_head_size():
    with pytest.raises(ValueError, match="n_heads = 4 heads of even size, got 36 rows"):
        g.unpermute_rotary_rows(np.zeros((36, 8)), 4)


# --------------------------------------------------------------------------------------------------------
# reading a valid file
# --------------------------------------------------------------------------------------------------------

def test_config_from_metadata(f32_file, hf_model):
    ckpt = g.load_gguf(f32_file, progress=False)
    cfg = ckpt.config
    expected = {"vocab_size": len(TOKENS), "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 128,
                "rope_theta": 5000.0, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
                "pad_token_id": 2, "model_type": "llama"}
    assert {k: cfg[k] for k in expected} == expected
    assert cfg["rms_norm_eps"] == pytest.approx(1e-5, rel=1e-6)  # stored as float32 in the file
    hf_cfg = LlamaConfig(**cfg)  # transformers accepts the dict as is
    assert hf_cfg.rope_parameters["rope_theta"] == 5000.0 and hf_cfg.num_key_value_heads == 2
    assert ckpt.tensor_types == {"F32": 2 * 9 + 3}


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1])
def test_weights_match_hf_after_quantization(hf_model, tmp_path, qtype):
    path = write_gguf(tmp_path / f"tiny-{qtype.name}.gguf", hf_model, qtype=qtype)
    ckpt = g.load_gguf(path, progress=False)
    ref = quantized_reference(hf_model, qtype)
    assert set(ckpt.state_dict) == set(ref)
    for name, t in ckpt.state_dict.items():
        assert t.dtype == torch.float32
        # exact: the file's values dequantized, with the q/k rows put back in HF order
        assert torch.equal(t, ref[name]), name
    if qtype != Q.F32:  # and the quantization error is what the format promises, no more
        err = (ckpt.state_dict["model.layers.0.mlp.up_proj.weight"]
               - hf_model.state_dict()["model.layers.0.mlp.up_proj.weight"]).abs().max().item()
        bound = {Q.F16: 1e-3, Q.BF16: 0.01, Q.Q8_0: 0.01, Q.Q4_0: 0.15, Q.Q4_1: 0.1, Q.Q5_0: 0.06, Q.Q5_1: 0.05}[qtype]
        assert 0 < err < bound


@pytest.mark.parametrize("qtype", [Q.F32, Q.Q4_1])
def test_hf_llama_from_gguf_reproduces_logits(hf_model, tmp_path, qtype):
    """transformers' LlamaForCausalLM built from our config + state dict equals one holding the reference
    (quantize->dequantize) weights: max|a - b| / max|b| <= 1e-6 (F32: the original model exactly)."""
    path = write_gguf(tmp_path / "m.gguf", hf_model, qtype=qtype)
    ckpt = g.load_gguf(path, progress=False)
    rebuilt = LlamaForCausalLM(LlamaConfig(**ckpt.config)).eval()
    rebuilt.load_state_dict(ckpt.state_dict, strict=True)
    ref = tiny_hf_model()
    ref.load_state_dict(quantized_reference(hf_model, qtype))
    ids = torch.randint(0, len(TOKENS), (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = rebuilt(ids).logits, ref(ids).logits
    assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-6


@pytest.mark.parametrize("qtype", K_QUANTS)
def test_k_quants_dequantize_like_gguf(tmp_path, qtype):
    """k-quant tensors (256-value super-blocks) come out as gguf's reference dequantization, q/k rows un-permuted."""
    torch.manual_seed(0)
    wide = {"hidden_size": 256, "intermediate_size": 256, "head_dim": 64}
    model = LlamaForCausalLM(LlamaConfig(**{**TINY, "vocab_size": len(TOKENS), **wide})).eval()
    raw: dict[str, np.ndarray] = {}
    path = write_gguf(tmp_path / f"{qtype.name}.gguf", model, qtype=qtype, raw_out=raw)
    ckpt = g.load_gguf(path, progress=False)
    assert ckpt.tensor_types[qtype.name] == len(raw) == 2 * 7 + 2
    for name, t in ckpt.state_dict.items():
        gname = hf_to_gguf_name(name)
        if gname not in raw:
            continue
        ref = gguf.quants.dequantize(raw[gname], qtype)
        got = t.numpy()
        if gname.endswith("attn_q.weight"):
            got = llama_cpp_permute(got, 4)
        elif gname.endswith("attn_k.weight"):
            got = llama_cpp_permute(got, 2)
        np.testing.assert_array_equal(got, ref)
        assert np.isfinite(got).all() and got.std() > 0


def test_tied_embeddings_have_no_lm_head(tmp_path):
    model = tiny_hf_model(tie=True, seed=3)
    ckpt = g.load_gguf(write_gguf(tmp_path / "tied.gguf", model), progress=False)
    assert ckpt.config["tie_word_embeddings"] is True
    assert "lm_head.weight" not in ckpt.state_dict


def test_gguf_to_gpt_matches_hf(hf_model, f32_file):
    """attnkit's GPT from the GGUF file (through attnkit.interop.hf.from_hf) computes the HF model's logits."""
    model, ckpt = g.gguf_to_gpt(f32_file, progress=False)
    assert not model.training
    ids = torch.randint(0, len(TOKENS), (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        a, b = model(ids), hf_model(ids).logits
    assert ((a - b).abs().max() / b.abs().max()).item() <= 1e-5


def test_tokenizer_from_metadata(f32_file):
    tok = g.load_gguf(f32_file, progress=False).tokenizer
    assert (tok.vocab_size, tok.bos_id, tok.eos_id, tok.pad_id) == (len(TOKENS), 1, 2, 2)
    ids = tok.encode(" the in a")
    # merges applied: " the" -> Ġthe, "in" (after its own leading-space piece), " a" -> Ġa
    assert [tok.id_to_token(i) for i in ids] == ["Ġthe", "Ġ", "in", "Ġa"]
    # control tokens written in the text are single ids
    text = "<|im_start|>user\nhi<|im_end|>"
    ids = tok.encode(text)
    assert ids[0] == 1 and ids[-1] == 2 and tok.decode(ids) == text
    assert tok.decode(ids, skip_special_tokens=True) == "user\nhi"
    # byte-level: any text round-trips
    weird = "naïve 日本 🤖\t\n  x"
    assert tok.decode(tok.encode(weird)) == weird


def test_chat_template_and_bos_flag_are_read(f32_file):
    ckpt = g.load_gguf(f32_file, progress=False)
    assert ckpt.chat_template == CHAT
    assert ckpt.add_bos_token is False


def test_dtype_option(f32_file):
    ckpt = g.load_gguf(f32_file, dtype=torch.bfloat16, progress=False)
    assert {t.dtype for t in ckpt.state_dict.values()} == {torch.bfloat16}


def test_a_value_beyond_the_range_of_the_requested_dtype_is_named(tmp_path):
    """Was: a finite F32 weight of 1e5 loaded with dtype=torch.float16 became inf, and the file was called damaged
    ("holds non-finite values (NaN or inf)"); now the dtype is named as the reason."""
    model = tiny_hf_model(seed=1)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[0, 0] = 1e5
    path = write_gguf(tmp_path / "big.gguf", model)
    with pytest.raises(ValueError, match=r"^GGUF tensor 'blk.0.ffn_down.weight' does not fit dtype=torch.float16: "
                                         r"expected magnitudes up to its largest finite value 65504, got 100000; "):
        g.load_gguf(path, dtype=torch.float16, progress=False)
    assert g.load_gguf(path, dtype=torch.bfloat16, progress=False).state_dict[
        "model.layers.0.mlp.down_proj.weight"][0, 0].item() == 99840


def test_gguf_to_hf_name():
    assert g.gguf_to_hf_name("blk.12.ffn_gate.weight") == "model.layers.12.mlp.gate_proj.weight"
    assert g.gguf_to_hf_name("token_embd.weight") == "model.embed_tokens.weight"
    with pytest.raises(ValueError, match="unsupported GGUF tensor 'blk.0.attn_q.bias'"):
        g.gguf_to_hf_name("blk.0.attn_q.bias")


# --------------------------------------------------------------------------------------------------------
# bad inputs: one test per rule
# --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("keep", [3, 40, 0.3, 0.97])
def test_truncated_file_is_a_value_error(f32_file, tmp_path, keep):
    data = f32_file.read_bytes()
    n = keep if isinstance(keep, int) else int(len(data) * keep)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:n])
    with pytest.raises(ValueError, match="truncated"):
        g.load_gguf(cut, progress=False)


@pytest.mark.parametrize("qtype", [Q.MXFP4, Q.TQ1_0])
def test_unsupported_tensor_type_is_named(tmp_path, qtype):
    # TQ1_0 (ternary) packs rows of 256 values, so that case uses a wider tiny model
    width = {"hidden_size": 256, "intermediate_size": 256, "head_dim": 64} if qtype == Q.TQ1_0 else {}
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**{**TINY, "vocab_size": len(TOKENS), **width})).eval()
    path = write_gguf(tmp_path / "odd.gguf", model, qtype=qtype)
    with pytest.raises(ValueError, match=f"unsupported GGUF tensor type {qtype.name} for tensor"):
        g.load_gguf(path, progress=False)


def test_pickle_is_refused(tmp_path, hf_model):
    pt = tmp_path / "model.pt"
    torch.save(hf_model.state_dict(), pt)
    with pytest.raises(ValueError, match="refuses to load pickled weights"):
        g.load_gguf(pt, progress=False)
    raw = tmp_path / "model.pkl"
    raw.write_bytes(pickle.dumps({"w": [1.0, 2.0]}))
    with pytest.raises(ValueError, match="Python pickle"):
        g.check_gguf_file(raw)


def test_not_gguf_magic(tmp_path):
    p = tmp_path / "notes.gguf"
    p.write_text("hello, I am text")
    with pytest.raises(ValueError, match=r"expected the magic bytes b'GGUF' at offset 0, got b'hell'"):
        g.load_gguf(p, progress=False)


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        g.load_gguf("/nonexistent/model.gguf")


def test_unsupported_architecture(tmp_path, hf_model):
    path = write_gguf(tmp_path / "gpt2.gguf", hf_model, arch="gpt2")
    with pytest.raises(ValueError, match=r"unsupported GGUF architecture 'gpt2'; supported: \['llama'\]"):
        g.load_gguf(path, progress=False)


def test_missing_tensor(tmp_path, hf_model):
    path = write_gguf(tmp_path / "missing.gguf", hf_model, drop=("model.layers.1.mlp.up_proj.weight",))
    with pytest.raises(ValueError, match="lacks 1 tensors of a 2-layer Llama"):
        g.load_gguf(path, progress=False)


def test_unknown_tensor(tmp_path, hf_model):
    path = write_gguf(tmp_path / "extra.gguf", hf_model, extra={"rope_freqs.weight": np.ones(8, np.float32)})
    with pytest.raises(ValueError, match="unsupported GGUF tensor 'rope_freqs.weight'"):
        g.load_gguf(path, progress=False)


def test_wrong_tensor_shape(tmp_path, hf_model):
    path = write_gguf(tmp_path / "shape.gguf", hf_model, meta_overrides={"feed_forward_length": 128})
    with pytest.raises(ValueError, match=r"must have shape \(128, 64\) .* got \(96, 64\)"):
        g.load_gguf(path, progress=False)


def test_non_finite_weights(tmp_path, hf_model):
    path = write_gguf(tmp_path / "nan.gguf", hf_model, nan_in="model.layers.0.mlp.down_proj.weight")
    with pytest.raises(ValueError, match="non-finite values"):
        g.load_gguf(path, progress=False)


def test_rope_scaling_unsupported(tmp_path, hf_model):
    path = write_gguf(tmp_path / "yarn.gguf", hf_model, meta_overrides={"rope.scaling.type": "yarn"})
    with pytest.raises(ValueError, match="RoPE scaling is not supported.*'yarn'"):
        g.load_gguf(path, progress=False)


def test_unsupported_tokenizer_model():
    with pytest.raises(ValueError, match="unsupported GGUF tokenizer model 'llama'"):
        g.gguf_tokenizer({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a"], "tokenizer.ggml.merges": []})


def test_unsupported_pre_tokenizer():
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "made-up", "tokenizer.ggml.tokens": ["a"],
            "tokenizer.ggml.merges": []}
    with pytest.raises(ValueError, match="unsupported GGUF pre-tokenizer 'made-up'"):
        g.gguf_tokenizer(meta)


def test_bad_merge():
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b"], "tokenizer.ggml.merges": ["a c"]}
    with pytest.raises(ValueError, match="merge 0 must be two vocabulary tokens"):
        g.gguf_tokenizer(meta)


def test_bad_dtype(f32_file):
    with pytest.raises(ValueError, match="dtype must be a floating torch.dtype, got torch.int64"):
        g.load_gguf(f32_file, dtype=torch.int64)


# ----------------------------------------------------------------------------------------------------------
# the chat template and the prompt conventions a file carries
# ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("write, shown", [(lambda w: w.add_uint32("tokenizer.chat_template", 7), "int"),
                                          (lambda w: w.add_array("tokenizer.chat_template", ["a", "b"]), "list")])
def test_chat_template_that_is_not_a_string_is_refused(tmp_path, hf_model, monkeypatch, write, shown):
    """Was: taken as it was, then a TypeError traceback from Jinja at `sample --chat` (also in a fine-tuned run)."""
    monkeypatch.setattr(gguf.GGUFWriter, "add_chat_template", lambda self, value: write(self))
    path = write_gguf(tmp_path / "m.gguf", hf_model)
    with pytest.raises(ValueError, match=f"tokenizer.chat_template must be a string of Jinja code, got {shown}"):
        g.load_gguf(path, progress=False)


@pytest.mark.parametrize("write, shown", [(lambda w: w.add_string("tokenizer.ggml.add_bos_token", "false"), "'false'"),
                                         (lambda w: w.add_uint8("tokenizer.ggml.add_bos_token", 2), "2")])
def test_an_add_bos_token_that_is_not_a_bool_is_refused(tmp_path, hf_model, monkeypatch, write, shown):
    """Was: read with bool(), so the string "false" meant True: every prompt got a <bos> the file said it must not."""
    monkeypatch.setattr(gguf.GGUFWriter, "add_add_bos_token", lambda self, value: write(self))
    path = write_gguf(tmp_path / "m.gguf", hf_model)
    with pytest.raises(ValueError, match=f"^GGUF metadata 'tokenizer.ggml.add_bos_token' must be a bool \\(true or "
                                         f"false\\), got {shown}$"):
        g.load_gguf(path, progress=False)


LLAMA3_STYLE = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}{{ eos_token }}\n"
                "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_a_gguf_file_keeps_its_bos_and_stop_conventions(tmp_path, hf_model, monkeypatch):
    """Was: `finetune --from file.gguf` (load_model) dropped add_bos_token=True and the end-of-turn stop ids, and
    format_chat rendered bos_token / eos_token as empty strings (transformers renders the tokenizer's)."""
    from attnkit.interop.load import load_model, load_named

    add_bos = gguf.GGUFWriter.add_add_bos_token
    monkeypatch.setattr(gguf.GGUFWriter, "add_add_bos_token", lambda self, value: add_bos(self, True))
    monkeypatch.setattr(gguf.GGUFWriter, "add_chat_template", lambda self, value: self.add_string(
        "tokenizer.chat_template", LLAMA3_STYLE))
    path = write_gguf(tmp_path / "m.gguf", hf_model)
    for loaded in (load_model(str(path)), load_named(str(path))):
        assert loaded.add_bos is True
        assert loaded.stop_ids == [0, 2]  # <|endoftext|> and eos <|im_end|>
        prompt = loaded.format_chat("hi")
        assert prompt == "<|im_start|><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_object=loaded.tokenizer.backend,
                                                      bos_token="<|im_start|>", eos_token="<|im_end|>")
        hf_tok.chat_template = LLAMA3_STYLE
        assert prompt == hf_tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                    add_generation_prompt=True)
        ids = loaded.encode_prompt(prompt)
        assert ids[:2] == [1, 1] and ids[2] != 1  # the template's <bos> + <|im_start|>, no extra <bos> in front
        assert loaded.encode_prompt("hi")[0] == 1  # a plain prompt gets the file's <bos>


@pytest.mark.parametrize("pre, expected", [("llama-bpe", True), ("llama3", True), ("gpt-2", False),
                                           ("smollm", False)])
def test_add_bos_defaults_as_llama_cpp_when_the_file_has_no_flag(tmp_path, hf_model, monkeypatch, pre, expected):
    """Was: a GGUF without tokenizer.ggml.add_bos_token (Llama 3 conversions ship none) loaded with add_bos False,
    though llama.cpp puts <bos> in front of prompts by default for the Llama 3 pre-tokenizers (llama-vocab.cpp: the
    LLAMA3 group sets add_bos = true): every raw prompt was one <|begin_of_text|> short of llama.cpp's."""
    from attnkit.interop.load import load_model

    monkeypatch.setattr(gguf.GGUFWriter, "add_add_bos_token", lambda self, value: None)  # no flag in the file
    monkeypatch.setattr(gguf.GGUFWriter, "add_tokenizer_pre", lambda self, value: self.add_string(
        "tokenizer.ggml.pre", pre))
    path = write_gguf(tmp_path / "m.gguf", hf_model)
    assert g.load_gguf(path, progress=False).add_bos_token is expected
    loaded = load_model(str(path))
    assert loaded.add_bos is expected
    assert (loaded.encode_prompt("hi")[0] == 1) is expected  # <bos> (id 1) in front, or not


def test_an_explicit_add_bos_flag_wins_over_the_llama3_default(tmp_path, hf_model, monkeypatch):
    monkeypatch.setattr(gguf.GGUFWriter, "add_tokenizer_pre", lambda self, value: self.add_string(
        "tokenizer.ggml.pre", "llama-bpe"))
    path = write_gguf(tmp_path / "m.gguf", hf_model)  # add_bos_token False written
    assert g.load_gguf(path, progress=False).add_bos_token is False


def test_unknown_type_tokens_are_special():
    """Tokens of GGUF type UNKNOWN (2), like CONTROL (3), are special: one id when written in the text, dropped by
    decode(skip_special_tokens=True); NORMAL ones are ordinary text."""
    tokens = ["<unk>", "<|im_end|>"] + list(bytes_to_unicode().values())
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": [],
            "tokenizer.ggml.token_type": [2, 3] + [1] * (len(tokens) - 2), "tokenizer.ggml.unknown_token_id": 0}
    tok = g.gguf_tokenizer(meta)
    ids = tok.encode("a<unk>b<|im_end|>")
    assert ids[1] == 0 and ids[3] == 1 and len(ids) == 4 and tok.unk_id == 0
    assert tok.decode(ids) == "a<unk>b<|im_end|>"
    assert tok.decode(ids, skip_special_tokens=True) == "ab"


def _minimal_llama_meta(**extra):
    meta = {"general.architecture": "llama", "llama.embedding_length": 64, "llama.attention.head_count": 4,
            "llama.feed_forward_length": 96, "llama.block_count": 1, "llama.vocab_size": 10}
    meta.update(extra)
    return meta


def test_config_defaults_as_llama_cpp_without_optional_keys():
    """No attention.head_count_kv means one kv head per query head (plain multi-head attention, as llama.cpp reads
    it), and the head size is embedding_length / head_count."""
    cfg = g.gguf_to_hf_config(_minimal_llama_meta())
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (4, 4, 16)
    assert g.gguf_to_hf_config(_minimal_llama_meta(**{"llama.attention.head_count_kv": 2}))["num_key_value_heads"] == 2


def test_tied_embeddings_are_told_by_the_output_tensor():
    names = {"token_embd.weight", "output_norm.weight", "blk.0.attn_q.weight"}
    assert g.gguf_to_hf_config(_minimal_llama_meta(), tensor_names=names)["tie_word_embeddings"] is True
    assert g.gguf_to_hf_config(_minimal_llama_meta(), tensor_names=names | {"output.weight"})[
        "tie_word_embeddings"] is False
    assert g.gguf_to_hf_config(_minimal_llama_meta())["tie_word_embeddings"] is False  # names unknown: untied
