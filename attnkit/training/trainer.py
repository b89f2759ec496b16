"""The training loop: one ``Trainer`` for language modelling and translation alike.

The trainer owns everything that is the same for every task: the optimizer (AdamW, decay on matrices
only), the learning-rate schedule, gradient accumulation and clipping, optional bf16 autocast and
``torch.compile``, periodic evaluation, metrics files, the progress bar, checkpoints (last K + best) and
exact resume. What a batch is and how the loss is computed is the task's business (``task.py``).

One optimizer update ("step") is::

    zero grads
    for i in range(grad_accum):                       # micro-batches
        batch = task.batch("train", step * grad_accum + i)
        loss_i, n_i = task.loss(model, batch)         # mean over n_i tokens
        backward(loss_i * n_i)                        # gradient of the token *sum*
    grads /= sum(n_i)                                 # -> gradient of the mean over all tokens
    clip grads to grad_clip; optimizer.step(); scheduler.step()

so accumulation equals one big batch even when micro-batches carry different numbers of tokens.

The batches of the next update are built and copied to the device in a background thread while the current
update runs (``prefetch.py``; the same code on the CPU, without pinned memory). With ``compile=True`` (one
process) the model's forward pass and the task's loss are compiled together as one function, so the compiler
fuses the cross-entropy into the graph instead of materialising float32 logits and their softmax outside it
(``_loss_function``); under torchrun the model alone is compiled (DDP's and FSDP's hooks stay outside the graph).
Evaluation runs the model eagerly: compiling it for evaluation (no gradients, dropout off) would be a second
compilation. The eager step (``compile=False``) is the reference the compiled one is tested against. A task whose
batches change shape (``dynamic_shapes = True``: translation) is compiled for any shape at once, so the second
batch does not compile again. In one process the compilation (the first update of each ``fit``) counts in a
``max_time`` budget, but not in the schedule that spans it: the warmup and the cosine decay (and a task's budget
share) follow the time left after compiling (``_schedule_clock``), so a two-minute compilation neither replaces
the warmup nor shifts the decay. With ``activation_checkpointing=True`` the trainer switches the model's activation
checkpointing on (:mod:`attnkit.modules.activation_checkpointing`): the same numbers, less memory, more compute.
With ``loss_chunks=K`` it sets the task's ``loss_chunks`` (:mod:`attnkit.modules.chunked_cross_entropy`): the same
losses up to float rounding, without the ``(B, T, V)`` logits kept for the backward pass.

Nothing in an update waits for the device: the loss and the gradient norm stay where they were computed, and
every ``log_every`` updates (and before each evaluation, checkpoint and the end of the run) ``_read_updates``
reads the pending ones in one go, checks them (the first non-finite loss is named with its update) and logs
them. On a GPU the host thus queues the next update while the last one runs. The model's value checks run on
the device inside an update (:func:`attnkit.checks.checks_on_device`, on accelerators only).

Run folder layout (``out_dir``)::

    run.json                       train config + model config (marks the folder as a run)
    metrics.jsonl / metrics.csv / loss.png
    checkpoints/step_00000500/     last ``keep_last`` checkpoints (see checkpoint.py for the contents)
    checkpoints/best/              best evaluation so far (by ``config.best_metric``)
    summary.json                   what ``fit()`` returned (removed when a resumed run starts)

Exact resume: the data of step s is a pure function of s (task contract), and a checkpoint stores model,
optimizer, schedule, RNG states (dropout) and the step, so a run killed at any point and resumed from its
last checkpoint produces the same losses, bit for bit on the CPU, as a run that was never interrupted.
(Evaluation runs on a forked RNG, so evaluating more or less often does not change training either.)

Preemption (``preemption.py``): during ``fit`` a SIGINT (Ctrl-C) or SIGTERM (a scheduler's stop) lets the update
under way finish; then the run writes a checkpoint at that step (no evaluation), flushes the metrics tables and
raises :class:`~attnkit.training.preemption.Interrupted`. Under torchrun the ranks agree on the step at each
step boundary. A second signal stops at once; the last published checkpoint stays intact.

Target (``stop_at_loss``): the run also stops at the first evaluation whose ``valid_loss`` is at or below it; the
summary's ``target`` records the step and the time (seconds of training, compilation and evaluations included)
when it was reached.

Axis legend: B batch, T sequence length (only inside the task).
"""

from __future__ import annotations

import inspect
import json
import math
import signal
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch
from torch import nn

from attnkit.files import write_text_atomic
from attnkit.checkpoints.checkpoint import (CheckpointError, clean_stale, latest_checkpoint, load_checkpoint,
                                            prune_checkpoints, read_checkpoint_state, save_checkpoint, step_dir_name)
from attnkit.checkpoints.rng import restore_rng_state, seed_everything
from attnkit.checkpoints.run_lock import RunLock
from attnkit.checkpoints.runs import (BEST_DIR, CHECKPOINTS_DIR, RUN_FILE, SUMMARY_FILE, check_new_run_folder,
                                     check_trainer_state)
from attnkit.checks import checks_on_device, is_int, is_number

from . import distributed as D
from .config import RESUMABLE_CHANGES, TrainConfig
from .cuda_graphs import GraphedMicroBatch
from .device import autocast_context, check_autocast, grad_scaler, resolve_device
from .metrics import MetricsLogger
from .optim import LRScheduler, build_optimizer
from .prefetch import BatchPrefetcher
from .preemption import Interrupted, StopOnSignal
from .progress import TrainProgress
from .sharded import convert_sharded, is_sharded, load_sharded, save_sharded
from .task import check_task


