"""Convert between torch.nn's attention/Transformer modules and attnkit's, with the same weights.

Axis legend: ``C`` model width (``embed_dim``/``d_model``), ``H`` heads, ``D`` head dim (``C // H``),
``F`` feed-forward width.

* ``torch.nn.MultiheadAttention``  <->  :class:`attnkit.modules.MultiHeadAttention`
* ``torch.nn.Transformer``         <->  :class:`attnkit.models.encoder_decoder.EncoderDecoder`

Weight layouts (the reason conversion is a pure copy):

============================================  =================================================
torch.nn                                      attnkit
============================================  =================================================
``in_proj_weight`` ``(3C, C)`` rows [q;k;v]   self-attention: ``qkv_proj.weight``
                                              cross-attention: ``q_proj.weight`` = rows ``[:C]``,
                                              ``kv_proj.weight`` = rows ``[C:]``
``q/k/v_proj_weight`` (kdim or vdim != C)     ``q_proj``, ``kv_proj`` = [k; v] (kdim == vdim),
                                              or ``k_proj``/``v_proj``
``in_proj_bias`` ``(3C,)``                    split the same way
``out_proj``                                  ``out_proj``
``linear1`` / ``linear2``                     ``ff.w_in`` / ``ff.w_out``
``norm1/2/3``, ``encoder.norm``, ...          same names
``multihead_attn``                            ``cross_attn``
============================================  =================================================

Both directions give modules that agree in eval mode (up to float rounding). Our modules are always
batch-first; a torch module built with ``batch_first=False`` has the same weights and converts too,
only its call convention differs. ``to_torch`` always builds ``batch_first=True`` modules.

What torch cannot represent raises ``ValueError`` in ``to_torch`` (grouped-query heads, a free
``head_dim``, RoPE, RMSNorm, gated feed-forwards, LayerDrop); what attnkit does not implement raises it in
``from_torch`` (``add_bias_kv``, ``add_zero_attn``, custom activations, and an ``nn.Transformer`` whose
encoder or decoder layers differ from encoder layer 0 in ``norm_first``, activation, heads, feed-forward
width, dropout, bias or norm eps: attnkit builds every layer of both stacks alike).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.models.encoder_decoder import EncoderDecoder
from attnkit.modules.feed_forward import FeedForward
from attnkit.modules.multi_head_attention import MultiHeadAttention
from attnkit.modules.norms import LayerNorm

SUPPORTED_TORCH = ("torch.nn.MultiheadAttention", "torch.nn.Transformer")
SUPPORTED_ATTNKIT = ("attnkit.modules.MultiHeadAttention", "attnkit.models.EncoderDecoder")


# ----------------------------------------------------------------------------------------------------
# small helpers
# ----------------------------------------------------------------------------------------------------

def _copy(dst: torch.Tensor | None, src: torch.Tensor | None, what: str) -> None:
    """``dst.copy_(src)`` with a shape check (and both-or-neither for optional biases)."""
    if (dst is None) != (src is None):
        raise ValueError(f"{what}: expected both tensors present or both absent, got "
                         f"destination {'None' if dst is None else tuple(dst.shape)}, "
                         f"source {'None' if src is None else tuple(src.shape)}")
    if dst is None:
        return
    if dst.shape != src.shape:
        raise ValueError(f"{what}: expected shape {tuple(dst.shape)}, got {tuple(src.shape)}")
    dst.copy_(src)


def _cat(*tensors: torch.Tensor | None) -> torch.Tensor | None:
    return None if tensors[0] is None else torch.cat(tensors, dim=0)


def _reference_param(module: nn.Module) -> torch.Tensor:
    return next(module.parameters())


# Activation name <-> torch activation (what nn.Transformer layers store in `.activation`).
def _torch_activation_name(act) -> str:
    """Our activation name for a torch layer's ``activation`` attribute."""
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu:
        return "gelu"
    if isinstance(act, nn.GELU):
        return "gelu_tanh" if act.approximate == "tanh" else "gelu"
    simple = {nn.SiLU: "silu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh"}
    for cls, name in simple.items():
        if isinstance(act, cls):
            return name
    if isinstance(act, nn.LeakyReLU) and act.negative_slope == 0.01:
        return "leaky_relu"
    if isinstance(act, nn.ELU) and act.alpha == 1.0:
        return "elu"
    if act is F.silu:
        return "silu"
    if act is torch.sigmoid:
        return "sigmoid"
    if act is torch.tanh:
        return "tanh"
    raise ValueError(f"cannot convert torch activation {act!r}; supported: F.relu, F.gelu, nn.ReLU, nn.GELU "
                     f"(none/tanh), nn.SiLU, nn.Sigmoid, nn.Tanh, nn.LeakyReLU(0.01), nn.ELU(1.0)")


