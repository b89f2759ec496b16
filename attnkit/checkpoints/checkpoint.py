"""Checkpoints: safetensors for tensors, JSON for everything else, published with an atomic rename.

A checkpoint is a folder::

    step_00000400/
        model.safetensors       model weights (tied weights stored once)
        optimizer.safetensors   optimizer state tensors, named "<param name>:<state key>",
                                e.g. "blocks.0.attn.qkv_proj.weight:exp_avg"  (absent if no optimizer)
        state.json              everything else: the caller's ``state`` (step, configs, task state, best
                                metric, ...), ``extra`` (e.g. the tokenizer), the optimizer's hyper-parameters
                                and param-group layout (by parameter name), the scheduler state and the RNG
                                states

Nothing is ever pickled, so loading a checkpoint cannot execute code.

Crash safety: files are written into ``<name>.tmp/``, flushed to disk, and only then renamed to ``<name>``,
so a visible checkpoint folder is always complete. Replacing an existing folder (e.g. ``best/``) renames
the old one to ``<name>.old`` first and deletes it afterwards; :func:`clean_stale` (run on every resume)
deletes leftover ``.tmp`` folders and puts back an ``.old`` one whose replacement never appeared.

Every problem with a checkpoint raises :class:`CheckpointError` (a ``ValueError``) naming the file.
No tensors flow through the public API of this module, so there are no shapes to document.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from attnkit.checks import check_int
from attnkit.data.json_files import read_json_file

from attnkit.files import fsync_dir, fsync_file, publish_folder, write_text_atomic
from .rng import capture_rng_state, restore_rng_state

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
STATE_FILE = "state.json"
DCP_DIR = "dcp"  # a sharded (FSDP2) step checkpoint's torch.distributed.checkpoint folder, in place of MODEL_FILE
FORMAT = "attnkit.checkpoint"
FORMAT_VERSION = 1
# keys save_checkpoint writes itself; the caller's `state` may not use them
RESERVED_KEYS = ("format", "version", "extra", "optimizer", "scheduler", "rng")
# What a model may allocate up front beyond its weights: position tables (sinusoidal, rotary) are not stored with
# the weights and grow on demand, so a config that asks for more than the larger of this and the weights' size
# (block_size = 10**9 in a hand-edited state.json) is refused before anything is allocated.
TABLE_ALLOWANCE = 64 << 20
# keys of state.json that every reader takes for JSON objects (a hand-edited file may hold anything there)
OBJECT_KEYS = ("extra", "optimizer", "scheduler", "rng", "model_config", "train_config", "task")
_STEP_DIR = re.compile(r"^step_(\d+)$")
# what a checkpoint folder holds (DCP_DIR: a sharded one), besides the records `attnkit eval` writes there about its
# weights (eval_lm.json, ...); a save replaces or clears away no folder holding more
_CHECKPOINT_ENTRIES = (MODEL_FILE, OPTIMIZER_FILE, STATE_FILE, DCP_DIR)
EVAL_RECORD_PREFIX = "eval_"


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete, corrupt or does not fit the model/optimizer."""


def _not_replaceable(folder: Path) -> str | None:
    """Why a save may not replace (or clear away) ``folder``: it is a file or a link, or it holds more than a
    checkpoint's files, evaluation records and the hidden temporary files of atomic writes a crash left (a
    half-written checkpoint holds no more); None when it may, or when it does not exist."""
    if not os.path.lexists(folder):
        return None
    if folder.is_symlink() or not folder.is_dir():
        return "is a link" if folder.is_symlink() else "is a file"
    foreign = sorted(e.name for e in folder.iterdir()
                     if e.name not in _CHECKPOINT_ENTRIES and not e.name.startswith(EVAL_RECORD_PREFIX)
                     and not (e.name.startswith(".") and e.name.endswith(".tmp")))
    return f"holds {foreign[:3]}, not a checkpoint's files" if foreign else None


def check_replaceable(path: str | os.PathLike, who: str) -> None:
    """Raise ``ValueError`` (starting with ``who``) when a save to ``path`` may not replace ``path`` or remove the
    ``<path>.tmp`` / ``<path>.old`` a crash may have left: one of them is a file, a link or a folder of the user's
    (:func:`_not_replaceable`)."""
    path = Path(path)
    tmp, old = path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")
    for folder, fate in ((path, "replaced"), (tmp, "removed"), (old, "removed")):
        why = _not_replaceable(folder)
        if why:
            raise ValueError(f"{who}: {folder} exists and {why}; it would be {fate}: move it away or choose another "
                             f"path")


