"""Checkpoint averaging: the element-wise mean of the weights of the last few checkpoints of a run.

"Attention Is All You Need" (section 6.1) evaluates the base model with "a single model obtained by
averaging the last 5 checkpoints, which were written at 10-minute intervals". Late in training the weights
wander around a minimum along the noisy SGD path; their mean sits closer to its centre than any single point,
which typically gives a slightly lower validation loss and a little more BLEU, for free.

Averaging is done tensor by tensor in float64 and cast back to each tensor's dtype; integer tensors (none in
attnkit's models, but buffers could be) must be equal in every checkpoint and are copied. The result is an
ordinary checkpoint folder (weights + ``state.json`` with the model config, the ``extra`` of the newest
checkpoint, and ``averaged_from``), without optimizer or RNG state, so it can be evaluated, translated with
or fine-tuned from, but not resumed. It is written atomically like every checkpoint.

Tensors have their own shapes (any); all checkpoints must agree on names and shapes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch

from attnkit.checks import check_int
from .checkpoint import (MODEL_FILE, CheckpointError, _read_safetensors, build_checkpoint_model, check_not_sharded,
                         list_checkpoints, read_checkpoint_state, save_checkpoint)

__all__ = ["average_state_dicts", "average_checkpoints", "average_last_checkpoints", "AVERAGED_DIR"]

AVERAGED_DIR = "averaged"


def average_state_dicts(state_dicts: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Element-wise mean of ``N >= 1`` state dicts with the same names, shapes and dtypes.

    Shape:
        every ``state_dicts[i][name]`` has the same shape; the result has that shape too.
    """
    if len(state_dicts) == 0:
        raise ValueError("average_state_dicts needs at least one state dict, got 0")
    first = state_dicts[0]
    for i, sd in enumerate(state_dicts[1:], start=1):
        if set(sd) != set(first):
            missing, unexpected = sorted(set(first) - set(sd)), sorted(set(sd) - set(first))
            raise ValueError(f"state dict {i} has different tensors than state dict 0: missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}")
        for name, t in sd.items():
            if t.shape != first[name].shape or t.dtype != first[name].dtype:
                raise ValueError(f"state dict {i}: {name} has shape {tuple(t.shape)} {t.dtype}, expected "
                                 f"{tuple(first[name].shape)} {first[name].dtype} as in state dict 0")
    out: dict[str, torch.Tensor] = {}
    for name, t0 in first.items():
        if t0.is_floating_point():
            acc = torch.zeros(t0.shape, dtype=torch.float64)
            for sd in state_dicts:
                acc += sd[name].to(torch.float64)
            out[name] = (acc / len(state_dicts)).to(t0.dtype)
        else:
            for i, sd in enumerate(state_dicts[1:], start=1):
                if not torch.equal(sd[name], t0):
                    raise ValueError(f"non-float tensor {name} ({t0.dtype}) differs between state dict 0 and {i}; "
                                     "it cannot be averaged")
            out[name] = t0.clone()
    return out


def _is_average(folder: Path) -> bool:
    """Whether ``folder`` is a checkpoint :func:`average_checkpoints` wrote (what a rerun replaces)."""
    try:
        return "averaged_from" in read_checkpoint_state(folder)
    except CheckpointError:
        return False


def average_checkpoints(paths: Sequence[str | os.PathLike], out: str | os.PathLike) -> Path:
    """Average the weights of the checkpoint folders ``paths`` into a new checkpoint folder ``out``.

    The model is rebuilt from the newest (last) checkpoint's ``model_config``; all checkpoints must hold the
    same model config and tokenizer, and no un-merged LoRA adapters. ``out`` must not exist, or be a checkpoint this
    function wrote before (which is replaced); anything else there raises ``ValueError``. Returns ``out``.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint folder, got none")
    out = Path(out)
    if any(out.resolve() == p.resolve() for p in paths):
        raise ValueError(f"average_checkpoints: out {out} is one of the inputs; choose another folder")
    if os.path.lexists(out) and not _is_average(out):
        raise ValueError(f"average_checkpoints: {out} exists and is not an averaged checkpoint; it would be "
                         f"overwritten: choose another folder")
    states = [read_checkpoint_state(p) for p in paths]
    last = states[-1]
    if "model_config" not in last:
        raise CheckpointError(f"{paths[-1]} has no model_config; it was not written by attnkit train")
    for p, st in zip(paths, states):
        check_not_sharded(p, st)
        if st.get("model_config") != last["model_config"]:
            raise ValueError(f"cannot average {p} with {paths[-1]}: their model configs differ")
        if (st.get("extra") or {}).get("tokenizer") != (last.get("extra") or {}).get("tokenizer"):
            raise ValueError(f"cannot average {p} with {paths[-1]}: their tokenizers differ")
    weights = [_read_safetensors(p / MODEL_FILE, "cpu") for p in paths]
    for p, w in zip(paths, weights):
        adapters = sorted(n for n in w if n.endswith((".lora_A", ".lora_B")))
        if adapters:  # mean(B) @ mean(A) is not the mean of B @ A, and the rebuilt model has no place for them
            raise ValueError(f"cannot average {p}: it holds {len(adapters)} un-merged LoRA adapter tensors (e.g. "
                             f"{adapters[0]}); average checkpoints with the adapters merged into the weights")
    averaged = average_state_dicts(weights)

    # checked against its weights (an edited size is refused, not allocated), in their dtype (bfloat16 stays so)
    model = build_checkpoint_model(paths[-1], last)
    loaded = model.load_state_dict(averaged, strict=False)  # tied weights are stored under one name, as saved
    if loaded.unexpected_keys:
        raise ValueError(f"cannot average {paths[-1]}: its weights hold tensors the model has no place for, e.g. "
                         f"{sorted(loaded.unexpected_keys)[:3]}")
    state = {"model_config": last["model_config"], "step": last.get("step"),
             "averaged_from": [str(p) for p in paths],
             "averaged_steps": [st.get("step") for st in states]}
    return save_checkpoint(out, model, state=state, extra=last.get("extra") or {}, include_rng=False)


def average_last_checkpoints(run_dir: str | os.PathLike, n: int, *, out: str | os.PathLike | None = None) -> Path:
    """Average the last ``n`` step checkpoints of the run in ``run_dir`` into ``out``
    (default ``run_dir/checkpoints/averaged``). Fewer than ``n`` checkpoints raise ``ValueError``."""
    check_int("n", n, minimum=1)
    ckpts = list_checkpoints(Path(run_dir) / "checkpoints")
    if len(ckpts) < n:
        raise ValueError(f"cannot average the last {n} checkpoints of {run_dir}: it holds {len(ckpts)} "
                         f"({[s for s, _ in ckpts]}); train longer or lower --ckpt-every / raise --keep-last")
    out = Path(run_dir) / "checkpoints" / AVERAGED_DIR if out is None else Path(out)
    return average_checkpoints([p for _, p in ckpts[-n:]], out)
