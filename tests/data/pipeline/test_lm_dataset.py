"""LM data: corpus encoding (fast paths equal the plain ones), block checks, batches, prepare_lm_data."""

import pytest
import tokenizers
import torch
from tokenizers import normalizers, pre_tokenizers

from attnkit.data.tokenizers.bpe_tokenizer import GPT2_SPLIT_PATTERN, BPETokenizer
from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.data.pipeline.lm_dataset import (CUT_RULES, LMData, _newline_chunks, batch_at_step, check_block_length,
                                              cut_rule, encode_corpus, encode_corpus_cached, eval_batches, last_cut,
                                              next_cut, num_eval_windows, prepare_lm_data, random_batch,
                                              NOT_SCORED)
from attnkit.data.pipeline.store_encoding import aligned_segments
from attnkit.data.tokenizers.tokenizer import save_tokenizer
from attnkit.interop.gguf import _LLAMA3_SPLIT

TEXT = "".join(
    f"SPEAKER {i % 7}:\nLine {i}, with words;  double  spaces, café, 🎉 and more.\n"
    + ("\n" if i % 3 else "   \n\n\t\n")
    for i in range(300)
)


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.train(TEXT, 400, special_tokens=["<|endoftext|>"])


def test_char_corpus_encoding(tmp_path):
    tok = CharTokenizer.train(TEXT)
    ids = encode_corpus(tok, TEXT)
    assert ids.dtype == torch.long and ids.shape == (len(TEXT),)
    assert ids.tolist() == tok.encode(TEXT)


def test_newline_chunks_rejoin_and_cut_after_non_space():
    chunks = _newline_chunks(TEXT, 200)
    assert "".join(chunks) == TEXT and len(chunks) > 10
    for c in chunks[1:]:
        assert c.lstrip(" \t")[0] in "\r\n"
    for a in chunks[:-1]:
        assert not a[-1].isspace()


@pytest.mark.parametrize("ending", ["\r\n", "  \n", "\r"], ids=["crlf", "trailing-blanks", "cr"])
def test_windows_line_ends_and_trailing_blanks_still_cut(bpe, ending):
    """Lines ending in CR LF, in blanks or in a lone CR leave a cut before their whitespace (the old rule found
    none there and encoded such a corpus as one piece, in memory growing with it); the ids stay exact."""
    text = TEXT.replace("\n", ending)
    chunks = _newline_chunks(text, 200)
    assert "".join(chunks) == text and len(chunks) > 10
    assert encode_corpus(bpe, text, chunk_chars=200).tolist() == bpe.encode(text)
    blocks = [text[i:i + 97] for i in range(0, len(text), 97)]
    assert len(list(aligned_segments(blocks))) > 10


def _with_splits(bpe, splits):
    """``bpe`` with the pre-tokenizer GGUF models use: each regex in turn, then byte-level characters."""
    tok = BPETokenizer.from_dict(bpe.to_dict())
    tok.backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(tokenizers.Regex(r), behavior="isolated") for r in splits]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return tok


LINE_ENDS = ("\n", "\r\n", " \n")
SENTENCES = "".join(f"Line {i}, ends{'.' if i % 2 else ''}{LINE_ENDS[i % 3]}" for i in range(400))


@pytest.mark.parametrize("splits, rule", [((GPT2_SPLIT_PATTERN,), "after-non-space"),
                                          ((r"\p{N}", GPT2_SPLIT_PATTERN), "after-non-space"),
                                          ((_LLAMA3_SPLIT,), "after-word")], ids=["gpt2", "smollm", "llama3"])
def test_cut_rule_follows_the_pre_tokenizer(bpe, splits, rule):
    """Llama 3's regex keeps a line break with the punctuation before it (".\n" is one piece): cutting there, as
    for GPT-2, changed the ids; it is cut only after a letter or digit, and every rule gives the whole text's ids."""
    tok = _with_splits(bpe, splits)
    assert cut_rule(tok) == rule
    text = SENTENCES + "<|endoftext|>\n  tail 42\n"
    assert encode_corpus(tok, text, chunk_chars=50).tolist() == tok.encode(text)
    def pieces(chunks):  # BPE merges stay inside a piece: equal pieces give equal ids whatever the vocabulary
        return [p for c in chunks for p, _ in tok.backend.pre_tokenizer.pre_tokenize_str(c)]

    assert pieces(_newline_chunks(text, 50, rule)) == pieces([text])
    assert (pieces(_newline_chunks(text, 50, "after-non-space")) == pieces([text])) == (rule == "after-non-space")


