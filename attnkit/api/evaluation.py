"""``evaluate_lm`` and ``evaluate_mt``: measure a trained model on held-out data (``attnkit eval lm|mt``).

    from attnkit.api import evaluate_lm, evaluate_mt
    evaluate_lm(ckpt="runs/char", data="shakespeare").metrics["ppl"]
    evaluate_lm(model="smollm2-135m-instruct", data="fortunes").metrics["loss"]
    evaluate_mt(ckpt="runs/de-en", split="test", beam=4).metrics["bleu"]

``evaluate_lm`` runs the model over the whole validation split in non-overlapping windows of the model's block
size (every token predicted once, :func:`attnkit.data.pipeline.lm_dataset.eval_batches`), or over ``max_batches``
batches spread evenly over it, and reports the mean cross-entropy and ``exp`` of it (perplexity). With a ``stride``
``s`` (``1 <= s <=`` the block size ``T``) the windows overlap, moved by ``s`` ids, and each scores only the tokens
the one before did not (the first all ``T``): the same tokens, each predicted from at least ``T - s + 1`` ids
(Hugging Face's strided perplexity; ``s = T`` is the non-overlapping evaluation, identical). The split is the
one ``train_lm`` used (same recipe, same ``valid_fraction``), tokenized with the checkpoint's own tokenizer; for a
``finetune`` run, the one it used: its documents each followed by ``<eos>`` (after ``<bos>`` where the model wants
one), as :func:`attnkit.data.pipeline.documents.prepare_finetune_data` encodes them.
A pretrained model (``model``: a name, a ``.gguf`` file or a Hugging Face folder) is scored on the valid split
``finetune`` would hold out of ``data`` (``documents``, default ``auto``), in windows of ``block_size`` (default 256,
fine-tuning's, at most its context), so the base model and a fine-tune of it are scored on the same tokens.

``evaluate_mt`` translates the sources of a split (recipe name or prepared folder + ``split``, a TSV file, or
``SRC_FILE,TGT_FILE``; the other way round for a model trained with ``reverse``) with beam search (``beam=1`` =
greedy) and scores the *detokenized* output against the references with sacreBLEU: corpus BLEU (default ``13a``
tokenizer, the WMT standard) and chrF.

Both write the figures as JSON (``json``, default a file in the checkpoint folder, written atomically);
``evaluate_mt`` can also write the translations (``hyps``). There are no tensor axes in this file.
"""

from __future__ import annotations

import json as json_lib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnkit.checks import is_int
from attnkit.data.corpora.parallel import SPLITS
from attnkit.data.pipeline.documents import DOCUMENT_MODES

from .decoding import DecodingOptions
from .options import DeviceOptions, check_model_source, inference_device, place_model

__all__ = ["EvalLMOptions", "EvalMTOptions", "EvalResult", "evaluate_lm", "evaluate_mt"]



