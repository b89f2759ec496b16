"""interop.load.load_model on Hugging Face folders built here (a tiny GPT saved with save_hf, a BPE tokenizer
trained on a few lines): where the chat template is read from, and pickled weights refused."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
from attnkit.interop.hf import save_hf
from attnkit.interop.load import load_model
from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT

from helpers import CHATML, tiny_bpe_tokenizer, tiny_hf_folder

CHAT = CHATML


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    return tiny_hf_folder(tmp_path_factory.mktemp("hf") / "model", block_size=32, n_kv_head=2, tie_embeddings=True)


def _copy(src: Path, dst: Path, tokenizer_config: dict | None = None) -> Path:
    import shutil

    shutil.copytree(src, dst)
    if tokenizer_config is not None:
        (dst / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return dst


def test_chat_template_jinja_as_transformers_5_saves_it(hf_folder, tmp_path):
    """Was: only a string chat_template in tokenizer_config.json was read; transformers 5's save_pretrained writes
    the template to chat_template.jinja, so it was dropped (and `finetune` runs had no --chat)."""
    transformers = pytest.importorskip("transformers")
    folder = _copy(hf_folder, tmp_path / "m")
    hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), eos_token="<|im_end|>")
    hf_tok.chat_template = CHAT
    hf_tok.save_pretrained(str(folder))
    loaded = load_model(str(folder))
    if (folder / "chat_template.jinja").is_file():
        assert "chat_template" not in json.loads((folder / "tokenizer_config.json").read_text())
    assert loaded.chat_template == CHAT
    messages = [{"role": "user", "content": "hi"}]
    assert loaded.format_chat("hi") == hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_chat_template_jinja_wins_over_tokenizer_config(hf_folder, tmp_path):
    folder = _copy(hf_folder, tmp_path / "m", {"eos_token": "<|im_end|>", "chat_template": "{{ 'old' }}"})
    (folder / "chat_template.jinja").write_text(CHAT, encoding="utf-8")
    assert load_model(str(folder)).chat_template == CHAT


def test_the_list_form_takes_the_default_template(hf_folder, tmp_path):
    """Was: the list of named templates was ignored (no chat template)."""
    folder = _copy(hf_folder, tmp_path / "m", {"eos_token": "<|im_end|>", "chat_template": [
        {"name": "tool_use", "template": "{{ 'tools' }}"}, {"name": "default", "template": CHAT}]})
    assert load_model(str(folder)).chat_template == CHAT


@pytest.mark.parametrize("template, match", [
    ([{"name": "tool_use", "template": "x"}], "none named 'default'"),
    ([["default", "x"]], "must be a string or a list of"),
    ([{"name": "default", "template": 7}], "must be a string of Jinja code, got int"),
    ({"default": CHAT}, "must be a string of Jinja code, got dict"),
    (7, "must be a string of Jinja code, got int"),
])
def test_other_template_shapes_are_refused(hf_folder, tmp_path, template, match):
    folder = _copy(hf_folder, tmp_path / "m", {"eos_token": "<|im_end|>", "chat_template": template})
    with pytest.raises(ValueError, match=match):
        load_model(str(folder))


def test_a_chat_template_jinja_that_is_not_utf8(hf_folder, tmp_path):
    folder = _copy(hf_folder, tmp_path / "m")
    (folder / "chat_template.jinja").write_bytes(b"\xff\xfe{{ x }}")
    with pytest.raises(ValueError, match="chat_template.jinja is not UTF-8 text"):
        load_model(str(folder))


def test_pytorch_model_bin_is_refused_never_unpickled(hf_folder, tmp_path):
    """Was: config.json + pytorch_model.bin was read with torch.load(weights_only=True) although the docs promise
    refusal (and below torch 2.6 that is no safe guard: CVE-2025-32434)."""
    folder = _copy(hf_folder, tmp_path / "m")
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"w": Evil()}, protocol=4))
    with pytest.raises(ValueError, match="pytorch_model.bin holds pickled weights.*never unpickles.*safetensors"):
        load_model(str(folder))
    assert not marker.exists()
    # a folder with tensors only in a .bin is refused just the same (never read)
    (folder / "pytorch_model.bin").unlink()
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match="never unpickles"):
        load_model(str(folder))


def test_a_folder_without_safetensors_weights(hf_folder, tmp_path):
    folder = _copy(hf_folder, tmp_path / "m")
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="without weights attnkit reads: expected model.safetensors"):
        load_model(str(folder))


def test_tokenizer_file_with_a_named_model_is_refused(monkeypatch):
    """Was: load_model(name, tokenizer_file=...) (``finetune --from smollm2-135m-instruct --tokenizer FILE``) fetched
    the named model and ignored the tokenizer file without a word."""
    import attnkit.interop.load as load_module

    monkeypatch.setattr(load_module, "load_named", lambda name: pytest.fail("the named model must not be loaded"))
    with pytest.raises(ValueError, match="^--tokenizer only applies to a Hugging Face folder; a named model brings "
                                         "its own tokenizer$"):
        load_model("smollm2-135m-instruct", tokenizer_file="tokenizer.json")


def test_an_attnkit_tokenizer_file_keeps_the_folders_chat_template(hf_folder, tmp_path):
    """Was: with --tokenizer naming an attnkit tokenizer JSON the folder's chat_template.jinja was dropped (the
    same folder with a Hugging Face tokenizer.json kept it), so the fine-tuned run had no `sample --chat`."""
    from attnkit.data.tokenizers.tokenizer import save_tokenizer

    folder = _copy(hf_folder, tmp_path / "m")
    (folder / "chat_template.jinja").write_text(CHAT, encoding="utf-8")
    tok = BPETokenizer.from_file(folder / "tokenizer.json", eos="<|im_end|>")
    (folder / "tokenizer.json").unlink()
    ours = save_tokenizer(tok, tmp_path / "tok.json")
    loaded = load_model(str(folder), tokenizer_file=str(ours))
    assert loaded.chat_template == CHAT
    assert loaded.tokenizer.eos_id == tok.eos_id


def test_a_missing_tokenizer_is_named_before_the_weights_are_read(hf_folder, tmp_path, monkeypatch):
    """Was: a --tokenizer FILE that does not exist was reported as "a Hugging Face model folder without
    tokenizer.json; pass --tokenizer FILE", and only after the weights had been read (minutes for a large model)."""
    import attnkit.interop.hf as hf_module

    monkeypatch.setattr(hf_module, "from_hf", lambda *a, **k: pytest.fail("the weights must not be read"))
    with pytest.raises(FileNotFoundError, match=r"^tokenizer file .*nowhere.json does not exist$"):
        load_model(str(hf_folder), tokenizer_file=str(tmp_path / "nowhere.json"))
    folder = _copy(hf_folder, tmp_path / "m")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match=r"model folder without tokenizer.json; pass --tokenizer FILE$"):
        load_model(str(folder))


