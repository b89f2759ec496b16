"""Greedy and beam search on a real tiny random ``Transformer``: cache vs no cache, beam 1 vs greedy,
batched vs one sentence at a time, the length limit, and argument checks."""

import pytest
import torch

from attnkit.generation import beam_search, beam_search_hypotheses, greedy_search

LENGTHS = [5, 9, 3, 7, 6]  # right-padded batch of five sources
EOS_BIAS = 4.0  # some sentences end early, others run to the limit


@pytest.fixture
def setup(make_transformer, make_sources, mt_ids):
    model = make_transformer(seed=0, eos_bias=EOS_BIAS)
    src = make_sources(LENGTHS, seed=0)
    kw = dict(bos_id=mt_ids.bos, eos_id=mt_ids.eos, pad_id=mt_ids.pad, max_len_a=1.0, max_len_b=3)
    return model, src, kw


def test_greedy_cached_equals_uncached(setup):
    model, src, kw = setup
    cached = greedy_search(model, src, **kw)
    assert cached == greedy_search(model, src, use_cache=False, **kw)
    lengths = sorted(len(o) for o in cached)
    assert lengths[0] < 3 and lengths[-1] >= 8  # some stopped at EOS, some ran long: not a vacuous comparison


@pytest.mark.parametrize("style, alpha", [("gnmt", 1.0), ("simple", 0.6), ("gnmt", 0.0)])
def test_beam_cached_equals_uncached(setup, style, alpha):
    model, src, kw = setup
    kw = dict(kw, beam_size=3, length_penalty=alpha, length_penalty_style=style)
    cached = beam_search_hypotheses(model, src, **kw)
    uncached = beam_search_hypotheses(model, src, use_cache=False, **kw)
    assert [[h.tokens for h in hs] for hs in cached] == [[h.tokens for h in hs] for hs in uncached]
    for hs_c, hs_u in zip(cached, uncached):
        assert [h.score for h in hs_c] == pytest.approx([h.score for h in hs_u], abs=1e-4)


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_size_1_equals_greedy(setup, use_cache):
    model, src, kw = setup
    greedy = greedy_search(model, src, use_cache=use_cache, **kw)
    assert beam_search(model, src, beam_size=1, use_cache=use_cache, **kw) == greedy
    assert beam_search(model, src, beam_size=1, length_penalty=2.0, use_cache=use_cache, **kw) == greedy


def test_beam_differs_from_greedy_and_scores_at_least_as_well(setup):
    model, src, kw = setup
    greedy = greedy_search(model, src, **kw)
    hyps = beam_search_hypotheses(model, src, beam_size=4, length_penalty=0.0, **kw)
    assert [h[0].tokens for h in hyps] != greedy  # the search found something else somewhere
    # with alpha = 0 the score is the log-probability: beam's best is at least as likely as greedy's output
    for b, hs in enumerate(hyps):
        assert all(hs[i].score >= hs[i + 1].score for i in range(len(hs) - 1))  # best first
        greedy_tokens = greedy[b] + ([kw["eos_id"]] if len(greedy[b]) < _limit(src, b, kw) else [])
        assert hs[0].log_prob >= _log_prob(model, src[b : b + 1], greedy_tokens, kw) - 1e-4


def _limit(src, b, kw):
    n = int((src[b] != kw["pad_id"]).sum())
    return int(kw["max_len_a"] * n + kw["max_len_b"])


def _log_prob(model, src, tokens, kw):
    """Teacher-forced log p(tokens | src) under the model."""
    with torch.no_grad():
        tgt = torch.tensor([[kw["bos_id"]] + tokens[:-1]])
        logp = model(src, tgt).log_softmax(-1)[0]  # (T, V)
        return float(logp[torch.arange(len(tokens)), torch.tensor(tokens)].sum())


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_batched_equals_each_sentence_alone(setup, search):
    model, src, kw = setup
    run = (lambda s: greedy_search(model, s, **kw)) if search == "greedy" else (
        lambda s: beam_search(model, s, beam_size=3, **kw))
    batched = run(src)
    alone = [run(src[b : b + 1, : LENGTHS[b]])[0] for b in range(len(LENGTHS))]  # no padding at all
    assert batched == alone


def test_encoder_runs_once_per_batch(setup, monkeypatch):
    model, src, kw = setup
    calls = []
    original = model.encode

    def counting_encode(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "encode", counting_encode)
    beam_search(model, src, beam_size=4, **kw)
    assert calls == [src.shape]  # once, on the B sources (not B * beam_size rows)


