"""Flags shared by several commands, and how parsed flags become :mod:`attnkit.api` options (:func:`options_from`:
each flag's value goes to the field of the same name). The run and training flags, decoding and sampling flags,
``--device`` / ``--autocast`` / ``--fsdp`` (their meaning lives in :mod:`attnkit.training.device`). Only argparse
lives here (no torch: ``--help`` stays instant); defaults come from :mod:`attnkit.recipes`.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from attnkit.models.configs import parse_overrides
from attnkit.recipes import DEFAULT_BATCH_SIZE, DEFAULT_BEAM, DEFAULT_LENGTH_PENALTY

__all__ = ["TRAIN_FLAGS", "add_run_flags", "options_from", "runs", "command_group", "add_translator_flag",
           "add_model_source", "add_decoding_flags", "add_sampling_flags", "add_device_flags", "DEFAULT_BATCH_SIZE"]

DEVICE_HELP = "auto (CUDA when available, else CPU), cpu, cuda, cuda:N or mps"


def command_group(sub: argparse._SubParsersAction, name: str, *, help: str, description: str,
                  metavar: str) -> argparse._SubParsersAction:
    """A command with sub-commands (``attnkit train lm|mt``, ``attnkit viz ...``): its parser and its sub-parsers."""
    p = sub.add_parser(name, help=help, description=description)
    return p.add_subparsers(dest=f"{name}_command", metavar=metavar, required=True)


def add_translator_flag(p: argparse.ArgumentParser) -> None:
    """``--ckpt``: the translator's run folder (``checkpoints/best``) or a checkpoint folder (``translate``,
    ``eval mt``)."""
    p.add_argument("--ckpt", type=Path, required=True,
                   help="run folder (uses checkpoints/best) or a checkpoint folder (e.g. checkpoints/averaged)")


def add_model_source(p: argparse.ArgumentParser) -> None:
    """``--ckpt`` (an attnkit run or checkpoint folder) or ``--model`` (a pretrained model), exactly one."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--ckpt", help="run folder (its checkpoints/best) or checkpoint folder (`train`, `finetune`)")
    src.add_argument("--model", help="pretrained model name (smollm2-135m-instruct), .gguf file or Hugging Face folder")


def add_device_flags(p: argparse.ArgumentParser | Any, *, training: bool = False, autocast: bool = True) -> None:
    """``--device`` and ``--autocast`` (and ``--fsdp`` for training commands) on parser or group ``p``."""
    p.add_argument("--device", default=None, metavar="DEVICE", help=f"{DEVICE_HELP} (default auto)")
    if autocast:
        p.add_argument("--autocast", default=None, choices=("bf16", "fp16", "off"), help="mixed precision: bf16 "
                       "(CPU and GPU) or fp16 (GPU; training adds a gradient scaler); default off")
    if training:
        p.add_argument("--fsdp", action="store_true", default=None, help="shard parameters, gradients and "
                       "optimizer state over the torchrun processes (FSDP2) instead of replicating them (DDP)")


# TrainConfig fields exposed as flags: (flag, field, type, help)
TRAIN_FLAGS = [
    ("--batch-size", "batch_size", int, "sequences per micro-batch and process (under torchrun the global batch "
                                        "is this x the number of processes)"),
    ("--grad-accum", "grad_accum", int, "micro-batches per optimizer update"),
    ("--lr", "lr", float, "peak learning rate (inverse_sqrt: scale factor)"),
    ("--min-lr", "min_lr", float, "final learning rate of the cosine schedule"),
    ("--warmup-steps", "warmup_steps", int, "linear warmup steps (default: the recipe's, at most a tenth of "
                                            "--steps, or ended by a tenth of --max-time alone; must be <= --steps "
                                            "for the cosine schedule)"),
    ("--schedule", "schedule", str, "cosine | inverse_sqrt | constant"),
    ("--weight-decay", "weight_decay", float, "AdamW weight decay (matrices only)"),
    ("--optimizer", "optimizer", str, "adamw | muon (Muon on the hidden matrices, AdamW on embeddings, output "
                                      "layer, biases and norms; one --lr for both; not with --lora)"),
    ("--muon-ns-steps", "muon_ns_steps", int, "Newton-Schulz steps per Muon update (default 5; fewer is cheaper)"),
    ("--grad-clip", "grad_clip", float, "max global gradient norm (0 = off)"),
    ("--eval-every", "eval_every", int, "evaluate every N steps"),
    ("--eval-batches", "eval_batches", int, "validation batches per evaluation"),
    ("--log-every", "log_every", int, "log training metrics every N steps (also how often a GPU's numbers are read back)"),
    ("--ckpt-every", "ckpt_every", int, "checkpoint every N steps"),
    ("--keep-last", "keep_last", int, "keep the last K step checkpoints (plus best/)"),
    ("--seed", "seed", int, "random seed (init, dropout, data order)")]


