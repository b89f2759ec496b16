"""Chunked cross-entropy: the loss of the output layer without keeping the whole ``(N, V)`` logits for the backward
pass.

Axis legend: ``B`` batch, ``T`` sequence length, ``N`` rows (positions, ``B * T``), ``C`` model width, ``V``
vocabulary, ``K`` chunks.

The plain loss is ``cross_entropy(head(h).float(), y)``: the head (``lm_head``, ``h @ W.T (+ b)`` with ``W`` of
shape ``(V, C)``) turns the final hidden states ``h (N, C)`` into logits ``(N, V)``, and the log-softmax over ``V``
keeps its float32 ``(N, V)`` result for the backward pass, which then makes a gradient of the same size. For a
large vocabulary that is most of a step's memory: fine-tuning SmolLM2-135M (``V = 49,152``) on a batch of
8 x 512 keeps ``8 * 512 * 49,152 * 4`` bytes = 805 MB of float32 logits, and its gradient is as large again;
with activation checkpointing its 30 blocks keep only ``30 * 4,096 * 576 * 4`` bytes = 283 MB.

:func:`chunked_cross_entropy` splits the rows into ``K`` chunks and runs each chunk's head and cross-entropy
(summed over its rows, logits in float32 or wider) through ``torch.utils.checkpoint.checkpoint(...,
use_reentrant=False)``: the forward pass keeps only the chunk's inputs (a view of ``h``, which the head's backward
needs anyway, and its targets), and the backward pass makes each chunk's logits again, one chunk at a time. The
logits alive at once drop from ``(N, V)`` to ``(N / K, V)`` (and their gradient with them); the cost is one more
forward pass of the head per update (``N C V`` multiply-adds: the head's share of a step grows by a third). The sum
of the chunks' sums, divided by the number of counted rows, is the plain mean: the same number up to float rounding
(the rows are summed in another order), not bit for bit.

The head is called as the module it is (``head(h_chunk)``), so a tied head, a LoRA head or an FSDP2-sharded one
(its weight gathered by the module's owner in the forward pass, read again through the module in the backward
pass) works as in the plain loss; the model calls this function inside its own forward pass
(:meth:`~attnkit.models.gpt.GPT.forward`'s ``output_fn``), where DDP's and FSDP2's hooks expect the head to be used.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from attnkit.checks import check_float, check_int

IGNORE_INDEX = -100  # cross_entropy's default ignore_index: rows with this target count nowhere


def head_vocab_size(head: object) -> int:
    """The ``V`` of an output layer: its ``out_features`` (``nn.Linear``, ``LoRALinear``, ``QuantizedLinear``), which
    the tasks check their targets against before the chunks run; ``ValueError`` for a head without it."""
    V = getattr(head, "out_features", None)
    if not isinstance(V, int) or isinstance(V, bool):
        raise ValueError(f"the chunked loss needs an output layer with an int out_features (nn.Linear, LoRALinear), "
                         f"got {type(head).__name__}")
    return V


def _chunk_sums(head: Callable[[torch.Tensor], torch.Tensor], h: torch.Tensor, y: torch.Tensor, ignore_index: int,
                smoothed: bool) -> torch.Tensor:
    """One chunk's summed negative log-likelihood and, when ``smoothed``, its summed smoothing term ``-mean_v log p``,
    over the rows whose target is not ``ignore_index``; its logits and log-probabilities ``(n, V)`` live only here.
    (``label_smoothing`` itself stays outside: a compiled loss of any shape sees it as a symbol, which the
    checkpoint's subgraph does not take.)

    Shape: head ``(n, C) -> (n, V)``; h ``(n, C)``, y ``(n,)`` -> 0-dim, or ``(2,)`` when smoothed.
    """
    logits = head(h)  # (n, V)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # float32 even under bf16 autocast
    logp = F.log_softmax(logits, dim=-1)  # (n, V): what F.cross_entropy computes first
    nll = F.nll_loss(logp, y, ignore_index=ignore_index, reduction="sum")
    if not smoothed:
        return nll
    smooth = -(logp.mean(dim=-1) * (y != ignore_index)).sum()  # F.cross_entropy's smoothing term, summed
    return torch.stack([nll, smooth])  # (2,)


def chunked_cross_entropy(hidden: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor], targets: torch.Tensor,
                          *, chunks: int, ignore_index: int = IGNORE_INDEX,
                          label_smoothing: float = 0.0) -> torch.Tensor:
    """``F.cross_entropy(head(hidden).float(), targets, ignore_index=..., label_smoothing=...)`` (the mean over the
    rows whose target is not ``ignore_index``), computed over ``chunks`` row chunks, each checkpointed: no chunk's
    logits are kept for the backward pass.

    Args:
        hidden: the final hidden states (after the last norm), any leading axes.
        head: the output layer (an ``nn.Module`` such as ``lm_head``, or any function of the hidden states).
        targets: class ids, ``hidden``'s leading shape; ``ignore_index`` rows count neither in the sum nor in the
            count (with label smoothing too: the smoothing term is averaged over the same rows).
        chunks: ``K >= 1``; ``torch.tensor_split`` makes exactly ``K`` chunks of ``ceil(N / K)`` or
            ``floor(N / K)`` rows (an empty chunk adds 0), so the number of chunks does not depend on ``N`` and a
            compiled loss does not recompile for another batch size.
        label_smoothing: ``ε`` in ``[0, 1]``.

    Shape:
        hidden ``(..., C)``, targets ``(...)`` -> 0-dim loss (float32; float64 for float64 logits); ``(N, C)`` and
        ``(N,)`` with ``N`` the product of the leading axes.
    """
    if not torch.compiler.is_compiling():  # (a compiled loss of any shape sees label_smoothing as a symbol)
        check_int("chunked_cross_entropy chunks", chunks, minimum=1)
        check_float("chunked_cross_entropy label_smoothing", label_smoothing, low=0.0, high=1.0)
    if not isinstance(hidden, torch.Tensor) or not isinstance(targets, torch.Tensor) \
            or hidden.shape[:-1] != targets.shape:
        got = [tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__ for t in (hidden, targets)]
        raise ValueError(f"chunked_cross_entropy needs hidden (..., C) and targets (...) of its leading shape, "
                         f"got {got[0]} and {got[1]}")
    h = hidden.reshape(-1, hidden.shape[-1])  # (N, C)
    y = targets.reshape(-1).long()  # (N,)
    smoothed = label_smoothing > 0
    total = None  # the chunks' sums: 0-dim, or (2,) (nll, smoothing term) when smoothed
    for h_k, y_k in zip(torch.tensor_split(h, chunks), torch.tensor_split(y, chunks)):  # (N / K, C), (N / K,)
        sums = checkpoint(_chunk_sums, head, h_k, y_k, ignore_index, smoothed, use_reentrant=False)
        total = sums if total is None else total + sums
    if smoothed:  # F.cross_entropy's definition: (1 - ε) nll + ε (-mean_v log p), over the same rows
        total = (1.0 - label_smoothing) * total[0] + label_smoothing * total[1]
    counted = (y != ignore_index).sum()  # on the device: nothing is read back
    return total / counted
