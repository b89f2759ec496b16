"""``attnkit finetune``: continue training a pretrained decoder on your text, fully or with LoRA adapters.

    attnkit finetune --from smollm2-135m-instruct --data fortunes --lora --max-time 20 --out runs/ft
    attnkit sample --ckpt runs/ft --prompt "Q: Why" --max-new-tokens 60

It is the one training loop of ``attnkit train lm`` (``Trainer`` + ``LMTask``, the same flags) with four
differences:

* the model and its tokenizer come from ``--from``: a named pretrained model (``smollm2-135m-instruct``), a
  ``.gguf`` file, an attnkit run/checkpoint folder, or a Hugging Face folder (``config.json`` +
  ``model.safetensors``, tokenizer from ``tokenizer.json`` or ``--tokenizer``). Pickled weights are refused.
* the corpus is encoded with the model's own tokenizer. Text made of documents -- fortune files, whose
  entries are separated by lines holding only ``%``, or (``--documents blank-line``) paragraphs separated by
  blank lines -- is split into its documents and each one is followed by the tokenizer's end-of-sequence token
  (the ``%`` lines themselves are dropped), so the model learns where a text ends and ``attnkit sample``
  stops there.
* a low learning rate by default (5e-5 full, 1e-3 LoRA), no weight decay, block size 256.
* ``--lora``: the pretrained weights stay frozen and low-rank adapters train (:mod:`attnkit.modules.lora`).

Checkpoints (see :func:`attnkit.training.lora_run.finalize_lora_run`): with ``--lora`` the step checkpoints hold the frozen weights plus
the adapters (``...qkv_proj.lora_A`` / ``lora_B``), which is what an exact ``--resume`` needs; when the run ends
(or is interrupted), ``checkpoints/best`` is rewritten with the adapters merged into the weights, so it is a
plain GPT checkpoint that ``attnkit sample --ckpt DIR`` (and ``finetune --from DIR``) loads like any other.
Every checkpoint's ``extra`` holds ``kind: "lm"``, the tokenizer, the chat template (if the model has one),
the data and the LoRA settings.
"""

from __future__ import annotations

import argparse
from typing import Any

from attnkit.cli.flags import add_run_flags, is_main_process, parse_overrides, say, train_flag_values
from attnkit.data.documents import DOCUMENT_MODES
from attnkit.recipes import FT_DEFAULTS, LORA_LR



def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "finetune", help="fine-tune a pretrained decoder (full or LoRA) on a text corpus",
        description="Fine-tune a pretrained GPT/Llama-style model on text with attnkit's training loop. The model's "
                    "own tokenizer encodes the data; documents (fortune entries, or blank-line paragraphs) end with "
                    "its end-of-sequence token. With --lora only low-rank adapters train and the best checkpoint "
                    "holds them merged into the weights at the end. Sample the result with "
                    "`attnkit sample --ckpt OUT`.")
    p.add_argument("--from", dest="source", default=None, metavar="MODEL",
                   help="smollm2-135m-instruct, a .gguf file, an attnkit run/checkpoint folder, or a Hugging Face "
                        "folder (config.json + model.safetensors); not needed with --resume")
    p.add_argument("--data", default=None, help="recipe name (fortunes, shakespeare) or a UTF-8 text file/folder")
    p.add_argument("--documents", choices=DOCUMENT_MODES, default=None,
                   help="how the text splits into documents, each followed by the EOS token: fortune ('%%' lines), "
                        "blank-line (paragraphs), none (one stream); auto (default) = fortune if the text has "
                        "lines holding only '%%', else none")
    p.add_argument("--tokenizer", default=None, metavar="FILE",
                   help="tokenizer for a Hugging Face folder without tokenizer.json: an attnkit tokenizer JSON or "
                        "a Hugging Face tokenizer.json")
    p.add_argument("--block-size", dest="block_size", type=int, default=None, help="context length T (default 256)")
    lo = p.add_argument_group("LoRA")
    lo.add_argument("--lora", action="store_true", help="train low-rank adapters instead of all weights")
    lo.add_argument("--lora-rank", type=int, default=None, help="adapter rank r (default 8)")
    lo.add_argument("--lora-alpha", type=float, default=None, help="adapter scale alpha; update = alpha/r * B A "
                                                                   "(default 16)")
    lo.add_argument("--lora-dropout", type=float, default=None, help="dropout on the adapter input (default 0)")
    lo.add_argument("--lora-targets", nargs="+", default=None, metavar="NAME",
                    help="Linear layers to adapt by name (default qkv_proj out_proj; also w_in w_gate w_out)")
    add_run_flags(p)
    p.set_defaults(func=run)