def step_dir_name(step: int) -> str:
    """Folder name of the checkpoint after ``step`` updates: ``step_00000400`` (sorts by name)."""
    return f"step_{step:08d}"


# -------------------------------------------------------------------------------------------------
# small file helpers
# -------------------------------------------------------------------------------------------------

def _to_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, indent=2, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} must be JSON-serialisable (finite numbers, str, lists, dicts), got an error: {err}") from None


def _jsonable(value: Any) -> Any:
    """Optimizer hyper-parameters as JSON: tuples -> lists, 0-dim tensors -> numbers."""
    if isinstance(value, torch.Tensor):
        return value.item()
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


# -------------------------------------------------------------------------------------------------
# optimizer <-> (tensors by stable name, JSON layout)
# -------------------------------------------------------------------------------------------------

def _optimizer_param_names(optimizer: torch.optim.Optimizer, model: nn.Module) -> list[list[str]]:
    """Parameter names of every param group, in the optimizer's order."""
    by_id = {id(p): name for name, p in model.named_parameters()}
    groups = []
    for gi, group in enumerate(optimizer.param_groups):
        names = []
        for p in group["params"]:
            if id(p) not in by_id:
                raise ValueError(f"optimizer param group {gi} holds a parameter of shape {tuple(p.shape)} "
                                 f"that is not a parameter of the {type(model).__name__} being saved")
            names.append(by_id[id(p)])
        groups.append(names)
    return groups


