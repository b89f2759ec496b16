"""``translate``: translate sentences with a trained encoder-decoder (``attnkit translate``).

    from attnkit.api import translate, Translator, TranslateOptions
    translate(["Das Haus ist groß."], ckpt="runs/de-en", beam=4)           # -> ["The house is big."]
    translator = Translator(TranslateOptions(ckpt="runs/de-en"))
    for batch in translator.stream(open("sentences.de")):                # one list of translations per batch
        ...

Sentences are translated in batches of ``batch_size``; :meth:`Translator.stream` yields each batch's translations
(one per input line, in input order, an empty string for an empty line) as soon as it is done, so a caller can
stream. Each sentence is read as the training pairs were (:func:`~attnkit.data.corpora.parallel.normalize_text`:
NFC, no byte-order mark or zero-width character, one space for any whitespace run). Inside a batch the sentences
are sorted by length (less padding in the encoder and fewer finished rows dragging along in the decoder) and put
back in order. A source longer than the model's ``max_len`` (``<eos>`` included) is cut to fit and counted
(:attr:`Translator.n_truncated`), or refused with its line number under ``strict``. The translation itself is
:mod:`attnkit.generation.translate` (shared with ``evaluate_mt`` and the BLEU of training).

:func:`translate_file` translates a whole file into pairs, the middle step of back-translation
(``attnkit translate --input FILE --output PAIRS.tsv``)::

    translate_file(TranslateFileOptions(ckpt="runs/en-de", input="en-mono", output="synthetic.tsv", beam=1))

It writes one line per input line, ``sentence<TAB>translation`` (both through
:func:`~attnkit.data.corpora.parallel.normalize_text`, so neither holds a tab or a newline; an empty input line or
an empty translation leaves that side empty, and readers skip such lines as malformed), in input order, with a
tqdm bar, and returns the throughput. Lines are read ``batch_size * sort_batches`` at a time and sorted by length
inside that window (less padding, rows that finish together); each window's lines are appended and flushed once it
is done. **Resume**: when the output exists, its complete lines are kept, each must be the translation of the same
input line (else it is refused), and the run continues with the next line; a last line without its newline is
dropped when it is the start of the next line's pair (a line cut off by a stop), else the output is refused too.
The input is never the output (refused), and its lines end at ``\n`` only (:func:`open_lines`). One run at a time
writes an output: it is locked (``flock``) while a run reads and writes it, and a second run is refused at once.
``<output>.json`` records the checkpoint, the decoding settings (a resume with others is refused), the counts and
the throughput.

Axis legend: B sentences in a batch, S source length (inside :mod:`attnkit.generation.translate`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from attnkit.checks import check_int

from .decoding import DecodingOptions
from .options import inference_device, place_model

__all__ = ["TranslateOptions", "Translator", "translate", "TranslateFileOptions", "TranslateFileResult",
           "translate_file"]


@dataclass
class TranslateOptions(DecodingOptions):
    """Options of :class:`Translator` / :func:`translate`: the checkpoint (a run folder uses ``checkpoints/best``;
    or a checkpoint folder such as ``checkpoints/averaged``) and the decoding settings."""

    ckpt: str | Path = ""

    def _check(self) -> None:
        super()._check()
        if not str(self.ckpt):
            raise ValueError("translate needs ckpt (a run or checkpoint folder written by train mt)")


def _check_utf8(lines: Sequence[str], first_line: int) -> None:
    """Refuse a line holding a lone surrogate: bytes that are not UTF-8, read with ``surrogateescape`` (stdin
    under a UTF-8 locale, ``--input``); ``first_line`` numbers ``lines[0]``."""
    for i, line in enumerate(lines):
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as e:
            char = line[e.start]
            what = f"byte 0x{ord(char) - 0xDC00:02x}" if 0xDC80 <= ord(char) <= 0xDCFF else f"U+{ord(char):04X}"
            raise ValueError(f"line {first_line + i} is not valid UTF-8: {what} at character {e.start + 1}; "
                             f"expected UTF-8 text") from None


def open_lines(path: str | Path):
    """``path`` opened for reading line by line as :meth:`Translator.stream` and :func:`translate_file` read it:
    lines end at ``\n`` only (a bare ``\r`` stays inside its line, as on stdin; a final ``\r\n`` is stripped
    with the line end), and bytes that are not UTF-8 are kept as lone surrogates, refused with their line number
    (:func:`_check_utf8`)."""
    return open(path, encoding="utf-8", errors="surrogateescape", newline="\n")


def _chunks(lines: Iterable[str], size: int, first: int = 1) -> Iterator[list[str]]:
    """``lines`` (each a ``str``, line ends stripped) in lists of ``size``; ``first`` numbers the first line in
    the error for a line that is not a string."""
    chunk: list[str] = []
    for number, line in enumerate(lines, start=first):
        if not isinstance(line, str):
            raise ValueError(f"line {number} to translate must be a str, got {type(line).__name__} {line!r:.60}")
        chunk.append(line.rstrip("\r\n"))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class Translator:
    """A loaded translator: the model on its device, its tokenizer and the decoding settings.

    Attributes:
        max_len: the longest source the model takes, in tokens.
        n_lines, n_truncated: lines translated so far, and how many of them were cut to ``max_len``.
    """

    def __init__(self, options: TranslateOptions | None = None, **kwargs: Any):
        from attnkit.checkpoints import load

        self.options = TranslateOptions.make(options, kwargs)
        device = inference_device(self.options)  # a device (or autocast) this machine lacks fails before loading
        loaded = load(self.options.ckpt, expect_kind="mt")  # an LM checkpoint is refused here
        self.model = place_model(loaded.model, self.options, device)  # the search follows the weights
        self.tokenizer = loaded.tokenizer
        self.max_len = getattr(self.model.config, "max_len", None)
        self.n_lines = 0
        self.n_truncated = 0

    def stream(self, lines: Iterable[str], *, batch_size: int | None = None) -> Iterator[list[str]]:
        """Translate ``lines`` (line ends stripped) ``batch_size`` at a time (default the options'); yields each
        batch's translations in input order as soon as they are done."""
        from attnkit.data.corpora.parallel import normalize_text
        from attnkit.generation.translate import encode_sources, translate_ids

        o = self.options
        size = o.batch_size if batch_size is None else check_int("batch_size", batch_size, minimum=1)
        _check_lines(lines)
        for chunk in _chunks(lines, size, self.n_lines + 1):
            _check_utf8(chunk, self.n_lines + 1)
            texts = [normalize_text(line) for line in chunk]  # as the training pairs were (NFC, no BOM, spaces)
            ids, cut = encode_sources(self.tokenizer, texts, max_len=self.max_len, strict=o.strict,
                                      first_line=self.n_lines + 1)
            ids = [s if text else [] for s, text in zip(ids, texts)]
            yield from translate_ids(self.model, self.tokenizer, ids, batch_size=size, **o.search)
            self.n_lines += len(chunk)
            self.n_truncated += cut

    def translate(self, sentences: Sequence[str]) -> list[str]:
        """The translations of ``sentences``, one each, in order."""
        return [h for hyps in self.stream(sentences) for h in hyps]


def _check_lines(lines: Any) -> None:
    """``ValueError`` unless ``lines`` is an iterable of lines that is not itself one string."""
    if isinstance(lines, str):  # iterating it would translate each character as a line
        raise ValueError(f"lines to translate must be an iterable of strings (a list, a file), got one string "
                         f"{lines!r:.60}; wrap it in a list")
    if not isinstance(lines, Iterable):
        raise ValueError(f"lines to translate must be an iterable of strings (a list, a file), got "
                         f"{type(lines).__name__} {lines!r:.60}")


def translate(sentences: Sequence[str], options: TranslateOptions | None = None, **kwargs: Any) -> list[str]:
    """Translate ``sentences`` with the checkpoint of ``options`` (or keyword arguments): one translation each."""
    _check_lines(sentences)  # before the model is loaded
    return Translator(options, **kwargs).translate(sentences)


@dataclass
class TranslateFileOptions(TranslateOptions):
    """Options of :func:`translate_file`: :class:`TranslateOptions` plus

    Attributes:
        input: a UTF-8 text file, one sentence a line, or the name of a monolingual recipe (``en-mono``: its
            ``sentences.txt``, prepared on first use).
        output: the pairs file to write (``sentence<TAB>translation``); continued when it exists.
        sort_batches: how many batches of ``batch_size`` lines are read and sorted by length together.
        progress: show a tqdm progress bar (stderr).
    """

    input: str | Path = ""
    output: str | Path = ""
    sort_batches: int = 16
    progress: bool = True

    def _check(self) -> None:
        super()._check()
        if not str(self.input) or not str(self.output):
            raise ValueError(f"translate_file needs input and output, got input {str(self.input)!r} and output "
                             f"{str(self.output)!r}")
        if self.sort_batches < 1:
            raise ValueError(f"sort_batches must be >= 1, got {self.sort_batches}")


@dataclass
class TranslateFileResult:
    """What :func:`translate_file` did: ``lines`` in the input, ``resumed_from`` of them already in ``output``,
    ``translated`` now in ``seconds`` (``source_tokens`` with ``<eos>``, ``target_tokens`` without), ``truncated``
    sources cut to the model's ``max_len``; ``record``: the path of the JSON record beside the output."""

    output: Path
    record: Path
    lines: int
    resumed_from: int
    translated: int
    seconds: float
    source_tokens: int
    target_tokens: int
    truncated: int

    @property
    def sentences_per_s(self) -> float:
        return self.translated / self.seconds if self.seconds > 0 else 0.0

    @property
    def source_tokens_per_s(self) -> float:
        return self.source_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def target_tokens_per_s(self) -> float:
        return self.target_tokens / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        """One line: how much was translated and how fast."""
        if not self.translated:
            return f"nothing to translate: all {self.lines:,} lines are in {self.output}"
        resumed = f" (continued after line {self.resumed_from:,})" if self.resumed_from else ""
        return (f"translated {self.translated:,} sentences{resumed} in {self.seconds:.1f} s: "
                f"{self.sentences_per_s:.1f} sentences/s, {self.source_tokens_per_s:,.0f} source tokens/s, "
                f"{self.target_tokens_per_s:,.0f} target tokens/s -> {self.output}")


def _input_file(name: str | Path) -> Path:
    """``input`` as a file: itself when it exists, else the ``sentences.txt`` of the monolingual recipe so named."""
    path = Path(name)
    if path.is_file():
        return path
    if path.exists() or any(c in str(name) for c in "/\\."):
        raise FileNotFoundError(f"--input: no such file: {name}")
    from attnkit.data.corpora.registry import get_recipe, prepare, recipe_names

    recipe = get_recipe(str(name))  # unknown name -> ValueError listing the recipes
    if recipe.kind != "mono":
        raise ValueError(f"--input {name!r} is a {recipe.kind} recipe; translate reads a text file or a monolingual "
                         f"recipe ({', '.join(recipe_names('mono'))})")
    return prepare(str(name)) / "sentences.txt"


def _lock_output(output: Path) -> Any:
    """``output`` opened (made if missing) and locked for this process (an advisory ``flock``, dropped when the file
    is closed or the process dies): a second ``translate --output`` of the same file is refused at once, not left to
    append the same pairs again."""
    import fcntl

    held = open(output, "ab")
    try:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held.close()
        raise ValueError(f"{output} is being written by another translate --output process; wait for it to finish "
                         f"(run this again then to check it is complete) or choose another --output") from None
    return held


def _kept_lines(output: Path, input_path: Path) -> int:
    """How many lines of an existing ``output`` to keep: its complete lines, each of which must start with the same
    input line. A last line without its newline is cut off the file only when it is the start of what this run
    writes for the next input line (the line a stop cut off); any other output is refused, never overwritten."""
    from attnkit.data.corpora.parallel import normalize_text

    if not output.exists():
        return 0
    with open(output, "rb") as f:
        data = f.read()
    end = data.rfind(b"\n") + 1  # the bytes of the complete lines
    try:
        done = data[:end].decode("utf-8").split("\n")[:-1]
    except UnicodeDecodeError as e:
        raise ValueError(f"{output} is not a pairs file written by translate (not UTF-8 at byte offset {e.start}); "
                         f"remove it or choose another --output") from None
    tail = data[end:]
    checked, following = 0, None
    with open_lines(input_path) as lines:
        for checked, (have, line) in enumerate(zip(done, lines), start=1):
            if "\t" not in have or have.split("\t", 1)[0] != normalize_text(line):
                raise ValueError(f"{output}:{checked} is not the translation of {input_path}:{checked} "
                                 f"({have[:60]!r} against {normalize_text(line)[:60]!r}); it holds another file's "
                                 f"pairs: remove it or choose another --output")
        if tail and checked == len(done):
            following = next(lines, None)  # the input line the cut-off line would translate
    if checked < len(done):
        raise ValueError(f"{output} holds {len(done):,} lines, more than the {checked:,} lines of {input_path}")
    if tail:
        start = None if following is None else (normalize_text(following) + "\t").encode("utf-8", "surrogateescape")
        if start is None or not (tail.startswith(start) or start.startswith(tail)):
            shown = tail[:60].decode("utf-8", "replace")
            against = "nothing (the input has no more lines)" if start is None else repr(normalize_text(following)[:60])
            raise ValueError(f"{output}:{len(done) + 1} (its last line, without a newline) is not the translation of "
                             f"{input_path}:{len(done) + 1} ({shown!r} against {against}); it holds another file's "
                             f"data: remove it or choose another --output")
        with open(output, "r+b") as f:  # the line a stop cut off: translated again
            f.truncate(end)
    return len(done)


def _read_record(path: Path) -> dict[str, Any] | None:
    """The JSON record of an earlier run at ``path`` (None when there is none); a file there that is not such a
    record is refused rather than overwritten."""
    import json

    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        record = e
    if not isinstance(record, dict) or record.get("format") != "sentence<TAB>translation":
        raise ValueError(f"{path} exists and is not the record of a translate --output run (expected its JSON with "
                         f"\"format\": \"sentence<TAB>translation\"); remove it or choose another --output")
    return record


def _record(o: TranslateFileOptions, input_path: Path) -> dict[str, Any]:
    return {"ckpt": str(Path(o.ckpt).resolve()), "input": str(input_path.resolve()),
            "decoding": {**o.search, "strict": o.strict}, "format": "sentence<TAB>translation"}


def translate_file(options: TranslateFileOptions | None = None, **kwargs: Any) -> TranslateFileResult:
    """Translate every line of ``input`` into ``output`` as ``sentence<TAB>translation`` pairs, continuing an
    output that a stopped run left (see the module docstring)."""
    import json

    from attnkit.checkpoints import write_text_atomic
    from attnkit.checkpoints.runs import check_output_file

    o = TranslateFileOptions.make(options, kwargs)
    input_path, given = _input_file(o.input), Path(o.output)
    # the file the writes reach once missing folders are made ("new/../x" is "x"): every check is on it
    output = given.parent.resolve() / given.name
    record_path = output.with_name(output.name + ".json")
    for path, what in ((output, "--output"), (record_path, f"the record of --output ({record_path.name})")):
        if path.exists() and path.samefile(input_path) or path.resolve() == input_path.resolve():
            raise ValueError(f"{what} is the --input file {input_path}: it would be overwritten; choose another "
                             f"--output")
        check_output_file(path, what)  # a folder, below a file, or a file of a run (or in a checkpoint): refused
    record = _record(o, input_path)
    before = _read_record(record_path)
    if output.exists() and before is not None:
        changed = [k for k in ("ckpt", "input", "decoding") if before.get(k) != record[k]]
        if changed:
            raise ValueError(f"{output} was begun with another {', '.join(changed)} ({record_path}: "
                             + "; ".join(f"{k} {before.get(k)!r}, now {record[k]!r}" for k in changed)
                             + "); remove it or choose another --output")
    n_lines = 0
    with open_lines(input_path) as f:  # counted, and a line that is not UTF-8 refused, before anything is written
        for n_lines, line in enumerate(f, start=1):
            _check_utf8([line], n_lines)
    held = _lock_output(output) if output.exists() else None  # one process a pairs file: held to the end
    try:
        done = _kept_lines(output, input_path)
        # loaded before anything is written: a checkpoint or device that cannot be had leaves no record behind
        translator = Translator(o) if done < n_lines else None
        output.parent.mkdir(parents=True, exist_ok=True)
        if held is None:
            held = _lock_output(output)  # (made now; another process may have begun it meanwhile)
            done = _kept_lines(output, input_path)
            translator = translator or (Translator(o) if done < n_lines else None)
        write_text_atomic(record_path, json.dumps({**record, "lines": n_lines, "complete": done == n_lines}, indent=2))
        counts = {"translated": 0, "src": 0, "tgt": 0, "cut": 0, "seconds": 0.0}
        if translator is not None and done < n_lines:
            _translate_lines(translator, input_path, output, done, n_lines, counts)
        seconds = counts["seconds"]
        result = TranslateFileResult(given, record_path, n_lines, done, counts["translated"], seconds, counts["src"],
                                     counts["tgt"], counts["cut"])
        write_text_atomic(record_path, json.dumps({  # (still under the lock: the record is this run's)
            **record, "lines": n_lines, "complete": True, "resumed_from": done, "translated": result.translated,
            "seconds": round(seconds, 3), "sentences_per_s": round(result.sentences_per_s, 2),
            "source_tokens_per_s": round(result.source_tokens_per_s, 1),
            "target_tokens_per_s": round(result.target_tokens_per_s, 1), "truncated": result.truncated}, indent=2))
    finally:
        if held is not None:
            held.close()  # (closing drops the lock)
    return result


def _translate_lines(translator: Translator, input_path: Path, output: Path, done: int, n_lines: int,
                     counts: dict[str, int]) -> None:
    """Translate the lines of ``input_path`` after the first ``done`` with ``translator`` (made from
    :class:`TranslateFileOptions`) and append the pairs to ``output``, one window of ``batch_size * sort_batches``
    lines at a time; adds to ``counts`` (``seconds``: from the first line read to the last line written)."""
    import os
    import time

    from tqdm.auto import tqdm

    from attnkit.data.corpora.parallel import normalize_text
    from attnkit.generation.translate import encode_sources, search_ids

    o = translator.options
    model, tok = translator.model, translator.tokenizer
    window = o.batch_size * o.sort_batches
    t0 = time.perf_counter()
    with open_lines(input_path) as lines, open(output, "a", encoding="utf-8", newline="\n") as out, \
            tqdm(total=n_lines, initial=done, unit="sentence", desc="translating", disable=not o.progress) as bar:
        for first, chunk in _windows(lines, done, window):
            _check_utf8(chunk, first)
            texts = [normalize_text(line) for line in chunk]
            ids, cut = encode_sources(tok, texts, max_len=translator.max_len, strict=o.strict, first_line=first)
            hyps = [""] * len(texts)
            filled = sorted((i for i in range(len(texts)) if texts[i]), key=lambda i: len(ids[i]))
            for b in range(0, len(filled), o.batch_size):
                rows = filled[b:b + o.batch_size]
                targets = search_ids(model, tok, [ids[i] for i in rows], **o.search)
                for i, target in zip(rows, targets):
                    hyps[i] = normalize_text(tok.decode(target, skip_special_tokens=True))
                    counts["src"] += len(ids[i])
                    counts["tgt"] += len(target)
                bar.update(len(rows))
            bar.update(len(texts) - len(filled))
            out.write("".join(f"{src}\t{hyp}\n" for src, hyp in zip(texts, hyps)))
            out.flush()
            os.fsync(out.fileno())
            counts["translated"] += len(texts)
            counts["cut"] += cut
    counts["seconds"] += time.perf_counter() - t0


def _windows(lines: Iterable[str], skip: int, size: int) -> Iterator[tuple[int, list[str]]]:
    """``(line number of the first, lines)`` of ``size`` lines at a time after the first ``skip`` lines."""
    start = skip + 1
    for k, chunk in enumerate(_chunks(itertools.islice(lines, skip, None), size)):
        yield start + k * size, chunk