def test_length_limit_is_a_ratio_of_the_source_length(make_transformer, make_sources, mt_ids):
    model = make_transformer(seed=1, eos_bias=-40.0)  # EOS never wins: every output runs to its limit
    src = make_sources([4, 7, 1], seed=2)
    kw = dict(bos_id=mt_ids.bos, eos_id=mt_ids.eos, pad_id=mt_ids.pad)
    expected = [int(0.5 * n + 1) for n in (4, 7, 1)]  # floor(a * src_len + b) = 3, 4, 1
    assert [len(o) for o in greedy_search(model, src, max_len_a=0.5, max_len_b=1, **kw)] == expected
    assert [len(o) for o in beam_search(model, src, beam_size=2, max_len_a=0.5, max_len_b=1, **kw)] == expected
    # max_len caps the ratio
    assert [len(o) for o in greedy_search(model, src, max_len_a=0.5, max_len_b=1, max_len=2, **kw)] == [2, 2, 1]
    hyps = beam_search_hypotheses(model, src, beam_size=2, max_len_a=0.5, max_len_b=1, **kw)
    assert all(not h.ended_with_eos and h.length == len(h.tokens) for hs in hyps for h in hs)


def test_explicit_source_mask_equals_pad_derived_mask(setup):
    model, src, kw = setup
    mask = src == kw["pad_id"]
    assert greedy_search(model, src, mask, **kw) == greedy_search(model, src, **kw)


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("explicit_mask", [False, True])
def test_left_padded_sources_translate_as_right_padded(setup, beam_size, explicit_mask):
    """Padding "on either side": the encoder numbers positions from column 0, so a left-padded source used to be
    encoded with its positions shifted by its padding and translated differently."""
    model, src, kw = setup
    S = src.shape[1]
    left = torch.full_like(src, kw["pad_id"])
    for b, n in enumerate(LENGTHS):
        left[b, S - n:] = src[b, :n]
    mask = (left == kw["pad_id"]) if explicit_mask else None
    search = greedy_search if beam_size == 1 else beam_search
    options = {} if beam_size == 1 else dict(beam_size=beam_size)
    assert search(model, left, mask, **options, **kw) == search(model, src, **options, **kw)


def test_training_flag_restored(setup):
    model, src, kw = setup
    model.train()
    try:
        beam_search(model, src[:1], beam_size=2, **kw)
        assert model.training
    finally:
        model.eval()


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(beam_size=0), "beam_size"),
        (dict(beam_size=2.0), "beam_size"),
        (dict(length_penalty=float("nan")), "length_penalty"),
        (dict(length_penalty_style="average"), "length_penalty_style"),
        (dict(max_len=0), "max_len"),
        (dict(max_len_a=-1.0), "max_len_a"),
        (dict(max_len_b=float("inf")), "max_len_b"),
        (dict(bos_id=24), r"bos_id must be an int in \[0, 24\)"),
        (dict(eos_id=-1), "eos_id"),
        (dict(use_cache="yes"), "use_cache"),
    ],
)
def test_beam_search_bad_arguments(setup, kw, match):
    model, src, base = setup
    with pytest.raises(ValueError, match=match):
        beam_search(model, src, **{**base, **kw})


@pytest.mark.parametrize(
    "src, mask, match",
    [
        (torch.ones(2, 3), None, "int64"),
        (torch.ones(3, dtype=torch.long), None, r"\(B, S\)"),
        (torch.ones(2, 3, dtype=torch.long), torch.zeros(2, 4, dtype=torch.bool), "src_key_padding_mask must have shape"),
        (torch.ones(2, 3, dtype=torch.long), torch.zeros(2, 3), "bool"),
        # a source of nothing but padding used to be "translated" from an encoder that saw no token
        (torch.tensor([[3, 4], [0, 0]]), None, "at least one real token .*only padding in source row 1"),
        (torch.ones(2, 3, dtype=torch.long), torch.tensor([[False] * 3, [True] * 3]), "only padding in source row 1"),
    ],
)
def test_greedy_search_bad_source(setup, src, mask, match):
    model, _, kw = setup
    with pytest.raises(ValueError, match=match):
        greedy_search(model, src, mask, **kw)
    with pytest.raises(ValueError, match=match):
        beam_search(model, src, mask, beam_size=2, **kw)


