"""LayerDrop: dropout of whole layers (Fan, Grave & Joulin 2019, "Reducing Transformer Depth on Demand with
Structured Dropout").

Axis legend: ``L`` layers of one stack.

In training, each layer of a stack is skipped with probability ``p``, for the whole batch: the layer's input goes
on to the next layer unchanged, so a skipped layer costs nothing, forward or backward. In a pre-norm residual
stack (``x + sublayer(norm(x))``) that is the same as zeroing every update the layer would add to the residual
stream; in a post-norm stack (``norm(x + sublayer(x))``) it also skips the layer's norms. In evaluation every
layer runs, and nothing is rescaled (as fairseq's ``encoder_layerdrop``/``decoder_layerdrop``). A network
trained like this relies less on any one layer, which is a regulariser for deep models on small data, and each
training update is cheaper by the share of layers it skips.

The draw uses torch's default CPU generator (seeded and saved in checkpoints by the trainer, so a resumed run
draws what the uninterrupted run would have drawn) and stays on the CPU, so a GPU update never waits for it.
With ``p = 0`` or in evaluation nothing is drawn at all.
"""

from __future__ import annotations

import torch

from attnkit.checks import check_float


def check_layer_drop(name: str, p: float) -> float:
    """``p`` as a float in [0, 1), or ``ValueError`` naming ``name`` (1 would skip every layer of every batch)."""
    return check_float(name, p, low=0.0, high=1.0, low_inclusive=True, high_inclusive=False)


def kept_layers(num_layers: int, p: float, training: bool) -> list[bool]:
    """Which of ``num_layers`` layers run in this forward pass: each is dropped with probability ``p`` when
    ``training``; all run otherwise (and nothing is drawn).

    Shape: returns ``L`` booleans, ``True`` = the layer runs.
    """
    if not training or p == 0.0:
        return [True] * num_layers
    return (torch.rand(num_layers) >= p).tolist()  # (L,) on the CPU
