"""``python -m benchmarks``: attnkit vs HF transformers and torch.nn on this machine, in one run.

Benchmarks (``--only`` picks some, comma-separated):

* ``lm``        GPT training tokens/s and MFU vs HF GPT2LMHeadModel (sdpa);
* ``seq2seq``   encoder-decoder training target tokens/s vs torch.nn.Transformer;
* ``generate``  greedy generation tokens/s and peak memory vs HF generate (with/without KV cache, int8);
* ``attention`` attention forward+backward time and memory for T = 512 ... 8192;
* ``quality``   int8 vs fp32 on a real model (SmolLM2-135M): greedy tokens and perplexity;
* ``levers``    one-at-a-time optimisation levers (see docs/experiments/cpu_speed.md).

Results go to ``benchmarks/records/cpu_speed/speed.md`` (the "Speed" section, between its markers) and
``benchmarks/records/cpu_speed/results.json`` (a ``--quick`` smoke run writes no record, only the files that
``--out-md`` / ``--out-json`` name); the current figures are summed up in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
import time
from pathlib import Path

import torch

from .bench_attention import AttnSizes, run_attention
from .bench_generate import GenSizes, int8_quality, run_generate, shakespeare_calibration_text
from .bench_levers import LEVERS, run_levers
from .bench_lm import LMSizes, run_lm
from .bench_seq2seq import Seq2SeqSizes, run_seq2seq
from .harness import int_list, loadavg, machine_info, matmul_peak_gflops

HERE = Path(__file__).resolve().parent
ALL = ("lm", "seq2seq", "generate", "attention", "quality", "levers")
DEFAULT = ("lm", "seq2seq", "generate", "attention", "quality")


def quick_sizes() -> dict:
    """Tiny shapes that run every code path in seconds (smoke runs, CI)."""
    return {
        "lm": LMSizes(n_layer=2, n_head=2, n_embd=64, block_size=32, vocab_size=65, batch_size=2, steps_per_round=1),
        "seq2seq": Seq2SeqSizes(d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                dim_feedforward=64, vocab_size=200, batch_size=2, src_len=8, tgt_len=8,
                                steps_per_round=1),
        "generate": GenSizes(n_layer=2, n_head=2, n_embd=64, vocab_size=500, block_size=64, prompt_len=4,
                             new_tokens=8),
        "attention": AttnSizes(lengths=[64, 128], num_heads=2, head_dim=16, ref_max_len=128),
    }


def _lengths(text: str) -> list[int]:
    """``--attn-lengths``: comma-separated sequence lengths, each >= 1."""
    lengths = int_list(text, 1)
    if lengths is None:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return lengths


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(DEFAULT),
                   help=f"comma-separated benchmarks out of {','.join(ALL)} (default: {','.join(DEFAULT)})")
    p.add_argument("--rounds", type=int, default=None,
                   help="timed rounds per implementation (default: 5 for training, 3 for generate/attention)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up calls per implementation (default 1)")
    p.add_argument("--quick", action="store_true", help="tiny shapes and 2 rounds: a fast smoke run of every code path")
    p.add_argument("--compile", action="store_true", help="also time attnkit GPT training and generation "
                                                          "(generate(compile=True)) under torch.compile "
                                                          "(compile time reported as first_call_s)")
    p.add_argument("--levers", default=None,
                   help=f"comma-separated levers for --only levers (default all: {','.join(LEVERS)})")
    p.add_argument("--no-peers", action="store_true", help="time attnkit only")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--optimizer", choices=("plain", "foreach", "fused"), default="fused",
                   help="AdamW implementation for every training benchmark (default fused)")
    p.add_argument("--gen-tokens", type=int, default=None, help="new tokens per generation (default 128)")
    p.add_argument("--no-gen-no-cache", action="store_true", help="skip the (slow) no-KV-cache generation runs")
    p.add_argument("--attn-lengths", type=_lengths, default=None,
                   help="comma-separated T values (default 512,1024,2048,4096,8192)")
    p.add_argument("--attn-ref-max", type=int, default=None,
                   help="largest T for the reference attention (default 4096)")
    p.add_argument("--out-md", default=None, help="markdown file whose Speed section is (re)written (default "
                   "benchmarks/records/cpu_speed/speed.md; with --quick, a smoke run: none)")
    p.add_argument("--out-json", default=None, help="JSON file with every measurement (default "
                   "benchmarks/records/cpu_speed/results.json; with --quick: none)")
    p.add_argument("--no-write", action="store_true", help="print only, write no files")
    return p


def main(argv: list[str] | None = None) -> dict:
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag, value, least in (("--rounds", args.rounds, 1), ("--warmup", args.warmup, 0),
                               ("--gen-tokens", args.gen_tokens, 1), ("--threads", args.threads, 1)):
        if value is not None and value < least:
            parser.error(f"{flag} must be >= {least}, got {value}")
    selected = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in selected if s not in ALL]
    if unknown:
        parser.error(f"--only: unknown benchmark(s) {unknown}; choose from {', '.join(ALL)}")
    levers = None if args.levers is None else tuple(x.strip() for x in args.levers.split(",") if x.strip())
    unknown = [x for x in levers or () if x not in LEVERS]
    if unknown:
        parser.error(f"--levers: unknown lever(s) {unknown}; choose from {', '.join(LEVERS)}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if not args.quick:  # the records; a --quick run's tiny figures are no record: written only where asked
        args.out_md = args.out_md or str(HERE / "records" / "cpu_speed" / "speed.md")
        args.out_json = args.out_json or str(HERE / "records" / "cpu_speed" / "results.json")
    written = [path for path in (args.out_md, args.out_json) if path and not args.no_write]
    torch.manual_seed(0)

    sizes = quick_sizes() if args.quick else {"lm": LMSizes(), "seq2seq": Seq2SeqSizes(), "generate": GenSizes(),
                                               "attention": AttnSizes()}
    sizes["lm"].optimizer = sizes["seq2seq"].optimizer = args.optimizer
    if args.gen_tokens is not None:
        sizes["generate"].new_tokens = args.gen_tokens
    if args.no_gen_no_cache:
        sizes["generate"].no_cache = False
    if args.attn_lengths:
        sizes["attention"].lengths = args.attn_lengths
    if args.attn_ref_max is not None:
        sizes["attention"].ref_max_len = args.attn_ref_max
    train_rounds = args.rounds if args.rounds is not None else (2 if args.quick else 5)
    other_rounds = args.rounds if args.rounds is not None else (2 if args.quick else 3)
    peers = not args.no_peers

    def progress(msg: str) -> None:
        print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    cmd = "python -m benchmarks" + ("" if argv is None and len(sys.argv) <= 1 else " ") + \
        " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    run = {"command": cmd.strip(), "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "machine": machine_info(), "load_start": loadavg(), "benchmarks": []}
    peak = matmul_peak_gflops(n=256 if args.quick else 2048)
    run["matmul_peak"] = peak
    progress(f"fp32 matmul peak: {peak['max_gflops']:.1f} GFLOP/s (median {peak['median_gflops']:.1f}); "
             f"load {loadavg()}")

    from .report import speed_section, write_json, write_results_md

    def save(final: bool = False) -> None:
        run["load_end"] = loadavg()
        run["complete"] = final
        if args.out_md and not args.no_write:
            write_results_md(args.out_md, speed_section(run))
        if args.out_json and not args.no_write:
            write_json(args.out_json, run)

    if "lm" in selected:
        progress("LM training")
        run["benchmarks"].append(run_lm(sizes["lm"], rounds=train_rounds, warmup=args.warmup, compile=args.compile,
                                        peers=peers, progress=progress, peak=peak).to_dict())
        save()
    if "seq2seq" in selected:
        progress("seq2seq training")
        run["benchmarks"].append(run_seq2seq(sizes["seq2seq"], rounds=train_rounds, warmup=args.warmup, peers=peers,
                                             progress=progress).to_dict())
        save()
    if "generate" in selected:
        progress("generation")
        run["benchmarks"].append(run_generate(sizes["generate"], rounds=other_rounds, warmup=args.warmup, peers=peers,
                                              compile=args.compile, progress=progress).to_dict())
        save()
    if "attention" in selected:
        progress("attention")
        run["benchmarks"].append(run_attention(sizes["attention"], rounds=other_rounds, warmup=args.warmup,
                                               progress=progress, min_time=0.0 if args.quick else 0.5).to_dict())
        save()
    if "levers" in selected:
        progress("levers")
        run["benchmarks"].extend(b.to_dict() for b in run_levers(quick=args.quick, rounds=train_rounds,
                                                                 warmup=args.warmup, progress=progress, only=levers))
    if "quality" in selected:
        progress("int8 quality on SmolLM2-135M")
        try:
            calibration = shakespeare_calibration_text()
        except Exception as exc:  # no data and no network: measure the rest, say why GPTQ is missing
            calibration = None
            progress(f"GPTQ variant skipped: no calibration text ({type(exc).__name__}: {exc})")
        run["quality"] = int8_quality(new_tokens=8 if args.quick else 32, calibration_text=calibration)
    save(final=True)
    print(speed_section(run))
    if written:
        progress(f"wrote {' and '.join(written)}")
    elif args.quick and not args.no_write:
        progress("a --quick run is a smoke run: no record written (--out-md / --out-json write one)")
    return run


if __name__ == "__main__":
    main()
