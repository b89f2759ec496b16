"""Beam search on a stand-in "model" whose next-token probabilities are a fixed table, so every score can
be worked out by hand.

Tokens: 0 pad, 1 BOS, 2 EOS, 3 "a", 4 "b". The table gives p(next | target prefix after BOS):

    ()        a .55   b .45
    (a)       EOS .52 a .24  b .24
    (b)       EOS .70 a .30
    (a a)     EOS 1                 (a b)   EOS 1
    (b a)     b 1                   (b a b) EOS 1

Complete outputs and their probabilities (the EOS counts in the length):

    [a]      .55 * .52       = .286    length 2     <- greedy: a (.55), then EOS (.52)
    [b]      .45 * .70       = .315    length 2
    [a a]    .55 * .24       = .132    length 3     (and [a b] the same)
    [b a b]  .45 * .30       = .135    length 4

* alpha = 0 (raw log-probability): [b] wins (.315 > .286) -- beam search beats greedy.
* simple length penalty, alpha = 1 (average log-probability per token):
  [b] ln(.315)/2 = -0.578, [a] ln(.286)/2 = -0.626, [a a] ln(.132)/3 = -0.675, [b a b] ln(.135)/4 = -0.501:
  the long [b a b] wins.
* GNMT, alpha = 1: lp(2) = 7/6, lp(4) = 9/6: [b] -0.990 beats [b a b] -1.335;
  GNMT, alpha = 3: lp(2) = 1.588, lp(3) = 2.370, lp(4) = 3.375: [b] -0.727, [b a b] -0.593 wins.

With beam size 3 the search reaches [b a b]: step 2's best six candidates are b+EOS, a+EOS (both finished,
ranks 0 and 1 < 3), then b+a, a+a, a+b (the live beams). With 3 finished hypotheses after step 3, the live
[b a b] (scored as if it ended now, at length 3) still beats the worst of them, so the search goes on.
"""

import math

import pytest
import torch
from torch import nn

from attnkit.generation import beam_search, beam_search_hypotheses, greedy_search, length_penalty_factor

PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4
V = 5
TABLE = {
    (): {A: 0.55, B: 0.45},
    (A,): {EOS: 0.52, A: 0.24, B: 0.24},
    (B,): {EOS: 0.70, A: 0.30},
    (A, A): {EOS: 1.0},
    (A, B): {EOS: 1.0},
    (B, A): {B: 1.0},
    (B, A, B): {EOS: 1.0},
}


class TableCache:
    """Remembers the target tokens fed so far; ``reorder`` follows the beams like a KV cache does."""

    def __init__(self, batch_size):
        self.tokens = torch.zeros(batch_size, 0, dtype=torch.long)

    @property
    def length(self):
        return self.tokens.shape[1]

    def reorder(self, index):
        self.tokens = self.tokens.index_select(0, index)


class TableModel(nn.Module):
    """Encoder-decoder interface; the "decoder" looks the prefix up in TABLE (unknown prefixes are a bug)."""

    def __init__(self, table=TABLE):
        super().__init__()
        self.table = table
        self.encode_calls = 0

    def encode(self, src, src_key_padding_mask=None):
        self.encode_calls += 1
        return torch.zeros(src.shape[0], src.shape[1], 1)  # (B, S, C=1): ignored

    def decode(self, tgt, memory, *, memory_key_padding_mask=None, tgt_key_padding_mask=None, cache=None):
        assert memory.shape[0] == tgt.shape[0]
        if cache is not None:
            cache.tokens = torch.cat([cache.tokens, tgt], dim=1)
            tgt = cache.tokens
        logits = torch.full((tgt.shape[0], tgt.shape[1], V), float("-inf"))
        for n, row in enumerate(tgt.tolist()):
            assert row[0] == BOS
            for token, p in self.table[tuple(row[1:])].items():
                logits[n, -1, token] = math.log(p)
        return logits

    def new_cache(self, batch_size, max_len):
        return TableCache(batch_size)


SRC = torch.tensor([[5, 6, 7]])  # any source: the table ignores it (limit 1.2 * 3 + 10 = 13 tokens)
IDS = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD)


def test_greedy_takes_the_locally_best_token():
    assert greedy_search(TableModel(), SRC, **IDS) == [[A]]
    assert greedy_search(TableModel(), SRC, use_cache=False, **IDS) == [[A]]


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_beats_greedy_without_length_penalty(use_cache):
    hyps = beam_search_hypotheses(TableModel(), SRC, beam_size=3, length_penalty=0.0, use_cache=use_cache, **IDS)[0]
    assert [h.tokens for h in hyps] == [[B], [A], [B, A, B]]  # the 3 best of the 5 complete outputs
    assert [h.score for h in hyps] == pytest.approx([math.log(0.315), math.log(0.286), math.log(0.135)], abs=1e-6)
    assert [h.length for h in hyps] == [2, 2, 4]
    assert all(h.ended_with_eos for h in hyps)


@pytest.mark.parametrize(
    "style, alpha, best, score",
    [
        ("simple", 1.0, [B, A, B], math.log(0.135) / 4),
        ("gnmt", 1.0, [B], math.log(0.315) / (7 / 6)),
        ("gnmt", 3.0, [B, A, B], math.log(0.135) / (9 / 6) ** 3),
    ],
)
def test_length_penalty_decides_between_short_and_long(style, alpha, best, score):
    for use_cache in (True, False):
        hyps = beam_search_hypotheses(TableModel(), SRC, beam_size=3, length_penalty=alpha,
                                      length_penalty_style=style, use_cache=use_cache, **IDS)[0]
        assert hyps[0].tokens == best
        assert hyps[0].score == pytest.approx(score, abs=1e-6)
        assert hyps[0].log_prob == pytest.approx(math.log(0.315 if best == [B] else 0.135), abs=1e-6)


