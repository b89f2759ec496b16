"""``attnkit train mt``: train an encoder-decoder translator with the shared training loop.

    attnkit train mt --data de-en --max-time 15 --out runs/de-en

What happens, in order (``--preset`` and ``--set`` are checked first, so that a typo fails at once and not after
the minutes that reading the data and training a BPE take on the CPU):

1. ``--data`` is resolved (:func:`attnkit.data.parallel.resolve_parallel_data`): a recipe name (``de-en``; prepared on first use, like
   ``attnkit data prepare de-en``), a TSV file (``source<TAB>target``), or two
   line-aligned files ``SRC_FILE,TGT_FILE``. Validation pairs come from ``--valid``, a recipe's ``valid.tsv``,
   or, for files without ``--valid``, a seeded 10% (at most 1,000 pairs) split off the data and reported on stderr
   (:func:`attnkit.data.parallel.split_off_valid`).
2. :meth:`attnkit.training.MTTask.from_data` reads the pairs (malformed lines are skipped and counted, or
   refused with their line number under ``--strict``), trains a joint BPE of ``--vocab-size`` on the training
   pairs, encodes them with the model's length limit ``--max-len`` (longer sentences are cut and counted, or
   refused under ``--strict``) and groups them into batches of at most ``--max-tokens`` padded tokens.
   The decoder input starts with ``<bos>``, the labels end with ``<eos>`` (``attnkit.data.mt_batching.collate``).
3. The model is the preset with the vocabulary size set to the tokenizer's and ``max_len`` to ``--max-len``
   (plus ``--set FIELD=VALUE`` overrides, e.g. ``--set dropout=0.3``).
4. The :class:`~attnkit.training.Trainer` runs with the CPU recipe (``attnkit.recipes.MT_DEFAULTS``): label smoothing
   0.1, a short linear warmup then a cosine decay to the end of ``--max-time`` (or of ``--steps``), Adam betas
   (0.9, 0.98), no weight decay. Each evaluation also translates the first ``--bleu-sentences`` validation
   sentences greedily, reports ``valid_bleu`` / ``valid_chrf``, prints a few of them next to their references,
   and ``best/`` is the checkpoint with the best BLEU (``--no-bleu``: lowest validation loss, no decoding).
5. ``--average-last N``: after training, the weights of the last N step checkpoints are averaged into
   ``<out>/checkpoints/averaged`` (:mod:`attnkit.training.averaging`).
6. The final summary scores ``best/`` on the whole validation set (greedy BLEU and chrF).

The tokenizer travels in the checkpoint (``extra["tokenizer"]``, with ``extra["kind"] = "mt"``), so
``attnkit translate --ckpt RUN`` and ``attnkit eval mt --ckpt RUN`` need nothing else.

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from attnkit.cli.flags import add_run_flags, is_main_process, parse_overrides, say, train_flag_values, world_size
from attnkit.recipes import (MT_DEFAULT_ANNEAL_SHARE, MT_DEFAULT_BLEU_SENTENCES, MT_DEFAULT_MAX_LEN,
                             MT_DEFAULT_MAX_TOKENS, MT_DEFAULT_PRESET, MT_DEFAULT_VOCAB, MT_DEFAULTS)

def register(tsub: argparse._SubParsersAction) -> None:
    mt = tsub.add_parser(
        "mt", help="train an encoder-decoder translator",
        description="Train an encoder-decoder Transformer on sentence pairs: a recipe name (de-en), a TSV file "
                    "(source<TAB>target) or two line-aligned files SRC_FILE,TGT_FILE; without --valid, a file's "
                    "validation pairs are a seeded 10% (at most 1,000) split off it. Defaults (the CPU recipe): preset transformer-cpu, BPE 2000, "
                    "label smoothing 0.1, warmup + cosine decay to the end of --max-time, Adam betas (0.9, 0.98), "
                    "greedy BLEU on valid at every evaluation with sample translations, best/ by BLEU.")
    mt.add_argument("--data", default=None, help="recipe name (de-en), TSV file, or SRC_FILE,TGT_FILE (default de-en)")
    mt.add_argument("--valid", default=None, help="validation pairs in the same forms (default: a recipe's "
                    "valid.tsv; for files, a seeded 10%% of the pairs, at most 1,000, split off --data)")
    mt.add_argument("--vocab-size", type=int, default=None, help=f"joint BPE vocabulary (default {MT_DEFAULT_VOCAB})")
    mt.add_argument("--tokenizer", type=Path, default=None, help="use this tokenizer JSON instead of training a BPE")
    mt.add_argument("--max-tokens", type=int, default=None,
                    help=f"token budget per batch and process, B * max(S, T) padded tokens (default {MT_DEFAULT_MAX_TOKENS}; "
                         f"under torchrun the global budget is this x the number of processes)")
    mt.add_argument("--max-len", type=int, default=None,
                    help=f"longest source/target in tokens the model takes (default {MT_DEFAULT_MAX_LEN}); "
                         "longer sentences are truncated and counted (refused with --strict)")
    mt.add_argument("--label-smoothing", type=float, default=None, help="ε of label smoothing (default 0.1)")
    mt.add_argument("--strict", action="store_true",
                    help="refuse malformed lines and over-long sentences (with the line / pair number) "
                         "instead of skipping / truncating and counting them")
    mt.add_argument("--bleu", action="store_true", default=None,
                    help="greedy BLEU/chrF on valid at every evaluation, best/ by BLEU (the default)")
    mt.add_argument("--no-bleu", dest="bleu", action="store_false",
                    help="no decoding during training: best/ by validation loss")
    mt.add_argument("--bleu-sentences", type=int, default=None,
                    help=f"validation sentences translated at each evaluation (default {MT_DEFAULT_BLEU_SENTENCES})")
    mt.add_argument("--word-dropout", type=float, default=None, metavar="P",
                    help="replace each source token by <unk> with probability P in training (default 0)")
    mt.add_argument("--anneal-data", default=None, metavar="DATA",
                    help="for the last --anneal-share of the budget, train on these pairs only (e.g. the training "
                         "pairs of the test's domain): a recipe name (its in-domain.tsv; de-en: the dictionary "
                         "sentences and the Wesnoth dialogue), a TSV file or SRC_FILE,TGT_FILE")
    mt.add_argument("--anneal-share", type=float, default=None, metavar="F",
                    help=f"final share of the budget (steps or --max-time) that trains on --anneal-data, in (0, 1) "
                         f"(default {MT_DEFAULT_ANNEAL_SHARE})")
    mt.add_argument("--anneal-replay", type=float, default=None, metavar="R",
                    help="with --anneal-data: the anneal phase also replays R training pairs per anneal pair (a fixed "
                         "random sample), so that the model keeps the other domains (default 0: anneal pairs only)")
    mt.add_argument("--average-last", type=int, default=0, metavar="N",
                    help="after training, average the last N step checkpoints into <out>/checkpoints/averaged")
    add_run_flags(mt)
    mt.set_defaults(func=run_mt)


def _mt_options(args: argparse.Namespace, saved: dict | None) -> dict[str, Any]:
    """The translation options: each flag, else the resumed run's value, else the recipe's default.

    Keys: ``data, valid, preset`` and the ``mt_options`` the run saves (``vocab_size, max_tokens, max_len,
    label_smoothing, strict, bleu, bleu_sentences, word_dropout, anneal_data, anneal_share, anneal_replay``).
    """
    extra_saved = (saved or {}).get("extra", {})
    opts_saved = extra_saved.get("mt_options", {})
    if saved is not None and extra_saved.get("kind") != "mt":
        raise ValueError(f"--resume: {args.out} is not a translation run (kind {extra_saved.get('kind')!r})")
    data = args.data or extra_saved.get("data") or "de-en"
    if saved is not None and args.data is not None and args.data != extra_saved.get("data"):
        raise ValueError(f"--resume: the run was trained on --data {extra_saved.get('data')!r}, got {args.data!r}")

    def opt(name: str, default: Any) -> Any:
        v = getattr(args, name)
        return v if v is not None else opts_saved.get(name, default)

    return {
        "data": data,
        "valid": args.valid if args.valid is not None else opts_saved.get("valid"),
        "preset": args.preset or extra_saved.get("preset") or MT_DEFAULT_PRESET,
        "vocab_size": opt("vocab_size", MT_DEFAULT_VOCAB),
        # --max-tokens is per process, like --batch-size: the global token budget is it x the number of processes
        "max_tokens": args.max_tokens * world_size() if args.max_tokens is not None else
        opts_saved.get("max_tokens", MT_DEFAULT_MAX_TOKENS * world_size()),
        "max_len": opt("max_len", MT_DEFAULT_MAX_LEN),
        "label_smoothing": opt("label_smoothing", 0.1),
        "strict": bool(args.strict or opts_saved.get("strict", False)),
        "bleu": bool(opt("bleu", True)),
        "bleu_sentences": opt("bleu_sentences", MT_DEFAULT_BLEU_SENTENCES),
        "word_dropout": opt("word_dropout", 0.0),
        "anneal_data": opt("anneal_data", None),
        "anneal_share": _anneal_share(opt("anneal_data", None), opt("anneal_share", None)),
        "anneal_replay": _anneal_replay(opt("anneal_data", None), opt("anneal_replay", None)),
    }


def _anneal_share(anneal_data: str | None, share: float | None) -> float | None:
    """``--anneal-share`` (or its default) with ``--anneal-data``; refused without it or outside (0, 1)."""
    if anneal_data is None:
        if share is not None:
            raise ValueError(f"--anneal-share {share:g} needs --anneal-data (the pairs to anneal on)")
        return None
    share = MT_DEFAULT_ANNEAL_SHARE if share is None else share
    if not 0.0 < share < 1.0:
        raise ValueError(f"--anneal-share must be in (0, 1), got {share:g}")
    return share


def _anneal_replay(anneal_data: str | None, replay: float | None) -> float:
    """``--anneal-replay`` (default 0) with ``--anneal-data``; refused without it or below 0."""
    if replay is None:
        return 0.0
    if anneal_data is None:
        raise ValueError(f"--anneal-replay {replay:g} needs --anneal-data (the pairs to anneal on)")
    if not replay >= 0.0 or replay == float("inf"):
        raise ValueError(f"--anneal-replay must be a number >= 0, got {replay:g}")
    return replay


def _mt_train_config(args: argparse.Namespace, saved: dict | None, bleu: bool):
    """The recipe's training defaults, adjusted to the flags, under the resumed run's and the flags' values."""
    from attnkit.training.config import resolve_train_config

    defaults = dict(MT_DEFAULTS)
    if bleu:
        defaults.update(best_metric="valid_bleu", best_mode="max")
    if args.average_last > 0 and args.keep_last is None:
        defaults["keep_last"] = max(defaults["keep_last"], args.average_last)
    cfg = resolve_train_config(defaults, saved.get("train_config") if saved else None, train_flag_values(args))
    if args.average_last > 0 and cfg.fsdp:
        raise ValueError("--average-last reads ordinary step checkpoints; an --fsdp run writes sharded ones "
                         "(turn them into ordinary ones with `attnkit convert` and average those)")
    if args.average_last > cfg.keep_last:
        raise ValueError(f"--average-last {args.average_last} needs that many step checkpoints, but --keep-last "
                         f"is {cfg.keep_last}; raise --keep-last to at least {args.average_last}")
    return cfg


