"""Translation batching (attnkit.data.pipeline.mt_batching): joint BPE, encoding limits, collation, token-budget plans."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.data.pipeline.mt_batching import (IGNORE_INDEX, MT_SPECIAL_TOKENS, EncodedPairs, MTBatch, TokenBudgetBatcher,
                                      collate, encode_pairs, plan_batches, rounded_widths, train_joint_bpe)

SOURCES = [
    "Er lobte ihre Kochkunst.", "Ist heute Post gekommen?", "Das Prinzip ist sehr einfach.",
    "Ich sollte gehen.", "Die Datei existiert bereits. Soll sie überschrieben werden?",
    "Größe ändern", "Wir können keine zusätzliche Arbeit annehmen.", "Er sah sie nachdenklich an.",
    "Das passt zu ihrem Kleid wie die Faust aufs Auge.", "Alle Ebenen zurücksetzen",
]
TARGETS = [
    "He praised her cooking.", "Did we get any mail today?", "The principle is very simple.",
    "I ought to go.", "The file already exists. Overwrite?", "Change size",
    "We can’t take on any extra work.", "He watched her reflectively.",
    "It clashes horribly with her dress.", "Reset all levels",
]


@pytest.fixture(scope="module")
def tok():
    return train_joint_bpe(SOURCES * 3, TARGETS * 3, vocab_size=400)


@pytest.fixture(scope="module")
def enc(tok):
    return encode_pairs(tok, SOURCES, TARGETS, max_src_len=64)


# --- tokenizer ---------------------------------------------------------------------------------------------------
def test_joint_bpe_has_the_special_tokens_as_ids_0_to_3(tok):
    assert [tok.id_to_token(i) for i in range(4)] == list(MT_SPECIAL_TOKENS)
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert 256 + 4 < tok.vocab_size <= 400


@pytest.mark.parametrize("text", [
    "Größe und Maße: „Anführungszeichen“ – ‚halbe‘, 3,5 € … ß",
    "He said: \"It's 50 % off!\"  Two  spaces, a tab\tand ünïcödé 😀.",
    "Eine Datei öffnen",
])
def test_joint_bpe_round_trips_text_exactly(tok, text):
    ids = tok.encode(text)
    assert all(i > 3 for i in ids)  # no specials, no unknowns: byte-level covers everything
    assert tok.decode(ids) == text


def test_joint_bpe_refuses_unaligned_or_empty_input():
    with pytest.raises(ValueError, match="got 2 and 1"):
        train_joint_bpe(["a", "b"], ["c"], vocab_size=300)
    with pytest.raises(ValueError, match="at least one sentence pair, got 0"):
        train_joint_bpe([], [], vocab_size=300)


# --- encoding -----------------------------------------------------------------------------------------------------
def test_joint_bpe_refuses_a_string_of_extra_specials():
    """Was: extra_specials="<bt>" read as its characters, so every "b" and "t" of the corpus became a special token
    (and skip_special_tokens dropped them from decoded text)."""
    with pytest.raises(ValueError, match=re.escape("extra_specials must be a list of token strings, e.g. ['<bt>'], "
                                                   "got the str '<bt>'")):
        train_joint_bpe(SOURCES, TARGETS, 300, extra_specials="<bt>")


def test_encode_pairs_appends_eos_to_sources_only(tok, enc):
    assert len(enc) == len(SOURCES) and enc.n_truncated_src == enc.n_truncated_tgt == 0
    for s, t, src_ids, tgt_ids in zip(SOURCES, TARGETS, enc.src, enc.tgt):
        assert src_ids == tok.encode(s) + [tok.eos_id]
        assert tgt_ids == tok.encode(t)
    assert enc.src_lens.tolist() == [len(s) for s in enc.src]
    assert enc.tgt_lens.tolist() == [len(t) + 1 for t in enc.tgt]


def test_encode_pairs_truncates_long_sentences_and_counts_them(tok):
    long_src = " ".join(SOURCES)
    e = encode_pairs(tok, [long_src, "Ja."], ["Yes.", " ".join(TARGETS)], max_src_len=8, max_tgt_len=6)
    assert e.n_truncated_src == 1 and e.n_truncated_tgt == 1
    assert e.src[0] == tok.encode(long_src)[:7] + [tok.eos_id]  # first tokens kept, then <eos>
    assert len(e.tgt[1]) + 1 == 6 and e.tgt[1] == tok.encode(" ".join(TARGETS))[:5]
    assert max(e.src_lens) <= 8 and max(e.tgt_lens) <= 6


def test_encode_pairs_refuses_long_sentences_when_asked(tok):
    n = len(tok.encode(SOURCES[4])) + 1
    with pytest.raises(ValueError, match=rf"pair 1: the source is {n} tokens with <eos>, longer than max_src_len = 5"):
        encode_pairs(tok, ["Ja.", SOURCES[4]], ["Yes.", "x"], max_src_len=5, truncate=False)
    with pytest.raises(ValueError, match="pair 0: the target is .* longer than max_tgt_len = 3"):
        encode_pairs(tok, ["Ja."], [TARGETS[4]], max_src_len=64, max_tgt_len=3, truncate=False)


def test_encode_pairs_validates_its_arguments(tok):
    with pytest.raises(ValueError, match="max_src_len must be an int >= 2 .* got 1"):
        encode_pairs(tok, ["a"], ["b"], max_src_len=1)
    with pytest.raises(ValueError, match="as many sources as targets, got 2 and 1"):
        encode_pairs(tok, ["a", "b"], ["c"], max_src_len=8)


def test_encode_pairs_needs_bos_eos_and_pad(tok):
    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer

    no_specials = BPETokenizer(tok.backend, unk="<unk>")
    with pytest.raises(ValueError, match=r"needs a tokenizer with pad, bos and eos .* lacks \['pad_id', 'bos_id', 'eos_id'\]"):
        encode_pairs(no_specials, ["a"], ["b"], max_src_len=8)


# --- collation -------------------------------------------------------------------------------------------------------
def test_collate_frames_and_pads_both_sides(tok, enc):
    idx = [0, 4, 5]
    b = collate(enc, idx)
    B, S = b.src.shape
    T = b.tgt_in.shape[1]
    assert B == 3 and S == max(len(enc.src[i]) for i in idx) and T == max(len(enc.tgt[i]) + 1 for i in idx)
    assert b.src.dtype == b.tgt_in.dtype == b.labels.dtype == torch.long
    assert b.src_key_padding_mask.dtype == b.tgt_key_padding_mask.dtype == torch.bool
    assert b.index.tolist() == idx
    for row, i in enumerate(idx):
        s, t = enc.src[i], enc.tgt[i]
        assert b.src[row, :len(s)].tolist() == s and (b.src[row, len(s):] == tok.pad_id).all()
        assert b.tgt_in[row, :len(t) + 1].tolist() == [tok.bos_id] + t  # decoder input starts with <bos>
        assert b.labels[row, :len(t) + 1].tolist() == t + [tok.eos_id]  # labels end with <eos>
        assert (b.tgt_in[row, len(t) + 1:] == tok.pad_id).all()
        assert (b.labels[row, len(t) + 1:] == IGNORE_INDEX).all()
        # mask polarity: True exactly on the padding positions
        assert b.src_key_padding_mask[row].tolist() == [j >= len(s) for j in range(S)]
        assert b.tgt_key_padding_mask[row].tolist() == [j >= len(t) + 1 for j in range(T)]
    # teacher forcing: the input is the labels shifted right by one
    real = ~b.tgt_key_padding_mask[:, 1:]
    assert torch.equal(b.tgt_in[:, 1:][real], b.labels[:, :-1][real])
    assert b.n_tokens == int((~b.tgt_key_padding_mask).sum()) == sum(len(enc.tgt[i]) + 1 for i in idx)
    assert b.max_label == max(max(enc.tgt[i] + [tok.eos_id]) for i in idx)  # host-side counts of the labels


def test_collate_refuses_empty_or_out_of_range_indices(enc):
    with pytest.raises(ValueError, match="at least one pair index"):
        collate(enc, [])
    with pytest.raises(ValueError, match=r"must be in \[0, 10\), got min 0 max 10"):
        collate(enc, [0, 10])


def test_masks_come_from_lengths_not_from_pad_ids():
    # a sentence that really contains the pad id (e.g. a literal "<pad>" in the text) is not masked
    data = EncodedPairs(src=[[5, 0, 7, 2]], tgt=[[0, 9]], pad_id=0, bos_id=1, eos_id=2)
    b = collate(data, [0])
    assert not b.src_key_padding_mask.any() and not b.tgt_key_padding_mask.any() and b.n_tokens == 3


# --- token-budget plans --------------------------------------------------------------------------------------------
def _lengths(n: int, seed: int = 0):
    g = np.random.default_rng(seed)
    return g.integers(1, 30, n), g.integers(1, 30, n)


def test_plan_covers_every_pair_once_within_the_budget():
    src, tgt = _lengths(500)
    plan = plan_batches(src, tgt, 200, seed=1, epoch=0)
    flat = np.concatenate(plan)
    assert sorted(flat.tolist()) == list(range(500))
    for idx in plan:
        assert len(idx) * max(src[idx].max(), tgt[idx].max()) <= 200


def test_plan_is_a_function_of_seed_and_epoch():
    src, tgt = _lengths(300)
    a = plan_batches(src, tgt, 150, seed=1, epoch=2)
    b = plan_batches(src, tgt, 150, seed=1, epoch=2)
    assert [x.tolist() for x in a] == [x.tolist() for x in b]
    c = plan_batches(src, tgt, 150, seed=1, epoch=3)
    d = plan_batches(src, tgt, 150, seed=2, epoch=2)
    assert [x.tolist() for x in a] != [x.tolist() for x in c] and [x.tolist() for x in a] != [x.tolist() for x in d]
    # same number of batches and the same multiset of batch shapes in every epoch
    shape = lambda plan: sorted((len(i), int(max(src[i].max(), tgt[i].max()))) for i in plan)  # noqa: E731
    assert shape(a) == shape(c) == shape(d)


def test_plan_without_shuffle_is_length_sorted():
    src, tgt = _lengths(200)
    plan = plan_batches(src, tgt, 120, shuffle=False)
    widths = np.concatenate([np.maximum(src[i], tgt[i]) for i in plan])
    assert (np.diff(widths) >= 0).all()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1, max_size=80),
       st.integers(40, 400), st.integers(0, 5))
def test_plan_invariants_hold_for_any_lengths(lengths, max_tokens, epoch):
    src = np.array([s for s, _ in lengths])
    tgt = np.array([t for _, t in lengths])
    plan = plan_batches(src, tgt, max_tokens, seed=7, epoch=epoch)
    assert sorted(np.concatenate(plan).tolist()) == list(range(len(lengths)))
    assert all(len(i) * max(src[i].max(), tgt[i].max()) <= max_tokens for i in plan)


# --- fixed shapes (CUDA graphs) -----------------------------------------------------------------------------
def test_rounded_widths_round_up_and_stop_at_the_longest():
    src, tgt = np.array([3, 9, 17, 30]), np.array([5, 2, 20, 7])
    assert rounded_widths(src, tgt, 1).tolist() == [5, 9, 20, 30]
    assert rounded_widths(src, tgt, 8).tolist() == [8, 16, 24, 30]  # 32 would pass the longest pair (30)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1, max_size=80),
       st.integers(40, 400), st.sampled_from([2, 4, 8]), st.integers(0, 3))
def test_fixed_shape_plans_cover_every_pair_once_in_few_shapes(lengths, max_tokens, multiple, epoch):
    src = np.array([s for s, _ in lengths])
    tgt = np.array([t for _, t in lengths])
    plan = plan_batches(src, tgt, max_tokens, seed=3, epoch=epoch, multiple=multiple)
    assert sorted(np.concatenate(plan).tolist()) == list(range(len(lengths)))
    widths = rounded_widths(src, tgt, multiple)
    for idx in plan:  # every batch fits (max_tokens // W) rows of its rounded width W
        assert len(idx) <= max_tokens // int(widths[idx].max())


def test_fixed_shape_batches_pad_to_their_shape_with_empty_rows():
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 50, size=int(rng.integers(1, 20))).tolist() + [2] for _ in range(60)]
    tgt = [rng.integers(4, 50, size=int(rng.integers(1, 24))).tolist() for _ in range(60)]
    data = EncodedPairs(src, tgt, pad_id=0, bos_id=1, eos_id=2)
    batcher = TokenBudgetBatcher(data, max_tokens=96, seed=0, multiple=8)
    shapes = batcher.shapes
    widths = rounded_widths(data.src_lens, data.tgt_lens, 8)
    assert sorted(shapes) == sorted((min(96 // w, int((widths <= w).sum())), w) for w in set(widths.tolist()))
    assert {w for _, w in shapes} <= {8, 16, 24}
    seen, padded_rows = [], 0
    for k in range(batcher.num_batches):
        b = batcher.batch(k)
        rows, width = b.src.shape
        assert (rows, width) in shapes and b.tgt_in.shape == b.labels.shape == (rows, width)
        real = b.index >= 0
        seen += b.index[real].tolist()
        padded_rows += int((~real).sum())
        # rows of padding only: all positions masked, no labels
        assert b.src_key_padding_mask[~real].all() and b.tgt_key_padding_mask[~real].all()
        assert (b.labels[~real] == IGNORE_INDEX).all() and (b.src[~real] == 0).all()
        # the real rows are the plain collation of the same pairs, padded further
        plain = collate(data, b.index[real].tolist())
        S, T = plain.src.shape[1], plain.tgt_in.shape[1]
        assert torch.equal(b.src[real][:, :S], plain.src) and (b.src[real][:, S:] == 0).all()
        assert torch.equal(b.labels[real][:, :T], plain.labels) and (b.labels[real][:, T:] == IGNORE_INDEX).all()
        assert b.n_tokens == plain.n_tokens and b.max_label == plain.max_label
    assert sorted(seen) == list(range(60)) and padded_rows > 0
    ratio = batcher.padding_ratio()
    masks = [batcher.batch(k) for k in range(batcher.num_batches)]
    src_pad = sum(int(b.src_key_padding_mask.sum()) for b in masks) / sum(b.src.numel() for b in masks)
    assert ratio["src"] == pytest.approx(src_pad)


@pytest.mark.parametrize("max_tokens", [96, 10**6, 10**12])
def test_fixed_shape_rows_never_exceed_the_pairs_a_batch_can_hold(max_tokens):
    # a budget larger than the corpus: the rows of a width-W batch stop at the pairs of width <= W, not at
    # max_tokens // W rows of padding only (10**12 would not even fit in memory)
    src = [[5] * (i % 20 + 1) + [2] for i in range(100)]
    tgt = [[6] * (i % 17 + 1) for i in range(100)]
    data = EncodedPairs(src, tgt, pad_id=0, bos_id=1, eos_id=2)
    batcher = TokenBudgetBatcher(data, max_tokens=max_tokens, seed=0, multiple=8)
    widths = rounded_widths(data.src_lens, data.tgt_lens, 8)
    assert batcher.shapes == sorted((min(max_tokens // w, int((widths <= w).sum())), w) for w in set(widths.tolist()))
    for k in range(batcher.num_batches):
        b = batcher.batch(k)
        assert b.src.shape in [torch.Size(s) for s in batcher.shapes] and b.src.shape[0] <= len(data)
        assert b.src.shape[0] * b.src.shape[1] <= max_tokens


def _collate_by_hand(data, indices, rows, width):
    """The batch :func:`collate` must make, position by position (the test's reference)."""
    B = rows or len(indices)
    S = width or max(len(data.src[i]) for i in indices)
    T = width or max(len(data.tgt[i]) + 1 for i in indices)
    src = torch.full((B, S), data.pad_id)
    tgt_in = torch.full((B, T), data.pad_id)
    labels = torch.full((B, T), IGNORE_INDEX)
    src_mask, tgt_mask = torch.ones(B, S, dtype=torch.bool), torch.ones(B, T, dtype=torch.bool)
    for b, i in enumerate(indices):
        s, t = data.src[i], data.tgt[i]
        src[b, :len(s)] = torch.tensor(s)
        src_mask[b, :len(s)] = False
        tgt_in[b, :len(t) + 1] = torch.tensor([data.bos_id, *t])
        labels[b, :len(t) + 1] = torch.tensor([*t, data.eos_id])
        tgt_mask[b, :len(t) + 1] = False
    return src, tgt_in, labels, src_mask, tgt_mask


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.integers(0, 12)), min_size=1, max_size=20),
       st.integers(0, 3), st.integers(0, 3), st.booleans())