@pytest.mark.parametrize("flag", [None, True, False])
def test_prompts_start_with_bos_as_transformers_tokenizes_them(tmp_path, flag):
    """Was: a Hugging Face folder's prompts never started with <bos> (add_bos was always False), although its
    tokenizer.json's post-processor (Llama 2 / 3 folders) and transformers put it first: `finetune --from` trained
    and `sample --ckpt` prompted the model without the <bos> it was pretrained with."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import processors

    tok = tiny_bpe_tokenizer(("<s>", "</s>"), bos="<s>", eos="</s>")
    tok.backend.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                               special_tokens=[("<s>", tok.bos_id)])
    cfg = GPTConfig(vocab_size=tok.vocab_size, block_size=32, n_layer=1, n_head=2, n_embd=16, activation="swiglu",
                    norm="rmsnorm", bias=False, position="rope")
    folder = save_hf(GPT(cfg), tmp_path / "model")
    tok.backend.save(str(folder / "tokenizer.json"))
    tok_cfg = {"bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "PreTrainedTokenizerFast"}
    if flag is not None:
        tok_cfg["add_bos_token"] = flag
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    loaded = load_model(str(folder))
    ids = loaded.encode_prompt("the cat sat")
    assert loaded.add_bos is (flag is not False) and (ids[0] == tok.bos_id) is (flag is not False)
    if flag is not False:  # (transformers 5 may keep the post-processor's <bos> despite add_bos_token=false)
        assert ids == transformers.AutoTokenizer.from_pretrained(str(folder))("the cat sat")["input_ids"]
    plain = _copy(folder, tmp_path / "plain", {"eos_token": "</s>", "bos_token": "<s>"})
    tok.backend.post_processor = None
    tok.backend.save(str(plain / "tokenizer.json"))
    assert load_model(str(plain)).add_bos is False  # no post-processor, no flag: as before


def test_an_hf_folder_stops_where_its_generation_config_says(tmp_path):
    """Was: an HF folder loaded with its tokenizer's <eos> as the only stop id, though its generation_config.json
    (Llama 3, SmolLM2, a save_hf export with stop_token_ids) lists more: sample and finetune --from then ran past
    <|im_end|> where transformers' generate stops."""
    tok = tiny_bpe_tokenizer(bos="<|im_start|>", pad="<|endoftext|>")
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=16))
    stops = [tok.token_to_id("<|endoftext|>"), tok.eos_id]
    folder = save_hf(model, tmp_path / "hf", tokenizer=tok, stop_token_ids=stops)
    assert load_model(str(folder)).stop_ids == stops
    save_hf(model, tmp_path / "plain", tokenizer=tok)  # no generation_config.json: the tokenizer's <eos>
    assert load_model(str(tmp_path / "plain")).stop_ids == [tok.eos_id]
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 10**6]}))
    with pytest.raises(ValueError, match=r"generation_config.json: eos_token_id must be a token id or a list of ids "
                                         r"in \[0, \d+\) \(the tokenizer's\), got \[2, 1000000\]"):
        load_model(str(folder))


