"""Activation checkpointing (a.k.a. gradient checkpointing): keep fewer activations for the backward pass, and
compute them again there.

Axis legend: ``B`` batch, ``L`` sequence length (of the layer's input), ``C`` model width.

Training keeps, for the backward pass, what every operation of the forward pass needs to compute its gradient:
inside one Transformer block that is the normed inputs, the queries, keys and values, the attention weights (or
their statistics), the feed-forward's wide ``(B, L, F)`` hidden state, the dropout masks... many times the
``(B, L, C)`` of the block's input. With checkpointing on, each block of a stack runs through
``torch.utils.checkpoint.checkpoint(block, ..., use_reentrant=False)``: the forward pass keeps only the block's
inputs, and the backward pass runs the block's forward again (with the random state it had, so the dropout masks
are the same) to get the rest. The numbers do not change; the memory of the activations drops from about
``layers x (a block's intermediates)`` to ``layers x (B, L, C) + (one block's intermediates)``, and every
update costs about one more forward pass of the stacks (a third more compute). It is how to run, not what the
model is: it is not in the model config, nothing of it is saved, and a resumed run may switch it on or off.

A model takes it with :class:`ActivationCheckpointing` (a mixin of :class:`~attnkit.models.gpt.GPT`, the
encoder-decoder's stacks and the models holding them): ``model.enable_activation_checkpointing()``. The stacks
checkpoint a block only where it saves something: in training (``model.train()``), with gradients on, and
without a KV cache. Evaluation, ``torch.no_grad`` and decoding with a cache run the blocks as they are.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from attnkit.checks import check_bool


class ActivationCheckpointing:
    """Mixin for a module that holds stacks of blocks: the switch, and the rule of when a stack checkpoints.

    ``activation_checkpointing`` is off (``False``) until :meth:`enable_activation_checkpointing`; it is a plain
    attribute (not a buffer, not in the ``state_dict``), so checkpoints and configs do not see it.
    """

    activation_checkpointing: bool = False

    def enable_activation_checkpointing(self, enabled: bool = True) -> None:
        """Switch activation checkpointing on (or off with ``enabled=False``) for every stack in this module:
        itself and each :class:`ActivationCheckpointing` module inside it (a ``Transformer``'s encoder and
        decoder). ``ValueError`` when ``enabled`` is not a bool."""
        check_bool("enable_activation_checkpointing enabled", enabled)
        for module in self.modules():  # type: ignore[attr-defined]  (the class it is mixed into is an nn.Module)
            if isinstance(module, ActivationCheckpointing):
                module.activation_checkpointing = enabled

    def checkpoints_blocks(self, *, cached: bool = False) -> bool:
        """Whether this forward pass runs its blocks through :func:`run_block` with checkpointing: switched on,
        in training, with gradients on, and not ``cached`` (decoding with a KV cache, whose blocks write into it:
        running them twice would write twice)."""
        return (self.activation_checkpointing and self.training  # type: ignore[attr-defined]
                and torch.is_grad_enabled() and not cached)


def run_block(block: nn.Module, x: torch.Tensor, *args: Any, checkpointed: bool, **kwargs: Any) -> torch.Tensor:
    """``block(x, *args, **kwargs)``; with ``checkpointed`` through non-reentrant
    ``torch.utils.checkpoint.checkpoint``, which keeps only its inputs for the backward pass and runs it again
    there (the CPU's and the inputs' device's random states are restored for that, so dropout draws the same
    masks). The result is the same either way, and so are the gradients.

    Shape:
        x: ``(B, L, C)`` -> ``(B, L, C)`` (what ``block`` returns).
    """
    if checkpointed:
        return checkpoint(block, x, *args, use_reentrant=False, **kwargs)
    return block(x, *args, **kwargs)
