"""Two seed defects that docs/from-the-seeds.md says attnkit avoids and that no other test covered.

* seed 000: its ``Decoder`` quietly attends to itself when no encoder output is given; attnkit refuses.
* seed 003: its causal mask is always built on the CPU; attnkit builds it on the device of the queries.
"""

from __future__ import annotations

import pytest
import torch

import attnkit.modules.attention as attention_module
from attnkit.models.encoder_decoder import Decoder


def test_decoder_refuses_to_run_without_memory():
    decoder = Decoder(1, 16, 4, dim_feedforward=8)
    with pytest.raises(ValueError, match=r"memory must have shape \(B, L, C\) with C = d_model = 16, got NoneType"):
        decoder(torch.randn(1, 3, 16), None)


def test_decoder_layer_cross_attention_needs_the_memory(make_transformer):
    layer = make_transformer().core.decoder.layers[0]
    with pytest.raises(ValueError, match=r"cross-attention needs key .*got None"):
        layer(torch.randn(1, 3, 32), None)


@pytest.mark.parametrize("need_weights", [True, False])
def test_causal_mask_is_made_on_the_queries_device(need_weights, monkeypatch):
    # No accelerator on the test machine, so spy on the call: the mask must be requested for q's device
    # (the seed called torch.triu(torch.ones(...)) with no device at all).
    asked = []
    real = attention_module.causal_mask

    def spy(T, S=None, *, device=None):
        asked.append(device)
        return real(T, S, device=device)

    monkeypatch.setattr(attention_module, "causal_mask", spy)
    q = torch.randn(1, 2, 3, 4)
    k = torch.randn(1, 2, 5, 4)  # S != T: the fast path cannot delegate the causal mask to torch's kernel
    out, _ = attention_module.scaled_dot_product_attention(q, k, k, is_causal=True, need_weights=need_weights)
    assert asked == [q.device]
    assert torch.isfinite(out).all()