def _torch_activation(name: str):
    """The torch activation to pass to ``nn.Transformer`` for one of our names."""
    table = {
        "relu": "relu",
        "gelu": "gelu",
        "gelu_tanh": nn.GELU(approximate="tanh"),
        "silu": nn.SiLU(),
        "sigmoid": nn.Sigmoid(),
        "tanh": nn.Tanh(),
        "leaky_relu": nn.LeakyReLU(),
        "elu": nn.ELU(),
    }
    if name not in table:
        raise ValueError(f"torch.nn.Transformer cannot express activation {name!r}; convertible: {tuple(table)}")
    return table[name]


# ----------------------------------------------------------------------------------------------------
# MultiheadAttention
# ----------------------------------------------------------------------------------------------------

def _mha_from_torch(ref: nn.MultiheadAttention, self_attention: bool | None = None) -> MultiHeadAttention:
    if ref.bias_k is not None or ref.bias_v is not None:
        raise ValueError("torch MultiheadAttention with add_bias_kv=True is not supported (expected False, got True)")
    if ref.add_zero_attn:
        raise ValueError("torch MultiheadAttention with add_zero_attn=True is not supported (expected False, got True)")
    E, H = ref.embed_dim, ref.num_heads
    bias = ref.in_proj_bias is not None
    if self_attention is None:
        self_attention = ref._qkv_same_embed_dim
    elif self_attention and not ref._qkv_same_embed_dim:
        raise ValueError(f"self_attention=True needs kdim == vdim == embed_dim = {E}, got kdim={ref.kdim}, "
                         f"vdim={ref.vdim}")
    ours = MultiHeadAttention(
        E, H, kdim=ref.kdim, vdim=ref.vdim, bias=bias, out_bias=ref.out_proj.bias is not None,
        dropout=float(ref.dropout), self_attention=self_attention,
    )
    p = _reference_param(ref)
    ours.to(device=p.device, dtype=p.dtype)
    _copy_mha_from_torch(ref, ours)
    ours.train(ref.training)
    return ours


@torch.no_grad()
def _copy_mha_from_torch(ref: nn.MultiheadAttention, ours: MultiHeadAttention) -> None:
    """Copy torch weights into an existing attnkit MultiHeadAttention of matching shape."""
    E = ref.embed_dim
    b = ref.in_proj_bias
    b_q, b_k, b_v = (None, None, None) if b is None else b.split(E)  # (E,) each: [q; k; v]
    if ref._qkv_same_embed_dim:
        w_q, w_k, w_v = ref.in_proj_weight.split(E)  # rows [q; k; v]
    else:
        w_q, w_k, w_v = ref.q_proj_weight, ref.k_proj_weight, ref.v_proj_weight
    if ours.self_attention:
        _copy(ours.qkv_proj.weight, torch.cat([w_q, w_k, w_v]), "qkv_proj.weight")
        _copy(ours.qkv_proj.bias, _cat(b_q, b_k, b_v) if b is not None else None, "qkv_proj.bias")
    else:
        _copy(ours.q_proj.weight, w_q, "q_proj.weight")
        _copy(ours.q_proj.bias, b_q, "q_proj.bias")
        if ours.kdim == ours.vdim:
            _copy(ours.kv_proj.weight, torch.cat([w_k, w_v]), "kv_proj.weight")
            _copy(ours.kv_proj.bias, _cat(b_k, b_v) if b is not None else None, "kv_proj.bias")
        else:
            _copy(ours.k_proj.weight, w_k, "k_proj.weight")
            _copy(ours.k_proj.bias, b_k, "k_proj.bias")
            _copy(ours.v_proj.weight, w_v, "v_proj.weight")
            _copy(ours.v_proj.bias, b_v, "v_proj.bias")
    _copy(ours.out_proj.weight, ref.out_proj.weight, "out_proj.weight")
    _copy(ours.out_proj.bias, ref.out_proj.bias, "out_proj.bias")