@dataclass
class EvalLMOptions(DeviceOptions):
    """Options of :func:`evaluate_lm`: the model (``ckpt``, a run folder, which uses ``checkpoints/best``, or a
    checkpoint folder; or ``model``, a named pretrained model, a ``.gguf`` file or a Hugging Face folder), the data
    (for ``ckpt`` the recipe name or local file/folder it was trained on; for ``model`` a recipe or text to
    fine-tune on), windows per batch, at most ``max_batches`` batches, the window length ``block_size`` (default:
    the one the checkpoint was trained with; for ``model`` 256, fine-tuning's, at most the model's context), the
    ``stride`` between windows (None: non-overlapping windows; else 1 to the window length), for ``model`` how the
    text splits into ``documents`` (``finetune``'s modes; default ``auto``), where the JSON goes
    (default ``<checkpoint>/eval_lm.json``; for ``model`` nowhere unless given) and ``progress``: a tqdm bar of the
    batches on a terminal's stderr."""

    ckpt: str | Path | None = None
    model: str | Path | None = None
    data: str = ""
    batch_size: int = 16
    max_batches: int | None = None
    block_size: int | None = None
    stride: int | None = None
    documents: str | None = None
    json: str | Path | None = None
    progress: bool = True

    def _check(self) -> None:
        super()._check()
        check_model_source("evaluate_lm", self.ckpt, self.model)
        if self.documents is not None and self.ckpt is not None:
            raise ValueError(f"--documents is for --model (a checkpoint is scored as it was trained), got --documents "
                             f"{self.documents!r} with --ckpt")
        if self.documents not in (None, *DOCUMENT_MODES):
            raise ValueError(f"--documents must be one of {list(DOCUMENT_MODES)}, got {self.documents!r}")
        if not self.data:
            raise ValueError("evaluate_lm needs data (a recipe name, or a local text file or folder)")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.max_batches is not None and self.max_batches < 1:
            raise ValueError(f"--max-batches must be >= 1, got {self.max_batches}")
        # (the upper ends, the model's context and the window length, are checked when the model is loaded)
        if self.block_size is not None and (not is_int(self.block_size) or self.block_size < 1):
            raise ValueError(f"--block-size must be an int from 1 to the model's context length, or None, got "
                             f"{self.block_size!r}")
        if self.stride is not None and (not is_int(self.stride) or self.stride < 1):
            raise ValueError(f"--stride must be an int from 1 to the window length, or None, got {self.stride!r}")


@dataclass
class EvalMTOptions(DecodingOptions):
    """Options of :func:`evaluate_mt`: the checkpoint, the pairs (default: the data the model was trained on) and
    their ``split``, at most ``max_sentences`` of them, the decoding settings, where the JSON goes (default
    ``<checkpoint>/eval_mt_<data>_<split>.json``; ``_<split>`` only for a recipe or prepared folder), optionally
    where the translations go (``hyps``) and ``progress``: a tqdm bar of the sentences on a terminal's stderr. A run
    folder's checkpoint is its ``checkpoints/best``."""

    ckpt: str | Path = ""
    data: str | None = None
    split: str = "test"
    max_sentences: int | None = None
    json: str | Path | None = None
    hyps: str | Path | None = None
    progress: bool = True

    def _check(self) -> None:
        super()._check()
        if not str(self.ckpt):
            raise ValueError("evaluate_mt needs ckpt (a run or checkpoint folder)")
        if self.data is not None and not self.data.strip():  # "" would fall back to the training data
            raise ValueError(f"--data must name the pairs to score (None: the data the model was trained on), got "
                             f"{self.data!r}")
        if self.split not in SPLITS:
            raise ValueError(f"--split must be one of {list(SPLITS)}, got {self.split!r}")
        if self.max_sentences is not None and self.max_sentences < 1:
            raise ValueError(f"--max-sentences must be >= 1, got {self.max_sentences}")


@dataclass
class EvalResult:
    """The figures of an evaluation (also written as JSON to ``path``; None: not written, a pretrained model's
    evaluation without ``json``) and any notes (skipped lines, cut sources)."""

    metrics: dict[str, Any]
    path: Path | None
    notes: list[str] = field(default_factory=list)


def _is_eval_record(path: Path) -> bool:
    try:
        old = json_lib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(old, dict) and old.get("kind") in ("lm", "mt") and "ckpt" in old


def _translations_of(n: int) -> Any:
    """Whether an existing file can be the translations an earlier evaluation of these ``n`` sentences wrote (what
    a rerun replaces): UTF-8 text of ``n`` lines without a tab (pairs, a user's TSV, are data, never replaced)."""
    def check(path: Path) -> bool:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return False
        return text.count("\n") == n and "\t" not in text
    return check


