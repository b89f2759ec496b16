"""``trace_model``: run a model once and record every module's inputs and outputs in forward order (``attnkit trace``).

    from attnkit.api import trace_model, TracePreset
    print(trace_model(TracePreset(preset="char-small", batch=2, length=11)).format())

The model is a preset with random weights and random token ids (:class:`TracePreset`), or a checkpoint / named
pretrained model with a real text (:class:`~attnkit.api.inputs.ModelText`). The tracing itself is
:func:`attnkit.viz.trace.trace` (hooks only; the model's code is unchanged).

Axis legend: ``B`` batch, ``T`` text / target positions, ``S`` source positions, ``V`` vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnkit.checks import INDEX_MAX, check_seed

from .inputs import ModelText, is_seq2seq, lm_ids, load_inspected, mt_ids
from .options import DeviceOptions, Log, default_log

__all__ = ["TracePreset", "trace_model"]

MAX_TRACE_SIZE = INDEX_MAX  # the most random ids (batch x length) and the largest vocabulary a preset is traced with


@dataclass
class TracePreset(DeviceOptions):
    """A preset with random weights (seeded) run on random token ids: ``batch`` rows of ``length`` ids (the target
    of an encoder-decoder, whose source has ``src_len``, default ``length``); ``vocab_size`` overrides the
    preset's. ``batch`` x the longer length and ``vocab_size`` are at most :data:`MAX_TRACE_SIZE`."""

    preset: str = ""
    batch: int = 2
    length: int = 11
    src_len: int | None = None
    vocab_size: int | None = None
    seed: int = 0

    def _check(self) -> None:
        super()._check()
        for value, flag in ((self.batch, "--batch"), (self.length, "--len"), (self.src_len, "--src-len"),
                            (self.vocab_size, "--vocab-size")):
            if value is not None and value <= 0:
                raise ValueError(f"{flag} must be a positive integer, got {value}")
        tokens = self.batch * max(self.length, self.src_len or 0)  # past 2**31 - 1 torch's sizes overflow
        for value, flag in ((tokens, "--batch x --len (or --src-len)"), (self.vocab_size, "--vocab-size")):
            if value is not None and value > MAX_TRACE_SIZE:
                raise ValueError(f"{flag} must be at most 2**31 - 1 = {MAX_TRACE_SIZE:,}, got {value:,}")
        check_seed("--seed", self.seed)


def _preset_inputs(o: TracePreset) -> tuple[Any, Any]:
    """``(model, ids (B, T) or (src (B, S), tgt (B, T)))`` of a preset with random weights."""
    import torch

    from attnkit.models.builders import build_model
    from attnkit.models.configs import TransformerConfig
    from attnkit.models.presets import get_preset

    config = get_preset(o.preset)
    seq2seq = isinstance(config, TransformerConfig)
    if o.vocab_size is not None:
        config = config.replace(**({"src_vocab_size": o.vocab_size, "tgt_vocab_size": o.vocab_size} if seq2seq
                                   else {"vocab_size": o.vocab_size}))
    if o.src_len is not None and not seq2seq:
        raise ValueError(f"--src-len is for encoder-decoder presets; {o.preset} is decoder-only")
    if not seq2seq and o.length > config.block_size:  # before the model is built (gpt2-xl: 6 GB)
        raise ValueError(f"--len must be at most the preset's block_size = {config.block_size}, got {o.length}")
    with torch.random.fork_rng(devices=[]):  # the caller's random stream is left as it was
        torch.manual_seed(o.seed)
        model = build_model(config)
    g = torch.Generator().manual_seed(o.seed)
    if seq2seq:
        S = o.length if o.src_len is None else o.src_len
        src = torch.randint(0, config.src_vocab_size, (o.batch, S), generator=g)  # (B, S), ids in [0, V)
        tgt = torch.randint(0, config.tgt_vocab_size, (o.batch, o.length), generator=g)  # (B, T)
        return model, (src, tgt)
    return model, torch.randint(0, config.vocab_size, (o.batch, o.length), generator=g)  # (B, T)


def _text_inputs(o: ModelText, log: Log) -> tuple[Any, Any]:
    """``(model, ids (1, T) or (src (1, S), tgt (1, T)))`` of a checkpoint or pretrained model and a text."""
    import torch

    loaded = load_inspected(o)
    model, tokenizer = loaded.model, loaded.tokenizer
    if is_seq2seq(model):
        src, tgt = mt_ids(o, model, tokenizer, log)
        return model, (torch.tensor([src]), torch.tensor([tgt]))
    return model, torch.tensor([lm_ids(o, loaded, log)])


def trace_model(what: TracePreset | ModelText, *, log: Log | None = None):
    """Build or load the model, make its inputs, run it once under hooks; returns the
    :class:`~attnkit.viz.trace.Trace` (``.format(depth)`` for the table, ``.to_json(depth)``)."""
    from attnkit.viz.trace import trace

    if not isinstance(what, (TracePreset, ModelText)):
        raise ValueError(f"trace_model expects a TracePreset or a ModelText, got {type(what).__name__}")
    device = what.resolved_device()  # a device this machine lacks fails before any model is built
    model, inputs = _preset_inputs(what) if isinstance(what, TracePreset) else _text_inputs(what, default_log(log))
    model = model.to(device)
    inputs = tuple(t.to(device) for t in inputs) if isinstance(inputs, tuple) else inputs.to(device)
    return trace(model, inputs)
