"""Helpers shared by the test suite (importable as ``helpers``: ``pythonpath = ["tests"]`` in pyproject.toml).

* :func:`spread_weights` -- redraw a model's parameters so that outputs depend strongly on every input: with the
  training init (std 0.02) logits and attention maps are nearly uniform, and a parity check would pass too easily.
* :func:`tiny_gpt_config` and :func:`tiny_transformer_config` -- the tiny model configs the tests build on (one
  place for their sizes; a test passes what it needs different as overrides).
* :data:`TOLERANCES` and :func:`assert_close` -- the suite's tolerance table: one named entry per kind of
  comparison instead of literal ``atol``/``rtol`` numbers scattered over the files.
* :func:`without_key_biases` -- a state dict without the attention key biases, which training does not determine
  (see there), for comparing two trainings' weights.
* :func:`sync_sites` -- where a function made the host wait for the GPU (CUDA's sync debug mode).
* :class:`TinyLM` -- a tiny tied-embedding language model (no attention) for the training and checkpoint tests.
* :func:`tiny_bpe_tokenizer` and :data:`CHATML` -- a small byte-level BPE tokenizer with ChatML's special tokens,
  and ChatML's chat template, for the tests of Hugging Face folders, sampling and fine-tuning;
  :func:`tiny_hf_folder` -- a tiny random Llama-shaped model saved as a Hugging Face folder with that tokenizer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from torch import nn

from attnkit.models.configs import GPTConfig, TransformerConfig

__all__ = ["spread_weights", "tiny_gpt_config", "tiny_transformer_config", "TOLERANCES", "assert_close",
           "without_key_biases", "sync_sites", "TinyLM", "tiny_bpe_tokenizer", "CHATML", "tiny_hf_folder"]

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def spread_weights(model: torch.nn.Module, *, std: float = 0.3, seed: int = 0,
                   matrices_only: bool = False) -> torch.nn.Module:
    """Redraw parameters from a seeded ``N(0, std²)``; 1-D ``…weight`` parameters (norm gains) become
    ``1 + 0.1·N(0, 1)``. ``matrices_only`` redraws only the parameters with more than one axis. Returns ``model``."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if matrices_only:
                if p.dim() > 1:
                    p.copy_(torch.randn(p.shape, generator=g) * std)
                continue
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("weight") and p.dim() == 1:  # norm gains around 1
                p.copy_(1.0 + 0.1 * noise)
            else:
                p.copy_(noise * std)
    return model


def random_hf_causal_lm(c: dict) -> tuple[torch.nn.Module, torch.nn.Module]:
    """A transformers ``GPT2LMHeadModel`` or ``LlamaForCausalLM`` (``c["family"]``: gpt2 / llama) with random
    weights (:func:`spread_weights`, std 0.5, seed ``c["seed"]``), in eval mode and float64, and attnkit's GPT read
    from it (``from_hf``, float64), built from a drawn case's sizes: vocabulary ``V``, ``layers``, heads ``H`` of
    size ``D``, feed-forward ``F``, activation ``act``, norm ``eps``, ``tied`` embeddings; Llama also kv heads
    ``K``, width ``C``, ``theta`` and ``bias``. 16 positions. Returns ``(hf, ours)``."""
    import transformers

    from attnkit.interop.hf import from_hf

    if c["family"] == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=c["V"], n_positions=16, n_embd=c["H"] * c["D"], n_layer=c["layers"],
                                      n_head=c["H"], n_inner=c["F"], activation_function=c["act"],
                                      layer_norm_epsilon=c["eps"], tie_word_embeddings=c["tied"],
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(vocab_size=c["V"], hidden_size=c["C"], intermediate_size=c["F"],
                                       num_hidden_layers=c["layers"], num_attention_heads=c["H"],
                                       num_key_value_heads=c["K"], head_dim=c["D"], max_position_embeddings=16,
                                       rope_theta=c["theta"], rms_norm_eps=c["eps"], hidden_act=c["act"],
                                       tie_word_embeddings=c["tied"], attention_bias=c["bias"], mlp_bias=c["bias"],
                                       bos_token_id=0, eos_token_id=0)
        model = transformers.LlamaForCausalLM(cfg)
    model = spread_weights(model, std=0.5, seed=c["seed"]).eval()
    ours = from_hf(model, dtype=torch.float64)  # (the float32 weights are exact in float64)
    return model.double(), ours