@pytest.mark.parametrize("name", ["missing.gguf", "sub/model", "./model"])
def test_a_missing_gguf_path_is_named_as_missing_not_as_an_unknown_model(tmp_path, name):
    """Was: ``sample --model /path/to/missing.gguf`` said "unknown pretrained model '/path/to/missing.gguf'; known
    models: ... (or pass the path of a local .gguf file)": the user had passed a path; it just does not exist."""
    from attnkit.interop.load import load_named
    from attnkit.interop.pretrained import load_pretrained

    path = str(tmp_path / name) if not name.startswith("./") else name
    for call in (load_named, load_pretrained):
        with pytest.raises(FileNotFoundError, match=rf"^{path}: no such file \(expected a local \.gguf file or a "
                                                    r"named model: smollm2-135m-instruct\)"):
            call(path)
    (tmp_path / "folder.gguf").mkdir()
    with pytest.raises(ValueError, match="folder.gguf: is a folder, not a .gguf file"):
        load_pretrained(tmp_path / "folder.gguf")
    with pytest.raises(ValueError, match=r"^unknown pretrained model 'gpt5'; known models"):  # a name stays a name
        load_named("gpt5")


def test_a_special_token_the_tokenizer_lacks_names_tokenizer_config(hf_folder, tmp_path):
    """Was: "pad token '<pad>' is not in the vocabulary (size N)", naming neither tokenizer_config.json (which
    names the token) nor tokenizer.json (which lacks it)."""
    folder = _copy(hf_folder, tmp_path / "m", {"eos_token": "<|im_end|>", "pad_token": "<pad>"})
    with pytest.raises(ValueError, match=r"tokenizer_config.json: pad token '<pad>' is not in the vocabulary "
                                         r"\(size \d+\) of .*tokenizer.json"):
        load_model(str(folder))
