"""Loading a model back: one :func:`load` for every consumer of an attnkit checkpoint, one result type for every
source of a model.

:func:`load` reads an attnkit run folder (its ``checkpoints/best``, or the latest step checkpoint) or a
checkpoint folder: it rebuilds the model from ``state.json``'s config, loads the safetensors weights (a LoRA
step checkpoint's adapters are merged on the way in), and rebuilds the tokenizer. ``attnkit sample``,
``translate``, ``eval``, ``viz``, ``trace`` and ``finetune --from`` all come through here; so does the score of
``train mt``'s best checkpoint. Models from elsewhere (named pretrained models, GGUF files, Hugging Face
folders) are loaded by :mod:`attnkit.interop.load` into the same :class:`LoadedModel`.

Nothing is unpickled: the weights are safetensors, everything else JSON. There are no tensor axes in this file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .checkpoint import CheckpointError, build_checkpoint_model, load_checkpoint, read_checkpoint_state
from .runs import resolve_checkpoint

__all__ = ["KINDS", "LoadedModel", "load", "checkpoint_kind", "checkpoint_identity"]

KINDS = {"lm": "a language model (decoder-only GPT)", "mt": "a translation model (encoder-decoder)"}


@dataclass
class LoadedModel:
    """A model ready to use, with what is needed to prompt it.

    Attributes:
        model: the model, in eval mode, on the CPU unless asked otherwise, in the floating point dtype its
            weights were saved in.
        tokenizer: its tokenizer (None only from ``load(..., require_tokenizer=False)``).
        chat_template: the chat template text, or None.
        chat_source: what :func:`attnkit.data.tokenizers.chat_template.apply_chat_template` takes (a pretrained
            model's info, or the template text), or None.
        stop_ids: the token ids that end a generation (None: none).
        add_bos: prompts start with ``<bos>`` (the model was trained so).
        description: one line saying what was loaded.
        state: the checkpoint's parsed ``state.json`` (empty for models that do not come from attnkit).
        path: the checkpoint folder read (None for models that do not come from attnkit).
    """

    model: Any
    tokenizer: Any
    chat_template: str | None = None
    chat_source: Any = None
    stop_ids: list[int] | None = None
    add_bos: bool = False
    description: str = ""
    state: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def extra(self) -> dict[str, Any]:
        """The checkpoint's ``extra`` (kind, tokenizer, data, options the run was started with)."""
        return self.state.get("extra") or {}

    def format_chat(self, text: str, system: str | None = None, history: Sequence[dict[str, str]] = ()) -> str:
        """``text`` as a user turn in the model's chat template, after the earlier ``history`` turns (``{"role":
        "user"|"assistant", "content": ...}``) and a ``system`` turn before them when one is given (else the
        template's own default, if it has one), ending with the header of the assistant's answer; rendered as
        ``transformers`` renders it (the template sees the tokenizer's ``bos_token`` / ``eos_token`` strings).
        ValueError if the model has no template, or a template that cannot be rendered (also one that refuses a
        system turn)."""
        from attnkit.data.tokenizers.chat_template import apply_chat_template

        if self.chat_source is None:
            raise ValueError("--chat and --interactive need a model with a chat template (e.g. --model "
                             "smollm2-135m-instruct)")
        turns = [] if system is None else [{"role": "system", "content": system}]
        return apply_chat_template(self.chat_source, [*turns, *history, {"role": "user", "content": text}],
                                   bos_token=self._token_text("bos_id"), eos_token=self._token_text("eos_id"))

    def _token_text(self, role: str) -> str | None:
        """The spelling of the tokenizer's ``bos_id`` / ``eos_id`` token (None when it has none)."""
        tid = getattr(self.tokenizer, role, None)
        if tid is None:
            return None
        try:
            return self.tokenizer.id_to_token(tid)
        except ValueError:  # an id past the vocabulary: the template gets no such token
            return None

    def encode_prompt(self, text: str) -> list[int]:
        """``text`` as the model reads a prompt: its token ids, after a ``<bos>`` where the model was trained
        with one (``add_bos``) and the text does not start with it already. ``""`` gives ``[]`` or ``[<bos>]``."""
        ids = self.tokenizer.encode(text) if text else []
        bos = self.tokenizer.bos_id
        if self.add_bos and bos is not None and (not ids or ids[0] != bos):
            ids = [bos] + ids
        return ids


def checkpoint_kind(state: dict[str, Any]) -> str:
    """``"lm"`` or ``"mt"``: what a checkpoint holds (``extra.kind``, else judged from its model config)."""
    extra = state.get("extra") or {}
    config = state.get("model_config") or {}
    guess = "mt" if isinstance(config, dict) and config.get("model_type") == "transformer" else "lm"
    return (extra.get("kind") if isinstance(extra, dict) else None) or guess


_PROMPTING_RULES = {"add_bos_token": (lambda v: isinstance(v, bool), "true or false"),
                    "stop_token_ids": (lambda v: isinstance(v, list) and all(type(i) is int and i >= 0 for i in v),
                                       "a list of token ids")}


def _checked_extra(extra: dict[str, Any], file: Path) -> dict[str, Any]:
    """``extra``'s entries that :func:`load` reads, with the types it needs (CheckpointError otherwise).

    The prompting conventions (``add_bos_token``, ``stop_token_ids``) may sit at the top of ``extra`` or in its
    ``prompting`` object (where ``attnkit finetune`` records the source model's: checkpoint ``extra`` values
    are strings or objects); the top-level entry wins."""
    rules = {"kind": (lambda v: isinstance(v, str) and v in KINDS, f"one of {sorted(KINDS)}"),
             "tokenizer": (lambda v: isinstance(v, dict), "an object"),
             "chat_template": (lambda v: isinstance(v, str), "a string"),
             "prompting": (lambda v: isinstance(v, dict), "an object"),
             **_PROMPTING_RULES}
    for key, (ok, expected) in rules.items():
        if extra.get(key) is not None and not ok(extra[key]):
            raise CheckpointError(f"{file}: extra.{key} must be {expected}, got {str(extra[key])[:60]!r}")
    prompting = extra.get("prompting") or {}
    for key, (ok, expected) in _PROMPTING_RULES.items():
        if prompting.get(key) is not None and not ok(prompting[key]):
            raise CheckpointError(f"{file}: extra.prompting.{key} must be {expected}, "
                                  f"got {str(prompting[key])[:60]!r}")
    merged = dict(extra)
    for key in _PROMPTING_RULES:
        if merged.get(key) is None and prompting.get(key) is not None:
            merged[key] = prompting[key]
    return merged


def _check_tokenizer_fits(tokenizer: Any, config: Any, file: Path) -> None:
    """Every id of ``tokenizer`` has an embedding in the model of ``config`` (its vocabulary may be larger: padded),
    else :class:`CheckpointError` naming both sizes."""
    if tokenizer is None:
        return
    for key in ("vocab_size", "src_vocab_size", "tgt_vocab_size"):
        size = getattr(config, key, None)
        if size is not None and tokenizer.vocab_size > size:
            raise CheckpointError(f"{file}: extra.tokenizer has {tokenizer.vocab_size} tokens but the model_config's "
                                  f"{key} is {size}: they do not belong together")


def load(path: str | Path, *, expect_kind: str | None = None, prefer: str = "best",
         device: str | torch.device = "cpu", require_tokenizer: bool = True) -> LoadedModel:
    """Rebuild the model of an attnkit checkpoint, load its weights and its tokenizer.

    Args:
        path: a checkpoint folder, or a run folder (its ``checkpoints/best``, else its latest step checkpoint;
            ``prefer="latest"`` the other way round).
        expect_kind: ``"lm"`` or ``"mt"``: refuse a checkpoint of the other kind with a clear error
            (e.g. a language model passed to ``attnkit translate``).
        device: where the weights are loaded.
        require_tokenizer: refuse a checkpoint without a tokenizer (text could not be encoded); with False its
            ``tokenizer`` is None.

    Raises:
        FileNotFoundError: no checkpoint at ``path``.
        CheckpointError: a checkpoint that is incomplete, corrupt, or not attnkit's.
        ValueError: the wrong kind, or no tokenizer.

    A run that is training may replace its ``best/`` or prune a step checkpoint while it is read: the files
    must all come from one folder that stayed in place, else the checkpoint is resolved and read again.
    """
    if expect_kind not in (None, *KINDS):
        raise ValueError(f"expect_kind must be None, 'lm' or 'mt', got {expect_kind!r}")
    seen = _current(path, prefer)
    for attempt in range(_ATTEMPTS):
        try:
            ckpt = resolve_checkpoint(path, prefer=prefer)
            before = checkpoint_identity(ckpt)
            loaded = _load_folder(path, ckpt, expect_kind, device, require_tokenizer)
        except (OSError, CheckpointError):  # also a checkpoint replaced or pruned while it was read
            now = _current(path, prefer)
            if attempt + 1 == _ATTEMPTS or now == seen:  # nothing moved: the error is the checkpoint's own
                raise
            seen = now
            continue
        seen = _current(path, prefer)
        if before is not None and seen == (ckpt, before):  # every file came from the one folder, in place
            return loaded
    raise CheckpointError(f"{path}: its checkpoint was replaced {_ATTEMPTS} times while it was read (a run saving "
                          f"it all the time?); try again, or pass one step checkpoint")


# a run that is training replaces checkpoints/best and prunes step_* while a reader reads them: the reader tries again
_ATTEMPTS = 5


def checkpoint_identity(folder: str | Path) -> tuple[int, ...] | None:
    """Which checkpoint sits at ``folder`` now (the folder's and its ``state.json``'s inode, that file's mtime): a
    run that is training publishes a new ``best/`` there by renaming another folder in, and prunes step ones.
    Unchanged by other files written into the folder (an evaluation record). None when unreadable."""
    try:
        st, state = os.stat(folder), os.stat(Path(folder) / "state.json")
    except OSError:
        return None
    return st.st_dev, st.st_ino, state.st_ino, state.st_mtime_ns


def _current(path: str | Path, prefer: str) -> tuple[Path, tuple[int, ...] | None] | None:
    """The checkpoint folder ``path`` resolves to now and its :func:`checkpoint_identity` (None when none
    resolves)."""
    try:
        ckpt = resolve_checkpoint(path, prefer=prefer)
    except (OSError, CheckpointError):
        return None
    return ckpt, checkpoint_identity(ckpt)


def _load_folder(path: str | Path, ckpt: Path, expect_kind: str | None, device: str | torch.device,
                 require_tokenizer: bool) -> LoadedModel:
    """:func:`load` of the checkpoint folder ``ckpt`` (resolved from ``path``)."""
    from attnkit.data.tokenizers.tokenizer import tokenizer_from_dict

    state = read_checkpoint_state(ckpt)
    file = ckpt / "state.json"
    if "model_config" not in state:
        raise CheckpointError(f"{file} has no model_config; it was not written by attnkit train")
    extra = _checked_extra(state.get("extra") or {}, file)
    kind = checkpoint_kind(state)
    if expect_kind is not None and kind != expect_kind:
        raise ValueError(f"{ckpt} holds {KINDS.get(kind, kind)}, but this command needs "
                         f"{KINDS.get(expect_kind, expect_kind)}")
    tok = extra.get("tokenizer")
    if tok is None and require_tokenizer:
        raise ValueError(f"{path} stores no tokenizer, so text cannot be encoded")
    try:
        tokenizer = tokenizer_from_dict(tok) if tok is not None else None
    except ValueError as err:
        raise CheckpointError(f"{file}: extra.tokenizer: {err}") from None
    model = build_checkpoint_model(ckpt, state)  # built once its sizes agree with the weights' header
    _check_tokenizer_fits(tokenizer, model.config, file)
    load_checkpoint(ckpt, model, device=device)
    if isinstance(extra.get("lora"), dict) and not extra["lora"].get("merged", True):
        from attnkit.modules.lora import merge_lora

        merge_lora(model)  # a LoRA step checkpoint: frozen weights + adapters, folded together
    model.eval()
    template = extra.get("chat_template") or None
    eos = getattr(tokenizer, "eos_id", None)
    stop = extra.get("stop_token_ids") or ([eos] if eos is not None else None)
    return LoadedModel(model, tokenizer, template, template, stop, bool(extra.get("add_bos_token", False)),
                       f"attnkit checkpoint {path}", state, ckpt)

