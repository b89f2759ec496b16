"""Muon on the hidden matrices, AdamW on the rest (attnkit/training/muon.py), its groups and its use in training."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.models.configs import GPTConfig, TransformerConfig
from attnkit.models.gpt import GPT
from attnkit.models.transformer import Transformer
from attnkit.training.config import TrainConfig
from attnkit.training.lm_task import LMTask
from attnkit.training.metrics import read_metrics
from attnkit.training.muon import MuonWithAdamW, orthogonalize
from attnkit.training.optim import build_optimizer, param_groups
from attnkit.training.trainer import Trainer
from helpers import assert_close


# --- the orthogonalization ------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(rows=st.integers(2, 48), cols=st.integers(2, 48), seed=st.integers(0, 2**16))
def test_orthogonalize_pushes_every_singular_value_near_one_and_keeps_the_singular_vectors(rows, cols, seed):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    o = orthogonalize(u, steps=5)
    assert o.shape == u.shape and o.dtype == u.dtype
    s = torch.linalg.svdvals(o)
    # Jordan et al.'s coefficients leave the values in about [0.7, 1.2] after 5 steps (not exactly 1, by design)
    # for every singular value above ~2% of the Frobenius norm (each step multiplies a small one by ~3.4)
    su = torch.linalg.svdvals(u)
    k = int((su > 0.02 * torch.linalg.matrix_norm(u)).sum())
    assert s[:k].min() > 0.5 and s.max() < 1.25, (s, su)
    # the same singular vectors: O = U' f(S) V^T, so O^T U and U O^T are symmetric positive semi-definite
    for m in (o.T @ u, u @ o.T):
        torch.testing.assert_close(m, m.T)  # float64 defaults
        assert torch.linalg.eigvalsh(m).min() > -1e-9


def test_orthogonalize_of_a_tall_matrix_is_the_transpose_of_its_transpose():
    torch.manual_seed(0)
    u = torch.randn(40, 12)
    # not bit for bit: the products see a transposed view in one call and a contiguous matrix in the other, and
    # some BLAS builds (torch 2.11's on an Intel Xeon) take other kernels for the two layouts
    assert_close(orthogonalize(u, 3), orthogonalize(u.T.contiguous(), 3).T, "float32")


def test_orthogonalize_agrees_with_torchs_muon_iteration():
    """torch.optim.Muon's own iteration (same coefficients, in bfloat16) gives the same matrix up to bfloat16."""
    from torch.optim._muon import _zeropower_via_newtonschulz

    torch.manual_seed(0)
    for shape in ((16, 16), (24, 64), (64, 24)):
        u = torch.randn(*shape)
        ours = orthogonalize(u, 5)
        theirs = _zeropower_via_newtonschulz(u, (3.4445, -4.7750, 2.0315), 5, 1e-7).float()
        cos = torch.nn.functional.cosine_similarity(ours.flatten(), theirs.flatten(), dim=0)
        assert cos > 0.999 and (ours - theirs).abs().max() < 0.05


def test_a_stack_is_orthogonalized_matrix_by_matrix():
    torch.manual_seed(0)
    for shape in ((5, 12, 20), (3, 20, 12)):
        stack = torch.randn(*shape)
        together = orthogonalize(stack, 3)
        assert together.shape == stack.shape
        for one, alone in zip(together, stack):
            assert_close(one, orthogonalize(alone, 3), "float32")


@pytest.mark.parametrize("bad,message", [(torch.ones(3), "expects a matrix"),
                                         (torch.ones(2, 2, 2, 2), "expects a matrix")])
def test_orthogonalize_refuses_non_matrices(bad, message):
    with pytest.raises(ValueError, match=message):
        orthogonalize(bad)


