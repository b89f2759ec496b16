"""Next-token predictions at every position: the "probability matrix" of a language model, row by row.

Axis legend: ``T`` positions of the input, ``V`` vocabulary, ``k`` candidates kept per position.

A decoder reads a prefix and, at each position ``t``, outputs a distribution over the vocabulary for token
``t + 1`` (seed 000's probability matrix; seed 002's token-by-token generation takes the last row, appends the
chosen token and repeats). :func:`next_token_predictions` returns the ``k`` most likely next tokens and their
probabilities for every position of one sequence, for a GPT or for the decoder of an encoder-decoder
Transformer (given the source).
"""

from __future__ import annotations

import torch
from torch import nn

from attnkit.checks import is_int
from .attention_maps import _device, _one_sequence

__all__ = ["next_token_predictions"]


def next_token_predictions(model: nn.Module, idx, *, src=None, top_k: int = 5,
                           vocab_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``top_k`` most likely next tokens after every prefix of ``idx``.

    Args:
        model: a ``GPT``, or a ``Transformer`` (then ``src`` is required and ``idx`` is the decoder input).
        idx: one sequence of token ids: list, ``(T,)`` or ``(1, T)``.
        src: source ids of one sentence (encoder-decoder only).
        top_k: candidates per position, ``1 <= top_k <= V``.
        vocab_size: the tokenizer's size when the model's output layer is padded beyond it (``--set vocab_size``,
            GPT-2's 50257 as 50304): candidates are drawn from the ids below it, with the probabilities the model
            gives them (the softmax is over all ``V`` logits). Default (or a larger size): all ``V``.

    Returns:
        ``(probs, ids)``: probabilities in decreasing order and the matching token ids; row ``t`` predicts the
        token at position ``t + 1``. The model runs in eval mode without gradients (training flag restored).

    Shape:
        idx ``(T,)`` -> probs ``(T, k)`` float32, ids ``(T, k)`` int64 (CPU).
    """
    from attnkit.models.gpt import GPT
    from attnkit.models.transformer import Transformer

    device = _device(model)
    ids = _one_sequence(idx, "idx").to(device)
    if isinstance(model, GPT):
        if src is not None:
            raise ValueError("src is only for an encoder-decoder Transformer; a GPT reads idx alone")
        V = model.config.vocab_size
        run = lambda: model(ids)  # noqa: E731
    elif isinstance(model, Transformer):
        if src is None:
            raise ValueError("an encoder-decoder Transformer needs src (the source sentence's ids), got None")
        src_ids = _one_sequence(src, "src").to(device)
        V = model.config.tgt_vocab_size
        run = lambda: model(src_ids, ids)  # noqa: E731
    else:
        raise ValueError(f"next_token_predictions expects a GPT or a Transformer, got {type(model).__name__}")
    if vocab_size is not None and (not is_int(vocab_size) or vocab_size < 1):
        raise ValueError(f"vocab_size must be an int >= 1, got {vocab_size!r}")
    real = V if vocab_size is None else min(vocab_size, V)  # a larger tokenizer: its ids past V never come
    if not is_int(top_k) or not 1 <= top_k <= real:
        raise ValueError(f"top_k must be an int in [1, {real}] (the vocabulary size), got {top_k!r}")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = run()[0].float()  # (T, V)
    finally:
        model.train(was_training)
    if not bool(torch.isfinite(logits).all()):  # a figure of NaN probabilities would look like a real one
        raise FloatingPointError("the model's next-token logits are not finite (NaN or inf): its weights are broken")
    probs = torch.softmax(logits, dim=-1)  # (T, V)
    top = probs[:, :real].topk(top_k, dim=-1)  # sorted, largest first; never a padding id past the tokenizer
    return top.values.cpu(), top.indices.cpu()  # (T, k), (T, k)
