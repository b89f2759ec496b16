"""Seq2seq training throughput: attnkit ``Transformer`` vs ``torch.nn.Transformer`` + embeddings + head.

Axis legend: ``B`` batch, ``S`` source length, ``T`` target length, ``C`` width (``d_model``), ``V`` vocabulary.

Both models: post-norm ("Attention is all you need") encoder-decoder, ReLU feed-forward, final LayerNorms
on encoder and decoder (``torch.nn.Transformer`` always has them), token embeddings x sqrt(C) + sinusoidal
positions, dropout, untied output Linear. Same batch (ids in ``[1, V)``; id 0 is padding, so nothing is padded:
torch.nn.Transformer is given the all-False padding masks, attnkit derives them from ``pad_id`` and drops them, as
it does for every unpadded batch), same AdamW. Throughput counts *target* tokens (``B*T``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.models.configs import TransformerConfig
from attnkit.models.transformer import Transformer
from attnkit.modules.sinusoidal import sinusoidal_table

from .bench_lm import make_optimizer
from .common import BenchResult, linear_gemm_floor, ratio, run_impls, seeded
from .harness import Impl


@dataclass
class Seq2SeqSizes:
    d_model: int = 256
    num_heads: int = 8
    num_encoder_layers: int = 3
    num_decoder_layers: int = 3
    dim_feedforward: int = 1024
    dropout: float = 0.1
    vocab_size: int = 8000
    batch_size: int = 16
    src_len: int = 32
    tgt_len: int = 32
    steps_per_round: int = 5
    lr: float = 3e-4
    optimizer: str = "fused"


class TorchSeq2Seq(nn.Module):
    """The torch.nn peer: embeddings + sinusoidal positions + ``nn.Transformer`` + output Linear.

    Shape:
        src ``(B, S)``, tgt ``(B, T)`` -> logits ``(B, T, V)``.
    """

    def __init__(self, s: Seq2SeqSizes):
        super().__init__()
        self.scale = math.sqrt(s.d_model)
        self.src_tok = nn.Embedding(s.vocab_size, s.d_model)
        self.tgt_tok = nn.Embedding(s.vocab_size, s.d_model)
        self.register_buffer("pe", sinusoidal_table(max(s.src_len, s.tgt_len), s.d_model), persistent=False)
        self.drop = nn.Dropout(s.dropout)
        self.core = nn.Transformer(s.d_model, s.num_heads, s.num_encoder_layers, s.num_decoder_layers,
                                   s.dim_feedforward, s.dropout, batch_first=True)
        self.head = nn.Linear(s.d_model, s.vocab_size)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        S, T = src.shape[1], tgt.shape[1]
        pad = src == 0  # (B, S)
        x = self.drop(self.src_tok(src) * self.scale + self.pe[:S])  # (B, S, C)
        y = self.drop(self.tgt_tok(tgt) * self.scale + self.pe[:T])  # (B, T, C)
        causal = nn.Transformer.generate_square_subsequent_mask(T)  # (T, T) float, -inf above the diagonal
        h = self.core(x, y, tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad,
                      tgt_is_causal=True)  # (B, T, C)
        return self.head(h)  # (B, T, V)


def attnkit_transformer(s: Seq2SeqSizes) -> Transformer:
    cfg = TransformerConfig(src_vocab_size=s.vocab_size, tgt_vocab_size=s.vocab_size, d_model=s.d_model,
                            num_heads=s.num_heads, num_encoder_layers=s.num_encoder_layers,
                            num_decoder_layers=s.num_decoder_layers, dim_feedforward=s.dim_feedforward,
                            dropout=s.dropout, activation="relu", norm_first=False, encoder_final_norm=True,
                            decoder_final_norm=True, max_len=max(s.src_len, s.tgt_len, 16), pad_id=0)
    return Transformer(cfg)


def _step_fn(model, opt, src, tgt_in, tgt_out, steps):
    def run() -> float:
        for _ in range(steps):
            logits = model(src, tgt_in)  # (B, T, V)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return float(tgt_out.numel() * steps)

    return run


def run_seq2seq(sizes: Seq2SeqSizes | None = None, *, rounds: int = 5, warmup: int = 1, peers: bool = True,
                progress=None) -> BenchResult:
    s = sizes or Seq2SeqSizes()
    res = BenchResult("seq2seq_train", "Seq2seq training (encoder-decoder)", asdict(s))
    g = seeded(1)
    src = torch.randint(1, s.vocab_size, (s.batch_size, s.src_len), generator=g)
    tgt = torch.randint(1, s.vocab_size, (s.batch_size, s.tgt_len + 1), generator=g)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # teacher forcing: predict token t+1 from tokens <= t

    torch.manual_seed(0)
    ak = attnkit_transformer(s).train()
    impls = [Impl("attnkit", _step_fn(ak, make_optimizer(ak.parameters(), s.optimizer, s.lr), src, tgt_in, tgt_out,
                                      s.steps_per_round))]
    if peers:
        torch.manual_seed(0)
        tn = TorchSeq2Seq(s).train()
        impls.append(Impl("torch.nn.Transformer", _step_fn(tn, make_optimizer(tn.parameters(), s.optimizer, s.lr),
                                                          src, tgt_in, tgt_out, s.steps_per_round)))
    # The Linear layers' matrix products alone (forward + both gradients; the decoder's cross-attention
    # key/value projections run on the source rows): an upper bound for any implementation.
    rows = s.batch_size * s.tgt_len
    impls.append(Impl("matmul floor (Linear GEMMs only)", linear_gemm_floor(ak, rows, steps=s.steps_per_round),
                      notes="upper bound: the Linear layers' forward and gradient products, nothing else"))
    measured = run_impls(res, impls, rounds=rounds, warmup=warmup, progress=progress)
    res.ratios["attnkit / torch.nn.Transformer"] = ratio(measured, "attnkit", "torch.nn.Transformer")
    res.ratios["matmul floor / torch.nn.Transformer (the most any implementation could reach)"] = ratio(
        measured, "matmul floor (Linear GEMMs only)", "torch.nn.Transformer")
    res.add_target("attnkit / torch.nn.Transformer target tokens/s", res.ratios["attnkit / torch.nn.Transformer"], 1.3)
    return res