def _optimizer_to_payload(optimizer: torch.optim.Optimizer, model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    group_names = _optimizer_param_names(optimizer, model)
    flat_names = [n for names in group_names for n in names]  # state_dict() numbers params in this order
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for index, per_param in sd["state"].items():
        for key, value in per_param.items():
            stable = f"{flat_names[index]}:{key}"
            if isinstance(value, torch.Tensor):
                tensors[stable] = value.detach().cpu().contiguous()
            else:
                scalars[stable] = _jsonable(value)
    layout = []
    for group, names in zip(sd["param_groups"], group_names):
        hyper = {k: _jsonable(v) for k, v in group.items() if k != "params"}
        hyper["params"] = names
        layout.append(hyper)
    return tensors, {"class": type(optimizer).__name__, "param_groups": layout, "scalars": scalars}


def _kind(value: Any) -> Any:
    """What a hyper-parameter is, for comparing a saved one with the optimizer's own: bools, finite numbers,
    strings, None, and lists/tuples of these (with their length) are told apart; anything else is refused."""
    if value is None or isinstance(value, (bool, str)):
        return type(value).__name__
    if isinstance(value, (int, float)):
        return "number" if math.isfinite(value) else "non-finite"
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return "number"
    if isinstance(value, (list, tuple)):
        return tuple(_kind(v) for v in value)
    return "unknown"


def _check_optimizer_payload(optimizer: torch.optim.Optimizer, meta: dict[str, Any], tensors: dict[str, torch.Tensor],
                             params: dict[str, nn.Parameter], where: Path) -> None:
    """The optimizer part of state.json has the structure ``_optimizer_to_payload`` writes, each hyper-parameter
    the kind of the optimizer's own (a number stays a finite number, betas a pair), and each state tensor with
    dimensions the shape of its parameter (``exp_avg`` of a (16, 16) weight is (16, 16))."""
    groups = meta.get("param_groups")
    if not isinstance(groups, list) or not all(isinstance(g, dict) and isinstance(g.get("params"), list)
                                                and all(isinstance(n, str) for n in g["params"]) for g in groups):
        raise CheckpointError(f"{where / STATE_FILE}: optimizer param_groups must be a list of objects with a "
                              f"'params' list of parameter names, got {str(groups)[:120]}")
    if not isinstance(meta.get("scalars", {}), dict):
        raise CheckpointError(f"{where / STATE_FILE}: optimizer scalars must be an object, "
                              f"got {type(meta['scalars']).__name__}")
    accepted = inspect.signature(type(optimizer)).parameters
    for gi, (saved, current) in enumerate(zip(groups, optimizer.param_groups)):
        for key, value in saved.items():
            if key in ("params", "param_names") or key not in current:
                continue
            want, got = _kind(current[key]), _kind(value)
            if got != want and not (want == "NoneType" and got == "bool"):
                raise CheckpointError(f"{where / STATE_FILE}: optimizer param group {gi} hyper-parameter {key!r} "
                                      f"must be like {current[key]!r}, got {value!r}")
        try:  # the optimizer's own checks of its settings (betas in [0, 1), eps >= 0, ...) on the saved values
            type(optimizer)([nn.Parameter(torch.zeros(2, 2))],
                            **{k: v for k, v in saved.items() if k in accepted and k != "params"})
        except (ValueError, TypeError, RuntimeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise CheckpointError(f"{where / STATE_FILE}: optimizer param group {gi} has settings the "
                                  f"{type(optimizer).__name__} refuses: {first}") from None
    for stable, value in meta.get("scalars", {}).items():
        if _kind(value) not in ("number", "bool", "NoneType"):
            raise CheckpointError(f"{where / STATE_FILE}: optimizer scalar {stable!r} must be a finite number, "
                                  f"got {value!r}")
    keys: dict[str, set[str]] = {}
    for stable in list(tensors) + list(meta.get("scalars", {})):
        name, _, key = stable.rpartition(":")
        keys.setdefault(name, set()).add(key)
    for stable, value in tensors.items():
        name, _, key = stable.rpartition(":")
        param = params.get(name)
        if param is not None and value.dim() > 0 and value.shape != param.shape:
            raise CheckpointError(f"{where / OPTIMIZER_FILE}: state {stable!r} has shape {tuple(value.shape)}, "
                                  f"its parameter has {tuple(param.shape)}")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):  # never saved: NaN stops training
            raise CheckpointError(f"{where / OPTIMIZER_FILE}: state {stable!r} holds values that are not finite")
        if key.endswith("exp_avg_sq") and bool((value < 0).any()):  # Adam's second moments are squares
            raise CheckpointError(f"{where / OPTIMIZER_FILE}: state {stable!r} holds negative values")
    for gi, group in enumerate(groups):  # a parameter's state is all there or (not stepped yet) absent
        found = {frozenset(keys[n]) for n in group["params"] if n in keys}
        if len(found) > 1:
            raise CheckpointError(f"{where / OPTIMIZER_FILE}: the parameters of param group {gi} have different "
                                  f"state entries {sorted(sorted(k) for k in found)}: an entry is missing")


def _optimizer_from_payload(optimizer: torch.optim.Optimizer, model: nn.Module, meta: dict[str, Any],
                            tensors: dict[str, torch.Tensor], where: Path) -> None:
    if meta.get("class") != type(optimizer).__name__:
        raise CheckpointError(f"{where / STATE_FILE}: optimizer class is {meta.get('class')!r}, "
                              f"but the optimizer to restore is {type(optimizer).__name__!r}")
    _check_optimizer_payload(optimizer, meta, tensors, dict(model.named_parameters()), where)
    saved_groups = [g["params"] for g in meta["param_groups"]]
    current_groups = _optimizer_param_names(optimizer, model)
    if saved_groups != current_groups:
        detail = (f"{len(saved_groups)} groups of sizes {[len(g) for g in saved_groups]} vs "
                  f"{len(current_groups)} groups of sizes {[len(g) for g in current_groups]}")
        for gi, (a, b) in enumerate(zip(saved_groups, current_groups)):
            if a != b:
                only_saved = sorted(set(a) - set(b))[:5]
                only_now = sorted(set(b) - set(a))[:5]
                detail += f"; group {gi} differs: only in checkpoint {only_saved}, only now {only_now}"
                break
        raise CheckpointError(f"{where / STATE_FILE}: optimizer parameter layout differs from the current one ({detail})")
    index = {name: i for i, name in enumerate(n for names in current_groups for n in names)}
    state: dict[int, dict[str, Any]] = {}
    entries = list(tensors.items()) + list(meta.get("scalars", {}).items())
    for stable, value in entries:
        name, _, key = stable.rpartition(":")
        if name not in index:
            raise CheckpointError(f"{where / OPTIMIZER_FILE}: state entry {stable!r} names no optimized parameter")
        state.setdefault(index[name], {})[key] = value
    groups = []
    for hyper, current in zip(meta["param_groups"], optimizer.param_groups):
        group = {}
        for k, v in hyper.items():
            # JSON turned tuples (betas) into lists; give torch back what it had
            group[k] = tuple(v) if isinstance(current.get(k), tuple) and isinstance(v, list) else v
        for k, v in current.items():  # a setting the checkpoint lacks (an older torch, an edit): the run's own
            group.setdefault(k, v)
        group["params"] = [index[n] for n in hyper["params"]]
        groups.append(group)
    try:
        optimizer.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError, RuntimeError) as err:
        raise CheckpointError(f"{where / OPTIMIZER_FILE}: cannot restore the optimizer: {err}") from None


# -------------------------------------------------------------------------------------------------
# save
# -------------------------------------------------------------------------------------------------