def test_a_tokenizer_no_cut_suits_encodes_whole(bpe):
    """A normalizer that prepends a marker to every text (SentencePiece style) makes every cut add a token."""
    tok = BPETokenizer.from_dict(bpe.to_dict())
    tok.backend.normalizer = normalizers.Prepend("x")
    assert cut_rule(tok) is None
    assert encode_corpus(tok, SENTENCES, chunk_chars=50).tolist() == tok.encode(SENTENCES)


def test_an_added_token_holding_a_line_end_is_never_cut(bpe, tmp_path):
    """Was: "after-non-space" still chosen, so chunks cut "END\n" between "END" and "\n" and the ids differed from
    encoding the whole text (and so did a token store's)."""
    from attnkit.data.pipeline.store_encoding import encode_blocks
    from attnkit.data.pipeline.token_store import TokenStoreWriter

    tok = BPETokenizer.from_dict(bpe.to_dict())
    tok.backend.add_tokens([tokenizers.AddedToken("END\n", normalized=False)])
    tok = BPETokenizer(tok.backend)
    text = "Line one END\nLine two.\n" * 40
    assert cut_rule(tok) is None
    assert encode_corpus(tok, text, chunk_chars=50).tolist() == tok.encode(text)
    with TokenStoreWriter(tmp_path / "s.tokens", vocab_size=tok.vocab_size) as writer:
        encode_blocks(tok, [text[:333], text[333:]], writer)
        assert writer.finish({}).tolist() == tok.encode(text)


def test_next_and_last_cut_agree():
    text = SENTENCES[:300] + "\n\n  \r\n"
    for rule in CUT_RULES:
        cuts, i = [], 1
        while (c := next_cut(text, i, rule)) >= 0:
            cuts.append(c)
            i = c + 1
        assert cuts and last_cut(text, rule) == cuts[-1]
        assert all(_fits_after(text[c - 1], rule) for c in cuts)


def _fits_after(ch, rule):
    return ch.isalnum() if rule == "after-word" else not ch.isspace()


@pytest.mark.parametrize("chunk_chars", [1, 100, 1 << 16])
def test_bpe_chunked_encoding_equals_whole_text(bpe, chunk_chars):
    text = TEXT + "<|endoftext|>\n  tail  "
    ids = encode_corpus(bpe, text, chunk_chars=chunk_chars)
    assert ids.dtype == torch.long
    assert ids.tolist() == bpe.encode(text)


def test_encode_corpus_rejects_non_str(bpe):
    with pytest.raises(ValueError, match="expects a str, got list"):
        encode_corpus(bpe, ["a"])


def test_encode_corpus_cached(bpe, tmp_path):
    a = encode_corpus_cached(bpe, TEXT, tmp_path)
    files = list(tmp_path.glob("*.npy"))
    assert len(files) == 1
    b = encode_corpus_cached(bpe, TEXT, tmp_path)
    assert torch.equal(a, b) and a.tolist() == bpe.encode(TEXT)
    # a damaged cache file is ignored and rewritten
    files[0].write_bytes(b"garbage")
    assert torch.equal(encode_corpus_cached(bpe, TEXT, tmp_path), a)


def test_encode_corpus_cached_file_of_another_dtype_is_encoded_again(bpe, tmp_path):
    """Was: numpy's UFuncTypeError from the range check, made before the dtype check, on a damaged header."""
    a = encode_corpus_cached(bpe, TEXT, tmp_path)
    (path,) = tmp_path.glob("*.npy")
    path.write_bytes(path.read_bytes().replace(b"'<i8'", b"'<U2'", 1))
    assert torch.equal(encode_corpus_cached(bpe, TEXT, tmp_path), a)


def test_block_length_too_short_names_both_numbers():
    with pytest.raises(ValueError, match=r"the valid split has 8 tokens, but block_size=8 needs at least 9"):
        check_block_length(torch.arange(8), 8, "valid")


