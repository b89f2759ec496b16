"""In-process A/B of the seq2seq training step (benchmark, not a test): attnkit with another revision's version of
one of its modules, against attnkit as it is and torch.nn.Transformer, in alternating rounds of 5 steps.

    git show 7b883de:attnkit/modules/attention.py > /tmp/old_attention.py
    python benchmarks/ab_seq2seq_step.py --old attnkit/modules/attention.py=/tmp/old_attention.py --threads 1

    git show f93765e:attnkit/modules/dropout.py > /tmp/old_dropout.py
    python benchmarks/ab_seq2seq_step.py --old attnkit/modules/dropout.py=/tmp/old_dropout.py --threads 2

The old file is loaded as a sibling of the module it replaces; for the "old" rounds every attnkit module attribute
that is one of the current module's functions (the module's own globals included) is pointed at the old file's
function of the same name, and put back afterwards. Each variant runs once, untimed, before the rounds. Same models,
batch and optimizer as ``python -m benchmarks --only seq2seq``, whose between-run spread (about 15% on these shared
machines) hides a change of a few percent: hence the alternating rounds in one process. Built for the
attention-dropout change (2026-11-26, then ``ab_attention_dropout.py --old-attention``) and the 16-bit dropout mask
(2026-11-27).

There are no tensor axes in this file.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import statistics
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _swaps(target: types.ModuleType, old: types.ModuleType) -> list[tuple[object, str, object, object]]:
    """(holder, name, current, old) for every attnkit attribute that is one of ``target``'s functions."""
    current = {id(f): name for name, f in vars(target).items()
               if isinstance(f, types.FunctionType) and f.__module__ == target.__name__
               and isinstance(getattr(old, name, None), types.FunctionType)}
    out = []
    for mod in [m for n, m in sys.modules.items() if n == "attnkit" or n.startswith("attnkit.")]:
        if mod is old:
            continue
        for name, value in vars(mod).items():
            if id(value) in current:
                out.append((mod, name, value, getattr(old, current[id(value)])))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, metavar="MODULE_PATH=FILE",
                   help="the module to replace (a path under attnkit/) and another revision's copy of it")
    p.add_argument("--rounds", type=int, default=10, help="timed rounds, after one untimed warm-up call of each "
                                                          "variant (default 10)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.threads < 1:
        p.error(f"--rounds and --threads must be >= 1, got {args.rounds} and {args.threads}")
    module_path, sep, old_file = args.old.partition("=")
    if not sep or not module_path.startswith("attnkit/") or not module_path.endswith(".py"):
        p.error(f"--old must be attnkit/...py=FILE, got {args.old!r}")
    if not Path(old_file).is_file():
        p.error(f"--old: no file {old_file!r}")

    import torch

    torch.set_num_threads(args.threads)
    from benchmarks.breakdown import _impls
    from benchmarks.harness import run_header

    impls = dict(_impls("seq2seq", 5))  # builds the models: every attnkit module they use is imported now
    target = importlib.import_module(module_path[:-3].replace("/", "."))
    package, _, stem = target.__name__.rpartition(".")
    spec = importlib.util.spec_from_file_location(f"{package}._old_{stem}", old_file)
    old = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = old
    spec.loader.exec_module(old)
    swaps = _swaps(target, old)
    if not swaps:
        p.error(f"{old_file} shares no function with {module_path}")
    print(f"old rounds replace: {', '.join(sorted({f'{m.__name__}.{n}' for m, n, _, _ in swaps}))}")

    def use(which: int) -> None:
        for holder, name, *versions in swaps:
            setattr(holder, name, versions[which])

    runs = {f"attnkit, old {stem}": (impls["attnkit"], 1), "attnkit": (impls["attnkit"], 0),
            "torch.nn.Transformer": (impls["torch.nn.Transformer"], 0)}
    for run, which in runs.values():  # warm-up, untimed: lazy initialisation, the optimizer's state, the allocator
        use(which)
        run()
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, (run, which) in runs.items():
            use(which)
            t0 = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - t0)
    use(0)
    print(run_header("python benchmarks/ab_seq2seq_step.py", argv))
    peer = statistics.median(seconds["torch.nn.Transformer"])
    for name, values in seconds.items():
        print(f"{name}: median {statistics.median(values):.4f} s per 5 steps (min {min(values):.4f}, max "
              f"{max(values):.4f}); torch.nn / this {peer / statistics.median(values):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