def _parallel_sources(data: str, valid: str | None, anneal: str | None = None) -> tuple[Any, str, Any, Any]:
    """``(source, description, valid source or None, anneal source or None)`` of ``--data``, ``--valid`` and
    ``--anneal-data`` (a recipe name or folder stays a folder: its in-domain pairs are read from it)."""
    from attnkit.data.parallel import in_domain_source, resolve_parallel_data

    source, data_desc = resolve_parallel_data(data)
    anneal_source = None  # checked here, before the BPE is trained
    if anneal is not None:
        anneal_source = in_domain_source(resolve_parallel_data(anneal, flag="--anneal-data")[0])
    valid_source = None
    if valid is not None:
        valid_source, _ = resolve_parallel_data(valid)
        if isinstance(valid_source, Path) and valid_source.is_dir():  # a recipe / prepared folder: its valid split
            valid_source = valid_source / "valid.tsv"
            if not valid_source.is_file():
                raise FileNotFoundError(f"--valid {valid!r}: no such file {valid_source}")
    return source, data_desc, valid_source, anneal_source


def _mt_model_config(args: argparse.Namespace, saved: dict | None, preset: str, tokenizer: Any, max_len: int):
    """The resumed run's model config (with ``--set``), or the preset sized to the tokenizer and ``--max-len``.

    With ``tokenizer=None`` a new run's preset keeps its own vocabulary and length: that call checks ``--preset`` and
    ``--set`` before the data is read and a BPE trained, which takes minutes on the CPU.
    """
    from attnkit.models.configs import TransformerConfig, config_from_dict
    from attnkit.models.presets import get_preset

    if saved is not None:
        model_config = config_from_dict(saved["model_config"])
        overrides = parse_overrides(args.set)
        if overrides:
            model_config = model_config.replace(**overrides)  # the trainer refuses real changes by name
    else:
        overrides: dict[str, Any] = {}
        if tokenizer is not None:  # (--max-len is checked by the data reader, with its own message)
            V = tokenizer.vocab_size
            overrides.update(src_vocab_size=V, tgt_vocab_size=V, max_len=max_len, pad_id=tokenizer.pad_id)
        overrides.update(parse_overrides(args.set))
        if not isinstance(get_preset(preset), TransformerConfig):  # before its fields meet the overrides
            raise ValueError(f"train mt needs an encoder-decoder preset (transformer-small, transformer-base), "
                             f"{preset!r} is a decoder-only GPT")
        model_config = get_preset(preset, **overrides)
    if not isinstance(model_config, TransformerConfig):
        raise ValueError(f"train mt resumes encoder-decoder runs; {args.out} holds a {type(model_config).__name__}")
    return model_config


