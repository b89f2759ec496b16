"""MTTask from text files (MTTask.from_data) with a real joint BPE, and the data-side guarantees of the task:
label smoothing by hand, padding invariance, the fixed shuffled validation plan, truncation and malformed lines.

(The core Task behaviour and the Trainer loop are covered in test_mt_task.py.)
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnkit.data.pipeline.mt_batching import IGNORE_INDEX, encode_pairs, train_joint_bpe
from attnkit.data.corpora.parallel import write_tsv
from attnkit.models.transformer import Transformer
from attnkit.training.mt_task import MTTask
import helpers

PAIRS = [
    ("Er lobte ihre Kochkunst.", "He praised her cooking."),
    ("Ist heute Post gekommen?", "Did we get any mail today?"),
    ("Das Prinzip ist sehr einfach.", "The principle is very simple."),
    ("Ich sollte gehen.", "I ought to go."),
    ("Die Datei existiert bereits.", "The file already exists."),
    ("Größe ändern", "Change size"),
    ("Wir können keine zusätzliche Arbeit annehmen.", "We can’t take on any extra work."),
    ("Er sah sie nachdenklich an.", "He watched her reflectively."),
    ("Alle Ebenen zurücksetzen", "Reset all levels"),
    ("Eine Datei öffnen", "Open a file"),
    ("Neues Kennwort", "New Password"),
    ("Das ist nur scheinbar paradox.", "This is only seemingly a paradox."),
]
VALID = [("Ich lobte die Datei.", "I praised the file."), ("Alle Ebenen öffnen", "Open all levels"),
         ("Er sollte gehen.", "He ought to go.")]


@pytest.fixture(scope="module")
def tok():
    return train_joint_bpe([s for s, _ in PAIRS] * 2, [t for _, t in PAIRS] * 2, vocab_size=360)


@pytest.fixture()
def folder(tmp_path):
    write_tsv(tmp_path / "train.tsv", PAIRS)
    write_tsv(tmp_path / "valid.tsv", VALID)
    return tmp_path


def encode(tok, pairs, max_len: int = 32):
    return encode_pairs(tok, [s for s, _ in pairs], [t for _, t in pairs], max_src_len=max_len)


def tiny_model(vocab_size: int) -> Transformer:
    torch.manual_seed(0)
    return Transformer(helpers.tiny_transformer_config(
        src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
        dim_feedforward=64, share_embeddings=True, tie_output=True))


class FixedLogits(nn.Module):
    """A stand-in with the Transformer's forward signature: logits from a fixed random table (T_max, V)."""

    def __init__(self, vocab_size: int, max_len: int = 64):
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.table = nn.Parameter(torch.randn(max_len, vocab_size, generator=g) * 3)  # (T_max, V)
        self.seen: dict[str, torch.Tensor | None] = {}

    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
        self.seen = {"src": src_key_padding_mask, "tgt": tgt_key_padding_mask}
        B, T = tgt.shape
        return self.table[:T].unsqueeze(0).expand(B, T, -1) + tgt.unsqueeze(-1) * 0.01  # (B, T, V)


# --- from_data ---------------------------------------------------------------------------------------------------
def test_from_a_prepared_folder_trains_a_joint_bpe(folder):
    task = MTTask.from_data(folder, vocab_size=300, max_len=64, max_tokens=128)
    tok = task.tokenizer
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert len(task.train) == len(PAIRS) and len(task.valid) == len(VALID)
    assert task.corpora["valid"] == ([s for s, _ in VALID], [t for _, t in VALID])
    assert task.skipped == {"train": 0, "valid": 0} and task.n_truncated == {"train": 0, "valid": 0}
    assert task.label_smoothing == 0.1  # the paper's ε by default
    assert task.train.src[0] == tok.encode(PAIRS[0][0]) + [tok.eos_id]


def test_anneal_pairs_from_a_folders_in_domain_file_or_a_tsv(folder, tok):
    write_tsv(folder / "in-domain.tsv", PAIRS[:4])
    (folder / "other.tsv").write_text("Ja.\tYes.\nno tab\n", encoding="utf-8")
    task = MTTask.from_data(folder, tokenizer=tok, max_len=32, max_tokens=64, anneal=folder, anneal_share=0.3)
    assert len(task.anneal) == 4 and task.anneal_share == 0.3
    assert task.anneal.src[1] == tok.encode(PAIRS[1][0]) + [tok.eos_id]  # the same tokenizer and special ids
    assert task.skipped == {"train": 0, "valid": 0, "anneal": 0} and task.n_truncated["anneal"] == 0
    task = MTTask.from_data(folder, tokenizer=tok, max_len=32, max_tokens=64, anneal=folder / "other.tsv",
                            anneal_share=0.3)
    assert len(task.anneal) == 1 and task.skipped["anneal"] == 1
    (folder / "in-domain.tsv").unlink()
    with pytest.raises(FileNotFoundError, match="has no in-domain.tsv"):
        MTTask.from_data(folder, tokenizer=tok, max_len=32, max_tokens=64, anneal=folder, anneal_share=0.3)
    (folder / "empty.tsv").write_text("no tab\n", encoding="utf-8")
    with pytest.raises(ValueError, match="anneal data .*empty.tsv' holds no usable pair"):
        MTTask.from_data(folder, tokenizer=tok, max_len=32, max_tokens=64, anneal=folder / "empty.tsv",
                         anneal_share=0.3)