def tiny_gpt_config(kind: str = "gpt2", **overrides) -> GPTConfig:
    """A 2-layer, 32-wide GPT config: ``"gpt2"`` (learned positions, LayerNorm, tanh-GELU, biases, tied head) or
    ``"llama"`` (RoPE, RMSNorm, SwiGLU, grouped-query attention 4:2, no bias, untied); ``overrides`` replace fields."""
    if kind == "gpt2":
        base = dict(vocab_size=61, block_size=24, n_layer=2, n_head=4, n_embd=32)
    elif kind == "llama":
        base = dict(vocab_size=61, block_size=24, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=48,
                    activation="swiglu", norm="rmsnorm", bias=False, position="rope", tie_embeddings=False)
    else:
        raise ValueError(f"kind must be 'gpt2' or 'llama', got {kind!r}")
    return GPTConfig(**(base | overrides))


def tiny_transformer_config(**overrides) -> TransformerConfig:
    """A 2+2-layer, 32-wide encoder-decoder config (dropout 0, pad_id 0); ``overrides`` replace fields."""
    base = dict(src_vocab_size=23, tgt_vocab_size=19, d_model=32, num_heads=4, num_encoder_layers=2,
                num_decoder_layers=2, dim_feedforward=48, dropout=0.0, max_len=64)
    return TransformerConfig(**(base | overrides))


# torch.testing.assert_close keyword arguments per kind of comparison.
TOLERANCES: dict[str, dict[str, float]] = {
    # mathematically equal float32 computations (another implementation, another summation order): torch.nn
    # parity, fast path against reference path, cached against uncached
    "float32": dict(rtol=1e-5, atol=1e-5),
    # against Hugging Face transformers' float32 models (more layers and vocabulary between the two sums)
    "hf_float32": dict(rtol=0.0, atol=1e-4),
    # the same computation replayed (resume, determinism): bit for bit
    "exact": dict(rtol=0.0, atol=0.0),
    # weights after a few float32 training steps summed in another order: DDP / FSDP / torchrun against one process
    "trained_float32": dict(rtol=0.0, atol=1e-4),
}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, kind: str, **kwargs) -> None:
    """``torch.testing.assert_close`` with the tolerances of ``TOLERANCES[kind]`` (``kwargs``: e.g. ``msg``)."""
    if kind not in TOLERANCES:
        raise ValueError(f"kind must be one of {sorted(TOLERANCES)}, got {kind!r}")
    torch.testing.assert_close(actual, expected, **TOLERANCES[kind], **kwargs)


def without_key_biases(state: dict[str, torch.Tensor], kv_width: int) -> dict[str, torch.Tensor]:
    """``state`` with the key part cut out of every packed attention bias (``qkv_proj.bias`` rows ``[q | k | v]``,
    ``kv_proj.bias`` rows ``[k | v]``, ``kv_width`` = K·D rows each for k and v).

    Why: a key bias ``b_k`` adds ``q·b_k`` to every score of a query, which the softmax ignores, so its gradient
    is zero in exact arithmetic and only rounding noise in floats. Adam divides that noise by its own running
    size and turns it into steps of about the learning rate, whose signs depend on the summation order: two
    trainings that are the same (1 process against N, accumulation against one big batch) end with different key
    biases and identical everything else. The model's outputs do not depend on them, so comparing outputs covers
    them.
    """
    out = {}
    for name, t in state.items():
        if name.endswith(".kv_proj.bias") or name == "kv_proj.bias":  # (not qkv_proj.bias, below)
            out[name] = t[kv_width:]  # v
        elif name.endswith("qkv_proj.bias"):
            q_width = t.numel() - 2 * kv_width
            out[name] = torch.cat([t[:q_width], t[q_width + kv_width:]])  # q and v
        else:
            out[name] = t
    return out