def test_block_length_needs_long_1d():
    with pytest.raises(ValueError, match=r"1-D torch.long tensor \(N,\), got \(2, 5\) torch.int64"):
        check_block_length(torch.zeros(2, 5, dtype=torch.long), 4)
    with pytest.raises(ValueError, match=r"got \(10,\) torch.float32"):
        check_block_length(torch.zeros(10), 4)


def test_block_size_must_be_positive():
    with pytest.raises(ValueError, match="block_size must be an int >= 1, got 0"):
        check_block_length(torch.arange(10), 0)


def test_random_batch_windows():
    data = torch.arange(100, 200)
    g = torch.Generator().manual_seed(0)
    x, y = random_batch(data, 16, 8, generator=g)
    assert x.shape == y.shape == (8, 16)
    assert torch.equal(y[:, :-1], x[:, 1:])
    assert torch.equal(y[:, -1], x[:, -1] + 1)  # targets continue the window
    assert torch.equal(x[:, 1:] - x[:, :-1], torch.ones(8, 15, dtype=torch.long))  # contiguous
    assert x.min() >= 100 and y.max() <= 199


def test_random_batch_smallest_data_uses_the_only_window():
    data = torch.randint(0, 50, (9,))
    x, y = random_batch(data, 8, 3)
    assert torch.equal(x, data[:8].expand(3, 8)) and torch.equal(y, data[1:].expand(3, 8))


def test_random_batch_batch_size_positive():
    with pytest.raises(ValueError, match="batch_size must be an int >= 1, got 0"):
        random_batch(torch.arange(50), 4, 0)


def test_batch_at_step_is_deterministic():
    data = torch.randint(0, 1000, (5000,))
    a = batch_at_step(data, 32, 4, seed=1, step=7)
    b = batch_at_step(data, 32, 4, seed=1, step=7)
    c = batch_at_step(data, 32, 4, seed=1, step=8)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_eval_batches_cover_split_once():
    data = torch.randint(0, 1000, (103,))
    T = 10
    assert num_eval_windows(data, T) == 10
    batches = list(eval_batches(data, T, 4))
    assert [x.shape[0] for x, _ in batches] == [4, 4, 2]
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    assert torch.equal(x.flatten(), data[:100]) and torch.equal(y.flatten(), data[1:101])


def test_eval_batches_max_windows_spread():
    data = torch.arange(1001)
    xs = torch.cat([x for x, _ in eval_batches(data, 10, 3, max_windows=5)])
    assert xs.shape == (5, 10)
    assert xs[0, 0] == 0 and xs[-1, 0] == 990


