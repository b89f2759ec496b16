"""Benchmark (not a test): attnkit's translation recipe next to a plain ``torch.nn.Transformer`` translator,
same data, same time budget, one after the other on the same core (or ``--side-by-side``: at the same time, each
pinned to its own CPU); BLEU and chrF of both on the test set(s).

    .venv/bin/python benchmarks/mt_peer.py --minutes 15                 # ~33 minutes in all
    .venv/bin/python benchmarks/mt_peer.py --minutes 15 --peer-size recipe
    .venv/bin/python benchmarks/mt_peer.py --minutes 60 --side-by-side --name mt_peer60   # ~70 minutes, two CPUs
    python benchmarks/mt_peer.py --peer-only --peer-size base --device cuda --autocast bf16 --minutes 7 \
        --upsample-dictionary 1 --vocab-size 8000 --max-tokens 16384 --name mt_peer_gpu   # one GPU, the peer alone

The peer is built the way the PyTorch tutorial "Language Translation with nn.Transformer" builds one, with the
changes the issue asks for: ``nn.Transformer`` with pre-norm (``norm_first=True``), token embeddings scaled by
sqrt(d_model) plus sinusoidal positions, one embedding table shared by source, target and the output layer
(tied), cross-entropy with label smoothing 0.1, Adam (betas 0.9/0.98, eps 1e-9), greedy decoding that re-runs
the decoder on the whole prefix at each step (no cache), as the tutorial's ``greedy_decode`` does (batched
here). ``--peer-size tutorial`` keeps the tutorial's size and optimizer (d_model 512, 8 heads, FF 512, 3+3
layers, dropout 0.1, constant lr 1e-4); ``--peer-size recipe`` gives it attnkit's recipe size and schedule
(d_model 128, 4 heads, 2+2 layers, no dropout, warmup 150 + cosine to the end of the budget, the recipe's peak
learning rate), so that only the implementation and the recipe's other choices differ; its feed-forward block is
``nn.Transformer``'s ReLU block of 512, which has the parameters and products of the recipe's SwiGLU block of 344.
``--peer-size base`` is the GPU run's size (``transformer-base``: d_model 512, 8 heads, FF 2048, 6+6 layers, dropout
0.2; Adam at a peak of 1e-3, warmup 500 + cosine), for the GPU row of issue #44: there ``--peer-only`` trains the
peer alone (attnkit's run at the same minutes is ``benchmarks/mt_de_en.py``'s, one device call each), with
``--device cuda --autocast bf16`` as attnkit's run has them.

Both see the same pairs, the same joint BPE (``attnkit.data.pipeline.mt_batching.train_joint_bpe``, same vocabulary size,
deterministic), the same length limit and the same token-budget batches (``TokenBudgetBatcher``, same seed).
attnkit runs as the user would run it: ``attnkit train mt --data TRAIN --valid VALID --max-time M`` with its
defaults (its budget includes its own periodic evaluation); the peer trains for the same wall-clock minutes
(without evaluations). Test decoding is greedy for both, in float32 (after ``--autocast`` training too).

Outputs (``--name``, default ``mt_peer``), in ``--results`` (default ``benchmarks/records/mt/``; a ``--smoke-steps``
run's stay in its work folder): ``<name>.json``
(figures, commands, load average samples, samples), ``<name>.md`` (the run's record, linked from
docs/experiments/mt.md) and ``<name>_loss.png`` (training loss against minutes, both runs; same tokenizer and
label smoothing, so comparable).

Axis legend: B batch (sentences), S source length, T target length, C d_model, V vocabulary.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import path_flag  # noqa: E402
from benchmarks.mt_de_en import LoadSampler, machine_description, run_script, upsample_dictionary  # noqa: E402
from attnkit.recipes import MT_DEFAULT_MAX_LEN, MT_DEFAULT_MAX_TOKENS, MT_DEFAULT_VOCAB, MT_DEFAULTS  # noqa: E402
from attnkit.training.device import autocast_context  # noqa: E402

# (d_model, heads, FF, encoder layers, decoder layers, dropout); optimizer settings below.
PEER_SIZES = {
    "tutorial": dict(d_model=512, nhead=8, dim_feedforward=512, num_encoder_layers=3, num_decoder_layers=3,
                     dropout=0.1),
    "recipe": dict(d_model=128, nhead=4, dim_feedforward=512, num_encoder_layers=2, num_decoder_layers=2,
                   dropout=0.0),  # as the transformer-cpu preset, with a ReLU block of the same parameter count
    "base": dict(d_model=512, nhead=8, dim_feedforward=2048, num_encoder_layers=6, num_decoder_layers=6,
                 dropout=0.2),  # transformer-base with the GPU run's dropout (--set dropout=0.2)
}
PEER_OPTIM = {
    "tutorial": dict(lr=1e-4, schedule="constant", warmup=0),
    "recipe": dict(lr=MT_DEFAULTS["lr"], schedule="cosine", warmup=150),
    "base": dict(lr=1e-3, schedule="cosine", warmup=500),  # the GPU run's --lr 1e-3 --warmup-steps 500
}


class PeerTranslator(nn.Module):
    """The tutorial's ``Seq2SeqTransformer`` with one shared, tied embedding table and pre-norm.

    Shape: ``forward(src (B, S), tgt_in (B, T), src_pad (B, S), tgt_pad (B, T)) -> logits (B, T, V)``.
    """

    def __init__(self, vocab_size: int, *, d_model: int, nhead: int, dim_feedforward: int, num_encoder_layers: int,
                 num_decoder_layers: int, dropout: float, max_len: int = 256):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, d_model)
        position = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
        self.register_buffer("pe", pe, persistent=False)  # (max_len, C)
        self.dropout = nn.Dropout(dropout)
        self.transformer = nn.Transformer(d_model=d_model, nhead=nhead, num_encoder_layers=num_encoder_layers,
                                          num_decoder_layers=num_decoder_layers, dim_feedforward=dim_feedforward,
                                          dropout=dropout, batch_first=True, norm_first=True)
        self.generator = nn.Linear(d_model, vocab_size)
        self.generator.weight = self.embed.weight  # tied output layer
        for p in self.transformer.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        # The table is also the output layer: N(0, 1/d_model) (fairseq's init for shared embeddings). The default
        # N(0, 1), scaled by sqrt(d_model) on the way in and used as is on the way out, starts the loss in the
        # hundreds (the 2026-11-25 02:40 run of this benchmark had that bug: its peer figures are void).
        nn.init.normal_(self.embed.weight, mean=0.0, std=d_model ** -0.5)
        nn.init.zeros_(self.generator.bias)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:  # (B, L) -> (B, L, C)
        return self.dropout(self.embed(ids) * math.sqrt(self.d_model) + self.pe[:ids.shape[1]])

    def encode(self, src: torch.Tensor, src_pad: torch.Tensor) -> torch.Tensor:
        return self.transformer.encoder(self._embed(src), src_key_padding_mask=src_pad)  # (B, S, C)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_pad: torch.Tensor,
               tgt_pad: torch.Tensor | None = None) -> torch.Tensor:
        T = tgt_in.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).triu(1)  # (T, T) True = may not attend
        h = self.transformer.decoder(self._embed(tgt_in), memory, tgt_mask=causal, tgt_is_causal=True,
                                     tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
        return self.generator(h)  # (B, T, V)

    def forward(self, src, tgt_in, src_pad, tgt_pad):
        return self.decode(tgt_in, self.encode(src, src_pad), src_pad, tgt_pad)


def peer_lr(step: int, elapsed_fraction: float, *, lr: float, schedule: str, warmup: int) -> float:
    """The peer's learning rate: constant (the tutorial) or linear warmup + cosine over the time budget."""
    if schedule == "constant":
        return lr
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * 0.5 * (1.0 + math.cos(math.pi * min(max(elapsed_fraction, 0.0), 1.0)))


