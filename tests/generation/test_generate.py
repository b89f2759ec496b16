"""``generate`` on real tiny GPTs (GPT-2 style and Llama style with GQA + RoPE).

Every comparison here is between two decoding paths of the same random model: the tokens must be
identical (float differences between the paths are ~1e-6, far below the gaps between logits).
"""

import pytest
import torch

from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.generation import generate
from attnkit.generation.generate import left_pad, position_ids_from_padding

SAMPLING = [
    dict(temperature=0.7),
    dict(top_k=5),
    dict(top_p=0.8),
    dict(temperature=1.3, top_k=12, top_p=0.9, repetition_penalty=1.3),
]


def varied(outputs):
    """Guard against vacuous comparisons: the outputs must not be one token repeated."""
    return len({t for o in outputs for t in o}) > 4


# ---- cache vs no cache ------------------------------------------------------------------------------
def _greedy_last_window(model, prompt: list[list[int]], n: int, *, window: int) -> list[int]:
    """nanoGPT's way past the context: ``n`` argmax tokens, each from the last ``window`` tokens (no cache)."""
    idx = torch.tensor(prompt)  # (1, T)
    with torch.no_grad():
        for _ in range(n):
            logits = model(idx[:, -window:])
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return idx[0, len(prompt[0]):].tolist()


def test_cached_equals_uncached_greedy(gpt, prompts):
    cached = generate(gpt, prompts, max_new_tokens=12, use_cache=True)
    uncached = generate(gpt, prompts, max_new_tokens=12, use_cache=False)
    assert cached == uncached
    assert [len(o) for o in cached] == [12] * len(prompts) and varied(cached)


def test_the_cache_follows_autocast(gpt, prompts):
    """Under ``torch.autocast`` the projections give bf16 keys and values: the cache is made in bf16 too (it was made
    in the weights' float32 and refused them, while ``use_cache=False`` worked); outside it, the weights' dtype."""
    assert gpt.new_cache(2, 8)[0].k_cache.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert gpt.new_cache(2, 8)[0].k_cache.dtype == torch.bfloat16
        cached = generate(gpt, prompts, max_new_tokens=6)  # (bf16 rounding: not compared token for token)
        assert [len(o) for o in cached] == [6] * len(prompts)


@pytest.mark.parametrize("kw", SAMPLING, ids=["temperature", "top_k", "top_p", "all+penalty"])
def test_cached_equals_uncached_seeded_sampling(gpt, prompts, kw):
    cached = generate(gpt, prompts, max_new_tokens=12, do_sample=True, seed=7, use_cache=True, **kw)
    uncached = generate(gpt, prompts, max_new_tokens=12, do_sample=True, seed=7, use_cache=False, **kw)
    assert cached == uncached and varied(cached)


def test_cached_equals_uncached_greedy_with_repetition_penalty(gpt, prompts):
    kw = dict(max_new_tokens=12, repetition_penalty=1.5)
    plain = generate(gpt, prompts, max_new_tokens=12)
    penalised = generate(gpt, prompts, use_cache=True, **kw)
    assert penalised == generate(gpt, prompts, use_cache=False, **kw)
    assert penalised != plain  # the penalty changed something


# ---- batching with left padding ---------------------------------------------------------------------
@pytest.mark.parametrize("use_cache", [True, False])
def test_left_padded_batch_equals_each_prompt_alone(gpt, prompts, use_cache):
    batch = generate(gpt, prompts, max_new_tokens=8, use_cache=use_cache)
    alone = [generate(gpt, [p], max_new_tokens=8, use_cache=use_cache)[0] for p in prompts]
    assert batch == alone and varied(batch)


def test_left_pad_and_positions():
    ids, mask = left_pad([[7, 8], [1, 2, 3, 4]], pad_token_id=0)
    assert ids.tolist() == [[0, 0, 7, 8], [1, 2, 3, 4]]
    assert mask.tolist() == [[True, True, False, False], [False] * 4]
    assert position_ids_from_padding(mask).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]


def test_tensor_prompts_equal_list_prompts(gpt):
    x = torch.tensor([[3, 1, 4, 1], [5, 9, 2, 6]])
    assert generate(gpt, x, max_new_tokens=6) == generate(gpt, x.tolist(), max_new_tokens=6)