def sync_sites(fn) -> list[str]:
    """Run ``fn`` with CUDA's sync debug mode on "warn": where each call that made the host wait for the GPU was."""
    import warnings

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return [f"{w.filename}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)]


class TinyLM(nn.Module):
    """Embedding -> residual MLP -> LayerNorm -> tied output head. ``forward(x (B, T)) -> (B, T, V)``."""

    def __init__(self, vocab_size: int = 32, dim: int = 16, dropout: float = 0.0):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, dim)
        nn.init.normal_(self.emb.weight, std=0.3)  # keeps the tied logits moderate
        self.fc = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.emb.weight  # tied, like GPT-2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)  # (B, T, C)
        h = h + self.drop(F.gelu(self.fc(h)))
        return self.head(self.ln(h))  # (B, T, V)


def tiny_bpe_tokenizer(special_tokens: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), *,
                       eos: str | None = "<|im_end|>", **roles):
    """A byte-level BPE tokenizer (at most 300 ids) trained on fifty short lines about a cat; ``roles``: ``bos``,
    ``pad``, ``unk`` spellings among ``special_tokens``."""
    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer

    text = "\n".join(f"line {i}: the cat sat on the mat and ran away." for i in range(50))
    return BPETokenizer.train(text, vocab_size=300, special_tokens=list(special_tokens), eos=eos, **roles)


