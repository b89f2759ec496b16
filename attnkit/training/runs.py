"""Loading a trained model back from a run folder or a checkpoint folder.

A run folder (what ``attnkit train`` writes) looks like::

    run/
      run.json  metrics.jsonl  metrics.csv  loss.png  summary.json
      checkpoints/
        step_00001000/   model.safetensors  optimizer.safetensors  state.json
        best/            (a copy of the best checkpoint so far)

``state.json`` holds the model config (``model_config``) and, under ``extra``, the tokenizer (``tokenizer``)
and a note of what the run was (``kind``: ``"lm"`` or ``"mt"``), so a checkpoint is self-contained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnkit.training.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, read_checkpoint_state

__all__ = ["resolve_checkpoint", "load_trained", "read_saved_run", "default_run_folder"]


def resolve_checkpoint(path: str | Path, *, prefer: str = "best") -> Path:
    """A checkpoint folder from ``path``: the folder itself if it holds ``state.json``; for a run folder its
    ``checkpoints/best`` (``prefer="best"``) or latest step checkpoint. Raises ``FileNotFoundError`` with a
    clear message when there is none."""
    if prefer not in ("best", "latest"):
        raise ValueError(f"prefer must be 'best' or 'latest', got {prefer!r}")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such checkpoint or run folder: {path}")
    if (path / "state.json").is_file():
        return path
    ckpts = path / "checkpoints"
    if ckpts.is_dir():
        best = ckpts / "best"
        latest = latest_checkpoint(ckpts)
        if prefer == "best" and (best / "state.json").is_file():
            return best
        if latest is not None:
            return latest
        if (best / "state.json").is_file():
            return best
    raise FileNotFoundError(f"{path} holds no checkpoint (expected state.json, or checkpoints/best or "
                            "checkpoints/step_* inside a run folder)")


def load_trained(path: str | Path, *, expect_kind: str | None = None, prefer: str = "best",
                 device: str | torch.device = "cpu") -> tuple[nn.Module, Any, dict[str, Any]]:
    """Rebuild the model of a checkpoint, load its weights and its tokenizer.

    Args:
        path: a checkpoint folder or a run folder (see :func:`resolve_checkpoint`).
        expect_kind: ``"lm"`` or ``"mt"``: refuse a checkpoint of the other kind with a clear error
            (e.g. a language model passed to ``attnkit translate``).

    Returns:
        ``(model in eval mode, tokenizer or None, state)`` where ``state`` is the parsed ``state.json``.
    """
    from attnkit.data.tokenizer import tokenizer_from_dict
    from attnkit.models.builders import build_model
    from attnkit.models.configs import config_from_dict

    ckpt = resolve_checkpoint(path, prefer=prefer)
    state = read_checkpoint_state(ckpt)
    if "model_config" not in state:
        raise CheckpointError(f"{ckpt / 'state.json'} has no model_config; it was not written by attnkit train")
    config = config_from_dict(state["model_config"])
    extra = state.get("extra") or {}
    kind = extra.get("kind") or ("mt" if type(config).__name__ == "TransformerConfig" else "lm")
    if expect_kind is not None and kind != expect_kind:
        what = {"lm": "a language model (decoder-only GPT)", "mt": "a translation model (encoder-decoder)"}
        raise ValueError(f"{ckpt} holds {what.get(kind, kind)}, but this command needs "
                         f"{what.get(expect_kind, expect_kind)}")
    model = build_model(config)
    lora = extra.get("lora")
    if isinstance(lora, dict) and not lora.get("merged", True):
        # a LoRA fine-tuning step checkpoint: frozen weights + adapters; load both, then fold the adapters in
        from attnkit.modules.lora import apply_lora, merge_lora

        apply_lora(model, rank=lora["rank"], alpha=lora["alpha"], targets=lora["targets"], dropout=0.0)
        load_checkpoint(ckpt, model, device=device)
        merge_lora(model)
    else:
        load_checkpoint(ckpt, model, device=device)
    model.eval()
    tok = extra.get("tokenizer")
    tokenizer = tokenizer_from_dict(tok) if tok is not None else None
    return model, tokenizer, state


def read_saved_run(out: str | Path | None) -> dict[str, Any]:
    """The latest checkpoint's state of the run in ``out`` (what ``--resume`` continues from)."""
    if out is None:
        raise ValueError("--resume needs --out pointing at the run folder to continue")
    latest = latest_checkpoint(Path(out) / "checkpoints")
    if latest is None:
        raise FileNotFoundError(f"--resume: {out} holds no checkpoint to resume from")
    return read_checkpoint_state(latest)


def default_run_folder(kind: str, data: str, preset: str) -> Path:
    """``runs/<kind>-<data stem>-<preset>-<YYYYmmdd-HHMMSS>`` for a run started without ``--out``."""
    import os
    import time

    if os.environ.get("WORLD_SIZE", "1") not in ("", "1"):
        # the default name holds the start time, which the processes of a torchrun job need not agree on
        raise ValueError("under torchrun pass --out: every process must write the same run folder")
    stem = Path(str(data)).stem if any(c in str(data) for c in "/.") else str(data)
    return Path("runs") / f"{kind}-{stem}-{preset}-{time.strftime('%Y%m%d-%H%M%S')}"
