"""Muon for the hidden matrices, AdamW for everything else, in one optimizer.

Muon (Jordan et al., 2024, "Muon: an optimizer for hidden layers in neural networks"; Liu et al., 2025, "Muon is
scalable for LLM training") replaces the update of a weight matrix ``W (R, C)`` by the nearest semi-orthogonal
matrix to its momentum::

    B   <- mu * B + G                         momentum of the gradient G, mu = 0.95
    U   =  G + mu * B                         Nesterov look-ahead
    O   =  orthogonalize(U)                   ~ P Q^T for U = P S Q^T (every singular value pushed towards 1)
    W   <- W - lr * wd * W - lr * 0.2 * sqrt(max(R, C)) * O

Every direction of the update then moves by about the same amount, however small its singular value in the raw
gradient. The factor ``0.2 * sqrt(max(R, C))`` (Liu et al.) gives the update the root-mean-square size of an AdamW
update, so that one learning rate and one schedule serve both halves of the optimizer.

``orthogonalize`` is the quintic Newton-Schulz iteration of Jordan et al.: after scaling ``X = U / ||U||_F`` (all
singular values in ``[0, 1]``) each step maps every singular value ``s`` to ``a s + b s^3 + c s^5`` with
``(a, b, c) = (3.4445, -4.7750, 2.0315)``, which raises small values steeply and leaves all of them near 1 after a
few steps (not exactly 1: the iteration trades exactness for speed). It needs only matrix products, and the
matrices of one shape go through it together as one stack. Its cost does not depend on the batch: about
``ns_steps * (4 R^2 C + 2 R^3)`` flops per matrix (R <= C) per update, which for a small model trained on small
batches on a CPU is a real share of the step (``docs/experiments/mt.md``, "Muon for the hidden matrices"), hence
``ns_steps``.

Muon is meant for the matrices inside the network. Embeddings, the output layer, biases and norm gains keep AdamW
(Jordan et al.): :func:`attnkit.training.optim.param_groups` puts each parameter in its group, and a group's
``"muon"`` key says which update it gets. torch's ``torch.optim.Muon`` takes 2-D parameters only and runs the
iteration in bfloat16 (slow on CPUs without bfloat16 units), so attnkit writes the few lines itself, in the
parameters' dtype; a test checks it against torch's.

Shapes: ``R`` rows and ``C`` columns of one weight matrix (an ``nn.Linear`` weight is ``(out, in)``), ``N``
matrices of one shape stacked.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch.optim.adamw import adamw

from attnkit.checks import check_float, check_int

NS_COEFFICIENTS: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)
MUON_MOMENTUM = 0.95
RMS_MATCH = 0.2  # Liu et al.: 0.2 * sqrt(max(R, C)) gives the update AdamW's root-mean-square size


def orthogonalize(update: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """The quintic Newton-Schulz approximation of ``P Q^T`` for ``update = P S Q^T`` (see the module doc), of one
    matrix or of each matrix of a stack (one batched product per step for the whole stack).

    Shape: update ``(R, C)`` or ``(N, R, C)`` -> the same shape and dtype.
    """
    if update.dim() not in (2, 3):
        raise ValueError(f"orthogonalize expects a matrix (R, C) or a stack (N, R, C), "
                         f"got shape {tuple(update.shape)}")
    steps = check_int("orthogonalize steps", steps, minimum=1)
    a, b, c = NS_COEFFICIENTS
    tall = update.shape[-2] > update.shape[-1]
    x = update.mT if tall else update  # (.., r, c) with r <= c: the Gram matrices below are the small r x r ones
    x = x.unsqueeze(0) if x.dim() == 2 else x  # (N, r, c)
    # Frobenius norm >= spectral norm: every singular value now in [0, 1]
    x = x / (torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True) + eps)
    for _ in range(steps):
        gram = torch.bmm(x, x.mT)  # (N, r, r)
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # b X X^T + c (X X^T)^2
        x = torch.baddbmm(x, poly, x, beta=a)  # a X + (b X X^T + c (X X^T)^2) X
    x = x.squeeze(0) if update.dim() == 2 else x
    return x.mT if tall else x


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon on the param groups whose ``"muon"`` key is True, AdamW (decoupled weight decay) on the others.

    Args:
        params: param groups (dicts with ``"params"`` and ``"muon"``; other keys override the defaults below,
            extra keys such as ``"name"`` are carried along). A Muon group may hold 2-D tensors only.
        lr: learning rate of both updates (Muon's is scaled to AdamW's size, see the module doc).
        betas, eps: AdamW's. weight_decay: decoupled, ``lr * weight_decay * W``, in both kinds of group.
        ns_steps: Newton-Schulz steps per Muon update (5 as Jordan et al.; fewer is cheaper and rougher).
        momentum: Muon's Nesterov momentum ``mu``.
        foreach, fused: how the AdamW half runs (as ``torch.optim.AdamW``'s; None lets torch choose).

    State per parameter: Muon ``"momentum_buffer"``; AdamW ``"step"``, ``"exp_avg"``, ``"exp_avg_sq"`` (as
    ``torch.optim.AdamW``), so checkpoints store both under the parameter's name.
    """

    def __init__(self, params: Any, *, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, ns_steps: int = 5,
                 momentum: float = MUON_MOMENTUM, foreach: bool | None = None, fused: bool | None = None):
        lr = check_float("MuonWithAdamW lr", lr, low=0.0)
        eps = check_float("MuonWithAdamW eps", eps, low=0.0)
        weight_decay = check_float("MuonWithAdamW weight_decay", weight_decay, low=0.0)
        ns_steps = check_int("MuonWithAdamW ns_steps", ns_steps, minimum=1)
        momentum = check_float("MuonWithAdamW momentum", momentum, low=0.0, high=1.0, high_inclusive=False)
        if len(betas) != 2 or not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"MuonWithAdamW betas must be two numbers in [0, 1), got {betas!r}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, ns_steps=ns_steps,
                        momentum=momentum, muon=False)
        super().__init__(params, defaults)
        if foreach and fused:
            raise ValueError("MuonWithAdamW: choose foreach or fused for the AdamW half, got both True")
        self.foreach, self.fused = foreach, fused
        for i, group in enumerate(self.param_groups):
            if not isinstance(group["muon"], bool):
                raise ValueError(f"MuonWithAdamW param group {i}: 'muon' must be True or False, got {group['muon']!r}")
            if group["muon"]:
                bad = [tuple(p.shape) for p in group["params"] if p.dim() != 2]
                if bad:
                    raise ValueError(f"MuonWithAdamW param group {i} ('muon': True) takes matrices (R, C) only, "
                                     f"got parameters of shapes {bad[:3]}")

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            (self._muon_step if group["muon"] else self._adamw_step)(group)
        return loss

    def _muon_step(self, group: dict[str, Any]) -> None:
        lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
        by_shape: dict[tuple, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p)
            buf = state["momentum_buffer"]  # (R, C)
            buf.mul_(mu).add_(p.grad)
            key = (tuple(p.shape), p.dtype, p.device)
            by_shape.setdefault(key, []).append((p, p.grad.add(buf, alpha=mu)))  # the Nesterov look-ahead U
        # Matrices of one shape are orthogonalized as one stack (N, R, C): a few large products instead of many
        # small ones, which uses the cores of a CPU (and a GPU) far better for small models.
        for ((rows, cols), _, _), items in by_shape.items():
            updates = orthogonalize(torch.stack([u for _, u in items]), group["ns_steps"])  # (N, R, C)
            for (p, _), update in zip(items, updates):
                if wd:
                    p.mul_(1.0 - lr * wd)
                p.add_(update, alpha=-lr * RMS_MATCH * math.sqrt(max(rows, cols)))

    def _adamw_step(self, group: dict[str, Any]) -> None:
        params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:  # as torch.optim.AdamW: the step count on the host, or beside the parameter when fused
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device if self.fused else "cpu")
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            elif self.fused and state["step"].device != p.device:  # restored from a checkpoint read on the host:
                # the fused kernel reads the count beside the parameter (torch.optim.AdamW's load_state_dict moves
                # it when a group says "fused"; these groups do not)
                state["step"] = state["step"].to(p.device, torch.float32)
            params.append(p)
            grads.append(p.grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if not params:
            return
        beta1, beta2 = group["betas"]
        adamw(params, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=self.foreach, fused=self.fused, amsgrad=False,
              beta1=beta1, beta2=beta2, lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"],
              maximize=False)