def test_collate_matches_the_batch_made_by_hand(lengths, extra_rows, extra_width, fixed):
    rng = np.random.default_rng(len(lengths))
    data = EncodedPairs([rng.integers(4, 30, size=s - 1).tolist() + [2] for s, _ in lengths],
                        [rng.integers(4, 30, size=t).tolist() for _, t in lengths], pad_id=0, bos_id=1, eos_id=2)
    indices = rng.permutation(len(lengths))[: max(1, len(lengths) // 2 + 1)].tolist()
    rows = width = None
    if fixed:
        rows = len(indices) + extra_rows
        width = max(max(len(data.src[i]) for i in indices), max(len(data.tgt[i]) + 1 for i in indices)) + extra_width
    batch = collate(data, indices, shape=None if rows is None else (rows, width))
    for got, want in zip(batch[:5], _collate_by_hand(data, indices, rows, width)):
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert batch.index.tolist() == indices + [-1] * ((rows or len(indices)) - len(indices))
    assert batch.n_tokens == sum(len(data.tgt[i]) + 1 for i in indices)


def test_collate_refuses_a_shape_with_too_few_rows(enc):
    with pytest.raises(ValueError, match="collate shape rows must be >= the 3 pairs, got 2"):
        collate(enc, [0, 1, 2], shape=(2, 40))
    longest = max(max(len(enc.src[i]) for i in range(3)), max(len(enc.tgt[i]) + 1 for i in range(3)))
    with pytest.raises(ValueError, match=rf"shape width must be >= the longest side of these pairs \({longest}\), got 3"):
        collate(enc, [0, 1, 2], shape=(3, 3))


def test_plan_refuses_a_pair_longer_than_the_budget():
    with pytest.raises(ValueError, match=r"at least the longest pair's max\(S, T\) = 30, got 20"):
        plan_batches([3, 30], [4, 5], 20)


@pytest.mark.parametrize("kwargs,match", [
    (dict(src_lens=[1, 2], tgt_lens=[1], max_tokens=10), r"both have shape \(N,\), got \(2,\) and \(1,\)"),
    (dict(src_lens=[1], tgt_lens=[1], max_tokens=0), "max_tokens must be an int >= 1, got 0"),
    (dict(src_lens=[0], tgt_lens=[1], max_tokens=10), "lengths must be >= 1, got min source 0"),
    (dict(src_lens=[1], tgt_lens=[1], max_tokens=10, epoch=-1), "epoch must be an int >= 0, got -1"),
])
def test_plan_validates_its_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan_batches(**kwargs)


# --- the batcher -------------------------------------------------------------------------------------------------------
def test_batcher_steps_are_deterministic_and_walk_epochs(enc):
    a = TokenBudgetBatcher(enc, max_tokens=40, seed=3)
    b = TokenBudgetBatcher(enc, max_tokens=40, seed=3)
    n = a.num_batches
    assert n >= 2
    for step in (n + 1, 0, 2 * n - 1, 1):  # any order: batch(step) depends on (seed, step) only
        x, y = a.batch(step), b.batch(step)
        assert all(torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v
                   for u, v in zip(x, y))
    epoch0 = sorted(i for k in range(n) for i in a.batch(k).index.tolist())
    epoch1 = sorted(i for k in range(n, 2 * n) for i in a.batch(k).index.tolist())
    assert epoch0 == epoch1 == list(range(len(enc)))
    for k in range(2 * n):
        bt = a.batch(k)
        assert bt.src.shape[0] * max(bt.src.shape[1], bt.tgt_in.shape[1]) <= 40


def test_batcher_padding_ratio_matches_the_masks(enc):
    batcher = TokenBudgetBatcher(enc, max_tokens=40, seed=0)
    batches = [batcher.batch(k) for k in range(batcher.num_batches)]
    src_pad = sum(int(b.src_key_padding_mask.sum()) for b in batches) / sum(b.src.numel() for b in batches)
    tgt_pad = sum(int(b.tgt_key_padding_mask.sum()) for b in batches) / sum(b.tgt_in.numel() for b in batches)
    ratio = batcher.padding_ratio()
    assert ratio["src"] == pytest.approx(src_pad) and ratio["tgt"] == pytest.approx(tgt_pad)
    assert 0.0 <= ratio["total"] < 1.0


def test_batcher_refuses_a_negative_step_and_an_empty_corpus(enc):
    with pytest.raises(ValueError, match="step must be an int >= 0, got -1"):
        TokenBudgetBatcher(enc, max_tokens=40).batch(-1)
    empty = EncodedPairs([], [], pad_id=0, bos_id=1, eos_id=2)
    with pytest.raises(ValueError, match="at least one pair"):
        TokenBudgetBatcher(empty, max_tokens=40)


@pytest.mark.parametrize("multiple, shown", [("8", "'8' (str)"), (0, "0")])
def test_a_multiple_that_is_not_a_positive_int_is_refused(enc, multiple, shown):
    """Was: TypeError ('>' between str and int) from the batcher, and rounded_widths(..., 0) dividing by zero
    (a RuntimeWarning and widths of 0)."""
    match = re.escape(f"multiple must be an int >= 1, got {shown}")
    with pytest.raises(ValueError, match=match):
        TokenBudgetBatcher(enc, max_tokens=40, multiple=multiple)
    with pytest.raises(ValueError, match=match):
        rounded_widths(np.array([3, 5]), np.array([4, 2]), multiple)


def test_each_process_share_of_a_batch_carries_its_own_counts(enc):
    from attnkit.training import distributed as D

    b = collate(enc, list(range(7)))
    shares = [D.shard_batch(b, r, 3) for r in range(3)]
    assert [s.src.shape[0] for s in shares] == [3, 2, 2]
    assert sum(s.n_tokens for s in shares) == b.n_tokens
    for s in shares:
        real = s.labels[s.labels != IGNORE_INDEX]
        assert s.n_tokens == real.numel() and s.max_label == int(real.max())
        moved = s.to("cpu")
        assert type(s) is MTBatch and (moved.n_tokens, moved.max_label) == (s.n_tokens, s.max_label)


def test_batch_moves_with_the_trainers_move_to_device(enc):
    from attnkit.training.task import move_to_device

    b = collate(enc, [1, 2])
    moved = move_to_device(b, torch.device("cpu"))
    assert type(moved) is type(b)
    assert all(torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v for u, v in zip(moved, b))


@pytest.mark.parametrize("lengths", [[3.0, 2.7], [True, True]], ids=["float", "bool"])
def test_plan_batches_refuses_lengths_that_are_not_integers(lengths):
    """Was: np.asarray(..., int64) cut 2.7 to 2 and took True for 1, so the plan's budget held for other lengths."""
    with pytest.raises(ValueError, match=r"src_lens must be integer token counts, got an array of (float64|bool)"):
        plan_batches(lengths, [2, 2], 8)
    with pytest.raises(ValueError, match=r"tgt_lens must be integer token counts"):
        plan_batches([2, 2], lengths, 8)
    assert plan_batches([], [], 8) == []


@pytest.mark.parametrize("index", [0.9, True, np.float64(1.0)])
def test_collate_refuses_indices_that_are_not_integers(enc, index):
    """Was: int(i) made pair 0 of the index 0.9 and pair 1 of True, without a word."""
    with pytest.raises(ValueError, match=r"collate needs integer pair indices, got"):
        collate(enc, [index])
    assert collate(enc, np.array([1, 0])).index.tolist() == collate(enc, [np.int64(1), 0]).index.tolist() == [1, 0]


def test_train_joint_bpe_names_the_sentence_with_a_lone_surrogate():
    """Was: a raw UnicodeEncodeError from the backend, naming neither the side nor the sentence."""
    with pytest.raises(ValueError, match=r"lone surrogate, '\\udc00' at character 1 of target 1 "):
        train_joint_bpe(["a", "b"], ["c", "d\udc00"], 300)


@pytest.mark.parametrize("fn", ["train_joint_bpe", "encode_pairs"])
def test_one_string_of_sentences_is_refused(tok, fn):
    """Was: a str was taken as a list of its characters: "Hallo" and "Hello" made five one-letter pairs."""
    call = (lambda s, t: train_joint_bpe(s, t, 300)) if fn == "train_joint_bpe" else (
        lambda s, t: encode_pairs(tok, s, t, max_src_len=16))
    with pytest.raises(ValueError, match=rf"{fn} expects sources as a list of sentences, got one str \('Hallo'\)"):
        call("Hallo", "Hello")


@pytest.mark.parametrize("shape", [(True, 64), (4, 64.0), (4,)])
def test_collate_refuses_a_shape_that_is_not_two_ints(enc, shape):
    """Was: shape=(True, 64) padded to one row, a float width failed inside numpy with a TypeError."""
    with pytest.raises(ValueError, match=r"collate shape"):
        collate(enc, [0], shape=shape)


def test_rounded_widths_refuses_lengths_that_are_not_integers():
    """Was: widths of 1.5 were cut to 1 before rounding, without a word."""
    with pytest.raises(ValueError, match=r"src_lens must be integer token counts, got an array of float64"):
        rounded_widths([1.5, 2], [3, 4], 2)


def test_a_batch_exactly_at_the_budget_is_one_batch():
    """``B × max(S, T) <= max_tokens``: a batch that fills the budget exactly is not split."""
    batches = plan_batches([2, 2, 2], [1, 2, 1], 6, shuffle=False)
    assert [sorted(b.tolist()) for b in batches] == [[0, 1, 2]]
