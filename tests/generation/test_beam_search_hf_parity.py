"""Beam search against Hugging Face transformers' on the same network: a random attnkit ``Transformer`` (float64,
spread weights) wrapped as a minimal transformers encoder-decoder, decoded by ``model.generate(num_beams=k,
length_penalty=alpha, early_stopping=False, num_return_sequences=k)``.

What must agree (``length_penalty_style="simple"``): the ``k`` hypotheses, their order and their scores
(``sequences_scores``: ``log_prob / length ** alpha``, the length counting the EOS and not the start token). The
length limit is HF's ``max_new_tokens`` = attnkit's ``max_len`` (with ``max_len_b`` large enough not to bind);
attnkit's per-sentence limit ``floor(a * src_len + b)`` is compared with HF run on one sentence at a time. With
``k = 1`` HF runs greedy search, which attnkit's beam search must reproduce token for token.

Not compared (deliberate differences, see attnkit/generation/beam_search.py): ties between equal candidate scores
(HF's ``topk`` orders them arbitrarily), a beam wider than the candidates (HF fills the rest with ``-1e9``-scored
placeholders, attnkit returns fewer hypotheses), and the GNMT length penalty (HF has none).

Both sides take the logits to float32 before ``log_softmax`` and add the log-probabilities in float32; attnkit
divides by the length penalty in float64, HF in float32, hence the ``1e-5`` tolerance on scores.

Axis legend: B batch, S source length, V target vocabulary, k beam size.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

import helpers
from attnkit.generation import beam_search_hypotheses, greedy_search
from attnkit.models.transformer import Transformer

transformers = pytest.importorskip("transformers")
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput  # noqa: E402

PAD, BOS, EOS = 0, 1, 2
SRC_VOCAB, TGT_VOCAB = 23, 19


class _Encoder(torch.nn.Module):
    main_input_name = "input_ids"

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        mask = None if attention_mask is None else attention_mask == 0  # HF: 1 = real token
        return BaseModelOutput(last_hidden_state=self.net.encode(input_ids, mask))


class _Config(transformers.PretrainedConfig):
    model_type = "attnkit_parity_seq2seq"


class _HFSeq2Seq(transformers.PreTrainedModel, transformers.GenerationMixin):
    """The attnkit network as a transformers encoder-decoder; the decoder recomputes the whole prefix (no cache)."""

    config_class = _Config
    main_input_name = "input_ids"

    def __init__(self, config, net):
        super().__init__(config)
        self.net = net
        self.encoder = _Encoder(net)

    def get_encoder(self):
        return self.encoder

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, encoder_outputs=None, **kwargs):
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask)
        memory = encoder_outputs[0]  # (N, S, C), already repeated for the beams
        mask = None if attention_mask is None else attention_mask == 0
        logits = self.net.decode(decoder_input_ids, memory, memory_key_padding_mask=mask,
                                 tgt_key_padding_mask=torch.zeros_like(decoder_input_ids, dtype=torch.bool))
        return Seq2SeqLMOutput(logits=logits)


def _make(seed: int, eos_bias: float):
    """A random float64 attnkit Transformer (pre-norm, spread weights, PAD and BOS never generated), HF-wrapped."""
    torch.manual_seed(seed)
    cfg = helpers.tiny_transformer_config(src_vocab_size=SRC_VOCAB, tgt_vocab_size=TGT_VOCAB, norm_first=True,
                                          pad_id=PAD)
    net = helpers.spread_weights(Transformer(cfg), std=0.5, seed=seed, matrices_only=True)
    with torch.no_grad():
        net.generator.bias.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(seed + 1))
        net.generator.bias[EOS] += eos_bias  # sentences end at varied points
        net.generator.bias[PAD] -= 30.0
        net.generator.bias[BOS] -= 30.0
    net = net.double().eval()
    config = _Config(is_encoder_decoder=True, decoder_start_token_id=BOS, bos_token_id=BOS, eos_token_id=EOS,
                     pad_token_id=PAD, vocab_size=TGT_VOCAB)
    return net, _HFSeq2Seq(config, net).eval()


def _sources(rng: random.Random, lengths: list[int]) -> torch.Tensor:
    """Right-padded random sources ``(B, S)``."""
    src = torch.full((len(lengths), max(lengths)), PAD, dtype=torch.long)
    for b, n in enumerate(lengths):
        src[b, :n] = torch.tensor([rng.randrange(3, SRC_VOCAB) for _ in range(n)])
    return src


def _split(seq: list[int]) -> tuple[list[int], int, bool]:
    """HF's generated ids (start token dropped) -> tokens without EOS, length (EOS counted), ended with EOS."""
    if EOS in seq:
        n = seq.index(EOS)
        return seq[:n], n + 1, True
    return seq, len(seq), False


def _hf_generate(model, src: torch.Tensor, k: int, alpha: float, max_new: int) -> list[list[tuple]]:
    """``B`` lists of ``k`` (tokens, score, ended_with_eos), best first; ``k = 1``: greedy search, scored by hand."""
    config = transformers.GenerationConfig(
        num_beams=k, length_penalty=alpha, early_stopping=False, max_new_tokens=max_new, do_sample=False,
        num_return_sequences=k, output_scores=True, return_dict_in_generate=True, decoder_start_token_id=BOS,
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, use_cache=False)
    with torch.no_grad():
        out = model.generate(input_ids=src, attention_mask=(src != PAD).long(), generation_config=config)
    result = []
    for b in range(src.shape[0]):
        hyps = []
        for j in range(k):
            tokens, length, eos = _split(out.sequences[b * k + j, 1:].tolist())
            if k > 1:
                score = float(out.sequences_scores[b * k + j])
            else:  # greedy: out.scores are the (unprocessed) logits of each step
                ids = tokens + [EOS] * eos
                log_prob = sum(float(torch.log_softmax(out.scores[t][b].float(), -1)[i]) for t, i in enumerate(ids))
                score = log_prob / length ** alpha
            hyps.append((tokens, score, eos))
        result.append(hyps)
    return result


