"""One-at-a-time optimisation levers (predictions and results: ``docs/experiments/cpu_speed.md``).

Axis legend: ``B`` batch, ``T`` length, ``C`` width, ``H`` heads, ``D`` head dim, ``V`` vocabulary, ``L`` cache length.

Each lever is a small A/B (or A/B/C) comparison with everything else fixed, run through the same
alternating-rounds harness as the main benchmarks. Shapes are the LM benchmark's (L6 H6 C384 T256 B8)
or GPT-2-small's for decoding levers.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, replace

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.modules.chunked_cross_entropy import chunked_cross_entropy
from attnkit.modules.masks import causal_mask
from attnkit.modules.multi_head_attention import MultiHeadAttention
from attnkit.modules.quantized_linear import QuantizedLinear

from .bench_lm import LMSizes, attnkit_gpt, make_optimizer, training_step_fn
from .common import BenchResult, ratio, run_impls, seeded
from .harness import Impl


class SeparateQKV(nn.Module):
    """Multi-head self-attention with three separate q/k/v Linears (the unfused lever baseline).

    Shape:
        x ``(B, T, C)`` -> ``(B, T, C)``.
    """

    def __init__(self, fused: MultiHeadAttention):
        super().__init__()
        C, H = fused.embed_dim, fused.num_heads
        self.H, self.D = H, fused.head_dim
        w = fused.qkv_proj.weight.detach().split(C, 0)
        b = fused.qkv_proj.bias.detach().split(C, 0)
        self.q, self.k, self.v = (nn.Linear(C, C) for _ in range(3))
        for lin, wi, bi in zip((self.q, self.k, self.v), w, b):
            lin.weight.data.copy_(wi)
            lin.bias.data.copy_(bi)
        self.out_proj = copy.deepcopy(fused.out_proj)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (lin(x).view(B, T, self.H, self.D).transpose(1, 2) for lin in (self.q, self.k, self.v))  # (B, H, T, D)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        return self.out_proj(y.transpose(1, 2).reshape(B, T, C))


def _fwd_bwd_module(mod, x, reps):
    def run():
        for _ in range(reps):
            mod.zero_grad(set_to_none=True)
            mod(x).sum().backward()
        return float(x.shape[0] * x.shape[1] * reps)

    return run


def lever_fused_qkv(s: LMSizes, rounds, warmup, progress):
    res = BenchResult("lever_fused_qkv", "Lever: fused QKV projection (MHA fwd+bwd, LM shape)", asdict(s))
    mha = MultiHeadAttention(s.n_embd, s.n_head)
    sep = SeparateQKV(mha)
    x = torch.randn(s.batch_size, s.block_size, s.n_embd, generator=seeded(3))
    fused = lambda x: mha(x, is_causal=True)[0]  # noqa: E731
    with torch.no_grad():
        torch.testing.assert_close(fused(x), sep(x), atol=1e-5, rtol=1e-5)  # same function
    m = run_impls(res, [Impl("fused qkv_proj", _fwd_bwd_module(_Wrap(fused, mha), x, 5)),
                        Impl("separate q/k/v", _fwd_bwd_module(sep, x, 5))], rounds=rounds, warmup=warmup,
                  progress=progress)
    res.ratios["fused / separate"] = ratio(m, "fused qkv_proj", "separate q/k/v")
    return res


class _Wrap(nn.Module):
    def __init__(self, fn, owner):
        super().__init__()
        self.fn, self.owner = fn, owner

    def forward(self, x):
        return self.fn(x)


def lever_is_causal(s: LMSizes, rounds, warmup, progress):
    res = BenchResult("lever_is_causal", "Lever: SDPA is_causal vs a materialized causal mask (fwd+bwd)", asdict(s))
    D = s.n_embd // s.n_head
    g = seeded(4)
    shape = (s.batch_size, s.n_head, s.block_size, D)
    q, k, v = (torch.randn(shape, generator=g).requires_grad_() for _ in range(3))
    allowed = ~causal_mask(s.block_size)  # torch's convention: True = may attend
    additive = torch.zeros(s.block_size, s.block_size).masked_fill_(~allowed, float("-inf"))

    def make(kw):
        def run():
            for _ in range(5):
                q.grad = k.grad = v.grad = None
                F.scaled_dot_product_attention(q, k, v, **kw).sum().backward()
            return 5.0 * s.batch_size * s.block_size
        return run

    m = run_impls(res, [Impl("is_causal=True", make({"is_causal": True})),
                        Impl("bool mask", make({"attn_mask": allowed})),
                        Impl("float mask", make({"attn_mask": additive}))], rounds=rounds, warmup=warmup,
                  progress=progress)
    res.ratios["is_causal / bool mask"] = ratio(m, "is_causal=True", "bool mask")
    res.ratios["is_causal / float mask"] = ratio(m, "is_causal=True", "float mask")
    return res


def lever_adamw(s: LMSizes, rounds, warmup, progress):
    res = BenchResult("lever_adamw", "Lever: AdamW for-loop vs foreach vs fused (LM training step)", asdict(s))
    x = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), generator=seeded(5))
    y = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), generator=seeded(6))
    impls = []
    for kind in ("plain", "foreach", "fused"):
        torch.manual_seed(0)
        model = attnkit_gpt(s).train()
        impls.append(Impl(f"AdamW {kind}", training_step_fn(model, make_optimizer(model.parameters(), kind, s.lr), x, y,
                                                             s.steps_per_round, lambda m_, i: m_(i))))
    m = run_impls(res, impls, rounds=rounds, warmup=warmup, progress=progress)
    res.ratios["fused / plain"] = ratio(m, "AdamW fused", "AdamW plain")
    res.ratios["foreach / plain"] = ratio(m, "AdamW foreach", "AdamW plain")
    return res


def _lm_training_step(s: LMSizes):
    """The LM benchmark's GPT in training mode, a step function (forward, backward, ``s.optimizer``) over one seeded
    batch, and that batch ``x``, ``y`` ``(B, T)``."""
    x = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), generator=seeded(5))
    y = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), generator=seeded(6))
    torch.manual_seed(0)
    model = attnkit_gpt(s).train()
    step = training_step_fn(model, make_optimizer(model.parameters(), s.optimizer, s.lr), x, y, s.steps_per_round,
                            lambda m_, i: m_(i))
    return model, step, x, y


def lever_threads(s: LMSizes, rounds, warmup, progress):
    res = BenchResult("lever_threads", "Lever: torch threads 1 vs 2 (LM training step)", asdict(s))
    _, step, _, _ = _lm_training_step(s)
    before = torch.get_num_threads()

    def with_threads(n):
        def run():
            torch.set_num_threads(n)
            try:
                return step()
            finally:
                torch.set_num_threads(before)
        return run

    m = run_impls(res, [Impl("2 threads", with_threads(2)), Impl("1 thread", with_threads(1))], rounds=rounds,
                  warmup=warmup, progress=progress)
    res.ratios["2 threads / 1 thread"] = ratio(m, "2 threads", "1 thread")
    return res


def lever_compile(s: LMSizes, rounds, warmup, progress):
    res = BenchResult("lever_compile", "Lever: torch.compile of the GPT (LM training step; compile time = first call)",
                      asdict(s))
    x = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), generator=seeded(5))
    y = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), generator=seeded(6))
    torch.manual_seed(0)
    eager = attnkit_gpt(s).train()
    torch.manual_seed(0)
    comp_model = attnkit_gpt(s).train()
    compiled = torch.compile(comp_model)
    m = run_impls(res, [
        Impl("eager", training_step_fn(eager, make_optimizer(eager.parameters(), s.optimizer, s.lr), x, y,
                                       s.steps_per_round, lambda m_, i: m_(i))),
        Impl("torch.compile", training_step_fn(comp_model, make_optimizer(comp_model.parameters(), s.optimizer, s.lr),
                                               x, y, s.steps_per_round, lambda m_, i: compiled(i))),
    ], rounds=rounds, warmup=max(warmup, 1), progress=progress)
    res.ratios["compile / eager"] = ratio(m, "torch.compile", "eager")
    return res


def lever_kv_cache(rounds, warmup, progress, *, C=768, H=12, layers=12, steps=128, quick=False):
    """Decoding-loop attention with a preallocated cache vs growing k/v with torch.cat (GPT-2-small shapes)."""
    if quick:
        C, H, layers, steps = 64, 2, 2, 8
    res = BenchResult("lever_kv_cache", "Lever: preallocated KV cache vs torch.cat (decode loop, attention only)",
                      {"C": C, "H": H, "layers": layers, "steps": steps})
    mhas = [MultiHeadAttention(C, H).eval() for _ in range(layers)]
    xs = torch.randn(steps, 1, 1, C, generator=seeded(7))

    @torch.no_grad()
    def prealloc():
        caches = [m.new_cache(1, steps) for m in mhas]
        for t in range(steps):
            h = xs[t]
            for m, c in zip(mhas, caches):
                h = m(h, is_causal=True, kv_cache=c)[0]
        return float(steps)

    @torch.no_grad()
    def concat():
        ks = [None] * layers
        vs = [None] * layers
        for t in range(steps):
            h = xs[t]
            for i, m in enumerate(mhas):
                q, k, v = m.qkv_proj(h).split(C, -1)
                q, k, v = (z.view(1, 1, H, C // H).transpose(1, 2) for z in (q, k, v))  # (1, H, 1, D)
                ks[i] = k if ks[i] is None else torch.cat([ks[i], k], dim=2)  # (1, H, t+1, D): a full copy
                vs[i] = v if vs[i] is None else torch.cat([vs[i], v], dim=2)
                y = F.scaled_dot_product_attention(q, ks[i], vs[i])
                h = m.out_proj(y.transpose(1, 2).reshape(1, 1, C))
        return float(steps)

    m = run_impls(res, [Impl("preallocated KVCache", prealloc), Impl("torch.cat cache", concat)], rounds=rounds,
                  warmup=warmup, progress=progress)
    res.ratios["preallocated / cat"] = ratio(m, "preallocated KVCache", "torch.cat cache")
    return res


def lever_int8_modes(rounds, warmup, progress, *, quick=False):
    """One GPT-2-small MLP + head worth of matrices at batch 1: fp32 vs int8 dynamic vs int8 weight-only."""
    shapes = [(3072, 768), (768, 3072), (2304, 768), (768, 768)] * 1 + [(50257, 768)]
    if quick:
        shapes = [(64, 32), (32, 64)]
    res = BenchResult("lever_int8", "Lever: int8 dynamic vs int8 weight-only vs fp32 (batch-1 matvecs)",
                      {"shapes": shapes})
    lins = [nn.Linear(k, n) for n, k in shapes]
    xs = [torch.randn(1, k, generator=seeded(8)) for n, k in shapes]
    variants = {"fp32": lins,
                "int8 dynamic": [QuantizedLinear.from_linear(l, mode="dynamic") for l in lins],
                "int8 weight_only": [QuantizedLinear.from_linear(l, mode="weight_only") for l in lins]}

    def make(mods):
        @torch.no_grad()
        def run():
            for _ in range(10):
                for mod, x in zip(mods, xs):
                    mod(x)
            return 10.0
        return run

    m = run_impls(res, [Impl(k, make(v), unit="passes") for k, v in variants.items()], rounds=rounds, warmup=warmup,
                  progress=progress)
    res.ratios["int8 dynamic / fp32"] = ratio(m, "int8 dynamic", "fp32")
    res.ratios["int8 weight_only / fp32"] = ratio(m, "int8 weight_only", "fp32")
    return res


def lever_head_merge(s: LMSizes, rounds, warmup, progress):
    """Merging heads: transpose+reshape (one copy) vs einsum into the output projection (no explicit copy)."""
    res = BenchResult("lever_head_merge", "Lever: head merge copy vs folding it into out_proj (fwd+bwd)", asdict(s))
    D = s.n_embd // s.n_head
    g = seeded(9)
    y = torch.randn(s.batch_size, s.n_head, s.block_size, D, generator=g).requires_grad_()
    lin = nn.Linear(s.n_embd, s.n_embd)
    w_heads = lin.weight.detach().view(s.n_embd, s.n_head, D).clone().requires_grad_()  # (C_out, H, D)

    def merged():
        for _ in range(10):
            y.grad = None
            out = lin(y.transpose(1, 2).reshape(s.batch_size, s.block_size, s.n_embd))
            out.sum().backward()
        return 10.0 * s.batch_size * s.block_size

    def folded():
        for _ in range(10):
            y.grad = None
            out = torch.einsum("bhtd,ohd->bto", y, w_heads) + lin.bias
            out.sum().backward()
        return 10.0 * s.batch_size * s.block_size

    m = run_impls(res, [Impl("transpose+reshape+Linear", merged), Impl("einsum into out_proj", folded)], rounds=rounds,
                  warmup=warmup, progress=progress)
    res.ratios["reshape / einsum"] = ratio(m, "transpose+reshape+Linear", "einsum into out_proj")
    return res


def lever_last_logits(rounds, warmup, progress, *, quick=False):
    """Prefill of a 16-token prompt on GPT-2 small: head on all positions (as GPT.forward) vs the last only."""
    V, C, T = (50257, 768, 16) if not quick else (500, 64, 4)
    res = BenchResult("lever_last_logits", "Lever: LM head on every prompt position vs the last one only (prefill)",
                      {"V": V, "C": C, "T": T})
    head = nn.Linear(C, V, bias=False)
    h = torch.randn(1, T, C, generator=seeded(10))

    @torch.no_grad()
    def all_positions():
        for _ in range(10):
            head(h)[:, -1]
        return 10.0

    @torch.no_grad()
    def last_only():
        for _ in range(10):
            head(h[:, -1:])[:, -1]
        return 10.0

    m = run_impls(res, [Impl("all positions", all_positions, unit="calls"), Impl("last position", last_only, unit="calls")],
                  rounds=rounds, warmup=warmup, progress=progress)
    res.ratios["last / all"] = ratio(m, "last position", "all positions")
    return res


def lever_no_pad_mask(rounds, warmup, progress, *, quick=False):
    """An all-False key padding mask (nothing padded) given to SDPA vs no mask (seq2seq shapes, fwd+bwd)."""
    B, H, T, D = (16, 8, 32, 32) if not quick else (2, 2, 8, 8)
    res = BenchResult("lever_no_pad_mask", "Lever: drop an all-False padding mask before SDPA (fwd+bwd)",
                      {"B": B, "H": H, "T": T, "D": D})
    g = seeded(11)
    q, k, v = (torch.randn(B, H, T, D, generator=g).requires_grad_() for _ in range(3))
    may_attend = torch.ones(B, 1, 1, T, dtype=torch.bool)  # torch convention: True = may attend

    def make(kw):
        def run():
            for _ in range(20):
                q.grad = k.grad = v.grad = None
                F.scaled_dot_product_attention(q, k, v, **kw).sum().backward()
            return 20.0 * B * T
        return run

    m = run_impls(res, [Impl("no mask", make({})), Impl("all-False padding mask", make({"attn_mask": may_attend}))],
                  rounds=rounds, warmup=warmup, progress=progress)
    res.ratios["no mask / mask"] = ratio(m, "no mask", "all-False padding mask")
    return res


def lever_decode_layout(rounds, warmup, progress, *, quick=False):
    """Greedy decoding of a GPT-2-small-shaped model with nn.Linear's row-major weights vs the decoding layout."""
    from attnkit.generation import generate, use_decoding_layout
    from attnkit.models.configs import GPTConfig
    from attnkit.models.gpt import GPT

    cfg = (GPTConfig(vocab_size=512, block_size=64, n_layer=2, n_head=2, n_embd=64) if quick else
           GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768))
    steps = 8 if quick else 64
    res = BenchResult("lever_decode_layout", "Lever: Linear weight layout for decoding (row-major vs use_decoding_layout)",
                      {"n_layer": cfg.n_layer, "n_embd": cfg.n_embd, "vocab_size": cfg.vocab_size,
                       "prompt_len": 16, "new_tokens": steps})
    torch.manual_seed(0)
    row_major = GPT(cfg).eval()
    transposed = GPT(cfg).eval()
    transposed.load_state_dict(row_major.state_dict())
    use_decoding_layout(transposed)
    prompt = torch.randint(0, cfg.vocab_size, (16,), generator=seeded(3)).tolist()

    def run(model):
        return lambda: float(len(generate(model, [prompt], max_new_tokens=steps)[0]))

    m = run_impls(res, [Impl("row-major (nn.Linear)", run(row_major)), Impl("decoding layout", run(transposed))],
                  rounds=rounds, warmup=warmup, progress=progress)
    res.ratios["decoding layout / row-major"] = ratio(m, "decoding layout", "row-major (nn.Linear)")
    return res