def save_checkpoint(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                    scheduler: Any = None, state: dict[str, Any] | None = None,
                    extra: dict[str, str | dict] | None = None, *, include_rng: bool = True) -> Path:
    """Write a checkpoint folder at ``path`` atomically (replacing an existing checkpoint folder) and return its path.
    A ``path`` (or ``<path>.tmp``, ``<path>.old``) that is a file, a link or a folder holding more than a
    checkpoint's files (and its ``eval_*`` records) raises ``ValueError``: it is not replaced.

    Args:
        model: its ``state_dict`` goes to ``model.safetensors`` (shared/tied tensors stored once).
        optimizer: optional; state tensors to ``optimizer.safetensors``, hyper-parameters and the param-group
            layout (parameter names) to ``state.json["optimizer"]``. Its params must belong to ``model``.
        scheduler: optional object with a JSON-able ``state_dict()`` (e.g. ``LRScheduler``).
        state: JSON-able dict merged at the top level of ``state.json`` (step, configs, task state, ...);
            keys ``format, version, extra, optimizer, scheduler, rng`` are reserved.
        extra: JSON-able ``{name: str | dict}`` for whatever should travel with the weights (tokenizer JSON,
            vocabulary, notes); stored as ``state.json["extra"]``.
        include_rng: also store the python / numpy / torch RNG states (``state.json["rng"]``).
    """
    path = Path(path)
    if not isinstance(model, nn.Module):
        raise ValueError(f"save_checkpoint expects an nn.Module, got {type(model).__name__}")
    state = dict(state or {})
    clash = sorted(set(state) & set(RESERVED_KEYS))
    if clash:
        raise ValueError(f"save_checkpoint: state may not use the reserved keys {clash} (reserved: {list(RESERVED_KEYS)})")
    extra = dict(extra or {})
    for key, value in extra.items():
        if not isinstance(key, str) or not isinstance(value, (str, dict)):
            raise ValueError(f"save_checkpoint: extra must map str -> str | dict, got {key!r} -> {type(value).__name__}")

    payload: dict[str, Any] = {"format": FORMAT, "version": FORMAT_VERSION, **state, "extra": extra}
    opt_tensors = None
    if optimizer is not None:
        opt_tensors, payload["optimizer"] = _optimizer_to_payload(optimizer, model)
    if scheduler is not None:
        payload["scheduler"] = scheduler.state_dict()
    if include_rng:
        payload["rng"] = capture_rng_state()
    text = _to_json(payload, "checkpoint state")  # fail before touching the disk

    check_replaceable(path, "save_checkpoint")  # crash leftovers (.tmp, .old) are removed, no folder of the user's
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        _save_model_weights(model, tmp / MODEL_FILE)
        _give_folder_mode(tmp / MODEL_FILE, tmp)
        fsync_file(tmp / MODEL_FILE)
        if opt_tensors is not None:
            save_file(opt_tensors, str(tmp / OPTIMIZER_FILE))
            _give_folder_mode(tmp / OPTIMIZER_FILE, tmp)
            fsync_file(tmp / OPTIMIZER_FILE)
        write_text_atomic(tmp / STATE_FILE, text)
        fsync_dir(tmp)
    except (OSError, SafetensorError) as err:  # e.g. a full disk: free the unfinished copy, keep the old one
        shutil.rmtree(tmp, ignore_errors=True)
        raise OSError(f"cannot write the checkpoint {path}: {err}") from None

    try:
        return publish_folder(tmp, path)  # at every instant the old or the new complete folder exists
    except OSError as err:
        if not tmp.is_dir():  # published: only the removal of the replaced copy failed (clean_stale finishes it)
            raise
        old = path.with_name(path.name + ".old")
        if not os.path.lexists(path) and old.is_dir():  # moved aside, its replacement never came: put it back
            os.rename(old, path)
        shutil.rmtree(tmp, ignore_errors=True)
        raise OSError(f"cannot write the checkpoint {path}: {err}") from None


# -------------------------------------------------------------------------------------------------
# load
# -------------------------------------------------------------------------------------------------

def read_checkpoint_state(path: str | os.PathLike) -> dict[str, Any]:
    """Parse and return ``<path>/state.json`` (no tensors loaded); raises :class:`CheckpointError`."""
    path = Path(path)
    if not path.is_dir():
        what = "is a file, not a checkpoint folder" if path.exists() else "the folder does not exist"
        raise CheckpointError(f"no checkpoint at {path}: {what}")
    file = path / STATE_FILE
    if not file.is_file():
        raise CheckpointError(f"checkpoint {path} is incomplete: {file} is missing")
    data = read_json_file(file, lambda err: CheckpointError(f"{file} is corrupt (not valid JSON: {err})"))
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{file} is not an attnkit checkpoint (expected format {FORMAT!r}, "
                              f"got {data.get('format') if isinstance(data, dict) else type(data).__name__!r})")
    if data.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"{file} has checkpoint format version {data.get('version')!r}, "
                              f"this attnkit reads version {FORMAT_VERSION}")
    for key in OBJECT_KEYS:
        if key in data and not isinstance(data[key], dict):
            raise CheckpointError(f"{file}: {key!r} must be a JSON object, got {type(data[key]).__name__} "
                                  f"{str(data[key])[:40]!r} (edited by hand?)")
    return data


