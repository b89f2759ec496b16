"""from_torch / to_torch: converted modules agree with the originals within atol=rtol=1e-5 (float32, eval mode)."""

import pytest
import torch
from torch import nn

from attnkit.interop.torch_nn import from_torch, to_torch
from attnkit.models.encoder_decoder import EncoderDecoder
from attnkit.modules import MultiHeadAttention, RotaryEmbedding, causal_mask
from helpers import TOLERANCES

TOL = TOLERANCES["float32"]
# torch explains (loudly) why it does or does not take its nested-tensor fast path; not our concern here
pytestmark = [pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
              pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")]
B, T, S, E, H = 2, 5, 7, 16, 4


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(99)


def randomize(module: nn.Module) -> nn.Module:
    """Fresh random values everywhere (torch initialises biases to 0 and norms to 1, which hides mistakes)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.dim() == 1 and torch.all(p == 1) else 0.0))
    return module


def right_padding(lengths, L):
    return torch.arange(L)[None, :] >= torch.tensor(lengths)[:, None]  # (B, L) True = padding


# ------------------------------------------------------------------ MultiheadAttention
@pytest.mark.parametrize("kdim,vdim", [(None, None), (12, 12), (12, 10)])
@pytest.mark.parametrize("bias", [True, False])
def test_mha_from_torch(kdim, vdim, bias):
    ref = randomize(nn.MultiheadAttention(E, H, bias=bias, kdim=kdim, vdim=vdim, batch_first=True)).eval()
    ours = from_torch(ref)
    assert isinstance(ours, MultiHeadAttention) and not ours.training
    q = torch.randn(B, T, E)
    k = torch.randn(B, S, kdim or E)
    v = torch.randn(B, S, vdim or E)
    kpm = right_padding([S, S - 3], S)
    mask = torch.rand(T, S) < 0.3
    mask[:, 0] = False
    exp, exp_w = ref(q, k, v, key_padding_mask=kpm, attn_mask=mask, need_weights=True)
    out, w = ours(q, k, v, key_padding_mask=kpm, attn_mask=mask, need_weights=True)
    torch.testing.assert_close(out, exp, **TOL)
    torch.testing.assert_close(w, exp_w, **TOL)
    if kdim is None:  # self-attention through the packed projection
        exp, _ = ref(q, q, q, attn_mask=causal_mask(T))
        torch.testing.assert_close(ours(q, is_causal=True)[0], exp, **TOL)


@pytest.mark.parametrize("self_attention,kdim,vdim", [(True, None, None), (False, None, None),
                                                      (False, 12, 12), (False, 12, 10)])
@pytest.mark.parametrize("bias", [True, False])
def test_mha_to_torch(self_attention, kdim, vdim, bias):
    ours = randomize(MultiHeadAttention(E, H, kdim=kdim, vdim=vdim, bias=bias, self_attention=self_attention)).eval()
    ref = to_torch(ours)
    assert isinstance(ref, nn.MultiheadAttention) and ref.batch_first and not ref.training
    q = torch.randn(B, T, E)
    k = torch.randn(B, S, kdim or E)
    v = torch.randn(B, S, vdim or E)
    kpm = right_padding([S - 2, S], S)
    exp, exp_w = ref(q, k, v, key_padding_mask=kpm, need_weights=True, average_attn_weights=False)
    out, w = ours(q, k, v, key_padding_mask=kpm, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, exp, **TOL)
    torch.testing.assert_close(w, exp_w, **TOL)
    # and back again: the round trip keeps every tensor exactly
    back = from_torch(ref, self_attention=self_attention)
    assert list(back.state_dict()) == list(ours.state_dict())
    for name, p in ours.state_dict().items():
        assert torch.equal(back.state_dict()[name], p), name


def test_mha_to_torch_rejects_gqa():
    with pytest.raises(ValueError, match=r"num_kv_heads == num_heads = 4, got 2"):
        to_torch(MultiHeadAttention(E, H, num_kv_heads=2))


def test_mha_to_torch_rejects_free_head_dim():
    with pytest.raises(ValueError, match=r"embed_dim = 16, got 4 \* 6 = 24"):
        to_torch(MultiHeadAttention(E, H, head_dim=6))


def test_mha_to_torch_rejects_rotary():
    with pytest.raises(ValueError, match=r"expected rotary=None"):
        to_torch(MultiHeadAttention(E, H, rotary=RotaryEmbedding(4)))


def test_mha_from_torch_rejects_bias_kv():
    with pytest.raises(ValueError, match=r"add_bias_kv=True"):
        from_torch(nn.MultiheadAttention(E, H, add_bias_kv=True, batch_first=True))


def test_unsupported_module_types():
    with pytest.raises(ValueError, match=r"from_torch supports .*got torch.nn.modules.linear.Linear"):
        from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"to_torch supports .*got torch.nn.modules.linear.Linear"):
        to_torch(nn.Linear(2, 2))


# ------------------------------------------------------------------ Transformer
def transformer_inputs():
    src, tgt = torch.randn(B, S, E), torch.randn(B, T, E)
    src_kpm = right_padding([S, S - 2], S)
    tgt_kpm = right_padding([T - 1, T], T)  # right padding: no query row loses every key under causality
    return src, tgt, src_kpm, tgt_kpm


def run_torch(ref: nn.Transformer, src, tgt, src_kpm, tgt_kpm):
    return ref(src, tgt, tgt_mask=causal_mask(T), src_key_padding_mask=src_kpm, tgt_key_padding_mask=tgt_kpm,
               memory_key_padding_mask=src_kpm)


def run_ours(m: EncoderDecoder, src, tgt, src_kpm, tgt_kpm):
    return m(src, tgt, src_key_padding_mask=src_kpm, tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=src_kpm,
             tgt_is_causal=True)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_from_torch(norm_first, activation):
    ref = nn.Transformer(E, H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=24, dropout=0.1,
                         activation=activation, batch_first=True, norm_first=norm_first)
    ref = randomize(ref).eval()
    ours = from_torch(ref)
    assert isinstance(ours, EncoderDecoder) and not ours.training
    assert ours.encoder.norm is not None and ours.decoder.norm is not None  # torch always has final norms
    inputs = transformer_inputs()
    with torch.no_grad():
        exp = run_torch(ref, *inputs)
        out = run_ours(ours, *inputs)
    torch.testing.assert_close(out, exp, **TOL)
    # an explicit tgt_mask (not causal) is honoured too, with grad enabled (torch's slow path)
    src, tgt, src_kpm, _ = inputs
    tgt_mask = torch.rand(T, T) < 0.3
    tgt_mask[:, 0] = False
    exp = ref(src, tgt, tgt_mask=tgt_mask, memory_key_padding_mask=src_kpm, src_key_padding_mask=src_kpm)
    out = ours(src, tgt, tgt_mask=tgt_mask, memory_key_padding_mask=src_kpm, src_key_padding_mask=src_kpm,
               tgt_is_causal=False)
    torch.testing.assert_close(out, exp, **TOL)
    # the encoder's src_mask (S, S) and the cross-attention's memory_mask (T, S) too: each changes the output
    S = src.shape[1]
    src_mask, memory_mask = torch.rand(S, S) < 0.3, torch.rand(T, S) < 0.3
    src_mask[:, 0] = memory_mask[:, 0] = False  # every query keeps a key
    exp = ref(src, tgt, src_mask=src_mask, memory_mask=memory_mask, tgt_mask=tgt_mask)
    out = ours(src, tgt, src_mask=src_mask, memory_mask=memory_mask, tgt_mask=tgt_mask, tgt_is_causal=False)
    torch.testing.assert_close(out, exp, **TOL)
    assert not torch.allclose(out, ours(src, tgt, tgt_mask=tgt_mask, tgt_is_causal=False), atol=1e-3)


def test_conversions_carry_dropout_and_the_norms_eps():
    """Invisible in eval-mode outputs (and an eps of 1e-6 against 1e-5 within float32 tolerance), so checked as
    settings, both ways."""
    ref = nn.Transformer(E, H, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=24, dropout=0.15,
                         layer_norm_eps=1e-6, batch_first=True)
    ours = from_torch(ref)
    assert {m.eps for m in ours.modules() if hasattr(m, "eps")} == {1e-6}
    assert {m.p for m in ours.modules() if hasattr(m, "p")} == {0.15}
    back = to_torch(ours)
    assert {m.eps for m in back.modules() if isinstance(m, nn.LayerNorm)} == {1e-6}
    assert {m.p for m in back.modules() if isinstance(m, nn.Dropout)} == {0.15}


def test_conversions_carry_an_attention_dropout_unlike_the_layers_dropout():
    """Was: to_torch gave every torch attention the layers' dropout (0.1, not 0.3), and from_torch took the layers'
    dropout for the attention weights too: the converted model trained with another attention dropout."""
    ours = EncoderDecoder(d_model=E, nhead=H, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=24,
                          dropout=0.1, attention_dropout=0.3)
    ref = to_torch(ours)
    attns = [m for m in ref.modules() if isinstance(m, nn.MultiheadAttention)]
    assert len(attns) == 3 and {m.dropout for m in attns} == {0.3}
    assert {m.p for m in ref.modules() if isinstance(m, nn.Dropout)} == {0.1}
    back = from_torch(ref)
    assert {m.dropout for m in back.modules() if isinstance(m, MultiHeadAttention)} == {0.3}
    assert {m.p for m in back.modules() if isinstance(m, nn.Dropout)} == {0.1}


@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_to_torch_refuses_layer_drop(stack):
    """Was: the LayerDrop of either stack vanished in the converted model (torch.nn.Transformer has none)."""
    ours = EncoderDecoder(d_model=E, nhead=H, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=24)
    getattr(ours, stack).layer_drop = 0.3
    with pytest.raises(ValueError, match=r"torch.nn.Transformer has no LayerDrop: expected layer_drop 0.0, got 0.3"):
        to_torch(ours)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("final_norms", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_transformer_to_torch(norm_first, final_norms, bias):
    ours = EncoderDecoder(d_model=E, nhead=H, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=24,
                          dropout=0.1, activation="gelu_tanh", norm_first=norm_first, bias=bias,
                          encoder_final_norm=final_norms, decoder_final_norm=final_norms)
    ours = randomize(ours).eval()
    ref = to_torch(ours)
    assert isinstance(ref, nn.Transformer) and ref.batch_first and not ref.training
    assert (ref.encoder.norm is None) == (not final_norms)
    inputs = transformer_inputs()
    with torch.no_grad():
        exp = run_torch(ref, *inputs)
        out = run_ours(ours, *inputs)
    torch.testing.assert_close(out, exp, **TOL)
    back = from_torch(ref)
    assert set(back.state_dict()) == set(ours.state_dict())
    for name, p in ours.state_dict().items():
        assert torch.equal(back.state_dict()[name], p), name


def test_transformer_to_torch_rejects_rmsnorm():
    m = EncoderDecoder(d_model=E, nhead=H, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=8,
                       norm="rmsnorm")
    with pytest.raises(ValueError, match=r"expected norm 'layernorm', got RMSNorm"):
        to_torch(m)


def test_transformer_to_torch_rejects_gated_activation():
    m = EncoderDecoder(d_model=E, nhead=H, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=8,
                       activation="swiglu")
    with pytest.raises(ValueError, match=r"cannot express activation 'swiglu'"):
        to_torch(m)


def test_transformer_from_torch_rejects_custom_activation():
    ref = nn.Transformer(E, H, 1, 1, 8, activation=lambda x: x * 2, batch_first=True)
    with pytest.raises(ValueError, match=r"cannot convert torch activation"):
        from_torch(ref)


def _custom_transformer(enc_kw: dict | None = None, dec_kw: dict | None = None, num_decoder_layers: int = 1):
    enc_kw = {"nhead": H, "dim_feedforward": 8, "dropout": 0.0, **(enc_kw or {})}
    dec_kw = {"nhead": H, "dim_feedforward": 8, "dropout": 0.0, **(dec_kw or {})}
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, batch_first=True, **enc_kw), 1,
                                enable_nested_tensor=False)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(E, batch_first=True, **dec_kw), num_decoder_layers)
    return nn.Transformer(E, H, custom_encoder=enc, custom_decoder=dec, batch_first=True)


@pytest.mark.parametrize("dec_kw, message", [
    ({"norm_first": True}, r"decoder.layers.0: expected norm_first = False .*got True"),
    ({"activation": "gelu"}, r"decoder.layers.0: expected activation = 'relu' .*got 'gelu'"),
    ({"nhead": 2 * H}, rf"decoder.layers.0: expected self_attn.num_heads = {H} .*got {2 * H}"),
    ({"dim_feedforward": 12}, r"decoder.layers.0: expected dim_feedforward = 8 .*got 12"),
    ({"dropout": 0.2}, r"decoder.layers.0: expected dropout = 0.0 .*got 0.2"),
    ({"layer_norm_eps": 1e-6}, r"decoder.layers.0: expected norm1.eps = 1e-05 .*got 1e-06"),
])
def test_transformer_from_torch_rejects_decoder_unlike_encoder(dec_kw, message):
    # attnkit builds the whole model from encoder layer 0's settings: a custom decoder that differs must be
    # refused, not silently converted into a model with different outputs.
    with pytest.raises(ValueError, match=message):
        from_torch(_custom_transformer(dec_kw=dec_kw))


def test_transformer_from_torch_rejects_decoder_cross_attention_heads():
    ref = _custom_transformer()
    layer = ref.decoder.layers[0]
    layer.multihead_attn = nn.MultiheadAttention(E, 2 * H, batch_first=True)
    with pytest.raises(ValueError, match=rf"decoder.layers.0: expected multihead_attn.num_heads = {H} .*got {2 * H}"):
        from_torch(ref)


def test_transformer_from_torch_rejects_later_layer_and_bias_kv():
    ref = _custom_transformer(num_decoder_layers=2)
    ref.decoder.layers[1].norm_first = True
    with pytest.raises(ValueError, match=r"decoder.layers.1: expected norm_first = False .*got True"):
        from_torch(ref)
    ref = _custom_transformer()
    ref.encoder.layers[0].self_attn = nn.MultiheadAttention(E, H, add_bias_kv=True, batch_first=True)
    with pytest.raises(ValueError, match=r"encoder.layers.0: expected self_attn.add_bias_kv = False .*got True"):
        from_torch(ref)


def test_transformer_from_torch_accepts_matching_custom_stacks():
    ref = _custom_transformer(enc_kw={"norm_first": True, "activation": "gelu"},
                              dec_kw={"norm_first": True, "activation": "gelu"}).eval()
    ours = from_torch(ref).eval()
    inputs = transformer_inputs()
    with torch.no_grad():
        torch.testing.assert_close(run_ours(ours, *inputs), run_torch(ref, *inputs), **TOL)