def test_from_a_tsv_and_two_aligned_files(folder, tok):
    (folder / "v.de").write_text("Ja.\nNein.\n", encoding="utf-8")
    (folder / "v.en").write_text("Yes.\nNo.\n", encoding="utf-8")
    task = MTTask.from_data(folder / "train.tsv", valid=[folder / "v.de", folder / "v.en"], tokenizer=tok,
                            max_len=32, max_tokens=64)
    assert task.tokenizer is tok and task.corpora["valid"] == (["Ja.", "Nein."], ["Yes.", "No."])


def test_a_file_without_valid_gets_a_validation_part_split_off(folder, tok):
    task = MTTask.from_data(folder / "train.tsv", tokenizer=tok, max_len=32, max_tokens=64)
    assert task.valid_split == {"pairs": 12, "valid": 1, "train": 11, "dropped": 0, "fraction": 0.1,
                                "max_pairs": 1000, "seed": 0}
    train, valid = (list(zip(*task.corpora[name])) for name in ("train", "valid"))
    assert len(valid) == 1 and sorted(train + valid) == sorted(PAIRS)  # disjoint, nothing lost
    again = MTTask.from_data(folder / "train.tsv", tokenizer=tok, max_len=32, max_tokens=64, seed=5)
    assert again.corpora == task.corpora  # the same split whatever the training seed
    assert MTTask.from_data(folder, tokenizer=tok).valid_split is None  # a folder has its own valid.tsv


def test_anneal_pairs_never_hold_a_split_off_validation_pair(folder, tok):
    # --anneal-data naming the --data file itself (or a part of it): the validation pairs split off the data must
    # not come back as training pairs in the anneal phase
    task = MTTask.from_data(folder / "train.tsv", tokenizer=tok, max_len=32, max_tokens=64,
                            anneal=folder / "train.tsv", anneal_share=0.2)
    valid_sources = set(task.corpora["valid"][0])
    anneal_sources = {tok.decode(list(s)[:-1]) for s in task.anneal.src}
    assert len(valid_sources) == 1 and not valid_sources & anneal_sources
    assert len(task.anneal) == len(PAIRS) - 1 and task.valid_split["anneal_dropped"] == 1
    assert "anneal_dropped" not in MTTask.from_data(folder / "train.tsv", tokenizer=tok, max_len=32).valid_split


def test_a_file_too_small_to_split_is_refused(folder, tok):
    write_tsv(folder / "tiny.tsv", PAIRS[:9])
    with pytest.raises(ValueError, match=r"holds 9 usable pairs \(0 malformed lines skipped\): too few to split off "
                                         r"a validation part \(needs at least 10\); pass validation pairs"):
        MTTask.from_data(folder / "tiny.tsv", tokenizer=tok)


def test_malformed_lines_are_counted_or_refused(folder, tok):
    with open(folder / "train.tsv", "a", encoding="utf-8") as f:
        f.write("kein Tab hier\n")
    task = MTTask.from_data(folder, tokenizer=tok, max_len=32, max_tokens=64)
    assert task.skipped == {"train": 1, "valid": 0} and len(task.train) == len(PAIRS)
    with pytest.raises(ValueError, match=rf"train.tsv:{len(PAIRS) + 1}: expected exactly one tab"):
        MTTask.from_data(folder, tokenizer=tok, strict=True)