def _lora_settings(path: Path, data: dict[str, Any]) -> dict[str, Any] | None:
    """The unmerged LoRA adapters a step checkpoint of ``finetune --lora`` holds (``extra.lora``), or None."""
    lora = data.get("extra", {}).get("lora")
    if not isinstance(lora, dict) or lora.get("merged", True) is True:
        return None
    if not (type(lora.get("rank")) is int and type(lora.get("alpha")) in (int, float)
            and isinstance(lora.get("targets"), list)):
        raise CheckpointError(f"{path / STATE_FILE}: extra.lora must hold rank, alpha and targets, got {lora!r}")
    return lora


def check_model_config(path: str | os.PathLike, config: Any, state: dict[str, Any] | None = None) -> nn.Module:
    """Check a model config against the weights of the checkpoint at ``path`` before anything is allocated: the
    model is built on the meta device, its tensors compared with the header of ``model.safetensors`` (an unmerged
    LoRA step checkpoint, ``extra.lora`` of ``state``, also holds adapters of its rank) and its position tables
    with its weights (:func:`check_table_sizes`). A sharded (FSDP2) step checkpoint has no such header: its config
    is built and its tables bounded, and ``torch.distributed.checkpoint`` checks each shard's shape as it loads.
    Returns the meta model; raises :class:`CheckpointError` naming the file.

    Call it before building a model from a ``state.json`` someone may have edited (``block_size = 10**9``,
    ``n_embd`` times 1,024): building first would allocate what the config asks for."""
    path = Path(path)
    file = path / MODEL_FILE
    if not file.exists() and (path / DCP_DIR).is_dir():
        # a sharded step checkpoint: no header to compare; torch.distributed.checkpoint checks every shard's
        # shape when it loads them into the model this config builds
        return _meta_model(path, config)
    shapes = read_weight_shapes(file)
    layers = sum(getattr(config, k, 0) for k in ("n_layer", "num_encoder_layers", "num_decoder_layers"))
    if layers > len(shapes):  # every layer stores tensors: do not even build a million empty layers
        raise CheckpointError(f"{file} holds {len(shapes)} tensors, too few for the {layers} layers of the config")
    lora = _lora_settings(path, state or {})
    adapters = {k: v for k, v in shapes.items() if lora is not None and k.endswith((".lora_A", ".lora_B"))}
    if lora is not None and (not adapters or any(lora["rank"] not in shape for shape in adapters.values())):
        raise CheckpointError(f"{file} does not hold LoRA adapters of rank {lora['rank']} (extra.lora of "
                              f"{path / STATE_FILE}), found {sorted(adapters.items())[:4]}")
    return _meta_model(path, config, lambda m: check_weights_fit(m, {k: v for k, v in shapes.items()
                                                                     if k not in adapters}, file))


def _meta_model(path: Path, config: Any, check: Callable[[nn.Module], None] | None = None) -> nn.Module:
    """``config``'s model on the meta device, ``check``-ed (the base weights against the config; the adapters'
    own shapes are checked when they are loaded), its position tables within bounds."""
    from attnkit.models.builders import build_model

    try:
        with torch.device("meta"):
            meta = build_model(config)
    except (RuntimeError, OverflowError, ValueError, TypeError) as err:  # sizes past what torch can hold
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path / STATE_FILE}: its model_config cannot be built: {first}") from None
    if check is not None:
        check(meta)
    try:
        check_table_sizes(meta, str(path))
    except ValueError as err:
        raise CheckpointError(str(err)) from None
    return meta


def _with_adapters(model: nn.Module, lora: dict[str, Any] | None) -> nn.Module:
    if lora is not None:
        from attnkit.modules.lora import apply_lora

        apply_lora(model, rank=lora["rank"], alpha=lora["alpha"], targets=lora["targets"], dropout=0.0)
    return model