def train_peer(model: PeerTranslator, batcher: Any, *, minutes: float | None = None, steps: int | None = None,
               lr: float, schedule: str, warmup: int, label_smoothing: float = 0.1,
               log_every: int = 20, autocast: str | None = None) -> dict[str, Any]:
    """Train until ``minutes`` of wall clock (or ``steps`` updates) pass, on the device the model is on (with
    ``autocast`` "bf16": under bf16 autocast); returns steps, tokens, seconds and the training-loss curve
    ``[(minutes, loss), ...]`` averaged over ``log_every`` updates."""
    if minutes is None and steps is None:
        raise ValueError("train_peer needs minutes or steps, got neither")
    device = next(model.parameters()).device
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=label_smoothing)
    model.train()
    t0, step, tokens, curve, window = time.perf_counter(), 0, 0, [], []
    budget = None if minutes is None else minutes * 60
    while True:
        elapsed = time.perf_counter() - t0
        if (budget is not None and elapsed >= budget) or (steps is not None and step >= steps):
            break
        for g in opt.param_groups:
            g["lr"] = peer_lr(step, elapsed / budget if budget else step / steps, lr=lr, schedule=schedule,
                              warmup=warmup)
        b = batcher.batch(step).to(device)
        with autocast_context(autocast, device):
            logits = model(b.src, b.tgt_in, b.src_key_padding_mask, b.tgt_key_padding_mask)  # (B, T, V)
        loss = loss_fn(logits.float().reshape(-1, logits.shape[-1]), b.labels.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += b.n_tokens
        window.append(float(loss.detach()))  # one read a step, as the tutorial's loss.item()
        if step % log_every == 0:
            curve.append(((time.perf_counter() - t0) / 60, sum(window) / len(window)))
            window = []
    return {"steps": step, "tokens": tokens, "seconds": time.perf_counter() - t0, "curve": curve}


@torch.no_grad()
def peer_greedy(model: PeerTranslator, tokenizer: Any, sources: Sequence[Sequence[int]], *, batch_size: int = 64,
                max_len_a: float = 1.2, max_len_b: int = 10, max_len: int = 256) -> list[str]:
    """Greedy decoding as the tutorial does it (the decoder re-reads the whole prefix each step), batched, on the
    device the model is on, in float32 (as attnkit's ``eval mt`` decodes, also after ``--autocast`` training).

    ``sources`` are id lists ending with ``<eos>``; returns the detokenized hypotheses in input order. The
    sources are decoded sorted by length (as attnkit's ``translate_sentences`` does), so that one long sentence
    does not make a whole batch of short ones run to its length limit.
    """
    model.eval()
    device = next(model.parameters()).device
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    sources = [sources[i] for i in order]
    out: list[str] = []
    for start in range(0, len(sources), batch_size):
        chunk = [list(s) for s in sources[start:start + batch_size]]
        S = max(len(s) for s in chunk)
        src = torch.full((len(chunk), S), tokenizer.pad_id, dtype=torch.long)  # (B, S)
        for i, s in enumerate(chunk):
            src[i, :len(s)] = torch.tensor(s)
        src = src.to(device)
        src_pad = src == tokenizer.pad_id  # (B, S)
        limit = min(int(max_len_a * S + max_len_b), max_len - 1)
        ys = torch.full((len(chunk), 1), tokenizer.bos_id, dtype=torch.long, device=device)  # (B, 1)
        done = torch.zeros(len(chunk), dtype=torch.bool, device=device)
        memory = model.encode(src, src_pad)
        for _ in range(limit):
            nxt = model.decode(ys, memory, src_pad)[:, -1].argmax(-1)  # (B,)
            nxt = nxt.masked_fill(done, tokenizer.pad_id)
            ys = torch.cat([ys, nxt[:, None]], dim=1)
            done |= nxt == tokenizer.eos_id
            if bool(done.all()):
                break
        for row in ys[:, 1:].tolist():
            ids = row[:row.index(tokenizer.eos_id)] if tokenizer.eos_id in row else row
            out.append(tokenizer.decode([i for i in ids if i != tokenizer.pad_id], skip_special_tokens=True))
    in_order = [""] * len(out)
    for k, i in enumerate(order):
        in_order[i] = out[k]
    return in_order


def scores(hyps: list[str], refs: list[str]) -> dict[str, float]:
    import sacrebleu

    return {"bleu": float(sacrebleu.corpus_bleu(hyps, [refs]).score),
            "chrf": float(sacrebleu.corpus_chrf(hyps, [refs]).score), "sentences": len(hyps)}


def run_peer(train_path: Path, test_sets: dict[str, Path], *, minutes: float | None, steps: int | None,
             size: str, vocab_size: int, max_tokens: int, max_len: int, seed: int,
             max_sentences: int | None = None, device: str = "cpu", autocast: str | None = None) -> dict[str, Any]:
    """Tokenize, train the peer for the budget on ``device``, decode every test set; returns figures and
    hypotheses."""
    from attnkit.data.pipeline.mt_batching import TokenBudgetBatcher, encode_pairs, train_joint_bpe
    from attnkit.data.corpora.parallel import load_parallel

    train = load_parallel(train_path)
    tokenizer = train_joint_bpe(train.sources, train.targets, vocab_size)
    enc = encode_pairs(tokenizer, train.sources, train.targets, max_src_len=max_len)
    batcher = TokenBudgetBatcher(enc, max_tokens=max_tokens, seed=seed, shuffle=True)
    torch.manual_seed(seed)
    model = PeerTranslator(tokenizer.vocab_size, max_len=max_len, **PEER_SIZES[size]).to(device)
    fit = train_peer(model, batcher, minutes=minutes, steps=steps, autocast=autocast, **PEER_OPTIM[size])
    results, hyps = {}, {}
    for name, path in test_sets.items():
        corpus = load_parallel(path)
        n = len(corpus) if max_sentences is None else min(max_sentences, len(corpus))
        src = encode_pairs(tokenizer, corpus.sources[:n], corpus.targets[:n], max_src_len=max_len).src
        hyps[name] = peer_greedy(model, tokenizer, src, max_len=max_len)
        results[name] = scores(hyps[name], corpus.targets[:n])
    return {"size": size, "config": {**PEER_SIZES[size], **PEER_OPTIM[size]},
            "parameters": sum(p.numel() for p in model.parameters()), "train": fit, "test": results,
            "hypotheses": hyps, "vocab_size": tokenizer.vocab_size}


def attnkit_cmd(args: list[str], env: dict[str, str]) -> None:
    print("$ attnkit " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "attnkit", *args], check=True, env=env, cwd=ROOT)


