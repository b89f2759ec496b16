"""Translation end to end through the command line, on a generated copy task: prepare → train → translate → eval.

The "language pair" is sequences of letters and their copies. A tiny Transformer learns it in a few hundred
steps, and the whole CLI path (data folder, joint BPE, token-budget batches, the trainer, checkpoint
averaging, loading, beam search, sacreBLEU) must work for BLEU to come out high.
"""

from __future__ import annotations

import io
import json

from attnkit.cli.main import main
from attnkit.checkpoints import load

TINY_MT = ["--preset", "transformer-small", "--set", "d_model=64", "--set", "num_heads=4",
           "--set", "num_encoder_layers=1", "--set", "num_decoder_layers=1", "--set", "dim_feedforward=128",
           "--set", "dropout=0.0", "--set", "norm_first=true", "--vocab-size", "300", "--max-tokens", "384",
           "--max-len", "24", "--schedule", "inverse_sqrt", "--lr", "1.0", "--warmup-steps", "40", "--log-every", "20",
           "--no-progress"]


def test_prepare_train_translate_eval(tmp_path, capsys, monkeypatch, make_copy_task):
    data = make_copy_task(tmp_path / "copy")
    run = tmp_path / "run"
    assert main(["train", "mt", "--data", str(data), "--out", str(run), *TINY_MT, "--steps", "360",
                 "--eval-every", "120", "--eval-batches", "4", "--ckpt-every", "60", "--bleu",
                 "--bleu-sentences", "30", "--average-last", "2"]) == 0
    err = capsys.readouterr().err
    assert "padding" in err and "skipped malformed lines: train 0" in err and "truncated to 24 tokens" in err

    # the checkpoint is self-contained: model, tokenizer, kind
    loaded = load(run, expect_kind="mt")
    model, tok, state = loaded.model, loaded.tokenizer, loaded.state
    assert state["extra"]["kind"] == "mt" and tok.vocab_size == model.config.tgt_vocab_size
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("valid_bleu" in r for r in rows)
    avg = run / "checkpoints" / "averaged"
    assert (avg / "model.safetensors").is_file()
    assert json.loads((avg / "state.json").read_text())["averaged_steps"] == [300, 360]
    assert load(avg, expect_kind="mt").tokenizer.to_dict() == tok.to_dict()  # averaged: same tokenizer, loads

    # translate: stdin → stdout, one line per input line, in order, empty line for an empty input
    monkeypatch.setattr("sys.stdin", io.StringIO("a b c d\n\nh g f e d\nc c a\n"))
    assert main(["translate", "--ckpt", str(run), "--beam", "3", "--batch-size", "2"]) == 0
    out = capsys.readouterr().out.split("\n")
    assert out[:4] == ["A B C D", "", "H G F E D", "C C A"], out

    # eval mt on the test split: BLEU from sacrebleu on detokenized text, written as JSON
    result_file = tmp_path / "eval.json"
    hyps_file = tmp_path / "hyps.txt"
    assert main(["eval", "mt", "--ckpt", str(run), "--data", str(data), "--split", "test", "--beam", "2",
                 "--json", str(result_file), "--hyps", str(hyps_file)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(result_file.read_text())
    assert "BLEU" in printed and "chrF" in printed
    assert result["sentences"] == 60 and result["beam"] == 2
    assert result["bleu"] > 80.0, result  # learned the task (an untrained model scores ~0)
    assert result["chrf"] > 80.0, result
    assert len(hyps_file.read_text().splitlines()) == 60

    # the same pairs as two line-aligned files, and as a TSV whose name holds a comma: the same scores
    pairs = [line.split("\t") for line in (data / "test.tsv").read_text().splitlines()]
    (tmp_path / "test.de").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "test.en").write_text("".join(t + "\n" for _, t in pairs))
    (tmp_path / "te,st.tsv").write_text((data / "test.tsv").read_text())
    for given in (f"{tmp_path / 'test.de'},{tmp_path / 'test.en'}", str(tmp_path / "te,st.tsv")):
        other = tmp_path / "other.json"
        assert main(["eval", "mt", "--ckpt", str(run), "--data", given, "--beam", "2", "--json", str(other)]) == 0
        capsys.readouterr()
        assert json.loads(other.read_text())["bleu"] == result["bleu"]