# --- the optimizer --------------------------------------------------------------------------------------
def _two_group_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.LayerNorm(10), torch.nn.Linear(10, 4))
    groups = [{"params": [model[0].weight, model[2].weight], "muon": True, "weight_decay": 0.1},
              {"params": [model[0].bias, model[1].weight, model[1].bias, model[2].bias], "muon": False,
               "weight_decay": 0.0}]
    return model, groups


def _grads(model, seed):
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g).to(p.device)


def test_muon_update_is_the_written_formula_over_three_steps():
    """Three matrices, two of one shape (orthogonalized as one stack), one of another: each follows the formula."""
    torch.manual_seed(0)
    mats = [torch.nn.Parameter(torch.randn(10, 6)), torch.nn.Parameter(torch.randn(4, 10)),
            torch.nn.Parameter(torch.randn(10, 6))]
    opt = MuonWithAdamW([{"params": mats, "muon": True, "weight_decay": 0.1}], lr=0.02, ns_steps=4, momentum=0.9)
    expect = [w.detach().clone() for w in mats]
    bufs = [torch.zeros_like(w) for w in mats]
    g = torch.Generator().manual_seed(1)
    for step in range(3):
        for i, w in enumerate(mats):
            w.grad = torch.randn(w.shape, generator=g)
            bufs[i] = 0.9 * bufs[i] + w.grad
            o = orthogonalize(w.grad + 0.9 * bufs[i], 4)
            expect[i] = expect[i] * (1 - 0.02 * 0.1) - 0.02 * 0.2 * math.sqrt(10) * o
        opt.step()
        for w, e in zip(mats, expect):
            assert_close(w, e, "float32")
    assert all(set(opt.state[w]) == {"momentum_buffer"} for w in mats)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("impl", [{}, {"foreach": True}, {"fused": True}])
def test_a_step_on_cuda_equals_the_step_on_the_cpu(impl):
    """Both halves on the GPU (the stacked Newton-Schulz products in fp32, AdamW as ``impl``) take the CPU's steps."""
    model, groups = _two_group_model()
    twin, twin_groups = _two_group_model()  # the same weights and groups, then moved to the GPU in place
    twin.cuda()
    opt = MuonWithAdamW(groups, lr=0.01, ns_steps=5, **impl)
    cuda_opt = MuonWithAdamW(twin_groups, lr=0.01, ns_steps=5, **impl)
    for step in range(3):
        _grads(model, step)
        _grads(twin, step)
        opt.step()
        cuda_opt.step()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert q.is_cuda
        assert_close(q.cpu(), p, "float32", msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_fused_optimizer_resumed_from_a_state_read_on_the_cpu_takes_the_uninterrupted_step():
    """A checkpoint's optimizer state is read onto the CPU; torch.optim.Optimizer.load_state_dict moves the AdamW
    half's ``step`` counts to the parameters' device only for groups that say "fused", which these do not, and the
    fused kernel was handed host pointers (found by reading, 2026-11-30; not yet run on a GPU)."""
    model, groups = _two_group_model()
    model.cuda()
    opt = MuonWithAdamW(groups, lr=0.01, ns_steps=5, fused=True)
    for step in range(2):
        _grads(model, step)
        opt.step()
    state = opt.state_dict()
    on_cpu = {"state": {k: {n: v.cpu() if torch.is_tensor(v) else v for n, v in s.items()}
                        for k, s in state["state"].items()}, "param_groups": state["param_groups"]}
    twin, twin_groups = _two_group_model()
    twin.cuda().load_state_dict(model.state_dict())
    resumed = MuonWithAdamW(twin_groups, lr=0.01, ns_steps=5, fused=True)
    resumed.load_state_dict(on_cpu)
    _grads(model, 2)
    _grads(twin, 2)
    opt.step()
    resumed.step()
    torch.cuda.synchronize()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert_close(q, p, "exact", msg=name)
    assert all(s["step"].is_cuda for s in resumed.state.values() if "step" in s)


@pytest.mark.parametrize("impl", [{}, {"foreach": True}, {"fused": True}])
def test_the_adamw_half_is_torchs_adamw(impl):
    model, groups = _two_group_model()
    twin = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.LayerNorm(10), torch.nn.Linear(10, 4))
    twin.load_state_dict(model.state_dict())
    opt = MuonWithAdamW(groups, lr=0.01, betas=(0.8, 0.9), eps=1e-6, **impl)
    ref = torch.optim.AdamW([twin[0].bias, twin[1].weight, twin[1].bias, twin[2].bias], lr=0.01, betas=(0.8, 0.9),
                            eps=1e-6, weight_decay=0.0, **impl)
    for step in range(4):
        _grads(model, step)
        _grads(twin, step)
        opt.step()
        ref.step()
    for name in ("0.bias", "1.weight", "1.bias", "2.bias"):
        assert_close(dict(model.named_parameters())[name], dict(twin.named_parameters())[name], "float32")
    p = model[1].weight
    assert set(opt.state[p]) == {"step", "exp_avg", "exp_avg_sq"} and float(opt.state[p]["step"]) == 4