def test_a_split_without_usable_pairs_is_refused(folder, tok):
    (folder / "valid.tsv").write_text("nur\tein\tpaar Tabs\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"valid data .* holds no usable pair \(1 malformed lines skipped\)"):
        MTTask.from_data(folder, tokenizer=tok)


def test_long_sentences_are_truncated_and_counted_or_refused(folder, tok):
    task = MTTask.from_data(folder, tokenizer=tok, max_len=6, max_tokens=48)
    assert task.n_truncated["train"] > 0
    for k in range(task.num_batches("train")):
        b = task.batch("train", k)
        assert b.src.shape[1] <= 6 and b.tgt_in.shape[1] <= 6
    with pytest.raises(ValueError, match="longer than max_src_len = 6"):
        MTTask.from_data(folder, tokenizer=tok, max_len=6, max_tokens=48, truncate=False)


def test_a_refused_long_sentence_is_named_by_its_line_in_the_file(folder, tok):
    # the pair number alone is an index into the training part (after the split and the skipped lines): the
    # error must also name the line of the file that holds the sentence
    long = " ".join(["Datei"] * 40)
    lines = ["kein Tab"] + [f"{s}\t{t}" for s, t in PAIRS] + [f"{long}\tThe file."] + [f"{s}\t{t}" for s, t in VALID]
    (folder / "long.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"\(line 14 of .*long.tsv \(train part\)\): the source is \d+ tokens"):
        MTTask.from_data(folder / "long.tsv", tokenizer=tok, max_len=32, max_tokens=64, truncate=False)
    (folder / "a.de").write_text("\n".join(["Ja."] * 3 + [long]) + "\n", encoding="utf-8")
    (folder / "a.en").write_text("\n".join(["Yes."] * 4) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"pair 3 \(line 4 of .*a.en \+ .*a.de\): the target is"):
        MTTask.from_data(folder / "train.tsv", valid=[folder / "a.en", folder / "a.de"], tokenizer=tok, max_len=32,
                         max_tokens=64, truncate=False)


def test_bleu_during_evaluation_with_the_greedy_translator(folder, tok):
    task = MTTask.from_data(folder, tokenizer=tok, max_len=32, max_tokens=64, bleu=True, bleu_sentences=2)
    metrics = task.evaluate(tiny_model(tok.vocab_size).eval(), 1)
    assert set(metrics) == {"loss", "ppl", "bleu", "chrf"} and 0.0 <= metrics["bleu"] <= 100.0 and 0.0 <= metrics["chrf"] <= 100.0


# --- what the loss sees --------------------------------------------------------------------------------------------
def test_smoothed_loss_matches_the_formula_by_hand(tok):
    task = MTTask(encode(tok, PAIRS), encode(tok, VALID), max_tokens=48, label_smoothing=0.1)
    model = FixedLogits(tok.vocab_size)
    batch = task.batch("train", 1)
    loss, n = task.loss(model, batch)
    # the padding masks reach the model with torch.nn polarity (True = padding)
    assert torch.equal(model.seen["src"], batch.src_key_padding_mask)
    assert torch.equal(model.seen["tgt"], batch.tgt_key_padding_mask)
    # (1 - ε) · (-log p[label]) + ε · mean over V of (-log p), averaged over the non-padding labels
    with torch.no_grad():
        logp = torch.log_softmax(model(batch.src, batch.tgt_in).double(), dim=-1)  # (B, T, V)
    real = batch.labels != IGNORE_INDEX  # (B, T)
    nll = -logp.gather(-1, batch.labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    expected = ((0.9 * nll - 0.1 * logp.mean(-1))[real]).mean()
    assert n == int(real.sum()) == int((~batch.tgt_key_padding_mask).sum())
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    assert loss.requires_grad


@torch.no_grad()
def test_loss_ignores_whatever_the_model_says_at_padding(tok):
    task = MTTask(encode(tok, PAIRS), encode(tok, VALID), max_tokens=48)
    model = FixedLogits(tok.vocab_size)
    batch = next(b for b in (task.batch("train", k) for k in range(10)) if b.tgt_key_padding_mask.any())

    class Garbage(nn.Module):
        def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None):
            logits = model(src, tgt).clone()
            logits[tgt_key_padding_mask] = torch.randn(int(tgt_key_padding_mask.sum()), logits.shape[-1]) * 100
            return logits

    assert float(task.loss(Garbage(), batch)[0]) == pytest.approx(float(task.loss(model, batch)[0]), rel=1e-6)


# --- batches ---------------------------------------------------------------------------------------------------------
def test_validation_batches_are_one_fixed_shuffled_plan(tok):
    pairs = [(f"Satz Nummer {'sehr ' * (i % 7)}{i}.", f"Sentence {'very ' * (i % 7)}{i}.") for i in range(40)]
    task = MTTask(encode(tok, PAIRS), encode(tok, pairs), max_tokens=48)
    n = task.num_batches("valid")
    widths = [task.batch("valid", k).src.shape[1] for k in range(n)]
    assert widths != sorted(widths)  # not length-sorted: a prefix of the plan samples every length
    first = [task.batch("valid", k).index.tolist() for k in range(n)]
    assert first == [task.batch("valid", n + k).index.tolist() for k in range(n)]  # the same plan every pass
    assert sorted(i for b in first for i in b) == list(range(len(pairs)))


def test_padding_ratio_is_reported_per_side(tok):
    task = MTTask(encode(tok, PAIRS), encode(tok, VALID), max_tokens=48)
    ratio = task.padding_ratio("train")
    batches = [task.batch("train", k) for k in range(task.num_batches("train"))]
    src_pad = sum(int(b.src_key_padding_mask.sum()) for b in batches) / sum(b.src.numel() for b in batches)
    assert set(ratio) == {"src", "tgt", "total"} and ratio["src"] == pytest.approx(src_pad)