def _lm_loss(model, x, y, chunks: int = 0):
    """The LM loss of ``model`` on ``x``, ``y`` ``(B, T)``: plain cross-entropy, or the chunked one over ``chunks``
    chunks (``--loss-chunks``)."""
    if chunks:
        return model(x, output_fn=lambda h, head: chunked_cross_entropy(h, head, y, chunks=chunks))
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


def _kept_bytes(model, x, y, chunks: int = 0) -> int:
    """Bytes the autograd graph of one training forward pass keeps for the backward pass: every distinct storage
    packed by ``saved_tensors_hooks``, plus what the checkpoints keep outside the hooks' view (counted whole even
    where the graph shares it: an upper bound): with activation checkpointing each block's input ``(B, T, C)``,
    with the chunked loss the head's input."""
    seen: dict[int, int] = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = _lm_loss(model, x, y, chunks)
    hidden = x.numel() * model.config.n_embd * 4
    outside = (len(model.blocks) if model.activation_checkpointing else 0) * hidden + (hidden if chunks else 0)
    del loss
    return sum(seen.values()) + outside


_PEAK_RSS = """
import json, sys, torch
from benchmarks.bench_levers import _lm_loss
from benchmarks.bench_lm import LMSizes, attnkit_gpt
s, on, chunks = LMSizes(**json.loads(sys.argv[1])), sys.argv[2] == "1", int(sys.argv[3])
torch.manual_seed(0)
model = attnkit_gpt(s).train()
model.enable_activation_checkpointing(on)
g = torch.Generator().manual_seed(5)
x = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), generator=g)
y = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), generator=g)
def hwm():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) * 1024
def loss(x, y):
    return _lm_loss(model, x, y, chunks)
loss(x[:1, :8], y[:1, :8]).backward()  # load the kernels first
model.zero_grad(set_to_none=False)  # the gradients' memory is held before the step is measured
before = hwm()
loss(x, y).backward()
print(hwm() - before)
"""


