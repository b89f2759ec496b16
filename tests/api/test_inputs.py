"""``attnkit.api.inputs``: which model the inspection tools (``viz``, ``trace``) read.

Axis legend: none (models and folders only).
"""

from __future__ import annotations

import pytest
import torch

from attnkit.api.inputs import ModelText, load_inspected
from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
from attnkit.interop.hf import save_hf
from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT


def test_a_hugging_face_folder_is_a_model_to_inspect(tmp_path):
    """Was: viz/trace --model took only a name or a .gguf file ("unknown pretrained model '<folder>'"), though
    docs/design.md has them load through load_model like sample and finetune --from."""
    text = "\n".join(f"line {i}: the cat sat on the mat." for i in range(40))
    tok = BPETokenizer.train(text, vocab_size=280, special_tokens=["<|endoftext|>"], eos="<|endoftext|>")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=32, n_layer=1, n_head=2, n_embd=16))
    folder = save_hf(model, tmp_path / "hf", tokenizer=tok)
    inputs = ModelText(model=folder, text="the cat")
    loaded = load_inspected(inputs)
    assert inputs.name == "hf"
    ids = torch.tensor([tok.encode("the cat")])
    torch.testing.assert_close(loaded.model(ids), model.eval()(ids))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"^--model .*empty: not a model folder"):
        load_inspected(ModelText(model=str(tmp_path / "empty"), text="x"))


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_a_source_or_target_past_the_translators_max_len_is_named(position):
    """Was: viz/trace cut a long --src to max_len and read a long --tgt past it without a word (a long --text for a
    language model gets a note, or is refused for learned positions)."""
    from attnkit.api.inputs import mt_ids
    from attnkit.models import build_model
    from helpers import tiny_transformer_config

    text = ["das haus ist gross", "the house is big", "der hund ist klein", "the dog is small"] * 5
    tok = BPETokenizer.train(text, 280, special_tokens=["<pad>", "<bos>", "<eos>", "<unk>"])
    model = build_model(tiny_transformer_config(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size,
                                                max_len=8, pad_id=tok.pad_id, position=position)).eval()
    lines = []
    src, tgt = mt_ids(ModelText(ckpt="run", src="das haus ist gross der hund ist klein", tgt="the house"), model, tok,
                      lines.append)
    assert len(src) == 8 and lines == ["note: --src is longer than the model's max_len of 8 tokens: it is read as "
                                       "its first 7 tokens and <eos>"]
    long = ModelText(ckpt="run", src="das haus", tgt="the house is big the dog is small")
    if position == "learned":
        with pytest.raises(ValueError, match=r"^--tgt is \d+ tokens with <bos>, but this model \(learned positions\) "
                                             r"reads at most 8: give a shorter target$"):
            mt_ids(long, model, tok, lines.append)
    else:
        lines.clear()
        _, tgt = mt_ids(long, model, tok, lines.append)
        assert len(tgt) > 8 and lines == [f"note: --tgt is {len(tgt)} tokens with <bos>, longer than the model's "
                                          f"max_len of 8: what it shows past token 8 is the model read beyond what it "
                                          f"was trained on"]


def test_a_text_or_target_far_past_the_context_is_refused_before_the_model_runs():
    """Was: ``viz attention --ckpt MT --src ... --tgt <100,000 characters>`` (sinusoidal positions) got a note, ran
    the decoder on 100,001 tokens for 40 s and failed in torch's allocator ("you tried to allocate 160003200016
    bytes"); a long ``--text`` for a language model without learned positions did the same."""
    from types import SimpleNamespace

    from attnkit.api.inputs import BEYOND_CONTEXT, lm_ids, mt_ids
    from attnkit.models import build_model
    from helpers import tiny_transformer_config

    tok = BPETokenizer.train(["das haus ist gross", "the house is big"] * 5, 280,
                             special_tokens=["<pad>", "<bos>", "<eos>", "<unk>"])
    model = build_model(tiny_transformer_config(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size,
                                                max_len=8, pad_id=tok.pad_id, position="sinusoidal")).eval()
    notes: list[str] = []
    with pytest.raises(ValueError, match=rf"^--tgt is [\d,]+ tokens with <bos>, more than {BEYOND_CONTEXT} x the "
                                         rf"model's max_len of 8 = {8 * BEYOND_CONTEXT}, the most viz and trace "
                                         r"read: give a shorter target$"):
        mt_ids(ModelText(ckpt="run", src="das haus", tgt="the house " * 5000), model, tok, notes.append)
    assert notes == []
    loaded = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(block_size=8, position="rope")),
                             encode_prompt=lambda text: list(range(len(text))))
    assert len(lm_ids(ModelText(ckpt="x", text="a" * 8 * BEYOND_CONTEXT), loaded, notes.append)) == 32  # a note
    with pytest.raises(ValueError, match=rf"^--text is 33 tokens, more than {BEYOND_CONTEXT} x the model's context "
                                         rf"of 8 = 32, the most viz and trace read: give a shorter text$"):
        lm_ids(ModelText(ckpt="x", text="a" * (8 * BEYOND_CONTEXT + 1)), loaded, notes.append)


def test_a_target_is_counted_with_its_bos_against_the_limit():
    """The decoder reads <bos> + target: a target of exactly 4 x max_len tokens is one too many."""
    from attnkit.api.inputs import BEYOND_CONTEXT, mt_ids
    from attnkit.models import build_model
    from helpers import tiny_transformer_config

    tok = BPETokenizer.train(["das haus ist gross", "the house is big"] * 5, 280,
                             special_tokens=["<pad>", "<bos>", "<eos>", "<unk>"])
    model = build_model(tiny_transformer_config(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size,
                                                max_len=8, pad_id=tok.pad_id, position="sinusoidal")).eval()
    most = 8 * BEYOND_CONTEXT
    target = "x" * most  # one token a letter (no merge of "xx" in this corpus)
    assert len(tok.encode(target)) == most
    notes: list[str] = []
    with pytest.raises(ValueError, match=rf"^--tgt is {most + 1} tokens with <bos>, more than "):
        mt_ids(ModelText(ckpt="run", src="das haus", tgt=target), model, tok, notes.append)
    shorter = target[:-1]
    assert len(tok.encode(shorter)) == most - 1
    _, tgt = mt_ids(ModelText(ckpt="run", src="das haus", tgt=shorter), model, tok, notes.append)
    assert len(tgt) == most and len(notes) == 1  # a note only
