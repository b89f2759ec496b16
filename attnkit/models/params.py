"""Parameter counting: totals, a per-module breakdown, and a printable table.

Shared tensors (a tied ``lm_head.weight`` that *is* ``wte.weight``) are counted once, under the name
where they were registered first. Every function accepts either an ``nn.Module`` or a model config; a
config is built on the ``meta`` device (shapes only, no memory), so even GPT-2 XL is counted instantly::

    >>> from attnkit.models import get_preset, count_parameters, format_parameter_table
    >>> count_parameters(get_preset("gpt2"))
    124439808
    >>> print(format_parameter_table(get_preset("gpt2-seed002")))  # doctest: +SKIP
    module    parameters
    -------  -----------
    wte       38,633,472
    ...

``analytic_parameter_count(config)`` computes the same breakdown with arithmetic alone (the formulas
are spelled out below, useful for reading); the tests check both agree with real models.

Axis legend: C model width, H query heads, K key/value heads, D head dim, F feed-forward width,
V vocabulary, L layers.
"""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from attnkit.checks import check_int
from .configs import GPTConfig, TransformerConfig


def _as_module(model_or_config) -> nn.Module:
    if isinstance(model_or_config, nn.Module):
        return model_or_config
    if isinstance(model_or_config, (GPTConfig, TransformerConfig)):
        from .builders import build_model  # local import: builders imports the model classes

        return build_model(model_or_config, device="meta")
    raise ValueError(
        f"expected an nn.Module or a GPTConfig/TransformerConfig, got {type(model_or_config).__name__}"
    )


def count_parameters(model, *, trainable_only: bool = False) -> int:
    """Number of scalar parameters, each shared tensor counted once.

    Args:
        model: an ``nn.Module`` or a config (built on the meta device).
        trainable_only: count only parameters with ``requires_grad``.
    """
    module = _as_module(model)
    # named_parameters() already skips a Parameter object seen before (tied weights).
    return sum(p.numel() for _, p in module.named_parameters() if p.requires_grad or not trainable_only)


def tied_parameters(model) -> list[tuple[str, str]]:
    """Pairs ``(alias, owner)`` of parameter names that refer to the same tensor (``owner`` is counted)."""
    module = _as_module(model)
    owner: dict[int, str] = {}
    pairs: list[tuple[str, str]] = []
    for name, p in module.named_parameters(remove_duplicate=False):
        if id(p) in owner:
            pairs.append((name, owner[id(p)]))
        else:
            owner[id(p)] = name
    return pairs


def parameter_table(model, depth: int = 1) -> list[tuple[str, int]]:
    """Parameter counts grouped by the first ``depth`` components of the parameter names.

    ``depth=1`` gives top-level modules (``wte``, ``wpe``, ``blocks``, ``ln_f``, ``lm_head`` for a GPT);
    ``depth=2`` splits ``blocks`` into ``blocks.0``, ``blocks.1``, ... Rows come in registration order;
    their sum is :func:`count_parameters`. A tied tensor appears only under its owner.
    """
    check_int("depth", depth, minimum=1)
    module = _as_module(model)
    groups: OrderedDict[str, int] = OrderedDict()
    for name, p in module.named_parameters():
        key = ".".join(name.split(".")[:depth])
        groups[key] = groups.get(key, 0) + p.numel()
    return list(groups.items())


def format_parameter_table(model, depth: int = 1) -> str:
    """An aligned text table of :func:`parameter_table` with thousands separators and a total row.

    Tied tensors are listed underneath (e.g. ``lm_head.weight is wte.weight (counted once)``).
    """
    module = _as_module(model)
    rows = parameter_table(module, depth)
    total = sum(n for _, n in rows)
    header = ("module", "parameters")
    name_w = max([len(header[0]), len("total")] + [len(n) for n, _ in rows])
    num_w = max([len(header[1])] + [len(f"{n:,}") for _, n in rows] + [len(f"{total:,}")])
    lines = [f"{header[0]:<{name_w}}  {header[1]:>{num_w}}", f"{'-' * name_w}  {'-' * num_w}"]
    lines += [f"{name:<{name_w}}  {count:>{num_w},}" for name, count in rows]
    lines += [f"{'-' * name_w}  {'-' * num_w}", f"{'total':<{name_w}}  {total:>{num_w},}"]
    for alias, owner in tied_parameters(module):
        lines.append(f"({alias} is {owner}, counted once)")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------