def _check_torch_expressible(m: MultiHeadAttention) -> None:
    """torch.nn.MultiheadAttention has H heads of width C // H, no GQA, no RoPE, one bias flag."""
    if m.num_kv_heads != m.num_heads:
        raise ValueError(f"torch MultiheadAttention has no grouped-query attention: expected num_kv_heads == "
                         f"num_heads = {m.num_heads}, got {m.num_kv_heads}")
    if m.num_heads * m.head_dim != m.embed_dim:
        raise ValueError(f"torch MultiheadAttention needs num_heads * head_dim == embed_dim = {m.embed_dim}, "
                         f"got {m.num_heads} * {m.head_dim} = {m.num_heads * m.head_dim}")
    if m.out_dim != m.embed_dim:
        raise ValueError(f"torch MultiheadAttention needs out_dim == embed_dim = {m.embed_dim}, got {m.out_dim}")
    if m.rotary is not None:
        raise ValueError("torch MultiheadAttention has no rotary embeddings: expected rotary=None, got a RotaryEmbedding")
    in_bias = (m.qkv_proj if m.self_attention else m.q_proj).bias is not None
    if in_bias != (m.out_proj.bias is not None):
        raise ValueError(f"torch MultiheadAttention has one bias flag: expected out_bias == bias = {in_bias}, "
                         f"got out_bias = {m.out_proj.bias is not None}")


def _mha_to_torch(m: MultiHeadAttention) -> nn.MultiheadAttention:
    _check_torch_expressible(m)
    p = _reference_param(m)
    ref = nn.MultiheadAttention(
        m.embed_dim, m.num_heads, dropout=m.dropout, bias=m.out_proj.bias is not None, kdim=m.kdim, vdim=m.vdim,
        batch_first=True, device=p.device, dtype=p.dtype,
    )
    _copy_mha_to_torch(m, ref)
    ref.train(m.training)
    return ref


