"""Sampling past the context with the KV cache (``use_cache=True, sliding_window=True``).

What the module doc promises, checked on tiny random GPTs:
* learned positions (re-fill): every step's logits equal an uncached forward over the current window,
  which starts at the last cut and grows to ``block_size`` before the next cut;
* RoPE (context shift): after a shift the first layer's cached keys/values equal a fresh prefill of the
  window (relative positions exact), so a one-layer model equals the uncached window exactly; deeper
  layers' kept entries still reflect the dropped tokens.
"""

import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.generation import generate
from attnkit.generation.generate import left_pad, position_ids_from_padding
from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from helpers import assert_close

W = 8


def _gpt(position: str, n_layer: int, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    extra = dict(position="rope", norm="rmsnorm", n_kv_head=2) if position == "rope" else {}
    model = GPT(GPTConfig(vocab_size=30, block_size=W, n_layer=n_layer, n_head=4, n_embd=32, dropout=0.0, **extra))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model.eval()


def _window_reference(model, prompts, n_new):
    """Greedy decoding, uncached, over the window the cached path promises (cut to W - W // 2 when full)."""
    tokens, pad = left_pad(prompts, 0)
    start, out = 0, [[] for _ in prompts]
    with torch.no_grad():
        for _ in range(n_new):
            L = tokens.shape[1]
            if L - start > W:
                start = L - (W - W // 2)
            wt, wp = tokens[:, start:], pad[:, start:]
            nxt = model(wt, key_padding_mask=wp, position_ids=position_ids_from_padding(wp))[:, -1].argmax(-1)
            for b, t in enumerate(nxt.tolist()):
                out[b].append(t)
            tokens = torch.cat([tokens, nxt[:, None]], 1)
            pad = torch.cat([pad, pad.new_zeros(len(prompts), 1)], 1)
    return out


PROMPTS = [[3, 4, 5], [6, 7, 8, 9, 10, 11, 12], [13]]


@pytest.mark.parametrize("position,n_layer", [("learned", 2), ("sinusoidal", 2), ("rope", 1)])
def test_window_cache_equals_the_uncached_window(position, n_layer):
    model = _gpt(position, n_layer)
    got = generate(model, PROMPTS, max_new_tokens=20, sliding_window=True)
    assert got == _window_reference(model, PROMPTS, 20)
    assert len({t for o in got for t in o}) > 4  # not one token repeated


def test_prompt_longer_than_the_window_is_cut_before_prefill():
    model = _gpt("learned", 2)
    prompt = [list(range(1, 20))]
    assert generate(model, prompt, max_new_tokens=6, sliding_window=True) == _window_reference(model, prompt, 6)


def test_rope_shift_renumbers_kept_keys_like_a_fresh_prefill():
    model = _gpt("rope", 3)
    gen = __import__("attnkit.generation.generate", fromlist=["_WindowCache"])
    tokens, pad = left_pad([[3, 4, 5, 6], [7, 8, 9, 10, 11, 12, 13, 14]], 0)
    path = gen._WindowCache(model, 2, W, model.rotary)
    with torch.no_grad():
        path.next_logits(tokens, pad)  # prefill: 8 columns, the window is full
        extra = torch.tensor([[15], [16]])
        tokens, pad = torch.cat([tokens, extra], 1), torch.cat([pad, pad.new_zeros(2, 1)], 1)
        path.next_logits(tokens, pad)  # 9 columns: cut to the newest 4, the 3 kept ones shifted
        assert path.start == 5 and path.cache.length == 4
        fresh = model.new_cache(2, W)
        wp = pad[:, 5:]
        model(tokens[:, 5:], key_padding_mask=wp, position_ids=position_ids_from_padding(wp), cache=fresh)
    assert_close(path.cache[0].k_cache[:, :, :4], fresh[0].k_cache[:, :, :4], "float32")
    torch.testing.assert_close(path.cache[0].v_cache[:, :, :4], fresh[0].v_cache[:, :, :4], atol=1e-6, rtol=0)
    # deeper layers still carry the dropped tokens in the kept entries (documented, not exact)
    assert not torch.allclose(path.cache[2].v_cache[:, :, :3], fresh[2].v_cache[:, :, :3], atol=1e-3)


def test_rope_shift_keeps_every_layers_relative_positions_exact():
    """In every layer (the deep ones too), a query scores each kept key after the shift exactly as it did before,
    when both are counted from the same origin: a query at position ``p`` after = at ``p + dropped`` before, with
    ``dropped`` the real tokens its row lost (left padding makes it differ per row). Values move unchanged."""
    model = _gpt("rope", 3)
    gen = __import__("attnkit.generation.generate", fromlist=["_WindowCache"])
    tokens, pad = left_pad([[3, 4, 5, 6], [7, 8, 9, 10, 11, 12, 13, 14]], 0)
    path = gen._WindowCache(model, 2, W, model.rotary)
    with torch.no_grad():
        path.next_logits(tokens, pad)  # the window is full: 8 columns
        before = [(layer.k_cache[:, :, :8].clone(), layer.v_cache[:, :, :8].clone()) for layer in path.cache]
        tokens, pad = torch.cat([tokens, torch.tensor([[15], [16]])], 1), torch.cat([pad, pad.new_zeros(2, 1)], 1)
        path.next_logits(tokens, pad)  # cut to the newest 4 columns: old columns 5, 6, 7 kept as 0, 1, 2
        dropped = (~pad[:, :5]).sum(1)
        assert dropped.tolist() == [1, 5]
        q = torch.randn(2, 2, 1, model.rotary.head_dim, generator=torch.Generator().manual_seed(3))
        p_after = torch.tensor([[6], [6]])
        q_after, q_before = model.rotary(q, p_after), model.rotary(q, p_after + dropped[:, None])
        for n, (layer, (k0, v0)) in enumerate(zip(path.cache, before)):
            scores_after = (q_after * layer.k_cache[:, :, :3]).sum(-1)  # (b, K, kept)
            scores_before = (q_before * k0[:, :, 5:8]).sum(-1)
            assert_close(scores_after, scores_before, "float32")
            assert torch.equal(layer.v_cache[:, :, :3], v0[:, :, 5:8]), n


def test_rope_window_cache_runs_long_and_stays_finite():
    model = _gpt("rope", 2)
    out = generate(model, PROMPTS, max_new_tokens=40, sliding_window=True, do_sample=True, seed=1)
    assert [len(o) for o in out] == [40] * 3


def test_the_cache_grows_with_the_tokens_not_with_max_new_tokens(monkeypatch):
    """A RoPE model may be asked for any number of new tokens: the cache starts with room for the prompt and a few
    more and doubles when full, so a huge ``max_new_tokens`` (here 10**12, whose cache would be 2 TB) costs only
    what is generated, and growing changes no token (rows leaving the batch included)."""
    from attnkit.models.gpt import GPTCache

    gen = importlib.import_module("attnkit.generation.generate")  # (the package's `generate` is the function)

    model = _gpt("rope", 2)
    # every id ends a row at once: the limit is never reached, and only the first cache is ever made
    assert generate(model, PROMPTS, max_new_tokens=10**12, eos_token_id=list(range(30))) == [[], [], []]
    eos = generate(model, PROMPTS, max_new_tokens=30, use_cache=False)[1][11]  # makes row 1 stop early
    reference = generate(model, PROMPTS, max_new_tokens=30, use_cache=False, eos_token_id=eos)
    grown, grow = [], GPTCache.grow
    monkeypatch.setattr(GPTCache, "grow", lambda cache, n: (grown.append((cache.length, n)), grow(cache, n))[1])
    monkeypatch.setattr(gen, "FIRST_ROOM", 1)  # room for the longest prompt (7) + 1, then 16, 32, 36 = 7 + 30 - 1
    assert generate(model, PROMPTS, max_new_tokens=30, eos_token_id=eos) == reference
    assert grown == [(8, 16), (16, 32), (32, 36)]


def test_a_cache_without_grow_or_max_len_is_made_whole(monkeypatch):
    """``generate`` asks of a model only ``new_cache(batch_size, max_len)``: a user's cache that has neither ``grow``
    nor ``max_len`` is made with room for every column at once (and gives the tokens of the uncached path)."""
    gen = importlib.import_module("attnkit.generation.generate")
    model = _gpt("rope", 2)

    class OwnCache:  # keeps a GPTCache, shows nothing of it but reorder
        def __init__(self, inner):
            self.inner = inner

        def reorder(self, index):
            self.inner.reorder(index)

    class Mine(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt, self.sizes = model, []

        def forward(self, idx, cache=None, **kw):
            return self.gpt(idx, cache=None if cache is None else cache.inner, **kw)

        def new_cache(self, batch_size, max_len):
            self.sizes.append(max_len)
            return OwnCache(self.gpt.new_cache(batch_size, max_len))

    monkeypatch.setattr(gen, "FIRST_ROOM", 1)
    mine = Mine()
    assert generate(mine, PROMPTS, max_new_tokens=12) == generate(model, PROMPTS, max_new_tokens=12, use_cache=False)
    assert mine.sizes[-1] == 7 + 12 - 1  # the longest prompt and every new token but the last


def test_learned_positions_without_sliding_window_still_refuse_the_cache():
    model = _gpt("learned", 1)
    with pytest.raises(ValueError, match="exceed the learned positions' block_size = 8; use sliding_window=True"):
        generate(model, [[1, 2, 3]], max_new_tokens=10)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.integers(1, 29), min_size=1, max_size=12), min_size=1, max_size=3),
       st.integers(1, 18), st.sampled_from([("learned", 2), ("rope", 1)]))
def test_window_cache_property(prompts, n_new, kind):
    """Random batches (left padding, prompts longer than the window) and lengths: still the uncached window."""
    model = _gpt(*kind)
    assert generate(model, prompts, max_new_tokens=n_new, sliding_window=True) == _window_reference(model, prompts, n_new)