def test_parameters_without_a_gradient_are_left_alone():
    model, groups = _two_group_model()
    opt = MuonWithAdamW(groups, lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    opt.step()  # no gradients at all
    for p, b in zip(model.parameters(), before):
        assert_close(p, b, "exact")


@pytest.mark.parametrize("kwargs,message", [
    (dict(ns_steps=0), "ns_steps must be"),
    (dict(momentum=1.0), "momentum must be"),
    (dict(betas=(0.9, 1.0)), "betas must be two numbers"),
    (dict(lr=-1.0), "lr must be"),
    (dict(foreach=True, fused=True), "choose foreach or fused"),
])
def test_bad_settings_are_refused(kwargs, message):
    _, groups = _two_group_model()
    with pytest.raises(ValueError, match=message):
        MuonWithAdamW(groups, **kwargs)


def test_a_muon_group_takes_matrices_only():
    model, groups = _two_group_model()
    groups[0]["params"].append(model[0].bias)
    groups[1]["params"].remove(model[0].bias)
    with pytest.raises(ValueError, match=r"takes matrices \(R, C\) only, got parameters of shapes \[\(10,\)\]"):
        MuonWithAdamW(groups)


# --- which parameter goes where ---------------------------------------------------------------------------
def test_groups_of_a_gpt_with_untied_head():
    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16, tie_embeddings=False))
    muon, decay, no_decay = param_groups(model, 0.1, muon=True)
    assert (muon["name"], muon["muon"], decay["muon"], no_decay["muon"]) == ("muon", True, False, False)
    linear = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert set(muon["param_names"]) == linear - {"lm_head.weight"}
    assert set(decay["param_names"]) == {"wte.weight", "wpe.weight", "lm_head.weight"}  # embeddings and the head
    assert all(p.ndim == 1 for p in no_decay["params"])
    ids = [id(p) for g in (muon, decay, no_decay) for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))


def test_groups_of_a_translation_model_keep_embeddings_and_generator_out_of_muon():
    model = Transformer(TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=16, num_heads=2,
                                          num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=24))
    muon, decay, _ = param_groups(model, 0.0, muon=True)
    assert model.output_layer() is model.generator
    assert not any("embed" in n or "generator" in n for n in muon["param_names"])
    assert any(n.endswith("qkv_proj.weight") for n in muon["param_names"])
    assert any("cross_attn" in n for n in muon["param_names"])
    assert set(decay["param_names"]) == {"src_embed.tok.weight", "tgt_embed.tok.weight", "generator.weight"}


