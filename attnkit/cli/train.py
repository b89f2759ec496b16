"""``attnkit train lm`` and ``attnkit train mt``: the one training loop, driven from the command line.

Every flag left unset takes the recipe default below (or, with ``--resume``, the value the run was started
with: a resumed run may only change ``--steps`` and ``--max-time``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from attnkit.cli.flags import add_device_flags, autocast_value, say, world_size

# Defaults of the language-modelling recipe (tuned for the char-small preset on 2 CPU cores;
# see benchmarks/RESULTS.md for how they were chosen).
LM_DEFAULTS: dict[str, Any] = dict(
    batch_size=24, block_size=128, grad_accum=1, lr=4e-3, min_lr=1e-4, warmup_steps=50, schedule="cosine",
    weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0, eval_every=200, eval_batches=20, log_every=10, ckpt_every=200,
    keep_last=2, seed=1337,
)

# TrainConfig fields exposed as flags: (flag, field, type, help)
_TRAIN_FLAGS = [
    ("--batch-size", "batch_size", int, "sequences per micro-batch and process (under torchrun the global batch "
                                        "is this x the number of processes)"),
    ("--grad-accum", "grad_accum", int, "micro-batches per optimizer update"),
    ("--lr", "lr", float, "peak learning rate (inverse_sqrt: scale factor)"),
    ("--min-lr", "min_lr", float, "final learning rate of the cosine schedule"),
    ("--warmup-steps", "warmup_steps", int, "linear warmup steps"),
    ("--schedule", "schedule", str, "cosine | inverse_sqrt | constant"),
    ("--weight-decay", "weight_decay", float, "AdamW weight decay (matrices only)"),
    ("--grad-clip", "grad_clip", float, "max global gradient norm (0 = off)"),
    ("--eval-every", "eval_every", int, "evaluate every N steps"),
    ("--eval-batches", "eval_batches", int, "validation batches per evaluation"),
    ("--log-every", "log_every", int, "log training metrics every N steps"),
    ("--ckpt-every", "ckpt_every", int, "checkpoint every N steps"),
    ("--keep-last", "keep_last", int, "keep the last K step checkpoints (plus best/)"),
    ("--seed", "seed", int, "random seed (init, dropout, data order)"),
]


def _add_common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("length of the run")
    g.add_argument("--steps", type=int, default=None, help="optimizer updates to run")
    g.add_argument("--max-time", type=float, default=None, metavar="MIN",
                   help="wall-clock budget in minutes (with --steps, whichever comes first)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default runs/<data>-<preset>-<time>); "
                   "an existing run is never overwritten: pass --resume to continue it")
    p.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
    p.add_argument("--preset", default=None, help="model preset (see `attnkit params --list`)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a model config field, e.g. --set n_layer=6 --set dropout=0.2 (repeatable)")
    t = p.add_argument_group("training")
    for flag, field, typ, help_ in _TRAIN_FLAGS:
        t.add_argument(flag, dest=field, type=typ, default=None, help=help_)
    t.add_argument("--compile", action="store_true", default=None, help="opt in to torch.compile")
    add_device_flags(t, training=True)
    t.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a language model (lm) or a translator (mt)",
                       description="Train with attnkit's one training loop (AdamW, warmup + cosine or inverse-sqrt "
                                   "schedule, clipping, accumulation, evaluation, safetensors checkpoints, exact "
                                   "--resume, metrics CSV/JSONL and loss.png in the run folder).")
    tsub = p.add_subparsers(dest="train_command", metavar="TASK", required=True)

    lm = tsub.add_parser("lm", help="train a decoder-only language model",
                         description="Train a GPT (default preset char-small) on a text corpus: a recipe name "
                                     "(shakespeare, fortunes) or a local UTF-8 file or folder of .txt files.")
    lm.add_argument("--data", default=None, help="recipe name or path (default shakespeare)")
    lm.add_argument("--tokenizer", default=None,
                    help="char (default), bpe (trained on the data, see --vocab-size), gpt2, or a tokenizer JSON file")
    lm.add_argument("--vocab-size", type=int, default=None, help="BPE vocabulary size (with --tokenizer bpe)")
    lm.add_argument("--block-size", dest="block_size", type=int, default=None, help="context length T")
    _add_common(lm)
    lm.set_defaults(func=run_lm)

    from attnkit.cli import train_mt

    train_mt.register(tsub, _add_common)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["n_layer=6", "dropout=0.2", "bias=false"]`` → ``{"n_layer": 6, "dropout": 0.2, "bias": False}``."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set expects FIELD=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = {"true": True, "false": False, "none": None}.get(raw.lower(), raw)
        out[key.strip()] = value
    return out


def train_config_from_args(args: argparse.Namespace, defaults: dict[str, Any], saved: dict[str, Any] | None):
    """TrainConfig = recipe defaults, then the saved run's config (on resume), then the flags given.

    Fails first (before any data is read) on a ``--device`` / ``--autocast`` this machine cannot run."""
    from attnkit.cli.flags import resolve_device_flag
    from attnkit.training import TrainConfig
    from attnkit.training.device import check_autocast

    device = resolve_device_flag(args)
    check_autocast(autocast_value(args), device)

    values = dict(defaults)
    if saved is not None:
        values.update(saved)
    for _, field, _, _ in _TRAIN_FLAGS:
        v = getattr(args, field, None)
        if v is not None:
            values[field] = v
    for field in ("steps", "max_time", "block_size", "compile"):
        v = getattr(args, field, None)
        if v is not None:
            values[field] = v
    if saved is None and args.steps is None and args.max_time is None:
        values["steps"] = 2000
    if args.steps is not None and args.max_time is None and saved is None:
        values["max_time"] = None
    if args.max_time is not None and args.steps is None:
        values["steps"] = None
    if values.get("grad_clip") == 0:
        values["grad_clip"] = None
    if args.batch_size is not None:  # per process -> the global micro-batch the config (and checkpoint) holds
        values["batch_size"] = args.batch_size * world_size()
    values["device"] = getattr(args, "device", None) or "auto"  # device-free checkpoints: may change on resume
    if getattr(args, "autocast", None) is not None:
        values["autocast"] = autocast_value(args)
    if getattr(args, "fsdp", None):
        values["fsdp"] = True
    return TrainConfig.from_dict(values)


def describe_batch(cfg) -> str:
    """``global batch 24 = 12 per process x 2 processes; x 2 accumulation = 48 sequences per update``."""
    n = world_size()
    return (f"global batch {cfg.batch_size} = {cfg.batch_size // n if cfg.batch_size % n == 0 else cfg.batch_size / n} "
            f"per process x {n} process{'es' if n > 1 else ''}; x {cfg.grad_accum} accumulation = "
            f"{cfg.batch_size * cfg.grad_accum} per update" + ("; FSDP2" if cfg.fsdp else "; DDP" if n > 1 else ""))


def default_out(kind: str, data: str, preset: str) -> Path:
    import time

    if world_size() > 1:  # the default name holds the start time, which the processes need not agree on
        raise ValueError("under torchrun pass --out: every process must write the same run folder")
    stem = Path(str(data)).stem if any(c in str(data) for c in "/.") else str(data)
    return Path("runs") / f"{kind}-{stem}-{preset}-{time.strftime('%Y%m%d-%H%M%S')}"


def read_saved_run(out: Path) -> dict[str, Any]:
    """The latest checkpoint's state of the run in ``out`` (for --resume)."""
    from attnkit.training.checkpoint import latest_checkpoint, read_checkpoint_state

    if out is None:
        raise ValueError("--resume needs --out pointing at the run folder to continue")
    latest = latest_checkpoint(Path(out) / "checkpoints")
    if latest is None:
        raise FileNotFoundError(f"--resume: {out} holds no checkpoint to resume from")
    return read_checkpoint_state(latest)