def _json_roundtrip(value: Any, what: str) -> Any:
    """``value`` as it will read back from JSON (tuples become lists); raises if not JSON-able."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} must be JSON-serialisable, got an error: {err}") from None


def _dict_differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<missing>"), new.get(key, "<missing>")
        if a != b:
            out.append(f"{prefix}{key} (checkpoint {a!r}, now {b!r})")
    return out


_SIGNAL_NAMES = ("SIGINT", "SIGTERM")  # the stop reasons of a signal (preemption.py)
TARGET_METRIC = "valid_loss"  # what stop_at_loss is compared with


class _NoMetrics:
    """What ranks other than 0 log to: nothing (rank 0 writes the run's metrics files)."""

    def log(self, row: dict[str, Any]) -> None:
        pass

    def write_tables(self, *, only_if_changed: bool = False) -> None:
        pass

    def close(self) -> None:
        pass


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of an FSDP (DTensor) parameter, the tensor itself otherwise."""
    return t.to_local() if hasattr(t, "to_local") else t


def _switch_activation_checkpointing(model: nn.Module, enabled: bool) -> None:
    """Activation checkpointing on or off in ``model`` as the config says (``model.enable_activation_checkpointing``:
    GPT, Transformer). A model without the switch trains as it is, unless the config asks for it: ``ValueError``."""
    switch = getattr(model, "enable_activation_checkpointing", None)
    if callable(switch):
        switch(enabled)
    elif enabled:
        raise ValueError(f"activation_checkpointing=True needs a model with enable_activation_checkpointing() "
                         f"(GPT, Transformer), got {type(model).__name__}")


def _set_loss_chunks(task: Any, model: nn.Module, chunks: int) -> None:
    """The task's chunked loss on (``chunks`` row chunks) or off (0) as the config says (``task.loss_chunks``:
    LMTask, MTTask). Chunks need such a task and a model whose forward takes ``output_fn`` (GPT, Transformer), else
    ``ValueError``."""
    if not chunks:
        if hasattr(task, "loss_chunks"):
            task.loss_chunks = 0
        return
    if not hasattr(task, "loss_chunks"):
        raise ValueError(f"loss_chunks={chunks} needs a task with a chunked loss (LMTask, MTTask), got "
                         f"{type(task).__name__}")
    if "output_fn" not in inspect.signature(model.forward).parameters:
        raise ValueError(f"loss_chunks={chunks} needs a model whose forward takes output_fn (GPT, Transformer), got "
                         f"{type(model).__name__}")
    task.loss_chunks = chunks


def _check_count(n: Any, what: str) -> int:
    """A task's token count, which must be an int >= 1 (``what`` starts the error message)."""
    if not is_int(n) or n < 1:
        raise ValueError(f"{what} an int >= 1, got {n!r}")
    return n


class _Update(NamedTuple):
    """What one optimizer update leaves for :meth:`Trainer._read_updates`, read back from the device later.

    ``losses``: each micro-batch's 0-dim loss tensor (empty when ``mean`` was already read: a distributed run
    sums the loss over processes at once); ``counts``: their token counts; ``tokens``: the update's tokens over
    all processes; ``grad_norm``: the norm before clipping (0-dim tensor) or None; ``lr`` / ``elapsed`` / ``dt``
    (the host's seconds in the update): filled in by the loop; ``graphs``: the CUDA graphs recorded so far (None
    without them).
    """

    step: int
    tokens: int
    losses: list[torch.Tensor]
    counts: list[int]
    mean: float | None
    grad_norm: torch.Tensor | None
    lr: float = 0.0
    elapsed: float = 0.0
    dt: float = 0.0
    graphs: int | None = None  # with cuda_graphs: the shapes recorded so far (logged as "cuda_graphs")


