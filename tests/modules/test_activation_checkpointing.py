"""Activation checkpointing (``attnkit.modules.activation_checkpointing``) in the models: the same loss and the same
gradients, bit for bit, with dropout on (GPT-2 style, Llama style, the encoder-decoder with LayerDrop); fewer
bytes kept for the backward pass; never in evaluation, without gradients or with a KV cache; the switch's checks.

Axis legend: ``B`` batch, ``T`` length.

Why ``torch.equal`` holds: the recomputation runs the same CPU kernels on the same inputs with the random state
restored, so it rebuilds the very tensors the plain forward pass kept, and the backward pass then runs the same
kernels in the same order.
"""

from __future__ import annotations

import pytest
import torch
from helpers import saved_bytes, tiny_gpt_config, tiny_transformer_config

import attnkit.modules.activation_checkpointing as ac
from attnkit.models.gpt import GPT
from attnkit.models.transformer import Transformer


def _train_step(model, batch, loss_fn, *, checkpointing: bool, seed: int = 5):
    """One forward and backward pass in training mode from a fixed seed: (loss, {name: grad}, bytes kept)."""
    model.train()
    model.enable_activation_checkpointing(checkpointing)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the same dropout (and LayerDrop) draws in both runs
    hooks, seen = saved_bytes()
    with hooks:
        loss = loss_fn(model, batch)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, sum(seen.values())


def _lm_loss(model, idx):
    logits = model(idx[:, :-1])  # (B, T - 1, V)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())


def _mt_loss(model, batch):
    src, tgt = batch
    logits = model(src, tgt[:, :-1])  # (B, T - 1, V)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())


def _same_step(model, batch, loss_fn, n_params):
    plain_loss, plain_grads, plain_bytes = _train_step(model, batch, loss_fn, checkpointing=False)
    ckpt_loss, ckpt_grads, ckpt_bytes = _train_step(model, batch, loss_fn, checkpointing=True)
    assert torch.equal(plain_loss, ckpt_loss)
    assert plain_grads.keys() == ckpt_grads.keys()
    assert n_params is None or len(plain_grads) == n_params  # (LayerDrop: the skipped layers' have none)
    for name, grad in plain_grads.items():
        assert torch.equal(grad, ckpt_grads[name]), name
    return plain_bytes, ckpt_bytes


GPT2_STYLE = dict(dropout=0.2)  # learned positions, LayerNorm, GELU, biases
LLAMA_STYLE = dict(position="rope", norm="rmsnorm", activation="swiglu", bias=False, n_head=4, n_kv_head=2,
                   tie_embeddings=False, dropout=0.2, attention_dropout=0.1)


@pytest.mark.parametrize("style", [GPT2_STYLE, LLAMA_STYLE], ids=["gpt2", "llama"])
def test_gpt_gives_the_same_loss_and_gradients_and_keeps_fewer_activations(style):
    config = tiny_gpt_config(**style)
    model = GPT(config)
    idx = torch.randint(0, config.vocab_size, (3, 12))  # (B, T)
    n_params = len(list(model.parameters()))
    plain_bytes, ckpt_bytes = _same_step(model, idx, _lm_loss, n_params)
    # checkpointing keeps each block's input (B, T, C) outside the hooks' view: count it in, and still keep less
    block_inputs = config.n_layer * 3 * 11 * config.n_embd * 4
    assert ckpt_bytes + block_inputs < plain_bytes / 2, (ckpt_bytes, block_inputs, plain_bytes)


def test_the_encoder_decoder_with_layer_drop_gives_the_same_loss_and_gradients():
    config = tiny_transformer_config(dropout=0.2, layer_drop=0.3, num_encoder_layers=3, num_decoder_layers=3)
    model = Transformer(config)
    src = torch.randint(1, config.src_vocab_size, (3, 9))  # (B, S)
    tgt = torch.randint(1, config.tgt_vocab_size, (3, 8))  # (B, T)
    plain_bytes, ckpt_bytes = _same_step(model, (src, tgt), _mt_loss, None)
    assert ckpt_bytes < plain_bytes / 2, (ckpt_bytes, plain_bytes)
    # the seed's LayerDrop draw skips a layer (whose parameters get no gradient), the same one in both passes
    _, grads, _ = _train_step(model, (src, tgt), _mt_loss, checkpointing=True)
    assert 0 < len(grads) < len(list(model.parameters()))


