"""``generate(..., compile=True)``: the compiled fixed-shape decoding step gives the eager path's tokens.

Each new (model structure, batch size, cache length) compiles once (a few seconds for these tiny models);
the tests reuse shapes where they can.
"""

import importlib

import pytest
import torch

from attnkit.generation import generate
from attnkit.generation.compiled import compiled_step
from attnkit.modules.quantized_linear import quantize_linear_layers
from helpers import assert_close



def varied(outputs):
    return len({t for o in outputs for t in o}) > 4


def test_compiled_step_logits_equal_eager_forward(make_gpt):
    """One step through the compiled function against GPT.forward with the usual growing cache."""
    model = make_gpt("llama", seed=3)
    idx = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        eager_cache, compiled_cache = model.new_cache(2, 16), model.new_cache(2, 16)
        model(idx[:, :6], cache=eager_cache)
        model(idx[:, :6], cache=compiled_cache)
        for t in range(6, 9):
            expected = model(idx[:, t:t + 1], cache=eager_cache)[:, -1]  # (B, V)
            got = compiled_step(model, idx[:, t:t + 1].clone(), None, torch.full((2, 1), t), compiled_cache,
                                torch.tensor([t]))
            assert_close(got, expected, "float32")


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_compiled_equals_eager_greedy_with_padding_and_eos(make_gpt, prompts, kind, monkeypatch):
    """Left-padded prompts of different lengths, and an EOS that ends rows at different steps (finished
    rows stay in the compiled batch; their tokens must be ignored)."""
    gen = importlib.import_module("attnkit.generation.generate")  # (the package name `generate` is the function)

    model = make_gpt(kind, seed=1)
    full = generate(model, prompts, max_new_tokens=12)
    eos = next(t for t in full[0][1:] if t not in full[1])
    eager = generate(model, prompts, max_new_tokens=12, eos_token_id=eos)
    calls = []
    monkeypatch.setattr(gen, "compiled_step", lambda *a: calls.append(1) or compiled_step(*a))
    compiled = generate(model, prompts, max_new_tokens=12, eos_token_id=eos, compile=True)
    assert compiled == eager and varied(eager)
    assert len(calls) >= max(len(o) for o in eager) - 1  # every step after the prefill went through it
    assert len({len(o) for o in eager}) > 1  # rows really stopped at different points


def test_compiled_equals_eager_seeded_sampling(make_gpt, prompts):
    model = make_gpt("gpt2", seed=1)
    kw = dict(max_new_tokens=12, do_sample=True, seed=5, temperature=1.3, top_k=12, min_p=0.1, repetition_penalty=1.2)
    eager = generate(model, prompts, **kw)
    assert generate(model, prompts, compile=True, **kw) == eager and varied(eager)
    # a row that stops early: eager decoding drops it, compiled keeps it; the others' samples used to differ
    kw["eos_token_id"] = eager[0][1]
    eager = generate(model, prompts, **kw)
    assert len(eager[0]) == 1 and generate(model, prompts, compile=True, **kw) == eager


def test_compile_argument_checks(make_gpt, prompts):
    model = make_gpt("gpt2", seed=1)
    with pytest.raises(ValueError, match="compile=True needs use_cache=True"):
        generate(model, prompts, max_new_tokens=3, compile=True, use_cache=False)
    with pytest.raises(ValueError, match="compile must be a bool"):
        generate(model, prompts, max_new_tokens=3, compile="yes")


def test_compile_rejects_fbgemm_int8_layers(make_gpt, prompts):
    model = make_gpt("gpt2", seed=1)
    quantize_linear_layers(model, mode="two_digit")
    with pytest.raises(ValueError, match="cannot trace int8 mode 'two_digit'"):
        generate(model, prompts, max_new_tokens=3, compile=True)


def test_compile_rejects_models_without_cache_position(make_gpt, prompts):
    inner = make_gpt("gpt2", seed=1)

    class Wrapped(torch.nn.Module):  # a model with the generation interface but no cache_position
        def __init__(self):
            super().__init__()
            self.inner, self.config = inner, inner.config

        def forward(self, idx, *, key_padding_mask=None, position_ids=None, cache=None):
            return self.inner(idx, key_padding_mask=key_padding_mask, position_ids=position_ids, cache=cache)

        def new_cache(self, batch_size, max_len=None):
            return self.inner.new_cache(batch_size, max_len)

    assert generate(Wrapped(), prompts, max_new_tokens=3) == generate(inner, prompts, max_new_tokens=3)
    with pytest.raises(ValueError, match="forward takes cache_position"):
        generate(Wrapped(), prompts, max_new_tokens=3, compile=True)


def test_the_cuda_graph_way_gives_the_eager_tokens(make_gpt, prompts, monkeypatch):
    """The way a CUDA device decodes (``mode="reduce-overhead"``, the cache's buffers marked static, each step's
    logits copied out), taken on the CPU, where inductor records no graph: the same tokens as eager decoding, and
    the buffers are marked once per cache."""
    compiled = importlib.import_module("attnkit.generation.compiled")
    monkeypatch.setattr(compiled, "uses_cuda_graphs", lambda device: True)
    marked = []
    monkeypatch.setattr(torch._dynamo, "mark_static_address", lambda t, *a, **k: marked.append(t.data_ptr()))
    model = make_gpt("gpt2", seed=4)
    eager = generate(model, prompts, max_new_tokens=6, pad_token_id=0)
    assert generate(model, prompts, max_new_tokens=6, pad_token_id=0, compile=True) == eager
    assert len(marked) == len(set(marked)) == 2 * model.config.n_layer  # k and v of every layer, once


