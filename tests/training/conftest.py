"""Shared fixtures for the training tests: tiny models and tasks that run in milliseconds on one CPU thread.

Axis legend: B batch, T sequence length, C width, V vocabulary.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.generation.generate import model_device
from attnkit.training.task import move_to_device


class FixedTask:
    """A Task over a fixed tensor of windows: train batch i = rows [i*B, (i+1)*B) (wrapping around).

    With this layout, ``grad_accum=2`` at batch size b reads exactly the rows of batch size 2b.
    """

    def __init__(self, windows: torch.Tensor, batch_size: int):
        self.windows = windows  # (N, T + 1)
        self.batch_size = batch_size

    def batch(self, split, step):
        n = self.windows.shape[0]
        idx = [(step * self.batch_size + j) % n for j in range(self.batch_size)]
        w = self.windows[idx]  # (B, T + 1)
        return w[:, :-1], w[:, 1:]

    def loss(self, model, batch):
        x, y = batch
        logits = model(x)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        return loss, y.numel()

    def evaluate(self, model, n_batches):
        # the trainer moves training batches to the device; a task's evaluate moves its own, as the real tasks do
        device = model_device(model)
        total = 0.0
        for i in range(n_batches):
            loss, _ = self.loss(model, move_to_device(self.batch("valid", i), device))
            total += float(loss)
        return {"loss": total / n_batches}

    def state_dict(self):
        return {"kind": "fixed", "n": int(self.windows.shape[0]), "batch_size": self.batch_size}

    def load_state_dict(self, state):
        if state != self.state_dict():
            raise ValueError(f"FixedTask state differs: {state} vs {self.state_dict()}")


@pytest.fixture
def token_streams():
    """Random token ids (V = 32): ``(train (3000,), valid (600,))``."""
    g = torch.Generator().manual_seed(1234)
    return torch.randint(0, 32, (3000,), generator=g), torch.randint(0, 32, (600,), generator=g)


@pytest.fixture
def fixed_task():
    """Factory: ``fixed_task(batch_size, n_windows=64, T=8)`` with reproducible random windows."""

    def make(batch_size: int, n_windows: int = 64, T: int = 8) -> FixedTask:
        g = torch.Generator().manual_seed(99)
        return FixedTask(torch.randint(0, 32, (n_windows, T + 1), generator=g), batch_size)

    return make