def run_lm(args: argparse.Namespace) -> int:
    import torch

    from attnkit.data.lm_dataset import prepare_lm_data
    from attnkit.data.tokenizer import tokenizer_from_dict
    from attnkit.models.builders import build_model
    from attnkit.models.configs import GPTConfig, config_from_dict
    from attnkit.models.params import count_parameters
    from attnkit.models.presets import get_preset
    from attnkit.training import LMTask, Trainer, seed_everything

    saved = read_saved_run(args.out) if args.resume else None
    extra_saved = (saved or {}).get("extra", {})
    data = args.data or extra_saved.get("data") or "shakespeare"
    preset = args.preset or extra_saved.get("preset") or "char-small"
    if saved is not None and args.data is not None and args.data != extra_saved.get("data"):
        raise ValueError(f"--resume: the run was trained on --data {extra_saved.get('data')!r}, got {args.data!r}")
    cfg = train_config_from_args(args, LM_DEFAULTS, saved.get("train_config") if saved else None)

    if saved is not None:
        tokenizer = tokenizer_from_dict(extra_saved["tokenizer"])
        model_config = config_from_dict(saved["model_config"])
        overrides = parse_overrides(args.set)
        if overrides:
            model_config = model_config.replace(**overrides)  # the trainer refuses real changes by name
    else:
        tokenizer = args.tokenizer or "char"
        model_config = None
    lm = prepare_lm_data(data, tokenizer, block_size=cfg.block_size, vocab_size=args.vocab_size)
    if model_config is None:
        overrides = {"vocab_size": lm.tokenizer.vocab_size, "block_size": cfg.block_size}
        overrides.update(parse_overrides(args.set))
        model_config = get_preset(preset, **overrides)
        if not isinstance(model_config, GPTConfig):
            raise ValueError(f"train lm needs a decoder-only (GPT) preset, {preset!r} is an encoder-decoder")
    out = args.out or default_out("lm", data, preset)

    seed_everything(cfg.seed)  # reproducible initialisation
    model = build_model(model_config)
    task = LMTask(lm.train, lm.valid, block_size=cfg.block_size, batch_size=cfg.batch_size, seed=cfg.seed)
    say(f"data {data}: {lm.train.numel():,} train / {lm.valid.numel():,} valid tokens, "
        f"tokenizer {lm.tokenizer.type} (vocab {lm.tokenizer.vocab_size:,})")
    say(f"model {preset}: {count_parameters(model):,} parameters; threads {torch.get_num_threads()}; "
        f"run folder {out}")
    say(describe_batch(cfg))
    extra = {"kind": "lm", "data": str(data), "preset": preset, "tokenizer": lm.tokenizer.to_dict(),
             "source": json.loads(json.dumps(lm.source_info, default=str))}
    trainer = Trainer(model, task, cfg, out, model_config=model_config, extra=extra, resume=args.resume,
                      progress=not args.no_progress)
    summary = trainer.fit()
    vl = summary.get("valid_loss")
    say(f"done: {summary['steps']} steps in {summary['elapsed']:.0f} s ({summary['stopped_by']}); "
        f"train loss {summary['train_loss']:.4f}" + (f", valid loss {vl:.4f}" if vl is not None else "")
        + f"; run folder {out}")
    return 0