def test_a_compiled_step_reads_one_thing_back_from_the_device(make_gpt, monkeypatch):
    """Each decoding step reads the picked ids once (``tolist``) and nothing else: no ``bool()`` / ``item()`` of a
    tensor a step (on a GPU each read is a wait for the device), counted as the reads of a longer and a shorter
    run differ. The NaN check rides on the ids (-1), padding and positions are read from the prompt once."""
    model = make_gpt("gpt2", seed=5)
    prompts = [[1, 2, 3], [4, 5]]  # padded
    generate(model, prompts, max_new_tokens=10, compile=True, pad_token_id=0)  # compiled before counting
    counts = {"__bool__": 0, "item": 0, "tolist": 0}

    def counting(name):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            counts[name] += 1
            return original(self, *args, **kwargs)
        return read
    for name in counts:
        monkeypatch.setattr(torch.Tensor, name, counting(name))
    per_run = []
    for new in (4, 10):
        counts.update({name: 0 for name in counts})
        generate(model, prompts, max_new_tokens=new, compile=True, pad_token_id=0)
        per_run.append(dict(counts))
    short, long = per_run
    assert long["tolist"] - short["tolist"] == 6  # one read of the ids a step
    assert long["__bool__"] == short["__bool__"] and long["item"] == short["item"]  # nothing else a step


def test_compiled_decoding_runs_one_step_ahead_of_its_reads(make_gpt, prompts, monkeypatch):
    """The compiled loop hands step n + 1 to the device before it reads step n's ids: the same tokens and stream,
    one step thrown away when every row stops early (none at max_new_tokens), and NaN logits still raise as such
    (the step ahead is fed a valid id, not the -1 that marks them)."""
    gen = importlib.import_module("attnkit.generation.generate")
    model = make_gpt("gpt2", seed=1)
    calls = []
    monkeypatch.setattr(gen, "compiled_step", lambda *a: calls.append(1) or compiled_step(*a))
    assert generate(model, [[1, 2, 3]], max_new_tokens=8, compile=True) == generate(model, [[1, 2, 3]],
                                                                                    max_new_tokens=8)
    assert len(calls) == 7  # tokens 2..8 after the prefill: nothing ahead of the last
    full = generate(model, [[1, 2, 3]], max_new_tokens=12)[0]
    k = next(i for i in range(2, 11) if full[i] not in full[:i])
    eos = full[k]  # ends the row at its token k + 1 (EOS itself is not returned)
    calls.clear()

    class Recorder:
        def __init__(self):
            self.ids, self.ended = [], False

        def put(self, ids):
            self.ids += ids

        def end(self):
            self.ended = True
    streamed = Recorder()
    out = generate(model, [[1, 2, 3]], max_new_tokens=12, eos_token_id=eos, compile=True, streamer=streamed)[0]
    assert out == generate(model, [[1, 2, 3]], max_new_tokens=12, eos_token_id=eos)[0] and len(out) < 12
    assert streamed.ids[:len(out)] == out and streamed.ended
    assert len(out) == k and len(calls) == k + 1  # the steps of tokens 2..k + 1, and one ahead that nothing reads
    with torch.no_grad():
        model.wte.weight[5] = float("nan")
    with pytest.raises(FloatingPointError, match="logits hold NaN"):
        generate(model, [[1, 2], [3, 5]], max_new_tokens=4, compile=True)


def test_compiled_equals_eager_with_sinusoidal_positions(prompts):
    """Sinusoidal positions read their table inside the compiled step: it is sized for the cache before compiling
    (here past block_size, so the table must grow first), and no position is read back to the host."""
    import helpers
    from attnkit.models.gpt import GPT

    torch.manual_seed(2)
    model = helpers.spread_weights(GPT(helpers.tiny_gpt_config("gpt2", vocab_size=40, block_size=16,
                                                               position="sinusoidal")),
                                   std=0.3, seed=2, matrices_only=True).eval()
    assert model.wpe.pe.shape[0] == 16
    eager = generate(model, prompts, max_new_tokens=20)
    assert generate(model, prompts, max_new_tokens=20, compile=True) == eager and varied(eager)
    assert model.wpe.pe.shape[0] >= 32  # (6 + 20 - 1 slots, rounded up to 32)


def test_compiled_equals_eager_with_rope_past_block_size(prompts):
    """RoPE reads its cos/sin tables inside the compiled step too: they are sized for every cache slot before
    compiling (here past block_size; the eager path grows them as it goes)."""
    import helpers
    from attnkit.models.gpt import GPT

    def fresh():  # the same weights, with tables of block_size rows
        torch.manual_seed(2)
        return helpers.spread_weights(GPT(helpers.tiny_gpt_config("llama", vocab_size=40, block_size=8)),
                                      std=0.3, seed=2, matrices_only=True).eval()

    eager = generate(fresh(), prompts, max_new_tokens=20)
    model = fresh()
    assert model.rotary.cos_cached.shape[0] == 8
    assert generate(model, prompts, max_new_tokens=20, compile=True) == eager and varied(eager)
    assert model.rotary.cos_cached.shape[0] >= 32  # (6 + 20 - 1 slots, rounded up to 32)
