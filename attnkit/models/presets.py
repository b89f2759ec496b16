"""Named model configurations.

``get_preset(name, **overrides)`` returns a (validated) copy of ``PRESETS[name]`` with some fields
changed, e.g. ``get_preset("char-small", vocab_size=65)``.

Decoder-only (``GPTConfig``):

=================  =====================================================================================
``gpt2``           GPT-2 small: 12 layers, 12 heads, 768 wide, vocab 50257, tied head (124,439,808 params)
``gpt2-medium``    24 layers, 16 heads, 1024 wide
``gpt2-large``     36 layers, 20 heads, 1280 wide
``gpt2-xl``        48 layers, 25 heads, 1600 wide (1,557,611,200 params)
``gpt2-seed002``   the nanoGPT/seed-002 variant: GPT-2 small with vocab padded to 50304 and an
                   *untied* head (163,109,376 params)
``gpt2-xl-seed002`` GPT-2 XL with vocab 50304, untied head (1,638,172,800 params)
``llama-tiny``     a small Llama-architecture model for CPU experiments (RoPE, RMSNorm, SwiGLU, GQA 8:2)
``smollm2-135m``   SmolLM2-135M's architecture (Llama: 30 layers, 576 wide, 9 heads, 3 KV heads,
                   SwiGLU 1536, RoPE theta 100000, tied, vocab 49152, context 8192)
``char-small``     character-level model that trains on a laptop CPU in minutes: 4 layers, 4 heads, 128 wide,
                   context 128, with Llama-style blocks (RoPE, RMSNorm, SwiGLU, no biases), which reached a
                   lower Tiny-Shakespeare loss than GPT-2-style blocks in the same time (docs/experiments/lm.md;
                   ``--set position=learned --set norm=layernorm --set activation=gelu_tanh --set bias=true``
                   gives the nanoGPT form). Its ``vocab_size`` (256) is only a placeholder: the trainer
                   overrides it with the size of the character vocabulary of the training text
                   (``get_preset("char-small", vocab_size=len(chars))``).
=================  =====================================================================================

Encoder-decoder (``TransformerConfig``):

=====================  =================================================================================
``transformer-base``   the paper's base model: d_model 512, 8 heads, 6+6 layers, FF 2048, dropout 0.1,
                       shared 37000-token source/target vocabulary, tied output projection
``transformer-small``  a CPU-sized variant: d_model 256, 4 heads, 3+3 layers, FF 1024, dropout 0.1,
                       shared vocabulary whose size (8000) is a placeholder the trainer overrides
                       (``src_vocab_size``/``tgt_vocab_size`` = the tokenizer's size)
``transformer-cpu``    the translation recipe for a CPU budget (the default of ``attnkit train mt``): d_model
                       128, 4 heads, 2+2 layers, a SwiGLU feed-forward block of width 344 (the parameters
                       and products of a ReLU block of 512, and 0.04-0.06 nats lower validation loss at
                       equal tokens), pre-norm, no dropout (within an hour of CPU the model underfits:
                       dropout 0.1 left a 15-minute run 0.13 nats behind), none on attention weights
                       either (PyTorch's fused attention kernel), shared/tied vocabulary (placeholder
                       2000). Chosen by tokens/s: on one CPU core it sees ~4x the tokens of
                       ``transformer-small`` in equal time and reaches a lower validation loss within an
                       hour (docs/experiments/mt.md)
``transformer-seed000`` the example configuration of seed 000: 2 encoder + 3 decoder layers, d_model 128,
                       4 heads of 32, SiLU feed-forward 512 (4x), RMSNorm after each sublayer (post-norm),
                       no biases, separate source/target embeddings and output layer, vocabulary 256,
                       embeddings not scaled, no padding id, no dropout
=====================  =================================================================================
"""

from __future__ import annotations

from .configs import GPTConfig, TransformerConfig

# GPT-2 family: learned positions, LayerNorm, tanh-GELU, biases, tied head (HF's defaults).
_GPT2 = dict(vocab_size=50257, block_size=1024, activation="gelu_tanh", norm="layernorm", norm_eps=1e-5,
             bias=True, position="learned", tie_embeddings=True, dropout=0.0)

