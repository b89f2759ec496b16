"""``python -m benchmarks.gpu``: every GPU measurement of issue #40 in one call, written into one record.

    python -m benchmarks.gpu --nanogpt peers/nanogpt/model.py --data peers/data/tinyshakespeare.txt --record

Pieces (``--only`` picks some, comma-separated; each runs in a child process of its own, under a time limit, so
one that fails or runs out of time leaves the others' figures):

* ``lm``: GPT-2 small (12 x 768, vocabulary 50304, no biases), batch 16 x 1024, bf16 autocast, ``torch.compile``,
  fused AdamW. attnkit: ``attnkit train lm`` end to end (tokens/s as its metrics log them, MFU, the compilation
  = its first update, peak memory); nanoGPT: its ``model.py`` (``GPT(...)(X, Y)`` returns the loss, compiled
  with the model) and its ``configure_optimizers`` in the loop of its ``bench.py`` (the loss read back after
  every step), timed in windows of 5 steps after 10 warm-up steps. Ratio of the medians.
* ``char``: the Tiny Shakespeare character model of nanoGPT's ``train_shakespeare_char`` config (6 x 384, batch
  64 x 256, dropout 0.2, lr 1e-3 cosine to 1e-4 over 5,000 steps, warmup 100, beta2 0.99). attnkit: ``attnkit
  train lm --stop-at-loss 1.47 --schedule-steps 5000`` (``benchmarks.gpu_proof``'s command) each way of
  ``--char-ways`` (default ``cuda-graphs``; ``compile`` too on request); nanoGPT: its model in the loop of its
  ``train.py`` (evaluation every 250 steps on 200 validation batches), each within ``--minutes`` (default 1.25,
  compilation included). For each: the time and step of the first evaluation at or below the target (compilation
  included), the best and final validation loss, the first update (the compilation), and iterations/s outside
  evaluation.
* ``moonshot``: the issue's moonshot, valid <= 1.47 in half of nanoGPT's time: the recipe ``train lm --recipe
  shakespeare-char-gpu``, or with ``--explore`` every candidate recipe it was chosen from (:data:`MOONSHOT`:
  learning rate, Muon, batch, a shorter cosine), with CUDA graphs, each within 30 s.
* ``generate``: greedy decoding with GPT-2 small (random weights, bf16), a 16-token prompt, 256 new tokens, batch
  1 and 16: attnkit's ``generate(compile=True)`` against Hugging Face ``generate`` with its static cache, whose
  forward generate compiles itself on a GPU (``reduce-overhead``: CUDA graphs); tokens/s (after a warm-up call that
  compiles) and the share of the memory-bandwidth bound (weights + the KV cache read once per step, at the copy
  bandwidth measured in the same process). Each side and batch size runs in a process of its own.
* ``mt``: ``transformer-base`` sizes (6 + 6 layers, 512 wide, post-norm, dropout 0.1, 8,000 tokens) against
  ``torch.nn.Transformer`` of the same sizes (``benchmarks/bench_seq2seq.py``'s peer), both through attnkit's
  Trainer on the same token-budget batches (16,384 tokens; synthetic pairs with a seeded length distribution, of
  a few fixed shapes) and optimizer, bf16 autocast, in the ways of :data:`MT_WAYS` or ``--mt-ways`` (attnkit with
  CUDA graphs as ``train mt --cuda-graphs`` runs, torch.nn eager, attnkit eager; ``torch_nn:graphs`` on request):
  updates/s of the intervals in which no graph was recorded, and the GPU's busy share (NVML, sampled every 0.1 s)
  within them.
* ``profile``: ``torch.profiler`` over 3 steps after the warm-up ones, each side of the targets missed
  (:data:`PROFILE_WAYS`: GPT-2 small compiled, attnkit's Trainer and nanoGPT's loop; transformer-base eager,
  attnkit and torch.nn; and over one decoding call at batch 1, attnkit and HF, a step being a token): the step's
  wall and GPU time and the kernels (on the CPU: the operators) that take most of it.
* ``memory``: peak memory of one LM training step (GPT-2 vocabulary, a small model) six ways: eager; the model
  compiled and the loss outside it; the model and the task's loss compiled together (what ``train lm
  --compile`` does); eager with ``--loss-chunks`` (the logits of about 256 rows at a time, recomputed in the
  backward pass), with ``--activation-checkpointing``, and with both. On the CPU too: peak RSS of a child process
  (``/proc/self/clear_refs``, glibc's mmap threshold lowered so that freed tensors leave the RSS).

The peers' code is not part of attnkit: nanoGPT's ``model.py`` is read from ``--nanogpt`` (fetch it into the
git-ignored ``peers/`` folder, which a GPU call carries); a piece whose peer is missing says so and measures
attnkit alone. ``--smoke`` runs every piece at tiny sizes on the CPU (the tests do); ``--record`` writes
``benchmarks/records/gpu/gpu_issue40.json`` and ``.md`` and the table between the ``gpu-issue40`` markers of
the "GPU speed" section of ``benchmarks/RESULTS.md``; ``--json PATH`` writes the results after every piece, and
``--record-from PATH`` records such a file later (what a GPU call brings back in its ``$OUT``); a record keeps the
pieces of the previous one that a call did not measure, each marked with its own call. On a GPU the default pieces
are ``lm,char,moonshot,mt,generate`` (``profile`` and ``memory`` compile several times: ask for them with
``--only``).

Axis legend: B batch, T sequence length, C width, V vocabulary.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import gpu_proof as P  # noqa: E402

PIECES = ("lm", "char", "moonshot", "mt", "generate", "profile", "memory")
RECORD_JSON = ROOT / "benchmarks" / "records" / "gpu" / "gpu_issue40.json"
RECORD_MD = ROOT / "benchmarks" / "records" / "gpu" / "gpu_issue40.md"
RESULTS_MD = ROOT / "benchmarks" / "RESULTS.md"
BEGIN = "<!-- gpu-issue40:begin (written by `python -m benchmarks.gpu --record`) -->"
END = "<!-- gpu-issue40:end -->"
DEFAULT_NANOGPT = ROOT / "peers" / "nanogpt" / "model.py"
_RESULT = "RESULT "  # the line a child prints its JSON result on
# seconds each piece may take on a GPU, compilations and process starts included ("char": per run, on top of its
# --minutes; "moonshot": per candidate, on top of its budget); the call as a whole stops starting pieces at --budget
# (default 8 minutes of device time); profile and memory (compilations) are left out of the default list on a GPU
LIMITS = {"lm": 180, "char": 40, "moonshot": 25, "mt": 160, "generate": 320, "profile": 330, "memory": 100}
DEFAULT_GPU = ("lm", "char", "moonshot", "mt", "generate")
DEFAULT_MINUTES = 1.25  # char: each side's budget (the issue's H100 run reached 1.4638 after 59 s)


def _limit(piece: str, args: argparse.Namespace) -> float:
    """A piece's time limit: :data:`LIMITS` (char: each run's ``--minutes`` and its start, for every way and
    nanoGPT; moonshot: each candidate's budget and start) on a GPU; ten times it on a CPU (compilation there takes
    far longer)."""
    if piece == "char":
        seconds = (len(_char_ways(args)) + 1) * (args.minutes * 60 + LIMITS["char"])
    elif piece == "moonshot":
        seconds = len(_moonshot_candidates(args)) * (min(args.minutes, MOONSHOT_MINUTES) * 60 + LIMITS["moonshot"])
    else:
        seconds = LIMITS[piece]
    return seconds * (1 if str(args.device).startswith("cuda") else 10)

SIZES = {  # the measurements of the issue, and --smoke's
    "lm": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304, batch_size=16, steps=40,
               warmup=10, timed=30),
    "char": dict(P.NANOGPT_CHAR, steps=5000, eval_every=250, eval_batches=200, vocab_size=None),
    "generate": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, prompt=16, new=256, batches=(1, 16)),
    "mt": dict(d_model=512, num_heads=8, layers=6, dim_feedforward=2048, dropout=0.1, vocab_size=8000,
               max_tokens=16384, steps=200, log_every=20),
    "memory": dict(n_layer=2, n_head=4, n_embd=128, block_size=256, vocab_size=50304, batch_size=8, chunk=256),
}
SMOKE = {
    "lm": dict(SIZES["lm"], n_layer=1, n_head=2, n_embd=32, block_size=32, vocab_size=128, batch_size=4, steps=6,
               warmup=2, timed=5),
    "char": dict(P.SMOKE_CHAR, steps=40, eval_every=5, eval_batches=2, vocab_size=None),
    "generate": dict(n_layer=1, n_head=2, n_embd=32, vocab_size=128, prompt=4, new=8, batches=(1, 2)),
    "mt": dict(d_model=32, num_heads=2, layers=1, dim_feedforward=64, dropout=0.1, vocab_size=200, max_tokens=256,
               steps=6, log_every=2),
    "memory": dict(n_layer=1, n_head=2, n_embd=32, block_size=32, vocab_size=512, batch_size=2, chunk=16),
}
MEMORY_WAYS = ("eager", "compiled model, loss outside", "compiled together", "chunked cross-entropy",
               "activation checkpointing", "checkpointing + chunked")


# ---------------------------------------------------------------------------------------------------------------------
# helpers shared by the pieces
# ---------------------------------------------------------------------------------------------------------------------
def load_nanogpt(path: Path):
    """nanoGPT's ``model.py`` as a module (``GPT``, ``GPTConfig``), read from ``path``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"nanoGPT's model.py is not at {path}: fetch nanoGPT (github:karpathy/nanoGPT) and put "
                                f"its model.py there (the git-ignored peers/ folder), or pass --nanogpt PATH")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _char_ids(path: Path):
    """The text's characters as ids of its sorted character set (nanoGPT's and attnkit's char vocabulary):
    ``(ids (N,) int64 tensor, vocabulary size)``."""
    import torch

    text = path.read_text(encoding="utf-8")
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return torch.tensor([index[c] for c in text], dtype=torch.long), len(chars)


