"""``attnkit translate`` (and :mod:`attnkit.api.translation`) with files: what is read as a line, what is refused
before anything is written, and that an existing ``--output`` is never emptied or overwritten unless it is the
pairs file a stopped run left.

Axis legend: no tensors here (lines of text in, lines of text out).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from attnkit import api
from attnkit.api.translation import TranslateFileOptions, TranslateOptions, Translator, translate_file
from attnkit.cli.main import main
from attnkit.data.corpora.parallel import normalize_text

TINY_MT = dict(preset="transformer-cpu", overrides={"d_model": 32, "num_heads": 2, "dim_feedforward": 64,
                                                    "num_encoder_layers": 1, "num_decoder_layers": 1},
               vocab_size=300, max_tokens=256, eval_every=10, eval_batches=2, ckpt_every=5, log_every=5,
               bleu_sentences=8, progress=False)
NOTES = "my precious notes, written without a final newline"


@pytest.fixture(scope="module")
def run(tmp_path_factory, make_copy_task) -> Path:
    folder = tmp_path_factory.mktemp("pairs") / "copy"
    data = make_copy_task(folder, sizes=(("train", 200), ("valid", 20), ("test", 20)))
    options = api.TrainMTOptions(data=str(data), out=tmp_path_factory.mktemp("run") / "run", steps=5, **TINY_MT)
    return api.train_mt(options, log=lambda line: None).out


@pytest.fixture
def mono(tmp_path) -> Path:
    path = tmp_path / "mono.txt"
    path.write_text("a b c\nd e f g\nh\n", encoding="utf-8")
    return path


def _translate(run: Path, *flags: str) -> int:
    quiet = ["--no-progress"] if "--output" in flags else []  # the bar is the pairs file's
    return main(["translate", "--ckpt", str(run), "--device", "cpu", *quiet, "--beam", "1", *flags])


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _refused(match: str, run: Path, source: Path, output: Path) -> None:
    """translate --output refuses before anything is written (quietly: no bar)."""
    with pytest.raises(ValueError, match=match):
        translate_file(TranslateFileOptions(ckpt=run, input=source, output=output, progress=False))


# ---- an existing --output ------------------------------------------------------------------------------------------
def test_an_output_without_a_complete_line_that_is_no_pair_is_refused_untouched(run, mono, tmp_path, capsys):
    """One line without its final newline used to be taken for "the line a stop cut off": cut off and overwritten."""
    notes = tmp_path / "notes.txt"
    notes.write_text(NOTES, encoding="utf-8")
    before = _snapshot(tmp_path)
    assert _translate(run, "--input", str(mono), "--output", str(notes)) == 2
    err = capsys.readouterr().err
    assert "notes.txt:1 (its last line, without a newline) is not the translation of" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert _snapshot(tmp_path) == before  # nothing emptied, no record written


def test_a_last_line_after_the_pairs_that_is_not_the_next_pair_is_refused(run, mono, tmp_path):
    opts = dict(ckpt=run, input=mono, beam=1, batch_size=2, progress=False)
    out = tmp_path / "out.tsv"
    translate_file(TranslateFileOptions(output=out, **opts))
    first = out.read_text(encoding="utf-8").split("\n")[0] + "\n"
    out.write_text(first + "something else", encoding="utf-8")
    before = _snapshot(tmp_path)
    with pytest.raises(ValueError, match=r"out.tsv:2 \(its last line, without a newline\) is not the translation of "
                                         r".*mono.txt:2 \('something else' against 'd e f g'\)"):
        translate_file(TranslateFileOptions(output=out, **opts))
    assert _snapshot(tmp_path) == before
    # past the last input line there is no next pair for it to start
    full = tmp_path / "full.tsv"
    translate_file(TranslateFileOptions(output=full, **opts))
    with open(full, "a", encoding="utf-8") as f:
        f.write("d")
    before = _snapshot(tmp_path)
    with pytest.raises(ValueError, match=r"full.tsv:4 .* against nothing \(the input has no more lines\)"):
        translate_file(TranslateFileOptions(output=full, **opts))
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("keep", [1, 7, 8, 9])
def test_a_line_cut_off_by_a_stop_is_translated_again(run, mono, tmp_path, keep):
    """A last line that is the start of the next line's pair ``d e f g<TAB>...``: part of its sentence, the
    sentence, the tab, part of the translation."""
    opts = dict(ckpt=run, input=mono, beam=1, batch_size=2, progress=False)
    straight = tmp_path / "straight.tsv"
    translate_file(TranslateFileOptions(output=straight, **opts))
    full = straight.read_text(encoding="utf-8")
    first, second = full.split("\n")[:2]
    stopped = tmp_path / "stopped.tsv"
    stopped.write_text(first + "\n" + second[:keep], encoding="utf-8")
    result = translate_file(TranslateFileOptions(output=stopped, **opts))
    assert result.resumed_from == 1 and stopped.read_text(encoding="utf-8") == full


def test_the_input_file_is_never_the_output(run, mono, tmp_path):
    before = mono.read_bytes()
    _refused(r"--output is the --input file .*mono.txt", run, mono, mono)
    _refused(r"--output is the --input file", run, mono, tmp_path / "." / "mono.txt")  # another spelling of it
    assert mono.read_bytes() == before and not (tmp_path / "mono.txt.json").exists()
    # nor is the record beside it
    source = tmp_path / "pairs.tsv.json"
    source.write_text("a b\n", encoding="utf-8")
    _refused(r"the record of --output \(pairs.tsv.json\) is the --input file", run, source, tmp_path / "pairs.tsv")
    assert source.read_text(encoding="utf-8") == "a b\n" and not (tmp_path / "pairs.tsv").exists()


def test_a_file_where_the_record_goes_that_is_not_a_record_is_refused(run, mono, tmp_path):
    mine = tmp_path / "out.tsv.json"
    mine.write_text('{"my": "settings"}', encoding="utf-8")
    _refused(r"out.tsv.json exists and is not the record of a translate --output run", run, mono, tmp_path / "out.tsv")
    assert mine.read_text(encoding="utf-8") == '{"my": "settings"}' and not (tmp_path / "out.tsv").exists()


def test_a_device_as_output_is_one_line_and_nothing_is_written_beside_it(run, mono, capsys):
    """Was: ``--output /dev/null`` wrote ``/dev/null.json`` (as root) and failed with ``[Errno 22] Invalid
    argument``; ``--output /dev/full`` read zeros without end until the kernel killed the process."""
    record, had_record = Path("/dev/null.json"), Path("/dev/null.json").exists()
    try:
        assert _translate(run, "--input", str(mono), "--output", "/dev/null") == 2
        assert capsys.readouterr().err == ("attnkit translate: error: --output '/dev/null' is not a regular file (a "
                                           "device, pipe or socket); give a file name\n")
        assert record.exists() == had_record
    finally:
        if record.exists() and not had_record:
            record.unlink()


# ---- what a line is ------------------------------------------------------------------------------------------------
def test_a_bare_carriage_return_stays_inside_its_line(run, tmp_path, capsys, monkeypatch):
    """One line in, one line out, from --input as from stdin: lines end at \\n only (a final \\r\\n is stripped)."""
    source = tmp_path / "cr.txt"
    source.write_bytes(b"a b\rc d\ne f\r\n")
    assert _translate(run, "--input", str(source)) == 0
    from_file = capsys.readouterr().out
    assert from_file.count("\n") == 2
    monkeypatch.setattr("sys.stdin", io.StringIO("a b\rc d\ne f\r\n"))
    assert _translate(run) == 0
    assert capsys.readouterr().out == from_file
    pairs = tmp_path / "cr.tsv"
    assert _translate(run, "--input", str(source), "--output", str(pairs)) == 0
    lines = pairs.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 3 and lines[0].startswith("a b c d\t") and lines[1].startswith("e f\t")
    assert json.loads((tmp_path / "cr.tsv.json").read_text())["lines"] == 2


def test_a_line_is_read_as_the_training_pairs_were(run, tmp_path, capsys):
    """A byte-order mark (a file saved by Notepad), a zero-width space, decomposed accents or a tab used to reach the
    tokenizer on the stdout path (only ``strip()``), so a line was translated differently from the same line in
    ``--output`` pairs and from the normalised text the model was trained on."""
    source = tmp_path / "odd.txt"
    source.write_text("\ufeffa b c\nd\u200b e\tf\nge\u0301 h\n", encoding="utf-8")
    clean = tmp_path / "clean.txt"
    clean.write_text("a b c\nd e f\ng\u00e9 h\n", encoding="utf-8")
    assert _translate(run, "--input", str(source)) == 0
    odd = capsys.readouterr().out
    assert _translate(run, "--input", str(clean)) == 0
    assert odd == capsys.readouterr().out
    pairs = tmp_path / "odd.tsv"
    assert _translate(run, "--input", str(source), "--output", str(pairs)) == 0
    assert [line.split("\t")[1] for line in pairs.read_text(encoding="utf-8").split("\n")[:-1]] == \
        [normalize_text(line) for line in odd.split("\n")[:-1]]


def test_a_closed_stdin_or_a_folder_as_input_is_one_line(run, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", None)  # what Python gives a process started with fd 0 closed
    assert _translate(run) == 2
    assert "no input: stdin is closed; pass --input FILE" in capsys.readouterr().err
    assert _translate(run, "--input", str(tmp_path)) == 2
    assert f"--input: a folder: {tmp_path}" in capsys.readouterr().err


def test_a_line_that_is_not_utf8_is_refused_with_its_number(run, tmp_path, capsys, monkeypatch):
    """Stdin under a UTF-8 locale holds such bytes as lone surrogates (surrogateescape); they used to reach the
    tokenizer ("TextEncodeInput must be Union[...]"), or the decoder's error named no line."""
    message = "line 2 is not valid UTF-8: byte 0xff at character 1; expected UTF-8 text"
    monkeypatch.setattr("sys.stdin", io.StringIO("a b\n\udcff c\n"))
    assert _translate(run) == 2
    assert message in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"a b\n\xff c\n")
    assert _translate(run, "--input", str(bad)) == 2
    assert message in capsys.readouterr().err
    assert _translate(run, "--input", str(bad), "--output", str(tmp_path / "bad.tsv")) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt"]  # refused before anything is written
    with pytest.raises(ValueError, match="line 2 is not valid UTF-8: byte 0xff"):
        Translator(TranslateOptions(ckpt=run, device="cpu")).translate(["a b", "\udcff c"])