def _ours(net, src, k, alpha, **limits) -> list[list[tuple]]:
    hyps = beam_search_hypotheses(net, src, bos_id=BOS, eos_id=EOS, pad_id=PAD, beam_size=k, length_penalty=alpha,
                                  length_penalty_style="simple", **limits)
    return [[(h.tokens, h.score, h.ended_with_eos) for h in sentence] for sentence in hyps]


def _assert_same(ours: list[tuple], theirs: list[tuple], where: str) -> None:
    assert [(t, e) for t, _, e in ours] == [(t, e) for t, _, e in theirs], where
    for (_, s, _), (_, s_hf, _) in zip(ours, theirs):
        assert s == pytest.approx(s_hf, rel=1e-5, abs=1e-6), where


# (model seed, eos bias, source lengths, beam size, alpha, max_new_tokens): batches of 1-3 with padding, limits
# that bind (1, 2, 4) and that do not (25: every hypothesis ends with EOS or stops early)
CASES = [
    (3, 2.0, [4, 6], 3, 1.0, 8),
    (5, 3.5, [3], 2, 0.0, 25),
    (7, 3.5, [2, 7, 5], 4, 0.6, 25),
    (11, 5.0, [6, 1], 5, 2.0, 25),
    (13, 2.0, [5, 5, 2], 5, 1.0, 4),
    (17, 3.5, [8], 3, 2.0, 25),
    (19, 5.0, [1, 3], 2, 0.6, 2),
    (23, 3.5, [4], 5, 0.0, 25),
    (29, 2.0, [7, 2], 4, 2.0, 25),
    (31, 5.0, [3, 8, 1], 3, 0.0, 25),
    (32, 2.0, [3], 2, 1.0, 15),
    (37, 3.5, [5, 6], 4, 1.0, 1),
    (2, 5.0, [2, 4], 5, 0.6, 25),
    (8, 3.5, [6, 3, 4], 2, 2.0, 25),
    (6, 2.0, [1], 1, 1.0, 25),
    (9, 3.5, [5, 2, 7], 1, 0.6, 6),
]


@pytest.mark.parametrize("seed, eos_bias, lengths, k, alpha, max_new", CASES)
def test_beam_search_matches_hf(seed, eos_bias, lengths, k, alpha, max_new):
    net, hf = _make(seed, eos_bias)
    src = _sources(random.Random(seed * 100 + len(lengths)), lengths)
    theirs = _hf_generate(hf, src, k, alpha, max_new)
    for use_cache in (True, False):
        ours = _ours(net, src, k, alpha, max_len=max_new, max_len_b=1000, use_cache=use_cache)
        for b in range(len(lengths)):
            _assert_same(ours[b], theirs[b], f"sentence {b}, use_cache={use_cache}")
    if k == 1:  # beam search with one beam is greedy search
        greedy = greedy_search(net, src, bos_id=BOS, eos_id=EOS, pad_id=PAD, max_len=max_new, max_len_b=1000)
        assert greedy == [h[0][0] for h in theirs]


@pytest.mark.parametrize("seed, a, b", [(4, 1.0, 1), (10, 0.5, 2), (21, 2.0, 0)])
def test_per_sentence_length_limits_match_hf_sentence_by_sentence(seed, a, b):
    """attnkit's limit ``floor(a * src_len + b)`` differs per sentence of a batch: HF's ``max_new_tokens`` for each."""
    net, hf = _make(seed, 3.5)
    lengths = [1, 4, 7]
    src = _sources(random.Random(seed), lengths)
    ours = _ours(net, src, 3, 1.0, max_len_a=a, max_len_b=b)
    for i, n in enumerate(lengths):
        limit = max(1, math.floor(a * n + b))
        theirs = _hf_generate(hf, src[i:i + 1, :n], 3, 1.0, limit)[0]
        _assert_same(ours[i], theirs, f"sentence {i}, limit {limit}")


def test_stopping_criterion_is_hfs_heuristic_for_positive_alpha():
    """With ``alpha > 0`` the search stops as HF's ``early_stopping=False`` does, although a live beam would have
    gone on to a better hypothesis (HF's ``early_stopping="never"`` finds it): the docstring's "heuristic"."""
    net, hf = _make(32, 2.0)
    src = torch.tensor([[11, 10, 4]])
    ours = _ours(net, src, 2, 1.0, max_len=15)[0]
    _assert_same(ours, _hf_generate(hf, src, 2, 1.0, 15)[0], "early_stopping=False")
    assert ours[0][0] == [14] and ours[0][1] == pytest.approx(-0.81735, abs=1e-4)
    config = transformers.GenerationConfig(num_beams=2, length_penalty=1.0, early_stopping="never", max_new_tokens=15,
                                           do_sample=False, output_scores=True, return_dict_in_generate=True,
                                           decoder_start_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD,
                                           use_cache=False)
    with torch.no_grad():
        never = hf.generate(input_ids=src, attention_mask=torch.ones_like(src), generation_config=config)
    assert float(never.sequences_scores[0]) > ours[0][1] + 0.1  # a better hypothesis existed
