"""Property-based checks (hypothesis) of the generation API on tiny random models.

Invariants, for random prompts (lengths, batch sizes, left padding) and options: cached = uncached
decoding, a left-padded greedy batch = each prompt on its own, the output respects max_new_tokens and EOS, and
for the encoder-decoder, beam size 1 = greedy. Few examples, so the file runs in seconds.
"""

import json
from functools import lru_cache

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.generation import GenerationConfig, beam_search, generate, greedy_search
from attnkit.models.configs import GPTConfig, TransformerConfig
from attnkit.models.gpt import GPT
from attnkit.models.transformer import Transformer
from helpers import spread_weights

V = 24
SETTINGS = settings(max_examples=15, deadline=None, derandomize=True)


def _spread(model, seed):
    return spread_weights(model, std=0.4, seed=seed, matrices_only=True).eval()


@lru_cache(maxsize=None)
def gpt(kind: str) -> GPT:
    torch.manual_seed(0)
    extra = dict(position="rope", n_kv_head=1, norm="rmsnorm") if kind == "rope" else {}
    return _spread(GPT(GPTConfig(vocab_size=V, block_size=24, n_layer=2, n_head=2, n_embd=16, dropout=0.0,
                                 **extra)), 1)


@lru_cache(maxsize=None)
def seq2seq() -> Transformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=16, num_heads=2, num_encoder_layers=1,
                            num_decoder_layers=1, dim_feedforward=32, dropout=0.0, pad_id=0)
    return _spread(Transformer(cfg), 2)


prompt_lists = st.lists(st.lists(st.integers(1, V - 1), min_size=1, max_size=7), min_size=1, max_size=3)


@SETTINGS
@given(prompt_lists, st.integers(0, 6), st.sampled_from(["learned", "rope"]), st.booleans(), st.integers(0, 99))
def test_cached_equals_uncached_and_batch_equals_one_by_one(prompts, n, kind, sample, seed):
    model = gpt(kind)
    kw = dict(max_new_tokens=n, do_sample=sample, seed=seed, top_k=8 if sample else None)
    cached = generate(model, prompts, **kw)
    assert cached == generate(model, prompts, use_cache=False, **kw)
    if not sample:  # (a sampled batch draws its rows from one generator: the rows differ from one-by-one)
        assert cached == [generate(model, [p], **kw)[0] for p in prompts]
    assert all(len(o) == n and all(0 <= t < V for t in o) for o in cached)


@SETTINGS
@given(prompt_lists, st.integers(1, 6), st.integers(0, V - 1))
def test_eos_ends_each_row_and_is_not_returned(prompts, n, eos):
    out = generate(gpt("learned"), prompts, max_new_tokens=n, eos_token_id=eos)
    full = generate(gpt("learned"), prompts, max_new_tokens=n)
    for o, f in zip(out, full):
        assert eos not in o
        assert o == (f[:f.index(eos)] if eos in f else f)


@SETTINGS
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.integers(0, 999), st.booleans())
def test_beam_one_equals_greedy(lengths, seed, use_cache):
    g = torch.Generator().manual_seed(seed)
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for b, n in enumerate(lengths):
        src[b, :n] = torch.randint(3, V, (n,), generator=g)
    ids = dict(bos_id=1, eos_id=2, pad_id=0, max_len=8, use_cache=use_cache)
    assert beam_search(seq2seq(), src, beam_size=1, **ids) == greedy_search(seq2seq(), src, **ids)


anything = st.one_of(st.none(), st.booleans(), st.integers(-3, 50), st.floats(allow_nan=True, allow_infinity=True),
                     st.text(max_size=3), st.lists(st.integers(-1, 30), max_size=3))
OPTIONS = ("max_new_tokens", "do_sample", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
           "eos_token_id", "stop_strings", "seed", "use_cache", "pad_token_id", "sliding_window", "compile")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.fixed_dictionaries({}, optional={name: anything for name in OPTIONS}))
def test_any_options_build_a_config_or_raise_value_error(options):
    """Random values of every type for every option: a config or a ValueError, never another exception."""
    try:
        GenerationConfig.from_options(**options)
    except ValueError:
        pass


valid_options = st.fixed_dictionaries({"max_new_tokens": st.integers(0, 4)}, optional={
    "do_sample": st.booleans(), "temperature": st.floats(0.1, 3.0), "top_k": st.none() | st.integers(1, 30),
    "top_p": st.none() | st.floats(0.05, 1.0), "min_p": st.none() | st.floats(0.0, 1.0),
    "repetition_penalty": st.floats(0.5, 2.0),
    "eos_token_id": st.none() | st.integers(0, V - 1) | st.lists(st.integers(0, V - 1), max_size=3),
    "seed": st.none() | st.integers(0, 2**31), "use_cache": st.booleans(), "pad_token_id": st.integers(0, V - 1),
    "sliding_window": st.booleans()})


@settings(max_examples=40, deadline=None, derandomize=True)
@given(valid_options, prompt_lists)
def test_valid_configs_round_trip_through_json_and_generate(options, prompts):
    cfg = GenerationConfig.from_options(**options)
    assert GenerationConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    out = generate(gpt("learned"), prompts, cfg)
    assert len(out) == len(prompts) and all(len(o) <= cfg.max_new_tokens and all(0 <= t < V for t in o) for o in out)