def _check_outputs(o: EvalLMOptions | EvalMTOptions, data: str, out: Path, sentences: int = 0) -> None:
    """Refuse a ``json`` / ``hyps`` path that would overwrite what the evaluation reads or what the user keeps:
    the data (a file, one of two files, or anything in a data folder), the other output (``out``, the JSON to be
    written, default or given), a file of a run other than an ``eval_*`` record
    (:func:`~attnkit.checkpoints.runs.check_output_file`), an existing ``json`` that is not an evaluation record,
    or an existing ``hyps`` file that is not the translations of these ``sentences``."""
    from attnkit.checkpoints.runs import check_output_file

    inputs = [Path(p) for p in ([data] if Path(data).exists() else str(data).split(","))]
    outputs = {"--json": out, "--hyps": getattr(o, "hyps", None)}
    given = {flag: Path(p).resolve() for flag, p in outputs.items() if p is not None}
    if len(set(given.values())) < len(given):
        raise ValueError(f"--json and --hyps name the same file {str(given['--json'])!r}")
    for flag, path in given.items():
        if any(path == i.resolve() or i.resolve() in path.parents or path.is_file() and path.samefile(i)
               for i in inputs if i.exists()):  # a hard link is the data too
            raise ValueError(f"{flag} {str(outputs[flag])!r} is (or is inside) the data being scored, {data!r}; "
                             f"give another file")
        if flag == "--json":
            check_output_file(outputs[flag], flag, replaces=_is_eval_record, may_replace="an evaluation record",
                              run_prefix="eval_")
        else:
            check_output_file(outputs[flag], flag, replaces=_translations_of(sentences), run_prefix="eval_",
                              may_replace=f"translations of these {sentences} sentences, one a line")


def _write_text(path: str | Path, text: str) -> None:
    from attnkit.files import write_text_atomic

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    _write_text(path, json_lib.dumps(payload, indent=2, ensure_ascii=False) + "\n")


def _write_record(out: Path, result: dict[str, Any], checkpoint: Path | None, held: tuple[int, ...] | None,
                  scores: str) -> None:
    """Write the record; one into the checkpoint folder (the default) only while that folder is still the checkpoint
    evaluated: a run that is training may have replaced its ``best/`` meanwhile, and the record would describe
    another checkpoint (a ``ValueError`` keeps ``scores`` in its message)."""
    from attnkit.checkpoints.load import checkpoint_identity

    replaced = (f"{checkpoint} was replaced or removed by its training run while it was evaluated, so the record (step "
                f"{result.get('step')}: {scores}) is not written into it; pass --json FILE to keep one")
    inside = checkpoint is not None and out.parent.resolve() == checkpoint.resolve()
    if inside and checkpoint_identity(checkpoint) != held:
        raise ValueError(replaced)
    try:
        _write_json(out, result)
    except OSError:
        if inside and checkpoint_identity(checkpoint) != held:  # swapped away while the record was written
            raise ValueError(replaced) from None
        raise


def _scored_token_loss(model: Any, batch: tuple[Any, Any]) -> tuple[Any, int]:
    """:func:`~attnkit.training.lm_task.next_token_loss` of evaluation windows over the targets they score: a
    strided window's targets that an earlier window scored are ``NOT_SCORED`` (``cross_entropy``'s
    ``ignore_index``), left out of the mean and of the count. A batch scored whole goes to ``next_token_loss``
    itself (the non-overlapping evaluation, unchanged).

    Shape: batch ``(x (B, T), y (B, T))``; ``model(x)`` -> logits ``(B, T, V)``; returns a 0-dim loss."""
    import torch.nn.functional as F

    from attnkit.data.pipeline.lm_dataset import NOT_SCORED
    from attnkit.training.lm_task import check_target_ids, next_token_loss

    x, y = batch
    scored = y != NOT_SCORED  # (B, T)
    if bool(scored.all()):
        return next_token_loss(model, batch)
    logits = model(x)  # (B, T, V)
    V = logits.shape[-1]
    check_target_ids(y.masked_fill(~scored, 0), V)  # (the positions not scored hold NOT_SCORED)
    loss = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1), ignore_index=NOT_SCORED)  # (B*T, V)
    return loss, int(scored.sum())


