"""Generation, the KV cache and beam search run wherever the weights are (device and dtype).

On an accelerator (CUDA or MPS, where present) the outputs equal the CPU's token for token; on any machine,
weights in bfloat16 (``--autocast bf16`` for sampling and translation) decode with bf16 caches.
"""

from __future__ import annotations

import pytest
import torch

from attnkit.generation import GenerationConfig, beam_search, generate, greedy_search

ACCELERATORS = [d for d, ok in (("cuda", torch.cuda.is_available()), ("mps", torch.backends.mps.is_available())) if ok]
on_accelerator = pytest.mark.parametrize("device", ACCELERATORS or [pytest.param("cuda", marks=pytest.mark.skip(
    reason="needs a CUDA or MPS device"))])


@on_accelerator
def test_gpt_generation_on_the_device_equals_the_cpu(device, make_gpt, prompts):
    model = make_gpt("llama", seed=0)
    cfg = GenerationConfig(max_new_tokens=8, pad_token_id=0)
    on_cpu = generate(model, prompts, cfg)
    model.to(device)
    assert generate(model, prompts, cfg) == on_cpu
    assert generate(model, prompts, GenerationConfig(max_new_tokens=8, pad_token_id=0, use_cache=False)) == on_cpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (CUDA graphs)")
def test_compiled_decoding_replays_cuda_graphs_with_the_eager_tokens(make_gpt, prompts):
    """On CUDA ``compile=True`` records each (B, S) step as a CUDA graph (reduce-overhead): the tokens equal eager
    decoding's, the logits handed back survive the next step, and a second call replays the same graphs."""
    from attnkit.generation.compiled import compiled_step

    model = make_gpt("gpt2", seed=0).to("cuda")
    eager = generate(model, prompts, GenerationConfig(max_new_tokens=12, pad_token_id=0))
    cfg = GenerationConfig(max_new_tokens=12, pad_token_id=0, compile=True)
    assert generate(model, prompts, cfg) == eager
    assert generate(model, prompts, cfg) == eager  # replayed
    cache = model.new_cache(1, 32)
    step = [torch.tensor([[3]], device="cuda"), None, torch.tensor([[0]], device="cuda"), cache]
    first = compiled_step(model, *step, torch.tensor([0], device="cuda"))
    kept = first.clone()
    compiled_step(model, torch.tensor([[5]], device="cuda"), None, torch.tensor([[1]], device="cuda"), cache,
                  torch.tensor([1], device="cuda"))
    assert torch.equal(first, kept)  # a copy, not the graph's output buffer


@on_accelerator
def test_seq2seq_greedy_and_beam_on_the_device_equal_the_cpu(device, make_transformer, make_sources, mt_ids):
    model = make_transformer(seed=0, eos_bias=4.0)
    src = make_sources([5, 9, 3], seed=0)
    kw = dict(bos_id=mt_ids.bos, eos_id=mt_ids.eos, pad_id=mt_ids.pad, max_len_a=1.0, max_len_b=3)
    greedy, beam = greedy_search(model, src, **kw), beam_search(model, src, beam_size=3, **kw)
    model.to(device)
    assert greedy_search(model, src.to(device), **kw) == greedy
    assert beam_search(model, src.to(device), beam_size=3, **kw) == beam


def test_bf16_weights_decode_with_bf16_caches(make_gpt, make_transformer, make_sources, mt_ids, prompts):
    model = make_gpt("gpt2", seed=0).to(torch.bfloat16)
    out = generate(model, prompts, GenerationConfig(max_new_tokens=6, pad_token_id=0))
    assert [len(o) for o in out] == [6] * len(prompts)
    assert all(c.k_cache.dtype == torch.bfloat16 for c in model.new_cache(1, 8).layers)
    mt = make_transformer(seed=0, eos_bias=4.0).to(torch.bfloat16)
    src = make_sources([5, 3], seed=0)
    kw = dict(bos_id=mt_ids.bos, eos_id=mt_ids.eos, pad_id=mt_ids.pad, max_len_a=1.0, max_len_b=3)
    assert len(beam_search(mt, src, beam_size=2, **kw)) == 2
