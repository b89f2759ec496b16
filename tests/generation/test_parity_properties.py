"""Property-based parity (hypothesis) of ``generate`` against transformers: greedy decoding of a left-padded batch
(attnkit's KV cache, its positions counted from each row's first real token) gives, for every prompt, the tokens
that greedy decoding with the Hugging Face model's own full forward gives for that prompt alone.

Drawn: GPT-2 or Llama, heads and grouped-query ratios, ``rope_theta``, tied/untied embeddings, prompt lengths and
batch sizes, ``use_cache`` both ways. Float64 (the reference's float32 weights are exact in it), so that an
argmax is never decided by rounding.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.generation import generate
from helpers import random_hf_causal_lm

transformers = pytest.importorskip("transformers")


@st.composite
def case(draw):
    family = draw(st.sampled_from(["gpt2", "llama"]))
    H = draw(st.sampled_from([2, 4]))
    B = draw(st.integers(1, 3))
    c = dict(family=family, H=H, K=draw(st.sampled_from([k for k in (1, 2, 4) if H % k == 0])),
             theta=draw(st.sampled_from([10000.0, 300.0])), tied=draw(st.booleans()), V=draw(st.integers(12, 30)),
             prompts=draw(st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=7), min_size=B, max_size=B)),
             new=draw(st.integers(1, 6)), use_cache=draw(st.booleans()), seed=draw(st.integers(0, 2**16)))
    # two layers of heads of size 4, each family's default activation, norm and feed-forward
    gpt2, llama = dict(F=None, act="gelu_new", eps=1e-5), dict(C=4 * H, F=20, act="silu", eps=1e-6, bias=False)
    return dict(c, layers=2, D=4, **(gpt2 if family == "gpt2" else llama))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(case())
def test_greedy_generate_of_a_padded_batch_matches_transformers_prompt_by_prompt(c):
    hf, ours = random_hf_causal_lm(c)
    got = generate(ours, c["prompts"], max_new_tokens=c["new"], use_cache=c["use_cache"])
    for prompt, tokens in zip(c["prompts"], got):
        ids = torch.tensor([prompt])
        want = []
        with torch.no_grad():
            for _ in range(c["new"]):
                nxt = int(hf(input_ids=ids).logits[0, -1].argmax())
                want.append(nxt)
                ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
        assert tokens == want, (prompt, tokens, want)
