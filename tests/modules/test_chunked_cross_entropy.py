"""The chunked cross-entropy (``attnkit.modules.chunked_cross_entropy``) and the models' ``output_fn``: the same loss
and the same gradients (w.r.t. the hidden states, the head's weight and bias) as ``F.cross_entropy`` of the whole
logits, in float64 to 1e-12 (the chunks' sums are added in another order: not bit for bit), for row counts that are
not a multiple of the chunks, with label smoothing and ignored rows, a tied head, a LoRA head; fewer bytes kept for
the backward pass; every chunk checkpointed (non-reentrant); bad arguments refused.

Axis legend: ``N`` rows, ``C`` width, ``V`` vocabulary, ``B`` batch, ``T`` length.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import saved_bytes, tiny_gpt_config, tiny_transformer_config

from attnkit.models.gpt import GPT
from attnkit.models.transformer import Transformer
from attnkit.modules.chunked_cross_entropy import chunked_cross_entropy, head_vocab_size
from attnkit.modules.lora import apply_lora

F64 = dict(rtol=1e-12, atol=1e-12)


def _head(C: int, V: int, bias: bool = True) -> torch.nn.Linear:
    torch.manual_seed(1)
    return torch.nn.Linear(C, V, bias=bias).double()


def _grads(loss, tensors):
    return torch.autograd.grad(loss, tensors)


@pytest.mark.parametrize("smoothing", [0.0, 0.1], ids=["plain", "smoothed"])
@pytest.mark.parametrize("N, chunks", [(37, 4), (37, 1), (5, 8), (40, 5)])
def test_equals_the_plain_loss_and_its_gradients_in_float64(chunk_calls, smoothing, N, chunks):
    head = _head(16, 29)
    h = torch.randn(N, 16, dtype=torch.float64, requires_grad=True)  # (N, C)
    y = torch.randint(0, 29, (N,))
    y[1] = -100  # an ignored row counts neither in the sum nor in the mean
    wrt = [h, head.weight, head.bias]
    plain = F.cross_entropy(head(h), y, label_smoothing=smoothing)
    chunked = chunked_cross_entropy(h, head, y, chunks=chunks, label_smoothing=smoothing)
    assert chunked.dtype == torch.float64 and len(chunk_calls) == chunks  # (more chunks than rows: empty ones)
    torch.testing.assert_close(chunked, plain, **F64)
    for got, want in zip(_grads(chunked, wrt), _grads(plain, wrt)):
        torch.testing.assert_close(got, want, **F64)


def test_float32_under_the_plain_loss_is_within_float_rounding():
    head = _head(16, 29).float()
    h = torch.randn(3, 11, 16, requires_grad=True)  # (B, T, C): leading axes flattened
    y = torch.randint(0, 29, (3, 11))
    plain = F.cross_entropy(head(h).reshape(-1, 29), y.reshape(-1), label_smoothing=0.1)
    chunked = chunked_cross_entropy(h, head, y, chunks=3, label_smoothing=0.1)
    assert chunked.dtype == torch.float32
    torch.testing.assert_close(chunked, plain, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(_grads(chunked, [h])[0], _grads(plain, [h])[0], rtol=1e-5, atol=1e-7)


def test_keeps_no_logits_for_the_backward_pass():
    N, C, V = 64, 16, 1000
    head = _head(C, V).float()
    h = torch.randn(N, C, requires_grad=True)
    y = torch.randint(0, V, (N,))
    hooks, plain_seen = saved_bytes()
    with hooks:
        plain = F.cross_entropy(head(h).float(), y)
    hooks, chunked_seen = saved_bytes()
    with hooks:
        chunked = chunked_cross_entropy(h, head, y, chunks=4)
    logits = N * V * 4
    assert sum(plain_seen.values()) >= logits  # the log-softmax's (N, V) float32 output
    # the checkpoints keep their inputs out of the hooks' view: h (N, C) and y (N,) count in, and it is still tiny
    kept = sum(chunked_seen.values()) + h.numel() * 4 + y.numel() * 8
    assert kept < logits / 20, (kept, logits)
    plain.backward()
    chunked.backward()  # (the recomputation works)


def test_a_gpt_with_a_tied_head_gives_the_same_loss_and_gradients(chunk_calls):
    torch.manual_seed(0)
    model = GPT(tiny_gpt_config()).double()  # tied: lm_head.weight is wte.weight
    assert model.lm_head.weight is model.wte.weight
    idx = torch.randint(0, 61, (3, 13))
    y = torch.randint(0, 61, (3, 13))
    plain = F.cross_entropy(model(idx).reshape(-1, 61), y.reshape(-1))
    plain_grads = torch.autograd.grad(plain, list(model.parameters()))
    chunked = model(idx, output_fn=lambda h, head: chunked_cross_entropy(h, head, y, chunks=3))
    chunked_grads = torch.autograd.grad(chunked, list(model.parameters()))
    assert len(chunk_calls) == 3
    torch.testing.assert_close(chunked, plain, **F64)
    for got, want in zip(chunked_grads, plain_grads):
        torch.testing.assert_close(got, want, **F64)


def test_a_lora_head_and_the_translator(chunk_calls):
    torch.manual_seed(0)
    model = GPT(tiny_gpt_config("llama")).double()  # untied head, under LoRA
    apply_lora(model, rank=2, targets=("lm_head",))
    with torch.no_grad():
        model.lm_head.lora_B.normal_()  # not the zero start: the LoRA path must count
    idx = torch.randint(0, 61, (2, 9))
    trainable = [p for p in model.parameters() if p.requires_grad]
    plain = F.cross_entropy(model(idx).reshape(-1, 61), idx.reshape(-1))
    chunked = model(idx, output_fn=lambda h, head: chunked_cross_entropy(h, head, idx, chunks=2))
    torch.testing.assert_close(chunked, plain, **F64)
    for got, want in zip(_grads(chunked, trainable), _grads(plain, trainable)):
        torch.testing.assert_close(got, want, **F64)

    translator = Transformer(tiny_transformer_config()).double()
    src, tgt = torch.randint(1, 23, (2, 7)), torch.randint(1, 19, (2, 6))
    plain = F.cross_entropy(translator(src, tgt).reshape(-1, 19), tgt.reshape(-1), label_smoothing=0.1)
    chunked = translator(src, tgt, output_fn=lambda h, head: chunked_cross_entropy(h, head, tgt, chunks=5,
                                                                                    label_smoothing=0.1))
    torch.testing.assert_close(chunked, plain, **F64)
    assert len(chunk_calls) == 2 + 5


@pytest.mark.parametrize("kwargs, match", [
    (dict(chunks=0), "chunked_cross_entropy chunks must be"),
    (dict(chunks=True), "chunked_cross_entropy chunks must be"),
    (dict(chunks=2, label_smoothing=1.5), "chunked_cross_entropy label_smoothing must be"),
    (dict(chunks=2, targets=torch.zeros(4, dtype=torch.long)), r"hidden \(\.\.\., C\) and targets"),
])
def test_bad_arguments_are_refused(kwargs, match):
    head = _head(8, 5)
    args = dict(targets=torch.zeros(6, dtype=torch.long)) | kwargs
    with pytest.raises(ValueError, match=match):
        chunked_cross_entropy(torch.randn(6, 8, dtype=torch.float64), head, **args)


def test_a_head_without_out_features_is_refused_in_one_line():
    assert head_vocab_size(_head(8, 5)) == 5
    with pytest.raises(ValueError, match=r"^the chunked loss needs an output layer with an int out_features "
                                         r"\(nn.Linear, LoRALinear\), got function$"):
        head_vocab_size(lambda h: h)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_under_bf16_autocast_it_follows_the_plain_loss():
    """On a GPU under bf16 autocast the chunks' logits are made in bf16 and taken to float32, as the plain loss's
    are: the same loss and gradients within bf16 rounding (a wrong row, chunk or target would be far off)."""
    torch.manual_seed(0)
    model = GPT(tiny_gpt_config("llama", dropout=0.0)).cuda()
    idx = torch.randint(0, 61, (4, 32), device="cuda")  # (B, T)
    y = torch.randint(0, 61, (4, 32), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        plain = F.cross_entropy(model(idx).float().reshape(-1, 61), y.reshape(-1))
        plain_grads = torch.autograd.grad(plain, list(model.parameters()))
        chunked = model(idx, output_fn=lambda h, head: chunked_cross_entropy(h, head, y, chunks=5))
        chunked_grads = torch.autograd.grad(chunked, list(model.parameters()))
    assert chunked.dtype == torch.float32
    torch.testing.assert_close(chunked, plain, rtol=1e-2, atol=1e-2)
    for got, want in zip(chunked_grads, plain_grads):
        torch.testing.assert_close(got, want, rtol=5e-2, atol=5e-3)


def test_a_bfloat16_head_gives_a_float32_loss():
    """The chunks' log-softmax runs in float32 even for a bfloat16 head (as the plain loss's ``logits.float()``): the
    loss is float32 and equals the plain loss of the float32-cast logits (mutation check: the promotion removed)."""
    head = _head(16, 29).to(torch.bfloat16)
    h = torch.randn(37, 16, dtype=torch.bfloat16)
    y = torch.randint(0, 29, (37,))
    plain = F.cross_entropy(head(h).float(), y, label_smoothing=0.1)
    chunked = chunked_cross_entropy(h, head, y, chunks=4, label_smoothing=0.1)
    assert chunked.dtype == torch.float32
    torch.testing.assert_close(chunked, plain, rtol=1e-6, atol=1e-6)


def test_a_head_whose_out_features_is_a_bool_is_refused():
    """head_vocab_size takes an int out_features only: a bool (True is not a vocabulary of 1) is refused."""
    head = _head(8, 5)
    head.out_features = True
    with pytest.raises(ValueError, match=r"^the chunked loss needs an output layer with an int out_features "
                                         r"\(nn.Linear, LoRALinear\), got Linear$"):
        head_vocab_size(head)


def test_int32_targets_are_taken_as_class_ids():
    """Targets of any integer dtype are class ids (cast to long as next_token_loss's plain path does): int32 targets
    give the loss of the same long targets (mutation check: the cast removed, nll_loss refused int32)."""
    head = _head(16, 29)
    h = torch.randn(2, 9, 16, dtype=torch.float64)
    y = torch.randint(0, 29, (2, 9))
    want = chunked_cross_entropy(h, head, y, chunks=3)
    torch.testing.assert_close(chunked_cross_entropy(h, head, y.int(), chunks=3), want, rtol=0, atol=0)