def _peak_rss_growth(s: LMSizes, on: bool, chunks: int = 0, *, mmap_all: bool = False) -> int | None:
    """How far one training step (forward + backward; activation checkpointing ``on``, the loss over ``chunks``
    chunks or plain with 0) raises the peak resident memory of a fresh process (``VmHWM`` of
    ``/proc/self/status``, Linux only; None elsewhere). ``mmap_all``: glibc serves every allocation above 64 KiB by
    ``mmap`` and returns it at once (``MALLOC_MMAP_THRESHOLD_``, as the harness's memory pass), so that a freed
    temporary is not kept in the heap (with its default thresholds, chunks of a few tens of MiB freed and made again
    fragment the heap, and the peak counts them several times)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    if not Path("/proc/self/status").exists():
        return None
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0") if mmap_all else None
    out = subprocess.run([sys.executable, "-c", _PEAK_RSS, json.dumps(asdict(s)), "1" if on else "0", str(chunks)],
                         cwd=root, capture_output=True, text=True, check=True, env=env)
    return int(out.stdout.split()[-1])


def lever_activation_checkpointing(s: LMSizes, rounds, warmup, progress):
    res = BenchResult("lever_activation_checkpointing",
                      "Lever: activation checkpointing (LM training step: time, kept activations, peak RSS)",
                      asdict(s))
    model, step, x, y = _lm_training_step(s)

    def with_checkpointing(on):
        def run():
            model.enable_activation_checkpointing(on)
            return step()
        return run

    m = run_impls(res, [Impl("checkpointed", with_checkpointing(True)), Impl("plain", with_checkpointing(False))],
                  rounds=rounds, warmup=warmup, progress=progress)
    res.ratios["checkpointed / plain (tokens/s)"] = ratio(m, "checkpointed", "plain")
    for name, on in (("checkpointed", True), ("plain", False)):
        model.enable_activation_checkpointing(on)
        res.extra[f"{name} kept activation MiB"] = _kept_bytes(model, x, y) / 2**20
        rss = _peak_rss_growth(s, on)
        res.extra[f"{name} peak RSS growth MiB"] = None if rss is None else rss / 2**20
    model.zero_grad(set_to_none=True)
    return res


CHUNKS = 8  # the chunked loss's row chunks in lever_chunked_loss


def lever_chunked_loss(s: LMSizes, rounds, warmup, progress, *, quick: bool = False):
    """The chunked cross-entropy (``--loss-chunks``) against the plain loss, each with and without activation
    checkpointing, for a GPT with the GPT-2 tokenizer's vocabulary (50,257), where the logits dominate memory."""
    big = (replace(s, vocab_size=50257) if quick else
           LMSizes(n_layer=2, n_head=4, n_embd=256, block_size=256, batch_size=4, vocab_size=50257, steps_per_round=1))
    res = BenchResult("lever_chunked_loss", f"Lever: chunked cross-entropy, {CHUNKS} chunks (LM training step with a "
                      f"50,257 vocabulary: time, kept tensors, peak RSS)", asdict(big))
    x = torch.randint(0, big.vocab_size, (big.batch_size, big.block_size), generator=seeded(5))
    y = torch.randint(0, big.vocab_size, (big.batch_size, big.block_size), generator=seeded(6))
    torch.manual_seed(0)
    model = attnkit_gpt(big).train()
    opt = make_optimizer(model.parameters(), big.optimizer, big.lr)

    def step(on, chunks):
        def run():
            model.enable_activation_checkpointing(on)
            for _ in range(big.steps_per_round):
                opt.zero_grad(set_to_none=True)
                _lm_loss(model, x, y, chunks).backward()
                opt.step()
            return float(x.numel() * big.steps_per_round)
        return run

    variants = {"plain": (False, 0), "chunked": (False, CHUNKS), "checkpointed": (True, 0),
                "checkpointed + chunked": (True, CHUNKS)}
    m = run_impls(res, [Impl(name, step(*how)) for name, how in variants.items()], rounds=rounds, warmup=warmup,
                  progress=progress)
    res.ratios["chunked / plain (tokens/s)"] = ratio(m, "chunked", "plain")
    res.ratios["checkpointed + chunked / checkpointed (tokens/s)"] = ratio(m, "checkpointed + chunked", "checkpointed")
    for name, (on, chunks) in variants.items():
        model.enable_activation_checkpointing(on)
        res.extra[f"{name} kept MiB"] = _kept_bytes(model, x, y, chunks) / 2**20
        for label, mmap_all in (("", False), (", mmap > 64 KiB", True)):
            rss = _peak_rss_growth(big, on, chunks, mmap_all=mmap_all)
            res.extra[f"{name} peak RSS growth MiB{label}"] = None if rss is None else rss / 2**20
    model.zero_grad(set_to_none=True)
    return res


