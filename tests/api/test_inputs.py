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
