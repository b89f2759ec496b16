"""``train_mt``: train an encoder-decoder translator with the one training loop (``attnkit train mt``).

    from attnkit.api import TrainMTOptions, train_mt
    result = train_mt(TrainMTOptions(data="de-en", max_time=15, out="runs/de-en"))
    result.summary["final_valid"]["bleu"]

What happens, in order (the preset and overrides, ``out`` and, on resume, the settings and the budget left are
checked first, so that a typo fails at once and not after the minutes that reading the data and training a BPE
take on the CPU):

1. ``data`` is resolved (:func:`attnkit.data.corpora.parallel.resolve_parallel_data`): a recipe name (``de-en``;
   prepared on first use, like ``attnkit data prepare de-en``), a TSV file (``source<TAB>target``), or two
   line-aligned files ``SRC_FILE,TGT_FILE``. Validation pairs come from ``valid``, a recipe's ``valid.tsv``, or,
   for files without ``valid``, a seeded 10% (at most 1,000 pairs) split off the data and reported
   (:func:`attnkit.data.corpora.parallel.split_off_valid`).
2. :meth:`attnkit.training.MTTask.from_data` reads the pairs (malformed lines are skipped and counted, or refused
   with their line number under ``strict``), trains a joint BPE of ``vocab_size`` on the training pairs, encodes
   them with the model's length limit ``max_len`` (longer sentences are cut and counted, or refused under
   ``strict``; the ids go into token stores on disk, :mod:`attnkit.data.pipeline.mt_store`) and groups them into
   batches of at most ``max_tokens`` padded tokens. The decoder input starts with ``<bos>``, the labels end with
   ``<eos>`` (``attnkit.data.pipeline.mt_batching.collate``).
3. The model is the preset with the vocabulary size set to the tokenizer's and ``max_len`` to ``max_len`` (plus
   the ``overrides``, e.g. ``{"dropout": 0.3}``).
4. The :class:`~attnkit.training.Trainer` runs with the CPU recipe (``attnkit.recipes.MT_DEFAULTS``): label
   smoothing 0.1, a short linear warmup then a cosine decay to the end of ``max_time`` (or of ``steps``), Adam
   betas (0.9, 0.98), no weight decay. Each evaluation also translates the first ``bleu_sentences`` validation
   sentences greedily, reports ``valid_bleu`` / ``valid_chrf``, logs a few of them next to their references, and
   ``best/`` is the checkpoint with the best BLEU (``bleu=False``: lowest validation loss, no decoding).
5. The final summary scores ``best/`` on the whole validation set (greedy BLEU and chrF).
6. ``average_last=N``: the weights of the last N step checkpoints are averaged into ``<out>/checkpoints/averaged``
   (:mod:`attnkit.checkpoints.averaging`; fewer than N step checkpoints raise ``ValueError``, after the scores).

The tokenizer travels in the checkpoint (``extra["tokenizer"]``, with ``extra["kind"] = "mt"``), so
``attnkit translate --ckpt RUN`` and ``attnkit eval mt --ckpt RUN`` need nothing else.

There are no tensor axes in this file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.checks import INDEX_MAX
from attnkit.recipes import (MT_DEFAULT_ANNEAL_SHARE, MT_DEFAULT_BLEU_SENTENCES, MT_DEFAULT_MAX_LEN,
                             MT_DEFAULT_MAX_TOKENS, MT_DEFAULT_PRESET, MT_DEFAULT_VOCAB, MT_DEFAULTS)

from .interruption import resume_hint
from .launcher import is_main_process, world_size
from .options import (Log, RunResult, TrainOptions, check_out, check_vocab_size, default_log, done_line,
                      read_json_object, recorded_path, refuse_changed, refuse_changed_config, refuse_spent_resume,
                      resumed_model_config, same_path, same_tokenizer, scaled_min_lr, train_config, train_values)

__all__ = ["TrainMTOptions", "train_mt"]


@dataclass
class TrainMTOptions(TrainOptions):
    """Options of :func:`train_mt` (and ``attnkit train mt``): :class:`TrainOptions` plus the data and the
    translation recipe's settings. Each left None takes the resumed run's value, else the recipe's default.

    Attributes:
        data: a recipe name (``de-en``), a TSV file, or ``"SRC_FILE,TGT_FILE"`` (default ``de-en``).
        valid: validation pairs in the same forms (default: a recipe's ``valid.tsv``; for files a seeded 10%).
        tokenizer: a tokenizer JSON file to use instead of training a joint BPE of ``vocab_size``.
        max_tokens: token budget per batch and process, ``B * max(S, T)`` padded tokens.
        max_len: the longest sentence in tokens the model takes (longer ones are cut and counted).
        label_smoothing, word_dropout: the regularisers' rates.
        strict: refuse malformed lines and over-long sentences instead of skipping / cutting and counting them.
        bleu: greedy BLEU/chrF at each evaluation and ``best/`` by BLEU (default True); bleu_sentences: how many.
        anneal_data, anneal_share, anneal_replay: end the budget on these pairs (see ``--anneal-data``).
        average_last: average the last N step checkpoints into ``checkpoints/averaged`` after training (0: none;
            default: the resumed run's N, recorded in ``mt_options``, else none).
        reverse: train the other direction (``--reverse``): every pair of ``data``, ``valid`` and ``anneal_data``
            swapped, validation and BLEU included; recorded in the run (``mt_options.reverse``), so ``translate``
            of the run takes the target language as input (``de-en`` reversed: English -> German).
        synthetic, synthetic_ratio: back-translated pairs to add (``--synthetic FILE``, a file written by
            ``attnkit translate --output`` with a model of the reverse direction) and how many per real training pair
            (default 1; a file with fewer pairs is taken whole as often as it fits, the rest drawn with the run's seed),
            each synthetic source tagged ``<bt>`` (:meth:`attnkit.training.MTTask.mix_synthetic`).
        stop_at_loss, schedule_steps: stop at the first evaluation whose validation loss is at or below this; the
            cosine schedule's length in updates (as :class:`~attnkit.api.TrainLMOptions`').

    ``batch_size`` does not apply (batches are sized by ``max_tokens``: refused, as ``train mt --batch-size`` is);
    ``overrides`` (``--set``) may not hold ``max_len`` (use ``max_len``, ``--max-len``), and a ``src_vocab_size`` /
    ``tgt_vocab_size`` there pads the vocabulary past the tokenizer's, never below it.

    Local files and folders (``data``, ``valid``, ``anneal_data``, ``synthetic``) are recorded as absolute paths, so
    a run resumes from any working directory. Resuming, each data and translation option above may be given only
    with the run's own value (a different one is refused before anything is read); ``average_last`` may be given
    (it changes only the averaging after training) up to the run's ``keep_last``.
    """

    data: str | None = None
    valid: str | None = None
    tokenizer: str | Path | None = None
    vocab_size: int | None = None
    max_tokens: int | None = None
    max_len: int | None = None
    label_smoothing: float | None = None
    strict: bool = False
    bleu: bool | None = None
    bleu_sentences: int | None = None
    word_dropout: float | None = None
    anneal_data: str | None = None
    anneal_share: float | None = None
    anneal_replay: float | None = None
    average_last: int | None = None
    reverse: bool | None = None
    synthetic: str | None = None
    synthetic_ratio: float | None = None
    stop_at_loss: float | None = None
    schedule_steps: int | None = None

    def _check(self) -> None:
        super()._check()
        if self.batch_size is not None:  # a TrainOptions field that train mt has no use for
            raise ValueError(f"train mt sizes its batches by --max-tokens (max_tokens=, padded tokens per batch), not "
                             f"by a number of sentences; got batch_size={self.batch_size!r}")
        if "max_len" in self.overrides:  # the data are cut to --max-len: a model of another length would not fit
            raise ValueError(f"train mt sets the model's max_len from --max-len (max_len=), got --set "
                             f"max_len={self.overrides['max_len']!r}: use --max-len {self.overrides['max_len']!r}")
        if self.average_last is not None and self.average_last < 0:
            raise ValueError(f"--average-last must be >= 0, got {self.average_last}")
        for flag, value, least, why in (("--max-len", self.max_len, 2, " (one token plus <bos>/<eos>)"),
                                        ("--max-tokens", self.max_tokens, 2, " (a pair of one token and <eos>)")):
            if value is not None and value < least:  # named by its flag before the data are read and a BPE trained
                raise ValueError(f"{flag} must be >= {least}{why}, got {value}")
            if value is not None and value > INDEX_MAX:  # torch's sizes overflow (was: "int too large")
                raise ValueError(f"{flag} must be at most 2**31 - 1 = {INDEX_MAX:,} (torch's index range), "
                                 f"got {value:,}")
        # <pad> <bos> <eos> <unk> (and any tags: the BPE trainer checks those)
        check_vocab_size(self.vocab_size, specials=None if self.resume else 4)
        if self.vocab_size is not None and self.tokenizer is not None and not self.resume:
            raise ValueError(f"--vocab-size sizes the joint BPE trained on the pairs; --tokenizer "
                             f"{str(self.tokenizer)!r} brings its own vocabulary, got --vocab-size {self.vocab_size}")
        if self.synthetic_ratio is not None and not 0.0 < self.synthetic_ratio <= 100:
            raise ValueError(f"--synthetic-ratio must be a number in (0, 100], got {self.synthetic_ratio:g}")


def _mt_options(o: TrainMTOptions, saved: dict | None) -> dict[str, Any]:
    """The translation options: each given, else the resumed run's value, else the recipe's default.

    Keys: ``data, valid, preset, average_last`` and the ``mt_options`` the run saves (``vocab_size, max_tokens,
    max_len, label_smoothing, strict, bleu, bleu_sentences, word_dropout, anneal_data, anneal_share,
    anneal_replay``). Resuming, a given option that differs from the run's is refused (:func:`_check_resumed`).
    """
    extra_saved = (saved or {}).get("extra", {})
    opts_saved = extra_saved.get("mt_options", {})
    if saved is not None and extra_saved.get("kind") != "mt":
        raise ValueError(f"--resume: {o.out} is not a translation run (kind {extra_saved.get('kind')!r})")
    if saved is not None:
        _check_resumed(o, saved, opts_saved)
    data = o.data or extra_saved.get("data") or "de-en"

    def opt(name: str, default: Any) -> Any:
        v = getattr(o, name)
        return v if v is not None else opts_saved.get(name, default)

    return {
        "data": data,
        "valid": o.valid if o.valid is not None else opts_saved.get("valid"),
        "preset": o.preset or extra_saved.get("preset") or MT_DEFAULT_PRESET,
        "vocab_size": opt("vocab_size", MT_DEFAULT_VOCAB),
        # max_tokens is per process, like batch_size: the global token budget is it x the number of processes
        "max_tokens": o.max_tokens * world_size() if o.max_tokens is not None else
        opts_saved.get("max_tokens", MT_DEFAULT_MAX_TOKENS * world_size()),
        "max_len": opt("max_len", MT_DEFAULT_MAX_LEN),
        "label_smoothing": opt("label_smoothing", 0.1),
        "strict": bool(o.strict or opts_saved.get("strict", False)),
        "bleu": bool(opt("bleu", True)),
        "bleu_sentences": opt("bleu_sentences", MT_DEFAULT_BLEU_SENTENCES),
        "word_dropout": opt("word_dropout", 0.0),
        "anneal_data": opt("anneal_data", None),
        "anneal_share": _anneal_share(opt("anneal_data", None), opt("anneal_share", None)),
        "anneal_replay": _anneal_replay(opt("anneal_data", None), opt("anneal_replay", None)),
        "average_last": _average_last(o, opts_saved),
        **_direction_and_synthetic(o, saved, opts_saved),
    }


def _check_resumed(o: TrainMTOptions, saved: dict, opts_saved: dict) -> None:
    """Resuming: ``ValueError`` for a data or translation option given with another value than the run's (the
    defaults stand in for options older runs did not record; local paths are compared as absolute paths, a
    ``--tokenizer`` file by its content). ``reverse`` and ``synthetic`` are checked by
    :func:`_direction_and_synthetic`."""
    extra_saved = saved.get("extra", {})
    for flag, value, was in (("--data", o.data, extra_saved.get("data")), ("--valid", o.valid, opts_saved.get("valid")),
                             ("--anneal-data", o.anneal_data, opts_saved.get("anneal_data"))):
        if value is not None and not same_path(value, was, pairs=True):
            raise ValueError(f"--resume: the run was trained on {flag} {was!r}, got {value!r}")
    if o.bleu is not None and o.bleu != opts_saved.get("bleu", True):
        flags = {True: "--bleu", False: "--no-bleu"}  # best/ is judged by BLEU or by the loss, for the whole run
        raise ValueError(f"--resume: the run was trained with {flags[bool(opts_saved.get('bleu', True))]}, got "
                         f"{flags[o.bleu]}")
    if o.strict and not opts_saved.get("strict", False):
        raise ValueError("--resume: the run was trained without --strict, got --strict")
    n = world_size()
    was = opts_saved.get("max_tokens", MT_DEFAULT_MAX_TOKENS * n)
    if o.max_tokens is not None and o.max_tokens * n != was:
        raise ValueError(f"--resume: the run was trained with a token budget of {was!r} per batch over all processes "
                         f"(--max-tokens {was / n:g} with {n} process{'es' if n > 1 else ''}), got --max-tokens "
                         f"{o.max_tokens}")
    refuse_changed("--preset", o.preset, extra_saved.get("preset"))
    for flag, name, default in (("--vocab-size", "vocab_size", MT_DEFAULT_VOCAB),
                                ("--max-len", "max_len", MT_DEFAULT_MAX_LEN),
                                ("--label-smoothing", "label_smoothing", 0.1),
                                ("--bleu-sentences", "bleu_sentences", MT_DEFAULT_BLEU_SENTENCES),
                                ("--word-dropout", "word_dropout", 0.0), ("--anneal-share", "anneal_share", None),
                                ("--anneal-replay", "anneal_replay", 0.0)):
        refuse_changed(flag, getattr(o, name), opts_saved.get(name, default))
    if o.tokenizer is not None:
        if not same_tokenizer(o.tokenizer, extra_saved.get("tokenizer")):
            raise ValueError(f"--resume: the run's tokenizer (in its checkpoint) differs from the one in --tokenizer "
                             f"{str(o.tokenizer)!r}")


def _average_last(o: TrainMTOptions, opts_saved: dict) -> int:
    """How many step checkpoints to average after training: ``average_last`` given (0: none), else the resumed
    run's."""
    if o.average_last is not None:
        return o.average_last
    n = opts_saved.get("average_last", 0)
    if type(n) is not int or n < 0:
        raise ValueError(f"--resume: the run's mt_options.average_last must be an int >= 0, got {n!r} (edited by "
                         f"hand?)")
    return n


def _direction_and_synthetic(o: TrainMTOptions, saved: dict | None, opts_saved: dict) -> dict[str, Any]:
    """``reverse``, ``synthetic`` and ``synthetic_ratio``: each given, else the resumed run's (a resumed run keeps
    its direction and its synthetic pairs: a different value is refused), else off / 1."""
    given = {"reverse": o.reverse, "synthetic": o.synthetic, "synthetic_ratio": o.synthetic_ratio}
    if saved is not None:
        for name, value in given.items():
            was = opts_saved.get(name, False if name == "reverse" else None)
            same = same_path(value, was) if name == "synthetic" and value is not None else value == was
            if value is not None and not same:
                raise ValueError(f"--resume: the run was trained with {name} {was!r}, got {value!r}")
    synthetic = o.synthetic if o.synthetic is not None else opts_saved.get("synthetic")
    ratio = o.synthetic_ratio if o.synthetic_ratio is not None else opts_saved.get("synthetic_ratio")
    if synthetic is None and ratio is not None:
        raise ValueError(f"--synthetic-ratio {ratio:g} needs --synthetic (a back-translation file)")
    if synthetic is not None and not Path(synthetic).is_file():
        raise FileNotFoundError(f"--synthetic: no such file: {synthetic}")
    reverse = bool(o.reverse if o.reverse is not None else opts_saved.get("reverse", False))
    return {"reverse": reverse, "synthetic": None if synthetic is None else recorded_path(str(synthetic)),
            "synthetic_ratio": None if synthetic is None else float(1.0 if ratio is None else ratio)}


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


def _mt_train_config(o: TrainMTOptions, saved: dict | None, opts: dict[str, Any]):
    """The recipe's training defaults, adjusted to the options (``opts``: :func:`_mt_options`), under the resumed
    run's and the given values."""

    defaults = scaled_min_lr(dict(MT_DEFAULTS), o.lr, o.min_lr)
    if opts["bleu"]:
        defaults.update(best_metric="valid_bleu", best_mode="max")
    average_last = opts["average_last"]
    if average_last > 0 and o.keep_last is None:
        defaults["keep_last"] = max(defaults["keep_last"], average_last)
    given = train_values(o)
    given.update({k: getattr(o, k) for k in ("stop_at_loss", "schedule_steps") if getattr(o, k) is not None})
    cfg = train_config(defaults, saved.get("train_config") if saved else None, given)
    if average_last > 0 and cfg.fsdp:
        raise ValueError("--average-last reads ordinary step checkpoints; an --fsdp run writes sharded ones "
                         "(turn them into ordinary ones with `attnkit convert` and average those)")
    if average_last > cfg.keep_last and saved is not None:  # keep_last is the run's: it cannot change now
        raise ValueError(f"--average-last {average_last} needs that many step checkpoints, but the run keeps the "
                         f"last {cfg.keep_last} (its --keep-last, fixed on resume); resume with --average-last "
                         f"{cfg.keep_last} or less")
    if average_last > cfg.keep_last:
        raise ValueError(f"--average-last {average_last} needs that many step checkpoints, but --keep-last "
                         f"is {cfg.keep_last}; raise --keep-last to at least {average_last}")
    written = None if cfg.steps is None else -(-cfg.steps // cfg.ckpt_every)  # every ckpt_every steps, and the last
    if saved is None and written is not None and average_last > written:  # known before training, not after it
        more = f"lower --ckpt-every to {cfg.steps // average_last}" if cfg.steps >= average_last else "raise --steps"
        raise ValueError(f"--average-last {average_last} needs that many step checkpoints, but --steps {cfg.steps} "
                         f"with --ckpt-every {cfg.ckpt_every} writes {written}; {more}")
    return cfg


def _parallel_sources(data: str, valid: str | None, anneal: str | None = None) -> tuple[Any, str, Any, Any]:
    """``(source, description, valid source or None, anneal source or None)`` of ``data``, ``valid`` and
    ``anneal_data`` (a recipe name or folder stays a folder: its in-domain pairs are read from it)."""
    from attnkit.data.corpora.parallel import in_domain_source, resolve_parallel_data

    source, data_desc = resolve_parallel_data(data)
    anneal_source = None  # checked here, before the BPE is trained
    if anneal is not None:
        anneal_source = in_domain_source(resolve_parallel_data(anneal, flag="--anneal-data")[0])
    valid_source = None
    if valid is not None:
        valid_source, _ = resolve_parallel_data(valid, flag="--valid")
        if isinstance(valid_source, Path) and valid_source.is_dir():  # a recipe / prepared folder: its valid split
            valid_source = valid_source / "valid.tsv"
            if not valid_source.is_file():
                raise FileNotFoundError(f"--valid {valid!r}: no such file {valid_source}")
    return source, data_desc, valid_source, anneal_source


def _mt_model_config(o: TrainMTOptions, saved: dict | None, preset: str, tokenizer: Any, max_len: int):
    """The resumed run's model config (with the overrides), or the preset sized to the tokenizer and ``max_len``.

    With ``tokenizer=None`` a new run's preset keeps its own vocabulary and length: that call checks the preset and
    the overrides before the data is read and a BPE trained, which takes minutes on the CPU.
    """
    from attnkit.models.configs import TransformerConfig
    from attnkit.models.presets import get_preset

    if saved is not None:
        model_config = resumed_model_config(saved, o.overrides)
    else:
        overrides: dict[str, Any] = {}
        if tokenizer is not None:  # (max_len is checked by the data reader, with its own message)
            V = tokenizer.vocab_size
            overrides.update(src_vocab_size=V, tgt_vocab_size=V, max_len=max_len, pad_id=tokenizer.pad_id)
        overrides.update(o.overrides)
        if not isinstance(get_preset(preset), TransformerConfig):  # before its fields meet the overrides
            raise ValueError(f"train mt needs an encoder-decoder preset (transformer-small, transformer-base), "
                             f"{preset!r} is a decoder-only GPT")
        one = [k for k in ("src_vocab_size", "tgt_vocab_size") if k in o.overrides]  # the other is the tokenizer's
        if len(one) == 1 and overrides.get("share_embeddings", get_preset(preset).share_embeddings):
            raise ValueError(f"--set {one[0]} alone: the source and target share one embedding (share_embeddings), so "
                             f"give src_vocab_size and tgt_vocab_size the same value, got "
                             f"{one[0]}={o.overrides[one[0]]}")
        model_config = get_preset(preset, **overrides)
        if tokenizer is not None:  # an id past an embedding would fail inside torch, after the run folder is made
            for name in ("src_vocab_size", "tgt_vocab_size"):
                if getattr(model_config, name) < tokenizer.vocab_size:
                    raise ValueError(f"--set {name} must be >= the tokenizer's {tokenizer.vocab_size:,} tokens (a "
                                     f"larger one pads the vocabulary), got {getattr(model_config, name):,}")
    if not isinstance(model_config, TransformerConfig):
        raise ValueError(f"train mt resumes encoder-decoder runs; {o.out} holds a {type(model_config).__name__}")
    return model_config


def _work_left(out: Path, opts: dict[str, Any]) -> bool:
    """Whether the run in ``out`` has what follows its training still to do, which a resume does (also one whose
    budget is spent: it then trains nothing): the whole validation set's scores of ``best/`` (BLEU on) or the averaging
    of ``average_last`` checkpoints (``checkpoints/averaged`` missing, or averaged from another number)."""
    from attnkit.checkpoints.averaging import AVERAGED_DIR
    from attnkit.checkpoints.runs import CHECKPOINTS_DIR, SUMMARY_FILE

    summary = read_json_object(out / SUMMARY_FILE)
    scored = not opts["bleu"] or not summary.get("best_checkpoint") or "final_valid" in summary
    averaged = read_json_object(out / CHECKPOINTS_DIR / AVERAGED_DIR / "state.json").get("averaged_from")
    n = opts["average_last"]
    return not scored or (n > 0 and not (isinstance(averaged, list) and len(averaged) == n))


def _score_best(task: Any, summary: dict[str, Any], out: str | Path, log: Log) -> None:
    """Translate the whole validation set with ``best/``; the scores go into the summary and summary.json."""
    from attnkit.checkpoints import load, write_text_atomic

    best = load(summary["best_checkpoint"], expect_kind="mt")
    log(f"translating all {len(task.valid):,} validation sentences with best/ (step {best.state.get('step')}) ...")
    scores = task.translation_scores(best.model)
    final = {"checkpoint": summary["best_checkpoint"], "step": best.state.get("step"), "decoding": "greedy",
             "sentences": scores["sentences"], "bleu": scores["bleu"], "chrf": scores["chrf"]}
    summary["final_valid"] = final
    write_text_atomic(Path(out) / "summary.json", json.dumps(summary, indent=2))
    log(f"valid ({final['sentences']:,} sentences, greedy, best/ at step {final['step']}): "
        f"BLEU {final['bleu']:.2f}, chrF {final['chrf']:.2f}")


def _report_data(task: Any, data_desc: str, max_len: int, max_tokens: int, log: Log,
                 opts: dict[str, Any]) -> dict[str, Any]:
    """Say what was split off, dropped or cut, and how much of each batch is padding (worth seeing before a long
    run); returns the run's ``extra.data_stats``."""
    if task.valid_split is not None:
        sp = task.valid_split
        log(f"no --valid: split off {sp['valid']:,} of {sp['pairs']:,} pairs of {data_desc} as validation pairs "
            f"({sp['fraction']:.0%}, at most {sp['max_pairs']:,}, fixed seed {sp['seed']}); {sp['train']:,} train "
            f"pairs remain ({sp['dropped']:,} more dropped for sharing a source sentence with the validation part)")
    pad = task.padding_ratio("train")
    cut = task.n_truncated
    log(f"data {data_desc}: {len(task.train):,} train / {len(task.valid):,} valid pairs; skipped malformed lines: "
        f"train {task.skipped['train']}, valid {task.skipped['valid']}; truncated to {max_len} tokens: "
        f"train {cut['train']}, valid {cut['valid']}")
    if task.anneal is not None:
        pairs = (f"{len(task.anneal):,} pairs and {task.n_replayed:,} replayed training pairs" if task.n_replayed
                 else f"{len(task.anneal):,} pairs only")
        log(f"anneal: the last {task.anneal_share:.0%} of the budget trains on {pairs} "
            f"({task.skipped['anneal']} malformed lines skipped, "
            + (f"{task.valid_split['anneal_dropped']} shared a validation source, "
               if task.valid_split and "anneal_dropped" in task.valid_split else "")
            + f"{cut['anneal']} sentences truncated, "
            f"{task.batchers['anneal'].num_batches:,} batches per pass)")
    if opts["reverse"]:
        log(f"direction: reversed, every pair of {data_desc} read target -> source")
    syn = task.synthetic
    if syn is not None:
        sampled = syn["pairs"] - syn["copies"] * syn["available"]
        whole = f"the whole file {syn['copies']}x and {sampled:,} drawn" if syn["copies"] else "drawn"
        log(f"synthetic: {syn['pairs']:,} back-translated pairs of {syn['available']:,} in {opts['synthetic']} "
            f"({syn['ratio']:.3g} per real pair: {whole}; {syn['skipped']} malformed or empty lines skipped), each "
            f"source tagged {syn['tag']} (id {syn['tag_id']}); {len(task.train) - syn['pairs']:,} real training pairs")
    log(f"batches: {task.num_batches('train'):,} per epoch at --max-tokens {max_tokens}; padding "
        f"{pad['total']:.1%} (source {pad['src']:.1%}, target {pad['tgt']:.1%}); tokenizer {task.tokenizer.type} "
        f"(vocab {task.tokenizer.vocab_size:,})")
    return {"train_pairs": len(task.train), "valid_pairs": len(task.valid), "skipped": task.skipped,
            **({"synthetic_pairs": syn["pairs"], "synthetic_available": syn["available"]} if syn is not None
               else {}),
            "truncated": cut, "padding": pad, "valid_split": task.valid_split,
            **({"anneal_pairs": len(task.anneal), "anneal_replayed": task.n_replayed} if task.anneal is not None
               else {})}


def _build_task(o: TrainMTOptions, saved: dict | None, opts: dict[str, Any], cfg: Any, log: Log):
    """``(task, data description)``: the pairs read, the tokenizer trained or restored, the batches planned."""
    from attnkit.data.pipeline.mt_batching import GRAPH_SHAPE_MULTIPLE
    from attnkit.data.tokenizers.tokenizer import load_tokenizer, tokenizer_from_dict
    from attnkit.training import MTTask

    from .lm_training import _rank0_first

    source, data_desc, valid_source, anneal_source = _parallel_sources(opts["data"], opts["valid"],
                                                                       opts["anneal_data"])
    if saved is not None:
        tokenizer = tokenizer_from_dict(saved["extra"]["tokenizer"])
    elif o.tokenizer is not None:
        tokenizer = load_tokenizer(o.tokenizer)
    else:
        tokenizer = None  # MTTask.from_data trains a joint BPE
    log(f"reading {data_desc}" + ("" if tokenizer is not None else f" and training a joint BPE of "
                                                                   f"{opts['vocab_size']}") + " ...")
    task = _rank0_first(lambda first: MTTask.from_data(
        source, valid=valid_source, tokenizer=tokenizer, vocab_size=opts["vocab_size"], max_len=opts["max_len"],
        truncate=not opts["strict"], strict=opts["strict"], bleu=opts["bleu"], max_tokens=opts["max_tokens"],
        seed=cfg.seed, label_smoothing=opts["label_smoothing"], bleu_sentences=opts["bleu_sentences"],
        word_dropout=opts["word_dropout"], anneal=anneal_source, anneal_share=opts["anneal_share"],
        anneal_replay=opts["anneal_replay"], shape_multiple=GRAPH_SHAPE_MULTIPLE if cfg.cuda_graphs else 1,
        reverse=opts["reverse"], synthetic=opts["synthetic"], synthetic_ratio=opts["synthetic_ratio"] or 1.0,
        verify=first), cfg.device)  # under torchrun rank 0 builds the token stores, the others open them
    if cfg.cuda_graphs:
        shapes = task.batchers["train"].shapes
        log(f"CUDA graphs: training batches padded to {len(shapes)} fixed shapes (rows x width) "
            + ", ".join(f"{b}x{w}" for b, w in shapes))
    return task, data_desc


def train_mt(options: TrainMTOptions | None = None, *, log: Log | None = None, **kwargs: Any) -> RunResult:
    """Train (or with ``resume=True`` continue) a translator; returns the run folder and its summary (with
    ``final_valid``, the whole validation set's greedy BLEU/chrF of ``best/``, when BLEU is on).

    ``options`` or keyword arguments (the fields of :class:`TrainMTOptions`); ``log`` receives the status lines,
    the evaluation lines and sample translations (default: the status lines to stderr, the evaluation lines and
    samples to stdout, once per torchrun job). SIGINT / SIGTERM during training: the run
    stops after the update under way with a checkpoint and raises
    :class:`~attnkit.training.preemption.Interrupted` (no averaging, no final scoring), whose ``resume_command``
    continues it (``attnkit train mt --out DIR --resume``).
    """
    import torch

    from attnkit.checkpoints.runs import default_run_folder, read_saved_run
    from attnkit.models.builders import build_model
    from attnkit.models.params import count_parameters
    from attnkit.training import Trainer, seed_everything

    o = TrainMTOptions.make(options, kwargs)
    lines = True if log is None else log  # the trainer's evaluation lines: stdout, or the caller's log
    log = default_log(log)
    check_out(o)
    saved = read_saved_run(o.out) if o.resume else None
    opts = _mt_options(o, saved)
    data, preset, max_tokens, max_len = opts["data"], opts["preset"], opts["max_tokens"], opts["max_len"]
    cfg = _mt_train_config(o, saved, opts)
    if saved is not None:
        refuse_changed_config(cfg, saved)
        refuse_spent_resume(o.out, saved, cfg, work_left=_work_left(Path(o.out), opts))
    _mt_model_config(o, saved, preset, None, max_len)  # a bad preset or override fails now, not after the BPE
    task, data_desc = _build_task(o, saved, opts, cfg, log)
    data_stats = _report_data(task, data_desc, max_len, max_tokens, log, opts)
    model_config = _mt_model_config(o, saved, preset, task.tokenizer, max_len)
    out = Path(o.out or default_run_folder("mt", data, preset))

    seed_everything(cfg.seed)  # reproducible initialisation
    model = build_model(model_config)
    log(f"model {preset}: {count_parameters(model):,} parameters; threads {torch.get_num_threads()}; "
        f"run folder {out}")
    n = world_size()
    log(f"global token budget {max_tokens} = {max_tokens / n:g} per process x {n} process{'es' if n > 1 else ''}; "
        f"x {cfg.grad_accum} accumulation" + ("; FSDP2" if cfg.fsdp else "; DDP" if n > 1 else ""))
    mt_options = {"valid": None if opts["valid"] is None else recorded_path(str(opts["valid"]), pairs=True),
                  **{k: opts[k] for k in ("vocab_size", "max_tokens", "max_len", "label_smoothing", "strict", "bleu",
                                          "bleu_sentences", "word_dropout", "anneal_share")},
                  "anneal_data": (None if opts["anneal_data"] is None
                                  else recorded_path(opts["anneal_data"], pairs=True)),
                  **({"anneal_replay": opts["anneal_replay"]} if opts["anneal_replay"] else {}),
                  **({"average_last": opts["average_last"]} if opts["average_last"] else {}),  # reused on resume
                  **({"reverse": True} if opts["reverse"] else {}),  # absent when off: older runs read the same
                  **({k: opts[k] for k in ("synthetic", "synthetic_ratio")} if opts["synthetic"] else {})}
    extra = {"kind": "mt", "data": recorded_path(str(data), pairs=True), "preset": preset,
             "tokenizer": task.tokenizer.to_dict(), "mt_options": mt_options, "data_stats": data_stats}
    trainer = Trainer(model, task, cfg, out, model_config=model_config, extra=extra, resume=o.resume,
                      progress=o.progress, log=lines)
    with resume_hint("train mt", out):  # Ctrl-C / SIGTERM: Interrupted, with the checkpoint and this command
        summary = trainer.fit()
    if not is_main_process():  # rank 0 reports, averages and scores; the other processes are done
        return RunResult(out, summary)
    log(done_line(summary, f"run folder {out}"))
    if opts["bleu"] and summary.get("best_checkpoint"):
        _score_best(task, summary, out, log)
    if opts["average_last"] > 0:  # last: a run with too few checkpoints to average has its final scores
        from attnkit.checkpoints.averaging import average_last_checkpoints

        avg = average_last_checkpoints(out, opts["average_last"])
        ev = json.loads((avg / "state.json").read_text()).get("averaged_from", [])
        log(f"averaged {len(ev)} checkpoints into {avg} (use --ckpt {avg})")
    return RunResult(out, summary)