def _score_best(task: Any, summary: dict[str, Any], out: str | Path) -> None:
    """Translate the whole validation set with ``best/``; the scores go into the summary and summary.json."""
    from attnkit.training.atomic import write_text_atomic
    from attnkit.training.runs import load_trained

    best_model, _, best_state = load_trained(summary["best_checkpoint"], expect_kind="mt")
    say(f"translating all {len(task.valid):,} validation sentences with best/ (step {best_state.get('step')}) ...")
    scores = task.translation_scores(best_model)
    final = {"checkpoint": summary["best_checkpoint"], "step": best_state.get("step"), "decoding": "greedy",
             "sentences": scores["sentences"], "bleu": scores["bleu"], "chrf": scores["chrf"]}
    summary["final_valid"] = final
    write_text_atomic(Path(out) / "summary.json", json.dumps(summary, indent=2))
    say(f"valid ({final['sentences']:,} sentences, greedy, best/ at step {final['step']}): "
          f"BLEU {final['bleu']:.2f}, chrF {final['chrf']:.2f}")


def _report_data(task: Any, data_desc: str, max_len: int, max_tokens: int) -> dict[str, Any]:
    """Say what was split off, dropped or cut, and how much of each batch is padding (worth seeing before a long
    run); returns the run's ``extra.data_stats``."""
    if task.valid_split is not None:
        sp = task.valid_split
        say(f"no --valid: split off {sp['valid']:,} of {sp['pairs']:,} pairs of {data_desc} as validation pairs "
            f"({sp['fraction']:.0%}, at most {sp['max_pairs']:,}, fixed seed {sp['seed']}); {sp['train']:,} train "
            f"pairs remain ({sp['dropped']:,} more dropped for sharing a source sentence with the validation part)")
    pad = task.padding_ratio("train")
    cut = task.n_truncated
    say(f"data {data_desc}: {len(task.train):,} train / {len(task.valid):,} valid pairs; skipped malformed lines: "
        f"train {task.skipped['train']}, valid {task.skipped['valid']}; truncated to {max_len} tokens: "
        f"train {cut['train']}, valid {cut['valid']}")
    if task.anneal is not None:
        pairs = (f"{len(task.anneal):,} pairs and {task.n_replayed:,} replayed training pairs" if task.n_replayed
                 else f"{len(task.anneal):,} pairs only")
        say(f"anneal: the last {task.anneal_share:.0%} of the budget trains on {pairs} "
            f"({task.skipped['anneal']} malformed lines skipped, {cut['anneal']} sentences truncated, "
            f"{task.batchers['anneal'].num_batches:,} batches per pass)")
    say(f"batches: {task.num_batches('train'):,} per epoch at --max-tokens {max_tokens}; padding "
        f"{pad['total']:.1%} (source {pad['src']:.1%}, target {pad['tgt']:.1%}); tokenizer {task.tokenizer.type} "
        f"(vocab {task.tokenizer.vocab_size:,})")
    return {"train_pairs": len(task.train), "valid_pairs": len(task.valid), "skipped": task.skipped,
            "truncated": cut, "padding": pad, "valid_split": task.valid_split,
            **({"anneal_pairs": len(task.anneal), "anneal_replayed": task.n_replayed} if task.anneal is not None
               else {})}


