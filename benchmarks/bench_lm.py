"""LM training throughput: attnkit ``GPT`` vs HF ``GPT2LMHeadModel`` (sdpa) on the same batches.

Axis legend: ``B`` batch, ``T`` context (block size), ``C`` width, ``L`` layers, ``V`` vocabulary.

One training step = forward, cross-entropy over all ``B*T`` positions, backward, AdamW step. Both models
have the same shape (GPT-2 block: learned positions, pre-LayerNorm, GELU-tanh MLP, tied head, no dropout),
the same optimizer settings and the same fixed random batch. Throughput is tokens (``B*T`` per step) per
second; MFU is model FLOPs per second divided by the fp32 matmul peak measured in the same run, with
nanoGPT's count (PaLM appendix B):

    flops_per_token = 6 * N + 12 * L * T * C         (N = parameters without position embeddings)

nanoGPT's own model (a peer in the issue) is not vendored here (its code may not be committed): the
peers are HF transformers and, for seq2seq, torch.nn.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT

from .common import BenchResult, have_transformers, linear_gemm_floor, ratio, run_impls, seeded
from .harness import Impl, matmul_peak_gflops

NOMINAL_PEAK_GFLOPS = 289.0  # the fp32 matmul peak for this machine (2 cores, AVX-512)


@dataclass
class LMSizes:
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    block_size: int = 256
    vocab_size: int = 65
    batch_size: int = 8
    steps_per_round: int = 3
    lr: float = 3e-4
    optimizer: str = "fused"  # "plain" (for-loop), "foreach" or "fused" AdamW, the same for every model


def make_optimizer(params, kind: str, lr: float) -> torch.optim.Optimizer:
    """AdamW in one of torch's three implementations (numerically the same update)."""
    if kind == "plain":
        return torch.optim.AdamW(params, lr=lr, foreach=False)
    if kind == "foreach":
        return torch.optim.AdamW(params, lr=lr, foreach=True)
    if kind == "fused":
        return torch.optim.AdamW(params, lr=lr, fused=True)
    raise ValueError(f"optimizer must be 'plain', 'foreach' or 'fused', got {kind!r}")


def attnkit_gpt(s: LMSizes) -> GPT:
    cfg = GPTConfig(vocab_size=s.vocab_size, block_size=s.block_size, n_layer=s.n_layer, n_head=s.n_head,
                    n_embd=s.n_embd, dropout=0.0, bias=True, position="learned", activation="gelu_tanh",
                    norm="layernorm", tie_embeddings=True)
    return GPT(cfg)


def hf_gpt2(s: LMSizes):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=s.vocab_size, n_positions=s.block_size, n_embd=s.n_embd, n_layer=s.n_layer,
                     n_head=s.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     attn_implementation="sdpa")
    model = GPT2LMHeadModel(cfg)
    model.config.use_cache = False
    return model


def flops_per_token(s: LMSizes, n_params_no_pos: int) -> float:
    return 6.0 * n_params_no_pos + 12.0 * s.n_layer * s.block_size * s.n_embd


def count_params_without_positions(model: torch.nn.Module) -> int:
    seen, n = set(), 0
    for name, p in model.named_parameters():  # named_parameters() yields tied tensors once
        if id(p) in seen or "wpe" in name:
            continue
        seen.add(id(p))
        n += p.numel()
    return n


def training_step_fn(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                     steps: int, logits_of) -> callable:
    """A closure running ``steps`` training steps; returns the tokens processed."""
    V = None

    def run() -> float:
        nonlocal V
        for _ in range(steps):
            logits = logits_of(model, x)  # (B, T, V)
            V = logits.shape[-1]
            loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return float(x.numel() * steps)

    return run