# ---- seeded sampling --------------------------------------------------------------------------------
def test_seed_reproducible_and_independent_of_global_rng(gpt, prompts):
    kw = dict(max_new_tokens=10, do_sample=True, seed=123, top_k=20)
    torch.manual_seed(0)
    a = generate(gpt, prompts, **kw)
    torch.manual_seed(999)
    torch.rand(17)
    state = torch.get_rng_state()
    b = generate(gpt, prompts, **kw)
    assert a == b
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG was not consumed
    assert generate(gpt, prompts, **{**kw, "seed": 124}) != a


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_row_that_stops_does_not_change_the_samples_of_the_others(gpt, prompts, use_cache):
    """Seeded sampling used to draw only for the rows still decoding, so when one row stopped at an EOS every other
    row's later tokens changed (and compiled decoding, which keeps finished rows, gave other tokens than eager)."""
    kw = dict(max_new_tokens=12, do_sample=True, seed=5, temperature=1.3, top_k=12, use_cache=use_cache)
    free = generate(gpt, prompts, **kw)
    eos = free[0][1]  # row 0 stops after one token; the others run on (or stop at their own eos)
    stopped = generate(gpt, prompts, eos_token_id=eos, **kw)
    assert stopped[0] == free[0][:1]
    assert stopped == [row[:row.index(eos)] if eos in row else row for row in free]
    assert varied(stopped[1:]) and sum(eos not in row for row in free) >= 2  # some rows outlive row 0


def test_unseeded_sampling_uses_global_rng(gpt, prompts):
    kw = dict(max_new_tokens=10, do_sample=True)
    torch.manual_seed(5)
    a = generate(gpt, prompts, **kw)
    torch.manual_seed(5)
    assert generate(gpt, prompts, **kw) == a


def test_top_k_1_sampling_is_greedy(gpt, prompts):
    greedy = generate(gpt, prompts, max_new_tokens=8)
    assert generate(gpt, prompts, max_new_tokens=8, do_sample=True, top_k=1, seed=3) == greedy


# ---- stopping -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("use_cache", [True, False])
def test_eos_stops_each_sequence_and_is_excluded(gpt, prompts, use_cache):
    full = generate(gpt, prompts, max_new_tokens=12)
    # an EOS id that occurs in the first output but not in the second
    eos = next(t for t in full[0][1:] if t not in full[1])
    out = generate(gpt, prompts, max_new_tokens=12, eos_token_id=eos, use_cache=use_cache)
    expected = [o[: o.index(eos)] if eos in o else o for o in full]
    assert out == expected
    assert len(out[0]) < 12 and out[1] == full[1]


def test_several_eos_ids(gpt, prompts):
    full = generate(gpt, prompts, max_new_tokens=12)
    eos = [full[0][3], full[2][5]]
    out = generate(gpt, prompts, max_new_tokens=12, eos_token_id=eos)

    def cut(o):
        hits = [i for i, t in enumerate(o) if t in eos]
        return o[: hits[0]] if hits else o

    assert out == [cut(o) for o in full]


@pytest.mark.parametrize("use_cache", [True, False])
def test_stop_strings_stop_each_sequence_and_are_included(gpt, prompts, use_cache):
    tok = CharTokenizer([chr(ord("a") + i) for i in range(26)] + [chr(ord("A") + i) for i in range(14)])  # V = 40
    full = generate(gpt, prompts, max_new_tokens=12)
    texts = [tok.decode(o) for o in full]
    stop = texts[0][4:6]  # two characters from the middle of the first output

    def cut(o):
        for n in range(1, len(o) + 1):
            if stop in tok.decode(o[:n]):
                return o[:n]
        return o

    out = generate(gpt, prompts, max_new_tokens=12, stop_strings=[stop], tokenizer=tok, use_cache=use_cache)
    assert out == [cut(o) for o in full]
    assert tok.decode(out[0]).endswith(stop) and len(out[0]) <= 6


def test_max_new_tokens_zero_returns_empty_lists(gpt, prompts):
    assert generate(gpt, prompts, max_new_tokens=0) == [[] for _ in prompts]