def test_simple_alpha_1_ranking_by_hand():
    hyps = beam_search_hypotheses(TableModel(), SRC, beam_size=3, length_penalty=1.0, length_penalty_style="simple",
                                  **IDS)[0]
    assert [h.tokens for h in hyps] == [[B, A, B], [B], [A]]
    assert [round(h.score, 3) for h in hyps] == [-0.501, -0.578, -0.626]


def test_beam_size_2_stops_when_live_beams_cannot_win():
    # step 2 (lp(2) = 2 with simple alpha 1): finished [b] -0.578, [a] -0.626 fill the beam; the best live
    # beam b+a has ln(.135)/2 = -1.001 <= -0.626 -> stop. [b a b] is never reached.
    hyps = beam_search_hypotheses(TableModel(), SRC, beam_size=2, length_penalty=1.0, length_penalty_style="simple",
                                  **IDS)[0]
    assert [h.tokens for h in hyps] == [[B], [A]]


def test_beam_size_1_is_greedy():
    assert beam_search(TableModel(), SRC, beam_size=1, length_penalty=1.0, **IDS) == [[A]]


def test_length_limit_finishes_live_beams_without_eos():
    # max_len = 2: after step 2 the live beams b+a, a+a, a+b end as they are (prob .135, .132, .132)
    hyps = beam_search_hypotheses(TableModel(), SRC, beam_size=3, length_penalty=0.0, max_len=2, **IDS)[0]
    assert [(h.tokens, h.ended_with_eos) for h in hyps] == [([B], True), ([A], True), ([B, A], False)]
    assert hyps[2].length == 2 and hyps[2].log_prob == pytest.approx(math.log(0.135), abs=1e-6)


def test_batch_of_sources_each_searched_independently_with_one_encoder_call():
    model = TableModel()
    src = torch.tensor([[5, 6, 7], [8, 0, 0]])  # the second is padded: limit floor(1.2 * 1 + 10) = 11
    out = beam_search(model, src, beam_size=3, length_penalty=1.0, length_penalty_style="simple", **IDS)
    assert out == [[B, A, B], [B, A, B]]
    assert model.encode_calls == 1


def test_length_penalty_factor_formulas():
    assert length_penalty_factor(4, 1.0, "simple") == 4.0
    assert length_penalty_factor(4, 0.0, "simple") == 1.0
    assert length_penalty_factor(7, 1.0, "gnmt") == 2.0  # (5 + 7) / 6
    assert length_penalty_factor(1, 2.0, "gnmt") == 1.0
    with pytest.raises(ValueError, match="length_penalty_style"):
        length_penalty_factor(3, 1.0, "wu")


def test_fewer_possible_continuations_than_beams():
    # only one token is possible at first, so 2 of the 3 beams stay dead (score -inf) without breaking anything
    table = {(): {A: 1.0}, (A,): {EOS: 0.4, B: 0.6}, (A, B): {EOS: 1.0}}
    for use_cache in (True, False):
        hyps = beam_search_hypotheses(TableModel(table), SRC, beam_size=3, length_penalty=0.0,
                                      use_cache=use_cache, **IDS)[0]
        assert [h.tokens for h in hyps] == [[A, B], [A]]
        assert [h.score for h in hyps] == pytest.approx([math.log(0.6), math.log(0.4)], abs=1e-6)


def test_beam_size_1_is_greedy_when_tokens_tie(make_transformer, mt_ids):
    # four tokens share the best logit at every step: greedy search's argmax takes the lowest, and so must beam
    # search (torch.topk returns equal values in no set order); wider beams rank the ties lowest token first
    model = make_transformer()
    with torch.no_grad():
        model.generator.weight.zero_()
        model.generator.bias.fill_(-5.0)
        model.generator.bias[[11, 7, 9, 5]] = 3.0
    src = torch.tensor([[3, 4, 5, mt_ids.eos]])
    ids = dict(bos_id=mt_ids.bos, eos_id=mt_ids.eos, pad_id=mt_ids.pad, max_len_a=0, max_len_b=3)
    assert greedy_search(model, src, **ids) == [[5, 5, 5]]
    assert beam_search(model, src, beam_size=1, **ids) == [[5, 5, 5]]
    hyps = beam_search_hypotheses(model, src, beam_size=3, **ids)[0]
    assert [h.tokens for h in hyps] == [[5, 5, 5], [5, 5, 7], [5, 5, 9]]


def test_beam_size_1_is_greedy_when_log_probabilities_round_to_one_sum(make_transformer, mt_ids):
    # token 7's logit is one float32 step above token 5's: greedy search takes 7 every time. Once the running
    # score is a few nats below 0, score + log p(7) and score + log p(5) round to the same float32 sum; beam
    # search then took the lowest token (5) from the sixth step on, and beam 1 was no longer greedy
    model = make_transformer()
    with torch.no_grad():
        model.generator.weight.zero_()
        model.generator.bias.fill_(-5.0)
        model.generator.bias[5] = 3.0
        model.generator.bias[7] = torch.nextafter(torch.tensor(3.0), torch.tensor(4.0))
    src = torch.tensor([[3, 4, 5, mt_ids.eos]])
    ids = dict(bos_id=mt_ids.bos, eos_id=mt_ids.eos, pad_id=mt_ids.pad, max_len_a=0, max_len_b=30)
    assert greedy_search(model, src, **ids) == [[7] * 30]
    for use_cache in (True, False):
        assert beam_search(model, src, beam_size=1, use_cache=use_cache, **ids) == [[7] * 30]
        assert beam_search_hypotheses(model, src, beam_size=2, use_cache=use_cache, **ids)[0][0].tokens == [7] * 30