def plot_curves(curves: dict[str, list[tuple[float, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, curve in curves.items():
        if curve:
            ax.plot([c[0] for c in curve], [c[1] for c in curve], label=name)
    ax.set_xlabel("minutes of training (wall clock)")
    ax.set_ylabel("training loss (label-smoothed, per target token)")
    ax.set_ylim(top=8)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=15.0, help="training budget of each of the two runs")
    p.add_argument("--data", default=None,
                   help="prepared data folder (train/valid/test.tsv; default: the de-en recipe)")
    p.add_argument("--train", type=Path, default=None,
                   help="training TSV (default: the de-en train.tsv with the Ding pairs x3, as mt_de_en.py)")
    p.add_argument("--peer-size", choices=sorted(PEER_SIZES), default="tutorial")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=path_flag, default=None, help="work folder (default runs/bench-mt-peer-<time>)")
    p.add_argument("--results", type=path_flag, default=None, help="where <name>.json/.md/_loss.png go (default "
                   "benchmarks/records/mt; with --smoke-steps the work folder)")
    p.add_argument("--smoke-steps", type=int, default=None, metavar="N",
                   help="check the logic: N updates each and 20 test sentences (not a benchmark figure)")
    p.add_argument("--attnkit-args", default="", help="extra flags for `attnkit train mt` (space-separated)")
    p.add_argument("--side-by-side", action="store_true",
                   help="train the two at the same time, attnkit pinned to one CPU and the peer to another "
                        "(needs two CPUs; the default runs them one after the other)")
    p.add_argument("--name", default="mt_peer", help="file name stem of the outputs in --results")
    p.add_argument("--device", default="cpu", help="where both train and decode, e.g. cuda (default cpu)")
    p.add_argument("--autocast", choices=("bf16",), default=None,
                   help="train under bf16 autocast (both sides decode in float32, as `attnkit eval mt` does)")
    p.add_argument("--upsample-dictionary", type=int, default=3, metavar="K",
                   help="the default training data: the de-en train.tsv with the Ding pairs K times (default 3; "
                        "1 = train.tsv as it is)")
    p.add_argument("--vocab-size", type=int, default=MT_DEFAULT_VOCAB,
                   help=f"joint BPE vocabulary of both (default {MT_DEFAULT_VOCAB}, the recipe's)")
    p.add_argument("--max-tokens", type=int, default=MT_DEFAULT_MAX_TOKENS,
                   help=f"tokens per batch of both (default {MT_DEFAULT_MAX_TOKENS}, the recipe's)")
    p.add_argument("--peer-only", action="store_true",
                   help="train and score the peer alone (attnkit's run at the same minutes measured elsewhere, "
                        "e.g. by benchmarks/mt_de_en.py on the same GPU)")
    args = p.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    if args.side_by_side and (args.peer_only or args.device != "cpu"):
        p.error("--side-by-side pins each run to a CPU: it takes neither --peer-only nor a --device other than cpu")
    if args.side_by_side and len(cpus) < 2:
        p.error(f"--side-by-side needs two CPUs, this process may use {len(cpus)}")
    if args.upsample_dictionary < 1:
        p.error(f"--upsample-dictionary must be >= 1, got {args.upsample_dictionary}")
    if not 0 < args.minutes < float("inf"):  # NaN is refused too
        p.error(f"--minutes must be a number > 0, got {args.minutes:g}")
    for flag, value in (("--threads", args.threads), ("--smoke-steps", args.smoke_steps),
                        ("--max-tokens", args.max_tokens)):
        if value is not None and value < 1:  # before the work folder is made
            p.error(f"{flag} must be >= 1, got {value}")
    out = args.out or ROOT / "runs" / f"bench-mt-peer-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists():
        p.error(f"--out {out} already exists: choose another folder")
    if args.results is None:  # a smoke run is no figure: its record stays with its work folder
        args.results = HERE / "records" / "mt" if args.smoke_steps is None else out
    out.mkdir(parents=True, exist_ok=False)
    torch.set_num_threads(args.threads)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    sampler = LoadSampler()
    sampler.start()

    if args.data is None:
        from attnkit.data.corpora.registry import prepare

        prepared = prepare("de-en")
    else:
        prepared = Path(args.data)
    train_path = args.train
    if train_path is None and args.upsample_dictionary == 1:
        train_path = prepared / "train.tsv"
    elif train_path is None:
        train_path = out / f"train_ding{args.upsample_dictionary}.tsv"
        print(f"training data {train_path}: {upsample_dictionary(prepared, train_path, args.upsample_dictionary)}",
              flush=True)
    test_sets = {name: prepared / f"{name}.tsv" for name in ("test", "test-docs") if (prepared / f"{name}.tsv").is_file()}
    smoke = args.smoke_steps is not None
    length = ["--steps", str(args.smoke_steps)] if smoke else ["--max-time", f"{args.minutes:g}"]
    limit = ["--max-sentences", "20"] if smoke else []
    where = ["--device", args.device] + (["--autocast", args.autocast] if args.autocast else [])

    def train_and_decode_peer() -> dict[str, Any]:
        return run_peer(train_path, test_sets, minutes=None if smoke else args.minutes, steps=args.smoke_steps,
                        size=args.peer_size, vocab_size=args.vocab_size, max_tokens=args.max_tokens,
                        max_len=MT_DEFAULT_MAX_LEN, seed=MT_DEFAULTS["seed"], max_sentences=20 if smoke else None,
                        device=args.device, autocast=args.autocast)

    # 1. attnkit, with the defaults of `attnkit train mt` (and the sizes given here)
    sizes: list[str] = []
    for flag, value, default in (("--vocab-size", args.vocab_size, MT_DEFAULT_VOCAB),
                                 ("--max-tokens", args.max_tokens, MT_DEFAULT_MAX_TOKENS)):
        sizes += [flag, str(value)] if value != default else []
    run = out / "attnkit"
    train_args = ["train", "mt", "--data", str(train_path), "--valid", str(prepared / "valid.tsv"), *length,
                  "--no-progress", "--out", str(run), *where, *sizes, *args.attnkit_args.split()]
    ours, peer = None, None
    if args.side_by_side:  # attnkit on the first CPU, the peer (this process) on the second, both at once
        print(f"$ taskset -c {cpus[0]} attnkit " + " ".join(train_args), flush=True)
        os.sched_setaffinity(0, {cpus[1]})
        training = subprocess.Popen(["taskset", "-c", str(cpus[0]), sys.executable, "-m", "attnkit", *train_args],
                                    env=env, cwd=ROOT)
        try:
            peer = train_and_decode_peer()
        finally:
            os.sched_setaffinity(0, cpus)  # this process may use every CPU again (main() may be called in-process)
        if training.wait() != 0:
            raise subprocess.CalledProcessError(training.returncode, training.args)
    elif not args.peer_only:
        attnkit_cmd(train_args, env)
    if not args.peer_only:
        ours = score_attnkit(run, out, test_sets, train_args, ["--device", args.device, *limit], env)  # float32

    # 2. the peer, same data, same minutes (already trained with --side-by-side)
    if peer is None:
        peer = train_and_decode_peer()
    loads = sampler.stop()

    curves = {f"torch.nn.Transformer ({args.peer_size})": peer["train"]["curve"]}
    if ours is not None:
        curves = {"attnkit (train mt defaults)": ours.pop("curve"), **curves}
    plot_curves(curves, args.results / f"{args.name}_loss.png")
    samples = []
    if "test" in test_sets:
        from attnkit.data.corpora.parallel import load_parallel

        corpus = load_parallel(test_sets["test"])
        n = len(peer["hypotheses"]["test"])
        for i in sorted(random.Random(0).sample(range(n), min(10, n))):
            samples.append({"source": corpus.sources[i], "reference": corpus.targets[i],
                            **({} if ours is None else {"attnkit": ours["hypotheses"]["test"][i]}),
                            "peer": peer["hypotheses"]["test"][i]})
    record = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "minutes": args.minutes,
              "smoke_steps": args.smoke_steps, "threads": args.threads, "side_by_side": args.side_by_side,
              "device": args.device, "autocast": args.autocast, "machine": machine_description(args.device),
              "train_data": str(train_path),
              "attnkit": None if ours is None else {k: v for k, v in ours.items() if k != "hypotheses"},
              "peer": {k: v for k, v in peer.items() if k != "hypotheses"}, "samples": samples,
              "load_average_samples": loads, "command": "python benchmarks/mt_peer.py " + " ".join(argv or sys.argv[1:])}
    (args.results / f"{args.name}.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n",
                                                    encoding="utf-8")
    md = render(record, test_sets, args.peer_size, args.name)
    (args.results / f"{args.name}.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


def score_attnkit(run: Path, out: Path, test_sets: dict[str, Path], train_args: list[str], eval_flags: list[str],
                  env: dict[str, str]) -> dict[str, Any]:
    """attnkit's side after its training: greedy BLEU / chrF of ``run`` on every test set, its updates, tokens
    and seconds, and its training-loss curve (points every 20 updates, as the peer's)."""
    ours: dict[str, Any] = {"train_command": "attnkit " + " ".join(train_args), "test": {}, "hypotheses": {}}
    for name in test_sets:
        j, h = out / f"attnkit_{name}.json", out / f"attnkit_{name}.txt"
        eval_args = ["eval", "mt", "--ckpt", str(run), "--data", str(test_sets[name]), "--beam", "1",
                     "--json", str(j), "--hyps", str(h), *eval_flags]
        attnkit_cmd(eval_args, env)
        figures = json.loads(j.read_text())
        ours["test"][name] = {"bleu": figures["bleu"], "chrf": figures["chrf"], "sentences": figures["sentences"]}
        ours["hypotheses"][name] = h.read_text(encoding="utf-8").splitlines()
        ours["eval_command"] = "attnkit " + " ".join(eval_args)
    summary = json.loads((run / "summary.json").read_text())
    ours.update(steps=summary["steps"], tokens=summary["tokens"], train_seconds=summary["elapsed"])
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve, window = [], []
    for row in metrics:
        if "loss" in row and "elapsed" in row:
            window.append(row["loss"])
            if len(window) == 2:  # log_every 10 -> points every 20 updates, as the peer's
                curve.append((row["elapsed"] / 60, sum(window) / len(window)))
                window = []
    ours["curve"] = curve
    return ours


def render(record: dict[str, Any], test_sets: dict[str, Path], peer_size: str, name: str) -> str:
    """The run's Markdown record: the scores (both sides, or the peer's alone), sizes, load, commands, samples."""
    ours, peer, loads = record["attnkit"], record["peer"], record["load_average_samples"]
    if ours is None:
        rows = "\n".join(f"| {n} | {peer['test'][n]['bleu']:.2f} / {peer['test'][n]['chrf']:.2f} |" for n in test_sets)
        scores_table = f"| test set (greedy) | torch.nn peer BLEU / chrF |\n|---|---:|\n{rows}"
        sizes = f"""| | torch.nn.Transformer peer ({peer_size}) |
|---|---|
| parameters | {peer['parameters']:,} |
| updates / target tokens | {peer['train']['steps']:,} / {peer['train']['tokens']:,} |
| training seconds | {peer['train']['seconds']:.0f} |"""
        commands = f"Command: `{record['command']}` (the peer alone: attnkit's run at these minutes is recorded apart)."
    else:
        rows = "\n".join(
            f"| {n} | {ours['test'][n]['bleu']:.2f} / {ours['test'][n]['chrf']:.2f} | "
            f"{peer['test'][n]['bleu']:.2f} / {peer['test'][n]['chrf']:.2f} | "
            f"{ours['test'][n]['bleu'] - peer['test'][n]['bleu']:+.2f} |" for n in test_sets)
        scores_table = ("| test set (greedy) | attnkit BLEU / chrF | torch.nn peer BLEU / chrF | BLEU difference |\n"
                        f"|---|---:|---:|---:|\n{rows}")
        sizes = f"""| | attnkit (`train mt` defaults) | torch.nn.Transformer peer ({peer_size}) |
|---|---|---|
| parameters | see the run's log | {peer['parameters']:,} |
| updates / target tokens | {ours['steps']:,} / {ours['tokens']:,} | {peer['train']['steps']:,} / {peer['train']['tokens']:,} |
| training seconds | {ours['train_seconds']:.0f} (incl. its evaluations) | {peer['train']['seconds']:.0f} |"""
        commands = f"Command: `{record['command']}`; attnkit ran `{ours['train_command']}`."
    sides = ["source (de)", "reference (en)", *(["attnkit"] if ours is not None else []), "peer"]
    sample_rows = "\n".join("| " + " | ".join(s[k] for k in ("source", "reference", "attnkit", "peer") if k in s)
                            + " |" for s in record["samples"])
    return f"""{scores_table}

{sizes}

Machine: {record['machine']}. Load (1-min average, sampled every 30 s): min {min(loads):.1f}, median \
{sorted(loads)[len(loads) // 2]:.1f}, max {max(loads):.1f}.
{commands}

![training loss{', attnkit and the peer' if ours is not None else ' of the peer'}]({name}_loss.png)

Ten Ding test sentences (random, seed 0):

| {' | '.join(sides)} |
|{'---|' * len(sides)}
{sample_rows}
"""


if __name__ == "__main__":
    run_script(main, "mt_peer.py")
