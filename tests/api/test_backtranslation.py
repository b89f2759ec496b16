"""Back-translation from Python: a reverse run (``reverse=True``), translating a file into pairs
(:func:`attnkit.api.translation.translate_file`: format, record, resume, refusals), and real + synthetic pairs in
one task (:meth:`attnkit.training.MTTask.mix_synthetic`: the sample, the tag in the batches, its gradient).

Axis legend: ``B`` pairs in a batch, ``S`` source length, ``C`` model width, ``V`` vocabulary.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from attnkit import api
from attnkit.api.translation import TranslateFileOptions, translate_file
from attnkit.data.corpora.parallel import read_back_translations
from attnkit.data.pipeline.mt_batching import BT_TAG
from attnkit.models.builders import build_model
from attnkit.models.presets import get_preset
from attnkit.training import MTTask

TINY_MT = dict(preset="transformer-cpu", overrides={"d_model": 32, "num_heads": 2, "dim_feedforward": 64,
                                                    "num_encoder_layers": 1, "num_decoder_layers": 1},
               vocab_size=300, max_tokens=256, eval_every=10, eval_batches=2, ckpt_every=5, log_every=5,
               bleu_sentences=8, progress=False)
MONO = ["A B C", "", "H G F E", "C C A B D", "E\tF G", "B", "D D D A", "G H", "A A B B C C"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory, make_copy_task) -> Path:
    """Letter sequences (source) and their upper-cased copies (target): train/valid/test.tsv."""
    folder = tmp_path_factory.mktemp("pairs") / "copy"
    return make_copy_task(folder, sizes=(("train", 300), ("valid", 20), ("test", 20)))


@pytest.fixture(scope="module")
def reverse_run(pairs, tmp_path_factory) -> api.RunResult:
    options = api.TrainMTOptions(data=str(pairs), out=tmp_path_factory.mktemp("rev") / "run", steps=10,
                                 reverse=True, **TINY_MT)
    return api.train_mt(options, log=lambda line: None)


@pytest.fixture
def mono(tmp_path) -> Path:
    path = tmp_path / "mono.txt"
    path.write_text("".join(line + "\n" for line in MONO), encoding="utf-8")
    return path


def _handles(path: Path) -> int:
    """How many open files of this process are ``path`` (Linux: /proc/self/fd)."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("needs /proc/self/fd")
    return sum(os.path.realpath(fds / fd) == os.path.realpath(path) for fd in os.listdir(fds))


def test_a_reverse_run_trains_and_validates_the_other_way(pairs, reverse_run):
    from attnkit.checkpoints import load

    state = load(reverse_run.out, expect_kind="mt").state
    assert state["extra"]["mt_options"]["reverse"] is True
    task = MTTask.from_data(pairs, vocab_size=300, max_len=32, reverse=True)
    sources, targets = task.corpora["valid"]
    assert all(s.isupper() for s in sources) and all(t.islower() for t in targets)  # English -> "German"
    assert all(s.isupper() for s in task.corpora["train"][0])
    forward = MTTask.from_data(pairs, vocab_size=300, max_len=32)
    assert forward.corpora["valid"] == (targets, sources)


def test_translate_file_writes_one_pair_per_input_line(reverse_run, mono, tmp_path):
    out = tmp_path / "synthetic.tsv"
    result = translate_file(TranslateFileOptions(ckpt=reverse_run.out, input=mono, output=out, beam=1,
                                                 batch_size=2, sort_batches=2, progress=False))
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) - 1 == len(MONO)  # one line per input line, each ending in \n
    rows = [line.split("\t") for line in lines[:-1]]
    assert all(len(row) == 2 for row in rows)  # exactly one tab: a tab inside a sentence became a space
    assert [r[0] for r in rows] == [" ".join(s.split()) for s in MONO]  # input order, normalised
    assert rows[1] == ["", ""]  # an empty line stays empty
    assert all(r[1] for i, r in enumerate(rows) if i != 1)
    assert (result.lines, result.resumed_from, result.translated) == (len(MONO), 0, len(MONO))
    assert result.source_tokens > 0 and result.target_tokens > 0 and result.sentences_per_s > 0
    record = json.loads(result.record.read_text())
    assert record["complete"] and record["decoding"]["beam"] == 1 and record["translated"] == len(MONO)
    synthetic = read_back_translations(out)  # what train mt --synthetic reads: (translation, sentence)
    assert synthetic.targets == [r[0] for r in rows if r[0] and r[1]] and synthetic.skipped == 1