def build_checkpoint_model(path: str | os.PathLike, state: dict[str, Any] | None = None) -> nn.Module:
    """A new model as the checkpoint at ``path`` describes it (``state.json``'s ``model_config``, with the
    adapters of an unmerged LoRA step checkpoint), built only after :func:`check_model_config`, in the floating
    point dtype its weights were saved in (a bfloat16 model comes back in bfloat16); its weights are random until
    :func:`load_checkpoint`. Raises :class:`CheckpointError`."""
    from attnkit.models.builders import build_model

    path = Path(path)
    state = read_checkpoint_state(path) if state is None else state
    check_not_sharded(path, state)
    model = _with_adapters(build_model(checked_model_config(path, state)), _lora_settings(path, state))
    dtype = stored_float_dtype(path / MODEL_FILE)
    return model if dtype is None else model.to(dtype)


def check_not_sharded(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Raise :class:`CheckpointError` when the checkpoint at ``path`` (its ``state``) is a sharded (FSDP) one: it has
    no ``model.safetensors`` to read, only the shards a run under torchrun resumes from."""
    if state.get("sharded"):
        raise CheckpointError(f"{path} is a sharded (FSDP) checkpoint: resume it with --fsdp under torchrun, or "
                              f"turn it into an ordinary one with `attnkit convert {path} OUT`")


def checked_model_config(path: str | os.PathLike, state: dict[str, Any]) -> Any:
    """The model config of the checkpoint at ``path`` (its ``state``), read and checked against the weights by
    :func:`check_model_config` before anything is built. Raises :class:`CheckpointError` naming the file."""
    from attnkit.models.configs import config_from_dict

    path = Path(path)
    if "model_config" not in state:
        raise CheckpointError(f"{path / STATE_FILE} has no model_config; it was not written by attnkit train")
    try:
        config = config_from_dict(state["model_config"])
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"{path / STATE_FILE}: model_config: {err}") from None
    check_model_config(path, config, state)
    return config


def check_table_sizes(model: nn.Module, what: str) -> None:
    """Refuse a model (built on the meta device: nothing allocated) whose tensors that are not stored with the
    weights, its position tables, would take more than the larger of its weights and :data:`TABLE_ALLOWANCE`
    (``ValueError`` naming the sizes)."""
    stored = model.state_dict(keep_vars=True)
    weights = sum(t.numel() * t.element_size() for t in {id(t): t for t in stored.values()}.values())
    tables = sum(b.numel() * b.element_size() for name, b in model.named_buffers() if name not in stored)
    if tables > max(weights, TABLE_ALLOWANCE):
        config = getattr(model, "config", None)
        length = getattr(config, "block_size", None) or getattr(config, "max_len", None)
        raise ValueError(f"{what}: its position tables for length {length} would take {tables / 2**20:,.0f} MiB up "
                         f"front, more than its weights ({weights / 2**20:,.1f} MiB) and the {TABLE_ALLOWANCE >> 20} "
                         f"MiB allowed beyond them (the tables grow on demand; is the length a typo?)")


def _read_safetensors(file: Path, device: str) -> dict[str, torch.Tensor]:
    if not file.is_file():
        raise CheckpointError(f"checkpoint {file.parent} is incomplete: {file} is missing")
    try:
        return load_file(str(file), device=device)
    except Exception as err:  # safetensors raises its own SafetensorError (header/size checks) for bad files
        raise CheckpointError(f"{file} is corrupt or truncated: {err}") from None


def read_weight_shapes(file: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the tensors of a safetensors file, from its header alone (no tensor is read; the
    header's offsets have been checked against the file's size). Raises :class:`CheckpointError`."""
    file = Path(file)
    if not file.is_file():
        raise CheckpointError(f"checkpoint {file.parent} is incomplete: {file} is missing")
    try:
        with safe_open(str(file), framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as err:  # SafetensorError (header/size checks), OSError
        raise CheckpointError(f"{file} is corrupt or truncated: {err}") from None


_FLOAT_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}


def stored_float_dtype(file: str | os.PathLike) -> torch.dtype | None:
    """The floating point dtype of the tensors of the safetensors ``file`` (e.g. ``torch.bfloat16`` for a model
    saved in bfloat16), or None when they have none or several. Raises :class:`CheckpointError`."""
    try:
        with safe_open(str(file), framework="pt") as f:
            found = {_FLOAT_DTYPES.get(f.get_slice(k).get_dtype()) for k in f.keys()} - {None}
    except Exception as err:  # SafetensorError (header/size checks), OSError
        raise CheckpointError(f"{file} is corrupt or truncated: {err}") from None
    return found.pop() if len(found) == 1 else None


def _storage_key(t: torch.Tensor) -> tuple:
    """Identifies the memory a tensor views: tied parameters share it (on the meta device, where nothing has
    memory, the tensor object itself tells them apart)."""
    if t.device.type == "meta":
        return (id(t),)
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))