class _ScoredBytes:
    """Counts the UTF-8 bytes of the text of the targets a run of evaluation batches scores (the ``bytes`` that
    bits per byte divides by): each row's scored targets, in order, through one
    :class:`~attnkit.data.tokenizers.tokenizer.StreamDecoder` (special tokens such as ``<eos>`` have no text), so
    the count is that of ``decode`` of all the targets at once, whatever the batching. ``context``: the ids before
    the first target (a decoder may treat a text's first token apart).

    Shape: each batch ``(x (B, T), y (B, T))``; ``NOT_SCORED`` targets are left out."""

    def __init__(self, tokenizer: Any, context: list[int]):
        from attnkit.data.tokenizers.tokenizer import StreamDecoder

        self._decoder = StreamDecoder(tokenizer, skip_special_tokens=True, context=context)
        self.bytes = 0

    def count(self, batches: Any) -> Any:
        """Yield ``batches`` unchanged, counting the bytes of each one's scored targets."""
        from attnkit.data.pipeline.lm_dataset import NOT_SCORED

        for x, y in batches:
            for row in y:  # (T,)
                self.bytes += len(self._decoder.push(row[row != NOT_SCORED].tolist()).encode("utf-8"))
            yield x, y
        self.bytes += len(self._decoder.flush().encode("utf-8"))


def _load_lm(o: EvalLMOptions) -> tuple[Any, Path | None, tuple[int, ...] | None, Path | None]:
    """The model ``o`` names, with the checkpoint folder read, its identity and where the record goes (None for a
    pretrained model without ``json``). The output is checked before a pretrained model is read (it may be large)."""
    from attnkit.checkpoints import load
    from attnkit.checkpoints.load import checkpoint_identity
    from attnkit.interop.load import load_named

    if o.ckpt is None:
        out = None if o.json is None else Path(o.json)
        if out is not None:
            _check_outputs(o, o.data, out)
        loaded = load_named(str(o.model))
        if loaded.path is not None:  # an attnkit run: its own split, tokenization and window are known
            raise ValueError(f"--model {str(o.model)!r} is an attnkit checkpoint; give it as --ckpt (then it is "
                             f"evaluated on the split and windows it was trained with)")
        return loaded, None, None, out
    loaded = load(o.ckpt, expect_kind="lm")  # a translator is refused here
    checkpoint = loaded.path  # the checkpoint folder load() read (a run folder's checkpoints/best)
    held = checkpoint_identity(checkpoint)
    out = Path(o.json) if o.json is not None else checkpoint / "eval_lm.json"
    _check_outputs(o, o.data, out)
    return loaded, checkpoint, held, out


def _window(o: EvalLMOptions, loaded: Any) -> int:
    """The window length: ``block_size``, else the one the checkpoint was trained with, else fine-tuning's default
    (256) for a pretrained model; at most the model's context length."""
    from attnkit.recipes import FT_DEFAULTS

    context = int(loaded.model.config.block_size)
    if o.block_size is not None:
        if o.block_size > context:
            raise ValueError(f"--block-size must be <= the model's context length = {context}, got {o.block_size}")
        return o.block_size
    if o.ckpt is None:
        return min(FT_DEFAULTS["block_size"], context)
    trained = (loaded.state.get("train_config") or {}).get("block_size")
    return trained if isinstance(trained, int) and 1 <= trained <= context else context