def _count_checkpoints(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = ac.checkpoint

    def counting(*args, **kwargs):
        calls.append(1)
        assert kwargs["use_reentrant"] is False
        return real(*args, **kwargs)

    monkeypatch.setattr(ac, "checkpoint", counting)
    return calls


def test_only_a_training_pass_with_gradients_and_no_cache_checkpoints(monkeypatch):
    calls = _count_checkpoints(monkeypatch)
    config = tiny_gpt_config(dropout=0.1)
    model = GPT(config)
    model.enable_activation_checkpointing()
    idx = torch.randint(0, config.vocab_size, (2, 6))  # (B, T)
    model.train()
    model(idx)
    assert len(calls) == config.n_layer  # every block, once
    calls.clear()
    with torch.no_grad():
        model(idx)  # nothing to backpropagate: nothing to save
    model.eval()
    model(idx)  # evaluation
    cache = model.new_cache(2, 8)
    model.train()
    model(idx, cache=cache)  # decoding with a cache: its blocks write into it, once
    assert calls == []


def test_generation_with_a_cache_is_unchanged_and_never_checkpoints(monkeypatch):
    from attnkit.generation.generate import generate

    calls = _count_checkpoints(monkeypatch)
    model = GPT(tiny_gpt_config(dropout=0.1)).eval()
    prompt = torch.randint(0, model.config.vocab_size, (1, 4))  # (B, T)
    plain = generate(model, prompt, max_new_tokens=5, do_sample=False)
    model.enable_activation_checkpointing()
    assert generate(model, prompt, max_new_tokens=5, do_sample=False) == plain
    assert calls == []


def test_the_encoder_decoder_checkpoints_every_layer_that_runs_and_decodes_with_a_cache_without(monkeypatch):
    calls = _count_checkpoints(monkeypatch)
    config = tiny_transformer_config(dropout=0.1)
    model = Transformer(config)
    model.enable_activation_checkpointing()
    assert model.core.encoder.activation_checkpointing and model.core.decoder.activation_checkpointing
    src = torch.randint(1, config.src_vocab_size, (2, 5))  # (B, S)
    tgt = torch.randint(1, config.tgt_vocab_size, (2, 4))  # (B, T)
    model.train()
    model(src, tgt)
    assert len(calls) == config.num_encoder_layers + config.num_decoder_layers
    calls.clear()
    memory = model.encode(src)
    cache = model.new_cache(2, 6)
    model.decode(tgt[:, :1], memory, cache=cache)  # training mode, gradients on, but a cache
    assert len(calls) == config.num_encoder_layers  # the encoder's pass only
    model.eval()
    model(src, tgt)
    assert len(calls) == config.num_encoder_layers


def test_the_switch_is_no_config_field_and_not_saved():
    model = GPT(tiny_gpt_config())
    state = {k: v.clone() for k, v in model.state_dict().items()}
    config = model.config.to_dict()
    assert model.activation_checkpointing is False
    model.enable_activation_checkpointing()
    assert model.activation_checkpointing is True
    assert model.config.to_dict() == config and "activation_checkpointing" not in config
    assert model.state_dict().keys() == state.keys()
    model.enable_activation_checkpointing(False)
    assert model.activation_checkpointing is False


@pytest.mark.parametrize("bad", [1, 0, "yes", None])
def test_a_switch_that_is_not_a_bool_is_refused_by_name(bad):
    model = Transformer(tiny_transformer_config())
    with pytest.raises(ValueError, match=rf"enable_activation_checkpointing enabled must be a bool, got {bad!r}"):
        model.enable_activation_checkpointing(bad)
    assert model.core.encoder.activation_checkpointing is False


def test_the_embedding_level_encoder_decoder_switches_both_stacks(monkeypatch):
    """EncoderDecoder (nn.Transformer's counterpart) has the switch too, and it reaches its encoder and decoder."""
    from attnkit.models.encoder_decoder import EncoderDecoder

    calls = _count_checkpoints(monkeypatch)
    model = EncoderDecoder(d_model=16, nhead=2, num_encoder_layers=2, num_decoder_layers=3, dim_feedforward=32)
    model.enable_activation_checkpointing()
    assert model.encoder.activation_checkpointing and model.decoder.activation_checkpointing
    model.train()
    src, tgt = torch.randn(2, 5, 16), torch.randn(2, 4, 16)  # (B, S, C), (B, T, C)
    model(src, tgt).sum().backward()
    assert len(calls) == 2 + 3  # every layer of both stacks, once


def test_a_left_padded_batch_gives_the_same_loss_and_gradients():
    """The blocks' keyword inputs (the padding mask, the RoPE positions it implies) reach the checkpointed blocks."""
    config = tiny_gpt_config(**LLAMA_STYLE)
    model = GPT(config)
    idx = torch.randint(0, config.vocab_size, (3, 12))  # (B, T)
    pad = torch.zeros(3, 11, dtype=torch.bool)  # (B, T - 1): left padding of 0, 2 and 5 tokens
    pad[1, :2] = True
    pad[2, :5] = True

    def padded_loss(model, idx):
        logits = model(idx[:, :-1], key_padding_mask=pad)  # (B, T - 1, V)
        return torch.nn.functional.cross_entropy(logits[~pad], idx[:, 1:][~pad])

    _same_step(model, idx, padded_loss, None)


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
def test_the_encoder_passes_is_causal_to_its_layers(checkpointing):
    """Encoder(..., is_causal=True) without a mask is causal, checkpointed or not: position 0 sees only itself."""
    from attnkit.models.encoder_decoder import EncoderDecoder

    model = EncoderDecoder(d_model=16, nhead=2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=32,
                           dropout=0.0)
    model.enable_activation_checkpointing(checkpointing)
    model.train()
    src = torch.randn(2, 5, 16)  # (B, S, C)
    other = src.clone()
    other[:, 1:] += 1.0  # the same first position, other later ones
    a, b = model.encoder(src, is_causal=True), model.encoder(other, is_causal=True)  # (B, S, C)
    torch.testing.assert_close(a[:, 0], b[:, 0])
    assert not torch.allclose(model.encoder(src)[:, 0], model.encoder(other)[:, 0])  # (not causal: it sees them)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the CUDA random state restored")
@pytest.mark.parametrize("style", [GPT2_STYLE, LLAMA_STYLE], ids=["gpt2", "llama"])
def test_on_cuda_the_recomputed_blocks_draw_the_same_dropout_masks(style):
    """On a GPU dropout draws from the CUDA generator, whose state the recomputation restores: the same loss and
    gradients (to float rounding: some CUDA backward kernels add in another order from run to run), in float32 and
    under bf16 autocast. Other masks would move them far more."""
    config = tiny_gpt_config(**style)
    model = GPT(config).cuda()
    idx = torch.randint(0, config.vocab_size, (3, 12), device="cuda")  # (B, T)
    for autocast in (False, True):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            plain_loss, plain_grads, _ = _train_step(model, idx, _lm_loss, checkpointing=False)
            ckpt_loss, ckpt_grads, _ = _train_step(model, idx, _lm_loss, checkpointing=True)
        torch.testing.assert_close(ckpt_loss, plain_loss, rtol=1e-5, atol=1e-6)
        assert plain_grads.keys() == ckpt_grads.keys()
        for name, grad in plain_grads.items():
            torch.testing.assert_close(ckpt_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