def _give_folder_mode(file: Path, folder: Path) -> None:
    """Give ``file`` the mode of a file the user creates: safetensors' ``save_file`` writes 0600, and ``folder``, just
    made by ``mkdir``, has ``0o777 & ~umask``, so ``0o666 & ~umask`` is its mode without the execute bits."""
    mode = os.stat(folder).st_mode & 0o666
    if os.stat(file).st_mode & 0o777 != mode:
        os.chmod(file, mode)


def _save_model_weights(model: nn.Module, file: Path) -> None:
    """``model.state_dict()`` to safetensors, each tied tensor once (under its alphabetically first name, as
    safetensors' ``save_model`` does) and made contiguous (weights may be strided, e.g. after
    :func:`attnkit.generation.use_decoding_layout`)."""
    groups: dict[tuple, list[str]] = {}
    state = model.state_dict()
    for name, t in state.items():
        groups.setdefault(_storage_key(t), []).append(name)
    tensors = {}
    for names in groups.values():
        keep = sorted(names)[0]
        tensors[keep] = state[keep].detach().cpu().contiguous()
    save_file(tensors, str(file), metadata={"format": "pt"})


def check_weights_fit(model: nn.Module, shapes: dict[str, tuple[int, ...]], file: Path) -> None:
    """The tensor names and shapes of ``file`` (``{name: shape}``, e.g. :func:`read_weight_shapes`) must match
    ``model.state_dict()`` (a tied alias may be absent); raises :class:`CheckpointError` listing the
    differences. ``model`` may live on the meta device: nothing is allocated."""
    expected = model.state_dict(keep_vars=True)
    unexpected = sorted(set(shapes) - set(expected))
    loaded = {_storage_key(expected[k]) for k in shapes if k in expected}
    missing = sorted(k for k in set(expected) - set(shapes) if _storage_key(expected[k]) not in loaded)
    wrong = [f"{k}: checkpoint {tuple(shapes[k])}, model {tuple(expected[k].shape)}"
             for k in sorted(set(shapes) & set(expected)) if tuple(shapes[k]) != tuple(expected[k].shape)]
    if missing or unexpected or wrong:
        raise CheckpointError(f"{file} does not fit {type(model).__name__}: missing keys {missing[:10]}, "
                              f"unexpected keys {unexpected[:10]}, shape mismatches {wrong[:10]}")


def check_weight_values(model: nn.Module, weights: dict[str, torch.Tensor], file: Path) -> None:
    """The tensors of ``file`` (``weights``, whose names and shapes fit ``model``) hold what ``model``'s do: floating
    point numbers, all finite, where the model has floating point tensors (``load_state_dict`` would turn integers
    or booleans into floats, and a NaN would only show as NaN output), and the model's own dtype elsewhere (the
    int8 weights of a quantized layer); and a tensor the model ties (an output head that is the embedding) is
    not stored twice with different values (the weights of an untied model: one of them would be dropped). Raises
    :class:`CheckpointError` naming the tensor."""
    expected = model.state_dict(keep_vars=True)
    tied: dict[tuple, str] = {}
    for name, t in weights.items():
        want = expected[name]
        if t.is_floating_point() != want.is_floating_point() or (not t.is_floating_point() and t.dtype != want.dtype):
            raise CheckpointError(f"{file}: {name} is {t.dtype}, but the model's {name} is {want.dtype}")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"{file}: {name} holds values that are not finite (NaN or inf)")
        first = tied.setdefault(_storage_key(want), name)
        if first != name and not torch.equal(weights[first], t):
            raise CheckpointError(f"{file}: {first} and {name} differ, but they are one tensor in the "
                                  f"{type(model).__name__} (tied): the weights are not of a model with tied weights")