def metaspace_tokenizer():
    """A SentencePiece-style BPE (Metaspace pre-tokenizer and decoder, as Llama-2 and Mistral folders bring): its
    decoder drops the space of a ``▁word`` at the start of a text, so ``decode(a) + decode(b) != decode(a + b)``."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer

    backend = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer, backend.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    backend.train_from_iterator(["once upon a time there was a cat"] * 20, trainers.BpeTrainer(
        vocab_size=60, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"]))
    return BPETokenizer(backend, eos="<|im_end|>")


def tiny_hf_folder(folder, tokenizer=None, *, chat_template: str | None = None, std: float | None = None,
                   **overrides):
    """A Hugging Face folder at ``folder``: a tiny random Llama-shaped GPT (``overrides`` change its config) saved
    by ``save_hf``, with ``tokenizer`` (default :func:`tiny_bpe_tokenizer`) as an HF ``tokenizer.json`` and a
    ``tokenizer_config.json`` naming ``<|im_end|>`` as EOS (and ``chat_template``). ``std``: matrices redrawn from
    ``N(0, std²)`` (0.02, the init, repeats the last token). Returns the folder."""
    import json

    from attnkit.interop.hf import save_hf
    from attnkit.models.gpt import GPT

    tok = tokenizer or tiny_bpe_tokenizer()
    torch.manual_seed(0)
    cfg = dict(vocab_size=tok.vocab_size, block_size=64, n_layer=1, n_head=2, n_embd=16, ffn_hidden=32,
               activation="swiglu", norm="rmsnorm", bias=False, position="rope")
    model = GPT(GPTConfig(**{**cfg, **overrides}))
    if std is not None:
        spread_weights(model, std=std, matrices_only=True)
    folder = save_hf(model, folder)
    tok.backend.save(str(folder / "tokenizer.json"))
    config = {"eos_token": "<|im_end|>"}
    if chat_template is not None:
        config["chat_template"] = chat_template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@st.composite
def logit_rows(draw, *, dead_rows: bool = False) -> torch.Tensor:
    """A hypothesis strategy of ``(B, V)`` float32 logits for the sampling filters' parity tests: small integers
    (many ties), logs of small counts (exact binary ratios and masses, ties, -inf for a count of 0) or spread
    floats, and some entries -inf. ``dead_rows``: a whole row may be -inf; otherwise every row keeps a finite
    logit."""
    B, V = draw(st.integers(1, 3)), draw(st.integers(1, 12))
    kind = draw(st.sampled_from(["ints", "counts", "floats"]))
    if kind == "ints":
        values = st.integers(-3, 3).map(float)
    elif kind == "counts":
        values = st.sampled_from([0.0, 1.0, 2.0, 4.0, 8.0]).map(lambda c: float(torch.tensor(c).log()))
    else:
        values = st.floats(-20, 20, allow_nan=False, width=32)
    logits = torch.tensor([[draw(values) for _ in range(V)] for _ in range(B)], dtype=torch.float32)  # (B, V)
    if draw(st.booleans()):
        if not dead_rows:
            logits[logits == float("-inf")] = 0.0
        logits = logits.masked_fill(torch.tensor([[draw(st.booleans()) for _ in range(V)] for _ in range(B)]),
                                    float("-inf"))
    if not dead_rows:
        logits[:, draw(st.integers(0, V - 1))] = 1.0  # (every row keeps a finite logit)
    return logits


# ----------------------------------------------------------------------------------------------------
# tiny training runs (the tests of the training options that change no number: activation checkpointing, the
# chunked loss)
# ----------------------------------------------------------------------------------------------------
def tiny_lm_task():
    """An LMTask over 3,000 seeded random ids of :func:`tiny_gpt_config`'s vocabulary (61): blocks of 16, batches
    of 4."""
    from attnkit.training.lm_task import LMTask

    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, 61, (3000,), generator=g)
    return LMTask(tokens[:2600], tokens[2600:], block_size=16, batch_size=4, seed=1)


def reversal_pairs(n: int, seed: int):
    """``n`` EncodedPairs whose target is the reversed source (words 4..18, sources end with <eos> = 2; <pad> 0,
    <bos> 1)."""
    from attnkit.data.pipeline.mt_batching import EncodedPairs

    g = torch.Generator().manual_seed(seed)
    src, tgt = [], []
    for _ in range(n):
        words = torch.randint(4, 19, (int(torch.randint(2, 8, (1,), generator=g)),), generator=g).tolist()
        src.append(words + [2])
        tgt.append(words[::-1])
    return EncodedPairs(src, tgt, pad_id=0, bos_id=1, eos_id=2)


def tiny_mt_task():
    """An MTTask (label smoothing 0.1) on 96 training and 12 validation :func:`reversal_pairs`, 48 tokens a batch."""
    from attnkit.training.mt_task import MTTask

    return MTTask(reversal_pairs(96, 0), reversal_pairs(12, 1), max_tokens=48, seed=2, label_smoothing=0.1)


def tiny_train_config(**overrides):
    """A TrainConfig of 4 updates of 2 micro-batches, evaluated and checkpointed every 2 (``overrides`` replace)."""
    from attnkit.training.config import TrainConfig

    base = dict(steps=4, batch_size=4, block_size=16, grad_accum=2, lr=3e-3, min_lr=3e-4, warmup_steps=1,
                eval_every=2, eval_batches=1, log_every=1, ckpt_every=2, keep_last=3, seed=5)
    return TrainConfig(**(base | overrides))


def run_losses(run) -> list[float]:
    """A run folder's logged training losses, then its validation losses."""
    from attnkit.training.metrics import read_metrics

    rows = read_metrics(run)
    return [r["loss"] for r in rows if "loss" in r] + [r["valid_loss"] for r in rows if "valid_loss" in r]


def fit_losses(tmp_path, name: str, model_and_config, task, cfg, **kwargs):
    """Train ``(model, model_config)`` on ``task`` with ``cfg`` into ``tmp_path / name``, quietly: (the run's
    :func:`run_losses`, the model)."""
    from attnkit.training.trainer import Trainer

    model, config = model_and_config
    Trainer(model, task, cfg, tmp_path / name, model_config=config, progress=False, log=False, **kwargs).fit()
    return run_losses(tmp_path / name), model


def saved_bytes():
    """A ``saved_tensors_hooks`` context and the dict its packs fill: the bytes of each distinct storage the
    autograd graph keeps for the backward pass (outside any checkpointed region: inside one, checkpointing keeps
    nothing)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), seen
