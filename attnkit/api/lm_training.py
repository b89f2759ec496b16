"""``train_lm``: train a decoder-only language model (a GPT) on a text corpus with the one training loop.

    from attnkit.api import TrainLMOptions, train_lm
    result = train_lm(TrainLMOptions(data="shakespeare", preset="char-small", max_time=3, out="runs/char"))
    result.out, result.summary["valid_loss"]

What happens, in order: the options are checked (a bad preset or override, a bad ``out``, and on resume a changed
setting or a spent budget fail before the corpus is read and a tokenizer trained); the corpus is tokenized into
token stores on disk, streaming, or the stores of an earlier run are reused (``--data``: a recipe name or a local
text file or folder; under torchrun rank 0 builds, the others wait and open the same files);
the preset is sized to the tokenizer and block size; the :class:`~attnkit.training.Trainer` runs
(``attnkit train lm`` is this function). There are no tensor axes in this file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from attnkit.data.corpora.registry import is_recipe

from .interruption import resume_hint
from .launcher import world_size
from .options import (Log, RunResult, TrainOptions, check_out, check_vocab_size, default_log, done_line,
                      recorded_path, refuse_changed, refuse_changed_config, refuse_spent_resume, resumed_model_config,
                      same_path, same_tokenizer, scaled_min_lr, train_config, train_values)

__all__ = ["TrainLMOptions", "train_lm", "describe_batch"]


@dataclass
class TrainLMOptions(TrainOptions):
    """Options of :func:`train_lm` (and ``attnkit train lm``): :class:`TrainOptions` plus the data.

    Attributes:
        data: a recipe name (``shakespeare``, ``fortunes``) or a local UTF-8 file or folder of ``.txt`` files
            (None: ``shakespeare``, or the resumed run's).
        tokenizer: ``char`` (default), ``bpe`` (trained on the data, ``vocab_size`` tokens), ``gpt2``, or a
            tokenizer JSON file.
        vocab_size: the BPE vocabulary size. block_size: the context length T.
        stop_at_loss: stop at the first evaluation whose validation loss is at or below this (``stopped_by``
            "target"; the summary's ``target`` holds its step and time).
        schedule_steps: the cosine schedule's length in updates (default: ``steps``, or the time budget with
            ``max_time`` alone): a time budget then ends the run without stretching the schedule.
        recipe: a named recipe (:data:`attnkit.recipes.LM_RECIPES`, e.g. ``shakespeare-char-gpu``) whose values
            fill every field left unset (``--recipe``); a new run only.

    ``overrides`` (``--set``) may not hold ``block_size`` (use ``block_size``, ``--block-size``); a ``vocab_size``
    there pads the model's vocabulary past the tokenizer's (GPT-2's 50304, a multiple of 64), never below it. A
    local ``data`` file or folder is recorded as its absolute path; resuming, ``data``, ``preset``, ``tokenizer``
    and ``vocab_size`` may be given only with the run's own values.
    """

    data: str | None = None
    tokenizer: str | None = None
    vocab_size: int | None = None
    block_size: int | None = None
    stop_at_loss: float | None = None
    schedule_steps: int | None = None
    recipe: str | None = None

    def with_recipe(self) -> "TrainLMOptions":
        """These options with the values of :attr:`recipe` (:data:`attnkit.recipes.LM_RECIPES`) in every field
        left unset; the recipe's model overrides under those given. Without a recipe, the options themselves."""
        if self.recipe is None:
            return self
        from attnkit.recipes import LM_RECIPES

        recipe = scaled_min_lr(LM_RECIPES[self.recipe], self.lr, self.min_lr)
        changes = {k: v for k, v in recipe.items() if k != "overrides" and getattr(self, k) is None}
        return self.replace(**changes, overrides={**recipe.get("overrides", {}), **self.overrides})

    def _check(self) -> None:
        super()._check()
        from attnkit.recipes import LM_RECIPES

        if self.recipe is not None and self.recipe not in LM_RECIPES:
            raise ValueError(f"TrainLMOptions.recipe must be one of {', '.join(sorted(LM_RECIPES))}, "
                             f"got {self.recipe!r}")
        if self.recipe is not None and self.resume:
            raise ValueError("TrainLMOptions.recipe starts a run; resume=True continues one with the settings it "
                             "was started with")
        if "block_size" in self.overrides:
            raise ValueError(f"train lm sets the model's block_size from --block-size (block_size=), got --set "
                             f"block_size={self.overrides['block_size']!r}: use --block-size "
                             f"{self.overrides['block_size']!r}")
        check_vocab_size(self.vocab_size, specials=None if self.resume else 1)  # <|endoftext|>
        if self.vocab_size is not None and not self.resume and (self.tokenizer or "char") != "bpe":
            raise ValueError(f"--vocab-size sizes a BPE trained on the data (--tokenizer bpe); --tokenizer "
                             f"{self.tokenizer or 'char'!r} brings its own vocabulary, got --vocab-size "
                             f"{self.vocab_size}")


def describe_batch(cfg: Any) -> str:
    """``global batch 24 = 12 per process x 2 processes; x 2 accumulation = 48 per update``; rows that do not
    divide evenly are shared as ``split_batch`` shares them (``global batch 8 = 3 + 3 + 2 per process x 3 ...``)."""
    n = world_size()
    base, rest = divmod(cfg.batch_size, n)
    per = str(base) if rest == 0 else " + ".join(str(base + (r < rest)) for r in range(n))
    return (f"global batch {cfg.batch_size} = {per} per process x {n} process{'es' if n > 1 else ''}; x "
            f"{cfg.grad_accum} accumulation = {cfg.batch_size * cfg.grad_accum} per update"
            + ("; FSDP2" if cfg.fsdp else "; DDP" if n > 1 else ""))


def _rank0_first(fn: Callable[[bool], Any], device: str | None) -> Any:
    """``fn(True)`` in one process; under torchrun, ``fn(True)`` on rank 0 first (it builds the token stores) and
    ``fn(False)`` on the other ranks once rank 0 is done (they open the same files): the process group is joined
    here, and rank 0's outcome, sent to every rank, is the barrier (an error there is raised on every rank)."""
    if world_size() == 1:
        return fn(True)
    from attnkit.training import distributed as D
    from attnkit.training.device import resolve_device

    D.init_from_env(resolve_device(device or "auto", local_rank=D.env_local_rank()))
    held: list[Any] = []
    D.on_main(lambda: held.append(fn(True)))
    return held[0] if held else fn(False)


def _saved_tokenizer_options(extra_saved: dict[str, Any]) -> dict[str, Any]:
    """``{"tokenizer", "vocab_size"}`` a run was started with: recorded since they are, else read off the saved
    tokenizer (``char``; a BPE of GPT-2's 50257 tokens is ``gpt2``, another one ``bpe`` of its size)."""
    recorded = extra_saved.get("tokenizer_options")
    if isinstance(recorded, dict) and isinstance(recorded.get("tokenizer"), str):
        return recorded
    tok = extra_saved.get("tokenizer") or {}
    if tok.get("type") == "char":
        return {"tokenizer": "char", "vocab_size": None}
    from attnkit.data.tokenizers.tokenizer import tokenizer_from_dict

    size = tokenizer_from_dict(tok).vocab_size
    return {"tokenizer": "gpt2" if size == 50257 else str(tok.get("type")), "vocab_size": size}


def _check_resumed(o: TrainLMOptions, extra_saved: dict[str, Any]) -> None:
    """Resuming: ``ValueError`` for ``data``, ``preset``, ``tokenizer`` or ``vocab_size`` given with another value
    than the run's (a local path is compared as an absolute path; a tokenizer file by its content)."""
    from attnkit.data.pipeline.lm_dataset import TOKENIZER_KINDS
    from attnkit.data.tokenizers.tokenizer import tokenizer_from_dict

    if o.data is not None and not same_path(o.data, extra_saved.get("data"), is_name=is_recipe):
        raise ValueError(f"--resume: the run was trained on --data {extra_saved.get('data')!r}, got {o.data!r}")
    refuse_changed("--preset", o.preset, extra_saved.get("preset"))
    if o.tokenizer is None and o.vocab_size is None:
        return
    was = _saved_tokenizer_options(extra_saved)
    if o.tokenizer is not None:
        kind = str(o.tokenizer)
        if kind not in TOKENIZER_KINDS and Path(kind).is_file():  # a file: the same tokenizer is fine
            if not same_tokenizer(kind, extra_saved.get("tokenizer")):
                raise ValueError(f"--resume: the run's tokenizer (in its checkpoint; --tokenizer "
                                 f"{was['tokenizer']!r}) differs from the one in --tokenizer {kind!r}")
        elif not same_path(kind, was["tokenizer"], is_name=lambda k: k in TOKENIZER_KINDS):
            refuse_changed("--tokenizer", kind, was["tokenizer"])
    if o.vocab_size is not None:
        actual = tokenizer_from_dict(extra_saved["tokenizer"]).vocab_size  # what a BPE came out as
        if o.vocab_size not in (was.get("vocab_size"), actual):
            refuse_changed("--vocab-size", o.vocab_size, was.get("vocab_size") or actual)


def train_lm(options: TrainLMOptions | None = None, *, log: Log | None = None, **kwargs: Any) -> RunResult:
    """Train (or with ``resume=True`` continue) a language model; returns the run folder and its summary.

    ``options`` or keyword arguments (the fields of :class:`TrainLMOptions`); ``log`` receives the status lines
    and the evaluation lines (default: the status lines to stderr and the evaluation lines to stdout, once per
    torchrun job). Raises ``ValueError`` / ``OSError`` with one clear message for bad
    options, data or run folders, before anything is written. SIGINT / SIGTERM during training: the run stops
    after the update under way with a checkpoint and raises :class:`~attnkit.training.preemption.Interrupted`
    (a ``KeyboardInterrupt``), whose ``resume_command`` continues it (``attnkit train lm --out DIR --resume``).
    """
    import torch

    from attnkit.checkpoints.runs import default_run_folder, read_saved_run
    from attnkit.data.pipeline.lm_dataset import TOKENIZER_KINDS, prepare_lm_data
    from attnkit.data.tokenizers.tokenizer import tokenizer_from_dict
    from attnkit.models.builders import build_model
    from attnkit.models.configs import GPTConfig
    from attnkit.models.params import count_parameters
    from attnkit.models.presets import get_preset
    from attnkit.recipes import LM_DEFAULTS
    from attnkit.training import LMTask, Trainer, seed_everything

    o = TrainLMOptions.make(options, kwargs).with_recipe()
    lines = True if log is None else log  # the trainer's evaluation lines: stdout, or the caller's log
    log = default_log(log)
    check_out(o)
    saved = read_saved_run(o.out) if o.resume else None
    extra_saved = (saved or {}).get("extra", {})
    data = o.data or extra_saved.get("data") or "shakespeare"
    preset = o.preset or extra_saved.get("preset") or "char-small"
    if saved is not None:
        started = {"mt": "attnkit train mt"}.get(extra_saved.get("kind"), "attnkit finetune"
                                                 if extra_saved.get("task") == "finetune" else None)
        if started is not None:  # its own command keeps what `train lm` does not know (documents, prompting)
            raise ValueError(f"--resume: {o.out} is not a `train lm` run; continue it with `{started} --out "
                             f"{o.out} --resume`")
        _check_resumed(o, extra_saved)
    given = train_values(o, block_size=o.block_size)
    given.update({k: getattr(o, k) for k in ("stop_at_loss", "schedule_steps") if getattr(o, k) is not None})
    cfg = train_config(scaled_min_lr(LM_DEFAULTS, o.lr, o.min_lr), saved.get("train_config") if saved
                               else None, given)

    if saved is not None:
        refuse_changed_config(cfg, saved)
        refuse_spent_resume(o.out, saved, cfg)
        tokenizer = tokenizer_from_dict(extra_saved["tokenizer"])
        model_config = resumed_model_config(saved, o.overrides)
    else:
        tokenizer = o.tokenizer or "char"
        model_config = None
        # a bad preset or override fails now, before the corpus is read and a tokenizer trained
        if not isinstance(get_preset(preset), GPTConfig):
            raise ValueError(f"train lm needs a decoder-only (GPT) preset, {preset!r} is an encoder-decoder")
        get_preset(preset, block_size=cfg.block_size, **o.overrides)
    lm = _rank0_first(lambda first: prepare_lm_data(data, tokenizer, block_size=cfg.block_size, vocab_size=o.vocab_size,
                                                    show_progress=o.progress and first, verify=first), cfg.device)
    if model_config is None:
        model_config = get_preset(preset, **{"vocab_size": lm.tokenizer.vocab_size, "block_size": cfg.block_size,
                                             **o.overrides})
        if model_config.vocab_size < lm.tokenizer.vocab_size:  # an id past the embedding would fail inside torch
            raise ValueError(f"--set vocab_size must be >= the tokenizer's {lm.tokenizer.vocab_size:,} tokens (a "
                             f"larger one pads the vocabulary), got {model_config.vocab_size:,}")
    out = o.out or default_run_folder("lm", data, preset)

    seed_everything(cfg.seed)  # reproducible initialisation
    model = build_model(model_config)
    task = LMTask(lm.train, lm.valid, block_size=cfg.block_size, batch_size=cfg.batch_size, seed=cfg.seed)
    log(f"data {data}: {lm.train.numel():,} train / {lm.valid.numel():,} valid tokens, "
        f"tokenizer {lm.tokenizer.type} (vocab {lm.tokenizer.vocab_size:,})")
    for note in lm.notes:
        log(note)
    log(f"model {preset}: {count_parameters(model):,} parameters; threads {torch.get_num_threads()}; "
        f"run folder {out}")
    log(describe_batch(cfg))
    tokenizer_options = extra_saved.get("tokenizer_options") if saved is not None else {
        "tokenizer": recorded_path(str(o.tokenizer or "char"), is_name=lambda kind: kind in TOKENIZER_KINDS),
        "vocab_size": o.vocab_size}  # as asked for (a BPE may come out smaller), compared on resume
    extra = {"kind": "lm", "data": recorded_path(str(data), is_name=is_recipe), "preset": preset,
             "tokenizer": lm.tokenizer.to_dict(), "source": json.loads(json.dumps(lm.source_info, default=str)),
             **({"tokenizer_options": tokenizer_options} if isinstance(tokenizer_options, dict) else {})}
    trainer = Trainer(model, task, cfg, out, model_config=model_config, extra=extra, resume=o.resume,
                      progress=o.progress, log=lines)
    with resume_hint("train lm", out):  # Ctrl-C / SIGTERM: Interrupted, with the checkpoint and this command
        summary = trainer.fit()
    log(done_line(summary, f"run folder {out}"))
    return RunResult(Path(out), summary)