@pytest.mark.parametrize("broken", ["NaN", "+inf", "all -inf"])
def test_broken_logits_stop_greedy_and_beam_search(make_transformer, make_sources, mt_ids, broken):
    """NaN, a +inf logit (NaN log-probabilities) or -inf for every token stop both searches; the infinite ones used
    to give tokens silently: greedy search id 7 or 0 over and over, beam search an arbitrary hypothesis."""
    from attnkit.generation import beam_search

    model = make_transformer(seed=0)
    with torch.no_grad():
        if broken == "all -inf":
            model.generator.bias.fill_(float("-inf"))
        else:
            model.generator.bias[5] = float("nan") if broken == "NaN" else float("inf")
    src = make_sources([3, 2])
    ids = dict(bos_id=mt_ids.bos, eos_id=mt_ids.eos, pad_id=mt_ids.pad)
    with pytest.raises(FloatingPointError, match="logits hold NaN or \\+inf, or are -inf for every token"):
        greedy_search(model, src, **ids)
    with pytest.raises(FloatingPointError, match="logits hold NaN or \\+inf, or are -inf for every token"):
        beam_search(model, src, beam_size=2, **ids)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_tokenizer_smaller_than_the_output_layer_limits_the_translation(make_transformer, make_sources, mt_ids,
                                                                        beam):
    """Was: a padded target vocabulary (``--set tgt_vocab_size``) could give ids its tokenizer cannot decode, which
    crashed the BLEU of training, translate and eval mt."""
    from types import SimpleNamespace

    from attnkit.generation import beam_search
    from attnkit.generation.translate import search_ids

    model = make_transformer(seed=0)
    with torch.no_grad():
        model.generator.bias[mt_ids.tgt_vocab - 2] = 50.0  # a padding id the model prefers
    src = make_sources([3, 2])
    ids = dict(bos_id=mt_ids.bos, eos_id=mt_ids.eos, pad_id=mt_ids.pad)
    search = greedy_search if beam == 1 else lambda *a, **k: beam_search(*a, beam_size=beam, **k)
    assert any(t >= 12 for row in search(model, src, **ids) for t in row)  # unlimited: the padding id
    limited = search(model, src, vocab_size=12, **ids)
    assert all(t < 12 for row in limited for t in row) and any(limited)
    tok = SimpleNamespace(pad_id=mt_ids.pad, bos_id=mt_ids.bos, eos_id=mt_ids.eos, vocab_size=12)
    sources = [[int(t) for t in row if t != mt_ids.pad] for row in src]
    assert search_ids(model, tok, sources, beam=beam, length_penalty=1.0) == limited  # translate, eval, BLEU


@pytest.mark.parametrize(
    "vocab_size, match",
    [
        # was: accepted, and no sentence could end: every output ran to its length limit in ids 0 and 1
        (2, r"eos_id must be below vocab_size = 2 .*got 2"),
        # was: accepted silently (the LM's GenerationConfig refuses it)
        (25, r"vocab_size must be at most the model's tgt_vocab_size = 24, got 25"),
    ],
)
def test_a_vocab_size_without_eos_or_past_the_model_is_refused(setup, vocab_size, match):
    model, src, kw = setup
    with pytest.raises(ValueError, match=match):
        greedy_search(model, src, vocab_size=vocab_size, **kw)
    with pytest.raises(ValueError, match=match):
        beam_search(model, src, beam_size=2, vocab_size=vocab_size, **kw)
    assert greedy_search(model, src, vocab_size=3, **kw) == [[]] * len(LENGTHS)  # EOS is the only id left


def test_length_limit_is_at_least_one_and_capped_by_the_model():
    from attnkit.generation.seq2seq import max_target_lengths

    # floor(0 * 3 + 0.5) = 0 -> 1: a sentence always gets one token (its <eos> or a word)
    assert max_target_lengths([3], max_len=None, max_len_a=0.0, max_len_b=0.5, model_max_len=None) == [1]
    # 1.2 * 100 + 10 = 130 target tokens would run past a 16-position table
    assert max_target_lengths([100, 2], max_len=None, max_len_a=1.2, max_len_b=10, model_max_len=16) == [16, 12]
    assert max_target_lengths([100], max_len=20, max_len_a=1.2, max_len_b=10, model_max_len=16) == [16]
