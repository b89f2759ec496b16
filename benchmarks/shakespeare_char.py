"""Quality benchmark: character-level GPT on Tiny Shakespeare within a wall-clock budget.

The standard 1,115,394-byte Tiny Shakespeare file, first 90% of characters train / last 10% valid, a
character vocabulary from the whole file (65 symbols), as nanoGPT's ``shakespeare_char`` recipe does.
Training runs through attnkit's one training loop (``Trainer`` + ``LMTask``) for ``--max-time`` minutes;
afterwards the final model is evaluated on every non-overlapping window of the valid split (not just a
few random batches), and the figures are printed as JSON with the command, date and machine (and appended to
``--record`` if given).

Usage::

    python benchmarks/shakespeare_char.py PATH/tinyshakespeare.txt --max-time 1.283 \
        --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --lr 1e-3

The machine load (``/proc/loadavg``) before and after is recorded with the result.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the benchmarks package importable
    sys.path.insert(0, str(ROOT))


def full_valid_loss(model: torch.nn.Module, data: torch.Tensor, block_size: int, batch: int = 64) -> float:
    """Mean next-character cross-entropy over all non-overlapping windows of ``data``."""
    n = (data.numel() - 1) // block_size
    x = data[: n * block_size].view(n, block_size)
    y = data[1: n * block_size + 1].view(n, block_size)
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for i in range(0, n, batch):
            logits = model(x[i:i + batch])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y[i:i + batch].flatten(), reduction="sum")
            total += float(loss)
            count += y[i:i + batch].numel()
    return total / count


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    from attnkit.checkpoints.runs import check_new_run_folder
    from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
    from attnkit.models.builders import build_gpt
    from attnkit.models.configs import GPTConfig
    from attnkit.models.params import count_parameters
    from attnkit.training import LMTask, TrainConfig, Trainer, seed_everything
    from benchmarks.harness import machine_info, path_flag

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", type=Path, help="tinyshakespeare.txt")
    p.add_argument("--max-time", type=float, default=None, help="training budget in minutes (wall clock)")
    p.add_argument("--steps", type=int, default=None, help="train a fixed number of steps instead (for tuning)")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--position", default="learned", help="learned | rope")
    p.add_argument("--activation", default="gelu_tanh")
    p.add_argument("--norm", default="layernorm")
    p.add_argument("--bias", type=int, default=1)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--record", type=path_flag, default=None, help="append the JSON result to this file")
    p.add_argument("--out", type=path_flag, default=None, help="run folder (default: a temporary one)")
    args = p.parse_args(argv)

    if args.steps is None and args.max_time is None:
        p.error("give --max-time (the benchmark) or --steps (tuning)")
    if args.threads is not None and args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    try:  # a bad flag or file: one line (as attnkit's commands say it), before any training
        cfg = GPTConfig(vocab_size=65, block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head,
                        n_embd=args.n_embd, dropout=args.dropout, position=args.position, activation=args.activation,
                        norm=args.norm, bias=bool(args.bias), tie_embeddings=True)
        tc = TrainConfig(steps=args.steps, max_time=args.max_time, batch_size=args.batch_size,
                         block_size=args.block_size, lr=args.lr, min_lr=args.min_lr, warmup_steps=args.warmup_steps,
                         schedule="cosine", weight_decay=args.weight_decay, betas=(0.9, args.beta2), grad_clip=1.0,
                         eval_every=10**9, eval_batches=4, log_every=50, ckpt_every=10**9, seed=args.seed)
        if args.out is not None:
            check_new_run_folder(args.out)
        text = args.path.read_text(encoding="utf-8")
        tok = CharTokenizer.train(text)
        data = torch.tensor(tok.encode(text), dtype=torch.long)
        n = int(0.9 * data.numel())
        train, valid = data[:n], data[n:]
        task = LMTask(train, valid, block_size=args.block_size, batch_size=args.batch_size, seed=args.seed)
    except (ValueError, OSError) as err:
        p.error(str(err))
    if args.threads:
        torch.set_num_threads(args.threads)

    seed_everything(args.seed)
    cfg = cfg.replace(vocab_size=tok.vocab_size)
    model = build_gpt(cfg)
    out = args.out or Path(tempfile.mkdtemp(prefix="shakespeare-char-")) / "run"
    load_before = loadavg()
    t0 = time.perf_counter()
    summary = Trainer(model, task, tc, out, model_config=cfg, progress=sys.stderr.isatty()).fit()
    wall = time.perf_counter() - t0
    vloss = full_valid_loss(model, valid, args.block_size)
    result = {
        "valid_loss": round(vloss, 4), "train_loss_last": round(summary["train_loss"], 4),
        "steps": summary["steps"], "train_seconds": round(summary["elapsed"], 1),
        "wall_seconds_incl_setup_and_final_ckpt": round(wall, 1),
        "tokens": summary["tokens"], "tokens_per_s": round(summary["tokens"] / summary["elapsed"]),
        "params": count_parameters(model), "threads": torch.get_num_threads(),
        "loadavg_before": load_before, "loadavg_after": loadavg(),
        "command": "python benchmarks/shakespeare_char.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine_info(),
    }
    print(json.dumps(result))
    if args.record:
        with open(args.record, "a", encoding="utf-8") as f:
            f.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