class Trainer:
    """Train ``model`` on ``task`` as configured, writing everything to ``out_dir``.

    Args:
        model: the ``nn.Module`` to train (moved to ``config.device``).
        task: an object implementing the :class:`~attnkit.training.task.Task` protocol.
        config: a :class:`~attnkit.training.config.TrainConfig`.
        out_dir: the run folder. A fresh run (``resume=False``) refuses a folder that already holds a run.
        model_config: JSON-able dict (or an object with ``to_dict()``, e.g. ``GPTConfig``) describing how
            to rebuild the model; stored in every checkpoint and compared on resume. Its ``d_model`` or
            ``n_embd`` feeds the inverse_sqrt schedule when ``config.d_model`` is None.
        extra: ``{name: str | dict}`` stored with every checkpoint (e.g. the tokenizer as JSON).
        resume: continue the run in ``out_dir`` from its latest checkpoint (weights, optimizer, schedule, RNG states
            and, with autocast fp16, the gradient scaler's scale). Only the fields of
            :data:`~attnkit.training.config.RESUMABLE_CHANGES` (``steps``, ``max_time``, ``device``,
            ``stop_at_loss``, ``activation_checkpointing``, ``loss_chunks``) may differ from the checkpoint's config;
            any other field of the config or of the model config (dropout included) raises ``ValueError`` naming the
            fields.
        progress: show the tqdm bar.
        log: print the evaluation lines (with sample outputs where the task has them) and the task's notes,
            with or without the bar (True: to stdout, above the bar; a function: each line is passed to it; False:
            nowhere). Only the main process shows either.

    Raises ``ValueError`` for bad arguments, an existing run without ``resume``, or a changed config on
    resume; :class:`~attnkit.checkpoints.checkpoint.CheckpointError` (a ``ValueError``) when there is nothing
    (or nothing readable) to resume from.
    """

    def __init__(self, model: nn.Module, task: Any, config: TrainConfig, out_dir: str | Path, *,
                 model_config: dict[str, Any] | Any, extra: dict[str, str | dict] | None = None,
                 resume: bool = False, progress: bool = True, log: bool | Callable[[str], None] = True):
        if not isinstance(model, nn.Module):
            raise ValueError(f"Trainer expects an nn.Module model, got {type(model).__name__}")
        check_task(task)
        if not isinstance(config, TrainConfig):
            raise ValueError(f"Trainer expects a TrainConfig, got {type(config).__name__}")
        # A config object that can read dicts back lets resume fill fields added since the checkpoint was
        # written with their defaults (a checkpoint without `attention_dropout` resumes as None = dropout).
        self._config_reader = getattr(model_config, "from_dict", None) if not isinstance(model_config, dict) else None
        if hasattr(model_config, "to_dict") and not isinstance(model_config, dict):
            model_config = model_config.to_dict()
        if not isinstance(model_config, dict):
            raise ValueError(f"model_config must be a dict (or have to_dict()), got {type(model_config).__name__}")
        if extra is not None and not isinstance(extra, dict):
            raise ValueError(f"extra must be a dict of str -> str | dict, got {type(extra).__name__}")
        for key, value in (extra or {}).items():
            if not isinstance(key, str) or not isinstance(value, (str, dict)):
                raise ValueError(f"extra must map str -> str | dict, got {key!r} -> {type(value).__name__}")
        self.device = resolve_device(config.device, local_rank=D.env_local_rank())
        check_autocast(config.autocast, self.device)
        # Under torchrun: join the job (gloo on the CPU, nccl on CUDA). One process: a world of size 1.
        self.world = D.init_from_env(self.device)
        self.model = model.to(self.device)
        _switch_activation_checkpointing(self.model, config.activation_checkpointing)  # before FSDP wraps blocks
        # LayerDrop (model_config.layer_drop): each forward pass may leave whole layers out, on each rank its own
        self._layer_drop = float(model_config.get("layer_drop") or 0.0)
        if config.fsdp:
            if self._layer_drop > 0:
                raise ValueError(f"fsdp=True needs layer_drop = 0 (got {self._layer_drop}): the ranks would skip "
                                 f"different layers and wait for each other's shards; use DDP (no fsdp) instead")
            if not self.world.distributed:
                raise ValueError("fsdp=True needs several processes (--fsdp, which a resumed run keeps): launch with "
                                 "torchrun --nproc_per_node=N, N >= 2")
            D.shard_fsdp(self.model)  # in place; parameters become DTensor shards, names unchanged
        _set_loss_chunks(task, self.model, config.loss_chunks)
        self.task = task
        self.config = config
        self.out_dir = Path(out_dir)
        self.ckpt_dir = self.out_dir / CHECKPOINTS_DIR
        self.model_config = _json_roundtrip(model_config, "model_config")
        self.extra = _json_roundtrip(dict(extra or {}), "extra")
        self.progress_enabled = progress and self.world.is_main
        self.log_enabled = log if self.world.is_main else False
        self._scaler = grad_scaler(config.autocast, self.device)

        self.optimizer = build_optimizer(self.model, config)
        d_model = config.d_model or self.model_config.get("d_model") or self.model_config.get("n_embd")
        self._clock = 0.0  # the run's clock (seconds) as all ranks agree on it, read by the schedule
        self._compile_s = 0.0  # seconds of compilation in the run so far (first updates with compile=True)
        self.scheduler = LRScheduler(self.optimizer, config, d_model=d_model, clock=self._schedule_clock)
        self._params = [p for g in self.optimizer.param_groups for p in g["params"]]
        world = self.world
        self._batches = BatchPrefetcher(  # this process's rows of training batch i, built one update ahead
            lambda i: D.shard_batch(self.task.batch("train", i), world.rank, world.size), self.device)
        self._loss = task.loss  # fit() compiles it with compile=True (_loss_function)
        self._eval_model: nn.Module = self.model  # fit(): the DDP wrapper under torchrun, never compiled
        self._graphs: GraphedMicroBatch | None = None
        if config.cuda_graphs:
            self._graphs = self._graphed(task)

        # run state (all of it goes into every checkpoint)
        self.step = 0                       # completed optimizer updates
        self.elapsed = 0.0                  # seconds of training, summed over resumed segments
        self.tokens = 0                     # training tokens seen
        self.best: dict[str, Any] | None = None   # {"metric", "value", "step"}
        self.last_eval: dict[str, Any] | None = None
        self.last_loss: float | None = None
        self.reached: dict[str, Any] | None = None  # stop_at_loss: {"loss", "step", "elapsed", "valid_loss"}
        self.first_update_s: float | None = None  # host seconds of this segment's first update (compilation)
        self.last_checkpoint: Path | None = None
        self.resumed_from: Path | None = None
        self._rng_state: dict[str, Any] | None = None
        self._fitted = False
        self._progress: TrainProgress | None = None  # the bar, made when fit() starts
        self._now = lambda: self.elapsed  # replaced by a live clock inside fit()
        self._signals = StopOnSignal(announce=self.world.is_main)  # entered by fit(): SIGINT/SIGTERM -> a stop

        self._lock: RunLock | None = None  # held from here until fit() ends: one process per run folder
        try:
            if resume:
                self._load_for_resume()
            else:
                D.on_main(self._claim_out_dir)

            def start_files() -> MetricsLogger:
                write_text_atomic(self.out_dir / RUN_FILE, json.dumps(
                    {"train_config": config.to_dict(), "model_config": self.model_config,
                     "extra_keys": sorted(self.extra)}, indent=2))
                if resume:  # the summary of the segment that ended; this one writes its own when it ends
                    (self.out_dir / SUMMARY_FILE).unlink(missing_ok=True)
                return MetricsLogger(self.out_dir, resume_step=self.step if resume else None)

            self.metrics = start_files() if self.world.is_main else _NoMetrics()
            D.barrier()
        except BaseException:
            self._release_lock()
            raise

    def _lock_out_dir(self) -> None:
        self._lock = RunLock(self.out_dir)

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # --------------------------------------------------------------------------------------------
    # starting / resuming
    # --------------------------------------------------------------------------------------------
    def _claim_out_dir(self) -> None:
        if not self.out_dir.is_dir():
            check_new_run_folder(self.out_dir)  # a file at out_dir or above it
            self.out_dir.mkdir(parents=True, exist_ok=True)
        self._lock = RunLock(self.out_dir)
        check_new_run_folder(self.out_dir)  # under the lock: no other process starts a run here meanwhile

    def _load_for_resume(self) -> None:
        if not self.out_dir.is_dir():
            raise CheckpointError(f"cannot resume: the run folder {self.out_dir} does not exist")
        D.on_main(self._lock_out_dir)  # rank 0 holds the lock; its refusal is raised on every rank
        D.on_main(lambda: clean_stale(self.ckpt_dir))  # unfinished saves of the interrupted run
        latest = latest_checkpoint(self.ckpt_dir)
        if latest is None:
            raise CheckpointError(f"cannot resume: no checkpoint in {self.ckpt_dir} (the first one is written at "
                                  f"step {self.config.ckpt_every}); start a fresh run in a new folder instead, or "
                                  f"remove this one")
        state = read_checkpoint_state(latest)
        check_trainer_state(latest, state)
        for key, kind in (("step", int), ("elapsed", float), ("tokens", int)):
            value = state.get(key, 0)
            if not (is_int(value) if kind is int else is_number(value)) or value < 0:
                raise CheckpointError(f"{latest / 'state.json'}: {key!r} must be a number >= 0, got {value!r} "
                                      f"(edited by hand?)")

        if self.config.steps is not None and self.config.steps < state["step"]:  # would rewrite a finished run
            raise ValueError(f"cannot resume with steps={self.config.steps} (--steps): {latest} is at step "
                             f"{state['step']} already; give at least that")
        diffs = [f"{name} (checkpoint {old!r}, now {new!r})"
                 for name, (old, new) in self.config.resume_differences(state["train_config"]).items()]
        saved_config = state["model_config"]
        if self._config_reader is not None and isinstance(saved_config, dict):
            try:
                saved_config = self._config_reader(saved_config).to_dict()
            except ValueError:
                pass  # unreadable with today's config class: the raw comparison below names what differs
        diffs += _dict_differences(saved_config, self.model_config, prefix="model_config.")
        if diffs:
            raise ValueError(f"cannot resume from {latest}: the configuration changed in {len(diffs)} field(s): "
                             + "; ".join(diffs) + f". Only {list(RESUMABLE_CHANGES)} may change on resume.")

        self.task.load_state_dict(state["task"])  # raises if the data differ
        if self.config.fsdp:
            load_sharded(latest, self.model, self.optimizer, self.scheduler)  # any number of processes wrote it
        else:
            load_checkpoint(latest, self.model, self.optimizer, self.scheduler, device=self.device)
        self.step = int(state["step"])
        if self.scheduler.last_step != self.step:
            raise CheckpointError(f"{latest / 'state.json'}: scheduler step {self.scheduler.last_step} "
                                  f"!= checkpoint step {self.step}")
        self.elapsed = float(state.get("elapsed", 0.0))
        self.tokens = int(state.get("tokens", 0))
        self._compile_s = state.get("compile_s", 0.0)  # absent in checkpoints written before it was kept
        if not is_number(self._compile_s) or not 0 <= self._compile_s <= self.elapsed:
            raise CheckpointError(f"{latest / 'state.json'}: 'compile_s' must be a number in [0, elapsed = "
                                  f"{self.elapsed:g}], got {self._compile_s!r} (edited by hand?)")
        self.best = _saved_best(state.get("best"), latest)
        self.last_eval = _saved_eval(state.get("last_eval"), latest)
        self.last_loss = state.get("last_loss")
        if self.last_loss is not None and not is_number(self.last_loss):
            raise CheckpointError(f"{latest / 'state.json'}: 'last_loss' must be a number or null, got "
                                  f"{self.last_loss!r} (edited by hand?)")
        reached = state.get("reached")  # kept only for the same target: another one is judged afresh
        self.reached = reached if isinstance(reached, dict) and reached.get("loss") == self.config.stop_at_loss \
            else None
        if "rng" not in state:  # dropout would start again from the seed: the resume would not be exact
            raise CheckpointError(f"{latest / 'state.json'} lacks the RNG states ('rng') a resume continues from "
                                  f"(edited by hand?)")
        self._rng_state = state["rng"]
        if self._scaler is not None and "grad_scaler" in state:  # absent in checkpoints written before it was kept
            self._scaler.load_state_dict(_saved_scaler(state["grad_scaler"], latest))
        self.last_checkpoint = latest
        self.resumed_from = latest
        # best/ may be newer than the latest step checkpoint (saved between two step checkpoints before the
        # crash); the folder on disk is what later evaluations must beat.
        best_dir = self.ckpt_dir / BEST_DIR
        if best_dir.is_dir():
            try:
                on_disk = _saved_best(read_checkpoint_state(best_dir).get("best"), best_dir)
            except CheckpointError:
                on_disk = None
            if on_disk is not None:
                self.best = on_disk

    # --------------------------------------------------------------------------------------------
    # pieces of the loop
    # --------------------------------------------------------------------------------------------
    def _autocast(self):
        return autocast_context(self.config.autocast, self.device)

    def _check_loss(self, loss: Any, n_tokens: Any) -> int:
        """The loss's form and its token count (an int >= 1); the loss's *value* is checked when it is read."""
        if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
            got = f"shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise ValueError(f"task.loss must return a 0-dim loss tensor, got {got}")
        if not loss.requires_grad:
            raise ValueError("task.loss returned a loss without grad (computed under no_grad or detached?)")
        if isinstance(n_tokens, torch.Tensor) and n_tokens.numel() == 1:
            n_tokens = int(n_tokens.item())  # a task that counts on the device makes every update wait here
        return _check_count(n_tokens, "task.loss must return n_tokens as")

    def _graphed(self, task: Any) -> GraphedMicroBatch:
        """The recorder of ``cuda_graphs=True``, after checking that this run can use it."""
        cfg = self.config
        problems = [why for bad, why in (
            (self.device.type != "cuda", f"a CUDA device (got {self.device})"),
            (self.world.distributed, f"one process (got {self.world.size} under torchrun)"),
            (cfg.compile, "no torch.compile (got compile=True)"),
            (cfg.activation_checkpointing, "no activation checkpointing (got activation_checkpointing=True: its "
                                           "recomputation reads the CUDA random state, which a capture forbids)"),
            (cfg.loss_chunks > 0, f"loss_chunks = 0 (got {cfg.loss_chunks}: each chunk's recomputation reads the CUDA "
                                  f"random state, which a capture forbids)"),
            (cfg.autocast == "fp16", "full precision or autocast bf16 (got fp16, whose scaler reads on the host)"),
            (self._layer_drop > 0, f"layer_drop = 0 (got {self._layer_drop}: a graph would replay the layers it "
                                   f"skipped when recorded)"),
            (not callable(getattr(task, "count_tokens", None)),
             f"a task with count_tokens(batch) ({type(task).__name__} has none)")) if bad]
        if problems:
            raise ValueError("cuda_graphs needs " + "; ".join(problems))
        return GraphedMicroBatch(self.model, task.loss, self.device, cfg.autocast)

    def _update(self, train_model: nn.Module) -> _Update:
        """One optimizer update; returns its statistics, still on the device (see :class:`_Update`).

        Loss and tokens are over all processes (this rank computes its share of every micro-batch, see
        ``distributed.py``).
        """
        cfg = self.config
        if self._graphs is not None:
            return self._graphed_update()
        world = self.world
        self.optimizer.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        counts: list[int] = []
        first = self.step * cfg.grad_accum
        batches = [self._batches.get(first + micro) for micro in range(cfg.grad_accum)]  # on the device
        self._batches.ahead(range(first + cfg.grad_accum, first + 2 * cfg.grad_accum))  # built during this update
        for micro, batch in enumerate(batches):
            with D.no_sync(train_model, skip=micro < cfg.grad_accum - 1):  # all-reduce once, after the last
                with self._autocast(), checks_on_device(self.device.type != "cpu"):
                    loss, n_tokens = self._loss(train_model, batch)
                n_tokens = self._check_loss(loss, n_tokens)
                scaled = loss * n_tokens  # gradient of the token sum; normalised below
                (self._scaler.scale(scaled) if self._scaler is not None else scaled).backward()
            losses.append(loss.detach())
            counts.append(n_tokens)
        total = sum(counts)
        mean = None
        if world.distributed:  # DDP/FSDP averaged the gradients over ranks: undo the 1/N, divide by all tokens
            loss_sum, global_total = D.all_sum([sum(float(v) * n for v, n in zip(losses, counts)), float(total)])
            total = int(global_total)
            mean = loss_sum / total
            if not math.isfinite(mean):
                raise FloatingPointError(f"training loss is {mean} at step {self.step + 1}: the run "
                                         f"diverged; lower lr, raise warmup_steps or set grad_clip")
        if self._scaler is not None:
            self._scaler.unscale_(self.optimizer)
        factor = world.size / total
        grads = [p.grad for p in self._params if p.grad is not None]
        if grads and not world.distributed:  # a few launches on a GPU; the same numbers as div_ one by one
            torch._foreach_div_(grads, total)
        for g in grads if world.distributed else ():  # DDP / FSDP (DTensor shards): one by one
            g.mul_(factor)
        return _Update(step=self.step + 1, tokens=total, losses=[] if world.distributed else losses,
                       counts=counts, mean=mean, grad_norm=self._clip_and_step())

    def _graphed_update(self) -> _Update:
        """:meth:`_update` through CUDA graphs (``cuda_graphs=True``, one process): the micro-batches' token counts
        come from the task first, so each replayed backward pass is already weighted by ``n_tokens / total``."""
        cfg = self.config
        batches = [self.task.batch("train", self.step * cfg.grad_accum + micro) for micro in range(cfg.grad_accum)]
        counts = [_check_count(self.task.count_tokens(b), "task.count_tokens must return") for b in batches]
        total = sum(counts)
        self.optimizer.zero_grad(set_to_none=False)  # in place: the graphs write into these very tensors
        losses = [self._graphs.run(b, n / total) for b, n in zip(batches, counts)]
        return _Update(step=self.step + 1, tokens=total, losses=losses, counts=counts, mean=None,
                       grad_norm=self._clip_and_step(), graphs=self._graphs.shapes)

    def _clip_and_step(self) -> torch.Tensor | None:
        """Clip the (averaged) gradients to ``grad_clip`` and step the optimizer; return the norm before clipping
        (0-dim, on the device), None without clipping."""
        cfg = self.config
        grad_norm = None
        if cfg.grad_clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(self._params, cfg.grad_clip)
            grad_norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        if self._scaler is not None:
            self._scaler.step(self.optimizer)
            self._scaler.update()
        else:
            self.optimizer.step()
        return grad_norm

    def _read_updates(self) -> None:
        """Read the statistics of the updates made since the last read (one wait for the device), check them and
        book them: tokens, the last loss, a metrics row at every ``log_every`` step, the bar's tokens/s.

        Raises ``FloatingPointError`` naming the first update whose loss (or, without a grad scaler, gradient
        norm) is not finite. Called after every ``log_every``-th update and before every evaluation, checkpoint
        and the end of the run, so nothing is saved or reported that was not checked.
        """
        pending, self._pending = self._pending, []
        if not pending:
            return
        meter = self._meter
        t0 = time.perf_counter()
        tensors = [t for u in pending
                   for t in (*u.losses, *([u.grad_norm] if isinstance(u.grad_norm, torch.Tensor) else []))]
        values = iter(torch.stack([t.reshape(()).float() for t in tensors]).tolist() if tensors else [])
        waited = time.perf_counter() - t0
        meter["time"] += waited
        read_tokens = 0
        for u in pending:
            micro = [next(values) for _ in u.losses]
            grad_norm = next(values) if isinstance(u.grad_norm, torch.Tensor) else u.grad_norm
            for i, value in enumerate(micro):
                if not math.isfinite(value):
                    raise FloatingPointError(f"training loss is {value} at step {u.step} (micro-batch {i}): the run "
                                             f"diverged; lower lr, raise warmup_steps or set grad_clip")
            loss = u.mean if u.mean is not None else sum(v * n for v, n in zip(micro, u.counts)) / u.tokens
            if grad_norm is not None and not math.isfinite(grad_norm):
                if self._scaler is None:
                    raise FloatingPointError(f"gradient norm is {grad_norm} at step {u.step}: the run diverged")
                # fp16: inf/nan gradients are how the scaler finds its scale; it skipped this update and lowered
                # the scale, so there is no gradient norm to log (the first steps of every fp16 run do this)
                grad_norm = None
            self.tokens += u.tokens
            self.last_loss = loss
            read_tokens += u.tokens
            meter["tokens"] += u.tokens
            meter["time"] += u.dt
            if u.step % self.config.log_every == 0:
                row = {"step": u.step, "loss": loss, "lr": u.lr, "tokens": self.tokens,
                       "tokens_per_s": meter["tokens"] / max(meter["time"], 1e-9), "elapsed": u.elapsed}
                if grad_norm is not None:
                    row["grad_norm"] = grad_norm
                if u.graphs is not None:  # an interval whose count grew spent time recording
                    row["cuda_graphs"] = u.graphs
                self.metrics.log(row)
                meter["tokens"], meter["time"] = 0, 0.0
        meter["tps"] = read_tokens / max(waited + sum(u.dt for u in pending), 1e-9)  # shown by the bar

    def _evaluate(self) -> dict[str, Any]:
        """Evaluate (the model run eagerly), log ``valid_*``, refresh CSV/PNG, update ``best/``, note whether
        ``stop_at_loss`` was reached. Training RNG is left untouched."""
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        self.model.eval()
        try:
            with torch.random.fork_rng(devices=devices), torch.no_grad(), self._autocast():
                results = self.task.evaluate(self._eval_model, self.config.eval_batches)
        finally:
            self.model.train()
        if not isinstance(results, dict) or not results:
            raise ValueError(f"task.evaluate must return a non-empty dict of str -> float, got {results!r}")
        if self.world.distributed:  # identical weights on every rank; rank 0's numbers decide for all
            results = D.broadcast_object({k: float(v) for k, v in results.items()})
        row: dict[str, Any] = {"step": self.step}
        for key, value in results.items():
            if isinstance(value, torch.Tensor):
                value = value.item()
            if not is_number(value):
                raise ValueError(f"task.evaluate value {key!r} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise FloatingPointError(f"evaluation metric {key!r} is {value} at step {self.step}")
            row[f"valid_{key}"] = float(value)
        self.metrics.log(row)
        self.metrics.write_tables()
        self.last_eval = row
        target = self.config.stop_at_loss
        if target is not None and self.reached is None and row.get(TARGET_METRIC, math.inf) <= target:
            self.reached = {"loss": target, "step": self.step, "elapsed": self._now(),
                            TARGET_METRIC: row[TARGET_METRIC]}

        metric = self.config.best_metric
        if metric not in row:
            raise ValueError(f"TrainConfig.best_metric {metric!r} is not among the evaluation results "
                             f"{sorted(k for k in row if k != 'step')}")
        value = row[metric]
        better = (self.best is None or (value < self.best["value"] if self.config.best_mode == "min"
                                        else value > self.best["value"]))
        if better:
            self.best = {"metric": metric, "value": value, "step": self.step}
            self._write_checkpoint(self.ckpt_dir / BEST_DIR)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in row.items() if k != "step")
        self._progress.write(f"step {self.step}: {shown}" + ("  (best)" if better else ""))
        report = getattr(self.task, "eval_report", None)  # optional: e.g. sample translations (MTTask)
        for line in (report() if callable(report) else []):
            self._progress.write(line)
        if self.reached is not None and self.reached["step"] == self.step:
            self._progress.write(f"step {self.step}: {TARGET_METRIC} {row[TARGET_METRIC]:.4f} <= target "
                                 f"{self.reached['loss']:g}: the run stops here")
        return row

    def _checkpoint_state(self) -> dict[str, Any]:
        state = {"step": self.step, "elapsed": self._now(), "tokens": self.tokens, "compile_s": self._compile_s,
                 "train_config": self.config.to_dict(), "model_config": self.model_config,
                 "task": self.task.state_dict(), "best": self.best, "last_eval": self.last_eval,
                 "last_loss": self.last_loss, "reached": self.reached}
        if self._scaler is not None:  # fp16: the scale found so far and the updates since it last grew
            state["grad_scaler"] = _json_roundtrip(self._scaler.state_dict(), "the grad scaler's state")
        return state

    def _write_checkpoint(self, path: Path) -> Path:
        """Collective: FSDP -> every rank writes its shard (DCP); otherwise rank 0 writes the one file set."""
        if self.config.fsdp:
            return save_sharded(path, self.model, self.optimizer, self.scheduler, state=self._checkpoint_state(),
                                extra=self.extra)
        state = self._checkpoint_state()  # the live clock is read on every rank, only rank 0's is written
        D.on_main(lambda: save_checkpoint(path, self.model, self.optimizer, self.scheduler, state=state,
                                          extra=self.extra))
        return path

    def _save(self) -> Path:
        bad = [name for name, p in self.model.named_parameters() if not bool(torch.isfinite(_local(p)).all())]
        if self.world.distributed and self.config.fsdp:  # each rank sees only its shards
            bad = ["some parameters"] if D.all_sum([float(len(bad))])[0] > 0 else []
        if bad:  # never replace a good checkpoint with a diverged one
            raise FloatingPointError(f"parameters {bad[:3]} hold NaN/inf at step {self.step}: the run diverged")
        path = self._write_checkpoint(self.ckpt_dir / step_dir_name(self.step))
        D.on_main(lambda: prune_checkpoints(self.ckpt_dir, self.config.keep_last, every=self.config.ckpt_every))
        self.last_checkpoint = path
        return path

    def _convert_best(self) -> None:
        """FSDP runs: rewrite ``best/`` as an ordinary single-file checkpoint (rank 0, the end of the run), so
        ``sample`` / ``eval`` / ``finetune`` load it anywhere; the sharded step checkpoints stay for --resume."""
        best = self.ckpt_dir / BEST_DIR
        if not is_sharded(best):
            return
        from attnkit.models.builders import build_model
        from attnkit.models.configs import config_from_dict

        convert_sharded(best, best, build_model(config_from_dict(self.model_config)))

    # --------------------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train until ``steps`` updates, ``max_time`` minutes or an evaluation at ``stop_at_loss`` (whichever
        first); returns a summary dict.

        Summary keys: ``out_dir, steps, stopped_by ("steps" | "max_time" | "target"), elapsed (s), tokens,
        train_loss, valid_* (last evaluation), best ({"metric", "value", "step"}), checkpoint, best_checkpoint,
        resumed_from, first_update_s`` (host seconds of the first update of this call: with ``compile=True`` mostly
        the compilation), ``peak_memory`` (CUDA: the most bytes the caching allocator held for tensors during this
        call, None elsewhere), and with ``stop_at_loss`` ``target`` (``{"loss", "reached", "step", "elapsed",
        "valid_loss"}``: the first evaluation at or below the target, its step and seconds of training). A final
        evaluation and checkpoint are made at the last step. Also written to ``summary.json``.

        SIGINT (Ctrl-C, a notebook's "interrupt kernel") or SIGTERM during ``fit`` (main thread only): the
        update under way finishes, a checkpoint is written at that step (no evaluation, no ``summary.json``),
        the metrics tables are flushed, and :class:`~attnkit.training.preemption.Interrupted` (a
        ``KeyboardInterrupt``) is raised with the signal, the step and the checkpoint; ``resume=True`` continues
        from it exactly. A second signal raises it at once (``immediate=True``; the last published checkpoint
        stays intact). A signal during the final evaluation raises it after the run's end as usual.
        """
        if self._fitted:
            raise RuntimeError("Trainer.fit() can run once; build a new Trainer (resume=True) to continue")
        self._fitted = True
        try:
            with self._signals:  # SIGINT / SIGTERM: stop at the next step boundary with a checkpoint (preemption.py)
                try:
                    summary = self._fit()
                except Interrupted as stop:
                    if stop.immediate:  # raised by the second signal wherever the loop was: report what is on disk
                        stop.step, stop.checkpoint = self.step, latest_checkpoint(self.ckpt_dir)
                    raise
                _, late = self._agreed_stop(0.0)  # a signal during the final evaluation and checkpoint
                if late is not None:
                    raise Interrupted(late, step=self.step, checkpoint=self.last_checkpoint)
        finally:
            self._release_lock()  # only now: the folder is this run's until its summary.json is written
        return summary

    def _fit(self) -> dict[str, Any]:
        """:meth:`fit` inside the signal handlers: start, the loop, the end (or the stop a signal asked for)."""
        stopped_by = "steps"
        try:
            train_model = self._start_fit()
            while True:
                reason = self._stop_reason()
                if reason is not None:
                    stopped_by = reason
                    break
                self._train_step(train_model)
            if stopped_by in _SIGNAL_NAMES:
                self._stop_on_signal(signal.Signals[stopped_by])
            self._finish_fit()
        except (FloatingPointError, OSError) as err:  # the first non-finite number, a full disk: keep what was saved
            kept = self.last_checkpoint if self.last_checkpoint is not None else "none (no checkpoint was written yet)"
            raise type(err)(f"{err}. Training stopped; the last good checkpoint is {kept}") from None
        finally:
            self._batches.close()
            if self._progress is not None:
                self._progress.close()
            self.metrics.close()
        return self._write_summary(stopped_by)

    def _start_fit(self) -> nn.Module:
        """Seed (or restore) the RNGs, wrap the model (DDP, ``torch.compile``), start the clock and the bar.

        Returns the module the updates run through.
        """
        cfg = self.config
        if self._rng_state is not None:
            try:
                restore_rng_state(self._rng_state)  # continue dropout etc. exactly where the checkpoint stopped
            except ValueError as err:
                raise CheckpointError(f"{self.resumed_from / 'state.json'}: {err}") from None
        else:
            seed_everything(cfg.seed)
        if self.world.rank > 0:  # dropout masks differ between ranks (each rank's own stream, reproducible)
            torch.manual_seed((cfg.seed + 7919 * self.world.rank + self.step) % 2**64)
        train_model = self.model
        if self.world.distributed and not cfg.fsdp:
            train_model = D.wrap_ddp(self.model, self.device, find_unused_parameters=self._layer_drop > 0)
        self._eval_model = train_model  # evaluation runs eagerly (see the module docstring)
        self._loss = self._loss_function()
        if cfg.compile and self.world.distributed:
            train_model = torch.compile(train_model)
        self.model.train()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)  # the summary's peak_memory is this call's

        start_elapsed, t0 = self.elapsed, time.perf_counter()
        self._now = lambda: start_elapsed + (time.perf_counter() - t0)
        self._clock = self.elapsed  # the run's clock as all ranks agree on it (rank 0's), read by the schedule
        self._pending: list[_Update] = []  # updates whose numbers are still on the device
        # tokens and seconds since the last metrics row, and the tokens/s of the updates of the last read (the bar)
        self._meter: dict[str, Any] = {"tokens": 0, "time": 0.0, "tps": None}
        self._progress = TrainProgress(total_steps=cfg.steps, max_time_s=cfg.max_time_s,
                                       initial_step=self.step, initial_elapsed=self.elapsed,
                                       enabled=self.progress_enabled, log=self.log_enabled)
        return train_model

    def _loss_function(self):
        """What an update calls as ``loss(model, batch) -> (loss, n_tokens)``: the task's ``loss``, or with
        ``compile=True`` in one process that same function compiled, the model's forward pass inside it."""
        if not self.config.compile or self.world.distributed:
            return self.task.loss
        return torch.compile(self.task.loss, dynamic=True if getattr(self.task, "dynamic_shapes", False) else None)

    def _schedule_clock(self) -> float:
        """The run's clock as the schedule and the task's budget share read it: with a ``max_time`` budget, the
        seconds after compiling, stretched over the whole budget (``elapsed - compile_s`` of
        ``max_time - compile_s``, in seconds of ``max_time``); the plain clock otherwise."""
        total = self.config.max_time_s
        if self._compile_s <= 0 or total is None or self._compile_s >= total:
            return self._clock
        return max(0.0, self._clock - self._compile_s) * total / (total - self._compile_s)

    def _stop_reason(self) -> str | None:
        """``"SIGINT"`` / ``"SIGTERM"`` when a signal asked the run to stop (under torchrun any rank's: all stop at
        this step), ``"target"`` once an evaluation reached ``stop_at_loss``, ``"steps"`` or ``"max_time"`` when
        the run is over, else None; moves the clock the schedule reads."""
        cfg = self.config
        now = self._now()
        clock, signum = self._agreed_stop(now)
        if signum is not None:
            return signal.Signals(signum).name
        if self.reached is not None:  # every rank has rank 0's evaluation, so all stop here
            return "target"
        if cfg.steps is not None and self.step >= cfg.steps:
            return "steps"
        self._clock = clock if cfg.max_time is not None else now  # the time budget follows rank 0's clock
        if cfg.max_time is not None and self._clock >= cfg.max_time_s:
            return "max_time"
        return None

    def _agreed_stop(self, clock: float) -> tuple[float, int | None]:
        """``(rank 0's clock, the signal that asks for a stop or None)``, the same on every rank: one ``all_sum``
        per step boundary under torchrun (whose updates synchronise the ranks anyway), nothing in one process.
        If ranks received different signals, SIGTERM wins."""
        signum = self._signals.requested
        if not self.world.distributed:
            return clock, signum
        total = D.all_sum([clock if self.world.is_main else 0.0, float(signum == signal.SIGTERM),
                           float(signum == signal.SIGINT)])
        return total[0], signal.SIGTERM if total[1] > 0 else signal.SIGINT if total[2] > 0 else None

    def _stop_on_signal(self, signum: int) -> None:
        """Preemption at a step boundary: a checkpoint at this step (unless one is there), the metrics tables,
        then :class:`Interrupted`. No evaluation: a scheduler's grace period is short."""
        self._read_updates()
        if self.last_checkpoint is None or self.last_checkpoint.name != step_dir_name(self.step):
            self._save()
        self.metrics.write_tables(only_if_changed=True)
        raise Interrupted(signum, step=self.step, checkpoint=self.last_checkpoint)

    def _train_step(self, train_model: nn.Module) -> None:
        """One update, then what is due after it: reading its numbers back, the bar, an evaluation, a checkpoint.

        The update's loss and gradient norm stay on the device until :meth:`_read_updates` (every ``log_every``
        updates and before an evaluation or checkpoint): a GPU then runs ahead of the Python that feeds it
        instead of waiting for every update's numbers.
        """
        cfg = self.config
        on_budget = getattr(self.task, "on_budget", None)  # optional: a task whose data follow the budget
        if on_budget is not None:
            self._batches.settle()  # the task may change: no batch is built meanwhile
            note = on_budget(self.step * cfg.grad_accum, cfg.budget_used(self.step, self._schedule_clock()))
            if note:
                self._batches.discard()  # built from the task as it was
                self._progress.write(f"step {self.step}: {note}")
        lr = self.scheduler.apply()  # the lr this update uses (a time-limited schedule: by the clock as it is now)
        t_step = time.perf_counter()
        update = self._update(train_model)
        dt = time.perf_counter() - t_step
        if self.first_update_s is None:
            self.first_update_s = dt
            if cfg.compile and not self.world.distributed:
                self._compile_s += dt  # compiling, not training: the schedule does not count it
        self.scheduler.step()
        self.step += 1
        self.elapsed = self._now()
        self._pending.append(update._replace(lr=lr, elapsed=self.elapsed, dt=dt))
        evaluate, save = self.step % cfg.eval_every == 0, self.step % cfg.ckpt_every == 0
        if self.step % cfg.log_every == 0 or evaluate or save:
            self._read_updates()
        shown = {"loss": self.last_loss, "lr": lr, "tok/s": self._meter["tps"]}  # loss, tok/s: as last read
        self._progress.update(self.step, self.elapsed, **{k: v for k, v in shown.items() if v is not None})
        if evaluate or save:
            self._batches.settle()  # the task is used by evaluation and saved with the checkpoint
        if evaluate:
            self._evaluate()
        if save:
            self._save()

    def _finish_fit(self) -> None:
        """The end of the run always has an evaluation and a checkpoint (and the metrics tables, ``best/``)."""
        self._read_updates()
        self._batches.close()
        if self.last_eval is None or self.last_eval["step"] != self.step:
            self._evaluate()
        if self.last_checkpoint is None or self.last_checkpoint.name != step_dir_name(self.step):
            self._save()
        self.metrics.write_tables(only_if_changed=True)
        if self.config.fsdp:
            D.on_main(self._convert_best)

    def _write_summary(self, stopped_by: str) -> dict[str, Any]:
        """The summary :meth:`fit` returns, written to ``summary.json`` by rank 0."""
        self.elapsed = self._now()
        best_dir = self.ckpt_dir / BEST_DIR
        summary = {"out_dir": str(self.out_dir), "steps": self.step, "stopped_by": stopped_by,
                   "elapsed": self.elapsed, "tokens": self.tokens, "train_loss": self.last_loss,
                   **{k: v for k, v in (self.last_eval or {}).items() if k != "step"},
                   "best": self.best, "checkpoint": str(self.last_checkpoint),
                   "best_checkpoint": str(best_dir) if best_dir.is_dir() else None,
                   "resumed_from": None if self.resumed_from is None else str(self.resumed_from),
                   "first_update_s": self.first_update_s,
                   "peak_memory": torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda"
                   else None}
        if self.config.stop_at_loss is not None:  # when the target was reached (None: not in this run)
            summary["target"] = {"loss": self.config.stop_at_loss, "reached": self.reached is not None,
                                 **{k: (self.reached or {}).get(k) for k in ("step", "elapsed", TARGET_METRIC)}}
        if self.world.is_main:
            try:
                write_text_atomic(self.out_dir / SUMMARY_FILE, json.dumps(summary, indent=2))
            except OSError as err:  # e.g. a full disk after the last checkpoint: say what is safe and what to do
                raise type(err)(f"cannot write {self.out_dir / SUMMARY_FILE}: {err}. Training itself ended at step "
                                f"{self.step} (checkpoint {self.last_checkpoint}); free some space and --resume "
                                f"to finish the run") from None
        D.barrier()
        return summary


def _saved_best(best: Any, folder: Path) -> dict[str, Any] | None:
    """A checkpoint's ``best`` entry, checked: null or ``{"metric": str, "value": finite number, "step": int}``."""
    if best is None:
        return None
    if not (isinstance(best, dict) and isinstance(best.get("metric"), str) and is_number(best.get("value"))
            and math.isfinite(best["value"]) and is_int(best.get("step"))):
        raise CheckpointError(f"{folder / 'state.json'}: 'best' must be null or {{\"metric\": name, \"value\": "
                              f"a finite number, \"step\": an integer}}, got {best!r:.200} (edited by hand?)")
    return best


def _saved_scaler(scaler: Any, folder: Path) -> dict[str, Any]:
    """A checkpoint's ``grad_scaler`` entry (``GradScaler.state_dict()``), checked: a dict whose ``scale`` is a finite
    number > 0 and whose other values are numbers or booleans."""
    if not (isinstance(scaler, dict) and is_number(scaler.get("scale")) and math.isfinite(scaler["scale"])
            and scaler["scale"] > 0 and all(is_number(v) or isinstance(v, bool) for v in scaler.values())):
        raise CheckpointError(f"{folder / 'state.json'}: 'grad_scaler' must be {{\"scale\": a finite number > 0, "
                              f"...}}, got {scaler!r:.200} (edited by hand?)")
    return scaler


def _saved_eval(row: Any, folder: Path) -> dict[str, Any] | None:
    """A checkpoint's ``last_eval`` entry, checked: null or ``{"step": int, name: number, ...}``."""
    if row is None:
        return None
    if not (isinstance(row, dict) and is_int(row.get("step"))
            and all(is_number(v) for k, v in row.items() if k != "step")):
        raise CheckpointError(f"{folder / 'state.json'}: 'last_eval' must be null or {{\"step\": an integer, "
                              f"name: a number, ...}}, got {row!r:.200} (edited by hand?)")
    return row