LEVERS = ("fused_qkv", "is_causal", "no_pad_mask", "kv_cache", "adamw", "int8", "threads", "head_merge",
          "last_logits", "decode_layout", "activation_checkpointing", "chunked_loss", "compile")


def run_levers(*, quick: bool = False, rounds: int = 3, warmup: int = 1, progress=None, compile: bool = True,
               only: tuple[str, ...] | None = None) -> list[BenchResult]:
    unknown = sorted(set(only or ()) - set(LEVERS))
    if unknown:
        raise ValueError(f"unknown lever(s) {unknown}; choose from {', '.join(LEVERS)}")
    s = LMSizes() if not quick else LMSizes(n_layer=2, n_head=2, n_embd=64, block_size=32, batch_size=2,
                                            steps_per_round=1)
    todo = {
        "fused_qkv": lambda: lever_fused_qkv(s, rounds, warmup, progress),
        "is_causal": lambda: lever_is_causal(s, rounds, warmup, progress),
        "no_pad_mask": lambda: lever_no_pad_mask(rounds, warmup, progress, quick=quick),
        "kv_cache": lambda: lever_kv_cache(rounds, warmup, progress, quick=quick),
        "adamw": lambda: lever_adamw(s, rounds, warmup, progress),
        "int8": lambda: lever_int8_modes(rounds, warmup, progress, quick=quick),
        "threads": lambda: lever_threads(s, rounds, warmup, progress),
        "head_merge": lambda: lever_head_merge(s, rounds, warmup, progress),
        "last_logits": lambda: lever_last_logits(rounds, warmup, progress, quick=quick),
        "decode_layout": lambda: lever_decode_layout(rounds, warmup, progress, quick=quick),
        "activation_checkpointing": lambda: lever_activation_checkpointing(s, rounds, warmup, progress),
        "chunked_loss": lambda: lever_chunked_loss(s, rounds, warmup, progress, quick=quick),
        "compile": lambda: lever_compile(s, rounds, warmup, progress),
    }
    if not compile:
        todo.pop("compile")
    out = []
    for name, fn in todo.items():
        if only is not None and name not in only:
            continue
        if progress is not None:
            progress(f"lever {name}")
        out.append(fn())
    return out