def _windows(ids, n_batch: int, block: int, generator):
    """``n_batch`` random windows of ``ids``: inputs and next-token targets, ``(B, T)`` each."""
    import torch

    starts = torch.randint(0, ids.numel() - block - 1, (n_batch,), generator=generator)
    rows = ids[starts[:, None] + torch.arange(block + 1)]  # (B, T + 1)
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def _to(batch, device):
    """A host batch on ``device``: pinned and without blocking on CUDA (as both peers do)."""
    return tuple((t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t) for t in batch)


def _autocast(device, off: bool):
    """bf16 autocast on ``device``, or nothing when ``off``."""
    import contextlib

    import torch

    return contextlib.nullcontext() if off else torch.autocast(device.type, dtype=torch.bfloat16)


def _run(cmd: list[str], timeout: float, env: dict | None = None, *, check: bool = False
         ) -> subprocess.CompletedProcess:
    """Run ``cmd`` from the repository; with ``check`` a non-zero exit raises ``ValueError`` (a piece's error: its
    figures are never read from a folder an earlier call left)."""
    print("$ " + shlex.join(cmd), file=sys.stderr, flush=True)
    full_env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=sys.stderr, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise ValueError(f"`{shlex.join(cmd[1:5])} ...` exited with status {proc.returncode}")
    return proc