@torch.no_grad()
def _copy_mha_to_torch(m: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    """Copy attnkit weights into an existing torch MultiheadAttention of matching shape."""
    E = m.embed_dim
    if m.self_attention:
        w_q, w_k, w_v = m.qkv_proj.weight.split(E)
        b = m.qkv_proj.bias
        b_q, b_k, b_v = (None, None, None) if b is None else b.split(E)
    else:
        w_q, b_q = m.q_proj.weight, m.q_proj.bias
        if m.kdim == m.vdim:
            w_k, w_v = m.kv_proj.weight.split(E)
            b_k, b_v = (None, None) if m.kv_proj.bias is None else m.kv_proj.bias.split(E)
        else:
            w_k, b_k, w_v, b_v = m.k_proj.weight, m.k_proj.bias, m.v_proj.weight, m.v_proj.bias
    if ref._qkv_same_embed_dim:
        _copy(ref.in_proj_weight, torch.cat([w_q, w_k, w_v]), "in_proj_weight")
    else:
        _copy(ref.q_proj_weight, w_q, "q_proj_weight")
        _copy(ref.k_proj_weight, w_k, "k_proj_weight")
        _copy(ref.v_proj_weight, w_v, "v_proj_weight")
    _copy(ref.in_proj_bias, None if b_q is None else torch.cat([b_q, b_k, b_v]), "in_proj_bias")
    _copy(ref.out_proj.weight, m.out_proj.weight, "out_proj.weight")
    _copy(ref.out_proj.bias, m.out_proj.bias, "out_proj.bias")
    ref.dropout = m.dropout  # on the attention weights: an attention_dropout unlike the layers' dropout too


# ----------------------------------------------------------------------------------------------------
# Transformer
# ----------------------------------------------------------------------------------------------------

@torch.no_grad()
def _copy_linear(dst: nn.Linear, src: nn.Linear, what: str) -> None:
    _copy(dst.weight, src.weight, f"{what}.weight")
    _copy(dst.bias, src.bias, f"{what}.bias")


def _transformer_from_torch(ref: nn.Transformer) -> EncoderDecoder:
    enc_layers, dec_layers = ref.encoder.layers, ref.decoder.layers
    if len(enc_layers) == 0 or len(dec_layers) == 0:
        raise ValueError(f"expected at least one encoder and one decoder layer, got {len(enc_layers)} and {len(dec_layers)}")
    first = enc_layers[0]
    if not isinstance(first, nn.TransformerEncoderLayer) or not isinstance(dec_layers[0], nn.TransformerDecoderLayer):
        raise ValueError(f"expected torch TransformerEncoderLayer/TransformerDecoderLayer, got "
                         f"{type(first).__name__}/{type(dec_layers[0]).__name__}")
    for stack, layers, cls in (("encoder", enc_layers, nn.TransformerEncoderLayer),
                               ("decoder", dec_layers, nn.TransformerDecoderLayer)):
        for i, layer in enumerate(layers):
            if not isinstance(layer, cls):
                raise ValueError(f"{stack}.layers.{i}: expected torch {cls.__name__}, got {type(layer).__name__}")
            _check_same_layer_kind(layer, first, f"{stack}.layers.{i}")
    d_model = first.self_attn.embed_dim
    nhead = first.self_attn.num_heads
    ours = EncoderDecoder(
        d_model=d_model,
        nhead=nhead,
        num_encoder_layers=len(enc_layers),
        num_decoder_layers=len(dec_layers),
        dim_feedforward=first.linear1.out_features,
        dropout=float(first.dropout.p),
        attention_dropout=float(first.self_attn.dropout),
        activation=_torch_activation_name(first.activation),
        norm_first=bool(first.norm_first),
        norm="layernorm",
        norm_eps=float(first.norm1.eps),
        bias=first.linear1.bias is not None,
        encoder_final_norm=ref.encoder.norm is not None,
        decoder_final_norm=ref.decoder.norm is not None,
    )
    p = _reference_param(ref)
    ours.to(device=p.device, dtype=p.dtype)
    with torch.no_grad():
        for i, (src, dst) in enumerate(zip(enc_layers, ours.encoder.layers)):
            _copy_mha_from_torch(src.self_attn, dst.self_attn)
            _copy_ff_norms_from_torch(src, dst, norms=("norm1", "norm2"), what=f"encoder.layers.{i}")
        for i, (src, dst) in enumerate(zip(dec_layers, ours.decoder.layers)):
            _copy_mha_from_torch(src.self_attn, dst.self_attn)
            _copy_mha_from_torch(src.multihead_attn, dst.cross_attn)
            _copy_ff_norms_from_torch(src, dst, norms=("norm1", "norm2", "norm3"), what=f"decoder.layers.{i}")
        for name in ("encoder", "decoder"):
            src_norm, dst_norm = getattr(ref, name).norm, getattr(ours, name).norm
            if src_norm is not None:
                _copy_norm(dst_norm, src_norm, f"{name}.norm")
    ours.train(ref.training)
    return ours


def _layer_settings(layer) -> dict[str, object]:
    """The hyper-parameters of one torch encoder/decoder layer that our uniformly built model takes from
    encoder layer 0 (``from_torch`` builds every layer of both stacks from them)."""
    attns = [("self_attn", layer.self_attn)]
    if hasattr(layer, "multihead_attn"):
        attns.append(("multihead_attn", layer.multihead_attn))
    out: dict[str, object] = {
        "norm_first": bool(layer.norm_first),
        "dim_feedforward": layer.linear1.out_features,
        "activation": _torch_activation_name(layer.activation),
        "bias": layer.linear1.bias is not None,
        "dropout": float(layer.dropout.p),
    }
    for n in ("dropout1", "dropout2", "dropout3"):
        if hasattr(layer, n):
            out[f"{n}.p"] = float(getattr(layer, n).p)
    for n in ("norm1", "norm2", "norm3"):
        if hasattr(layer, n):
            out[f"{n}.eps"] = float(getattr(layer, n).eps)
    for name, a in attns:
        out[f"{name}.num_heads"] = a.num_heads
        out[f"{name}.dropout"] = float(a.dropout)
        out[f"{name}.add_bias_kv"] = a.bias_k is not None or a.bias_v is not None
        out[f"{name}.add_zero_attn"] = bool(a.add_zero_attn)
    return out


def _check_same_layer_kind(layer, first, what: str) -> None:
    """Every encoder and decoder layer must share encoder layer 0's hyper-parameters (ours are built
    uniformly from them). ``first`` is encoder layer 0; a decoder's attention settings (``self_attn`` and
    ``multihead_attn``) and its ``dropout3``/``norm3`` are compared with encoder layer 0's ``self_attn``,
    ``dropout``/``norm1``."""
    ref = _layer_settings(first)
    got = _layer_settings(layer)
    for key, actual in got.items():
        base = key.split(".")[0]
        if key in ref:
            ref_key = key
        elif base == "multihead_attn":
            ref_key = "self_attn." + key.split(".", 1)[1]
        elif base == "dropout3":
            ref_key = "dropout1.p"
        else:  # norm3
            ref_key = "norm1.eps"
        if key.endswith(("add_bias_kv", "add_zero_attn")):
            expected, why = False, "attnkit implements neither add_bias_kv nor add_zero_attn"
        else:
            expected = ref[ref_key]
            why = f"as encoder.layers.0's {ref_key}: attnkit builds every layer alike"
        if actual != expected:
            raise ValueError(f"{what}: expected {key} = {expected!r} ({why}), got {actual!r}")


@torch.no_grad()
def _copy_norm(dst: LayerNorm, src: nn.LayerNorm, what: str) -> None:
    if not isinstance(dst, LayerNorm):
        raise ValueError(f"{what}: expected an attnkit LayerNorm, got {type(dst).__name__}")
    if dst.eps != src.eps:
        raise ValueError(f"{what}: expected eps {dst.eps}, got {src.eps}")
    _copy(dst.weight, src.weight, f"{what}.weight")
    _copy(dst.bias, src.bias, f"{what}.bias")


@torch.no_grad()
def _copy_ff_norms_from_torch(src: nn.Module, dst: nn.Module, *, norms: tuple[str, ...], what: str) -> None:
    ff: FeedForward = dst.ff
    _copy_linear(ff.w_in, src.linear1, f"{what}.linear1")
    _copy_linear(ff.w_out, src.linear2, f"{what}.linear2")
    for n in norms:
        _copy_norm(getattr(dst, n), getattr(src, n), f"{what}.{n}")


def _transformer_to_torch(m: EncoderDecoder) -> nn.Transformer:
    enc0, dec0 = m.encoder.layers[0], m.decoder.layers[0]
    if not isinstance(enc0.norm1, LayerNorm):
        raise ValueError(f"torch.nn.Transformer only has LayerNorm: expected norm 'layernorm', got "
                         f"{type(enc0.norm1).__name__}")
    ff: FeedForward = enc0.ff
    activation = _torch_activation(ff.activation)
    for attn in (enc0.self_attn, dec0.self_attn, dec0.cross_attn):
        _check_torch_expressible(attn)
    for stack in (m.encoder, m.decoder):
        if stack.layer_drop:
            raise ValueError(f"torch.nn.Transformer has no LayerDrop: expected layer_drop 0.0, got {stack.layer_drop}")
    bias = ff.w_in.bias is not None
    p = _reference_param(m)
    ref = nn.Transformer(
        d_model=m.d_model,
        nhead=m.nhead,
        num_encoder_layers=len(m.encoder.layers),
        num_decoder_layers=len(m.decoder.layers),
        dim_feedforward=ff.hidden_dim,
        dropout=enc0.dropout1.p,
        activation=activation,
        layer_norm_eps=enc0.norm1.eps,
        batch_first=True,
        norm_first=m.norm_first,
        bias=bias,
        device=p.device,
        dtype=p.dtype,
    )
    if not isinstance(activation, str):
        _set_torch_activation(ref, ff.activation)
    with torch.no_grad():
        for i, (src, dst) in enumerate(zip(m.encoder.layers, ref.encoder.layers)):
            _copy_mha_to_torch(src.self_attn, dst.self_attn)
            _copy_ff_norms_to_torch(src, dst, norms=("norm1", "norm2"), what=f"encoder.layers.{i}")
        for i, (src, dst) in enumerate(zip(m.decoder.layers, ref.decoder.layers)):
            _copy_mha_to_torch(src.self_attn, dst.self_attn)
            _copy_mha_to_torch(src.cross_attn, dst.multihead_attn)
            _copy_ff_norms_to_torch(src, dst, norms=("norm1", "norm2", "norm3"), what=f"decoder.layers.{i}")
        for name in ("encoder", "decoder"):
            src_norm, stack = getattr(m, name).norm, getattr(ref, name)
            if src_norm is None:
                stack.norm = None  # torch always builds the final norm; our stack has none
            else:
                _copy(stack.norm.weight, src_norm.weight, f"{name}.norm.weight")
                _copy(stack.norm.bias, src_norm.bias, f"{name}.norm.bias")
    ref.train(m.training)
    return ref


def _set_torch_activation(ref: nn.Transformer, name: str) -> None:
    """Give every torch layer its own activation module.

    Needed because nn.Transformer deep-copies its template layers, and ``TransformerDecoderLayer.__setstate__``
    then shadows an activation *module* with ``F.relu``; assigning the module again replaces that.
    """
    for layer in (*ref.encoder.layers, *ref.decoder.layers):
        act = _torch_activation(name)
        if "activation" in layer.__dict__:
            del layer.__dict__["activation"]
        layer.activation = act
        if isinstance(layer, nn.TransformerEncoderLayer):
            # torch's fused encoder fast path knows only relu and exact gelu; anything else takes the plain path
            exact = isinstance(act, nn.GELU) and act.approximate == "none"
            layer.activation_relu_or_gelu = 2 if exact else (1 if isinstance(act, nn.ReLU) else 0)


@torch.no_grad()
def _copy_ff_norms_to_torch(src: nn.Module, dst: nn.Module, *, norms: tuple[str, ...], what: str) -> None:
    _copy_linear(dst.linear1, src.ff.w_in, f"{what}.ff.w_in")
    _copy_linear(dst.linear2, src.ff.w_out, f"{what}.ff.w_out")
    for n in norms:
        d, s = getattr(dst, n), getattr(src, n)
        _copy(d.weight, s.weight, f"{what}.{n}.weight")
        _copy(d.bias, s.bias, f"{what}.{n}.bias")


# ----------------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------------

def from_torch(module: nn.Module, *, self_attention: bool | None = None) -> nn.Module:
    """Build the attnkit equivalent of a torch.nn module, with the same weights (and train/eval mode).

    * ``nn.MultiheadAttention`` -> :class:`MultiHeadAttention`. torch uses one layout for self- and
      cross-attention; ``self_attention`` picks ours (default: the packed self-attention layout when
      ``kdim == vdim == embed_dim`` -- it also accepts distinct key/value inputs, like torch's -- else
      the cross-attention layout);
    * ``nn.Transformer`` -> :class:`EncoderDecoder` (``encoder_final_norm``/``decoder_final_norm`` set from
      torch's final norms, which ``nn.Transformer`` always has).

    Note: ``EncoderDecoder.forward`` is causal in the decoder by default (``tgt_is_causal=True``); torch
    needs an explicit ``tgt_mask``.

    Shape:
        the returned module takes batch-first inputs, e.g. ``(B, T, C)``.
    """
    if isinstance(module, nn.MultiheadAttention):
        return _mha_from_torch(module, self_attention)
    if self_attention is not None:
        raise ValueError(f"self_attention= only applies to torch.nn.MultiheadAttention, got {type(module).__name__}")
    if isinstance(module, nn.Transformer):
        return _transformer_from_torch(module)
    raise ValueError(f"from_torch supports {SUPPORTED_TORCH}, got {type(module).__module__}.{type(module).__name__}")


def to_torch(module: nn.Module) -> nn.Module:
    """Build the torch.nn equivalent (``batch_first=True``) of an attnkit module, with the same weights.

    * :class:`MultiHeadAttention` -> ``nn.MultiheadAttention``;
    * :class:`EncoderDecoder` -> ``nn.Transformer`` (a missing final norm becomes ``encoder.norm = None``).

    Shape:
        the returned module takes batch-first inputs, e.g. ``(B, T, C)``.
    """
    if isinstance(module, MultiHeadAttention):
        return _mha_to_torch(module)
    if isinstance(module, EncoderDecoder):
        return _transformer_to_torch(module)
    raise ValueError(f"to_torch supports {SUPPORTED_ATTNKIT}, got {type(module).__module__}.{type(module).__name__}")