PRESETS: dict[str, GPTConfig | TransformerConfig] = {
    "gpt2": GPTConfig(**_GPT2, n_layer=12, n_head=12, n_embd=768),
    "gpt2-medium": GPTConfig(**_GPT2, n_layer=24, n_head=16, n_embd=1024),
    "gpt2-large": GPTConfig(**_GPT2, n_layer=36, n_head=20, n_embd=1280),
    "gpt2-xl": GPTConfig(**_GPT2, n_layer=48, n_head=25, n_embd=1600),
    # seed 002 (nanoGPT): vocab padded to a multiple of 64, separate lm_head matrix.
    "gpt2-seed002": GPTConfig(**{**_GPT2, "vocab_size": 50304, "tie_embeddings": False},
                              n_layer=12, n_head=12, n_embd=768),
    "gpt2-xl-seed002": GPTConfig(**{**_GPT2, "vocab_size": 50304, "tie_embeddings": False},
                                 n_layer=48, n_head=25, n_embd=1600),
    # Llama architecture, small enough for a CPU: 8 query heads share 2 key/value heads.
    # ffn_hidden follows Llama's rule: 2/3 * 4 * 256 rounded up to a multiple of 256 = 768.
    "llama-tiny": GPTConfig(vocab_size=32000, block_size=512, n_layer=4, n_head=8, n_kv_head=2, n_embd=256,
                            ffn_hidden=768, activation="swiglu", norm="rmsnorm", norm_eps=1e-5, bias=False,
                            position="rope", rope_theta=10000.0, tie_embeddings=False, dropout=0.0),
    "smollm2-135m": GPTConfig(vocab_size=49152, block_size=8192, n_layer=30, n_head=9, n_kv_head=3, n_embd=576,
                              ffn_hidden=1536, activation="swiglu", norm="rmsnorm", norm_eps=1e-5, bias=False,
                              position="rope", rope_theta=100000.0, tie_embeddings=True, dropout=0.0),
    # vocab_size is a placeholder: the trainer sets it to the number of distinct characters.
    "char-small": GPTConfig(vocab_size=256, block_size=128, n_layer=4, n_head=4, n_embd=128, activation="swiglu",
                            norm="rmsnorm", norm_eps=1e-5, bias=False, position="rope", rope_theta=10000.0,
                            tie_embeddings=True, dropout=0.0),
    "transformer-base": TransformerConfig(src_vocab_size=37000, tgt_vocab_size=37000, d_model=512, num_heads=8,
                                          num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
                                          dropout=0.1, share_embeddings=True, tie_output=True),
    # vocab sizes are placeholders: the trainer sets them to the tokenizer's vocabulary size.
    "transformer-small": TransformerConfig(src_vocab_size=8000, tgt_vocab_size=8000, d_model=256, num_heads=4,
                                           num_encoder_layers=3, num_decoder_layers=3, dim_feedforward=1024,
                                           dropout=0.1, share_embeddings=True, tie_output=True),
    "transformer-cpu": TransformerConfig(src_vocab_size=2000, tgt_vocab_size=2000, d_model=128, num_heads=4,
                                         num_encoder_layers=2, num_decoder_layers=2, activation="swiglu",
                                         dim_feedforward=344, dropout=0.0, attention_dropout=0.0, norm_first=True,
                                         share_embeddings=True, tie_output=True),
    "transformer-seed000": TransformerConfig(src_vocab_size=256, tgt_vocab_size=256, d_model=128, num_heads=4,
                                             num_encoder_layers=2, num_decoder_layers=3, dim_feedforward=512,
                                             dropout=0.0, activation="silu", norm="rmsnorm", norm_first=False,
                                             bias=False, scale_embeddings=False, pad_id=None),
}


def preset_names() -> list[str]:
    """All preset names, in definition order."""
    return list(PRESETS)


def get_preset(name: str, **overrides) -> GPTConfig | TransformerConfig:
    """``PRESETS[name]`` with ``overrides`` applied (a new, validated config; the registry is untouched).

    Raises ValueError for an unknown name (listing the valid ones) or an unknown field.
    """
    if not isinstance(name, str) or name not in PRESETS:  # (a list or dict name is unhashable: a TypeError)
        raise ValueError(f"unknown preset {name!r}; expected one of {list(PRESETS)}")
    return PRESETS[name].replace(**overrides)