def _child(piece: str, args: argparse.Namespace, timeout: float, env: dict | None = None, way: str | None = None
           ) -> dict:
    """Run ``python -m benchmarks.gpu --child PIECE`` (with this call's options) and return its result (an
    ``error`` when it failed or ran out of time)."""
    cmd = [sys.executable, "-m", "benchmarks.gpu", "--child", piece, "--device", args.device, "--data",
           str(args.data), "--nanogpt", str(args.nanogpt), "--minutes", str(args.minutes), "--work", str(args.work)]
    cmd += [flag for flag, on in (("--smoke", args.smoke), ("--bf16", args.bf16)) if on]
    cmd += [] if args.peak_tflops is None else ["--peak-tflops", str(args.peak_tflops)]
    cmd += [] if way is None else ["--way", way]
    cmd += [] if args.char_ways is None else ["--char-ways", args.char_ways]
    cmd += [] if args.mt_ways is None else ["--mt-ways", args.mt_ways]
    cmd += ["--explore"] if args.explore else []
    try:
        proc = _run(cmd, timeout, env)
    except subprocess.TimeoutExpired:
        return {"error": f"over its time limit of {timeout:.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith(_RESULT)]
    if proc.returncode != 0 or not lines:
        return {"error": f"exit status {proc.returncode}"}
    return json.loads(lines[-1][len(_RESULT):])


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


# ---------------------------------------------------------------------------------------------------------------------
# lm: train lm vs nanoGPT's bench.py loop
# ---------------------------------------------------------------------------------------------------------------------
def lm_command(data: Path, out: Path, *, device: str, s: dict, smoke: bool) -> list[str]:
    """``attnkit train lm`` with bench.py's shapes (GPT-2 small without biases, vocabulary 50304)."""
    cmd = [sys.executable, "-m", "attnkit", "train", "lm", "--data", str(data), "--tokenizer", "char",
           "--preset", "gpt2", *P._sets(s, ("n_layer", "n_head", "n_embd", "vocab_size")), "--set", "bias=false",
           "--block-size", str(s["block_size"]), "--batch-size", str(s["batch_size"]), "--steps", str(s["steps"]),
           "--lr", "6e-4", "--min-lr", "6e-5", "--warmup-steps", "2", "--eval-every", str(s["steps"]),
           "--eval-batches", "1", "--ckpt-every", str(s["steps"]), "--log-every", "5", "--device", device,
           "--out", str(out), "--no-progress"]
    return cmd + ([] if smoke else ["--autocast", "bf16", "--compile"])


def nanogpt_bench(args: argparse.Namespace, steps: int | None = None, after_step=None) -> dict:
    """nanoGPT's model and optimizer in the loop of its bench.py: tokens/s per window of 5 steps, peak memory.
    ``steps`` (default: the warm-up and timed ones) steps, ``after_step()`` called after each (the profile's)."""
    import torch

    nano = load_nanogpt(args.nanogpt)
    s = SMOKE["lm"] if args.smoke else SIZES["lm"]
    device = torch.device(args.device)
    torch.manual_seed(1337)
    model = nano.GPT(nano.GPTConfig(block_size=s["block_size"], vocab_size=s["vocab_size"], n_layer=s["n_layer"],
                                    n_head=s["n_head"], n_embd=s["n_embd"], dropout=0.0, bias=False)).to(device)
    optimizer = model.configure_optimizers(weight_decay=1e-2, learning_rate=1e-4, betas=(0.9, 0.95),
                                           device_type=device.type)
    compiled = model if args.smoke else torch.compile(model)
    ids, _ = _char_ids(args.data)
    gen = torch.Generator().manual_seed(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rates, t_start = [], time.perf_counter()
    first_step_s = None
    x, y = _to(_windows(ids, s["batch_size"], s["block_size"], gen), device)
    window = 5
    for step in range(steps or s["warmup"] + s["timed"]):
        if step >= s["warmup"] and (step - s["warmup"]) % window == 0:
            _sync(device)
            t0 = time.perf_counter()
        with _autocast(device, args.smoke):
            _, loss = compiled(x, y)
        x, y = _to(_windows(ids, s["batch_size"], s["block_size"], gen), device)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()  # bench.py reads the loss after every step
        if first_step_s is None:
            first_step_s = time.perf_counter() - t_start
        if step >= s["warmup"] and (step - s["warmup"]) % window == window - 1:
            _sync(device)
            rates.append(window * s["batch_size"] * s["block_size"] / (time.perf_counter() - t0))
        if after_step is not None:
            after_step()
    return {"tokens_per_s": _median(rates), "windows": rates, "first_step_s": first_step_s,
            "peak_memory": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None}


def piece_lm(args: argparse.Namespace) -> dict:
    s = SMOKE["lm"] if args.smoke else SIZES["lm"]
    out = args.work / "lm"
    cmd = lm_command(args.data, out, device=args.device, s=s, smoke=args.smoke)
    attnkit: dict = {"command": shlex.join(["python", *cmd[1:]])}
    try:
        _run(cmd, _limit("lm", args) * 0.55, check=True)  # compiling GPT-2 small, 40 steps, an evaluation, a checkpoint
        summary = json.loads((out / "summary.json").read_text())
        attnkit.update(tokens_per_s=P.steady_tokens_per_s(out / "metrics.jsonl"), peak_memory=summary["peak_memory"],
                       first_update_s=summary["first_update_s"])
    except (subprocess.TimeoutExpired, OSError, ValueError, KeyError) as err:
        attnkit["error"] = f"{type(err).__name__}: {err}"
    n = P.gpt2_params_without_positions(s)
    f = P.flops_per_token(n, s["n_layer"], s["block_size"], s["n_embd"])
    peak = args.peak_tflops or P.peak_tflops(P._device_name(args.device))
    if attnkit.get("tokens_per_s") and peak:
        attnkit["mfu"] = P.mfu(attnkit["tokens_per_s"], f, peak)
    nanogpt = _child("nanogpt-bench", args, _limit("lm", args) * 0.45) if Path(args.nanogpt).is_file() else \
        {"error": f"skipped: no nanoGPT model.py at {args.nanogpt}"}
    result = {"attnkit": attnkit, "nanogpt": nanogpt, "flops_per_token": f, "peak_tflops": peak,
              "shape": f"{s['batch_size']} x {s['block_size']}, {s['n_layer']} x {s['n_embd']}"}
    if attnkit.get("tokens_per_s") and nanogpt.get("tokens_per_s"):
        result["ratio"] = attnkit["tokens_per_s"] / nanogpt["tokens_per_s"]
    return result


# ---------------------------------------------------------------------------------------------------------------------
# char: time to target, attnkit's train lm vs nanoGPT's train.py recipe
# ---------------------------------------------------------------------------------------------------------------------
def nanogpt_char(args: argparse.Namespace) -> dict:
    """nanoGPT's model in its train.py loop with the train_shakespeare_char config, until the validation loss reaches
    the target or the budget ends: the time and step it is reached, best / final validation loss, the first
    step (the compilation), iterations/s outside evaluation."""
    import math

    import torch

    nano = load_nanogpt(args.nanogpt)
    s = SMOKE["char"] if args.smoke else SIZES["char"]
    device = torch.device(args.device)
    ids, vocab = _char_ids(args.data)
    cut = int(0.9 * ids.numel())
    train, valid = ids[:cut], ids[cut:]
    torch.manual_seed(1337)
    model = nano.GPT(nano.GPTConfig(block_size=s["block_size"], vocab_size=vocab, n_layer=s["n_layer"],
                                    n_head=s["n_head"], n_embd=s["n_embd"], dropout=s["dropout"],
                                    bias=False)).to(device)
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=s["lr"], betas=(0.9, 0.99),
                                           device_type=device.type)
    compiled = model if args.smoke else torch.compile(model)
    gen = torch.Generator().manual_seed(0)

    def lr_at(it: int) -> float:  # train.py's: linear warmup, cosine to min_lr at the last step
        warm, total = s["warmup_steps"], s["steps"]
        if it < warm:
            return s["lr"] * (it + 1) / (warm + 1)
        ratio = min(1.0, (it - warm) / max(1, total - warm))
        return s["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (s["lr"] - s["min_lr"])

    @torch.no_grad()
    def valid_loss() -> float:
        model.eval()
        total = torch.zeros((), device=device)
        for _ in range(s["eval_batches"]):
            x, y = _to(_windows(valid, s["batch_size"], s["block_size"], gen), device)
            with _autocast(device, args.smoke):
                total += compiled(x, y)[1].float()
        model.train()
        return float(total) / s["eval_batches"]

    budget, target = args.minutes * 60, P.GOAL_LOSS
    t0 = time.perf_counter()
    reached, best, last, first_step_s, rates = None, math.inf, None, None, []
    x, y = _to(_windows(train, s["batch_size"], s["block_size"], gen), device)
    it, t_window, window_steps = 0, None, 0
    while it <= s["steps"]:
        if it % s["eval_every"] == 0:
            if t_window is not None and window_steps:
                _sync(device)
                rates.append(window_steps / (time.perf_counter() - t_window))
            last = valid_loss()
            best = min(best, last)
            if reached is None and last <= target:
                reached = {"step": it, "seconds": time.perf_counter() - t0, "valid_loss": last}
                break
            t_window, window_steps = time.perf_counter(), 0
        if time.perf_counter() - t0 > budget or it == s["steps"]:
            break
        for group in optimizer.param_groups:
            group["lr"] = lr_at(it)
        with _autocast(device, args.smoke):
            _, loss = compiled(x, y)
        x, y = _to(_windows(train, s["batch_size"], s["block_size"], gen), device)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if it % 10 == 0:
            loss.item()  # train.py reads the loss every log_interval steps
        if first_step_s is None:
            _sync(device)
            first_step_s = time.perf_counter() - t0
            t_window = time.perf_counter()  # the first window starts after the compilation
        else:
            window_steps += 1
        it += 1
    return {"reached": reached, "best_valid": best, "final_valid": last, "steps": it,
            "seconds": time.perf_counter() - t0, "first_step_s": first_step_s,
            "iterations_per_s": _median(rates)}


# on a GPU (--char-ways; the call of 2026-11-29 ran both: compile 1.22x nanoGPT's iterations/s, CUDA graphs 1.28x);
# --smoke (and the CPU) runs the eager way
CHAR_WAYS = ("cuda-graphs",)


def _char_ways(args: argparse.Namespace) -> tuple[str, ...]:
    if args.smoke or not str(args.device).startswith("cuda"):
        return ("eager",)
    return tuple(w.strip() for w in (args.char_ways or ",".join(CHAR_WAYS)).split(",") if w.strip())


def _char_run(args: argparse.Namespace, name: str, timeout: float, *, way: str, recipe: dict | None = None,
              extra: tuple[str, ...] = (), schedule_steps: int | None = None, eval_every: int | None = None,
              eval_batches: int | None = None, minutes: float | None = None) -> dict:
    """One ``attnkit train lm`` run of the Shakespeare char model: its command, time to target and the
    iterations/s outside evaluation (an ``error`` when it failed)."""
    s = dict(SMOKE["char"] if args.smoke else SIZES["char"], **(recipe or {}))
    out = args.work / name
    minutes = args.minutes if minutes is None else minutes
    cmd = P.shakespeare_command(args.data, out, device=args.device, minutes=minutes, smoke=args.smoke,
                                schedule_steps=schedule_steps or s["steps"], eval_every=eval_every or s["eval_every"],
                                eval_batches=eval_batches or s["eval_batches"], way=way, recipe=recipe, extra=extra)
    result: dict = {"command": shlex.join(["python", *cmd[1:]]), "way": way}
    try:
        _run(cmd, timeout, check=True)
        result.update(P.time_to_target(out, P.GOAL_LOSS, budget_s=minutes * 60))
        result["iterations_per_s"] = P.steady_tokens_per_s(out / "metrics.jsonl") / (s["batch_size"] *
                                                                                    s["block_size"])
    except (subprocess.TimeoutExpired, OSError, ValueError, KeyError) as err:
        result["error"] = f"{type(err).__name__}: {err}"
    return result


def piece_char(args: argparse.Namespace) -> dict:
    """attnkit's ``train lm`` with nanoGPT's recipe each way of :data:`CHAR_WAYS` (eager with ``--smoke``), then
    nanoGPT's train.py loop; ``attnkit`` and the ratio are those of the way with the most iterations/s."""
    ways = _char_ways(args)
    share = _limit("char", args) / (len(ways) + 1)
    result: dict = {"ways": {way: _char_run(args, f"char-{way}", share, way=way) for way in ways}}
    nanogpt = _child("nanogpt-char", args, share) if Path(args.nanogpt).is_file() else \
        {"error": f"skipped: no nanoGPT model.py at {args.nanogpt}"}
    fast = max((w for w in ways if result["ways"][w].get("iterations_per_s")),
               key=lambda w: result["ways"][w]["iterations_per_s"], default=ways[0])
    result.update(attnkit=result["ways"][fast], nanogpt=nanogpt, target=P.GOAL_LOSS, budget_s=args.minutes * 60)
    if result["attnkit"].get("iterations_per_s") and nanogpt.get("iterations_per_s"):
        result["ratio"] = result["attnkit"]["iterations_per_s"] / nanogpt["iterations_per_s"]
    return result


# ---------------------------------------------------------------------------------------------------------------------
# moonshot: valid <= 1.47 on Tiny Shakespeare in half of nanoGPT's time, by any means the library offers
# ---------------------------------------------------------------------------------------------------------------------
# Candidate recipes, each run with CUDA graphs (no compilation to wait for), an evaluation every 100 updates on 50
# batches, stopping at the target: (name, changes to nanoGPT's config, extra flags, cosine horizon in updates).
# nanoGPT's recipe reaches 1.47 at about update 1,750 of a 5,000-update cosine; a shorter horizon lowers the learning
# rate sooner, Muon (scaled to AdamW's update size) takes larger useful steps, a larger batch costs a small model on
# a large GPU little more time per update.
def _recipe_candidate(name: str) -> tuple:
    """A :data:`MOONSHOT` candidate from a named recipe of ``attnkit.recipes.LM_RECIPES`` (its optimizer
    settings, batch, dropout and cosine; the model and batch shape are nanoGPT's in both)."""
    from attnkit.recipes import LM_RECIPES

    r = LM_RECIPES[name]
    return (f"recipe {name} (adamw lr {r['lr']:g}, horizon {r['schedule_steps']})",
            dict(lr=r["lr"], min_lr=r["min_lr"], warmup_steps=r["warmup_steps"], batch_size=r["batch_size"],
                 dropout=r["overrides"]["dropout"]), (), r["schedule_steps"])


MOONSHOT = (
    _recipe_candidate("shakespeare-char-gpu"),  # measured first as "adamw lr 2e-3, horizon 2000", then made a recipe
    ("muon lr 2e-3, horizon 2000", dict(lr=2e-3), ("--optimizer", "muon", "--muon-ns-steps", "5"), 2000),
    ("muon lr 3e-3, batch 128, horizon 1200", dict(lr=3e-3, batch_size=128), ("--optimizer", "muon",
                                                                               "--muon-ns-steps", "5"), 1200),
    ("muon lr 2e-3, dropout 0.1, horizon 1500", dict(lr=2e-3, dropout=0.1), ("--optimizer", "muon",
                                                                             "--muon-ns-steps", "5"), 1500),
)
MOONSHOT_MINUTES = 0.5  # each candidate's budget: past half of nanoGPT's 40 s it cannot meet the goal anyway


def _moonshot_candidates(args: argparse.Namespace) -> tuple:
    """The recipe (``shakespeare-char-gpu``, the first candidate), or with ``--explore`` every candidate."""
    return MOONSHOT if args.explore else MOONSHOT[:1]


def piece_moonshot(args: argparse.Namespace) -> dict:
    """The recipe, or with ``--explore`` each :data:`MOONSHOT` candidate (eager and at smoke sizes with ``--smoke``):
    time and step to the target."""
    way = "cuda-graphs" if str(args.device).startswith("cuda") and not args.smoke else "eager"
    candidates = _moonshot_candidates(args)
    share = _limit("moonshot", args) / len(candidates)
    minutes = min(args.minutes, MOONSHOT_MINUTES)
    runs = {}
    for i, (name, recipe, extra, horizon) in enumerate(candidates):
        runs[name] = _char_run(args, f"moonshot-{i}", share, way=way, recipe=recipe, extra=extra,
                               schedule_steps=horizon if not args.smoke else None, eval_every=None if args.smoke
                               else 100, eval_batches=None if args.smoke else 50, minutes=minutes)
    reached = {n: r["reached"]["seconds"] for n, r in runs.items() if r.get("reached")}
    best = min(reached, key=reached.get, default=None)
    return {"runs": runs, "way": way, "target": P.GOAL_LOSS, "budget_s": minutes * 60, "best": best}


# ---------------------------------------------------------------------------------------------------------------------
# generate: attnkit's compiled decoding vs HF generate with a static cache and torch.compile
# ---------------------------------------------------------------------------------------------------------------------
def copy_bandwidth(device) -> float | None:
    """Bytes/s of a large device-to-device copy (read + write), the memory-bandwidth bound's unit; None on CPU."""
    import torch

    if device.type != "cuda":
        return None
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(5):
        dst.copy_(src)
    _sync(device)
    return 2 * 5 * src.numel() / (time.perf_counter() - t0)


def _generate_model(args: argparse.Namespace, side: str = "attnkit"):
    """``(model, sizes, dtype)``: GPT-2 small (random weights, seeded) on the device, attnkit's or, for ``side`` hf,
    the same weights as an HF GPT2LMHeadModel set to decode with its static cache."""
    import torch

    from attnkit.models.builders import build_gpt
    from attnkit.models.presets import get_preset

    s = SMOKE["generate"] if args.smoke else SIZES["generate"]
    dtype = torch.float32 if args.smoke else torch.bfloat16
    torch.manual_seed(0)
    config = get_preset("gpt2", n_layer=s["n_layer"], n_head=s["n_head"], n_embd=s["n_embd"],
                        vocab_size=s["vocab_size"])
    model = build_gpt(config).eval()
    if side == "hf":
        from attnkit.interop.hf import to_hf

        model = to_hf(model)
        # With a static cache on a GPU, HF's generate compiles the forward itself (its CompileConfig:
        # reduce-overhead, CUDA graphs); compiling hf.forward here as well nested the two and crashed on an
        # overwritten CUDA-graph output.
        model.generation_config.cache_implementation = "static"
    return model.to(device=args.device, dtype=dtype).eval(), s, dtype


def _decoder(args: argparse.Namespace, side: str, B: int):
    """``(a call that decodes s["new"] tokens greedily for B seeded prompts, s["new"])``: attnkit's ``generate(compile=
    True)`` or HF's static-cache ``generate``; returns the new ids ``(B, new)``."""
    import torch

    from attnkit.generation.generate import generate

    model, s, _ = _generate_model(args, side)
    device = torch.device(args.device)
    prompts = torch.randint(0, s["vocab_size"], (B, s["prompt"]), generator=torch.Generator().manual_seed(B))

    def ours():
        return generate(model, prompts.to(device), max_new_tokens=s["new"], compile=not args.smoke, pad_token_id=0)

    def theirs():
        ids = prompts.to(device)
        with torch.no_grad():
            return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=s["new"],
                               min_new_tokens=s["new"], do_sample=False, pad_token_id=0)[:, s["prompt"]:]

    return (ours if side == "attnkit" else theirs), s["new"]


def generate_way(args: argparse.Namespace) -> dict:
    """One side at one batch size (``--way SIDE:B``, SIDE attnkit or hf): the first call (compilation), then
    tokens/s, the median of 3 timed calls after a warm-up call, and row 0's first tokens."""
    import torch

    side, B = args.way.split(":")
    B = int(B)
    device = torch.device(args.device)
    fn, new = _decoder(args, side, B)
    t0 = time.perf_counter()
    first = fn()  # compiles (HF's reduce-overhead records its CUDA graphs over the first calls)
    _sync(device)
    row = {"first_call_s": time.perf_counter() - t0}
    fn()
    times = []
    for _ in range(3):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    first = first.tolist() if torch.is_tensor(first) else first
    return dict(row, tokens_per_s=B * new / statistics.median(times),
                first_tokens=[int(t) for t in first[0][:8]])  # row 0's first tokens (bf16: may differ)


def piece_generate(args: argparse.Namespace) -> dict:
    """Each side and batch size in a child process of its own (a side that overruns its share of the time limit
    leaves the others' figures); the copy bandwidth and the bound in this one."""
    import torch

    model, s, dtype = _generate_model(args)
    device = torch.device(args.device)
    weights = sum(t.numel() * t.element_size() for t in {id(p): p for p in model.parameters()}.values())
    del model
    bandwidth = copy_bandwidth(device)
    out = {"bandwidth": bandwidth, "weight_bytes": weights, "batches": {}}
    share = _limit("generate", args) / (2 * len(s["batches"])) - 5
    for B in s["batches"]:
        sides = {side: _child("generate-way", args, share, way=f"{side}:{B}") for side in ("attnkit", "hf")}
        row = {f"{side}_{key}": value for side, r in sides.items() for key, value in r.items()}
        # keys and values of every layer, read once per step (the mean cache length over the new tokens)
        kv_bytes = 2 * s["n_layer"] * B * (s["prompt"] + s["new"] / 2) * s["n_embd"] * (2 if dtype != torch.float32
                                                                                         else 4)
        bound = B * bandwidth / (weights + kv_bytes) if bandwidth else None  # tokens/s reading weights + cache
        for side in sides:
            if bound and f"{side}_tokens_per_s" in row:
                row[f"{side}_share_of_bound"] = row[f"{side}_tokens_per_s"] / bound
        if "attnkit_tokens_per_s" in row and "hf_tokens_per_s" in row:
            row["ratio"] = row["attnkit_tokens_per_s"] / row["hf_tokens_per_s"]
        out["batches"][str(B)] = row
    return out


# ---------------------------------------------------------------------------------------------------------------------
# mt: transformer-base vs torch.nn.Transformer through the same Trainer
# ---------------------------------------------------------------------------------------------------------------------
def _synthetic_pairs(n: int, vocab: int, seed: int):
    """``n`` pairs of random word ids (4..V-1) with lengths drawn like sentences (log-normal, median 18 tokens,
    at most 120); the target's length follows the source's. Only the shapes matter for speed."""
    import numpy as np

    from attnkit.data.pipeline.mt_batching import EncodedPairs

    rng = np.random.default_rng(seed)
    src, tgt = [], []
    for _ in range(n):
        length = int(min(120, max(2, rng.lognormal(np.log(18), 0.6))))
        other = int(min(120, max(2, length * rng.uniform(0.8, 1.25))))
        src.append(rng.integers(4, vocab, length).tolist() + [2])
        tgt.append(rng.integers(4, vocab, other).tolist())
    return EncodedPairs(src, tgt, pad_id=0, bos_id=1, eos_id=2)


def _torch_translator(sizes):
    """The torch.nn peer with the call MTTask makes (the padding masks passed, as attnkit gets them)."""
    from torch import nn

    from benchmarks.bench_seq2seq import TorchSeq2Seq

    class TorchTranslator(TorchSeq2Seq):
        def forward(self, src, tgt_in, src_key_padding_mask=None, tgt_key_padding_mask=None):
            S, T = src.shape[1], tgt_in.shape[1]
            x = self.drop(self.src_tok(src) * self.scale + self.pe[:S])  # (B, S, C)
            y = self.drop(self.tgt_tok(tgt_in) * self.scale + self.pe[:T])  # (B, T, C)
            causal = nn.Transformer.generate_square_subsequent_mask(T, device=src.device)  # (T, T)
            h = self.core(x, y, tgt_mask=causal, src_key_padding_mask=src_key_padding_mask,
                          tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=src_key_padding_mask,
                          tgt_is_causal=True)  # (B, T, C)
            return self.head(h)  # (B, T, V)

    return TorchTranslator(sizes)


def _mt_setup(args: argparse.Namespace, side: str, fixed: bool):
    """``(model, task, sizes dict)`` of the mt piece: ``side`` attnkit or torch_nn at transformer-base sizes, the
    synthetic pairs' token-budget batches (of a few fixed shapes when ``fixed``)."""
    import torch

    from attnkit.data.pipeline.mt_batching import GRAPH_SHAPE_MULTIPLE
    from attnkit.training import MTTask
    from benchmarks.bench_seq2seq import Seq2SeqSizes, attnkit_transformer

    s = SMOKE["mt"] if args.smoke else SIZES["mt"]
    sizes = Seq2SeqSizes(d_model=s["d_model"], num_heads=s["num_heads"], num_encoder_layers=s["layers"],
                         num_decoder_layers=s["layers"], dim_feedforward=s["dim_feedforward"], dropout=s["dropout"],
                         vocab_size=s["vocab_size"], src_len=128, tgt_len=128)
    train = _synthetic_pairs(20000 if not args.smoke else 200, s["vocab_size"], 0)
    valid = _synthetic_pairs(64, s["vocab_size"], 1)
    torch.manual_seed(0)
    model = attnkit_transformer(sizes) if side == "attnkit" else _torch_translator(sizes)
    task = MTTask(train, valid, max_tokens=s["max_tokens"], seed=0, label_smoothing=0.1,
                  shape_multiple=GRAPH_SHAPE_MULTIPLE if fixed else 1)
    return model, task, s


def busy_in_windows(samples: list[tuple[float, float]], windows: list[tuple[float, float]]) -> float | None:
    """Median of the ``(seconds, percent)`` samples that fall inside one of the ``(start, end)`` windows, as a
    share in [0, 1]; None when none does."""
    inside = [v for t, v in samples if any(a <= t <= b for a, b in windows)]
    return _median(inside) / 100 if inside else None


def mt_way(args: argparse.Namespace) -> dict:
    """One side of the mt piece in one way (``--way SIDE:MODE``, SIDE attnkit or torch_nn, MODE eager, fixed
    (fixed shapes) or graphs (fixed shapes, CUDA graphs)): updates/s of the steady intervals (those in which no
    graph was recorded) and the GPU's busy share within them."""
    import torch

    from attnkit.training import TrainConfig, Trainer
    from benchmarks.mt_step_scaling import UtilizationSampler, steady_windows, update_rates

    side, mode = args.way.split(":")
    model, task, s = _mt_setup(args, side, fixed=mode in ("fixed", "graphs"))
    cfg = TrainConfig(steps=s["steps"], batch_size=1, lr=1e-3, warmup_steps=2, eval_every=10 ** 6, eval_batches=1,
                      log_every=s["log_every"], ckpt_every=10 ** 6, seed=0, device=args.device,
                      autocast=None if args.smoke else "bf16", cuda_graphs=mode == "graphs")
    device = torch.device(args.device)
    busy = UtilizationSampler(device) if device.type == "cuda" else None
    out = args.work / f"mt-{side}-{mode}"
    trainer = Trainer(model, task, cfg, out, model_config={"kind": side}, progress=False, log=False)
    if busy is not None:
        busy.start()
    t0 = time.perf_counter()
    trainer.fit()
    samples = busy.stop() if busy is not None else []
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rates = update_rates(rows)
    timed = [(t - t0, v) for t, v in zip(busy.times, samples)] if busy is not None else []
    return {"updates_per_s": rates["updates_per_s"], "timed_updates": rates["timed_updates"],
            "gpu_busy": busy_in_windows(timed, steady_windows(rows)), "gpu_busy_all": _median(samples) / 100
            if samples else None}


# torch_nn:graphs (the peer through the same CUDA graphs) is left out: in the call of 2026-11-29 it stopped at update
# 7 with a NaN gradient norm (benchmarks/RESULTS.md, "GPU speed"); ask for it with --mt-ways
MT_WAYS = ("attnkit:graphs", "torch_nn:eager", "attnkit:fixed")


def piece_mt(args: argparse.Namespace) -> dict:
    """Both sides through attnkit's Trainer on batches of a few fixed shapes (``GRAPH_SHAPE_MULTIPLE``): attnkit
    with CUDA graphs (``train mt --cuda-graphs``), torch.nn eager (what a torch.nn user has) and with the same CUDA
    graphs, attnkit eager; on the CPU (``--smoke``) the eager ways only."""
    s = SMOKE["mt"] if args.smoke else SIZES["mt"]
    on_gpu = str(args.device).startswith("cuda")
    chosen = [w.strip() for w in args.mt_ways.split(",")] if args.mt_ways else MT_WAYS
    ways = [w for w in chosen if on_gpu or not w.endswith(":graphs")]
    out: dict = {"max_tokens": s["max_tokens"], "updates": s["steps"], "ways": {}}
    for way in ways:
        out["ways"][way] = _child("mt-way", args, _limit("mt", args) / len(ways), way=way)

    def rate(way):
        return out["ways"].get(way, {}).get("updates_per_s")
    ours = max((w for w in out["ways"] if w.startswith("attnkit") and rate(w)), key=rate, default=None)
    theirs = max((w for w in out["ways"] if w.startswith("torch_nn") and rate(w)), key=rate, default=None)
    if ours and theirs:
        out.update(attnkit=dict(out["ways"][ours], way=ours), torch_nn=dict(out["ways"][theirs], way=theirs),
                   ratio=rate(ours) / rate(theirs))
        if rate("torch_nn:eager"):
            out["ratio_to_eager_peer"] = rate(ours) / rate("torch_nn:eager")
    return out


# ---------------------------------------------------------------------------------------------------------------------
# profile: where the time of a step goes, each side of the targets missed
# ---------------------------------------------------------------------------------------------------------------------
PROFILE_WAYS = ("lm:attnkit", "lm:nanogpt", "mt:attnkit", "mt:torch_nn", "generate:attnkit", "generate:hf")
PROFILE_STEPS = 3  # steps recorded, after the warm-up ones


def profile_summary(prof, steps: int, wall_s: float, top: int = 12) -> dict:
    """What a ``torch.profiler`` recording of ``steps`` steps that took ``wall_s`` seconds says: the device (GPU)
    time a step and its share of the wall time (how busy the GPU was), the host's time a step, the ``top`` kernels
    by device time (on the CPU: the operators by their own CPU time) with milliseconds and calls a step."""
    from torch.autograd import DeviceType

    averages = list(prof.key_averages())
    kernels = [a for a in averages if a.device_type != DeviceType.CPU and a.self_device_time_total > 0]
    if kernels:
        rows = [(a.key, a.self_device_time_total, a.count) for a in kernels]
    else:  # the CPU: operators by their own time
        rows = [(a.key, a.self_cpu_time_total, a.count) for a in averages if a.self_cpu_time_total > 0]
    rows.sort(key=lambda r: -r[1])
    device_us = sum(r[1] for r in rows) if kernels else None
    total = sum(r[1] for r in rows) or 1.0
    return {"steps": steps, "wall_ms_per_step": 1e3 * wall_s / steps,
            "device_ms_per_step": None if device_us is None else device_us / 1e3 / steps,
            "device_busy": None if device_us is None else device_us / 1e6 / wall_s,
            "top": [{"name": name[:100], "ms_per_step": us / 1e3 / steps, "calls_per_step": n / steps,
                     "share": us / total} for name, us, n in rows[:top]]}


class _Recorder:
    """Records steps ``warmup`` .. ``warmup + PROFILE_STEPS - 1`` of a loop: call :meth:`step` after each step."""

    def __init__(self, device, warmup: int):
        self.device, self.warmup, self.n, self.prof, self.t0, self.result = device, warmup, 0, None, None, None

    def step(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self.n += 1
        if self.n == self.warmup:
            _sync(self.device)
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
            self.prof = profile(activities=activities)
            self.prof.__enter__()
            self.t0 = time.perf_counter()
        elif self.n == self.warmup + PROFILE_STEPS:
            _sync(self.device)
            wall = time.perf_counter() - self.t0
            self.prof.__exit__(None, None, None)
            self.result = profile_summary(self.prof, PROFILE_STEPS, wall)


def profile_way(args: argparse.Namespace) -> dict:
    """``--way MODEL:SIDE``: lm (GPT-2 small 16 x 1024, bf16, compiled) attnkit's ``train_lm`` (its Trainer's
    steps, recorded from inside) or nanoGPT's bench.py loop; mt (transformer-base sizes, fixed shapes, bf16, eager)
    attnkit or torch.nn through the Trainer."""
    import torch

    from attnkit.training import trainer as T

    what, side = args.way.split(":")
    device = torch.device(args.device)
    # mt: enough warm-up updates for its few fixed batch shapes to have come by (a new shape costs the host far more
    # than a step; the call of 2026-11-29 recorded updates 7-9 and saw mostly that)
    warmup = 2 if args.smoke else 40 if what == "mt" else 6
    rec = _Recorder(device, warmup)
    if what == "lm" and side == "nanogpt":
        nanogpt_bench(args, steps=warmup + PROFILE_STEPS, after_step=rec.step)
        return rec.result
    if what == "generate":  # one call of greedy decoding at batch 1 after the compiling one; a step = a token
        from torch.profiler import ProfilerActivity, profile

        fn, new = _decoder(args, side, 1)
        fn()
        fn()
        _sync(device)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            fn()
            _sync(device)
            wall = time.perf_counter() - t0
        return profile_summary(prof, new, wall)
    original = T.Trainer._train_step

    def recorded(self, train_model):
        original(self, train_model)
        rec.step()

    T.Trainer._train_step = recorded
    try:
        if what == "lm":
            from attnkit.api import train_lm

            s = SMOKE["lm"] if args.smoke else SIZES["lm"]
            steps = warmup + PROFILE_STEPS + 1  # the evaluation and checkpoint at the end come after the recording
            train_lm(data=str(args.data), tokenizer="char", preset="gpt2", overrides=dict(
                n_layer=s["n_layer"], n_head=s["n_head"], n_embd=s["n_embd"], vocab_size=s["vocab_size"], bias=False),
                block_size=s["block_size"], batch_size=s["batch_size"], steps=steps, lr=6e-4, min_lr=6e-5,
                warmup_steps=2, eval_every=steps, eval_batches=1, ckpt_every=steps, log_every=steps,
                device=args.device, autocast=None if args.smoke else "bf16", compile=not args.smoke,
                out=args.work / f"profile-lm-{side}", progress=False, log=lambda line: None)
        else:
            from attnkit.training import TrainConfig, Trainer

            model, task, s = _mt_setup(args, side, fixed=True)
            cfg = TrainConfig(steps=warmup + PROFILE_STEPS + 1, batch_size=1, lr=1e-3, warmup_steps=2,
                              eval_every=10 ** 6, eval_batches=1, log_every=10 ** 6, ckpt_every=10 ** 6, seed=0,
                              device=args.device, autocast=None if args.smoke else "bf16")
            try:
                Trainer(model, task, cfg, args.work / f"profile-mt-{side}", model_config={"kind": side},
                        progress=False, log=False).fit()
            except FloatingPointError as err:  # read at the end: the steps recorded before it still tell their time
                if rec.result is None:
                    raise
                rec.result["note"] = f"the run stopped after the recording: {err}"
    finally:
        T.Trainer._train_step = original
    return rec.result


def piece_profile(args: argparse.Namespace) -> dict:
    """:func:`profile_way` for each of :data:`PROFILE_WAYS`, each in a child process."""
    ways = [w for w in PROFILE_WAYS if w != "lm:nanogpt" or Path(args.nanogpt).is_file()]
    return {"steps": PROFILE_STEPS, "ways": {w: _child("profile-way", args, _limit("profile", args) / len(ways),
                                                        way=w) for w in ways}}


# ---------------------------------------------------------------------------------------------------------------------
# memory: one LM step four ways
# ---------------------------------------------------------------------------------------------------------------------
def _rss_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {key}")


def memory_way(args: argparse.Namespace) -> dict:
    """One of :data:`MEMORY_WAYS` in this process: the peak memory of one training step above what is held before
    it (weights, gradients, optimizer state), and its seconds."""
    import ctypes
    import gc

    import torch

    from attnkit.models.builders import build_gpt
    from attnkit.models.presets import get_preset
    from attnkit.training import LMTask

    s = SMOKE["memory"] if args.smoke else SIZES["memory"]
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = build_gpt(get_preset("gpt2", n_layer=s["n_layer"], n_head=s["n_head"], n_embd=s["n_embd"],
                                 vocab_size=s["vocab_size"], block_size=s["block_size"])).to(device)
    tokens = torch.randint(0, s["vocab_size"], (50_000,), generator=torch.Generator().manual_seed(0))
    task = LMTask(tokens[:40_000], tokens[40_000:], block_size=s["block_size"], batch_size=s["batch_size"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    way = args.way
    backend = "eager" if args.smoke else "inductor"  # --smoke: traced, not compiled (seconds instead of minutes)
    if way == "eager":
        loss_fn = task.loss
    elif way == "compiled model, loss outside":
        compiled = torch.compile(model, backend=backend)
        loss_fn = lambda m, b: task.loss(compiled, b)  # noqa: E731
    elif way == "compiled together":
        loss_fn = torch.compile(task.loss, backend=backend)
    elif way in ("chunked cross-entropy", "activation checkpointing", "checkpointing + chunked"):
        # what train lm --loss-chunks K / --activation-checkpointing run: the task's chunked loss (K chunks of about
        # s["chunk"] rows), the model's blocks recomputed in the backward pass
        if way != "activation checkpointing":
            task.loss_chunks = math.ceil(s["batch_size"] * s["block_size"] / s["chunk"])
        model.enable_activation_checkpointing(way != "chunked cross-entropy")
        loss_fn = task.loss
    else:
        raise ValueError(f"way must be one of {MEMORY_WAYS}, got {way!r}")

    def step(i: int) -> float:
        batch = tuple(t.to(device) for t in task.batch("train", i))
        t0 = time.perf_counter()
        with _autocast(device, off=not args.bf16):
            loss, _ = loss_fn(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        return time.perf_counter() - t0

    for i in range(2):  # compiles; the optimizer's state appears
        step(i)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        seconds = step(2)
        peak = torch.cuda.max_memory_allocated(device) - base
    else:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed memory back to the system, then the high-water mark reset
        Path("/proc/self/clear_refs").write_text("5")
        base = _rss_kib("VmRSS")
        seconds = step(2)
        peak = (_rss_kib("VmHWM") - base) * 1024
    seconds = statistics.median([seconds] + [step(i) for i in range(3, 5)])
    logits = s["batch_size"] * s["block_size"] * s["vocab_size"] * 4
    return {"way": way, "peak_bytes": peak, "step_s": seconds, "fp32_logits_bytes": logits}


def piece_memory(args: argparse.Namespace) -> dict:
    # glibc hands large blocks back to the system when freed only below its mmap threshold (fixed here), so that
    # the RSS of the child follows its live tensors
    env = {"MALLOC_MMAP_THRESHOLD_": "65536"}
    ways = {}
    for way in MEMORY_WAYS:
        ways[way] = _child("memory-way", args, _limit("memory", args) / 2, env=env, way=way)
    return {"ways": ways, "autocast": "bf16" if args.bf16 else None}


# ---------------------------------------------------------------------------------------------------------------------
# the record
# ---------------------------------------------------------------------------------------------------------------------
def _gib(n) -> str:
    """Bytes in GiB, or in MiB below one GiB."""
    if n is None:
        return "-"
    return f"{n / 2 ** 30:.2f} GiB" if n >= 2 ** 30 else f"{n / 2 ** 20:,.1f} MiB"


def _num(x, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def table(results: dict) -> list[str]:
    """The markdown rows of the record: one per measurement, attnkit and the peer side by side."""
    rows = ["| measurement | attnkit | peer | attnkit / peer | target |", "|---|---:|---:|---:|---|"]
    p = results["pieces"]

    def err(side: dict) -> str:
        return f"({side['error']})" if "error" in side else ""

    if "lm" in p and "error" not in p["lm"]:
        a, n = p["lm"]["attnkit"], p["lm"]["nanogpt"]
        mfu = f", MFU {a['mfu']:.1%}" if a.get("mfu") else ""
        rows.append(f"| `train lm` GPT-2 small {p['lm']['shape']}, tokens/s{mfu}; peak memory | "
                    f"{_num(a.get('tokens_per_s'))}{err(a)}; {_gib(a.get('peak_memory'))} | nanoGPT bench.py loop "
                    f"{_num(n.get('tokens_per_s'))}{err(n)}; {_gib(n.get('peak_memory'))} | "
                    f"{_num(p['lm'].get('ratio'), '.3f')} | >= 1.15 (floor 1.0), MFU >= 45%, memory <= nanoGPT's |")
    if "char" in p and "error" not in p["char"]:
        n = p["char"]["nanogpt"]

        def reach(side):
            r = side.get("reached")
            return "not reached" if not r else f"{r['valid_loss']:.4f} at step {r['step']}, {r['seconds']:.0f} s"
        ways = p["char"].get("ways") or {"compile": p["char"]["attnkit"]}
        for way, a in ways.items():
            ratio = a["iterations_per_s"] / n["iterations_per_s"] if a.get("iterations_per_s") and \
                n.get("iterations_per_s") else None
            rows.append(f"| Shakespeare char, iterations/s outside evaluation (attnkit `{way}`) | "
                        f"{_num(a.get('iterations_per_s'), '.1f')}{err(a)} | nanoGPT train.py loop "
                        f"{_num(n.get('iterations_per_s'), '.1f')}{err(n)} | {_num(ratio, '.3f')} | >= 1.15 |")
            rows.append(f"| the same: first valid <= {p['char']['target']} (compilation included); best / final "
                        f"valid; first update | {reach(a) if 'error' not in a else err(a)}; "
                        f"{_num(a.get('best_valid'), '.4f')} / {_num(a.get('final_valid'), '.4f')}; "
                        f"{_num(a.get('first_update_s'), '.0f')} s | {reach(n) if 'error' not in n else err(n)}; "
                        f"{_num(n.get('best_valid'), '.4f')} / {_num(n.get('final_valid'), '.4f')}; "
                        f"{_num(n.get('first_step_s'), '.0f')} s | | met = reached within "
                        f"{p['char']['budget_s']:.0f} s |")
    if "moonshot" in p and "error" not in p["moonshot"]:
        nano = ((p.get("char") or {}).get("nanogpt") or {}).get("reached")
        half = f"half of nanoGPT's {nano['seconds']:.0f} s" if nano else "half of nanoGPT's time"
        for name, r in p["moonshot"]["runs"].items():
            got = r.get("reached")
            share = got["seconds"] / nano["seconds"] if got and nano else None
            rows.append(f"| moonshot, `{p['moonshot']['way']}`, {name}: first valid <= {p['moonshot']['target']}; "
                        f"best valid | {reach(r) if 'error' not in r else err(r)}; {_num(r.get('best_valid'), '.4f')}"
                        f" | nanoGPT {reach({'reached': nano})} | {_num(share, '.3f')} | <= 0.5 ({half}) |")
    if "generate" in p and "error" not in p["generate"]:
        for B, row in p["generate"]["batches"].items():
            share = (f" ({row['attnkit_share_of_bound']:.0%} / {row['hf_share_of_bound']:.0%} of the bandwidth bound)"
                     if "attnkit_share_of_bound" in row and "hf_share_of_bound" in row else "")
            ours = _num(row.get("attnkit_tokens_per_s")) + (f" ({row['attnkit_error']})" if "attnkit_error" in row
                                                            else "")
            theirs = _num(row.get("hf_tokens_per_s")) + (f" ({row['hf_error']})" if "hf_error" in row else "")
            rows.append(f"| greedy GPT-2 small, batch {B}, tokens/s{share} | {ours} | HF static cache + compile "
                        f"{theirs} | {_num(row.get('ratio'), '.3f')} | >= 1.3 |")
    if "mt" in p and "error" not in p["mt"]:
        mt = p["mt"]
        for way, r in (mt.get("ways") or {}).items():
            busy = "" if r.get("gpu_busy") is None else f", GPU busy {r['gpu_busy']:.0%}"
            rows.append(f"| `train mt` transformer-base sizes, {mt['max_tokens']:,}-token batches, `{way}`: "
                        f"updates/s{busy} | {_num(r.get('updates_per_s'), '.2f')}{err(r)} | | | |")
        if "ratio" in mt:
            a, n = mt["attnkit"], mt["torch_nn"]
            busy = "" if a.get("gpu_busy") is None else f" (GPU busy {a['gpu_busy']:.0%} / " + (
                "-" if n.get("gpu_busy") is None else f"{n['gpu_busy']:.0%}") + ")"
            way = f" (`{a['way']}` / `{n['way']}`)" if "way" in a else ""
            eager = f"; against the eager peer {mt['ratio_to_eager_peer']:.3f}" if "ratio_to_eager_peer" in mt else ""
            rows.append(f"| `train mt`, the fastest way of each side{way}, updates/s{busy} | "
                        f"{a['updates_per_s']:.2f} | `torch.nn.Transformer` {n['updates_per_s']:.2f} | "
                        f"{mt['ratio']:.3f}{eager} | >= 1.2, busy >= 90% |")
    if "profile" in p and "error" not in p["profile"]:
        for way, r in p["profile"]["ways"].items():
            if "error" in r:
                rows.append(f"| profile {way} | {r['error']} | | | |")
                continue
            busy = "" if r.get("device_busy") is None else \
                f", GPU {r['device_ms_per_step']:.1f} ms ({r['device_busy']:.0%})"
            top = "; ".join(f"{k['name'][:60]} {k['share']:.0%}" for k in r["top"][:3]) + (
                f" ({r['note']})" if "note" in r else "")
            rows.append(f"| profile {way}: a step {r['wall_ms_per_step']:.1f} ms{busy} | {top} | | | |")
    if "memory" in p and "error" not in p["memory"]:
        ways = p["memory"]["ways"]
        shown = "; ".join(f"{w}: {_gib(r.get('peak_bytes'))}" if "error" not in r else f"{w}: {r['error']}"
                          for w, r in ways.items())
        rows.append(f"| peak memory of one LM step above weights and optimizer state | {shown} | | | |")
    for name, piece in p.items():
        if "error" in piece:
            rows.append(f"| {name} | {piece['error']} | | | |")
    return rows


def markdown(results: dict) -> str:
    earlier = {name: piece["call"] for name, piece in results["pieces"].items() if "call" in piece}
    calls = "".join(f" `{name}` comes from an earlier call: `{c['command']}`, {c['date']}."
                    for name, c in earlier.items())
    return "\n".join([
        BEGIN,
        f"Command: `{results['command']}`. Date: {results['date']}. Device: {results['device']}; host "
        f"{results['host']}; load before {results['load']}.{calls} Record: "
        f"[records/gpu/gpu_issue40.json](records/gpu/gpu_issue40.json).", "", *table(results), END])


def merged(earlier: dict, results: dict) -> dict:
    """``results`` with the pieces of an ``earlier`` record that it lacks, each marked with the ``call`` (command,
    date, device) it came from: a call that measures some pieces again does not drop the others' figures."""
    pieces = {}
    for name, piece in earlier.get("pieces", {}).items():
        if name not in results["pieces"]:
            pieces[name] = piece if "call" in piece else dict(piece, call={k: earlier.get(k) for k in
                                                                         ("command", "date", "device")})
    return dict(results, pieces={**pieces, **results["pieces"]})


def record(results: dict, json_path: Path | None = None, md_path: Path | None = None,
           results_md: Path | None = None) -> None:
    """Write the record (JSON and markdown; default :data:`RECORD_JSON`, :data:`RECORD_MD`), keeping the pieces of
    the record there that ``results`` lacks (:func:`merged`), and replace the table between the markers of
    ``results_md`` (default :data:`RESULTS_MD`; a page without them raises ``ValueError`` before anything is
    written)."""
    json_path, md_path = json_path or RECORD_JSON, md_path or RECORD_MD
    results_md = results_md or RESULTS_MD
    text = results_md.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise ValueError(f"{results_md} has no {BEGIN!r} ... {END!r} markers for the table")
    if json_path.is_file():
        results = merged(json.loads(json_path.read_text(encoding="utf-8")), results)
    section = markdown(results)
    head, rest = text.split(BEGIN, 1)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    md_path.write_text("# Issue #40 on one GPU (`python -m benchmarks.gpu`)\n\n" + section.replace(
        "](records/gpu/", "](") + "\n", encoding="utf-8")
    results_md.write_text(head + section + rest.split(END, 1)[1], encoding="utf-8")


# ---------------------------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=None, help=f"pieces, comma-separated, out of {','.join(PIECES)} (default: "
                   f"{','.join(DEFAULT_GPU)} on a GPU, all of them with --smoke)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here, after every piece (what "
                   "a call stopped at its time limit has measured so far)")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (with --smoke, or --only memory)")
    p.add_argument("--data", type=Path, default=P.DEFAULT_DATA, help="the Tiny Shakespeare text file")
    p.add_argument("--nanogpt", type=Path, default=DEFAULT_NANOGPT, help="nanoGPT's model.py (default "
                   "peers/nanogpt/model.py)")
    p.add_argument("--minutes", type=float, default=DEFAULT_MINUTES,
                   help=f"char: the budget of each side, compilation included (default {DEFAULT_MINUTES}; the "
                        f"issue's goal is {P.GOAL_MINUTES:g})")
    p.add_argument("--budget", type=float, default=480.0, metavar="SECONDS",
                   help="the whole call: a piece gets at most what is left of it, and none starts with under 20 s "
                        "left (default 480: 8 minutes)")
    p.add_argument("--char-ways", default=None, help=f"char: attnkit's ways on a GPU, comma-separated, out of "
                   f"compile, cuda-graphs, eager (default {','.join(CHAR_WAYS)})")
    p.add_argument("--mt-ways", default=None, help=f"mt: SIDE:MODE ways, comma-separated (SIDE attnkit or torch_nn, "
                   f"MODE eager, fixed or graphs; default {','.join(MT_WAYS)})")
    p.add_argument("--explore", action="store_true", help="moonshot: every candidate recipe, not only the chosen "
                   "one (shakespeare-char-gpu)")
    p.add_argument("--peak-tflops", type=float, default=None, help="lm: the GPU's dense bf16 peak, TFLOP/s")
    p.add_argument("--bf16", action="store_true", help="memory: under bf16 autocast (the default is float32)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, no compilation: every piece on a CPU")
    p.add_argument("--record", action="store_true", help="write the record and RESULTS.md's table")
    p.add_argument("--record-from", type=Path, default=None, metavar="JSON",
                   help="measure nothing: write the record and the table from the results of an earlier call (its "
                        "--json file, e.g. brought back from a GPU machine, complete or cut short)")
    p.add_argument("--work", type=Path, default=None, help="folder for the runs (default: a temporary folder)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--way", default=None, help=argparse.SUPPRESS)
    return p


CHILDREN = {"nanogpt-bench": nanogpt_bench, "nanogpt-char": nanogpt_char, "memory-way": memory_way,
            "mt-way": mt_way, "generate-way": generate_way, "profile-way": profile_way,
            "lm": piece_lm, "char": piece_char, "moonshot": piece_moonshot, "generate": piece_generate, "mt": piece_mt,
            "profile": piece_profile, "memory": piece_memory}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child is not None:  # one piece (or one side of one) in this process
        print(_RESULT + json.dumps(CHILDREN[args.child](args)), flush=True)
        return 0
    try:
        if args.record_from is not None:
            try:
                results = json.loads(args.record_from.read_text(encoding="utf-8"))
            except ValueError as err:  # not UTF-8 or not JSON
                raise ValueError(f"--record-from {args.record_from}: not a results file of this script ({err})")
            if not isinstance(results, dict) or not isinstance(results.get("pieces"), dict):
                raise ValueError(f"--record-from {args.record_from}: not a results file of this script (a JSON "
                                 f"object with its 'pieces')")
            if results.get("smoke"):
                raise ValueError(f"--record-from {args.record_from}: a --smoke call; the record holds real figures")
            record(results)
            return 0
        chosen = args.only or ",".join(PIECES if args.smoke else DEFAULT_GPU)
        only = [x.strip() for x in chosen.split(",") if x.strip()]
        unknown = sorted(set(only) - set(PIECES))
        if unknown or not only:
            raise ValueError(f"--only takes pieces out of {list(PIECES)}, got {chosen!r}")
        bad_ways = sorted(set(_char_ways(args)) - {"compile", "cuda-graphs", "eager"})
        if bad_ways or not _char_ways(args):
            raise ValueError(f"--char-ways takes compile, cuda-graphs and eager, got {args.char_ways!r}")
        known = {f"{s}:{m}" for s in ("attnkit", "torch_nn") for m in ("eager", "fixed", "graphs")}
        if args.mt_ways is not None and (not args.mt_ways.strip() or
                                         set(w.strip() for w in args.mt_ways.split(",")) - known):
            raise ValueError(f"--mt-ways takes SIDE:MODE ways (SIDE attnkit or torch_nn, MODE eager, fixed or "
                             f"graphs), got {args.mt_ways!r}")
        if args.record and args.smoke:
            raise ValueError("--record writes the real figures; it cannot be combined with --smoke")
        if not (0 < args.minutes < math.inf and 0 < args.budget < math.inf):  # NaN is refused too
            raise ValueError(f"--minutes and --budget must be numbers > 0, got {args.minutes:g} and {args.budget:g}")
        if not args.data.is_file():
            raise ValueError(f"--data {args.data}: no such file (the Tiny Shakespeare text)")
        from attnkit.training.device import resolve_device

        resolve_device(args.device)  # one clear line on a machine without CUDA
        from benchmarks.harness import loadavg, machine_info
        from benchmarks.mt_de_en import machine_description

        load = loadavg()
        started = time.perf_counter()
        results = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "command": "python -m benchmarks.gpu " + shlex.join(argv if argv is not None else sys.argv[1:]),
                   "device": machine_description(args.device), "host": machine_info().get("cpu_model", "?"),
                   "load": " / ".join(f"{x:.2f}" for x in load) if load else "n/a", "smoke": args.smoke,
                   "pieces": {}}
        with tempfile.TemporaryDirectory(prefix="gpu-40-") as tmp:
            args.work = (args.work or Path(tmp)).resolve()
            args.work.mkdir(parents=True, exist_ok=True)
            for name in only:
                t0 = time.perf_counter()
                left = args.budget - (t0 - started)
                piece = _child(name, args, min(_limit(name, args), left)) if left >= 20 or args.smoke else \
                    {"error": f"not started: {left:.0f} s of the --budget left"}
                results["pieces"][name] = {**piece, "wall_s": time.perf_counter() - t0}
                results["wall_s"] = time.perf_counter() - started
                print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
                if args.json is not None:
                    args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(json.dumps(results, indent=2))
        if args.record:
            record(results)
        return 0
    except (ValueError, OSError) as err:
        print(f"benchmarks.gpu: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