# -------------------------------------------------------------------------------------------------------
# loading the model to fine-tune
# -------------------------------------------------------------------------------------------------------

# -------------------------------------------------------------------------------------------------------
# LoRA runs: build, and merge the best checkpoint at the end
# -------------------------------------------------------------------------------------------------------

def _lora_settings(args: argparse.Namespace, saved: dict[str, Any] | None, resuming: bool) -> dict[str, Any] | None:
    """The run's LoRA settings (None for full fine-tuning). On resume they come from the checkpoint and any
    LoRA flag given must agree with them."""
    given = {"rank": args.lora_rank, "alpha": args.lora_alpha, "dropout": args.lora_dropout,
             "targets": None if args.lora_targets is None else list(args.lora_targets)}
    if resuming:
        if saved is None:
            if args.lora or any(v is not None for v in given.values()):
                raise ValueError("--resume: the run is a full fine-tune; drop the --lora flags")
            return None
        saved = {k: saved[k] for k in ("rank", "alpha", "dropout", "targets")}
        for key, value in given.items():
            if value is not None and value != saved[key]:
                raise ValueError(f"--resume: --lora-{key} must stay {saved[key]!r} (the run's), got {value!r}")
        return saved
    if not args.lora:
        used = [f"--lora-{k}" for k, v in given.items() if v is not None]
        if used:
            raise ValueError(f"{', '.join(used)} only apply with --lora")
        return None
    from attnkit.modules.lora import DEFAULT_TARGETS

    return {"rank": 8 if args.lora_rank is None else args.lora_rank,
            "alpha": 16.0 if args.lora_alpha is None else float(args.lora_alpha),
            "dropout": 0.0 if args.lora_dropout is None else float(args.lora_dropout),
            "targets": list(args.lora_targets or DEFAULT_TARGETS)}


# -------------------------------------------------------------------------------------------------------
# the command
# -------------------------------------------------------------------------------------------------------

def _defaults(args: argparse.Namespace, lora: dict | None) -> dict[str, Any]:
    d = dict(FT_DEFAULTS)
    if lora is not None:
        d.update(lr=LORA_LR, min_lr=LORA_LR / 10)
    if args.lr is not None and args.min_lr is None:
        d["min_lr"] = min(d["min_lr"], args.lr / 10)
    return d


def _run_inputs(args: argparse.Namespace, saved: dict | None) -> tuple[dict | None, str, str, str]:
    """``(lora settings or None, data, documents, source)``: the resumed run's, checked against the flags,
    or the flags', checked for completeness."""
    if saved is not None:
        extra_saved = saved.get("extra", {})
        if extra_saved.get("task") != "finetune":
            raise ValueError(f"--resume: {args.out} is not a finetune run (continue it with the command that "
                             f"started it)")
        for flag, key, value in (("--from", "from", args.source), ("--data", "data", args.data),
                                 ("--documents", "documents", None if args.documents == "auto" else args.documents)):
            if value is not None and value != extra_saved.get(key):
                raise ValueError(f"--resume: the run used {flag} {extra_saved.get(key)!r}, got {value!r}")
        lora = _lora_settings(args, extra_saved.get("lora"), resuming=True)
        return lora, extra_saved["data"], extra_saved.get("documents", "none"), extra_saved["from"]
    if args.source is None or args.data is None:
        raise ValueError("finetune needs --from MODEL and --data DATA (or --resume --out DIR)")
    if args.out is None:
        raise ValueError("finetune needs --out DIR (the run folder)")
    if args.steps is None and args.max_time is None:
        raise ValueError("finetune needs a length: --steps N or --max-time MIN (a 135M-parameter model does "
                         "a few hundred steps an hour on a laptop CPU)")
    return _lora_settings(args, None, resuming=False), args.data, args.documents or "auto", args.source


