"""The optimizer (AdamW, decoupled weight decay on matrices only; or Muon + AdamW) and the learning-rate schedules.

Weight decay pulls weights towards zero. It makes sense for the big matrices that do the work (linear
layers, embeddings: every parameter with ``ndim >= 2``), but not for biases, norm gains and other 1-D
parameters: decaying a LayerNorm gain towards 0 would fight the normalisation itself. So the optimizer gets
two parameter groups, "decay" and "no_decay" (the nanoGPT recipe; embeddings decay too). With
``optimizer="muon"`` a third group, "muon", comes first: the hidden matrices, updated by Muon (``muon.py``).

Schedules are written as a function of ``n``, the 1-based number of the update about to happen
(``n = step + 1`` where ``step`` counts completed updates), with ``W = warmup_steps``, ``N = schedule_steps``
(else ``steps``):

* ``cosine``       n <= W: ``lr * n / W``; W < n < N: ``min_lr + (lr - min_lr) * (1 + cos(pi * (n - W) / (N - W))) / 2``;
                   n >= N: ``min_lr``. So update W runs at the peak ``lr`` and the last update at ``min_lr``
                   (with W = N, warmup to the end, there is no decay: the last update runs at the peak).
* ``inverse_sqrt`` ``lr * d_model**-0.5 * min(n**-0.5, n * W**-1.5)`` ("Attention Is All You Need", eq. 3,
                   with ``lr`` as a scale factor: ``lr=1.0`` is the paper); peaks at n = W.
* ``constant``     n <= W: ``lr * n / W``; afterwards ``lr``.

A time-limited run (no ``N``) may also end its warmup by time: with ``warmup_time_share = s`` and ``f`` the share
of the time budget used, the cosine and constant warmups last while ``n <= W`` and ``f < s``, at
``max(lr * n / W, lr * f / s)``. Its cosine then runs over the whole budget, not over what is left after the
warmup: ``min_lr + (lr - min_lr) * (1 + cos(pi * f)) / 2``, so the first update after a warmup that ended at
``f = 0.1`` runs at about ``0.976 * lr`` (with ``min_lr = 0``), not at the peak.

No tensors are involved here, so there are no shapes to document.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn

from attnkit.checks import check_float, check_int, is_int
from .config import SCHEDULES, TrainConfig
from .muon import MuonWithAdamW


# -------------------------------------------------------------------------------------------------
# parameter groups + optimizer
# -------------------------------------------------------------------------------------------------

def _hidden_matrices(model: nn.Module) -> set[int]:
    """ids of the weights of the ``nn.Linear`` modules inside ``model``, except its output layer (the model's
    ``output_layer()``, when it has one) and any weight shared with an ``nn.Embedding`` (tied)."""
    head = model.output_layer() if callable(getattr(model, "output_layer", None)) else None
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return {id(m.weight) for m in model.modules()
            if isinstance(m, nn.Linear) and m is not head and id(m.weight) not in embedded}


def param_groups(model: nn.Module, weight_decay: float, *, muon: bool = False) -> list[dict[str, Any]]:
    """Split the trainable parameters into ``[decay group, no_decay group]``, or with ``muon=True`` into
    ``[muon group, decay group, no_decay group]``.

    Each group is a dict for the optimizer with ``"params"``, ``"weight_decay"`` and two extra keys the optimizer
    carries along untouched: ``"name"`` ("muon" / "decay" / "no_decay") and ``"param_names"`` (the parameter names,
    in order; checkpoints use them to store optimizer state under stable names). With ``muon=True`` every group
    also has ``"muon"`` (True for the first only, see :class:`attnkit.training.muon.MuonWithAdamW`): the hidden
    matrices (``nn.Linear`` weights other than the output layer and tied embeddings) go to Muon, the embeddings
    and the output layer to "decay", vectors to "no_decay".
    Tied parameters (e.g. ``lm_head.weight`` is ``wte.weight``) appear once, under their first name.
    Frozen parameters (``requires_grad=False``) are left out. Raises ``ValueError`` when nothing is trainable, and
    with ``muon=True`` when no hidden matrix is (a LoRA model's adapters are not ``nn.Linear`` weights): Muon would
    update nothing.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"param_groups expects an nn.Module, got {type(model).__name__}")
    hidden = _hidden_matrices(model) if muon else set()
    orthogonal, decay, no_decay = [], [], []
    for name, p in model.named_parameters():  # named_parameters() already removes tied duplicates
        if not p.requires_grad:
            continue
        (orthogonal if id(p) in hidden else decay if p.ndim >= 2 else no_decay).append((name, p))
    if not orthogonal and not decay and not no_decay:
        raise ValueError(f"{type(model).__name__} has no trainable parameters")
    if muon and not orthogonal:  # e.g. LoRA: the adapters are plain parameters, the nn.Linear weights frozen
        raise ValueError(f"optimizer 'muon' needs trainable hidden matrices (nn.Linear weights other than the output "
                         f"layer), got none in {type(model).__name__} (its trainable parameters "
                         f"{[n for n, _ in decay + no_decay][:3]} would all get AdamW): use optimizer 'adamw'")
    groups = [
        {"params": [p for _, p in decay], "param_names": [n for n, _ in decay],
         "weight_decay": float(weight_decay), "name": "decay"},
        {"params": [p for _, p in no_decay], "param_names": [n for n, _ in no_decay],
         "weight_decay": 0.0, "name": "no_decay"},
    ]
    if not muon:
        return groups
    for g in groups:
        g["muon"] = False
    return [{"params": [p for _, p in orthogonal], "param_names": [n for n, _ in orthogonal],
             "weight_decay": float(weight_decay), "name": "muon", "muon": True}] + groups


