"""``attnkit.api.sample`` / ``Sampler`` on a model from elsewhere: a Hugging Face folder (``model=``), as
docs/design.md and the README promise (``sample --model`` is a user of ``interop/load.py``'s ``load_model``).

Axis legend: none (token id lists only).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnkit import api
from attnkit.generation import generate
from attnkit.interop.load import load_model

from helpers import CHATML, tiny_hf_folder

CHAT = CHATML


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    """A tiny random Llama-shaped GPT saved with ``save_hf``, with a BPE tokenizer and a chat template."""
    return tiny_hf_folder(tmp_path_factory.mktemp("hf") / "model", chat_template=CHAT, std=0.3, tie_embeddings=True)


def test_model_accepts_a_hugging_face_folder(hf_folder):
    """Was: ``sample(model=<HF folder>)`` raised "unknown pretrained model ...; known models: ..." although the
    docs list ``sample --model`` among the users of ``load_model`` (names, GGUF files, HF folders)."""
    loaded = load_model(str(hf_folder))
    ids = loaded.encode_prompt("the cat")
    for options in (dict(greedy=True), dict(seed=5, temperature=1.0)):
        want = generate(loaded.model, [ids], max_new_tokens=6, do_sample=not options.get("greedy", False),
                        seed=options.get("seed"), temperature=1.0, eos_token_id=loaded.stop_ids)[0]
        for model in (str(hf_folder), hf_folder):  # a str or a Path
            got = api.sample(model=model, prompt="the cat", max_new_tokens=6, **options)
            assert got == ["the cat" + loaded.tokenizer.decode(want, skip_special_tokens=True)]


def test_chat_with_a_hugging_face_folder_uses_its_template(hf_folder):
    sampler = api.Sampler(model=str(hf_folder), prompt="the cat", chat=True, max_new_tokens=3, greedy=True)
    loaded = load_model(str(hf_folder))
    assert sampler.prompt_ids == loaded.encode_prompt(loaded.format_chat("the cat"))
    assert sampler.shown_prompt == ""


def test_greedy_text_equals_transformers_generate(hf_folder):
    """Greedy decoding with a repetition penalty: the same new tokens as ``transformers``' ``generate``."""
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(hf_folder), dtype=torch.float32).eval()
    sampler = api.Sampler(model=str(hf_folder), prompt="the cat sat", max_new_tokens=8, greedy=True,
                          repetition_penalty=1.3, stop=None)
    ids = sampler.prompt_ids
    ref = hf.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, repetition_penalty=1.3,
                      eos_token_id=sampler.config.eos_token_id[0], pad_token_id=0)[0, len(ids):].tolist()
    ref = [t for t in ref if t != sampler.config.eos_token_id[0]]
    assert sampler.sample() == "the cat sat" + sampler.tokenizer.decode(ref, skip_special_tokens=True)


def test_no_window_note_when_nothing_is_sampled(hf_folder):
    """Was: a prompt longer than the context with ``max_new_tokens=0`` logged "note: 70 prompt + 0 new tokens exceed
    the model's context of 64; sampling with a sliding window (...)", although nothing is sampled."""
    lines: list[str] = []
    prompt = "the cat sat on the mat " * 20
    sampler = api.Sampler(model=str(hf_folder), prompt=prompt, max_new_tokens=0, log=lines.append)
    assert len(sampler.prompt_ids) > 64 and lines == [] and sampler.sample() == prompt
    api.Sampler(model=str(hf_folder), prompt=prompt, max_new_tokens=1, log=lines.append)
    assert len(lines) == 1 and lines[0].startswith("note: ") and "sliding window" in lines[0]


def test_a_sentencepiece_folder_keeps_the_space_between_prompt_and_continuation(tmp_path, monkeypatch):
    """Was: the result (and the stream) was the prompt plus ``decode(new ids)``, and a Metaspace decoder drops the
    space of ``▁time`` at the start of a text: "once upon atime". Now the text continues the prompt, as
    ``decode(prompt + new)`` reads (Hugging Face's text-generation pipeline does the same). ``reply``'s answer is
    the text of its new tokens alone, as a chat pipeline decodes them, whatever prompt the Sampler has."""
    import io

    import attnkit.generation as generation
    from helpers import metaspace_tokenizer

    tok = metaspace_tokenizer()
    folder = tiny_hf_folder(tmp_path / "sp", tokenizer=tok, chat_template=CHAT)
    new = tok.encode(" time there")

    def fake_generate(model, prompts, config, *, tokenizer, streamer=None):  # the ids a model could well draw
        if streamer is not None:
            streamer.put(new)
            streamer.end()
        return [list(new)]

    monkeypatch.setattr(generation, "generate", fake_generate)
    stream = io.StringIO()
    got = api.sample(model=str(folder), prompt="once upon a", max_new_tokens=3, greedy=True, stream=stream)
    assert got == ["once upon a time there"] and stream.getvalue() == "once upon a time there\n"
    sampler = api.Sampler(model=str(folder), prompt="once upon a", max_new_tokens=3, greedy=True)
    assert sampler.reply("once upon a") == "time there" == tok.decode(new)


def _transformers_chat(folder: Path, system: str, user: str) -> str:
    """The prompt transformers' ``apply_chat_template`` renders for a system and a user turn with :data:`CHAT`."""
    transformers = pytest.importorskip("transformers")
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    hf_tok.chat_template = CHAT
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_a_system_turn_comes_before_the_user_turn_as_transformers_renders_it(hf_folder):
    """``system`` is the chat's system turn: the prompt equals transformers' ``apply_chat_template`` of the two
    turns; without it the template's own default stands (this template has none: the user turn alone)."""
    want = _transformers_chat(hf_folder, "Answer in French.", "the cat")
    loaded = load_model(str(hf_folder))
    assert loaded.format_chat("the cat", "Answer in French.") == want
    sampler = api.Sampler(model=str(hf_folder), prompt="the cat", chat=True, system="Answer in French.",
                          max_new_tokens=2, greedy=True)
    assert sampler.prompt_ids == loaded.encode_prompt(want)
    plain = api.Sampler(model=str(hf_folder), prompt="the cat", chat=True, max_new_tokens=2, greedy=True)
    assert plain.prompt_ids == loaded.encode_prompt(loaded.format_chat("the cat"))
    assert len(plain.prompt_ids) < len(sampler.prompt_ids)


def test_a_system_turn_needs_chat_and_a_template_that_takes_it(hf_folder, tmp_path):
    with pytest.raises(ValueError, match="--system is the system turn of a chat prompt and needs --chat"):
        api.SampleOptions(model=str(hf_folder), prompt="hi", system="Be brief.")
    with pytest.raises(ValueError, match=r"SampleOptions.system must be"):
        api.SampleOptions(model=str(hf_folder), prompt="hi", chat=True, system=3)
    strict = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
              + CHAT)
    folder = tiny_hf_folder(tmp_path / "strict", chat_template=strict, std=0.3, tie_embeddings=True)
    with pytest.raises(ValueError, match="System role not supported"):
        api.Sampler(model=str(folder), prompt="hi", chat=True, system="Be brief.", max_new_tokens=1)


def test_an_empty_system_turn_is_still_a_system_turn(hf_folder):
    """system="" is given (None is not): an empty system turn, rendered as transformers renders it; it needs chat."""
    want = _transformers_chat(hf_folder, "", "the cat")
    loaded = load_model(str(hf_folder))
    assert loaded.format_chat("the cat", "") == want != loaded.format_chat("the cat")
    with pytest.raises(ValueError, match="needs --chat"):
        api.SampleOptions(model=str(hf_folder), prompt="hi", system="")