def test_translate_file_continues_after_the_last_complete_line(reverse_run, mono, tmp_path):
    opts = dict(ckpt=reverse_run.out, input=mono, beam=2, batch_size=2, sort_batches=1, progress=False)
    straight = tmp_path / "straight.tsv"
    translate_file(TranslateFileOptions(output=straight, **opts))
    full = straight.read_text(encoding="utf-8")
    stopped = tmp_path / "stopped.tsv"
    cut = full.index("\n", full.index("\n") + 1) + 1 + 3  # two complete lines and part of the third
    stopped.write_text(full[:cut], encoding="utf-8")
    result = translate_file(TranslateFileOptions(output=stopped, **opts))
    assert result.resumed_from == 2 and result.translated == len(MONO) - 2
    assert stopped.read_text(encoding="utf-8") == full
    again = translate_file(TranslateFileOptions(output=stopped, **opts))
    assert again.translated == 0 and "nothing to translate" in again.summary()


def test_a_pairs_file_another_process_writes_is_refused(reverse_run, mono, tmp_path, monkeypatch):
    """Was: two ``translate --output`` runs of one file each read how many lines were done and appended the same
    pairs after them. The file is locked while a run writes it: a second run is refused at once, whether the file
    existed before or the other run made it while this one loaded the model; once it is free the run finishes it."""
    import fcntl

    import attnkit.api.translation as translation

    opts = dict(ckpt=reverse_run.out, input=mono, beam=1, batch_size=4, progress=False)
    out = tmp_path / "pairs.tsv"
    out.write_text("", encoding="utf-8")
    message = r"pairs.tsv is being written by another translate --output process; wait for it to finish"
    real = translation.Translator
    loads = []
    monkeypatch.setattr(translation, "Translator", lambda options: loads.append(options) or real(options))
    with translation._lock_output(out):  # the other run's hold on the file, taken as a run takes it
        with pytest.raises(ValueError, match=message) as refused:  # noqa: F841 (held: its frames stay alive)
            translate_file(TranslateFileOptions(output=out, **opts))
        assert loads == []  # refused before its model is loaded
        assert _handles(out) == 1  # the other run's: the refused run's own is closed (its error still held)
    assert translate_file(TranslateFileOptions(output=out, **opts)).translated == len(MONO) and len(loads) == 1

    late = tmp_path / "late.tsv"
    held = []

    def the_other_process_begins(options):  # while this run loads its model, another one makes the file
        held.append(open(late, "ab"))
        fcntl.flock(held[0].fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return real(options)

    monkeypatch.setattr(translation, "Translator", the_other_process_begins)
    with pytest.raises(ValueError, match=message.replace("pairs", "late")):
        translate_file(TranslateFileOptions(output=late, **opts))
    held[0].close()
    assert late.read_text() == "" and not late.with_name("late.tsv.json").exists()


def test_a_pairs_file_is_locked_while_its_pairs_are_written_and_free_after_the_run_even_a_failed_one(
        reverse_run, mono, tmp_path, monkeypatch):
    """The lock is held while the pairs are written (not only while the file is read) and dropped when the run
    returns, without leaving its file to the garbage collector, or fails (while its error is still held, as a
    REPL's last traceback holds it); a file another run made and finished part of while this one loaded its model
    is resumed after its pairs, not written again."""
    import gc
    import warnings

    import attnkit.api.translation as translation

    opts = dict(ckpt=reverse_run.out, input=mono, beam=1, batch_size=4, progress=False)
    message = r"is being written by another translate --output process"
    real_translator, real_lines = translation.Translator, translation._translate_lines
    meanwhile = {}  # what another run writes while this one loads its model

    def loading(options):
        for path, text in meanwhile.items():
            path.write_text(text, encoding="utf-8")
        return real_translator(options)

    def writing(translator, input_path, output, *rest):
        with pytest.raises(ValueError, match=message):
            translation._lock_output(output)  # another run is refused while this one writes
        if output.name == "failing.tsv":
            raise OSError("no space left on device")
        real_lines(translator, input_path, output, *rest)

    monkeypatch.setattr(translation, "Translator", loading)
    monkeypatch.setattr(translation, "_translate_lines", writing)
    out = tmp_path / "pairs.tsv"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        assert translate_file(TranslateFileOptions(output=out, **opts)).translated == len(MONO)
        gc.collect()
    assert not [w for w in caught if str(out) in str(w.message)]  # its file was closed, not collected
    translation._lock_output(out).close()  # free once the run returned
    full = out.read_text(encoding="utf-8")

    late = tmp_path / "late.tsv"
    meanwhile[late] = "".join(full.splitlines(keepends=True)[:3])  # made, 3 pairs written, and let go meanwhile
    result = translate_file(TranslateFileOptions(output=late, **opts))
    assert (result.resumed_from, result.translated) == (3, len(MONO) - 3) and late.read_text(encoding="utf-8") == full

    failing = tmp_path / "failing.tsv"
    with pytest.raises(OSError, match="no space left on device") as failed:  # noqa: F841 (held: its frames live)
        translate_file(TranslateFileOptions(output=failing, **opts))
    translation._lock_output(failing).close()  # free although the failed run's error is still held


def test_translate_file_refuses_an_output_of_other_input_or_decoding(reverse_run, mono, tmp_path):
    opts = dict(ckpt=reverse_run.out, input=mono, batch_size=4, progress=False)
    other = tmp_path / "other.tsv"
    other.write_text("X Y Z\tx y z\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"other.tsv:1 is not the translation of .*mono.txt:1"):
        translate_file(TranslateFileOptions(output=other, **opts))
    assert other.read_text(encoding="utf-8") == "X Y Z\tx y z\n"  # untouched
    out = tmp_path / "out.tsv"
    translate_file(TranslateFileOptions(output=out, beam=1, **opts))
    with pytest.raises(ValueError, match="begun with another decoding"):
        translate_file(TranslateFileOptions(output=out, beam=3, **opts))


def test_translate_file_refuses_outputs_that_are_not_a_new_or_earlier_pairs_file(reverse_run, mono, tmp_path):
    """Was: a folder gave a bare ``IsADirectoryError``, a path below a file ``[Errno 17] File exists`` after the
    model was loaded, ``new/../notes.tsv`` (``new`` missing) appended pairs to the user's ``notes.tsv``, and a new file
    in a checkpoint was written where the run's next save deletes it."""
    opts = dict(ckpt=reverse_run.out, input=mono, batch_size=4, progress=False)
    (tmp_path / "fold").mkdir()
    notes = tmp_path / "notes.tsv"
    notes.write_text("mine\n", encoding="utf-8")
    best = Path(reverse_run.out) / "checkpoints" / "best"
    for output, match in ((tmp_path / "fold", "is a folder"), (notes / "p.tsv", "is a file, not a folder"),
                          (tmp_path / "new" / ".." / "notes.tsv", r"notes.tsv:1 is not the translation"),
                          (best / "pairs.tsv", "is a file of a training run")):
        with pytest.raises(ValueError, match=match):
            translate_file(TranslateFileOptions(output=output, **opts))
    assert notes.read_text(encoding="utf-8") == "mine\n" and not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fold", "mono.txt", "notes.tsv"]
    assert not list(best.glob("pairs.tsv*"))


def test_translate_file_writes_nothing_when_the_model_cannot_be_loaded(mono, tmp_path):
    out = tmp_path / "new" / "pairs.tsv"  # no record (pairs.tsv.json) and no folder is left behind
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        translate_file(TranslateFileOptions(ckpt=tmp_path / "nowhere", input=mono, output=out, progress=False))
    assert not (tmp_path / "new").exists()


def _synthetic_file(path: Path, n: int) -> Path:
    """``n`` distinct back-translation lines: ``SENTENCE<TAB>translation`` (an upper-case target, a lower-case
    source)."""
    lines = [f"{'A B C D'[:1 + 2 * (i % 4)]} H{i}\t{'a b c d'[:1 + 2 * (i % 4)]} h{i}" for i in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_mixing_samples_r_synthetic_pairs_per_real_pair_with_a_fixed_seed(pairs, tmp_path):
    syn = _synthetic_file(tmp_path / "syn.tsv", 500)
    task = MTTask.from_data(pairs, vocab_size=300, max_len=32, synthetic=syn, synthetic_ratio=0.5, seed=3)
    n_real = 300
    assert task.synthetic["pairs"] == 150 and len(task.train) == n_real + 150 and task.synthetic["tag_id"] == 4
    sources, targets = task.corpora["train"]
    tagged = [s for s in sources if s.startswith(BT_TAG)]
    assert len(tagged) == 150 and all(t.isupper() for s, t in zip(sources, targets) if s.startswith(BT_TAG))
    again = MTTask.from_data(pairs, vocab_size=300, max_len=32, synthetic=syn, synthetic_ratio=0.5, seed=3)
    other_seed = MTTask.from_data(pairs, vocab_size=300, max_len=32, synthetic=syn, synthetic_ratio=0.5, seed=4)
    assert again.corpora["train"] == task.corpora["train"] != other_seed.corpora["train"]
    more = MTTask.from_data(pairs, vocab_size=300, max_len=32, synthetic=syn, synthetic_ratio=3.0, seed=3)
    assert more.synthetic["pairs"] == 900 and more.synthetic["copies"] == 1  # the whole file, then 400 drawn
    more_sources = more.corpora["train"][0][n_real:]
    assert more_sources[:500] == [BT_TAG + s for s in read_back_translations(syn).sources]
    assert len(set(more_sources[500:])) == 400 and set(more_sources[500:]) <= set(more_sources[:500])
    assert task.state_dict()["n_synthetic"] == 150 and "n_synthetic" not in MTTask.from_data(
        pairs, vocab_size=300, max_len=32).state_dict()


def test_the_tag_reaches_the_model_and_its_embedding_learns(pairs, tmp_path):
    syn = _synthetic_file(tmp_path / "syn.tsv", 200)
    task = MTTask.from_data(pairs, vocab_size=300, max_len=32, synthetic=syn, synthetic_ratio=0.5, max_tokens=256)
    tag = task.synthetic["tag_id"]
    config = get_preset("transformer-cpu", src_vocab_size=task.tokenizer.vocab_size, d_model=32, num_heads=2,
                        tgt_vocab_size=task.tokenizer.vocab_size, dim_feedforward=64, num_encoder_layers=1,
                        num_decoder_layers=1, max_len=32, pad_id=task.tokenizer.pad_id,
                        share_embeddings=False, tie_output=False)  # the source table learns from the inputs only
    model = build_model(config)
    batches = [task.batch("train", i) for i in range(task.num_batches("train"))]
    with_tag = [b for b in batches if (b.src == tag).any()]
    without = [b for b in batches if not (b.src == tag).any()]
    assert with_tag and without
    for b in with_tag:  # the tag is the first id of the synthetic rows, nowhere else
        rows = (b.src == tag).any(dim=1)  # (B,)
        assert (b.src[rows, 0] == tag).all() and int((b.src == tag).sum()) == int(rows.sum())
    table = model.src_embed.tok.weight  # (V, C), apart from the target side's table and the output layer
    for batch, expect in ((with_tag[0], True), (without[0], False)):
        model.zero_grad(set_to_none=False)
        loss, _ = task.loss(model, batch)
        loss.backward()
        assert bool(table.grad[tag].abs().sum() > 0) is expect
        assert table.grad[5:].abs().sum() > 0  # ordinary tokens always learn


def test_word_dropout_never_drops_the_tag(pairs, tmp_path):
    syn = _synthetic_file(tmp_path / "syn.tsv", 200)
    task = MTTask.from_data(pairs, vocab_size=300, max_len=32, synthetic=syn, synthetic_ratio=0.5, max_tokens=256,
                            word_dropout=0.9)
    tag, unk = task.synthetic["tag_id"], task.tokenizer.unk_id
    torch.manual_seed(0)
    for i in range(task.num_batches("train")):
        b = task.batch("train", i)
        dropped = task._drop_words(b).src  # (B, S)
        assert torch.equal(dropped == tag, b.src == tag)  # every tag stays, and no word becomes one
        words = ~b.src_key_padding_mask & (b.src != task.train.eos_id) & (b.src != tag)  # (B, S)
        assert (dropped[words] == unk).float().mean() > 0.5  # the words around it are dropped


def test_mixing_refuses_a_tokenizer_without_the_tag_and_tagged_real_sources(pairs, tmp_path):
    from attnkit.data.pipeline.mt_batching import train_joint_bpe

    syn = _synthetic_file(tmp_path / "syn.tsv", 20)
    plain = train_joint_bpe(["a b c"] * 5, ["A B C"] * 5, 300)
    with pytest.raises(ValueError, match="one special token"):
        MTTask.from_data(pairs, tokenizer=plain, max_len=32, synthetic=syn)
    tagged = tmp_path / "tagged.tsv"
    tagged.write_text("".join(f"{BT_TAG}a b {i}\tA B {i}\n" for i in range(20)), encoding="utf-8")
    with pytest.raises(ValueError, match=r"real sentences \(sources or targets\) contain the back-translation tag"):
        MTTask.from_data(tagged, vocab_size=300, max_len=32, synthetic=syn)
    with pytest.raises(ValueError, match="20 real sentences .* contain the back-translation tag"):
        MTTask.from_data(pairs, vocab_size=300, max_len=32, synthetic=syn, anneal=tagged, anneal_share=0.2)
    tagged.write_text("".join(f"a b {i}\tA B {BT_TAG}{i}\n" for i in range(20)), encoding="utf-8")  # in the targets
    with pytest.raises(ValueError, match="20 real sentences .* contain the back-translation tag"):
        MTTask.from_data(tagged, vocab_size=300, max_len=32, synthetic=syn)
    with pytest.raises(ValueError, match="synthetic_ratio must be a number > 0"):
        MTTask.from_data(pairs, vocab_size=300, max_len=32, synthetic=syn, synthetic_ratio=0.0)


def test_the_input_is_a_file_or_a_monolingual_recipe(tmp_path):
    from attnkit.api.translation import _input_file

    path = tmp_path / "mono.txt"
    path.write_text("A B\n", encoding="utf-8")
    assert _input_file(path) == path
    with pytest.raises(ValueError, match="is a mt recipe; translate reads a text file or a monolingual recipe "
                                         r"\(en-mono\)"):
        _input_file("de-en")
    with pytest.raises(ValueError, match="unknown data recipe 'no-such-corpus'"):
        _input_file("no-such-corpus")
    with pytest.raises(FileNotFoundError, match="no such file"):
        _input_file(tmp_path / "missing.txt")


def test_both_records_of_a_run_are_written_under_its_lock(reverse_run, mono, tmp_path, monkeypatch):
    """Was: the final record (``complete``, counts) was written after the lock was let go, so a run started in
    between could find it half-way. Both writes of ``<output>.json`` now happen while the run holds the file."""
    import attnkit.api.translation as translation
    import attnkit.checkpoints as checkpoints

    out = tmp_path / "pairs.tsv"
    real = checkpoints.write_text_atomic
    written = []

    def while_locked(path, text):
        with pytest.raises(ValueError, match=r"is being written by another translate --output process"):
            translation._lock_output(out)
        written.append(json.loads(text)["complete"])
        return real(path, text)

    monkeypatch.setattr(checkpoints, "write_text_atomic", while_locked)
    translate_file(TranslateFileOptions(ckpt=reverse_run.out, input=mono, output=out, beam=1, progress=False))
    assert written == [False, True]