def _auto_impl(model: nn.Module) -> dict[str, bool]:
    """``adamw_impl="auto"``: the fused kernel when every parameter is on a CUDA device (one launch per parameter
    group; its step counts stay on the device, so the update never waits for the host), else torch's own choice
    (the for-loop on the CPU, whose numbers the CPU tests pin)."""
    params = list(model.parameters())
    on_cuda = bool(params) and all(p.device.type == "cuda" for p in params)
    return {"fused": True} if on_cuda else {}


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer of ``config.optimizer``: AdamW over :func:`param_groups` with the config's lr, betas, eps and
    implementation choice ("auto": fused on CUDA, see :func:`_auto_impl`), or
    :class:`attnkit.training.muon.MuonWithAdamW` (Muon on the hidden matrices with ``config.muon_ns_steps``
    Newton-Schulz steps, AdamW with the same settings on the rest)."""
    impl = {"auto": _auto_impl(model), "fused": {"fused": True}, "foreach": {"foreach": True},
            "for_loop": {"foreach": False}}[config.adamw_impl]
    if config.optimizer == "muon":
        return MuonWithAdamW(param_groups(model, config.weight_decay, muon=True), lr=config.lr, betas=config.betas,
                             eps=config.eps, weight_decay=config.weight_decay, ns_steps=config.muon_ns_steps, **impl)
    # An empty group is legal for torch but useless; keep the two-group layout anyway so the checkpoint
    # layout of every attnkit optimizer is the same ("decay", "no_decay").
    return torch.optim.AdamW(param_groups(model, config.weight_decay), lr=config.lr, betas=config.betas,
                             eps=config.eps, **impl)


# -------------------------------------------------------------------------------------------------
# learning-rate schedules
# -------------------------------------------------------------------------------------------------

def _warming_up(lr: float, n: int, w: int, time_fraction: float | None, time_share: float | None) -> float | None:
    """The lr of update ``n`` while the linear warmup lasts, None once it is over: after ``w`` updates, or (with
    ``time_share``, time-limited runs) once that share of the time budget has passed, whichever comes first."""
    by_time = time_share is not None and time_fraction is not None
    if n > w or (by_time and time_fraction >= time_share):
        return None
    if by_time:
        return max(lr * n / w, lr * max(time_fraction, 0.0) / time_share)
    return lr * n / w


def lr_at(step: int, *, schedule: str, lr: float, min_lr: float = 0.0, warmup_steps: int = 0,
          total_steps: int | None = None, d_model: int | None = None, time_fraction: float | None = None,
          warmup_time_share: float | None = None) -> float:
    """Learning rate for the update that follows ``step`` completed updates (i.e. update ``n = step + 1``).

    See the module docstring for the formulas. Raises ``ValueError`` for an unknown schedule, a negative
    step, lr, min_lr or warmup_steps, a total_steps or d_model below 1, or a missing ``total_steps`` (cosine) /
    ``d_model`` / ``warmup_steps`` (inverse_sqrt).
    """
    check_int("step", step, minimum=0)
    lr, min_lr = check_float("lr_at lr", lr, low=0.0), check_float("lr_at min_lr", min_lr, low=0.0)
    check_int("lr_at warmup_steps", warmup_steps, minimum=0)
    check_int("lr_at total_steps", total_steps, minimum=1, allow_none=True)
    check_int("lr_at d_model", d_model, minimum=1, allow_none=True)
    n = step + 1
    w = warmup_steps
    share = warmup_time_share if total_steps is None else None  # by time: only for time-limited runs
    if schedule == "constant":
        warm = _warming_up(lr, n, w, time_fraction, share)
        return lr if warm is None else warm
    if schedule == "cosine":
        if total_steps is None and time_fraction is None:
            raise ValueError("the cosine schedule needs total_steps (or time_fraction for a time-limited run), got None")
        warm = _warming_up(lr, n, w, time_fraction, share)
        if warm is not None:
            return warm
        if total_steps is None:
            # time-limited run: decay over the fraction of the time budget already used
            progress = min(max(time_fraction, 0.0), 1.0)
            return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
        if n >= total_steps:
            return min_lr
        progress = (n - w) / (total_steps - w)  # in (0, 1)
        return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule == "inverse_sqrt":
        if d_model is None:
            raise ValueError("the inverse_sqrt schedule needs d_model, got None")
        if w < 1:
            raise ValueError(f"the inverse_sqrt schedule needs warmup_steps >= 1, got {w}")
        return lr * d_model ** -0.5 * min(n ** -0.5, n * w ** -1.5)
    raise ValueError(f"schedule must be one of {list(SCHEDULES)}, got {schedule!r}")


class LRScheduler:
    """Sets every param group's ``lr`` from :func:`lr_at`, one update at a time.

    Usage (the trainer does exactly this)::

        sched = LRScheduler(optimizer, config)   # sets the lr for update 1
        for ...:
            lr = sched.apply()                   # the lr of this update, by the clock as it reads now
            optimizer.step()
            sched.step()                         # one more update done; sets the lr for the next one

    ``d_model`` overrides ``config.d_model`` (inverse_sqrt only). The cosine decays over
    ``config.schedule_horizon`` updates (``schedule_steps``, else ``steps``). ``clock`` returns the run's elapsed
    seconds; a cosine schedule of a time-limited run (no ``steps``, no ``schedule_steps``) decays over
    ``config.max_time`` by it
    (:meth:`TrainConfig.budget_fraction`). ``state_dict()`` is JSON-able:
    ``{"step": completed updates, "schedule": name, "lr": current lr}``; ``load_state_dict`` restores the
    step and re-applies the lr (the formula itself always comes from the current config).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, config: TrainConfig, *, d_model: int | None = None,
                 clock: Callable[[], float] | None = None):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError(f"LRScheduler expects a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if not isinstance(config, TrainConfig):
            raise ValueError(f"LRScheduler expects a TrainConfig, got {type(config).__name__}")
        self.optimizer = optimizer
        self.config = config
        self.d_model = d_model if d_model is not None else config.d_model
        if config.schedule == "inverse_sqrt" and self.d_model is None:
            raise ValueError("schedule 'inverse_sqrt' needs d_model: set TrainConfig.d_model or pass d_model=, got None")
        self.last_step = 0  # completed updates
        if clock is not None and not callable(clock):
            raise ValueError(f"LRScheduler clock must be a callable returning seconds, got {type(clock).__name__}")
        self.clock = clock
        self.apply()

    def lr_at(self, step: int) -> float:
        """The lr for the update after ``step`` completed updates."""
        c = self.config
        fraction = c.budget_fraction(self.clock()) if self.clock is not None else None
        if c.schedule == "cosine" and c.schedule_horizon is None and fraction is None:
            fraction = 0.0
        return lr_at(step, schedule=c.schedule, lr=c.lr, min_lr=c.min_lr, warmup_steps=c.warmup_steps,
                     total_steps=c.schedule_horizon, d_model=self.d_model, time_fraction=fraction,
                     warmup_time_share=c.warmup_time_share)

    def get_lr(self) -> float:
        """The lr the next ``optimizer.step()`` will use."""
        return self.lr_at(self.last_step)

    def apply(self) -> float:
        """Set every param group's lr to :meth:`get_lr` and return it. A schedule that follows the clock (a
        time-limited run) has moved since the last :meth:`step`: call this just before each update so that the
        update runs at the lr of its own time (and a resumed run at the lr of its checkpoint's time, not the
        lr of time 0 that the scheduler had when it was built)."""
        lr = self.get_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def step(self) -> None:
        """Record one completed update and set the lr for the next one."""
        self.last_step += 1
        self.apply()

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.last_step, "schedule": self.config.schedule, "lr": self.get_lr()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        step = state.get("step") if isinstance(state, dict) else None
        if not is_int(step) or step < 0:
            raise ValueError(f"scheduler state must contain an int 'step' >= 0, got {state!r}")
        self.last_step = step
        self.apply()