GRAPH_SHAPE_MULTIPLE = 8  # --cuda-graphs: batch widths rounded up to a multiple of 8 (MTTask shape_multiple)


def run_mt(args: argparse.Namespace) -> int:
    import torch

    from attnkit.data.tokenizer import load_tokenizer, tokenizer_from_dict
    from attnkit.models.builders import build_model
    from attnkit.models.params import count_parameters
    from attnkit.training import MTTask, Trainer, seed_everything
    from attnkit.training.runs import default_run_folder, read_saved_run

    if args.average_last < 0:
        raise ValueError(f"--average-last must be >= 0, got {args.average_last}")
    saved = read_saved_run(args.out) if args.resume else None
    o = _mt_options(args, saved)
    data, preset, max_tokens, max_len = o["data"], o["preset"], o["max_tokens"], o["max_len"]
    cfg = _mt_train_config(args, saved, o["bleu"])
    _mt_model_config(args, saved, preset, None, max_len)  # a bad --preset or --set fails now, not after the BPE
    source, data_desc, valid_source, anneal_source = _parallel_sources(data, o["valid"], o["anneal_data"])

    if saved is not None:
        tokenizer = tokenizer_from_dict(saved["extra"]["tokenizer"])
    elif args.tokenizer is not None:
        tokenizer = load_tokenizer(args.tokenizer)
    else:
        tokenizer = None  # MTTask.from_data trains a joint BPE
    say(f"reading {data_desc}" + ("" if tokenizer is not None else f" and training a joint BPE of {o['vocab_size']}")
        + " ...")
    task = MTTask.from_data(source, valid=valid_source, tokenizer=tokenizer, vocab_size=o["vocab_size"],
                            max_len=max_len, truncate=not o["strict"], strict=o["strict"], bleu=o["bleu"],
                            max_tokens=max_tokens, seed=cfg.seed, label_smoothing=o["label_smoothing"],
                            bleu_sentences=o["bleu_sentences"], word_dropout=o["word_dropout"],
                            anneal=anneal_source, anneal_share=o["anneal_share"], anneal_replay=o["anneal_replay"],
                            shape_multiple=GRAPH_SHAPE_MULTIPLE if cfg.cuda_graphs else 1)
    tokenizer = task.tokenizer
    if cfg.cuda_graphs:
        shapes = task.batchers["train"].shapes
        say(f"CUDA graphs: training batches padded to {len(shapes)} fixed shapes (rows x width) "
            + ", ".join(f"{b}x{w}" for b, w in shapes))
    data_stats = _report_data(task, data_desc, max_len, max_tokens)
    model_config = _mt_model_config(args, saved, preset, tokenizer, max_len)
    out = args.out or default_run_folder("mt", data, preset)

    seed_everything(cfg.seed)  # reproducible initialisation
    model = build_model(model_config)
    say(f"model {preset}: {count_parameters(model):,} parameters; threads {torch.get_num_threads()}; "
        f"run folder {out}")
    n = world_size()
    say(f"global token budget {max_tokens} = {max_tokens / n:g} per process x {n} process{'es' if n > 1 else ''}; "
        f"x {cfg.grad_accum} accumulation" + ("; FSDP2" if cfg.fsdp else "; DDP" if n > 1 else ""))
    valid = o["valid"]
    mt_options = {"valid": None if valid is None else str(valid),
                  **{k: o[k] for k in ("vocab_size", "max_tokens", "max_len", "label_smoothing", "strict", "bleu",
                                       "bleu_sentences", "word_dropout", "anneal_data", "anneal_share")},
                  **({"anneal_replay": o["anneal_replay"]} if o["anneal_replay"] else {})}
    extra = {"kind": "mt", "data": str(data), "preset": preset, "tokenizer": tokenizer.to_dict(),
             "mt_options": mt_options, "data_stats": data_stats}
    trainer = Trainer(model, task, cfg, out, model_config=model_config, extra=extra, resume=args.resume,
                      progress=not args.no_progress)
    summary = trainer.fit()
    if not is_main_process():  # rank 0 reports, averages and scores; the other processes are done
        return 0
    vl, vb = summary.get("valid_loss"), summary.get("valid_bleu")
    say(f"done: {summary['steps']} steps in {summary['elapsed']:.0f} s ({summary['stopped_by']}); "
        f"train loss {summary['train_loss']:.4f}" + (f", valid loss {vl:.4f}" if vl is not None else "")
        + (f", valid BLEU (greedy) {vb:.2f}" if vb is not None else "") + f"; run folder {out}")

    if args.average_last > 0:
        from attnkit.training.averaging import average_last_checkpoints

        avg = average_last_checkpoints(out, args.average_last)
        ev = json.loads((avg / "state.json").read_text()).get("averaged_from", [])
        say(f"averaged {len(ev)} checkpoints into {avg} (use --ckpt {avg})")
    if o["bleu"] and summary.get("best_checkpoint"):
        _score_best(task, summary, out)
    return 0
