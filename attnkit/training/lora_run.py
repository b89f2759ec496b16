"""LoRA fine-tuning runs: put adapters on a model, and merge them into ``best/`` when the run ends.

The step checkpoints of a LoRA run hold the frozen weights plus the adapters (what an exact ``--resume`` needs);
:func:`finalize_lora_run` rewrites ``checkpoints/best`` with the adapters merged, so it loads as a plain model.

There are no tensor axes in this file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["add_lora", "finalize_lora_run"]


def add_lora(model, lora: dict[str, Any]) -> int:
    """Put adapters on ``model`` as ``lora`` says and freeze the rest; returns the trainable parameter count."""
    from attnkit.modules.lora import apply_lora, mark_only_lora_trainable

    apply_lora(model, rank=lora["rank"], alpha=lora["alpha"], targets=tuple(lora["targets"]),
               dropout=lora["dropout"])
    return mark_only_lora_trainable(model)


def finalize_lora_run(out: str | Path) -> Path | None:
    """Rewrite ``out/checkpoints/best`` with its adapters merged into the weights (a plain GPT checkpoint).

    The step checkpoints keep the adapters (``--resume`` continues from those, exactly); ``best/`` is only read
    back by the trainer for its score, so replacing its tensors is safe. The rewrite is atomic; the state
    (step, score, configs) and the weights' dtype (a run from a bfloat16 model stays bfloat16) are kept and
    ``extra["lora"]["merged"]`` becomes true. Returns the folder, or None when there is no best checkpoint or it
    is already merged.
    """
    from attnkit.modules.lora import merge_lora
    from attnkit.checkpoints.checkpoint import (RESERVED_KEYS, build_checkpoint_model, load_checkpoint,
                                                read_checkpoint_state, save_checkpoint)

    best = Path(out) / "checkpoints" / "best"
    if not (best / "state.json").is_file():
        return None
    state = read_checkpoint_state(best)
    extra = dict(state.get("extra") or {})
    lora = extra.get("lora")
    if not isinstance(lora, dict) or lora.get("merged"):
        return None
    model = build_checkpoint_model(best, state)  # with the adapters of extra.lora, in the weights' dtype
    load_checkpoint(best, model)
    merge_lora(model)
    extra["lora"] = dict(lora, merged=True)
    kept = {k: v for k, v in state.items() if k not in RESERVED_KEYS and k != "format" and k != "version"}
    return save_checkpoint(best, model, state=kept, extra=extra, include_rng=False)