# ---- block size ---------------------------------------------------------------------------------------
def test_learned_positions_beyond_block_size(make_gpt):
    model = make_gpt("gpt2", seed=3, block_size=8)
    prompt = [[5, 6, 7, 8, 9, 10]]
    assert len(generate(model, prompt, max_new_tokens=3)[0]) == 3  # 6 + 3 - 1 = 8 positions: fits
    with pytest.raises(ValueError, match="block_size = 8.* or at most 3 new tokens$"):
        generate(model, prompt, max_new_tokens=4, use_cache=True)  # 9 positions with a cache: refused
    # a prompt that alone passes the block size: no number of new tokens fits (it used to say "at most -1")
    with pytest.raises(ValueError, match="block_size = 8.* or a prompt of at most 8 tokens$"):
        generate(model, [list(range(1, 11))], max_new_tokens=2)
    # without a cache the context slides, nanoGPT style: feed the last block_size tokens each step
    out = generate(model, prompt, max_new_tokens=10, use_cache=False)[0]
    assert out == _greedy_last_window(model, prompt, 10, window=8)


def test_rope_model_is_not_cropped_at_block_size(make_gpt):
    model = make_gpt("llama", seed=3, block_size=8)
    prompt = [[5, 6, 7, 8, 9, 10]]
    cached = generate(model, prompt, max_new_tokens=10, use_cache=True)
    assert cached == generate(model, prompt, max_new_tokens=10, use_cache=False)
    assert len(cached[0]) == 10


# ---- mode handling --------------------------------------------------------------------------------------
def test_runs_in_eval_mode_and_restores_training_flag(make_gpt, prompts):
    model = make_gpt("gpt2", seed=2, dropout=0.5)
    model.train()
    a = generate(model, prompts, max_new_tokens=8)
    assert model.training  # restored
    assert generate(model, prompts, max_new_tokens=8) == a  # dropout was off: deterministic
    model.eval()
    assert generate(model, prompts, max_new_tokens=8) == a
    assert not model.training


# ---- bad arguments: one test per rule -------------------------------------------------------------------
def _call(model, **kw):
    args = dict(max_new_tokens=3)
    args.update(kw)
    prompts = args.pop("prompts", [[1, 2]])
    return generate(model, prompts, **args)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(temperature=0.0, do_sample=True), "temperature"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
        (dict(max_new_tokens=-1), "max_new_tokens"),
        (dict(do_sample="yes"), "do_sample"),
        (dict(seed=1.5), "seed"),
        (dict(eos_token_id=-3), "eos_token_id"),
        (dict(stop_strings=["x"]), "tokenizer"),
        (dict(pad_token_id=40), "pad_token_id"),
        (dict(prompts=[[1, 2], []]), "empty prompt"),
        (dict(prompts=[[1, 40]]), r"\[0, 40\)"),
        (dict(prompts=[1, 2, 3]), "list of lists"),
        (dict(prompts=[]), "at least one prompt"),
        (dict(prompts=torch.tensor([1, 2, 3])), r"\(B, T\)"),
        (dict(prompts=torch.tensor([[1.0, 2.0]])), "int64"),
        (dict(prompts=[[1], [2]], streamer=object()), "batch size must be 1"),
        (dict(streamer=object()), "put"),
    ],
)
def test_bad_arguments_raise_value_error(gpt, kw, match):
    with pytest.raises(ValueError, match=match):
        _call(gpt, **kw)


def test_use_cache_needs_new_cache(gpt):
    class NoCache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = gpt

        def forward(self, idx, **kw):
            return self.inner(idx, **kw)

    with pytest.raises(ValueError, match="new_cache"):
        generate(NoCache(), [[1, 2]], max_new_tokens=2)
    assert len(generate(NoCache(), [[1, 2]], max_new_tokens=2, use_cache=False)[0]) == 2


def test_sliding_window_crops_a_rope_model_to_block_size(make_gpt):
    model = make_gpt("llama", seed=3, block_size=8)
    prompt = [[5, 6, 7, 8, 9, 10]]
    out = generate(model, prompt, max_new_tokens=10, use_cache=False, sliding_window=True)[0]
    assert out == _greedy_last_window(model, prompt, 10, window=8)