@pytest.mark.parametrize("N", [11, 12, 103, 1001])
@pytest.mark.parametrize("stride", [1, 3, 7, 10])
def test_strided_eval_batches_score_every_target_once_with_at_least_T_minus_stride_ids_before_it(N, stride):
    """Strided windows (Hugging Face's strided perplexity): every window T long; the scored targets (the last ones
    of each window, all of the first) partition the non-overlapping evaluation's targets 1 … (N - 1) // T * T, in
    order, and a target of a later window is predicted from at least T - stride + 1 ids."""
    T = 10
    data = torch.arange(N)  # an id is its position: a target's id says which one it is
    batches = list(eval_batches(data, T, 4, stride=stride))
    x = torch.cat([b[0] for b in batches])  # (windows, T)
    y = torch.cat([b[1] for b in batches])  # (windows, T)
    assert x.shape == (num_eval_windows(data, T, stride), T) and max(b[0].shape[0] for b in batches) <= 4
    assert torch.equal(torch.where(y == NOT_SCORED, x + 1, y), x + 1)  # x and y are windows of the data, shifted by one
    scored = y != NOT_SCORED  # (windows, T)
    assert torch.equal(y[scored], torch.arange(1, (N - 1) // T * T + 1))  # each target once, in order
    assert bool(scored[0].all())  # the first window scores all its targets
    first = T - scored[1:].sum(1)  # (windows - 1,) the first scored position of each later window
    assert bool((first >= T - stride).all())  # context: at least T - stride + 1 ids (positions 0 … first)
    assert bool((scored[1:] == (torch.arange(T) >= first[:, None])).all())  # its scored targets are its last ones
    assert x[-1, -1] + 1 == (N - 1) // T * T  # the last window ends on the last evaluated target


def test_stride_T_and_None_give_the_non_overlapping_windows_and_bad_strides_are_refused():
    data = torch.randint(0, 1000, (103,))
    for a, b in zip(eval_batches(data, 10, 4), eval_batches(data, 10, 4, stride=10), strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and bool((a[1] != NOT_SCORED).all())
    assert num_eval_windows(data, 10, 10) == num_eval_windows(data, 10) == 10
    assert num_eval_windows(data, 10, 1) == 91 and num_eval_windows(data, 10, 4) == 1 + 23  # 1 + ceil(90 / s)
    T = 4  # the tiny example of eval_batches: targets 1–8, stride 3: windows at 0, 3, 4 score 1–4, 5–7, 8
    y = torch.cat([b[1] for b in eval_batches(torch.arange(12), T, 8, stride=3)])
    assert y.tolist() == [[1, 2, 3, 4], [-100, 5, 6, 7], [-100, -100, -100, 8]]
    for bad in (0, 11, -1, 2.0, True, "2"):
        with pytest.raises(ValueError, match=rf"stride must be an int from 1 to the window length 10, got {bad!r}"):
            list(eval_batches(data, 10, 4, stride=bad))
        with pytest.raises(ValueError, match=r"stride must be an int from 1 to the window length 10"):
            num_eval_windows(data, 10, bad)


@pytest.mark.parametrize("max_windows", [2.5, "2", True, 0])
def test_eval_batches_refuse_a_max_windows_that_is_not_a_positive_int(max_windows):
    """Was: TypeError from torch.linspace (2.5) or from comparing a str with 1; True taken as one window."""
    with pytest.raises(ValueError, match=rf"max_windows must be an int >= 1 or None, got {max_windows!r}"):
        list(eval_batches(torch.arange(101), 10, 3, max_windows=max_windows))


def _corpus(tmp_path, text=TEXT):
    p = tmp_path / "corpus.txt"
    p.write_text(text, encoding="utf-8")
    return p


def test_prepare_lm_data_char(tmp_path):
    data = prepare_lm_data(_corpus(tmp_path), "char", block_size=32)
    assert isinstance(data, LMData) and isinstance(data.tokenizer, CharTokenizer)
    assert data.train.numel() + data.valid.numel() == len(TEXT)
    assert data.vocab_size == len(set(TEXT))
    assert data.source_info["train_tokens"] == data.train.numel()
    assert data.tokenizer.decode(data.train) + data.tokenizer.decode(data.valid) == TEXT


def test_prepare_lm_data_bpe_uses_cache(tmp_path):
    data = prepare_lm_data(_corpus(tmp_path), "bpe", block_size=32, vocab_size=300, home=tmp_path / "home")
    assert isinstance(data.tokenizer, BPETokenizer) and data.vocab_size <= 300
    assert data.tokenizer.eos_id == 0
    assert len(list((tmp_path / "home" / "token_store").rglob("bpe-*.tokens"))) == 2  # train and valid
    assert data.tokenizer.decode(data.valid) == TEXT[len(data.tokenizer.decode(data.train)):]


def test_prepare_lm_data_saved_tokenizer(tmp_path, bpe):
    path = save_tokenizer(bpe, tmp_path / "tok.json")
    data = prepare_lm_data(_corpus(tmp_path), str(path), block_size=16, cache=False)
    assert data.train.tolist() == bpe.encode(data.tokenizer.decode(data.train))


def test_prepare_lm_data_block_too_long_for_valid(tmp_path):
    p = _corpus(tmp_path, "short line of text\n" * 60)  # 1140 chars: train 1026, valid 114
    with pytest.raises(ValueError, match=r"the valid split has 114 tokens, but block_size=200 needs at least 201"):
        prepare_lm_data(p, "char", block_size=200)


def test_prepare_lm_data_block_too_long_for_train(tmp_path):
    p = _corpus(tmp_path, "short line of text\n" * 60)
    with pytest.raises(ValueError, match=r"the train split has 1026 tokens, but block_size=2000 needs at least 2001"):
        prepare_lm_data(p, "char", block_size=2000)


def test_prepare_lm_data_unknown_tokenizer(tmp_path):
    with pytest.raises(ValueError, match=r"tokenizer must be one of \('char', 'bpe', 'gpt2'\).*'wordpiece'"):
        prepare_lm_data(_corpus(tmp_path), "wordpiece", block_size=8)


@pytest.mark.parametrize("cache", [False, True])
def test_prepare_lm_data_bpe_vocab_size_zero_is_refused(tmp_path, cache):
    """Was: ``vocab_size or 2048`` took 0 for "not given" and trained the default 2048-token BPE."""
    with pytest.raises(ValueError, match=r"vocab_size must be an int in \[.*\], got 0"):
        prepare_lm_data(_corpus(tmp_path), "bpe", block_size=8, vocab_size=0, cache=cache, home=tmp_path / "home")


@pytest.mark.parametrize("call", [
    lambda d: random_batch(d, True, 2), lambda d: random_batch(d, 4, True), lambda d: num_eval_windows(d, True),
    lambda d: next(eval_batches(d, True, 4)), lambda d: next(eval_batches(d, 4, True)),
    lambda d: batch_at_step(d, 4, 2, seed=0, step=1.5), lambda d: LMData(CharTokenizer("ab"), d, d, True),
], ids=["random-block", "random-batch", "windows-block", "eval-block", "eval-batch", "float-step", "lmdata"])
def test_a_bool_or_float_size_is_refused_not_taken_as_an_int(call):
    """Was: block_size=True or batch_size=True was taken as 1 (windows of one token, batches of one window), and a
    float step was cut to an int: another batch than the one asked for."""
    with pytest.raises(ValueError, match=r"(block_size|batch_size|step) must be an int >= \d, got (True|1.5)"):
        call(torch.arange(50))


def test_a_tokenizer_folder_is_named_a_folder(tmp_path):
    """Was: "tokenizer must be one of ('char', 'bpe', 'gpt2'), a tokenizer JSON file or a Tokenizer" of a folder."""
    from attnkit.data.pipeline.lm_dataset import build_tokenizer

    with pytest.raises(ValueError, match="is a folder, not a file"):
        build_tokenizer(str(tmp_path), ["ab", "ab"])


def test_eval_windows_of_a_split_that_is_a_multiple_of_the_block_size():
    """N = k * T ids hold k - 1 whole windows of T + 1 ids, not k (mutation check: ``N // T`` asked for a window
    that runs past the end of the split)."""
    data = torch.arange(40)
    assert num_eval_windows(data, 10) == 3
    batches = list(eval_batches(data, 10, 8))
    assert len(batches) == 1 and torch.equal(batches[0][0][:, 0], torch.tensor([0, 10, 20]))
    assert int(batches[0][1].max()) == 30


def test_strided_eval_batches_with_max_windows_keep_each_chosen_windows_scored_targets():
    """max_windows with a stride picks windows evenly and each keeps the targets it scores in the full evaluation
    (mutation check: the starts were picked but the scored counts not, so the masks belonged to other windows)."""
    T = 4  # targets 1–8, stride 3: windows at 0, 3, 4 score 1–4, 5–7, 8; max_windows=2 keeps the first and last
    batches = list(eval_batches(torch.arange(12), T, 8, stride=3, max_windows=2))
    x, y = batches[0]
    assert x[:, 0].tolist() == [0, 4]
    assert y.tolist() == [[1, 2, 3, 4], [NOT_SCORED, NOT_SCORED, NOT_SCORED, 8]]


@pytest.mark.parametrize("stride", [None, 3])
def test_eval_batches_refuse_a_split_shorter_than_one_window_or_not_long_ids(stride):
    """eval_batches checks its split itself (as num_eval_windows does), strided or not: fewer than T + 1 ids or ids
    that are not a 1-D long tensor raise instead of yielding no window (mutation check: the check removed)."""
    with pytest.raises(ValueError, match=r"the eval split has 4 tokens, but block_size=4 needs at least 5"):
        list(eval_batches(torch.arange(4), 4, 2, stride=stride))
    with pytest.raises(ValueError, match=r"eval data must be a 1-D torch.long tensor"):
        list(eval_batches(torch.arange(12, dtype=torch.int32), 4, 2, stride=stride))
