"""benchmarks/mt_peer.py: the torch.nn.Transformer peer (model, schedule, greedy decoding, training) and the
whole comparison on a tiny run."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch

from benchmarks import mt_peer
from helpers import assert_close


def _prepared(folder: Path) -> Path:
    """A prepared folder (train/valid/test.tsv) of a word-reversal task: "a b c" -> "C B A"."""
    rng = random.Random(0)
    folder.mkdir(parents=True)
    for split, n in (("train", 400), ("valid", 30), ("test", 30)):
        seqs = [rng.choices("abcdefgh", k=rng.randint(3, 6)) for _ in range(n)]
        text = "".join(f"{' '.join(w)}\t{' '.join(w[::-1]).upper()}\n" for w in seqs)
        (folder / f"{split}.tsv").write_text(text, encoding="utf-8")
    return folder


def test_peer_schedules():
    assert mt_peer.peer_lr(0, 0.3, lr=1e-4, schedule="constant", warmup=0) == 1e-4
    assert mt_peer.peer_lr(4, 0.0, lr=2e-3, schedule="cosine", warmup=10) == pytest.approx(1e-3)
    assert mt_peer.peer_lr(50, 0.5, lr=2e-3, schedule="cosine", warmup=10) == pytest.approx(1e-3)
    assert mt_peer.peer_lr(50, 1.0, lr=2e-3, schedule="cosine", warmup=10) == pytest.approx(0.0, abs=1e-12)


def test_peer_model_ties_embeddings_and_is_causal():
    torch.manual_seed(0)
    m = mt_peer.PeerTranslator(20, max_len=16, **mt_peer.PEER_SIZES["recipe"]).eval()
    assert m.generator.weight is m.embed.weight
    assert all(layer.norm_first for layer in m.transformer.encoder.layers)
    src, tgt = torch.randint(4, 20, (2, 5)), torch.randint(4, 20, (2, 6))
    pad = torch.zeros(2, 5, dtype=torch.bool)
    full = m(src, tgt, pad, torch.zeros(2, 6, dtype=torch.bool))  # (B, T, V)
    prefix = m(src, tgt[:, :3], pad, torch.zeros(2, 3, dtype=torch.bool))
    assert_close(full[:, :3], prefix, "float32")  # no peeking at later tokens


def test_peer_learns_and_decodes_a_tiny_task(tmp_path):
    from attnkit.data.pipeline.mt_batching import TokenBudgetBatcher, encode_pairs, train_joint_bpe
    from attnkit.data.corpora.parallel import load_parallel

    data = _prepared(tmp_path / "d")
    train = load_parallel(data)
    tok = train_joint_bpe(train.sources, train.targets, 300)
    enc = encode_pairs(tok, train.sources, train.targets, max_src_len=32)
    torch.manual_seed(0)
    model = mt_peer.PeerTranslator(tok.vocab_size, max_len=32, **mt_peer.PEER_SIZES["recipe"])
    fit = mt_peer.train_peer(model, TokenBudgetBatcher(enc, max_tokens=256, seed=0), steps=60, lr=2e-3,
                             schedule="cosine", warmup=5, log_every=10)
    assert fit["steps"] == 60 and fit["tokens"] > 0 and len(fit["curve"]) == 6
    assert fit["curve"][-1][1] < fit["curve"][0][1] - 1.0  # the loss falls
    hyps = mt_peer.peer_greedy(model, tok, enc.src[:5], max_len=32)
    assert len(hyps) == 5 and all(isinstance(h, str) for h in hyps)
    s = mt_peer.scores(train.targets[:5], train.targets[:5])
    assert s["bleu"] == pytest.approx(100.0) and s["chrf"] == pytest.approx(100.0)


@pytest.mark.parametrize("mode", [
    [],
    pytest.param(["--side-by-side", "--name", "peer_pair"], marks=pytest.mark.skipif(
        len(os.sched_getaffinity(0)) < 2, reason="--side-by-side needs two CPUs")),
], ids=["one-after-the-other", "side-by-side"])
def test_comparison_on_a_tiny_run(tmp_path, capsys, mode):
    data = _prepared(tmp_path / "d")
    results = tmp_path / "results"
    results.mkdir()
    cpus = len(os.sched_getaffinity(0))
    assert mt_peer.main(["--data", str(data), "--train", str(data / "train.tsv"), "--smoke-steps", "4",
                         "--peer-size", "recipe", "--out", str(tmp_path / "work"), "--results", str(results),
                         *mode]) == 0
    stem = "peer_pair" if mode else "mt_peer"
    assert sorted(p.name for p in results.iterdir()) == [f"{stem}.json", f"{stem}.md", f"{stem}_loss.png"]
    record = json.loads((results / f"{stem}.json").read_text())
    assert record["side_by_side"] == bool(mode)
    assert record["attnkit"]["steps"] == 4 and record["peer"]["train"]["steps"] == 4
    for side in (record["attnkit"]["test"]["test"], record["peer"]["test"]["test"]):
        assert side["sentences"] == 20 and 0.0 <= side["bleu"] <= 100.0 and 0.0 <= side["chrf"] <= 100.0
    assert len(record["samples"]) == 10 and set(record["samples"][0]) == {"source", "reference", "attnkit", "peer"}
    assert len(os.sched_getaffinity(0)) == cpus  # side by side pinned this process to one CPU, then let it go
    assert (results / f"{stem}_loss.png").stat().st_size > 0
    md = (results / f"{stem}.md").read_text()
    assert "| test |" in md and "torch.nn.Transformer peer (recipe)" in md and f"]({stem}_loss.png)" in md


def test_peer_starts_near_the_uniform_loss():
    """Tied embeddings are initialised for their two roles: the first loss is of the order of log(V), not hundreds."""
    import math

    torch.manual_seed(0)
    V = 2000
    m = mt_peer.PeerTranslator(V, max_len=32, **mt_peer.PEER_SIZES["tutorial"])
    src, tgt = torch.randint(4, V, (4, 10)), torch.randint(4, V, (4, 12))
    logits = m(src, tgt, torch.zeros(4, 10, dtype=torch.bool), torch.zeros(4, 12, dtype=torch.bool))
    labels = torch.randint(4, V, (4, 12))  # not tgt itself: with tied tables the residual favours the input token
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
    assert float(loss) < 2 * math.log(V)  # N(0, 1) tables gave ~480 here


def test_the_peer_alone_under_bf16_autocast(tmp_path, capsys, monkeypatch):
    """``--peer-only`` (the GPU row: attnkit's run is recorded apart) trains and scores the peer alone, with the
    sizes and autocast given, and decodes in float32 as attnkit's ``eval mt`` does; the record and its Markdown
    name no attnkit figures."""
    decoding = []
    greedy = mt_peer.peer_greedy

    def recorded(*args, **kwargs):
        decoding.append((torch.is_autocast_enabled("cpu"), kwargs.get("autocast")))
        return greedy(*args, **kwargs)

    monkeypatch.setattr(mt_peer, "peer_greedy", recorded)
    data = _prepared(tmp_path / "d")
    results = tmp_path / "results"
    results.mkdir()
    assert mt_peer.main(["--data", str(data), "--upsample-dictionary", "1", "--smoke-steps", "3",
                         "--peer-size", "recipe", "--peer-only", "--autocast", "bf16", "--vocab-size", "300",
                         "--max-tokens", "128", "--out", str(tmp_path / "work"), "--results", str(results),
                         "--name", "alone"]) == 0
    record = json.loads((results / "alone.json").read_text())
    assert record["attnkit"] is None and record["autocast"] == "bf16" and record["device"] == "cpu"
    assert decoding and set(decoding) == {(False, None)}  # every test set decoded outside autocast
    assert record["train_data"] == str(data / "train.tsv")  # --upsample-dictionary 1: the recipe's file as it is
    assert record["peer"]["train"]["steps"] == 3 and record["peer"]["vocab_size"] <= 300
    assert record["peer"]["test"]["test"]["sentences"] == 20
    assert set(record["samples"][0]) == {"source", "reference", "peer"}
    assert not (tmp_path / "work" / "attnkit").exists()  # attnkit did not train
    md = (results / "alone.md").read_text()
    assert "| test set (greedy) | torch.nn peer BLEU / chrF |" in md and "attnkit BLEU" not in md
    assert "| source (de) | reference (en) | peer |" in md


def test_the_base_peer_is_transformer_base_sized():
    m = mt_peer.PeerTranslator(8000, max_len=32, **mt_peer.PEER_SIZES["base"])
    layer = m.transformer.encoder.layers[0]
    assert (len(m.transformer.encoder.layers), len(m.transformer.decoder.layers)) == (6, 6)
    assert (layer.self_attn.embed_dim, layer.self_attn.num_heads, layer.linear1.out_features) == (512, 8, 2048)
    assert mt_peer.PEER_OPTIM["base"] == {"lr": 1e-3, "schedule": "cosine", "warmup": 500}


@pytest.mark.parametrize("flags, message", [
    (["--side-by-side", "--peer-only"], "--side-by-side pins each run to a CPU"),
    (["--upsample-dictionary", "0"], "--upsample-dictionary must be >= 1, got 0"),
])
def test_bad_flag_combinations_are_refused(tmp_path, flags, message, capsys):
    with pytest.raises(SystemExit) as e:
        mt_peer.main(["--out", str(tmp_path / "w"), *flags])
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "w").exists()  # refused before anything was written
