"""``attnkit train lm`` and ``attnkit train mt``: the one training loop, driven from the command line.

Every flag left unset takes the recipe default below (or, with ``--resume``, the value the run was started
with: a resumed run may only change ``--steps`` and ``--max-time``).
"""

from __future__ import annotations

import argparse
import json

from attnkit.cli.flags import add_run_flags, parse_overrides, say, train_flag_values, world_size

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
    add_run_flags(lm)
    lm.set_defaults(func=run_lm)

    from attnkit.cli import train_mt

    train_mt.register(tsub)


def describe_batch(cfg) -> str:
    """``global batch 24 = 12 per process x 2 processes; x 2 accumulation = 48 sequences per update``."""
    n = world_size()
    return (f"global batch {cfg.batch_size} = {cfg.batch_size // n if cfg.batch_size % n == 0 else cfg.batch_size / n} "
            f"per process x {n} process{'es' if n > 1 else ''}; x {cfg.grad_accum} accumulation = "
            f"{cfg.batch_size * cfg.grad_accum} per update" + ("; FSDP2" if cfg.fsdp else "; DDP" if n > 1 else ""))


def run_lm(args: argparse.Namespace) -> int:
    import torch

    from attnkit.data.lm_dataset import prepare_lm_data
    from attnkit.data.tokenizer import tokenizer_from_dict
    from attnkit.models.builders import build_model
    from attnkit.models.configs import GPTConfig, config_from_dict
    from attnkit.models.params import count_parameters
    from attnkit.models.presets import get_preset
    from attnkit.training import LMTask, Trainer, seed_everything
    from attnkit.training.config import resolve_train_config
    from attnkit.recipes import LM_DEFAULTS
    from attnkit.training.runs import default_run_folder, read_saved_run

    saved = read_saved_run(args.out) if args.resume else None
    extra_saved = (saved or {}).get("extra", {})
    data = args.data or extra_saved.get("data") or "shakespeare"
    preset = args.preset or extra_saved.get("preset") or "char-small"
    if saved is not None and args.data is not None and args.data != extra_saved.get("data"):
        raise ValueError(f"--resume: the run was trained on --data {extra_saved.get('data')!r}, got {args.data!r}")
    cfg = resolve_train_config(LM_DEFAULTS, saved.get("train_config") if saved else None, train_flag_values(args))

    if saved is not None:
        tokenizer = tokenizer_from_dict(extra_saved["tokenizer"])
        model_config = config_from_dict(saved["model_config"])
        overrides = parse_overrides(args.set)
        if overrides:
            model_config = model_config.replace(**overrides)  # the trainer refuses real changes by name
    else:
        tokenizer = args.tokenizer or "char"
        model_config = None
        # a bad --preset or --set fails now, before the corpus is read and a tokenizer trained
        if not isinstance(get_preset(preset), GPTConfig):
            raise ValueError(f"train lm needs a decoder-only (GPT) preset, {preset!r} is an encoder-decoder")
        get_preset(preset, block_size=cfg.block_size, **parse_overrides(args.set))
    lm = prepare_lm_data(data, tokenizer, block_size=cfg.block_size, vocab_size=args.vocab_size)
    if model_config is None:
        overrides = {"vocab_size": lm.tokenizer.vocab_size, "block_size": cfg.block_size}
        overrides.update(parse_overrides(args.set))
        model_config = get_preset(preset, **overrides)
    out = args.out or default_run_folder("lm", data, preset)

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
