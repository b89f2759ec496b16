"""benchmarks/mt_split_loss.py: which pairs a ``--pairs`` spec selects, and that the loss it reports is the mean
cross-entropy per target token of the model, checked against a pair-by-pair forward pass of a tiny run trained
by the ``tiny_run`` fixture (conftest.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from benchmarks import mt_split_loss

from attnkit.data.pipeline.mt_batching import encode_pairs
from attnkit.data.corpora.parallel import read_tsv
from attnkit.checkpoints import load


def test_a_spec_names_a_file_and_optionally_a_slice_or_a_sample():
    assert mt_split_loss.parse_pairs_spec("v=a/valid.tsv") == ("v", Path("a/valid.tsv"), None, None, None)
    assert mt_split_loss.parse_pairs_spec("d=x.tsv:10:5") == ("d", Path("x.tsv"), "slice", 10, 5)
    assert mt_split_loss.parse_pairs_spec("t=x.tsv:sample:7") == ("t", Path("x.tsv"), "sample", None, 7)
    assert mt_split_loss.parse_pairs_spec("w=C:/data/x.tsv") == ("w", Path("C:/data/x.tsv"), None, None, None)
    for bad in ("x.tsv", "=x.tsv", "name="):
        with pytest.raises(ValueError, match="NAME=TSV"):
            mt_split_loss.parse_pairs_spec(bad)


def _loss_pair_by_pair(model, tokenizer, state, pairs):
    enc = encode_pairs(tokenizer, [s for s, _ in pairs], [t for _, t in pairs],
                       max_src_len=state["model_config"]["max_len"])
    total, count = 0.0, 0
    with torch.no_grad():
        for src, tgt in zip(enc.src, enc.tgt):
            tgt_in = torch.tensor([[enc.bos_id] + tgt])  # (1, T)
            labels = torch.tensor(tgt + [enc.eos_id])  # (T,)
            logits = model(torch.tensor([src]), tgt_in)[0]  # (T, V)
            total += F.cross_entropy(logits.float(), labels, reduction="sum").item()
            count += len(labels)
    return total / count, count


def test_the_loss_is_the_mean_per_target_token_over_the_chosen_pairs(tiny_run, tmp_path):
    data, run = tiny_run
    data = data / "train.tsv"
    out = tmp_path / "loss.json"
    assert mt_split_loss.main(["--ckpt", str(run), "--threads", "1", "--max-tokens", "64", "--json", str(out),
                               "--pairs", f"head={data}:0:40", "--pairs", f"drawn={data}:sample:25",
                               "--pairs", f"all={data}"]) == 0
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    corpus = read_tsv(data)
    pairs = list(zip(corpus.sources, corpus.targets))
    loaded = load(run, expect_kind="mt")
    model, tokenizer, state = loaded.model, loaded.tokenizer, loaded.state
    chosen = {"head": pairs[:40], "drawn": random.Random(0).sample(pairs, 25), "all": pairs}
    for name, part in chosen.items():
        expected, tokens = _loss_pair_by_pair(model, tokenizer, state, part)
        assert rows[name]["pairs"] == len(part)
        assert rows[name]["target_tokens"] == tokens
        assert rows[name]["loss"] == pytest.approx(expected, rel=1e-5)


def test_a_bad_spec_or_an_empty_selection_is_a_usage_error(tiny_run, capsys):
    data, run = tiny_run
    data = data / "train.tsv"
    with pytest.raises(SystemExit) as e:
        mt_split_loss.main(["--ckpt", str(run), "--pairs", "nofile"])
    assert e.value.code == 2 and "NAME=TSV" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        mt_split_loss.main(["--ckpt", str(run), "--pairs", f"gone={data}.missing"])
    assert e.value.code == 2 and "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        mt_split_loss.main(["--ckpt", str(run), "--pairs", f"past={data}:5000:10"])
    assert e.value.code == 2 and "no pair selected" in capsys.readouterr().err