def _source_model(args: argparse.Namespace, saved: dict | None, source: str, overrides: dict, seed: int):
    """``(model, model_config, tokenizer, chat_template, description)`` of the model to fine-tune.

    Resuming, everything comes back from the checkpoint: the architecture (the trainer loads the weights into
    the fresh model), the tokenizer, the chat template. Otherwise ``--from`` is loaded (a decoder-only GPT).
    """
    from attnkit.data.tokenizer import tokenizer_from_dict
    from attnkit.interop.load import load_model
    from attnkit.models.builders import build_model
    from attnkit.models.configs import GPTConfig, config_from_dict
    from attnkit.training import seed_everything

    if saved is not None:
        extra_saved = saved.get("extra", {})
        tokenizer = tokenizer_from_dict(extra_saved["tokenizer"])
        model_config = config_from_dict(saved["model_config"])
        if overrides:
            model_config = model_config.replace(**overrides)  # the trainer refuses a real change by name
        seed_everything(seed)
        model = build_model(model_config)  # the trainer loads the latest checkpoint's weights into it
        return model, model_config, tokenizer, extra_saved.get("chat_template"), extra_saved.get("from_description", source)
    loaded = load_model(source, tokenizer_file=args.tokenizer)
    model = loaded.model
    model_config = getattr(model, "config", None)
    if not isinstance(model_config, GPTConfig):
        raise ValueError(f"--from {source}: finetune needs a decoder-only GPT, got {type(model).__name__}")
    if overrides:  # dropout modules hold their p: rebuild the module tree around the loaded weights
        model_config = model_config.replace(**overrides)
        fresh = build_model(model_config)
        fresh.load_state_dict(model.state_dict())
        model = fresh
    return model, model_config, loaded.tokenizer, loaded.chat_template, loaded.description


def run(args: argparse.Namespace) -> int:
    import torch

    from attnkit.models.params import count_parameters
    from attnkit.training import LMTask, Trainer, seed_everything

    if args.preset is not None:
        raise ValueError("finetune takes the architecture from --from; --preset does not apply")
    overrides = parse_overrides(args.set)
    bad = sorted(set(overrides) - {"dropout"})
    if bad:
        raise ValueError(f"finetune can only --set dropout (the architecture is the pretrained one's), got {bad}")

    from attnkit.data.documents import prepare_finetune_data
    from attnkit.training.config import resolve_train_config
    from attnkit.training.lora_run import add_lora, finalize_lora_run
    from attnkit.training.runs import read_saved_run

    saved = read_saved_run(args.out) if args.resume else None
    lora, data, documents, source = _run_inputs(args, saved)
    cfg = resolve_train_config(_defaults(args, lora), saved.get("train_config") if saved else None,
                               train_flag_values(args), time_only_schedule="constant")
    if cfg.fsdp and lora is not None:
        raise ValueError("--fsdp shards whole models; LoRA trains a few small adapters: use DDP (torchrun "
                         "without --fsdp) for --lora")

    model, model_config, tokenizer, chat_template, what = _source_model(args, saved, source, overrides, cfg.seed)
    if model_config.position == "learned" and cfg.block_size > model_config.block_size:
        raise ValueError(f"--block-size must be <= the model's block_size = {model_config.block_size} "
                         f"(learned positions), got {cfg.block_size}")
    if tokenizer.vocab_size > model_config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model only "
                         f"{model_config.vocab_size} embeddings: they do not belong together")

    train_ids, valid_ids, data_info = prepare_finetune_data(data, tokenizer, documents)
    total = count_parameters(model)
    seed_everything(cfg.seed)  # the adapters' random A matrices are part of the run's reproducible start
    trainable = add_lora(model, lora) if lora is not None else total
    model.train()
    task = LMTask(train_ids, valid_ids, block_size=cfg.block_size, batch_size=cfg.batch_size, seed=cfg.seed)
    say(f"model {what}: {total:,} parameters, {trainable:,} trainable"
        + (f" (LoRA r={lora['rank']} alpha={lora['alpha']:g} on {', '.join(lora['targets'])})" if lora else "")
        + f"; threads {torch.get_num_threads()}")
    say(f"data {data}: {train_ids.numel():,} train / {valid_ids.numel():,} valid tokens "
        f"(documents: {data_info['documents']}); run folder {args.out}")

    extra: dict[str, Any] = {"kind": "lm", "task": "finetune", "from": str(source), "from_description": what,
                             "data": str(data), "documents": data_info["documents"] if saved is None else documents,
                             "tokenizer": tokenizer.to_dict(), "source": data_info["source"]}
    if chat_template:
        extra["chat_template"] = chat_template
    if lora is not None:
        extra["lora"] = dict(lora, merged=False)
    trainer = Trainer(model, task, cfg, args.out, model_config=model_config, extra=extra, resume=args.resume,
                      progress=not args.no_progress)
    try:
        summary = trainer.fit()
    finally:
        if lora is not None and is_main_process():  # also after Ctrl-C: leave a best/ that `attnkit sample` can load
            finalize_lora_run(args.out)
    vl = summary.get("valid_loss")
    say(f"done: {summary['steps']} steps in {summary['elapsed']:.0f} s ({summary['stopped_by']}); "
        f"train loss {summary['train_loss']:.4f}" + (f", valid loss {vl:.4f}" if vl is not None else "")
        + f"; sample with: attnkit sample --ckpt {args.out}")
    return 0