# ---- decoding settings ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flag,value,message", [
    ("--max-len-a", "-1", "--max-len-a must be a finite number >= 0, got -1.0"),
    ("--max-len-b", "inf", "--max-len-b must be a finite number >= 0, got inf"),
    ("--length-penalty", "nan", "--length-penalty must be a finite number, got nan"),
])
def test_bad_decoding_values_are_refused_before_anything_is_written(run, mono, tmp_path, capsys, flag, value,
                                                                    message):
    """They used to be refused inside the search, after the record and an empty output were written (and the
    corrected command was then refused as "begun with another decoding")."""
    out = tmp_path / "out.tsv"
    assert _translate(run, "--input", str(mono), "--output", str(out), flag, value) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "out.tsv.json").exists()
    assert _translate(run, "--input", str(mono), "--output", str(out)) == 0
    with pytest.raises(ValueError, match=message.replace("+", r"\+")):
        TranslateOptions(ckpt=run, **{flag[2:].replace("-", "_"): float(value)})


@pytest.mark.parametrize("flags", [("--sort-batches", "4"), ("--no-progress",)])
def test_the_pairs_file_flags_are_refused_without_it(run, mono, capsys, flags):
    """``--sort-batches`` and ``--no-progress`` change only how ``--output`` writes a pairs file: translating to
    stdout with them is refused in one line, not silently done without them."""
    assert _translate(run, "--input", str(mono), *flags) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == ("attnkit translate: error: --sort-batches and --no-progress work only with "
                                    "--output (a pairs file), got them without")