def evaluate_lm(options: EvalLMOptions | None = None, **kwargs: Any) -> EvalResult:
    """Validation loss and perplexity of a language model checkpoint or a pretrained model (see the module
    docstring)."""
    import torch
    from tqdm.auto import tqdm

    from attnkit.data.pipeline.lm_dataset import check_block_length, eval_batches, num_eval_windows
    from attnkit.data.pipeline.lm_store import open_lm_stores
    from attnkit.training.lm_task import mean_token_loss, perplexity

    o = EvalLMOptions.make(options, kwargs)
    device = inference_device(o)  # a device (or autocast) this machine lacks fails before loading
    loaded, checkpoint, held, out = _load_lm(o)
    T = _window(o, loaded)
    model = place_model(loaded.model, o, device)
    extra = loaded.state.get("extra") or {}
    documents = None  # a train lm run's split is one stream
    if o.ckpt is None or extra.get("task") == "finetune":  # its valid split: documents, each ending with <eos>
        from attnkit.data.pipeline.documents import prepare_finetune_data  # (after <bos>), as fine-tuning reads them

        mode = o.documents or extra.get("documents") or "auto"
        _, valid, info = prepare_finetune_data(o.data, loaded.tokenizer, mode, add_bos=loaded.add_bos,
                                               encode_train=False)  # (the train split is not scored)
        documents = info["documents"]
    else:
        valid = open_lm_stores(o.data, loaded.tokenizer, splits=("valid",)).stores["valid"]  # only the valid split
    window = ("--block-size" if o.block_size is not None else "the default for --model" if o.ckpt is None
              else "the block size the model was trained with")
    if len(valid) < T + 1:
        raise ValueError(f"the valid split of {o.data!r} (a text file's last 10%) has {len(valid)} tokens, but this "
                         f"model reads windows of {T} ({window}) and needs at least {T + 1}: give more text")
    check_block_length(valid, T, "valid")
    if o.stride is not None and o.stride > T:
        raise ValueError(f"--stride must be an int from 1 to the window length {T} ({window}), got {o.stride}")
    stride = T if o.stride is None else o.stride  # T: non-overlapping windows
    n_windows = num_eval_windows(valid, T, stride)
    max_windows = None if o.max_batches is None else o.max_batches * o.batch_size
    windows = min(n_windows, max_windows or n_windows)
    t0 = time.perf_counter()
    scored = _ScoredBytes(loaded.tokenizer, [int(valid[0])])  # (the first target follows id 0)
    batches = scored.count(eval_batches(valid, T, o.batch_size, max_windows=max_windows, stride=stride))
    with torch.no_grad(), tqdm(batches, total=-(-windows // o.batch_size), unit="batch", desc="evaluating",
                               leave=False, disable=None if o.progress else True) as bar:  # None: on a terminal only
        mean, count = mean_token_loss(model, bar, _scored_token_loss)
    if not math.isfinite(mean):
        raise FloatingPointError(f"the validation loss is {mean}: the model's weights are broken")
    # the summed loss in bits over the bytes of the scored text: no tokenizer's (a character model on ASCII: loss/ln 2)
    bits_per_byte = mean * count / math.log(2) / scored.bytes if scored.bytes else None
    result = {"kind": "lm", "ckpt": None if o.ckpt is None else str(o.ckpt),
              "checkpoint": None if checkpoint is None else str(checkpoint), "step": loaded.state.get("step"),
              "model": None if o.model is None else str(o.model), "data": str(o.data), "split": "valid",
              "documents": documents,
              "block_size": T, "stride": stride, "windows": windows, "tokens": count, "bytes": scored.bytes,
              "loss": mean, "ppl": perplexity(mean), "bits_per_byte": bits_per_byte,
              "seconds": time.perf_counter() - t0}
    if out is not None:
        _write_record(out, result, checkpoint, held, f"valid loss {mean:.4f}, perplexity {perplexity(mean):.3f}")
    return EvalResult(result, out)


def _eval_data(o: EvalMTOptions, state: dict[str, Any]) -> str:
    """The pairs to score: ``o.data``, else the data the model was trained on (refused when that is a file,
    which holds no test split)."""
    data = o.data or (state.get("extra") or {}).get("data")
    if not data:
        raise ValueError(f"{o.ckpt} does not record its data; pass --data")
    if o.data is None and Path(data).is_file():
        # a model trained on a single TSV file: that file is its *training* data, never score on it by default
        raise ValueError(f"{o.ckpt} was trained on the file {data}, which has no test split; pass --data "
                         f"with the pairs to score")
    if o.data is None and "," in data and not Path(data).exists():
        raise ValueError(f"{o.ckpt} was trained on the files {data}; pass --data with the pairs to score")
    return data


def evaluate_mt(options: EvalMTOptions | None = None, **kwargs: Any) -> EvalResult:
    """sacreBLEU BLEU and chrF of a translator on a split (see the module docstring)."""
    from attnkit.checkpoints import load
    from attnkit.checkpoints.load import checkpoint_identity
    from attnkit.data.corpora.parallel import load_eval_pairs
    from attnkit.generation.translate import translate_sentences
    from attnkit.training.bleu import score_translations

    o = EvalMTOptions.make(options, kwargs)
    device = inference_device(o)  # a device (or autocast) this machine lacks fails before loading
    loaded = load(o.ckpt, expect_kind="mt")  # an LM checkpoint is refused here
    model = place_model(loaded.model, o, device)
    data = _eval_data(o, loaded.state)
    checkpoint = loaded.path  # the checkpoint folder load() read (a run folder's checkpoints/best)
    held = checkpoint_identity(checkpoint)
    parts = str(data).split(",")  # SRC_FILE,TGT_FILE: both stems (eval_mt_src_tgt.json)
    stem = "_".join(Path(p).stem for p in parts) if any(c in str(data) for c in "/.,") else str(data)
    from_files = Path(str(data)).is_file() or "," in str(data)  # the split is ignored for files
    name = f"eval_mt_{stem}.json" if from_files else f"eval_mt_{stem}_{o.split}.json"
    out = Path(o.json) if o.json is not None else checkpoint / name
    # a model trained with `train mt --reverse` translates the target side into the source side
    reverse = bool(((loaded.state.get("extra") or {}).get("mt_options") or {}).get("reverse"))
    corpus = load_eval_pairs(data, o.split, strict=o.strict, reverse=reverse)
    sources, refs = list(corpus.sources), list(corpus.targets)
    if o.max_sentences is not None:
        sources, refs = sources[:o.max_sentences], refs[:o.max_sentences]
    if not sources:
        raise ValueError(f"{corpus.path} holds no usable pair ({corpus.skipped} malformed lines skipped)")
    _check_outputs(o, data, out, len(sources))  # before any translating: the --hyps rule needs their number

    t0 = time.perf_counter()
    hyps, n_cut = translate_sentences(model, loaded.tokenizer, sources, strict=o.strict, batch_size=o.batch_size,
                                      progress=o.progress, **o.search)
    seconds = time.perf_counter() - t0
    scores = score_translations(hyps, refs)
    split = None if from_files else o.split
    result = {"kind": "mt", "ckpt": str(o.ckpt), "checkpoint": str(checkpoint), "step": loaded.state.get("step"),
              "data": str(data), "split": split, "reverse": reverse,
              "sentences": len(sources), "skipped_lines": corpus.skipped, "truncated_sources": n_cut,
              "beam": o.beam, "length_penalty": o.length_penalty, "max_len_a": o.max_len_a,
              "max_len_b": o.max_len_b, **scores, "seconds": seconds,
              **({"hyps": str(Path(o.hyps).resolve())} if o.hyps is not None else {})}
    if o.hyps is not None:  # before the record that names it
        _write_text(o.hyps, "".join(h + "\n" for h in hyps))
    _write_record(out, result, checkpoint, held, f"BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}")
    notes = ([f"{corpus.skipped} malformed lines skipped, {n_cut} sources truncated"]
             if corpus.skipped or n_cut else [])
    return EvalResult(result, out, notes)
