"""Training configuration: one validated dataclass that round-trips through JSON.

``TrainConfig`` holds every knob of the training loop (:class:`attnkit.training.trainer.Trainer`): how long
to train, batch shape, optimizer, learning-rate schedule, evaluation / logging / checkpoint cadence, seed,
and the opt-in speed features (``torch.compile``, bfloat16 autocast, fused/foreach AdamW) and memory saving
(activation checkpointing).

Step numbering used everywhere in attnkit.training: ``step`` counts *completed optimizer updates*.
A run with ``steps=100`` performs updates 1..100; a checkpoint "at step 40" holds the state after update 40;
"every N steps" means after updates N, 2N, ...

Axis legend (for the batch-shape fields): B batch (sequences per micro-batch), T sequence length.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from attnkit.checks import INDEX_MAX, SEED_MAX, check_bool, check_choice, check_float, check_int, is_int

SCHEDULES: tuple[str, ...] = ("cosine", "inverse_sqrt", "constant")
AUTOCAST_DTYPES: tuple[str | None, ...] = (None, "bf16", "fp16")
ADAMW_IMPLS: tuple[str, ...] = ("auto", "fused", "foreach", "for_loop")
OPTIMIZERS: tuple[str, ...] = ("adamw", "muon")
BEST_MODES: tuple[str, ...] = ("min", "max")

# Fields a resumed run may change: extending a run (more steps, more minutes) is the point of resuming;
# checkpoints are device-free, so a run started on a GPU may continue on the CPU and back; activation
# checkpointing changes no number, only the memory and time an update takes; chunking the loss changes the order in
# which it is summed (the same losses up to float rounding), like another device.
RESUMABLE_CHANGES: tuple[str, ...] = ("steps", "max_time", "device", "stop_at_loss", "activation_checkpointing",
                                      "loss_chunks")
# The most tokens in one micro-batch (batch_size x block_size): the indices of torch's kernels are 32-bit.
MAX_BATCH_TOKENS = INDEX_MAX
# The most chunks of the chunked loss (4,096 chunks of a micro-batch of 4,096 rows are one row each); more would
# only add a loop of empty checkpointed chunks, one Python call each.
MAX_LOSS_CHUNKS = 4096
MAX_MINUTES = 1e9  # the longest max_time (about 1,900 years): its seconds stay a finite float
# The length of a run given neither steps nor max_time (TrainConfig's default and resolve_train_config's).
DEFAULT_STEPS = 2000


def _int(name: str, value: Any, *, minimum: int, allow_none: bool = False) -> int | None:
    return check_int(f"TrainConfig.{name}", value, minimum=minimum, allow_none=allow_none)


def _float(name: str, value: Any, *, low: float, high: float | None = None, low_inclusive: bool = True,
           high_inclusive: bool = True, allow_none: bool = False) -> float | None:
    return check_float(f"TrainConfig.{name}", value, low=low, high=high, low_inclusive=low_inclusive,
                       high_inclusive=high_inclusive, allow_none=allow_none)


def _choice(name: str, value: Any, choices: tuple) -> Any:
    return check_choice(f"TrainConfig.{name}", value, choices)


@dataclass
class TrainConfig:
    """Everything the training loop needs to know, validated on construction.

    Length of the run (at least one of the two; with both, whichever comes first stops training):
        steps: number of optimizer updates (None = unbounded, then ``max_time`` is required).
        max_time: wall-clock budget in minutes, counted over the whole run including earlier resumed
            segments (None = unbounded). Time-limited runs are not reproducible step for step.
        stop_at_loss: a target (None = none): the run also stops at the first evaluation whose ``valid_loss``
            is at or below it (``stopped_by`` "target"; the summary's ``target`` says when it was reached).
    Batch:
        batch_size: B, sequences per micro-batch over all processes (the global micro-batch; under torchrun
            each of N processes computes B / N of them, see ``distributed.py``; the CLI's ``--batch-size`` is
            per process and becomes ``B = batch_size * N`` here). block_size: T for language modelling (read by the task
            builder, e.g. ``LMTask``; the loop itself does not use it). grad_accum: micro-batches per update
            (gradients are averaged over all tokens of all micro-batches, so ``grad_accum=2, batch_size=b``
            equals ``batch_size=2b``). ``batch_size x block_size`` is at most ``MAX_BATCH_TOKENS`` (2**31 - 1).
    Optimizer (see ``optim.py``):
        optimizer: "adamw" (AdamW, decay on matrices only) or "muon" (Muon on the hidden matrices, AdamW on
        embeddings, output layer, biases and norms; ``muon.py``). lr, weight_decay, betas, eps (of AdamW, and lr
        and weight_decay of Muon too), adamw_impl ("auto" lets torch choose, or force "fused" / "foreach" /
        "for_loop"; with "muon" it applies to the AdamW half), muon_ns_steps (Newton-Schulz steps per Muon
        update), grad_clip (max global L2 norm; None = no clipping).
    Schedule (see ``optim.lr_at``): schedule "cosine" (linear warmup to lr, cosine decay to min_lr at
        ``schedule_steps`` updates, or at ``steps``, or over the time budget when both are None),
        "inverse_sqrt" (the paper's ``lr * d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)``, lr is the scale
        factor, 1.0 reproduces the paper; needs
        warmup_steps >= 1 and ``d_model`` here or from the model config), "constant" (linear warmup to lr,
        then flat). min_lr (cosine only), warmup_steps. warmup_time_share (time-limited runs, ``steps`` None, of
        the cosine and constant schedules; None = off): the warmup also ends once this share of the time budget has
        passed, whichever comes first (the ramp is the larger of the two, see ``optim.lr_at``);
        :func:`resolve_train_config` sets it to a tenth for a time-limited run whose warmup was left to the recipe.
    Cadence: eval_every / log_every / ckpt_every in steps (log_every is also how often the updates' losses are
        read back from the device and checked), eval_batches per evaluation, keep_last K
        step checkpoints (plus ``best/``, judged by ``best_metric`` (a key of the logged evaluation row,
        e.g. "valid_loss" or "valid_bleu") in ``best_mode`` "min" or "max").
    Misc: seed (python, numpy and torch RNGs at the start of ``fit``), device ("auto", "cpu", "cuda",
        "cuda:N", "mps"; see ``device.py``), compile (opt-in ``torch.compile``), autocast (None, "bf16", or
        "fp16" with a gradient scaler, GPUs only), fsdp (shard parameters, gradients and optimizer state
        over the torchrun processes with FSDP2 instead of replicating them with DDP), cuda_graphs (record each
        batch shape's forward and backward as a CUDA graph and replay it: one CUDA process, no compile, no fp16,
        a task with ``count_tokens`` and batches of a few fixed shapes; see ``cuda_graphs.py``),
        activation_checkpointing (the trainer switches the model's on or off:
        ``model.enable_activation_checkpointing``, :mod:`attnkit.modules.activation_checkpointing`; each block's
        activations are computed again in the backward pass instead of kept: the same numbers, less memory, about
        a third more compute; a resumed run may switch it either way), loss_chunks (0: the plain loss; K >= 1:
        the task's cross-entropy over K row chunks of the final hidden states, each chunk's logits made again in the
        backward pass instead of kept, :mod:`attnkit.modules.chunked_cross_entropy`: the same losses up to float
        rounding, no ``(B, T, V)`` logits kept; a resumed run may change it; not with cuda_graphs).
    """

    steps: int | None = DEFAULT_STEPS
    max_time: float | None = None
    stop_at_loss: float | None = None
    batch_size: int = 32
    block_size: int = 128
    grad_accum: int = 1
    lr: float = 3e-4
    min_lr: float = 3e-5
    warmup_steps: int = 100
    warmup_time_share: float | None = None
    schedule: str = "cosine"
    schedule_steps: int | None = None
    d_model: int | None = None
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    adamw_impl: str = "auto"
    optimizer: str = "adamw"
    muon_ns_steps: int = 5
    grad_clip: float | None = 1.0
    eval_every: int = 250
    eval_batches: int = 20
    log_every: int = 10
    ckpt_every: int = 500
    keep_last: int = 2
    best_metric: str = "valid_loss"
    best_mode: str = "min"
    seed: int = 1337
    device: str = "cpu"
    compile: bool = False
    autocast: str | None = None
    fsdp: bool = False
    cuda_graphs: bool = False
    activation_checkpointing: bool = False
    loss_chunks: int = 0

    def __post_init__(self) -> None:
        self.steps = _int("steps", self.steps, minimum=1, allow_none=True)
        self.max_time = _float("max_time", self.max_time, low=0.0, low_inclusive=False, high=MAX_MINUTES,
                               allow_none=True)
        if self.steps is None and self.max_time is None:
            raise ValueError("TrainConfig needs steps or max_time (or both) to know when to stop, got both None")
        self.stop_at_loss = _float("stop_at_loss", self.stop_at_loss, low=0.0, allow_none=True)
        self.batch_size = _int("batch_size", self.batch_size, minimum=1)
        self.block_size = _int("block_size", self.block_size, minimum=1)
        self.grad_accum = _int("grad_accum", self.grad_accum, minimum=1)
        if self.batch_size * self.block_size > MAX_BATCH_TOKENS:  # past it torch's sizes overflow (a traceback)
            raise ValueError(f"TrainConfig.batch_size x block_size must be at most 2**31 - 1 = {MAX_BATCH_TOKENS:,} "
                             f"tokens per micro-batch, got {self.batch_size} x {self.block_size}")

        self.lr = _float("lr", self.lr, low=0.0, low_inclusive=False)
        self.min_lr = _float("min_lr", self.min_lr, low=0.0)
        if self.min_lr > self.lr:
            raise ValueError(f"TrainConfig.min_lr must be <= lr = {self.lr}, got {self.min_lr}")
        self.warmup_steps = _int("warmup_steps", self.warmup_steps, minimum=0)
        self.warmup_time_share = _float("warmup_time_share", self.warmup_time_share, low=0.0, high=1.0,
                                        low_inclusive=False, allow_none=True)
        _choice("schedule", self.schedule, SCHEDULES)
        self.schedule_steps = _int("schedule_steps", self.schedule_steps, minimum=1, allow_none=True)
        if self.schedule_steps is not None and self.schedule != "cosine":
            raise ValueError(f"TrainConfig.schedule_steps is the length of the cosine decay; schedule "
                             f"{self.schedule!r} has none: use schedule 'cosine' or schedule_steps None, "
                             f"got {self.schedule_steps}")
        self.d_model = _int("d_model", self.d_model, minimum=1, allow_none=True)
        horizon = self.schedule_horizon
        if self.schedule == "cosine" and horizon is not None and self.warmup_steps > horizon:
            # With a horizon in steps the cosine decays over updates; without one, over the time budget.
            name = "schedule_steps" if self.schedule_steps is not None else "steps"
            raise ValueError(f"TrainConfig.warmup_steps must be <= {name} = {horizon} for the cosine "
                             f"schedule, got {self.warmup_steps}")
        if self.schedule == "inverse_sqrt" and self.warmup_steps < 1:
            raise ValueError(f"TrainConfig.warmup_steps must be >= 1 for the inverse_sqrt schedule "
                             f"(it divides by warmup**1.5), got {self.warmup_steps}")

        self.weight_decay = _float("weight_decay", self.weight_decay, low=0.0)
        if not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2:
            raise ValueError(f"TrainConfig.betas must be a pair (beta1, beta2), got {self.betas!r}")
        self.betas = (_float("betas[0]", self.betas[0], low=0.0, high=1.0, high_inclusive=False),
                      _float("betas[1]", self.betas[1], low=0.0, high=1.0, high_inclusive=False))
        self.eps = _float("eps", self.eps, low=0.0, low_inclusive=False)
        _choice("adamw_impl", self.adamw_impl, ADAMW_IMPLS)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        self.muon_ns_steps = _int("muon_ns_steps", self.muon_ns_steps, minimum=1)
        self.grad_clip = _float("grad_clip", self.grad_clip, low=0.0, low_inclusive=False, allow_none=True)

        for name in ("eval_every", "eval_batches", "log_every", "ckpt_every", "keep_last"):
            setattr(self, name, _int(name, getattr(self, name), minimum=1))
        if not isinstance(self.best_metric, str) or not self.best_metric:
            raise ValueError(f"TrainConfig.best_metric must be a non-empty str, got {self.best_metric!r}")
        _choice("best_mode", self.best_mode, BEST_MODES)
        self.seed = _int("seed", self.seed, minimum=0)
        if self.seed > SEED_MAX:
            raise ValueError(f"TrainConfig.seed (--seed) must be <= 2**64 - 1 (the seeds torch takes), got {self.seed}")
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"TrainConfig.device must be a device string like 'cpu', got {self.device!r}")
        check_bool("TrainConfig.compile", self.compile)
        _choice("autocast", self.autocast, AUTOCAST_DTYPES)
        check_bool("TrainConfig.fsdp", self.fsdp)
        check_bool("TrainConfig.cuda_graphs", self.cuda_graphs)
        check_bool("TrainConfig.activation_checkpointing", self.activation_checkpointing)
        self.loss_chunks = _int("loss_chunks", self.loss_chunks, minimum=0)
        if self.loss_chunks > MAX_LOSS_CHUNKS:
            raise ValueError(f"TrainConfig.loss_chunks must be at most {MAX_LOSS_CHUNKS} (0 = the plain loss), got "
                             f"{self.loss_chunks}")
        if self.cuda_graphs and (self.compile or self.fsdp or self.autocast == "fp16"):
            got = [name for name, on in (("compile", self.compile), ("fsdp", self.fsdp),
                                         ("autocast fp16", self.autocast == "fp16")) if on]
            raise ValueError(f"TrainConfig.cuda_graphs runs without compile, fsdp and autocast fp16, got {got}")
        if self.optimizer == "muon" and self.fsdp:
            raise ValueError("TrainConfig.optimizer 'muon' orthogonalizes whole matrices, which fsdp shards over the "
                             "processes: use DDP (fsdp False) with muon, got fsdp True")

    # ---------------------------------------------------------------------------------------------
    # dict / JSON round-trip
    # ---------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field (``betas`` as a list); ``from_dict(to_dict())`` equals ``self``."""
        out = dataclasses.asdict(self)
        out["betas"] = list(self.betas)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        """Build from a dict made by :meth:`to_dict`; unknown keys raise ``ValueError`` listing the valid ones."""
        if not isinstance(data, dict):
            raise ValueError(f"TrainConfig.from_dict expects a dict, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"TrainConfig.from_dict got unknown keys {unknown}; valid keys are {sorted(names)}")
        data = dict(data)
        if isinstance(data.get("betas"), list):
            data["betas"] = tuple(data["betas"])
        return cls(**data)

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> "TrainConfig":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"TrainConfig.from_json: invalid JSON ({err})") from None
        return cls.from_dict(data)

    @property
    def schedule_horizon(self) -> int | None:
        """The update at which the cosine decay ends: ``schedule_steps``, else ``steps``; None when the schedule
        spans the time budget instead."""
        return self.schedule_steps if self.schedule_steps is not None else self.steps

    @property
    def max_time_s(self) -> float | None:
        """The time budget in seconds (``max_time`` is in minutes), or None without one."""
        return None if self.max_time is None else self.max_time * 60

    def budget_fraction(self, elapsed_s: float) -> float | None:
        """How much of the schedule a run has used after ``elapsed_s`` seconds, when the schedule spans the time
        budget (no ``steps``, no ``schedule_steps``, and ``max_time`` set); None when it spans updates instead."""
        if self.schedule_horizon is not None or self.max_time is None:
            return None
        return elapsed_s / self.max_time_s

    def budget_used(self, step: int, elapsed_s: float) -> float:
        """The share of the run's budget used after ``step`` updates and ``elapsed_s`` seconds: ``step / steps``
        or ``elapsed_s / max_time_s``, the larger when both are set (the run ends at whichever comes first)."""
        parts = [step / self.steps] if self.steps is not None else []
        if self.max_time is not None:
            parts.append(elapsed_s / self.max_time_s)
        return max(parts) if parts else 0.0

    def replace(self, **overrides: Any) -> "TrainConfig":
        """A copy with some fields changed (validated again)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"TrainConfig has no fields {unknown}; valid fields are {sorted(names)}")
        return dataclasses.replace(self, **overrides)

    def resume_differences(self, other: "TrainConfig | dict[str, Any]") -> dict[str, tuple[Any, Any]]:
        """Fields that differ from ``other`` and may NOT change on resume: ``{name: (other's, self's)}``.

        The fields of ``RESUMABLE_CHANGES`` (``steps``, ``max_time``, ``device``, ``stop_at_loss``) are ignored.
        """
        theirs = other.to_dict() if isinstance(other, TrainConfig) else dict(other)
        mine = self.to_dict()
        # a field added since the checkpoint was written counts as its default there (e.g. fsdp=False)
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.default is not dataclasses.MISSING}
        diffs = {}
        for key in sorted(set(mine) | set(theirs)):
            if key in RESUMABLE_CHANGES:
                continue
            old = theirs.get(key, defaults.get(key, "<missing>"))
            if mine.get(key, "<missing>") != old:
                diffs[key] = (old, mine.get(key, "<missing>"))
        return diffs


WARMUP_SHARE = 10  # a run's default warmup is at most 1/WARMUP_SHARE of its steps


def default_warmup(recipe_warmup: int, steps: int) -> int:
    """The warmup a new run of ``steps`` updates gets when none is given: the recipe's, but at most a tenth of the
    run (at least 1 update, so the inverse_sqrt schedule stays defined). ``default_warmup(50, 30) == 3``,
    ``default_warmup(50, 2000) == 50``, ``default_warmup(0, 30) == 0``."""
    return min(recipe_warmup, max(1, steps // WARMUP_SHARE))


def resolve_train_config(defaults: dict[str, Any], saved: dict[str, Any] | None,
                         given: dict[str, Any], *, time_only_schedule: str | None = None) -> TrainConfig:
    """The run-length and training settings of a run, from three sources in order of precedence.

    ``defaults`` are the recipe's (:mod:`attnkit.recipes`); ``saved`` is the resumed run's
    ``train_config`` (None for a new run); ``given`` are the fields the user set (flags left unset are absent).
    Rules for the length of the run: a new run with neither ``steps`` nor ``max_time`` runs its
    ``schedule_steps``, else ``DEFAULT_STEPS`` (2000) steps; a new run given ``steps`` only has no time budget;
    ``max_time`` given without ``steps`` removes the step limit (so the schedule spans the time budget, unless
    ``schedule_steps`` sets its length in updates). The default warmup scales with the run: a new run with a step
    limit and no ``warmup_steps`` given warms up for at most a tenth of its steps, or of its ``schedule_steps``
    when given (:func:`default_warmup`); a new run limited by time only keeps the recipe's ``warmup_steps`` but
    ends its warmup after a tenth of the time budget at the latest (``warmup_time_share``); a given
    ``warmup_steps`` is kept as given (and refused if longer than a cosine run's ``schedule_steps`` or ``steps``);
    a resumed run keeps its own, so a resumed cosine run without ``schedule_steps`` is refused ``steps`` below it
    (a run started with ``max_time`` alone warmed up for its recipe's ``warmup_steps``): shortening the warmup to
    fit would change the learning rate of the updates already made, and the resume would no longer be exact.
    ``time_only_schedule`` (e.g. ``"constant"``, what
    ``finetune`` passes) is the schedule of a new run limited by time only when no ``schedule`` is given (None:
    the recipe's). ``grad_clip=0`` means no clipping.
    """
    values = dict(defaults)
    if saved is not None:
        unknown = sorted(set(saved) - {f.name for f in dataclasses.fields(TrainConfig)})
        if unknown:
            raise ValueError(f"--resume: the run's train_config holds settings this attnkit does not know: {unknown} "
                             f"(written by a newer attnkit?)")
        values.update(saved)
    values.update(given)
    if saved is None and "steps" not in given and "max_time" not in given:
        values["steps"] = given.get("schedule_steps") or DEFAULT_STEPS
    if "steps" in given and "max_time" not in given and saved is None:
        values["max_time"] = None
    if "max_time" in given and "steps" not in given:
        values["steps"] = None
        if (saved is None and time_only_schedule is not None and "schedule" not in given
                and given.get("schedule_steps") is None):
            values["schedule"] = time_only_schedule
    if saved is None and "warmup_steps" not in given:
        horizon = values.get("schedule_steps") or values.get("steps")  # the schedule's length in updates
        if horizon is not None:
            values["warmup_steps"] = default_warmup(values.get("warmup_steps", 0), horizon)
        elif values.get("schedule", "cosine") in ("cosine", "constant"):
            values["warmup_time_share"] = 1 / WARMUP_SHARE
    if values.get("grad_clip") == 0:
        values["grad_clip"] = None
    warmup, steps = values.get("warmup_steps"), values.get("steps")
    if (saved is not None and values.get("schedule", "cosine") == "cosine" and values.get("schedule_steps") is None
            and is_int(warmup) and is_int(steps) and warmup > steps):
        raise ValueError(f"--resume: steps {steps} is shorter than the run's warmup of {warmup} updates (its "
                         f"warmup_steps, which a resumed run keeps; a cosine schedule over steps needs steps >= "
                         f"warmup_steps): resume with steps >= {warmup}")
    return TrainConfig.from_dict(values)