def load_checkpoint(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                    scheduler: Any = None, *, restore_rng: bool = False,
                    device: str | torch.device | None = None) -> dict[str, Any]:
    """Load weights (and optionally optimizer / scheduler / RNG states) from a checkpoint folder.

    Returns the parsed ``state.json`` dict (the caller's ``state`` keys plus ``extra``, ``optimizer``,
    ``scheduler``, ``rng``). ``device`` defaults to the model's current device. Everything is checked before
    the model is touched: a missing or corrupt file, or weights whose names/shapes do not fit the model (or
    whose values do not: :func:`check_weight_values`), raise :class:`CheckpointError` naming the file.
    """
    path = Path(path)
    if not isinstance(model, nn.Module):
        raise ValueError(f"load_checkpoint expects an nn.Module, got {type(model).__name__}")
    data = read_checkpoint_state(path)
    check_not_sharded(path, data)
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    device = str(torch.device(device))

    # Validate every file before modifying anything, so a failed load leaves model and optimizer intact.
    check_weights_fit(model, read_weight_shapes(path / MODEL_FILE), path / MODEL_FILE)  # before reading tensors
    weights = _read_safetensors(path / MODEL_FILE, device)
    check_weight_values(model, weights, path / MODEL_FILE)
    opt_tensors = None
    if optimizer is not None:
        if "optimizer" not in data:
            raise CheckpointError(f"{path / STATE_FILE} has no optimizer state (saved without an optimizer)")
        opt_tensors = _read_safetensors(path / OPTIMIZER_FILE, "cpu")
    if scheduler is not None and "scheduler" not in data:
        raise CheckpointError(f"{path / STATE_FILE} has no scheduler state (saved without a scheduler)")
    if restore_rng and "rng" not in data:
        raise CheckpointError(f"{path / STATE_FILE} has no RNG state (saved with include_rng=False)")

    # strict=False because a tied weight is stored under one of its names only (checked above)
    model.load_state_dict(weights, strict=False)
    if optimizer is not None:
        _optimizer_from_payload(optimizer, model, data["optimizer"], opt_tensors, path)
    if scheduler is not None:
        try:
            scheduler.load_state_dict(data["scheduler"])
        except (ValueError, KeyError, TypeError) as err:
            raise CheckpointError(f"{path / STATE_FILE}: cannot restore the scheduler: {err}") from None
    if restore_rng:
        try:
            restore_rng_state(data["rng"])
        except ValueError as err:
            raise CheckpointError(f"{path / STATE_FILE}: {err}") from None
    return data


# -------------------------------------------------------------------------------------------------
# a folder of checkpoints: listing, pruning, crash leftovers
# -------------------------------------------------------------------------------------------------

def list_checkpoints(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """``[(step, folder), ...]`` of the ``step_*`` checkpoints under ``root``, oldest first.

    ``.tmp`` / ``.old`` leftovers and ``best/`` are not listed.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        m = _STEP_DIR.match(entry.name)
        if m and entry.is_dir():
            found.append((int(m.group(1)), entry))
    return sorted(found)


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The ``step_*`` folder with the highest step, or None."""
    found = list_checkpoints(root)
    return found[-1][1] if found else None


def prune_checkpoints(root: str | os.PathLike, keep_last: int, *, every: int | None = None) -> list[Path]:
    """Delete all but the newest ``keep_last`` ``step_*`` checkpoints (``best/`` is never touched, nor a ``step_*``
    folder that is a link or holds files of the user's).

    With ``every`` (the run's checkpoint interval), a checkpoint off that cadence (written by a preemption, step 0
    included, or at the end of a run since resumed) is kept only while it is the newest: the run that was never
    stopped has none, so a resumed run keeps (and ``--average-last`` averages) the same checkpoints as an
    uninterrupted one."""
    check_int("keep_last", keep_last, minimum=1)
    check_int("every", every, minimum=1, allow_none=True)
    found = list_checkpoints(root)
    off = {p for s, p in found[:-1] if every is not None and (s == 0 or s % every != 0)}  # superseded, off-cadence
    stale = set([p for _, p in found if p not in off][:-keep_last]) | off
    doomed = [p for _, p in found if p in stale and _not_replaceable(p) is None]
    for p in doomed:
        shutil.rmtree(p)
    return doomed


def clean_stale(root: str | os.PathLike) -> list[str]:
    """Repair a checkpoint folder after a crash; returns a description of each action taken.

    ``<name>.tmp`` (a save that never finished) is deleted. ``<name>.old`` (the previous version of a
    folder being replaced) is deleted if ``<name>`` exists, and renamed back to ``<name>`` otherwise. A file, a
    link or a folder holding files of the user's is left alone (a save refuses to remove it too).
    """
    root = Path(root)
    actions: list[str] = []
    if not root.is_dir():
        return actions
    for entry in sorted(root.iterdir()):
        if not entry.name.endswith((".tmp", ".old")) or _not_replaceable(entry) is not None:
            continue
        if entry.name.endswith(".tmp"):
            shutil.rmtree(entry)
            actions.append(f"removed unfinished {entry.name}")
        else:
            target = entry.with_name(entry.name[: -len(".old")])
            if target.exists():
                shutil.rmtree(entry)
                actions.append(f"removed replaced {entry.name}")
            else:
                os.rename(entry, target)
                actions.append(f"restored {target.name} from {entry.name}")
    return actions