def test_nan_logits_stop_generation_instead_of_picking_id_0(make_gpt):
    model = make_gpt("gpt2", seed=1)
    with torch.no_grad():
        model.wte.weight[5] = float("nan")
    for sample in (False, True):
        with pytest.raises(FloatingPointError, match="logits hold NaN"):
            generate(model, [[1, 2], [3, 5]], max_new_tokens=2, do_sample=sample, seed=0)


@pytest.mark.parametrize("broken", ["+inf", "all -inf"])
def test_infinite_logits_stop_generation_instead_of_picking_id_0(make_gpt, monkeypatch, broken):
    """Logits no distribution comes from (a +inf one, or -inf for every token) are a broken model too: sampling used
    to crash inside torch.multinomial, greedy decoding to return id 0 for a row of -inf."""
    model = make_gpt("gpt2", seed=1)
    forward = model.forward

    def overflowing(*args, **kwargs):
        logits = forward(*args, **kwargs).clone()  # (b, T, V)
        if broken == "+inf":
            logits[1:, :, 7] = float("inf")
        else:
            logits[1:] = float("-inf")
        return logits

    monkeypatch.setattr(model, "forward", overflowing)
    for sample in (False, True):
        with pytest.raises(FloatingPointError, match=r"or are -inf for every token \(batch rows \[1\]\)"):
            generate(model, [[1, 2], [3, 5]], max_new_tokens=2, do_sample=sample, seed=0)


@pytest.mark.parametrize("do_sample", [True, False])
def test_a_tokenizer_smaller_than_the_output_layer_limits_the_ids(gpt, do_sample):
    """Was: a padded output layer (``--set vocab_size``) could give ids the tokenizer cannot decode."""
    tok = CharTokenizer([chr(ord("a") + i) for i in range(12)])  # ids 0..11 of the model's 40
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
    kw = dict(max_new_tokens=24, do_sample=do_sample, seed=3, temperature=2.0)
    unlimited = generate(gpt, prompts, **kw)
    assert max(max(o) for o in unlimited) >= 12  # the padding ids are there to be picked
    limited = generate(gpt, prompts, tokenizer=tok, **kw)
    assert max(max(o) for o in limited) < 12
    assert generate(gpt, prompts, vocab_size=12, **kw) == limited  # the same, given explicitly
    with pytest.raises(ValueError, match=r"vocab_size must be at most the model's vocab_size = 40, got 41"):
        generate(gpt, prompts, vocab_size=41, **kw)


@pytest.mark.parametrize("do_sample", [True, False])
def test_repetition_penalty_with_ids_past_the_limited_vocabulary(gpt, do_sample):
    """Was: with ``vocab_size`` below the model's (a padded output layer) and a repetition penalty, a prompt id or a
    ``pad_token_id`` at or past ``vocab_size`` crashed inside torch ("RuntimeError: index 35 is out of bounds for
    dimension 1 with size 12"). Such ids cannot be generated, so there is nothing of theirs to penalise."""
    kw = dict(max_new_tokens=6, do_sample=do_sample, seed=3, vocab_size=12, repetition_penalty=1.5)
    out = generate(gpt, [[35, 1, 2], [3]], pad_token_id=30, **kw)
    assert all(len(o) == 6 and max(o) < 12 for o in out)


def test_ids_past_the_limited_vocabulary_are_not_penalised(gpt):
    """Greedy with the penalty: the tokens of an uncached loop whose penalty sees only the ids below ``vocab_size``."""
    from attnkit.generation import processors as P

    tokens, want = [35, 1, 2], []
    with torch.no_grad():
        for _ in range(6):
            logits = gpt(torch.tensor([tokens]))[:, -1, :12].float()  # (1, 12)
            seen = torch.tensor([[t for t in tokens if t < 12]])  # (1, L')
            want.append(int(P.process_logits(logits, input_ids=seen, repetition_penalty=1.5).argmax()))
            tokens.append(want[-1])
    assert generate(gpt, [[35, 1, 2]], max_new_tokens=6, vocab_size=12, repetition_penalty=1.5) == [want]
