"""Fine-tuning benchmark: SmolLM2-135M-Instruct on the fortunes corpus, validation loss before and after.

    .venv/bin/python -m benchmarks.finetune_fortunes --minutes 20 --out runs/bench-finetune-fortunes

1. loads the pretrained model and the ``fortunes`` recipe, encodes both splits with the model's tokenizer
   (every fortune followed by the end-of-sequence token, as ``attnkit finetune`` does),
2. measures the pretrained model's validation loss on exactly the windows the trainer evaluates
   (``LMTask`` batches ``valid`` 0..eval_batches-1),
3. runs ``attnkit finetune`` in-process for ``--minutes`` of wall-clock time (LoRA by default),
4. takes the trainer's final validation loss (same windows), draws five samples from the fine-tuned model and
   five from the pretrained one (same seeds; each starts right after an end-of-sequence token, i.e. "a new
   fortune"), and writes the "Fine-tuning" section of ``benchmarks/records/finetune/finetune_fortunes.md``
   (between its own markers; other sections are left alone) plus ``<out>/benchmark.json``.

The date, the machine (CPU model, cores, torch) and its load average before and after are recorded: on a shared
CPU the number of steps done in the time budget depends on them. This is a benchmark, not a test (it takes ~30 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from .harness import loadavg, machine_info, path_flag
from .report import write_results_md

HERE = Path(__file__).resolve().parent
BEGIN = "<!-- finetune:begin (written by `python -m benchmarks.finetune_fortunes`; edit outside these markers) -->"
END = "<!-- finetune:end -->"


def sample_texts(model, tokenizer, stop_ids, *, n: int, max_new_tokens: int, seed: int) -> list[str]:
    import torch

    from attnkit.generation import generate

    start = tokenizer.eos_id if tokenizer.eos_id is not None else tokenizer.bos_id
    out = []
    for i in range(n):
        with torch.inference_mode():
            ids = generate(model, [[start]], max_new_tokens=max_new_tokens, do_sample=True, temperature=0.8,
                           top_p=0.95, eos_token_id=stop_ids, seed=seed + i)
        out.append(tokenizer.decode(ids[0], skip_special_tokens=True).strip())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=20.0, help="fine-tuning budget (wall clock)")
    p.add_argument("--out", type=path_flag, default=Path("runs/bench-finetune-fortunes"))
    p.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--eval-batches", type=int, default=10)
    p.add_argument("--max-new-tokens", type=int, default=80)
    p.add_argument("--results", type=path_flag, default=HERE / "records" / "finetune" / "finetune_fortunes.md")
    args = p.parse_args(argv)
    counts = {"--batch-size": args.batch_size, "--block-size": args.block_size, "--eval-batches": args.eval_batches,
              "--max-new-tokens": args.max_new_tokens}
    for flag, value in counts.items():
        if value < 1:
            p.error(f"{flag} must be >= 1, got {value}")
    if not 0 < args.minutes < float("inf"):
        p.error(f"--minutes must be a number > 0, got {args.minutes}")

    import torch

    from attnkit.data.pipeline.documents import prepare_finetune_data
    from attnkit.recipes import FT_DEFAULTS
    from attnkit.api import FinetuneOptions, finetune
    from attnkit.interop.pretrained import load_pretrained
    from attnkit.training import LMTask
    from attnkit.checkpoints import load
    from attnkit.api.options import check_out

    options = FinetuneOptions(source="smollm2-135m-instruct", data="fortunes", out=args.out, max_time=args.minutes,
                              batch_size=args.batch_size, block_size=args.block_size, eval_batches=args.eval_batches,
                              warmup_steps=5, eval_every=100000, ckpt_every=100000, lora=not args.full)
    try:  # an existing run or a file in --out: refused now, not after the pretrained model's evaluation
        check_out(options)
    except ValueError as err:
        p.error(str(err))
    command = [sys.executable.rsplit("/", 1)[-1], "-m", "benchmarks.finetune_fortunes"] + (argv or sys.argv[1:])
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load_start = loadavg()
    t0 = time.perf_counter()
    model, tok, info = load_pretrained("smollm2-135m-instruct")
    train_ids, valid_ids, data_info = prepare_finetune_data("fortunes", tok, "auto")
    seed = FT_DEFAULTS["seed"]
    task = LMTask(train_ids, valid_ids, block_size=args.block_size, batch_size=args.batch_size, seed=seed)
    t_eval = time.perf_counter()
    before = task.evaluate(model.eval(), args.eval_batches)
    t_eval = time.perf_counter() - t_eval
    print(f"pretrained valid loss {before['loss']:.4f} (ppl {before['ppl']:.2f}) in {t_eval:.0f} s", file=sys.stderr)
    samples_before = sample_texts(model, tok, info.stop_token_ids, n=5, max_new_tokens=args.max_new_tokens, seed=0)
    del model

    ft_args = ["finetune", "--from", "smollm2-135m-instruct", "--data", "fortunes", "--out", str(args.out),
               "--max-time", str(args.minutes), "--batch-size", str(args.batch_size),
               "--block-size", str(args.block_size), "--eval-batches", str(args.eval_batches),
               "--warmup-steps", "5", "--eval-every", "100000", "--ckpt-every", "100000"]  # eval/save once, at the end
    if not args.full:
        ft_args.append("--lora")
    load_train_start = loadavg()
    finetune(options)  # the run `attnkit finetune` makes with ft_args (recorded below)
    load_train_end = loadavg()
    summary = json.loads((args.out / "summary.json").read_text())
    loaded = load(args.out)
    tuned, tok2, state = loaded.model, loaded.tokenizer, loaded.state
    samples_after = sample_texts(tuned, tok2, info.stop_token_ids, n=5, max_new_tokens=args.max_new_tokens, seed=0)
    after = summary["valid_loss"]
    train_cfg = state["train_config"]
    lora = state["extra"].get("lora")
    load_end = loadavg()
    machine = machine_info()
    record = {
        "command": " ".join(command), "finetune_command": "attnkit " + " ".join(ft_args),
        "date": date, "machine": machine,
        "valid_loss_before": before["loss"], "valid_ppl_before": before["ppl"],
        "valid_loss_after": after, "valid_ppl_after": summary.get("valid_ppl"),
        "steps": summary["steps"], "train_seconds": summary["elapsed"], "tokens": summary["tokens"],
        "train_loss_last": summary["train_loss"], "lora": lora, "lr": train_cfg["lr"],
        "schedule": train_cfg["schedule"], "batch_size": args.batch_size, "block_size": args.block_size,
        "eval_tokens": args.eval_batches * args.batch_size * args.block_size,
        "valid_tokens_total": int(valid_ids.numel()), "train_tokens_total": int(train_ids.numel()),
        "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
        "load_start": load_start, "load_train_start": load_train_start, "load_train_end": load_train_end,
        "load_end": load_end, "wall_seconds": time.perf_counter() - t0,
        "samples_before": samples_before, "samples_after": samples_after, "torch": torch.__version__,
    }
    (args.out / "benchmark.json").write_text(json.dumps(record, indent=2, ensure_ascii=False))

    mode = (f"LoRA r={lora['rank']} alpha={lora['alpha']:g} on {', '.join(lora['targets'])}" if lora
            else "full fine-tuning")
    lines = [
        "## Fine-tuning: SmolLM2-135M-Instruct on fortunes",
        "",
        f"Command: `{record['command']}` (runs `{record['finetune_command']}`).",
        "",
        f"{mode}; AdamW lr {train_cfg['lr']:g} ({train_cfg['schedule']} schedule, "
        f"{train_cfg['warmup_steps']} warmup steps), batch {args.batch_size} x {args.block_size} tokens, "
        f"{summary['steps']} steps = {summary['tokens']:,} training tokens in the {args.minutes:g}-minute budget "
        f"(the trainer's elapsed time, {summary['elapsed'] / 60:.1f} min, includes the final evaluation) "
        f"(fortunes train split: {record['train_tokens_total']:,} tokens, so "
        f"{summary['tokens'] / record['train_tokens_total']:.2f} "
        "epochs). Validation: the trainer's fixed windows, "
        f"{args.eval_batches} batches = {record['eval_tokens']:,} tokens of the fortunes valid split "
        f"({record['valid_tokens_total']:,} tokens; every fortune ends with the EOS token).",
        "",
        "| model | valid loss | valid perplexity |",
        "|---|---|---|",
        f"| SmolLM2-135M-Instruct (pretrained, Q4_1 dequantized) | {before['loss']:.4f} | {before['ppl']:.2f} |",
        f"| after {args.minutes:g} min of fine-tuning ({summary['steps']} steps) | {after:.4f} | "
        f"{summary.get('valid_ppl', float('nan')):.2f} |",
        "",
        f"Date: {date}. Machine: {machine.get('cpu_model', 'unknown CPU')}, {os.cpu_count()} CPU cores shared with "
        f"other jobs, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads. Load average (1/5/15 min): {load_start} at the start, "
        f"{load_train_start} when training started, {load_train_end} when it ended, {load_end} at the end. "
        f"Whole benchmark: {record['wall_seconds'] / 60:.1f} min.",
        "",
        "Five samples each (temperature 0.8, top-p 0.95, seeds 0-4, at most "
        f"{args.max_new_tokens} tokens, each starting right after an EOS token, i.e. \"a new text\"):",
        "",
    ]
    for title, samples in (("After fine-tuning", samples_after), ("Pretrained", samples_before)):
        lines += [f"**{title}**", ""]
        for i, s in enumerate(samples):
            quoted = "\n".join("    " + line for line in (s or "(empty)").splitlines())
            lines += [f"{i + 1}.", "", quoted, ""]
    body = "\n".join(lines).rstrip()
    write_results_md(args.results, f"{BEGIN}\n{body}\n{END}\n", begin=BEGIN, end=END)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