def run_lm(sizes: LMSizes | None = None, *, rounds: int = 5, warmup: int = 1, compile: bool = False,
           peers: bool = True, progress=None, peak: dict | None = None) -> BenchResult:
    """Measure LM training tokens/s and MFU of attnkit (and HF GPT-2 when available)."""
    s = sizes or LMSizes()
    res = BenchResult("lm_train", "LM training (GPT-2 block)", asdict(s))
    g = seeded(0)
    x = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), generator=g)
    y = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), generator=g)

    impls = []
    torch.manual_seed(0)
    ak = attnkit_gpt(s).train()
    n_params = count_params_without_positions(ak)
    impls.append(Impl("attnkit", training_step_fn(ak, make_optimizer(ak.parameters(), s.optimizer, s.lr), x, y,
                                                  s.steps_per_round, lambda m, i: m(i))))
    if peers and have_transformers():
        torch.manual_seed(0)
        hf = hf_gpt2(s).train()
        impls.append(Impl("hf-gpt2-sdpa", training_step_fn(hf, make_optimizer(hf.parameters(), s.optimizer, s.lr),
                                                         x, y, s.steps_per_round,
                                                         lambda m, i: m(input_ids=i).logits)))
    elif peers:
        res.notes.append("transformers is not installed: the HF peer was skipped")
    if compile:
        torch.manual_seed(0)
        akc = attnkit_gpt(s).train()
        compiled = torch.compile(akc)
        impls.append(Impl("attnkit+compile", training_step_fn(akc, make_optimizer(akc.parameters(), s.optimizer, s.lr),
                                                              x, y, s.steps_per_round, lambda m, i: compiled(i)),
                          notes="torch.compile (inductor); compile time is first_call_s"))

    # Evidence for the target: the Linear layers' matrix products alone (forward + both gradients), with
    # nothing else. No implementation of this model can train faster than this on this machine.
    impls.append(Impl("matmul floor (Linear GEMMs only)", linear_gemm_floor(ak, s.batch_size * s.block_size,
                                                                            steps=s.steps_per_round),
                      notes="upper bound: the Linear layers' forward and gradient products, nothing else"))
    if peak is None:
        peak = matmul_peak_gflops()
    measured = run_impls(res, impls, rounds=rounds, warmup=warmup, progress=progress)
    fpt = flops_per_token(s, n_params)
    res.extra = {"flops_per_token": fpt, "params_without_positions": n_params, "matmul_peak": peak,
                 "nominal_peak_gflops": NOMINAL_PEAK_GFLOPS}
    for name, summ in res.results.items():
        tp = summ["throughput"]["median"]
        summ["mfu_measured_peak"] = tp * fpt / (peak["max_gflops"] * 1e9)
        summ["mfu_nominal_peak"] = tp * fpt / (NOMINAL_PEAK_GFLOPS * 1e9)
    res.ratios["attnkit / hf-gpt2-sdpa"] = ratio(measured, "attnkit", "hf-gpt2-sdpa")
    res.ratios["matmul floor / hf-gpt2-sdpa (the most any implementation could reach)"] = ratio(
        measured, "matmul floor (Linear GEMMs only)", "hf-gpt2-sdpa")
    res.ratios["attnkit / matmul floor"] = ratio(measured, "attnkit", "matmul floor (Linear GEMMs only)")
    if compile:
        res.ratios["attnkit+compile / hf-gpt2-sdpa"] = ratio(measured, "attnkit+compile", "hf-gpt2-sdpa")
        res.ratios["attnkit+compile / attnkit"] = ratio(measured, "attnkit+compile", "attnkit")
    res.add_target("attnkit / HF GPT-2 tokens/s", res.ratios["attnkit / hf-gpt2-sdpa"], 1.4)
    res.add_target("attnkit MFU (measured peak)", res.results["attnkit"]["mfu_measured_peak"], 0.72, unit="")
    if compile:
        res.add_target("attnkit+compile / HF GPT-2 tokens/s", res.ratios["attnkit+compile / hf-gpt2-sdpa"], 1.4)
        res.add_target("attnkit+compile MFU (measured peak)", res.results["attnkit+compile"]["mfu_measured_peak"],
                       0.72, unit="")
    return res
