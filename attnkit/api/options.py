"""What every run takes and gives: the shared training options, the device options, and a run's result.

Every field left ``None`` takes the recipe's default (:mod:`attnkit.recipes`) or, when resuming, the value the run
was started with (:func:`attnkit.training.config.resolve_train_config`), exactly as a flag left unset does on the
command line. Field names are the flags' names with ``_`` for ``-`` (``--max-time`` is ``max_time``), except
``--set FIELD=VALUE`` (``overrides``, a dict), ``--no-progress`` (``progress=False``), ``--no-bleu``
(``bleu=False``), ``--no-cache`` (``use_cache=False``), ``--from`` (``source``) and ``--len`` (``length``).

Options are validated when made: a field of the wrong type raises ``ValueError`` naming the field, the expected
type and the value given (and, in the training options, an empty string, which would read as a field left unset);
so does a misspelt field, with the closest one (``TrainLMOptions(stesp=5)``: "did you mean 'steps'?").
Ranges are checked where the value is used (the training config, the data readers), with the same messages as the
command line's. Nothing here imports torch. There are no tensor axes in this file.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .launcher import say, world_size

__all__ = ["TRAIN_FIELDS", "Options", "DeviceOptions", "TrainOptions", "RunResult", "check_fields", "field_kind",
           "train_values", "inference_device", "place_model", "check_model_source", "done_line", "default_log",
           "resumed_model_config", "Log", "recorded_path", "same_path", "same_tokenizer", "refuse_changed",
           "scaled_min_lr", "check_out", "refuse_changed_config", "refuse_spent_resume", "train_config",
           "read_json_object"]

Log = Callable[[str], None]

# the TrainConfig fields a run may set (None: the recipe's or the resumed run's value)
TRAIN_FIELDS = ("batch_size", "grad_accum", "lr", "min_lr", "warmup_steps", "schedule", "weight_decay", "optimizer",
                "muon_ns_steps", "grad_clip", "eval_every", "eval_batches", "log_every", "ckpt_every", "keep_last",
                "seed")
_AUTOCAST = (None, "bf16", "fp16", "off")
# the TrainConfig fields a flag of the same name sets (--batch-size: batch_size)
_FLAGGED = TRAIN_FIELDS + ("block_size", "schedule_steps", "compile", "cuda_graphs", "fsdp", "autocast",
                           "activation_checkpointing", "loss_chunks")
_MAY_CHANGE = ("only --steps, --max-time, --stop-at-loss, --device, --activation-checkpointing and --loss-chunks "
               "may change")
# the TrainConfig fields a flag sets, named by the flag in errors ("TrainConfig.warmup_steps" is --warmup-steps)
_FLAG_OF = {name: "--" + name.replace("_", "-") for name in _FLAGGED + ("steps", "max_time", "stop_at_loss", "device")}


def _type_ok(value: Any, kind: str) -> bool:
    if value is None:
        return kind.endswith("?")
    base = kind.rstrip("?")
    if base == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if base == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base == "bool":
        return isinstance(value, bool)
    if base == "str":
        return isinstance(value, str)
    if base == "path":
        return isinstance(value, (str, Path))
    if base == "dict":
        return isinstance(value, dict)
    if base == "strs":
        return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    raise AssertionError(f"unknown kind {kind!r}")


_NAMES = {"int": "an int", "float": "a number", "bool": "True or False", "str": "a string",
          "path": "a path (str or pathlib.Path)", "dict": "a dict", "strs": "a list of strings"}


def check_fields(options: Any, kinds: dict[str, str]) -> None:
    """Raise ``ValueError`` for the first field of ``options`` whose value is not of its kind
    (``"int?"`` = an int or None, ``"path"``, ``"strs"`` ...)."""
    for name, kind in kinds.items():
        value = getattr(options, name)
        if not _type_ok(value, kind):
            what = _NAMES[kind.rstrip("?")] + (" or None" if kind.endswith("?") else "")
            raise ValueError(f"{type(options).__name__}.{name} must be {what}, got {value!r} "
                             f"({type(value).__name__})")


def field_kind(annotation: str) -> str:
    """The kind :func:`check_fields` checks, from a field's annotation: ``"int | None"`` -> ``"int?"``,
    ``"str | Path"`` -> ``"path"``, ``"list[str] | None"`` -> ``"strs?"``."""
    parts = {p.strip() for p in str(annotation).split("|")}
    optional = "None" in parts
    parts.discard("None")
    if parts in ({"bool"}, {"int"}, {"float"}, {"str"}):
        base = parts.pop()
    elif parts == {"str", "Path"}:
        base = "path"
    elif len(parts) == 1 and next(iter(parts)).startswith("dict["):
        base = "dict"
    elif parts == {"list[str]"}:
        base = "strs"
    else:
        raise TypeError(f"no kind for the annotation {annotation!r}")
    return base + ("?" if optional else "")


class Options:
    """Base of every options dataclass: each field is checked against its annotation when the options are made
    (:func:`field_kind`), then :meth:`_check` checks ranges and combinations (subclasses extend it). A text field
    that may name a file (``data``, ``source``, ``tokenizer``) takes a ``pathlib.Path`` too, kept as its str."""

    def __new__(cls, *args: Any, **kwargs: Any):
        cls._known(kwargs)  # TrainLMOptions(stesp=5): a ValueError naming the field, as make() gives, not a TypeError
        return super().__new__(cls)

    def __post_init__(self) -> None:
        kinds = {f.name: field_kind(f.type) for f in dataclasses.fields(self)}
        for name, kind in kinds.items():
            if kind.rstrip("?") == "str" and isinstance(getattr(self, name), os.PathLike):
                setattr(self, name, os.fspath(getattr(self, name)))  # data=Path("corpus.txt"): as the CLI gives it
        check_fields(self, kinds)
        self._check()

    def _check(self) -> None:
        pass

    def replace(self, **changes: Any):
        """A copy with ``changes`` applied (validated again)."""
        type(self)._known(changes)
        return dataclasses.replace(self, **changes)

    @classmethod
    def _known(cls, changes: dict[str, Any]) -> None:
        """Refuse a keyword that is not a field (a ``ValueError`` naming it and a close field, not a TypeError)."""
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        for key in changes:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; its fields: {', '.join(names)}"
                raise ValueError(f"{cls.__name__} has no field {key!r}{hint}")

    @classmethod
    def make(cls, options: Any = None, changes: dict[str, Any] | None = None):
        """What a run function was given: ``options`` (an instance of this class) with ``changes`` applied, or
        the options made from ``changes`` alone (the keyword arguments)."""
        if options is None:
            cls._known(changes or {})
            return cls(**(changes or {}))
        if not isinstance(options, cls):
            raise ValueError(f"expected {cls.__name__}, got {type(options).__name__}")
        return options.replace(**changes) if changes else options


@dataclass
class DeviceOptions(Options):
    """Where a run computes: ``device`` ``auto`` (CUDA when available, else the CPU), ``cpu``, ``cuda``,
    ``cuda:N`` or ``mps``; ``autocast`` ``bf16``, ``fp16`` or None/``off`` (training: autocast of the forward pass,
    fp16 with a gradient scaler; inference: the weights in that precision)."""

    device: str | None = None
    autocast: str | None = None

    def _check(self) -> None:
        if self.autocast not in _AUTOCAST:
            raise ValueError(f"{type(self).__name__}.autocast must be one of bf16, fp16, off or None, "
                             f"got {self.autocast!r}")

    @property
    def autocast_mode(self) -> str | None:
        """``autocast`` as the training config reads it (``off`` and None are None)."""
        return None if self.autocast in (None, "off") else self.autocast

    def resolved_device(self):
        """``device`` as an available ``torch.device`` (under torchrun: this process's GPU); ValueError otherwise."""
        from attnkit.training.device import resolve_device
        from attnkit.training.distributed import env_local_rank

        return resolve_device(self.device or "auto", local_rank=env_local_rank())


@dataclass
class TrainOptions(DeviceOptions):
    """The options ``train_lm``, ``train_mt`` and ``finetune`` share (each adds its data options).

    Attributes:
        out: the run folder (None: ``runs/<kind>-<data>-<preset>-<time>``); an existing run is never overwritten,
            ``resume=True`` continues it exactly where it stopped (then only ``steps``, ``max_time``, ``device``,
            ``stop_at_loss``, ``activation_checkpointing`` and ``loss_chunks`` may change).
        preset: the model preset (``attnkit params --list``); ``overrides``: model config fields to change,
            e.g. ``{"n_layer": 6, "dropout": 0.2}`` (``--set``).
        steps, max_time: length of the run in updates and in minutes (whichever comes first).
        batch_size: sequences per micro-batch and process (under torchrun the global batch is this x the
            number of processes); the other training fields as the flags of the same name.
        compile: ``torch.compile`` the model; cuda_graphs: replay each batch shape as a recorded CUDA graph;
        fsdp: shard over the torchrun processes instead of replicating (DDP).
        activation_checkpointing: compute each block's activations again in the backward pass instead of keeping
            them (the same numbers, less memory, slower updates). None is off; like ``device`` it is not taken from
            a resumed run: each part of a run runs as it is told (the flag on, or not).
        loss_chunks: K >= 1 computes the training loss over K row chunks of the final hidden states, each chunk's
            logits made again in the backward pass instead of kept (:mod:`attnkit.modules.chunked_cross_entropy`:
            the same losses up to float rounding, no ``(B, T, V)`` logits kept). None or 0 is off; like
            ``activation_checkpointing`` it is not taken from a resumed run.
        progress: show the tqdm bar (the log lines print either way).
    """

    out: str | Path | None = None
    resume: bool = False
    preset: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    steps: int | None = None
    max_time: float | None = None
    batch_size: int | None = None
    grad_accum: int | None = None
    lr: float | None = None
    min_lr: float | None = None
    warmup_steps: int | None = None
    schedule: str | None = None
    weight_decay: float | None = None
    optimizer: str | None = None
    muon_ns_steps: int | None = None
    grad_clip: float | None = None
    eval_every: int | None = None
    eval_batches: int | None = None
    log_every: int | None = None
    ckpt_every: int | None = None
    keep_last: int | None = None
    seed: int | None = None
    compile: bool | None = None
    cuda_graphs: bool | None = None
    fsdp: bool | None = None
    activation_checkpointing: bool | None = None
    loss_chunks: int | None = None
    progress: bool = True

    def _check(self) -> None:
        super()._check()
        for f in dataclasses.fields(self):  # "" would read as not given: out="" trained into the working directory
            value = getattr(self, f.name)
            if isinstance(value, str) and not value.strip():
                raise ValueError(f"{type(self).__name__}.{f.name} must not be empty, got {value!r} (None: the "
                                 f"default)")
        for key in self.overrides:  # the model config's field names (keyword arguments of get_preset)
            if not isinstance(key, str):
                raise ValueError(f"{type(self).__name__}.overrides must map model config field names (str) to values, "
                                 f"got the key {key!r} ({type(key).__name__})")


def train_values(options: TrainOptions, *, block_size: int | None = None) -> dict[str, Any]:
    """The TrainConfig fields the options set (those left None are absent), for
    :func:`attnkit.training.config.resolve_train_config`.

    Fails first (before any data is read) on a device or autocast this machine cannot run. ``batch_size`` is
    per process: the config (and the checkpoint) hold the global micro-batch. The device is always recorded
    (checkpoints are device-free, so it may change on resume), and so are activation checkpointing and loss chunks
    (off unless given: they change no number beyond float rounding, so a resumed run takes them as given, not from
    the run).
    """
    from attnkit.training.device import check_autocast

    device = options.resolved_device()
    check_autocast(options.autocast_mode, device)
    if options.cuda_graphs and device.type != "cuda":
        raise ValueError(f"--cuda-graphs needs a CUDA device (--device cuda), got {device}")
    given = {f: getattr(options, f) for f in TRAIN_FIELDS + ("steps", "max_time", "compile", "cuda_graphs")
             if getattr(options, f) is not None}
    if block_size is not None:
        given["block_size"] = block_size
    if "batch_size" in given:
        given["batch_size"] = given["batch_size"] * world_size()
    given["device"] = options.device or "auto"
    given["activation_checkpointing"] = bool(options.activation_checkpointing)  # as told now, resumed or not
    given["loss_chunks"] = options.loss_chunks or 0  # the same: as told now
    if options.autocast is not None:
        given["autocast"] = options.autocast_mode
    if options.fsdp:
        given["fsdp"] = True
    return given


def inference_device(options: DeviceOptions):
    """``options.device`` resolved and its autocast checked for it (inference runs call this before loading)."""
    from attnkit.training.device import check_autocast

    device = options.resolved_device()
    check_autocast(options.autocast_mode, device)
    return device


def check_model_source(who: str, ckpt: Any, model: Any) -> None:
    """``ValueError`` unless exactly one of ``ckpt`` (an attnkit run or checkpoint folder) and ``model`` (a
    pretrained model) is given; ``""`` is neither a folder nor a name."""
    if (ckpt is None) == (model is None) or "" in (ckpt, model):
        raise ValueError(f"{who} needs exactly one of ckpt (a run or checkpoint folder) and model (a named pretrained "
                         f"model, a .gguf file or a Hugging Face folder), got ckpt={ckpt!r}, model={model!r}")


def place_model(model, options: DeviceOptions, device):
    """Inference: ``model`` on ``device``, its weights in the autocast precision (bf16/fp16 weights: the KV caches
    and beam search follow the weights' dtype and device). Returns ``model``."""
    import torch

    model.to(device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(options.autocast_mode)
    return model.to(dtype) if dtype is not None else model


@dataclass
class RunResult:
    """What a training run leaves: its folder and its ``summary.json`` (steps, losses, time, best checkpoint)."""

    out: Path
    summary: dict[str, Any]

    @property
    def best_checkpoint(self) -> Path | None:
        best = self.summary.get("best_checkpoint")
        return Path(best) if best else None

    @property
    def steps(self) -> int:
        return int(self.summary["steps"])

    @property
    def valid_loss(self) -> float | None:
        return self.summary.get("valid_loss")


def done_line(summary: dict[str, Any], tail: str) -> str:
    """The one line a finished training run prints: steps, time, why it stopped, losses (the train loss only when
    the run made an update: a time budget may end it before the first), then ``tail``."""
    tl, vl, vb = summary.get("train_loss"), summary.get("valid_loss"), summary.get("valid_bleu")
    losses = [part for part in (f"train loss {tl:.4f}" if tl is not None else None,
                                f"valid loss {vl:.4f}" if vl is not None else None,
                                f"valid BLEU (greedy) {vb:.2f}" if vb is not None else None) if part]
    return (f"done: {summary['steps']} steps in {summary['elapsed']:.0f} s ({summary['stopped_by']})"
            + (f"; {', '.join(losses)}" if losses else "") + f"; {tail}")


def train_config(defaults: dict[str, Any], saved: dict[str, Any] | None, given: dict[str, Any],
                 **kwargs: Any) -> Any:
    """:func:`attnkit.training.config.resolve_train_config`, whose ``ValueError`` names a field by its flag, as the
    command line's other errors do (``TrainConfig.warmup_steps must be <= steps`` reads ``--warmup-steps must be <=
    steps``); a field no flag sets keeps its ``TrainConfig.`` name."""
    from attnkit.training.config import resolve_train_config

    try:
        return resolve_train_config(defaults, saved, given, **kwargs)
    except ValueError as err:
        named = re.sub(r"TrainConfig\.(\w+)(?: \(--[\w-]+\))?",
                       lambda m: _FLAG_OF.get(m.group(1), m.group(0)), str(err))
        raise ValueError(named) from None


def check_vocab_size(vocab_size: int | None, specials: int | None) -> None:
    """``--vocab-size``, the size of a byte-level BPE to train with ``specials`` special tokens: at least its 256
    bytes and the specials, at most :data:`~attnkit.data.tokenizers.bpe_tokenizer.MAX_BPE_VOCAB` (refused when the
    options are made, before any data is read). ``specials=None`` (resuming: the value must be the run's own,
    checked later) asks only for at least 1."""
    from attnkit.data.tokenizers.bpe_tokenizer import MAX_BPE_VOCAB

    least = 1 if specials is None else 256 + specials
    if vocab_size is not None and not least <= vocab_size <= MAX_BPE_VOCAB:
        why = "" if specials is None else f" (256 bytes + {specials} special token{'s' if specials > 1 else ''})"
        raise ValueError(f"--vocab-size must be in [{least}{why}, {MAX_BPE_VOCAB:,}], got {vocab_size}")


def default_log(log: Log | None) -> Log:
    """``log``, or :func:`say` (stderr, rank 0 only) when None; anything else that is not callable (``log=False``)
    raises ``ValueError`` before the run starts, not a ``TypeError`` at its first status line."""
    if log is not None and not callable(log):
        raise ValueError(f"log must be a function taking each status line, or None (stderr), got {log!r} "
                         f"({type(log).__name__}); to silence a run pass log=lambda line: None")
    return say if log is None else log


def resumed_model_config(saved: dict[str, Any], overrides: dict[str, Any]):
    """The model config a resumed run was saved with, with ``overrides`` applied (the trainer then refuses any
    field that differs from the saved one, dropout included, naming it; an override equal to the saved value is
    fine)."""
    from attnkit.models.configs import config_from_dict

    config = config_from_dict(saved["model_config"])
    return config.replace(**overrides) if overrides else config


def recorded_path(value: str, *, is_name: Callable[[str], bool] | None = None, pairs: bool = False) -> str:
    """``value`` (what ``--data``, ``--from`` ... named) as a run records it: a local file or folder that exists as
    its absolute path, so that the run resumes from any working directory; a name (``is_name(value)``: a data
    recipe, a pretrained model) or a path that does not exist as given. ``pairs``: ``"SRC,TGT"`` is two paths
    (``train mt``). ``recorded_path("plays.txt") == "/home/me/plays.txt"``, ``recorded_path("de-en") == "de-en"``."""
    if is_name is not None and is_name(value):
        return value
    path = Path(value)
    if path.exists():  # before the comma: a file's name may hold one
        return str(path.resolve())
    if pairs and "," in value:
        return ",".join(recorded_path(part.strip()) for part in value.split(","))
    return value


def same_path(given: str, saved: Any, **how: Any) -> bool:
    """Whether ``given`` names what a run recorded as ``saved`` (both as :func:`recorded_path` with ``how`` reads
    them here: a run that recorded a relative path resumes from the folder it was started in, as before)."""
    return isinstance(saved, str) and recorded_path(given, **how) == recorded_path(saved, **how)


def same_tokenizer(path: str | Path, saved: Any) -> bool:
    """Whether the tokenizer file ``path`` is the tokenizer a run saved (``saved``: its ``to_dict()`` in the
    checkpoint's JSON)."""
    from attnkit.data.tokenizers.tokenizer import load_tokenizer

    return json.loads(json.dumps(load_tokenizer(path).to_dict())) == saved


def refuse_changed(flag: str, value: Any, was: Any) -> None:
    """On resume: ``ValueError`` unless ``value`` (a flag the user gave; None: not given) is the run's ``was``."""
    if value is not None and value != was:
        raise ValueError(f"--resume: the run was trained with {flag} {was!r}, got {value!r} (a resumed run keeps "
                         f"its settings; {_MAY_CHANGE})")


def check_out(options: TrainOptions) -> None:
    """A new run's ``out`` checked before any data is read: not a file, no run in it and none of a run's records
    (:func:`attnkit.checkpoints.runs.check_new_run_folder`; the trainer checks again under the folder's lock).
    A resumed run's folder is read by :func:`attnkit.checkpoints.runs.read_saved_run`."""
    if not options.resume and options.out is not None:
        from attnkit.checkpoints.runs import check_new_run_folder

        check_new_run_folder(options.out)


def refuse_changed_config(cfg: Any, saved: dict[str, Any], *, may_change: str = _MAY_CHANGE) -> None:
    """On resume: ``ValueError`` naming the flags whose value in ``cfg`` (the resolved training config) differs
    from the run's ``train_config`` (what the trainer refuses, by field, after the data is read; the model config
    is compared there). Per-process flags show the global value (``--batch-size``: under torchrun the config holds
    the global batch). ``may_change``: the end of the message, the flags the command lets a resume change
    (``finetune`` takes no ``--stop-at-loss``)."""
    diffs = cfg.resume_differences(saved["train_config"])
    if diffs:
        named = [f"{'--' + name.replace('_', '-') if name in _FLAGGED else 'train_config.' + name} {old!r}, got "
                 f"{new!r}" for name, (old, new) in diffs.items()]
        raise ValueError(f"--resume: the run was trained with {'; '.join(named)} (a resumed run keeps its settings; "
                         f"{may_change})")


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (a run's ``summary.json``, a checkpoint's ``state.json``), or {} when there is
    none to read (missing, unreadable, not JSON, not an object): for rules that then fall back on other numbers."""
    from attnkit.data.json_files import read_json_file

    try:
        summary = read_json_file(path, ValueError)
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def refuse_spent_resume(out: str | Path, saved: dict[str, Any], cfg: Any, *, work_left: bool = False) -> None:
    """On resume: ``ValueError`` when the run in ``out`` (its latest checkpoint's state ``saved``) has nothing left to
    train under ``cfg`` (the resolved config): its ``--steps`` done, its ``--max-time`` used up (by the checkpoint's
    ``elapsed``, or at least the run's own budget when ``summary.json`` says its clock stopped it at this step), or
    its ``--stop-at-loss`` reached already; the message names the flag to raise (or lower). A run whose end is not
    recorded (no ``summary.json``: a signal stopped its last update) or whose command has ``work_left`` after
    training (``train mt``'s scoring or averaging) resumes to finish it. A ``--steps`` below the run's step is
    refused either way. Values of an edited state that are not numbers are left to the trainer, which names them."""
    from attnkit.checkpoints.runs import SUMMARY_FILE
    from attnkit.checks import is_int, is_number

    step, elapsed = saved.get("step"), saved.get("elapsed", 0.0)
    if not is_int(step) or not is_number(elapsed):
        return
    if cfg.steps is not None and cfg.steps < step:
        raise ValueError(f"cannot resume with --steps {cfg.steps}: {out} is at step {step} already; pass --steps "
                         f"N > {step} to train more")
    if work_left or not (Path(out) / SUMMARY_FILE).is_file():
        return
    # a run stopped by its clock at this checkpoint's step had used its own budget, though the checkpoint (written at
    # that step by --ckpt-every just before the clock passed it) may hold a little less
    summary, budget = read_json_object(Path(out) / SUMMARY_FILE), (saved.get("train_config") or {}).get("max_time")
    if summary.get("steps") == step and summary.get("stopped_by") == "max_time" and is_number(budget):
        elapsed = max(elapsed, budget * 60.0)
    if cfg.steps is not None and step >= cfg.steps:
        raise ValueError(f"{out} already ran its {step} steps (--steps {cfg.steps}): nothing to resume; pass --steps "
                         f"N > {step} (or --max-time MIN without --steps) to train more")
    if cfg.max_time is not None and elapsed >= cfg.max_time_s:
        raise ValueError(f"{out} already used its time budget (--max-time {cfg.max_time:g}: {elapsed:.1f} s of "
                         f"training, {step} steps): nothing to resume; pass a larger --max-time (--steps alone keeps "
                         f"this budget) to train more")
    reached = saved.get("reached")
    if isinstance(reached, dict) and cfg.stop_at_loss is not None and reached.get("loss") == cfg.stop_at_loss:
        raise ValueError(f"{out} already reached its target (--stop-at-loss {cfg.stop_at_loss:g}) at step "
                         f"{reached.get('step')}: nothing to resume; pass a lower --stop-at-loss to train more")


def scaled_min_lr(defaults: dict[str, Any], lr: float | None, min_lr: float | None, *,
                  always: bool = False) -> dict[str, Any]:
    """``defaults`` (a recipe's training values) for a run given ``lr`` and ``min_lr`` (None: not given): with
    ``lr`` given below the recipe's ``min_lr`` and ``min_lr`` not given, ``min_lr`` becomes a tenth of ``lr`` (so
    a small ``--lr`` alone is never refused for being below it); ``always`` (``finetune``'s rule): whenever ``lr``
    is given without ``min_lr``, ``min_lr`` is at most a tenth of it."""
    if lr is None or min_lr is not None or "min_lr" not in defaults:
        return defaults
    if always or lr < defaults["min_lr"]:
        return {**defaults, "min_lr": min(defaults["min_lr"], lr / 10)}
    return defaults
