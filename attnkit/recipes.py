"""The recipes' defaults: what ``attnkit train lm``, ``train mt``, ``finetune``, ``translate`` and ``eval mt`` use
for every flag left unset.

Each is a dict of :class:`~attnkit.training.TrainConfig` fields (plus, for translation, the data-side settings);
how a run combines them with a resumed run's saved config and the flags given is
:func:`attnkit.training.config.resolve_train_config`. The figures behind each choice are in
docs/experiments/ (lm.md, mt.md). This module imports nothing heavy (no torch), so the command line can show these
defaults in ``--help`` without loading torch.

There are no tensor axes in this file.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LM_DEFAULTS", "LM_RECIPES", "MT_DEFAULTS", "FT_DEFAULTS", "LORA_LR", "MT_DEFAULT_PRESET",
           "MT_DEFAULT_VOCAB", "MT_DEFAULT_MAX_TOKENS", "MT_DEFAULT_MAX_LEN", "MT_DEFAULT_BLEU_SENTENCES",
           "MT_DEFAULT_ANNEAL_SHARE", "DEFAULT_BEAM", "DEFAULT_LENGTH_PENALTY", "DEFAULT_BATCH_SIZE"]

# Defaults of the language-modelling recipe (tuned for the char-small preset on 2 CPU cores;
# see docs/experiments/lm.md for how they were chosen).
LM_DEFAULTS: dict[str, Any] = dict(
    batch_size=24, block_size=128, grad_accum=1, lr=4e-3, min_lr=1e-4, warmup_steps=50, schedule="cosine",
    weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0, eval_every=200, eval_batches=20, log_every=10, ckpt_every=200,
    keep_last=2, seed=1337,
)

# Named recipes for `train lm --recipe NAME`: the options of a whole run (model preset and overrides, data, batch,
# schedule, device settings), each taking the place of a flag left unset; a flag given still wins.
# shakespeare-char-gpu: issue #40's moonshot, valid loss 1.47 on Tiny Shakespeare (characters) in less than half of
# nanoGPT's time on one GPU. nanoGPT's train_shakespeare_char model and batch (6 x 384, dropout 0.2, 64 x 256), with
# twice its learning rate and a cosine of 2,000 updates instead of 5,000 (the rate falls while the loss still falls),
# CUDA graphs instead of compilation (nothing to wait for; this model is small enough for the host's kernel launches
# to set the pace), an evaluation every 100 updates on 50 batches, and a stop at the target. On one H200 it reached
# 1.4593 at update 1,300 in 18 s; nanoGPT's train.py reached 1.4573 at update 1,750 in 45 s in the same call
# (benchmarks/RESULTS.md, "GPU speed"), both on nanoGPT's tinyshakespeare.txt (--data): the recipe's own default,
# the `shakespeare` corpus, is four times larger with another validation split, unmeasured against 1.47 (a stop
# that never comes ends at the 2,000 updates). Needs a CUDA GPU.
LM_RECIPES: dict[str, dict[str, Any]] = {
    "shakespeare-char-gpu": dict(
        data="shakespeare", tokenizer="char", preset="gpt2",
        overrides=dict(n_layer=6, n_head=6, n_embd=384, dropout=0.2, bias=False), block_size=256, batch_size=64,
        lr=2e-3, min_lr=1e-4, warmup_steps=100, schedule_steps=2000, eval_every=100, eval_batches=50,
        ckpt_every=2000, stop_at_loss=1.47, cuda_graphs=True, autocast="bf16"),
}

# The CPU translation recipe (chosen by the probes in docs/experiments/mt.md): the small pre-norm
# transformer-cpu preset (~1.2M parameters at vocabulary 2000, SwiGLU, no dropout: the model underfits within an
# hour), which sees about four times the tokens of transformer-small per second; a joint BPE of 2000 (a small
# output layer, and Sennrich & Zhang 2019's choice for small data); 512-token batches at a peak lr of 1.4e-3 (more,
# smaller updates: 0.09 nats lower validation loss per token than 1024 at 2e-3 within an hour, with SwiGLU); a
# 150-step linear warmup then a cosine decay to the end of the time budget (--max-time; of --steps when only that
# is given), as `train lm` does.
# The paper's warmup + inverse-square-root schedule stays available (--schedule inverse_sqrt, where --lr is the
# scale factor).
MT_DEFAULTS: dict[str, Any] = dict(
    lr=1.4e-3, min_lr=1e-5, warmup_steps=150, schedule="cosine", betas=(0.9, 0.98), weight_decay=0.0,
    grad_clip=1.0, grad_accum=1, eval_every=1000, eval_batches=30, log_every=10, ckpt_every=250,
    keep_last=5, seed=1337,
)
MT_DEFAULT_PRESET = "transformer-cpu"
MT_DEFAULT_VOCAB = 2000
MT_DEFAULT_MAX_TOKENS = 512
MT_DEFAULT_MAX_LEN = 128
MT_DEFAULT_BLEU_SENTENCES = 150
# With --anneal-data: the final share of the budget that trains on the in-domain pairs only (docs/experiments/mt.md,
# "Annealing on the in-domain pairs": at 60 minutes on de-en, +0.9 BLEU on the Ding test, -8.5 on test-docs).
MT_DEFAULT_ANNEAL_SHARE = 0.2

# Fine-tuning recipe: small batches of long-ish blocks, a gentle learning rate, no weight decay (it would pull
# the pretrained weights towards zero), frequent evaluation (runs are short).
FT_DEFAULTS: dict[str, Any] = dict(
    batch_size=8, block_size=256, grad_accum=1, lr=5e-5, min_lr=5e-6, warmup_steps=20, schedule="cosine",
    weight_decay=0.0, grad_clip=1.0, eval_every=50, eval_batches=10, log_every=5, ckpt_every=50,
    keep_last=1, seed=1337,
)
LORA_LR = 1e-3

# Decoding defaults: beam 4 and the GNMT length penalty 0.6 (common values; on de-en valid, beam 4 gained ~0.4
# BLEU over greedy and the length penalty 0.0-1.0 changed BLEU by < 0.3, see docs/experiments/mt.md).
DEFAULT_BEAM = 4
DEFAULT_LENGTH_PENALTY = 0.6
DEFAULT_BATCH_SIZE = 32