# analytic counts (no model at all)
# ----------------------------------------------------------------------------------------------------

def _linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _norm(kind: str, dim: int, bias: bool = True) -> int:
    # LayerNorm: weight (+ bias); RMSNorm: weight only.
    return dim + (dim if kind == "layernorm" and bias else 0)


def _ffn(dim: int, hidden: int, gated: bool, bias: bool) -> int:
    # w_in (C->F), w_gate (C->F, gated only), w_out (F->C)
    return _linear(dim, hidden, bias) * (2 if gated else 1) + _linear(hidden, dim, bias)


def analytic_parameter_count(config: GPTConfig | TransformerConfig) -> list[tuple[str, int]]:
    """The depth-1 :func:`parameter_table` of the model ``config`` describes, by arithmetic.

    GPT (per block): ``ln_1 + attn + ln_2 + mlp`` where attn = qkv ``C x (H + 2K)D`` (+ bias) plus
    out ``HD x C`` (+ bias). Embeddings: ``wte`` ``V x C``; ``wpe`` ``block_size x C`` for learned positions;
    ``lm_head`` ``C x V`` only when untied.
    """
    if isinstance(config, GPTConfig):
        C, H, K, D, V = config.n_embd, config.n_head, config.kv_heads, config.head_size, config.vocab_size
        b = config.bias
        attn = _linear(C, (H + 2 * K) * D, b) + _linear(H * D, C, b)
        mlp = _ffn(C, config.ffn_size, config.is_gated, b)
        # GPT norms carry a bias exactly when the linear layers do (GPT-2 yes, Llama has RMSNorm anyway)
        block = 2 * _norm(config.norm, C, b) + attn + mlp
        rows = [("wte", V * C)]
        if config.position == "learned":
            rows.append(("wpe", config.block_size * C))
        rows += [("blocks", config.n_layer * block), ("ln_f", _norm(config.norm, C, b))]
        if not config.tie_embeddings:
            rows.append(("lm_head", C * V))
        return rows
    if isinstance(config, TransformerConfig):
        C, F, b = config.d_model, config.dim_feedforward, config.bias
        gated = config.activation in ("swiglu", "geglu")
        mha = _linear(C, 3 * C, b) + _linear(C, C, b)  # packed q|k|v (self) or q + packed k|v (cross)
        ff = _ffn(C, F, gated, b)
        norm = _norm(config.norm, C, b)
        enc_layer = mha + ff + 2 * norm
        dec_layer = 2 * mha + ff + 3 * norm
        core = config.num_encoder_layers * enc_layer + config.num_decoder_layers * dec_layer
        core += norm * (int(config.use_encoder_final_norm) + int(config.use_decoder_final_norm))
        pos_src = config.max_len * C if config.position == "learned" else 0
        rows = [("src_embed", config.src_vocab_size * C + pos_src)]
        if not config.share_embeddings:
            rows.append(("tgt_embed", config.tgt_vocab_size * C + pos_src))
        rows.append(("core", core))
        gen = (0 if config.tie_output else C * config.tgt_vocab_size) + (config.tgt_vocab_size if b else 0)
        if gen:
            rows.append(("generator", gen))
        return rows
    raise ValueError(f"expected a GPTConfig or TransformerConfig, got {type(config).__name__}")


def analytic_total(config: GPTConfig | TransformerConfig) -> int:
    """Sum of :func:`analytic_parameter_count`."""
    return sum(n for _, n in analytic_parameter_count(config))


__all__ = [
    "count_parameters",
    "parameter_table",
    "format_parameter_table",
    "tied_parameters",
    "analytic_parameter_count",
    "analytic_total",
]