def test_muon_with_no_trainable_hidden_matrix_is_refused_instead_of_training_with_adamw_alone():
    from attnkit.training.lora_run import add_lora

    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=1, n_head=2, n_embd=16))
    add_lora(model, {"rank": 2, "alpha": 4.0, "targets": ["qkv_proj"], "dropout": 0.0})  # only adapters train
    with pytest.raises(ValueError, match=r"optimizer 'muon' needs trainable hidden matrices .*got none in GPT "
                                         r"\(its trainable parameters \['blocks.0.attn.qkv_proj.lora_A'.*adamw"):
        build_optimizer(model, TrainConfig(optimizer="muon", steps=3, warmup_steps=0))
    assert [g["name"] for g in param_groups(model, 0.1)] == ["decay", "no_decay"]  # AdamW takes the adapters


def test_without_muon_the_two_adamw_groups_are_unchanged():
    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=1, n_head=2, n_embd=16))
    assert [g["name"] for g in param_groups(model, 0.1)] == ["decay", "no_decay"]
    assert all("muon" not in g for g in param_groups(model, 0.1))


# --- configuration and training ------------------------------------------------------------------------
def test_build_optimizer_from_the_config():
    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=1, n_head=2, n_embd=16))
    opt = build_optimizer(model, TrainConfig(optimizer="muon", muon_ns_steps=3, lr=2e-3, weight_decay=0.05,
                                             adamw_impl="fused"))
    assert isinstance(opt, MuonWithAdamW) and opt.fused is True
    assert [g["name"] for g in opt.param_groups] == ["muon", "decay", "no_decay"]
    assert {g["ns_steps"] for g in opt.param_groups} == {3} and {g["lr"] for g in opt.param_groups} == {2e-3}
    assert isinstance(build_optimizer(model, TrainConfig()), torch.optim.AdamW)


@pytest.mark.parametrize("kwargs,message", [
    (dict(optimizer="sgd"), "optimizer must be one of"),
    (dict(optimizer="muon", muon_ns_steps=0), "muon_ns_steps must be"),
    (dict(optimizer="muon", fsdp=True), "use DDP"),
])
def test_config_refuses_bad_optimizer_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


def test_config_round_trips_the_optimizer_fields():
    cfg = TrainConfig(optimizer="muon", muon_ns_steps=2)
    assert TrainConfig.from_json(cfg.to_json()) == cfg


BASE = dict(steps=12, batch_size=4, block_size=8, lr=3e-3, min_lr=3e-4, warmup_steps=2, eval_every=5,
            eval_batches=2, log_every=1, ckpt_every=3, keep_last=2, seed=3, optimizer="muon", muon_ns_steps=3,
            schedule="constant")


def _trainer(out, tiny_lm, token_streams, resume=False, **overrides):
    cfg = TrainConfig(**(BASE | overrides))
    task = LMTask(*token_streams, block_size=cfg.block_size, batch_size=cfg.batch_size, seed=1)
    return Trainer(tiny_lm(0, dropout=0.0), task, cfg, out, model_config={"kind": "tiny", "dim": 16},
                   extra={"tokenizer": "chars"}, resume=resume, progress=False, log=False)


def test_training_with_muon_learns_and_resumes_bit_for_bit(tmp_path, tiny_lm, token_streams):
    _trainer(tmp_path / "long", tiny_lm, token_streams, steps=9).fit()
    _trainer(tmp_path / "split", tiny_lm, token_streams, steps=6).fit()
    _trainer(tmp_path / "split", tiny_lm, token_streams, resume=True, steps=9).fit()
    losses = [{r["step"]: r["loss"] for r in read_metrics(tmp_path / run) if "loss" in r} for run in ("long", "split")]
    assert list(losses[1]) == list(range(1, 10)) and losses[0] == losses[1]  # the momentum buffers came back
    assert losses[0][9] < losses[0][1]


def test_a_run_cannot_resume_with_another_optimizer(tmp_path, tiny_lm, token_streams):
    _trainer(tmp_path / "run", tiny_lm, token_streams, steps=3).fit()
    with pytest.raises(ValueError, match="optimizer"):
        _trainer(tmp_path / "run", tiny_lm, token_streams, resume=True, steps=6, optimizer="adamw")
