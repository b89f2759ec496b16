"""Markdown and JSON output of a benchmark run: the "Speed" section of ``benchmarks/records/cpu_speed/speed.md``.

Other sections of that file belong to other people: only the text between the ``speed:begin`` and
``speed:end`` markers is replaced (appended at the end the first time).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

BEGIN = "<!-- speed:begin (written by `python -m benchmarks`; edit outside these markers) -->"
END = "<!-- speed:end -->"
HEADER = "# attnkit benchmark results\n\nSections are written by different tools; each keeps to its own.\n"


def _mib(b) -> str:
    return "n/a" if b is None else f"{b / 2**20:,.1f} MiB"


def _num(x, digits=1) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.{digits}f}"


def _load(l) -> str:
    return "n/a" if l is None else " / ".join(f"{v:.2f}" for v in l)


def bench_markdown(b: dict) -> str:
    lines = [f"### {b['title']}", ""]
    cfg = ", ".join(f"{k}={v}" for k, v in b["config"].items())
    lines += [f"Config: {cfg}", "", f"Load (1/5/15 min) before: {_load(b['load_before'])}; after: {_load(b['load_after'])}", ""]
    if b["name"] == "attention":
        lines += ["| T / implementation | median s per call | min s | max s | peak memory | rounds |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name, r in b["results"].items():
            sec = r.get("seconds_per_unit", r["seconds"])
            lines.append(f"| {name} | {sec['median']:.3f} | {sec['min']:.3f} | {sec['max']:.3f} | "
                         f"{_mib(r['peak_bytes'])} | {r['rounds']} |")
    else:
        unit = next(iter(b["results"].values()))["unit"] if b["results"] else ""
        mfu = any("mfu_measured_peak" in r for r in b["results"].values())
        head = f"| implementation | median {unit}/s | min | max | peak memory | first call s |"
        sep = "|---|---:|---:|---:|---:|---:|"
        if mfu:
            head += " MFU (measured peak) | MFU (289 GFLOP/s) |"
            sep += "---:|---:|"
        lines += [head, sep]
        for name, r in b["results"].items():
            tp = r["throughput"]
            row = (f"| {name} | {_num(tp['median'])} | {_num(tp['min'])} | {_num(tp['max'])} | {_mib(r['peak_bytes'])} | "
                   f"{_num(r['first_call_s'], 2)} |")
            if mfu:
                row += f" {r['mfu_measured_peak']:.1%} | {r['mfu_nominal_peak']:.1%} |"
            lines.append(row)
    lines.append("")
    if b["ratios"]:
        lines += ["| ratio (medians, same run) | value |", "|---|---:|"]
        lines += [f"| {k} | {_num(v, 3)} |" for k, v in b["ratios"].items() if v is not None]
        lines.append("")
    if b["targets"]:
        lines += ["| target | required | measured | met |", "|---|---:|---:|---|"]
        for t in b["targets"]:
            fmt = (lambda v: "n/a" if v is None else f"{v:.1%}") if t["unit"] == "" else (lambda v: _num(v, 3))
            met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
            lines.append(f"| {t['what']} | {fmt(t['target'])} | {fmt(t['measured'])} | {met} |")
        lines.append("")
    extra = {k: v for k, v in b["extra"].items() if k != "matmul_peak"}
    if "matmul_peak" in b["extra"]:
        p = b["extra"]["matmul_peak"]
        lines.append(f"fp32 matmul peak measured in this run ({p['n']}x{p['n']}): max {p['max_gflops']:.1f} GFLOP/s, "
                     f"median {p['median_gflops']:.1f} GFLOP/s.")
        lines.append("")
    if extra:
        lines += [f"- {k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in extra.items()]
        lines.append("")
    lines += [f"- note: {n}" for n in b["notes"]]
    if b["notes"]:
        lines.append("")
    return "\n".join(lines)


def speed_section(run: dict) -> str:
    lines = [BEGIN, "## Speed", "",
             f"Command: `{run['command']}`", "",
             f"Date: {run['date']}. Machine: {run['machine'].get('cpu_model', '?')}, {run['machine']['cpu_count']} cores, "
             f"torch {run['machine']['torch']} ({run['machine']['cpu_capability']}, {run['machine']['torch_threads']} threads), "
             f"transformers {run['machine']['transformers']}, Python {run['machine']['python']}.", "",
             f"Load average (1/5/15 min) at start: {_load(run['load_start'])}; at end: {_load(run['load_end'])}. "
             "The machine has 2 cores shared with other engineers: a load above 2 means other processes took CPU "
             "time, so absolute numbers are lower bounds; the implementations alternate round by round, and the "
             "ratios of medians are the comparable numbers.", ""]
    if not run.get("complete", True):
        lines += ["**Partial run**: the benchmarks below finished; the run was still going (or was stopped).", ""]
    lines += ["Peers: HF transformers (GPT2LMHeadModel, sdpa attention) and torch.nn.Transformer. nanoGPT's model "
              "(a peer in the issue: 2,566 tokens/s, 63% MFU) is not vendored here (its code may not be committed), "
              "so it is not re-measured.", "",
              "Rows named `matmul floor` / `matvec floor` run only the Linear layers' matrix products of the same "
              "model (no attention, norms, loss, optimizer or Python around them): an upper bound for any "
              "implementation on this machine. Where a target is not met, `docs/experiments/cpu_speed.md` has the "
              "measured evidence of why (time breakdown by kernel category, bounds, and every lever with its "
              "prediction).", ""]
    if run.get("preamble"):
        lines += [run["preamble"], ""]
    for b in run["benchmarks"]:
        lines.append(bench_markdown(b))
    if run.get("quality"):
        lines += ["### int8 quality on a real model", "", "```json", json.dumps(run["quality"], indent=2), "```", ""]
    lines.append(END)
    return "\n".join(lines) + "\n"


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_results_md(path: str | os.PathLike, section: str, *, begin: str = BEGIN, end: str = END) -> None:
    """Insert or replace one tool's section of ``path`` (created with a header if absent), atomically.

    ``section`` includes its ``begin``/``end`` marker lines (by default the Speed section's).
    """
    path = Path(path)
    text = path.read_text() if path.exists() else HEADER
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    _atomic_write(path, text)


def write_json(path: str | os.PathLike, run: dict) -> None:
    _atomic_write(Path(path), json.dumps(run, indent=2, default=str) + "\n")
