"""use_decoding_layout: same values and outputs, transposed storage, ties kept, reversible, savable."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnkit.generation import generate, is_decoding_layout, use_decoding_layout, use_training_layout
from attnkit.models.gpt import GPT
from attnkit.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from helpers import assert_close

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]]


def _clone(model: GPT) -> GPT:
    twin = GPT(model.config).eval()
    twin.load_state_dict(model.state_dict())
    return twin


def test_layout_changes_strides_not_values_and_keeps_ties(make_gpt):
    model = make_gpt("gpt2")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert model.lm_head.weight is model.wte.weight  # tied head
    n = use_decoding_layout(model)
    weights = {id(m.weight): m.weight for m in model.modules() if isinstance(m, nn.Linear)}.values()
    widening = [w for w in weights if w.shape[0] >= w.shape[1]]
    assert 0 < len(widening) < len(weights)  # the MLP's output projection narrows (4C -> C)
    assert n == len(widening)  # the narrowing ones are already row-major
    assert model.lm_head.weight is model.wte.weight  # still one tensor
    for w in weights:
        N, K = w.shape
        if N >= K:
            assert w.stride() == (1, N) and w.t().is_contiguous()  # the transpose of a contiguous (K, N) buffer
        else:
            assert w.is_contiguous()  # narrowing: the row-major matrix-vector kernel is the faster one here
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert is_decoding_layout(model)
    assert use_decoding_layout(model) == 0  # idempotent
    mlp_out = model.blocks[0].mlp.w_out.weight
    mlp_out.data = mlp_out.data.t().contiguous().t()  # a narrowing weight stored transposed ...
    assert not is_decoding_layout(model)
    assert use_decoding_layout(model) == 1 and mlp_out.is_contiguous()  # ... is put back to row-major


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_same_logits_and_same_generated_tokens(make_gpt, kind):
    model = make_gpt(kind, seed=3)
    fast = _clone(model)
    use_decoding_layout(fast)
    idx = torch.randint(0, model.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        # only the float summation order may differ: tolerance 1e-5 on logits of size ~10
        assert_close(fast(idx), model(idx), "float32")
    want = generate(model, PROMPTS, max_new_tokens=12)
    assert generate(fast, PROMPTS, max_new_tokens=12) == want
    assert generate(fast, PROMPTS, max_new_tokens=12, use_cache=False) == want


def test_training_layout_restores_contiguous_weights(make_gpt):
    model = make_gpt("llama")
    use_decoding_layout(model)
    assert not all(p.is_contiguous() for p in model.parameters())
    assert use_training_layout(model) > 0
    assert all(p.is_contiguous() for p in model.parameters())
    assert not is_decoding_layout(model)


def test_checkpoint_round_trip_after_conversion(make_gpt, tmp_path):
    model = make_gpt("gpt2", seed=5)
    use_decoding_layout(model)
    path = save_checkpoint(tmp_path / "ckpt", model)  # safetensors needs contiguous tensors: handled
    twin = GPT(model.config).eval()
    load_checkpoint(path, twin)
    for k, v in model.state_dict().items():
        assert torch.equal(twin.state_dict()[k], v), k


def test_gradients_still_flow_after_conversion(make_gpt):
    model = make_gpt("gpt2").train()
    use_decoding_layout(model)
    idx = torch.randint(0, model.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(2))
    model(idx).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_rejects_non_modules():
    with pytest.raises(ValueError, match="nn.Module"):
        use_decoding_layout("not a model")
    with pytest.raises(ValueError, match="nn.Module"):
        use_training_layout(42)