def add_run_flags(p: argparse.ArgumentParser, *, skip: tuple[str, ...] = ()) -> None:
    """Length of the run, run folder, resume, preset and ``--set``, and each :data:`TRAIN_FLAGS` flag but ``skip``."""
    g = p.add_argument_group("length of the run")
    g.add_argument("--steps", type=int, default=None, help="optimizer updates to run")
    g.add_argument("--max-time", type=float, default=None, metavar="MIN",
                   help="wall-clock budget in minutes (with --steps, whichever comes first)")
    g.add_argument("--stop-at-loss", type=float, default=None, metavar="X",
                   help="train lm / train mt: also stop at the first evaluation whose validation loss is <= X "
                        "(summary.json: stopped_by \"target\", the step and seconds when it was reached)")
    g.add_argument("--schedule-steps", type=int, default=None, metavar="N",
                   help="train lm / train mt: the cosine schedule decays over N updates (default --steps, or the "
                        "--max-time budget when it is given alone); a time budget that ends the run first does "
                        "not stretch it, a longer run goes on at --min-lr")
    p.add_argument("--out", default=None, help="run folder (train: default runs/<lm|mt>-<data>-"
                   "<preset>-<time>; finetune: required); an existing run is never overwritten: pass --resume")
    p.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
    p.add_argument("--preset", default=None, help="train lm / train mt: model preset (see `attnkit params --list`)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a model config field, e.g. --set dropout=0.2 (repeatable; finetune: dropout only)")
    t = p.add_argument_group("training")
    for flag, field, typ, help_ in (row for row in TRAIN_FLAGS if row[0] not in skip):
        t.add_argument(flag, dest=field, type=typ, default=None, help=help_)
    t.add_argument("--compile", action="store_true", default=None, help="torch.compile the model with the loss")
    t.add_argument("--activation-checkpointing", action="store_true", default=None,
                   help="recompute each block's activations in the backward pass: less memory, slower updates")
    t.add_argument("--loss-chunks", type=int, default=None, metavar="K", help="cross-entropy over K row chunks, "
                   "each chunk's logits recomputed in the backward pass instead of kept: less memory (0 = off)")
    t.add_argument("--cuda-graphs", action="store_true", default=None,
                   help="replay each batch shape's forward and backward as a recorded CUDA graph (one CUDA process; "
                        "train mt then pads batches to a few fixed shapes): far fewer host launches per update")
    add_device_flags(t, training=True)
    t.add_argument("--no-progress", action="store_true",
                   help="no progress bar; the log lines (evaluations, sample translations) still print")


# run flags that not every training command takes: given to one whose options lack the field, they are refused
_NOT_EVERYWHERE = {"stop_at_loss": "--stop-at-loss", "schedule_steps": "--schedule-steps"}


def options_from(cls: type, args: argparse.Namespace, **values: Any) -> Any:
    """An :mod:`attnkit.api` options dataclass from the parsed flags: every field whose flag has the same name
    (``--max-time`` is ``max_time``), then ``values``. ``--set`` becomes ``overrides`` and ``--no-progress``
    ``progress`` wherever the options have them. A run flag the options do not take (``--stop-at-loss`` for
    ``finetune``) raises ``ValueError`` instead of being ignored."""
    names = {f.name for f in dataclasses.fields(cls)}
    for name, flag in _NOT_EVERYWHERE.items():
        if getattr(args, name, None) is not None and name not in names:
            raise ValueError(f"{flag} is not an option of this command (it is one of train lm and train mt), "
                             f"got {flag} {getattr(args, name)}")
    given = {name: getattr(args, name) for name in names if hasattr(args, name)}
    if "overrides" in names and hasattr(args, "set"):
        given["overrides"] = parse_overrides(args.set)
    if "progress" in names and hasattr(args, "no_progress"):
        given["progress"] = not args.no_progress
    given.update(values)
    return cls(**given)


def runs(run: Any, options: type) -> Any:
    """The ``func`` of a training command: build ``options`` from the flags and call ``run`` with them (its status
    lines go to stderr; the exit code is 0 when it returns)."""
    def func(args: argparse.Namespace) -> int:
        run(options_from(options, args))
        return 0

    return func


def add_decoding_flags(p: argparse.ArgumentParser) -> None:
    """``--beam``, ``--length-penalty``, ``--max-len-a``, ``--max-len-b`` (``translate`` and ``eval mt``)."""
    g = p.add_argument_group("decoding")
    g.add_argument("--beam", type=int, default=DEFAULT_BEAM, help="beam size (1 = greedy; default %(default)s)")
    g.add_argument("--length-penalty", type=float, default=DEFAULT_LENGTH_PENALTY,
                   help="alpha of the GNMT length norm ((5 + len) / 6) ** alpha (0 = none; default %(default)s)")
    g.add_argument("--max-len-a", type=float, default=1.2, help="length limit a * src_len + b: a (default %(default)s)")
    g.add_argument("--max-len-b", type=float, default=10, help="length limit a * src_len + b: b (default %(default)s)")


def add_sampling_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--max-new-tokens", type=int, default=200, help="most tokens to generate (default 200)")
    g.add_argument("--greedy", action="store_true", help="argmax decoding (ignores temperature/top-k/top-p/min-p)")
    g.add_argument("--temperature", type=float, default=0.8, help="softmax temperature (default 0.8)")
    g.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    g.add_argument("--top-p", type=float, default=None, help="nucleus sampling: smallest set with mass >= p")
    g.add_argument("--min-p", type=float, default=None, help="keep the tokens with probability >= p x the top one's")
    g.add_argument("--repetition-penalty", type=float, default=1.0, help="CTRL repetition penalty (1.0 = off)")
    g.add_argument("--no-repeat-ngram-size", type=int, default=0, metavar="N", help="never repeat an N-gram (0 = off)")
    g.add_argument("--stop", action="append", metavar="TEXT", help="stop once the output contains TEXT (repeatable)")
    g.add_argument("--seed", type=int, default=None, help="seed for reproducible sampling")
    g.add_argument("--num-samples", type=int, default=1, help="how many samples to draw (default 1)")
    g.add_argument("--no-cache", action="store_true", help="no KV cache: recompute the whole context each step (slow)")
    g.add_argument("--no-stream", action="store_true", help="print each sample when it is complete")
    g.add_argument("--compile", action="store_true", help="run the decoding steps through torch.compile: faster per "
                   "token, after a one-time compilation of up to ~30 s (needs the KV cache and a C++ compiler)")
