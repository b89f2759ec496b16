"""``finetune``: continue training a pretrained decoder on your text, fully or with LoRA adapters.

    from attnkit.api import FinetuneOptions, finetune
    finetune(FinetuneOptions(source="smollm2-135m-instruct", data="fortunes", lora=True, max_time=20,
                             out="runs/ft"))

It is the one training loop of :func:`~attnkit.api.train_lm` (``Trainer`` + ``LMTask``) with four differences:

* the model and its tokenizer come from ``source`` (``--from``): a named pretrained model
  (``smollm2-135m-instruct``), a ``.gguf`` file, an attnkit run/checkpoint folder, or a Hugging Face folder
  (``config.json`` + ``model.safetensors``, tokenizer from ``tokenizer.json`` or ``tokenizer``). Pickled weights
  are refused.
* the corpus is encoded with the model's own tokenizer. Text made of documents -- fortune files, whose entries are
  separated by lines holding only ``%``, or (``documents="blank-line"``) paragraphs separated by blank lines -- is
  split into its documents and each one is followed by the tokenizer's end-of-sequence token (the ``%`` lines
  themselves are dropped), so the model learns where a text ends and sampling stops there.
* a low learning rate by default (5e-5 full, 1e-3 LoRA), no weight decay, block size 256.
* ``lora=True``: the pretrained weights stay frozen and low-rank adapters train (:mod:`attnkit.modules.lora`).

Checkpoints (see :func:`attnkit.training.lora_run.finalize_lora_run`): with LoRA the step checkpoints hold the
frozen weights plus the adapters (``...qkv_proj.lora_A`` / ``lora_B``), which is what an exact resume needs; when
the run ends (or stops on SIGINT / SIGTERM with a checkpoint, or on an error; not when a second signal stops it at
once), ``checkpoints/best`` is rewritten with the adapters merged into the weights, so it
is a plain GPT checkpoint that ``attnkit sample --ckpt DIR`` (and ``finetune --from DIR``) loads like any other.
Every checkpoint's ``extra`` holds ``kind: "lm"``, the tokenizer, the chat template (if the model has one), the
source model's prompting conventions (``prompting``: ``add_bos_token``, prompts start with ``<bos>``, and
``stop_token_ids``, the ids that end a generation; so ``attnkit sample --ckpt`` prompts and stops the fine-tuned
model as it did the source), the data and the LoRA settings; a local ``--data`` or ``--from`` as its absolute
path, so that ``--resume`` works from any working directory (a ``--data`` or ``--from`` given on resume must name
the same file or name as the run's, a ``--tokenizer`` the same tokenizer).

There are no tensor axes in this file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from attnkit.data.corpora.registry import is_recipe
from attnkit.data.pipeline.documents import DOCUMENT_MODES
from attnkit.recipes import FT_DEFAULTS, LORA_LR

from .interruption import resume_hint
from .launcher import is_main_process
from .options import (Log, RunResult, TrainOptions, check_out, default_log, done_line, recorded_path,
                      refuse_changed_config, refuse_spent_resume, resumed_model_config, same_path, scaled_min_lr,
                      train_config, train_values)

__all__ = ["FinetuneOptions", "finetune", "lora_settings"]

# what a resumed fine-tune may change (finetune takes no --stop-at-loss)
_MAY_CHANGE = "only --steps, --max-time, --device, --activation-checkpointing and --loss-chunks may change"


@dataclass
class FinetuneOptions(TrainOptions):
    """Options of :func:`finetune` (and ``attnkit finetune``): :class:`TrainOptions` plus the source model, the
    data and LoRA. ``overrides`` may only change ``dropout`` (the architecture is the pretrained one's).

    Attributes:
        source: what to fine-tune (``--from``; not needed when resuming).
        data: a recipe name (``fortunes``, ``shakespeare``) or a UTF-8 text file or folder.
        documents: ``auto`` (fortune if the train text has lines holding only ``%``, else none), ``fortune``,
            ``blank-line`` or ``none``: how the text splits into documents, each followed by the EOS token.
        tokenizer: the tokenizer of a Hugging Face folder without ``tokenizer.json`` (resuming: only the run's).
        block_size: the context length T (default 256; at most the model's own, its config's ``block_size``).
        lora: train low-rank adapters instead of all weights; lora_rank (8), lora_alpha (16), lora_dropout (0),
            lora_targets (``qkv_proj out_proj``; also ``w_in w_gate w_out``).
    """

    source: str | None = None
    data: str | None = None
    documents: str | None = None
    tokenizer: str | None = None
    block_size: int | None = None
    lora: bool = False
    lora_rank: int | None = None
    lora_alpha: float | None = None
    lora_dropout: float | None = None
    lora_targets: list[str] | None = None

    def _check(self) -> None:
        super()._check()
        if self.documents not in (None, *DOCUMENT_MODES):
            raise ValueError(f"FinetuneOptions.documents must be one of {list(DOCUMENT_MODES)}, got {self.documents!r}")
        if self.lora_targets is not None and not self.lora_targets:
            raise ValueError("--lora-targets must name at least one module (e.g. qkv_proj out_proj), got an empty list")
        if self.preset is not None:
            raise ValueError("finetune takes the architecture from --from; --preset does not apply")
        if self.lora and self.optimizer == "muon":  # said before the model is loaded and the data encoded
            raise ValueError("--optimizer muon orthogonalizes the trainable nn.Linear weights, and with --lora only "
                             "the adapters train (plain parameters): use --optimizer adamw, or drop --lora")
        bad = sorted(set(self.overrides) - {"dropout"})
        if bad:
            raise ValueError(f"finetune can only --set dropout (the architecture is the pretrained one's), got {bad}")


def lora_settings(o: FinetuneOptions, saved: dict[str, Any] | None, resuming: bool) -> dict[str, Any] | None:
    """The run's LoRA settings (None for full fine-tuning). On resume they come from the checkpoint and any
    LoRA option given must agree with them."""
    given = {"rank": o.lora_rank, "alpha": o.lora_alpha, "dropout": o.lora_dropout,
             "targets": None if o.lora_targets is None else list(o.lora_targets)}
    if resuming:
        if saved is None:
            if o.lora or any(v is not None for v in given.values()):
                raise ValueError("--resume: the run is a full fine-tune; drop the --lora flags")
            return None
        keys = ("rank", "alpha", "dropout", "targets")
        if not isinstance(saved, dict) or any(k not in saved for k in keys):
            raise ValueError(f"--resume: the checkpoint's extra.lora must hold {', '.join(keys)}, got {saved!r}")
        saved = {k: saved[k] for k in keys}
        for key, value in given.items():
            if value is None or value == saved[key]:
                continue
            if not (key == "targets" and isinstance(saved[key], list) and set(value) == set(saved[key])):
                # (the same layers named in another order are the same adapters)
                raise ValueError(f"--resume: --lora-{key} must stay {saved[key]!r} (the run's), got {value!r}")
        return saved
    if not o.lora:
        used = [f"--lora-{k}" for k, v in given.items() if v is not None]
        if used:
            raise ValueError(f"{', '.join(used)} only apply with --lora")
        return None
    from attnkit.modules.lora import DEFAULT_TARGETS

    return {"rank": 8 if o.lora_rank is None else o.lora_rank,
            "alpha": 16.0 if o.lora_alpha is None else float(o.lora_alpha),
            "dropout": 0.0 if o.lora_dropout is None else float(o.lora_dropout),
            "targets": list(o.lora_targets or DEFAULT_TARGETS)}


def _defaults(o: FinetuneOptions, lora: dict | None) -> dict[str, Any]:
    d = dict(FT_DEFAULTS)
    if lora is not None:
        d.update(lr=LORA_LR, min_lr=LORA_LR / 10)
    return scaled_min_lr(d, o.lr, o.min_lr, always=True)


def _is_pretrained(name: str) -> bool:
    """Whether ``--from NAME`` is a named pretrained model (a name wins over a local path)."""
    from attnkit.interop.pretrained import pretrained_names

    return name in pretrained_names()


def _same_tokenizer_file(path: str, extra_saved: dict[str, Any]) -> bool:
    """Whether the tokenizer file ``path``, read as a new run reads ``--tokenizer`` (a Hugging Face
    ``tokenizer.json`` with the roles of the ``--from`` folder's ``tokenizer_config.json``), is the run's."""
    from attnkit.interop.load import _load_tokenizer_file

    source = Path(extra_saved["from"])
    tokenizer, _ = _load_tokenizer_file(Path(path), source if source.is_dir() else None)
    return json.loads(json.dumps(tokenizer.to_dict())) == extra_saved.get("tokenizer")


def _run_inputs(o: FinetuneOptions, saved: dict | None) -> tuple[dict | None, str, str, str]:
    """``(lora settings or None, data, documents, source)``: the resumed run's, checked against the options,
    or the options', checked for completeness."""
    if saved is not None:
        extra_saved = saved.get("extra", {})
        if extra_saved.get("task") != "finetune":
            raise ValueError(f"--resume: {o.out} is not a finetune run (continue it with the command that "
                             f"started it)")
        for key in ("from", "data"):
            if not isinstance(extra_saved.get(key), str):
                raise ValueError(f"--resume: the checkpoint of {o.out} must name its {key!r} in extra (a string), "
                                 f"got {extra_saved.get(key)!r}")
        for flag, key, value, is_name in (("--from", "from", o.source, _is_pretrained),
                                          ("--data", "data", o.data, is_recipe)):
            if value is not None and not same_path(value, extra_saved[key], is_name=is_name):
                raise ValueError(f"--resume: the run used {flag} {extra_saved[key]!r}, got {value!r}")
        if o.tokenizer is not None and not _same_tokenizer_file(o.tokenizer, extra_saved):
            raise ValueError(f"--resume: the run's tokenizer (in its checkpoint) differs from the one in --tokenizer "
                             f"{o.tokenizer!r}")
        documents = None if o.documents == "auto" else o.documents
        if documents is not None and documents != extra_saved.get("documents"):
            raise ValueError(f"--resume: the run used --documents {extra_saved.get('documents')!r}, got {documents!r}")
        lora = lora_settings(o, extra_saved.get("lora"), resuming=True)
        return lora, extra_saved["data"], extra_saved.get("documents", "none"), extra_saved["from"]
    if o.source is None or o.data is None:
        raise ValueError("finetune needs --from MODEL and --data DATA (or --resume --out DIR)")
    if o.out is None:
        raise ValueError("finetune needs --out DIR (the run folder)")
    _refuse_out_at_source(o.out, o.source)
    if o.steps is None and o.max_time is None:
        raise ValueError("finetune needs a length: --steps N or --max-time MIN (a 135M-parameter model does "
                         "a few hundred steps an hour on a laptop CPU)")
    return lora_settings(o, None, resuming=False), o.data, o.documents or "auto", o.source


def _refuse_out_at_source(out: str | Path, source: str) -> None:
    """``ValueError`` when the run folder ``out`` is the ``--from`` folder, lies inside it or holds it: the run's
    files would go among the source model's (a Hugging Face folder's ``config.json`` ...), and a later ``--from``
    would read the run instead of the model."""
    if _is_pretrained(source) or not Path(source).is_dir():
        return
    src, run = Path(source).resolve(), Path(out).resolve()
    if run == src or src in run.parents or run in src.parents:
        where = "is" if run == src else "is inside" if src in run.parents else "contains"
        raise ValueError(f"--out {out} {where} the --from folder {source}: the run would write among the source "
                         f"model's files; expected a run folder outside it, e.g. --out "
                         f"{src.parent / (src.name + '-ft')}")


def _stored_dtype(root: Path) -> Any:
    """The float dtype the latest checkpoint under ``root`` stores its weights in (None: none, several, or no
    ``model.safetensors``, as in a sharded checkpoint)."""
    from attnkit.checkpoints.checkpoint import MODEL_FILE, latest_checkpoint, stored_float_dtype

    latest = latest_checkpoint(root)
    return None if latest is None or not (latest / MODEL_FILE).is_file() else stored_float_dtype(latest / MODEL_FILE)


def _source_model(o: FinetuneOptions, saved: dict | None, source: str, seed: int):
    """``(model, model_config, tokenizer, chat_template, description, add_bos, stop_ids)`` of the model to
    fine-tune.

    Resuming, everything comes back from the checkpoint: the architecture (the trainer loads the weights into
    the fresh model), the tokenizer, the chat template, whether prompts start with ``<bos>`` and the stop ids.
    Otherwise ``source`` is loaded (a decoder-only GPT).
    """
    from attnkit.checkpoints.load import _checked_extra
    from attnkit.data.tokenizers.tokenizer import tokenizer_from_dict
    from attnkit.interop.load import load_model
    from attnkit.models.builders import build_model
    from attnkit.models.configs import GPTConfig
    from attnkit.training import seed_everything

    if saved is not None:
        extra_saved = saved.get("extra", {})
        checked = _checked_extra(extra_saved, Path(o.out) / "checkpoints")  # add_bos_token, stop_token_ids checked
        model_config = resumed_model_config(saved, o.overrides)
        was = saved["model_config"]
        changed = {k: v for k, v in o.overrides.items() if k in was and v != was[k]}
        if changed:  # before the trainer, whose message lists train lm's flags
            raise ValueError("--resume: the run was trained with " + "; ".join(
                f"--set {k}={was[k]!r}, got {k}={v!r}" for k, v in changed.items())
                + f" (a resumed run keeps its settings; {_MAY_CHANGE})")
        seed_everything(seed)
        model = build_model(model_config)  # the trainer loads the latest checkpoint's weights into it
        dtype = _stored_dtype(Path(o.out) / "checkpoints")
        model = model if dtype is None else model.to(dtype)  # a bf16 run goes on in bf16, exactly as it would have
        return (model, model_config, tokenizer_from_dict(extra_saved["tokenizer"]), extra_saved.get("chat_template"),
                extra_saved.get("from_description", source), checked.get("add_bos_token") is True,
                checked.get("stop_token_ids") or None)
    loaded = load_model(source, tokenizer_file=o.tokenizer, progress=o.progress)  # --no-progress: no GGUF bar
    model = loaded.model
    model_config = getattr(model, "config", None)
    if not isinstance(model_config, GPTConfig):
        raise ValueError(f"--from {source}: finetune needs a decoder-only GPT, got {type(model).__name__}")
    if o.overrides:  # dropout modules hold their p: rebuild the module tree around the loaded weights
        model_config = model_config.replace(**o.overrides)
        fresh = build_model(model_config)
        fresh.load_state_dict(model.state_dict())
        model = fresh
    return (model, model_config, loaded.tokenizer, loaded.chat_template, loaded.description, bool(loaded.add_bos),
            loaded.stop_ids)


def finetune(options: FinetuneOptions | None = None, *, log: Log | None = None, **kwargs: Any) -> RunResult:
    """Fine-tune (or with ``resume=True`` continue fine-tuning) a pretrained decoder; returns the run folder and
    its summary. With LoRA, ``checkpoints/best`` holds the adapters merged into the weights at the end (also
    after an interruption).

    SIGINT / SIGTERM during training: the run stops after the update under way with a checkpoint and raises
    :class:`~attnkit.training.preemption.Interrupted`, whose ``resume_command`` continues it
    (``attnkit finetune --out DIR --resume``)."""
    import torch

    from attnkit.checkpoints.runs import read_saved_run
    from attnkit.data.pipeline.documents import prepare_finetune_data
    from attnkit.models.params import count_parameters
    from attnkit.training import LMTask, Trainer, seed_everything
    from attnkit.training.lora_run import add_lora, finalize_lora_run

    o = FinetuneOptions.make(options, kwargs)
    lines = True if log is None else log  # the trainer's evaluation lines: stdout, or the caller's log
    log = default_log(log)
    check_out(o)
    saved = read_saved_run(o.out) if o.resume else None
    lora, data, documents, source = _run_inputs(o, saved)
    cfg = train_config(_defaults(o, lora), saved.get("train_config") if saved else None,
                               train_values(o, block_size=o.block_size), time_only_schedule="constant")
    if saved is not None:
        refuse_changed_config(cfg, saved, may_change=_MAY_CHANGE)
        refuse_spent_resume(o.out, saved, cfg)
    if cfg.fsdp and lora is not None:
        raise ValueError("--fsdp shards whole models; LoRA trains a few small adapters: use DDP (torchrun "
                         "without --fsdp) for --lora")

    model, model_config, tokenizer, chat_template, what, add_bos, stop_ids = _source_model(o, saved, source, cfg.seed)
    if o.block_size is None and saved is None and cfg.block_size > model_config.block_size:
        # the default (256) is a length, not a demand: a model of a shorter context trains at its own
        cfg = replace(cfg, block_size=model_config.block_size)
        log(f"note: --block-size {cfg.block_size}, the model's context length (the default, "
            f"{FT_DEFAULTS['block_size']}, is longer)")
    if cfg.block_size > model_config.block_size:  # learned positions have no more; RoPE was trained on no more
        raise ValueError(f"--block-size must be <= the model's context length = {model_config.block_size} (its "
                         f"block_size; a Hugging Face folder's max_position_embeddings), got {cfg.block_size}")
    if tokenizer.vocab_size > model_config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model only "
                         f"{model_config.vocab_size} embeddings: they do not belong together")

    train_ids, valid_ids, data_info = prepare_finetune_data(data, tokenizer, documents, add_bos=bool(add_bos))
    for split, ids in (("train", train_ids), ("valid", valid_ids)):
        if ids.numel() < cfg.block_size + 1:  # one window and its next-token targets
            raise ValueError(f"--data {data}: the {split} split holds {ids.numel()} tokens (in the model's tokenizer), "
                             f"expected at least --block-size + 1 = {cfg.block_size + 1}: give more text or a smaller "
                             f"--block-size")
    total = count_parameters(model)
    seed_everything(cfg.seed)  # the adapters' random A matrices are part of the run's reproducible start
    trainable = add_lora(model, lora) if lora is not None else total
    model.train()
    task = LMTask(train_ids, valid_ids, block_size=cfg.block_size, batch_size=cfg.batch_size, seed=cfg.seed)
    log(f"model {what}: {total:,} parameters, {trainable:,} trainable"
        + (f" (LoRA r={lora['rank']} alpha={lora['alpha']:g} on {', '.join(lora['targets'])})" if lora else "")
        + f"; threads {torch.get_num_threads()}")
    log(f"data {data}: {train_ids.numel():,} train / {valid_ids.numel():,} valid tokens "
        f"(documents: {data_info['documents']}); run folder {o.out}")

    extra: dict[str, Any] = {"kind": "lm", "task": "finetune", "from_description": what,
                             # local files as absolute paths: the run resumes from any working directory
                             "from": recorded_path(str(source), is_name=_is_pretrained),
                             "data": recorded_path(str(data), is_name=is_recipe),
                             "documents": data_info["documents"] if saved is None else documents,
                             "tokenizer": tokenizer.to_dict(), "source": data_info["source"]}
    if chat_template:
        extra["chat_template"] = chat_template
    # the source model's prompt conventions, for `sample --ckpt` (checkpoints.load reads them back)
    extra["prompting"] = {"add_bos_token": bool(add_bos), "stop_token_ids": [int(i) for i in stop_ids or []]}
    if lora is not None:
        extra["lora"] = dict(lora, merged=False)
    trainer = Trainer(model, task, cfg, o.out, model_config=model_config, extra=extra, resume=o.resume,
                      progress=o.progress, log=lines)
    at_once = False  # a second signal (or a third Ctrl-C) wants out now: no merge then
    try:
        with resume_hint("finetune", o.out):  # Ctrl-C / SIGTERM: Interrupted, with the checkpoint and this command
            summary = trainer.fit()
    except KeyboardInterrupt as stop:
        at_once = getattr(stop, "immediate", True)
        raise
    finally:
        if lora is not None and is_main_process() and not at_once:  # also after a stop with a checkpoint or an
            finalize_lora_run(o.out)  # error: leave a best/ that `attnkit sample` can load
    log(done_line(summary, f"sample with: attnkit sample --ckpt {o.out}"))
    return RunResult(Path(o.out), summary)
