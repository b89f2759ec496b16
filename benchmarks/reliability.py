"""The reliability sweep: bad inputs and faults across the API and every CLI command, as a table.

    python -m benchmarks.reliability            # prints the table, writes docs/reliability.md

Each row is a :class:`Case`: what goes in, what is expected, and a function that runs it and reports what
was observed. ``tests/reliability/test_sweep.py`` runs every row as a test, so the table and the suite
cannot drift apart. What every row must show (the goal of issue #18):

* a **clear error**: the API raises ``ValueError`` (or a subclass; ``FloatingPointError`` for non-finite
  numbers) naming the problem; the CLI exits with
  status 2 and ends with one line ``attnkit <command>: error: ...`` on stderr (progress lines such as
  "reading data ..." may come before it; argparse's usage errors add a usage line). Never a traceback.
* **no NaN** in what is printed;
* **nothing of the user's lost or overwritten**: the files a row protects hash the same afterwards.

Rows that need more than one process (a user without write permission, a full file system) run the CLI
in a subprocess; the non-root row needs root to drop to ``nobody`` with ``setpriv``, the full-disk row
needs permission to mount a small tmpfs: without them the row says "skipped" and why.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"  # what a full sweep rewrites (a run with -k writes nothing unless told)

__all__ = ["Case", "Outcome", "CASES", "Fixtures", "run_case", "check", "main"]


# ----------------------------------------------------------------------------------------------------
# what a row observes
# ----------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    kind: str  # "error" (clear refusal), "ok", "crash" (traceback / wrong exception), "skipped"
    message: str  # the error line, or a short note of what happened
    clean: bool = True  # one clear line, no traceback
    nan: bool = False  # "nan" printed
    intact: bool = True  # protected files unchanged
    stderr: str = field(default="", repr=False)  # everything the CLI wrote to stderr (for the test's report)

    def describe(self) -> str:
        flags = [] if self.clean else ["NOT CLEAN"]
        flags += ["NaN printed"] if self.nan else []
        flags += [] if self.intact else ["USER FILES CHANGED"]
        return f"{self.kind}: {self.message}" + (f" [{', '.join(flags)}]" if flags else "")


@dataclass
class Case:
    id: str
    area: str
    input: str
    expected: str  # "error: <text the message contains>" or "ok: <what happens>"
    run: Callable[["Fixtures", Path], Outcome] = field(repr=False)


def _hash_tree(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for root in paths:
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for f in files:
            if f.exists():
                h.update(str(f).encode())
                h.update(f.read_bytes())
    return h.hexdigest()


# How the sweep runs ``attnkit ARGV``: in a child process, as a user does (the default), or, when the test suite
# installs the command's entry point here (tests/reliability/conftest.py: ``attnkit.cli.main.main`` and
# ``build_parser``), in this process: the same outcome, without a torch import per row.
IN_PROCESS_MAIN: Callable[[list[str]], int] | None = None
BUILD_PARSER: Callable[[], object] | None = None


def cli(argv: list[str], protect: tuple[Path, ...] = ()) -> Outcome:
    """Run ``attnkit argv``; classify what it did."""
    if IN_PROCESS_MAIN is None:
        return cli_subprocess(argv, protect)
    before = _hash_tree(list(protect))
    out, err = io.StringIO(), io.StringIO()
    code = None
    crash = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = IN_PROCESS_MAIN([str(a) for a in argv])
        except SystemExit as e:  # argparse
            code = e.code
        except BaseException as e:  # noqa: BLE001 (a traceback is exactly what the sweep looks for)
            crash = f"{type(e).__name__}: {e}".splitlines()[0][:200]
            traceback.print_exc(file=err)
    return _classify(code, out.getvalue(), err.getvalue(), crash, before == _hash_tree(list(protect)))


def cli_subprocess(argv: list[str], protect: tuple[Path, ...] = (), *, user: int | None = None,
                   env: dict | None = None, timeout: float = 300) -> Outcome:
    """Run ``python -m attnkit argv`` in a child process (as uid ``user`` when given)."""
    before = _hash_tree(list(protect))
    cmd = [sys.executable, "-m", "attnkit", *[str(a) for a in argv]]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    full_env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    OMP_NUM_THREADS="1", **(env or {}))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=tempfile.gettempdir())
    crash = None
    if "Traceback (most recent call last)" in proc.stderr:
        crash = proc.stderr.strip().splitlines()[-1][:200]
    return _classify(proc.returncode, proc.stdout, proc.stderr, crash, before == _hash_tree(list(protect)))


def _classify(code, stdout: str, stderr: str, crash: str | None, intact: bool) -> Outcome:
    nan = any(w.strip(".,:;()[]").lower() == "nan" for w in stdout.split())
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if crash is not None:
        return Outcome("crash", crash, clean=False, nan=nan, intact=intact, stderr=stderr)
    if code == 0:
        return Outcome("ok", (lines[-1] if lines else "exit 0")[:200], nan=nan, intact=intact, stderr=stderr)
    # progress lines ("data ...", "reading ...") may come first; the refusal is one final error line
    errors = [ln for ln in lines if ln.startswith("attnkit") and "error:" in ln]
    clean = code == 2 and len(errors) == 1 and lines[-1] == errors[0]
    return Outcome("error", (errors[-1] if errors else (lines[-1] if lines else f"exit {code}"))[:300],
                   clean=clean, nan=nan, intact=intact, stderr=stderr)


def api(fn: Callable[[], object]) -> Outcome:
    """Call ``fn``: a ``ValueError`` (bad input) or ``FloatingPointError`` (non-finite numbers) is a clear
    refusal; anything else raised is a crash."""
    try:
        result = fn()
    except (ValueError, FloatingPointError) as e:
        return Outcome("error", f"{type(e).__name__}: {e}".splitlines()[0][:300])
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", f"{type(e).__name__}: {e}".splitlines()[0][:200], clean=False)
    return Outcome("ok", str(result)[:200])


# ----------------------------------------------------------------------------------------------------
# shared material: a corpus, a tiny LM run, parallel data and a tiny MT run (built once)
# ----------------------------------------------------------------------------------------------------
TINY_LM = ["--preset", "char-small", "--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=32",
           "--block-size", "16", "--batch-size", "8", "--warmup-steps", "2", "--eval-every", "10",
           "--eval-batches", "2", "--ckpt-every", "10", "--no-progress"]
TINY_MT = ["--preset", "transformer-small", "--set", "d_model=32", "--set", "num_heads=2",
           "--set", "num_encoder_layers=1", "--set", "num_decoder_layers=1", "--set", "dim_feedforward=64",
           "--vocab-size", "300", "--max-tokens", "256", "--max-len", "24", "--warmup-steps", "2",
           "--eval-every", "10", "--eval-batches", "1", "--ckpt-every", "10", "--no-bleu", "--no-progress"]


class Fixtures:
    """Inputs many rows share, made on first use under ``root``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._made: dict[str, Path] = {}

    def _once(self, name: str, make: Callable[[Path], None]) -> Path:
        if name not in self._made:
            path = self.root / name
            make(path)
            self._made[name] = path
        return self._made[name]

    @property
    def corpus(self) -> Path:
        def make(path: Path) -> None:
            rng = random.Random(0)
            words = "love night day sweet death fair light moon star heart hand kiss name rose dream".split()
            lines = []
            for _ in range(200):
                lines.append(rng.choice(["ROMEO", "JULIET", "NURSE"]) + ":")
                lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 9))).capitalize() + ".")
                lines.append("")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines), encoding="utf-8")
        return self._once("corpus.txt", make)

    @property
    def pairs(self) -> Path:
        def make(path: Path) -> None:
            rng = random.Random(1)
            words = "haus katze hund baum wasser brot licht nacht tag stern".split()
            rows = []
            for _ in range(160):
                src = [rng.choice(words) for _ in range(rng.randint(2, 6))]
                rows.append(" ".join(src) + "\t" + " ".join(reversed(src)))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(rows) + "\n", encoding="utf-8")
        return self._once("pairs.tsv", make)

    @property
    def lm_run(self) -> Path:
        def make(path: Path) -> None:
            _must(cli(["train", "lm", "--data", self.corpus, "--out", path, *TINY_LM, "--steps", "4"]), "tiny LM run")
        return self._once("lm_run", make)

    @property
    def mt_run(self) -> Path:
        def make(path: Path) -> None:
            _must(cli(["train", "mt", "--data", self.pairs, "--valid", self.pairs, "--out", path, *TINY_MT,
                       "--steps", "2"]), "tiny MT run")
        return self._once("mt_run", make)

    def lm_run_copy(self, tmp: Path) -> Path:
        dst = tmp / "run"
        shutil.copytree(self.lm_run, dst)
        return dst


def _must(outcome: Outcome, what: str) -> None:
    if outcome.kind != "ok":
        raise RuntimeError(f"could not build the {what}: {outcome.describe()}")


# ----------------------------------------------------------------------------------------------------
# the rows
# ----------------------------------------------------------------------------------------------------
CASES: list[Case] = []


def case(id: str, area: str, input: str, expected: str):
    def register(fn: Callable[[Fixtures, Path], Outcome]):
        CASES.append(Case(id, area, input, expected, fn))
        return fn
    return register


def _write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


def _every_weights_file(run: Path) -> list[Path]:
    return sorted(run.rglob("model.safetensors"))


def _torch():
    import torch
    return torch


# ---- attention and masks ---------------------------------------------------------------------------
def _sdpa(**kw):
    torch = _torch()
    from attnkit.modules.attention import scaled_dot_product_attention

    q = kw.pop("q", torch.randn(1, 2, 3, 4))
    k = kw.pop("k", torch.randn(1, 2, 3, 4))
    v = kw.pop("v", torch.randn(1, 2, 3, 4))
    return scaled_dot_product_attention(q, k, v, **kw)[0]


case("attn-3d-q", "api attention", "q of shape (2, 3, 4) (no head axis)", "error: q must be 4-D")(
    lambda fx, tmp: api(lambda: _sdpa(q=_torch().randn(2, 3, 4))))
case("attn-dtype-mix", "api attention", "q float32, k/v float64", "error: q, k, v must share a dtype")(
    lambda fx, tmp: api(lambda: _sdpa(k=_torch().randn(1, 2, 3, 4).double(), v=_torch().randn(1, 2, 3, 4).double())))
case("attn-int-qkv", "api attention", "integer q, k, v", "error: must be floating point")(
    lambda fx, tmp: api(lambda: _sdpa(q=_torch().ones(1, 2, 3, 4, dtype=_torch().long),
                                      k=_torch().ones(1, 2, 3, 4, dtype=_torch().long),
                                      v=_torch().ones(1, 2, 3, 4, dtype=_torch().long))))
case("attn-mask-shape", "api attention", "attn_mask of shape (3, 5) for T = S = 3", "error: 2-D attn_mask must have shape (T, S)")(
    lambda fx, tmp: api(lambda: _sdpa(attn_mask=_torch().zeros(3, 5, dtype=_torch().bool))))
case("attn-mask-dtype", "api attention", "attn_mask of dtype int64", "error: attn_mask must be bool")(
    lambda fx, tmp: api(lambda: _sdpa(attn_mask=_torch().zeros(3, 3, dtype=_torch().long))))
case("attn-padding-shape", "api attention", "key_padding_mask (1, 4) for S = 3", "error: key_padding_mask must have shape (B, S)")(
    lambda fx, tmp: api(lambda: _sdpa(key_padding_mask=_torch().zeros(1, 4, dtype=_torch().bool))))
case("attn-gqa-heads", "api attention", "3 query heads, 2 kv heads, enable_gqa", "error: H % K == 0")(
    lambda fx, tmp: api(lambda: _sdpa(q=_torch().randn(1, 3, 3, 4), enable_gqa=True)))
case("attn-dropout", "api attention", "dropout_p = 1.5", "error: dropout_p must be a number in [0, 1)")(
    lambda fx, tmp: api(lambda: _sdpa(dropout_p=1.5)))


def _nan_query():
    torch = _torch()
    q = torch.randn(1, 2, 3, 4)
    q[0, 0, 1, 0] = float("nan")
    out = _sdpa(q=q)
    rows = out.isnan().any(-1)[0, 0].tolist()
    return f"NaN rows {rows}" if rows == [False, True, False] else ValueError(f"NaN lost: rows {rows}")


case("attn-nan-query", "api attention", "a NaN in query row 1", "ok: row 1 (and only it) comes out NaN")(
    lambda fx, tmp: api(_nan_query))


def _dead_rows():
    torch = _torch()
    mask = torch.zeros(3, 3, dtype=torch.bool)
    mask[1] = True
    out = _sdpa(attn_mask=mask)
    if not torch.isfinite(out).all() or out[:, :, 1].abs().sum() != 0:
        raise RuntimeError("all-masked row is not zero")
    return "row 1 is zeros, all finite"


case("attn-all-masked", "api attention", "a query row with every key masked", "ok: that row is zeros, no NaN")(
    lambda fx, tmp: api(_dead_rows))
case("mask-padding-args", "api masks", "padding_mask(lengths, ids=...) (both given)", "error: exactly one of lengths= or ids=")(
    lambda fx, tmp: api(lambda: __import__("attnkit.modules.masks", fromlist=["x"]).padding_mask([1], ids=_torch().ones(1, 1))))


# ---- the GPT model and its config -------------------------------------------------------------------
def _gpt(**over):
    from attnkit.models.configs import GPTConfig
    from attnkit.models.gpt import GPT

    _torch().manual_seed(0)
    return GPT(GPTConfig(**(dict(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8) | over)))


case("gpt-id-range", "api model", "token id 16 for vocab_size 16", "error: token ids must be in [0, vocab_size) = [0, 16)")(
    lambda fx, tmp: api(lambda: _gpt()(_torch().tensor([[1, 16]]))))
case("gpt-id-negative", "api model", "token id -1", "error: token ids must be in [0, vocab_size) = [0, 16)")(
    lambda fx, tmp: api(lambda: _gpt()(_torch().tensor([[-1, 2]]))))
case("gpt-id-float", "api model", "float token ids", "error: idx must have dtype torch.int64 or torch.int32")(
    lambda fx, tmp: api(lambda: _gpt()(_torch().ones(1, 2))))
case("gpt-empty-batch", "api model", "ids of shape (0, 4) (empty batch)", "error: idx must have B >= 1")(
    lambda fx, tmp: api(lambda: _gpt()(_torch().zeros(0, 4, dtype=_torch().long))))
case("gpt-empty-seq", "api model", "ids of shape (2, 0) (empty sequences)", "error: T >= 1")(
    lambda fx, tmp: api(lambda: _gpt()(_torch().zeros(2, 0, dtype=_torch().long))))
case("gpt-too-long", "api model", "9 tokens into learned positions of block_size 8", "error: block_size")(
    lambda fx, tmp: api(lambda: _gpt()(_torch().zeros(1, 9, dtype=_torch().long))))
case("gpt-config-heads", "api config", "GPTConfig n_embd=10, n_head=4", "error: divisible")(
    lambda fx, tmp: api(lambda: _gpt(n_embd=10, n_head=4)))
case("gpt-config-type", "api config", "GPTConfig.from_dict with n_layer \"2\" (a string)", "error: n_layer")(
    lambda fx, tmp: api(lambda: __import__("attnkit.models.configs", fromlist=["x"]).GPTConfig.from_dict(
        dict(vocab_size=16, block_size=8, n_layer="2", n_head=2, n_embd=8))))
case("gpt-config-unknown", "api config", "GPTConfig.from_dict with an unknown field", "error: n_layers")(
    lambda fx, tmp: api(lambda: __import__("attnkit.models.configs", fromlist=["x"]).GPTConfig.from_dict(
        dict(vocab_size=16, block_size=8, n_layers=2, n_head=2, n_embd=8))))
case("train-config-steps", "api config", "TrainConfig(steps=0)", "error: steps")(
    lambda fx, tmp: api(lambda: __import__("attnkit.training.config", fromlist=["x"]).TrainConfig(steps=0)))
case("train-config-lr", "api config", "TrainConfig(lr=-1)", "error: lr")(
    lambda fx, tmp: api(lambda: __import__("attnkit.training.config", fromlist=["x"]).TrainConfig(lr=-1.0)))


# ---- generation ------------------------------------------------------------------------------------
def _gen(prompts, **kw):
    from attnkit.generation import generate
    return generate(_gpt(), prompts, **(dict(max_new_tokens=2) | kw))


case("gen-no-prompts", "api generation", "prompts = [] (empty batch)", "error: at least one prompt")(
    lambda fx, tmp: api(lambda: _gen([])))
case("gen-empty-prompt", "api generation", "prompts = [[]] (empty sequence)", "error: every prompt needs at least one token")(
    lambda fx, tmp: api(lambda: _gen([[]])))
case("gen-flat-prompt", "api generation", "prompts = [1, 2] (not a list of lists)", "error: wrap one prompt in a list")(
    lambda fx, tmp: api(lambda: _gen([1, 2])))
case("gen-id-range", "api generation", "prompt id 99 for vocab 16", "error: token ids must be ints in [0, 16)")(
    lambda fx, tmp: api(lambda: _gen([[99]])))
case("gen-top-p", "api generation", "top_p = 2", "error: top_p must satisfy 0 < top_p <= 1")(
    lambda fx, tmp: api(lambda: _gen([[1]], do_sample=True, top_p=2.0)))
case("gen-temperature", "api generation", "temperature = 0", "error: temperature must be a finite number > 0")(
    lambda fx, tmp: api(lambda: _gen([[1]], temperature=0.0)))
case("gen-max-new", "api generation", "max_new_tokens = -1", "error: max_new_tokens must be an int >= 0")(
    lambda fx, tmp: api(lambda: _gen([[1]], max_new_tokens=-1)))
case("gen-unknown-option", "api generation", "generate(..., beams=4) (unknown option)", "error: unknown generation option")(
    lambda fx, tmp: api(lambda: _gen([[1]], beams=4)))
case("gen-past-context", "api generation", "learned positions, 7 prompt + 5 new > block 8, cached",
     "error: use sliding_window=True")(lambda fx, tmp: api(lambda: _gen([[1] * 7], max_new_tokens=5)))
case("gen-sliding", "api generation", "the same with sliding_window=True", "ok: 5 tokens, the cache drops half the window")(
    lambda fx, tmp: api(lambda: len(_gen([[1] * 7], max_new_tokens=5, sliding_window=True)[0])))


def _nan_model_generate():
    torch = _torch()
    from attnkit.generation import generate

    model = _gpt()
    with torch.no_grad():
        model.wte.weight[3] = float("nan")
    return generate(model, [[1, 3, 2]], max_new_tokens=3)


case("gen-nan-model", "api generation", "greedy generate from a model with a NaN embedding row",
     "error: FloatingPointError: the model's next-token logits hold NaN")(
    lambda fx, tmp: api(_nan_model_generate))


# ---- checkpoints through the API ---------------------------------------------------------------------
def _load(path):
    from attnkit.checkpoints import load
    return load(path, require_tokenizer=False).model.__class__.__name__


def _corrupt_weights(fx: Fixtures, tmp: Path, data: Callable[[bytes], bytes]) -> Path:
    run = fx.lm_run_copy(tmp)
    for f in _every_weights_file(run):
        f.write_bytes(data(f.read_bytes()))
    return run


case("ckpt-truncated-api", "api checkpoint", "load on a run whose model.safetensors is cut in half",
     "error: model.safetensors")(lambda fx, tmp: api(lambda: _load(_corrupt_weights(fx, tmp, lambda b: b[:len(b) // 2]))))


def _pickled(fx: Fixtures, tmp: Path) -> Path:
    run = fx.lm_run_copy(tmp)
    marker = tmp / "pwned"
    payload = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('x')"

    class Evil:
        def __reduce__(self):
            return (exec, (payload,))

    import pickle
    for f in _every_weights_file(run):
        f.write_bytes(pickle.dumps(Evil()))
    return run


def _pickled_api(fx, tmp):
    out = api(lambda: _load(_pickled(fx, tmp)))
    if (tmp / "pwned").exists():
        return Outcome("crash", "the pickle ran code", clean=False)
    return out


case("ckpt-pickle-api", "api checkpoint", "model.safetensors replaced by a pickle that runs code when unpickled",
     "error: model.safetensors")(_pickled_api)


# ---- attnkit train lm ------------------------------------------------------------------------------------
def _train_lm(fx: Fixtures, tmp: Path, *extra, data=None, out=None, protect=()) -> Outcome:
    data = fx.corpus if data is None else data
    out = tmp / "out" if out is None else out
    return cli(["train", "lm", "--data", data, "--out", out, *TINY_LM, "--steps", "2", *extra], protect=protect)


case("lm-missing-data", "cli train lm", "--data no/such/file.txt", "error: no/such/file.txt")(
    lambda fx, tmp: _train_lm(fx, tmp, data=tmp / "no/such/file.txt"))
case("lm-empty-data", "cli train lm", "--data an empty file", "error: empty")(
    lambda fx, tmp: _train_lm(fx, tmp, data=_write(tmp / "empty.txt", "")))
case("lm-binary-data", "cli train lm", "--data 4 kB of random bytes", "error: UTF-8")(
    lambda fx, tmp: _train_lm(fx, tmp, data=_write(tmp / "bin.dat", random.Random(0).randbytes(4096))))
case("lm-latin1-data", "cli train lm", "--data Latin-1 text (not UTF-8)", "error: UTF-8")(
    lambda fx, tmp: _train_lm(fx, tmp, data=_write(tmp / "latin1.txt", ("caf\xe9 na\xefve " * 400).encode("latin-1"))))
case("lm-huge-line", "cli train lm", "--data one 2 MB line without a newline", "ok: trains (characters are characters)")(
    lambda fx, tmp: _train_lm(fx, tmp, data=_write(tmp / "line.txt", "abcdefgh " * 230_000)))
case("lm-steps-zero", "cli train lm", "--steps 0", "error: steps")(lambda fx, tmp: _train_lm(fx, tmp, "--steps", "0"))
case("lm-out-empty", "cli train lm", "--out '' (an empty name: was the working directory)",
     "error: out must not be empty")(
    lambda fx, tmp: cli(["train", "lm", "--data", fx.corpus, "--out", "", *TINY_LM, "--steps", "2"]))
case("lm-unknown-preset", "cli train lm", "--preset no-such-preset", "error: no-such-preset")(
    lambda fx, tmp: _train_lm(fx, tmp, "--preset", "no-such-preset"))
case("lm-set-unknown", "cli train lm", "--set foo=1", "error: foo")(lambda fx, tmp: _train_lm(fx, tmp, "--set", "foo=1"))
case("lm-set-type", "cli train lm", "--set n_layer=abc", "error: n_layer")(
    lambda fx, tmp: _train_lm(fx, tmp, "--set", "n_layer=abc"))
case("lm-block-zero", "cli train lm", "--block-size 0", "error: --block-size")(
    lambda fx, tmp: _train_lm(fx, tmp, "--block-size", "0"))
case("lm-warmup-steps", "cli train lm", "--warmup-steps 50 --steps 2 (explicit, larger than the run)",
     "error: --warmup-steps")(
    lambda fx, tmp: _train_lm(fx, tmp, "--warmup-steps", "50"))


def _warmup_of(outcome: Outcome, run: Path, expected: int) -> Outcome:
    """The row's outcome, turned into a failure when the run did not warm up for ``expected`` steps."""
    if outcome.kind == "ok":
        got = json.loads((run / "run.json").read_text())["train_config"]["warmup_steps"]
        outcome.message = f"warmup {got} steps; {outcome.message}"
        if got != expected:
            outcome.kind = "crash"
            outcome.message = f"expected a warmup of {expected} steps, got {got}"
    return outcome


def _short_lm(fx: Fixtures, tmp: Path, *extra, data=None) -> Outcome:
    """A 20-step run with the recipe's warmup (50 steps) left unset."""
    at = TINY_LM.index("--warmup-steps")
    flags = TINY_LM[:at] + TINY_LM[at + 2:]
    out = tmp / "out"
    data = fx.corpus if data is None else data
    return cli(["train", "lm", "--data", data, "--out", out, *flags, "--steps", "20", *extra])


case("lm-short-run", "cli train lm", "--steps 20, --warmup-steps unset (the recipe's is 50)",
     "ok: warms up for 2 steps, a tenth of the run")(
    lambda fx, tmp: _warmup_of(_short_lm(fx, tmp), tmp / "out", 2))
case("lm-short-unknown-preset", "cli train lm", "--steps 20, --warmup-steps unset, --preset no-such-preset",
     "error: no-such-preset")(lambda fx, tmp: _short_lm(fx, tmp, "--preset", "no-such-preset"))
case("lm-short-set-unknown", "cli train lm", "--steps 20, --warmup-steps unset, --set foo=1", "error: foo")(
    lambda fx, tmp: _short_lm(fx, tmp, "--set", "foo=1"))
case("lm-short-missing-data", "cli train lm", "--steps 20, --warmup-steps unset, --data missing.txt",
     "error: missing.txt")(lambda fx, tmp: _short_lm(fx, tmp, data=tmp / "missing.txt"))
case("lm-lr-string", "cli train lm", "--lr fast", "error: --lr")(lambda fx, tmp: _train_lm(fx, tmp, "--lr", "fast"))
case("lm-out-file", "cli train lm", "--out pointing at an existing file", "error: not a folder")(
    lambda fx, tmp: _train_lm(fx, tmp, out=_write(tmp / "notes.txt", "my notes"), protect=(tmp / "notes.txt",)))


def _existing_run(fx, tmp):
    run = fx.lm_run_copy(tmp)
    return _train_lm(fx, tmp, out=run, protect=(run,))


case("lm-out-existing-run", "cli train lm", "--out an existing run, without --resume", "error: already holds a training run")(
    _existing_run)
case("lm-resume-nothing", "cli train lm", "--resume into an empty folder", "error: holds no checkpoint")(
    lambda fx, tmp: _train_lm(fx, tmp, "--resume", out=(tmp / "empty_dir").resolve()) if (tmp / "empty_dir").mkdir() is None else None)


def _resume_changed(fx, tmp):
    run = fx.lm_run_copy(tmp)
    return cli(["train", "lm", "--data", fx.corpus, "--out", run, *TINY_LM, "--steps", "6", "--resume",
                "--set", "n_embd=64"], protect=(run / "checkpoints",))


case("lm-resume-changed", "cli train lm", "--resume with a different model (--set n_embd=64)", "error: configuration changed")(
    _resume_changed)


def _locked(fx, tmp):
    from attnkit.checkpoints.run_lock import RunLock
    run = fx.lm_run_copy(tmp)
    lock = RunLock(run)  # another process would hold it; the lock is per open file, so this stands in for it
    try:
        return cli(["train", "lm", "--data", fx.corpus, "--out", run, *TINY_LM, "--steps", "6", "--resume"],
                   protect=(run,))
    finally:
        lock.release()


case("lm-out-locked", "cli train lm", "--resume on a run folder another training process holds",
     "error: in use by another training process")(_locked)


def _resume_edited_state(fx, tmp, edit):
    run = fx.lm_run_copy(tmp)
    for state in run.rglob("state.json"):
        data = json.loads(state.read_text())
        edit(data)
        state.write_text(json.dumps(data))
    return cli(["train", "lm", "--data", fx.corpus, "--out", run, *TINY_LM, "--steps", "6", "--resume"],
               protect=(run / "checkpoints",))


case("lm-resume-state-type", "cli train lm", "--resume after state.json's step was edited to \"four\"", "error: step")(
    lambda fx, tmp: _resume_edited_state(fx, tmp, lambda d: d.update(step="four")))
case("lm-resume-truncated", "cli train lm", "--resume from checkpoints whose weights are truncated", "error: model.safetensors")(
    lambda fx, tmp: (lambda run: cli(["train", "lm", "--data", fx.corpus, "--out", run, *TINY_LM, "--steps", "6",
                                      "--resume"], protect=(run / "checkpoints",)))(
        _corrupt_weights(fx, tmp, lambda b: b[:len(b) // 3])))


def _diverging(fx, tmp):
    out = tmp / "out"
    outcome = cli(["train", "lm", "--data", fx.corpus, "--out", out, *TINY_LM, "--steps", "20", "--lr", "1e30",
                   "--schedule", "constant", "--ckpt-every", "1"])
    kept = re.search(r"last good checkpoint is (\S+)", outcome.message)
    if kept and kept.group(1) != "none":
        from attnkit.checkpoints import load
        model = load(kept.group(1), require_tokenizer=False).model
        if not all(bool(p.isfinite().all()) for p in model.parameters()):
            outcome.intact, outcome.message = False, outcome.message + " (but it holds non-finite weights)"
    return outcome


case("lm-diverging", "cli train lm", "--lr 1e30 (the run diverges)", "error: the last good checkpoint is")(_diverging)


def _nan_weights(fx, tmp, run=None):
    from safetensors.torch import load_file, save_file
    run = fx.lm_run_copy(tmp) if run is None else run
    for f in _every_weights_file(run):
        weights = load_file(str(f))
        for t in weights.values():
            t.fill_(float("nan"))
        save_file(weights, str(f))
    return run


case("sample-nan-weights", "cli sample", "--ckpt whose weights are all NaN", "error: NaN")(
    lambda fx, tmp: (lambda run: _sample(run, protect=(run,)))(_nan_weights(fx, tmp)))
case("eval-lm-nan-weights", "cli eval lm", "--ckpt whose weights are all NaN", "error: NaN")(
    lambda fx, tmp: cli(["eval", "lm", "--ckpt", _nan_weights(fx, tmp), "--data", fx.corpus]))


def _non_writable(fx, tmp, inside: bool = True):
    """``train lm`` as nobody with ``--out`` inside (or at) a folder nobody may write; the data must survive."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return Outcome("skipped", "needs root (to run as nobody) and setpriv")
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                            "import attnkit.api"], capture_output=True, text=True, cwd=tempfile.gettempdir(),
                           env=dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")))
    if probe.returncode != 0:  # e.g. a checkout inside `mktemp -d` (mode 700): nobody cannot read the code itself
        return Outcome("skipped", f"nobody (uid 65534) cannot import attnkit from {ROOT} or its Python "
                                  f"(a folder above them is not readable by others)")
    base = Path(tempfile.mkdtemp(prefix="attnkit-ro-"))
    try:
        os.chmod(base, 0o755)
        data = base / "corpus.txt"
        shutil.copy(fx.corpus, data)
        os.chmod(data, 0o644)
        ro = base / "readonly"
        ro.mkdir(mode=0o555)
        os.chmod(ro, 0o555)
        return cli_subprocess(["train", "lm", "--data", data, "--out", ro / "run" if inside else ro, *TINY_LM,
                               "--steps", "2"], protect=(data,), user=65534,
                              env={"MPLCONFIGDIR": str(base), "HOME": str(base)})
    finally:
        shutil.rmtree(base, ignore_errors=True)


case("lm-out-readonly", "cli train lm", "--out inside a folder the user (nobody, uid 65534) cannot write",
     "error: Permission denied")(_non_writable)
case("lm-out-readonly-folder", "cli train lm", "--out an existing empty folder the user (nobody, uid 65534) cannot write",
     "error: Permission denied")(lambda fx, tmp: _non_writable(fx, tmp, inside=False))


def _full_disk(fx, tmp):
    mnt = Path(tempfile.mkdtemp(prefix="attnkit-full-"))
    size_kb = 512  # the run folder and two checkpoints (~210 kB each: weights + Adam state) fit, a third does not
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(mnt)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        shutil.rmtree(mnt, ignore_errors=True)
        return Outcome("skipped", f"cannot mount a tmpfs here: {mounted.stderr.strip()[:100]}")
    try:
        out = mnt / "run"
        outcome = cli(["train", "lm", "--data", fx.corpus, "--out", out, *TINY_LM, "--steps", "40",
                       "--ckpt-every", "1", "--eval-every", "100", "--keep-last", "5"])
        published = sorted(p.name for p in (out / "checkpoints").iterdir()) if (out / "checkpoints").is_dir() else []
        good = [p for p in published if not p.endswith((".tmp", ".old"))]
        if outcome.kind == "error":
            from attnkit.checkpoints import load
            try:  # the checkpoints written before the disk filled up still load
                for name in good:
                    load(out / "checkpoints" / name, require_tokenizer=False)
            except Exception as e:  # noqa: BLE001
                outcome.intact, outcome.message = False, f"{outcome.message} (and {name} is broken: {e})"
            if not good:
                outcome.message += " (no checkpoint fitted at all)"
            else:
                outcome.message += f" (kept: {', '.join(good)})"
        return outcome
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
        shutil.rmtree(mnt, ignore_errors=True)


case("lm-disk-full", "cli train lm", "--out on a 512 kB tmpfs: the disk fills during the third checkpoint write",
     "error: No space left on device")(_full_disk)


# ---- attnkit train mt ------------------------------------------------------------------------------
def _train_mt(fx, tmp, data, *extra, valid=None):
    valid = ["--valid", valid] if valid is not None else []
    return cli(["train", "mt", "--data", data, *valid, "--out", tmp / "out", *TINY_MT, "--steps", "2", *extra])


case("mt-missing-data", "cli train mt", "--data missing.tsv", "error: missing.tsv")(
    lambda fx, tmp: _train_mt(fx, tmp, tmp / "missing.tsv", valid=fx.pairs))
case("mt-no-tabs", "cli train mt", "--data a TSV without any tab", "error: no usable")(
    lambda fx, tmp: _train_mt(fx, tmp, _write(tmp / "bad.tsv", "no tab here\nnor here\n" * 20), valid=fx.pairs))
case("mt-empty-valid", "cli train mt", "--valid an empty file", "error: empty")(
    lambda fx, tmp: _train_mt(fx, tmp, fx.pairs, valid=_write(tmp / "valid.tsv", "")))
case("mt-binary", "cli train mt", "--data random bytes", "error: UTF-8")(
    lambda fx, tmp: _train_mt(fx, tmp, _write(tmp / "bin.tsv", random.Random(1).randbytes(3000)), valid=fx.pairs))


def _mismatched(fx, tmp):
    src = _write(tmp / "train.de", "\n".join(f"satz {i}" for i in range(50)) + "\n")
    tgt = _write(tmp / "train.en", "\n".join(f"sentence {i}" for i in range(49)) + "\n")
    return _train_mt(fx, tmp, f"{src},{tgt}", valid=fx.pairs)


case("mt-mismatched-files", "cli train mt", "--data SRC,TGT with 50 and 49 lines", "error: 50")(_mismatched)


def _one_tsv(fx, tmp):
    at = TINY_MT.index("--warmup-steps")
    out = tmp / "out"
    outcome = cli(["train", "mt", "--data", fx.pairs, "--out", out, *TINY_MT[:at], *TINY_MT[at + 2:], "--steps", "3"],
                  protect=(fx.pairs,))
    said = re.search(r"no --valid: split off (\d+) of (\d+) pairs", outcome.stderr)
    if outcome.kind == "ok" and not (said and said.groups() == ("16", "160")):
        outcome.kind, outcome.message = "crash", f"no validation split of 16 of 160 pairs reported: {said}"
    return _warmup_of(outcome, out, 1)


case("mt-one-tsv", "cli train mt", "--data one TSV of 160 pairs, no --valid, --steps 3, --warmup-steps unset",
     "ok: splits off 16 validation pairs (says so), warms up for 1 step")(_one_tsv)
case("mt-one-tsv-too-small", "cli train mt", "--data one TSV of 6 pairs, no --valid",
     "error: too few to split off a validation part")(
    lambda fx, tmp: _train_mt(fx, tmp, _write(tmp / "six.tsv", "".join(f"satz {i}\tsentence {i}\n" for i in range(6)))))
case("mt-max-len", "cli train mt", "--max-len 0", "error: --max-len must be >= 2")(
    lambda fx, tmp: _train_mt(fx, tmp, fx.pairs, "--max-len", "0", valid=fx.pairs))


# ---- attnkit sample ----------------------------------------------------------------------------------
def _sample(ckpt, *extra, protect=()):
    return cli(["sample", "--ckpt", ckpt, "--prompt", "ROMEO:", "--max-new-tokens", "5", "--seed", "0", *extra],
               protect=protect)


def _sample_clean_stdout(fx, tmp, *flags):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        outcome = _sample(fx.lm_run, *flags)
    if out.getvalue():
        outcome.clean, outcome.message = False, f"{outcome.message} (printed {out.getvalue()[:40]!r} first)"
    return outcome


case("sample-missing", "cli sample", "--ckpt a folder that does not exist", "error: no such checkpoint")(
    lambda fx, tmp: _sample(tmp / "nothing"))
case("sample-top-p", "cli sample", "--top-p 2", "error: top_p must satisfy 0 < top_p <= 1")(
    lambda fx, tmp: _sample_clean_stdout(fx, tmp, "--top-p", "2"))
case("sample-temperature", "cli sample", "--temperature 0", "error: temperature must be a finite number > 0")(
    lambda fx, tmp: _sample_clean_stdout(fx, tmp, "--temperature", "0"))
case("sample-top-k", "cli sample", "--top-k 0", "error: top_k must be an int >= 1")(
    lambda fx, tmp: _sample_clean_stdout(fx, tmp, "--top-k", "0"))
case("sample-max-new", "cli sample", "--max-new-tokens -3", "error: max_new_tokens must be an int >= 0")(
    lambda fx, tmp: _sample_clean_stdout(fx, tmp, "--max-new-tokens", "-3"))
case("sample-num-samples", "cli sample", "--num-samples 0", "error: --num-samples must be >= 1")(
    lambda fx, tmp: _sample_clean_stdout(fx, tmp, "--num-samples", "0"))
case("sample-ngram", "cli sample", "--no-repeat-ngram-size -1", "error: no_repeat_ngram_size must be an int >= 0")(
    lambda fx, tmp: _sample_clean_stdout(fx, tmp, "--no-repeat-ngram-size", "-1"))
case("sample-interactive-no-template", "cli sample", "--interactive with a character model (no chat template)",
     "error: need a model with a chat template")(
    lambda fx, tmp: cli(["sample", "--ckpt", fx.lm_run, "--interactive"]))
case("sample-empty-stop", "cli sample", "--stop '' (an empty stop string)", "error: stop_strings must be None, a non-empty str")(
    lambda fx, tmp: _sample_clean_stdout(fx, tmp, "--stop", ""))
case("sample-mt-ckpt", "cli sample", "--ckpt a translation run", "error: needs a language model")(
    lambda fx, tmp: _sample(fx.mt_run))
case("sample-unknown-chars", "cli sample", "--prompt with characters the char tokenizer never saw",
     "error: not in the vocabulary")(
    lambda fx, tmp: cli(["sample", "--ckpt", fx.lm_run, "--prompt", "☃ ü", "--max-new-tokens", "3"]))
case("sample-long-prompt", "cli sample", "--prompt of 200 characters (context 16) + 20 new tokens",
     "ok: note on stderr, the cached window slides")(
    lambda fx, tmp: cli(["sample", "--ckpt", fx.lm_run, "--prompt", "ROMEO: love " * 17, "--max-new-tokens", "20",
                         "--seed", "1"]))
case("sample-truncated", "cli sample", "--ckpt a run whose weights are cut in half", "error: model.safetensors")(
    lambda fx, tmp: (lambda run: _sample(run, protect=(run,)))(_corrupt_weights(fx, tmp, lambda b: b[:len(b) // 2])))
case("sample-random-bytes", "cli sample", "--ckpt a run whose weights are random bytes", "error: model.safetensors")(
    lambda fx, tmp: (lambda run: _sample(run, protect=(run,)))(
        _corrupt_weights(fx, tmp, lambda b: random.Random(2).randbytes(len(b)))))


def _sample_pickle(fx, tmp):
    run = _pickled(fx, tmp)
    out = _sample(run, protect=(run,))
    if (tmp / "pwned").exists():
        return Outcome("crash", "the pickle ran code", clean=False)
    return out


case("sample-pickle", "cli sample", "--ckpt a run whose weights are a code-running pickle", "error: model.safetensors")(
    _sample_pickle)


def _sample_state(fx, tmp, edit, text=False):
    run = fx.lm_run_copy(tmp)
    for state in run.rglob("state.json"):
        if text:
            state.write_text(edit(state.read_text()))
        else:
            data = json.loads(state.read_text())
            edit(data)
            state.write_text(json.dumps(data))
    return _sample(run, protect=(run,))


case("sample-state-not-json", "cli sample", "--ckpt whose state.json is cut off mid-way", "error: state.json")(
    lambda fx, tmp: _sample_state(fx, tmp, lambda s: s[: len(s) // 2], text=True))
case("sample-config-type", "cli sample", "--ckpt whose state.json has n_embd: \"32\" (a string)", "error: n_embd")(
    lambda fx, tmp: _sample_state(fx, tmp, lambda d: d["model_config"].update(n_embd="32")))
case("sample-config-mismatch", "cli sample", "--ckpt whose model_config says n_embd 64 (weights are 32)",
     "error: model.safetensors")(lambda fx, tmp: _sample_state(fx, tmp, lambda d: d["model_config"].update(n_embd=64)))
case("sample-no-tokenizer", "cli sample", "--ckpt whose state.json lost its tokenizer", "error: tokenizer")(
    lambda fx, tmp: _sample_state(fx, tmp, lambda d: d["extra"].pop("tokenizer", None)))


# ---- attnkit eval lm / eval mt / translate ---------------------------------------------------------
case("eval-lm-missing", "cli eval lm", "--data a missing file", "error: missing.txt")(
    lambda fx, tmp: cli(["eval", "lm", "--ckpt", fx.lm_run, "--data", tmp / "missing.txt"]))
case("eval-lm-empty", "cli eval lm", "--data an empty file", "error: is empty (0 bytes)")(
    lambda fx, tmp: cli(["eval", "lm", "--ckpt", fx.lm_run, "--data", _write(tmp / "empty.txt", "")]))
case("eval-lm-mt-ckpt", "cli eval lm", "--ckpt a translation run", "error: needs a language model")(
    lambda fx, tmp: cli(["eval", "lm", "--ckpt", fx.mt_run, "--data", fx.corpus]))
case("eval-lm-batch", "cli eval lm", "--batch-size 0", "error: batch")(
    lambda fx, tmp: cli(["eval", "lm", "--ckpt", fx.lm_run, "--data", fx.corpus, "--batch-size", "0"]))
case("eval-lm-model-run", "cli eval lm", "--model an attnkit run folder", "error: give it as --ckpt")(
    lambda fx, tmp: cli(["eval", "lm", "--model", fx.lm_run, "--data", fx.corpus]))
case("eval-mt-lm-ckpt", "cli eval mt", "--ckpt a language-model run", "error: needs a translation model")(
    lambda fx, tmp: cli(["eval", "mt", "--ckpt", fx.lm_run, "--data", fx.pairs]))
case("eval-mt-beam", "cli eval mt", "--beam 0", "error: beam")(
    lambda fx, tmp: cli(["eval", "mt", "--ckpt", fx.mt_run, "--data", fx.pairs, "--beam", "0"]))
case("eval-mt-malformed", "cli eval mt", "--data a TSV without tabs", "error: holds no usable pair")(
    lambda fx, tmp: cli(["eval", "mt", "--ckpt", fx.mt_run, "--data", _write(tmp / "x.tsv", "no tabs\n" * 5)]))
case("translate-missing-input", "cli translate", "--input a missing file", "error: missing.txt")(
    lambda fx, tmp: cli(["translate", "--ckpt", fx.mt_run, "--input", tmp / "missing.txt"]))
case("translate-binary-input", "cli translate", "--input non-UTF-8 bytes", "error: UTF-8")(
    lambda fx, tmp: cli(["translate", "--ckpt", fx.mt_run, "--input", _write(tmp / "in.txt", b"\xff\xfe\x00bad\n")]))
case("translate-lm-ckpt", "cli translate", "--ckpt a language-model run", "error: needs a translation model")(
    lambda fx, tmp: cli(["translate", "--ckpt", fx.lm_run, "--input", _write(tmp / "in.txt", "haus\n")]))
case("translate-beam", "cli translate", "--beam 0", "error: beam")(
    lambda fx, tmp: cli(["translate", "--ckpt", fx.mt_run, "--beam", "0", "--input", _write(tmp / "in.txt", "haus\n")]))
case("translate-length-penalty", "cli translate", "--length-penalty nan", "error: --length-penalty")(
    lambda fx, tmp: cli(["translate", "--ckpt", fx.mt_run, "--length-penalty", "nan",
                         "--input", _write(tmp / "in.txt", "haus\n")]))
case("translate-pairs-flags", "cli translate", "--no-progress without --output (translations to stdout)",
     "error: work only with --output")(
    lambda fx, tmp: cli(["translate", "--ckpt", fx.mt_run, "--no-progress", "--input", _write(tmp / "in.txt", "haus\n")]))
case("translate-empty-lines", "cli translate", "--input with empty lines between sentences", "ok: one line out per line in")(
    lambda fx, tmp: cli(["translate", "--ckpt", fx.mt_run, "--input", _write(tmp / "in.txt", "haus\n\nkatze\n")]))


case("translate-too-long", "cli translate", "--input a 600-word sentence (max_len 24)", "ok: truncated, said on stderr")(
    lambda fx, tmp: cli(["translate", "--ckpt", fx.mt_run, "--input", _write(tmp / "long.txt", "haus katze " * 300 + "\n")]))
case("translate-empty-input", "cli translate", "--input an empty file", "ok: nothing to translate, nothing printed")(
    lambda fx, tmp: cli(["translate", "--ckpt", fx.mt_run, "--input", _write(tmp / "empty.txt", "")]))
case("translate-max-len-a", "cli translate", "--max-len-a -1", "error: --max-len-a must be a finite number >= 0")(
    lambda fx, tmp: cli(["translate", "--ckpt", fx.mt_run, "--max-len-a", "-1", "--input", _write(tmp / "in.txt", "haus\n")]))
case("eval-mt-max-sentences", "cli eval mt", "--max-sentences 0", "error: --max-sentences must be >= 1")(
    lambda fx, tmp: cli(["eval", "mt", "--ckpt", fx.mt_run, "--data", fx.pairs, "--max-sentences", "0"]))


def _mt_huge_line(fx, tmp):
    data = _write(tmp / "huge.tsv", "haus " * 100_000 + "\tkatze\n" + fx.pairs.read_text())
    return _train_mt(fx, tmp, data, valid=fx.pairs)


case("mt-huge-line", "cli train mt", "--data with one 500 kB source sentence among normal pairs",
     "ok: trains (the long pair is dropped or truncated)")(_mt_huge_line)


def _mt_nan_copy(fx, tmp):
    run = tmp / "mt"
    shutil.copytree(fx.mt_run, run)
    return _nan_weights(fx, tmp, run)


case("translate-nan-weights", "cli translate", "--ckpt a translation run whose weights are all NaN", "error: NaN")(
    lambda fx, tmp: cli(["translate", "--ckpt", _mt_nan_copy(fx, tmp), "--input", _write(tmp / "in.txt", "haus\n")]))
case("eval-mt-nan-weights", "cli eval mt", "--ckpt a translation run whose weights are all NaN", "error: NaN")(
    lambda fx, tmp: cli(["eval", "mt", "--ckpt", _mt_nan_copy(fx, tmp), "--data", fx.pairs]))


# ---- devices and attnkit convert -------------------------------------------------------------------
def _cuda_on_cpu(fx, tmp):
    if _torch().cuda.is_available():
        return Outcome("skipped", "CUDA is available here, so --device cuda is not a bad input")
    return cli(["sample", "--ckpt", fx.lm_run, "--device", "cuda", "--prompt", "RO", "--max-new-tokens", "2"])


case("sample-device-cuda", "cli sample", "--device cuda on a machine without CUDA", "error: CUDA is not available")(
    _cuda_on_cpu)
case("lm-device-unknown", "cli train lm", "--device tpu", "error: device must be one of")(
    lambda fx, tmp: _train_lm(fx, tmp, "--device", "tpu"))
case("lm-autocast-fp16-cpu", "cli train lm", "--autocast fp16 on the CPU", "error: autocast fp16 needs a GPU")(
    lambda fx, tmp: _train_lm(fx, tmp, "--autocast", "fp16", "--device", "cpu"))
case("convert-missing", "cli convert", "convert a folder that does not exist", "error: no checkpoint at")(
    lambda fx, tmp: cli(["convert", tmp / "nothing"]))
case("convert-ordinary", "cli convert", "convert a run whose checkpoints are not sharded", "error: not a sharded checkpoint")(
    lambda fx, tmp: cli(["convert", fx.lm_run]))


def _convert_over(fx, tmp):
    notes = _write(tmp / "mine" / "notes.txt", "keep me")
    return cli(["convert", fx.lm_run, notes.parent], protect=(notes.parent,))


case("convert-existing-out", "cli convert", "convert SRC OUT where OUT is an existing folder of the user's",
     "error: already exists")(_convert_over)


# ---- viz, trace, params, data, finetune ------------------------------------------------------------
case("finetune-mt-ckpt", "cli finetune", "finetune --from a translation run", "error: needs a language model")(
    lambda fx, tmp: cli(["finetune", "--from", fx.mt_run, "--data", fx.corpus, "--out", tmp / "ft", "--steps", "1",
                         "--no-progress"]))
case("viz-attention-empty-text", "cli viz", "viz attention --text '' (empty)", "error: needs --text")(
    lambda fx, tmp: cli(["viz", "attention", "--ckpt", fx.lm_run, "--text", "", "--out", tmp / "a.png"]))
case("trace-unknown-chars", "cli trace", "trace --ckpt an LM run --text with characters it never saw", "error: not in the vocabulary")(
    lambda fx, tmp: cli(["trace", "--ckpt", fx.lm_run, "--text", "☃☃"]))
case("viz-unknown", "cli viz", "viz no-such-figure", "error: invalid choice")(lambda fx, tmp: cli(["viz", "no-such-figure"]))
case("viz-attention-missing", "cli viz", "viz attention --ckpt a missing folder", "error: no such checkpoint")(
    lambda fx, tmp: cli(["viz", "attention", "--ckpt", tmp / "nothing", "--text", "hi", "--out", tmp / "a.png"]))
case("viz-predict-nan-weights", "cli viz", "viz predict --ckpt a run whose weights are all NaN", "error: not finite")(
    lambda fx, tmp: cli(["viz", "predict", "--ckpt", _nan_weights(fx, tmp), "--text", "ROMEO", "--out", tmp / "p.png"]))
case("viz-attention-nan-weights", "cli viz", "viz attention --ckpt a run whose weights are all NaN", "error: NaN")(
    lambda fx, tmp: cli(["viz", "attention", "--ckpt", _nan_weights(fx, tmp), "--text", "ROMEO", "--out", tmp / "a.png"]))
case("finetune-nan-weights", "cli finetune", "finetune --from a run whose weights are all NaN",
     "error: holds values that are not finite (NaN or inf)")(
    lambda fx, tmp: cli(["finetune", "--from", _nan_weights(fx, tmp), "--data", fx.corpus, "--out", tmp / "ft",
                         "--steps", "2", "--no-progress"]))
case("trace-unknown-preset", "cli trace", "trace --preset no-such-preset", "error: no-such-preset")(
    lambda fx, tmp: cli(["trace", "--preset", "no-such-preset"]))
case("trace-len-zero", "cli trace", "trace --preset char-small --len 0", "error: len")(
    lambda fx, tmp: cli(["trace", "--preset", "char-small", "--len", "0"]))
case("params-unknown", "cli params", "params no-such-preset", "error: no-such-preset")(
    lambda fx, tmp: cli(["params", "no-such-preset"]))
case("data-unknown", "cli data", "data prepare no-such-recipe", "error: no-such-recipe")(
    lambda fx, tmp: cli(["data", "prepare", "no-such-recipe"]))
case("data-list-extra", "cli data", "data list --bogus (an unknown flag)", "error: unrecognized arguments: --bogus")(
    lambda fx, tmp: cli(["data", "list", "--bogus"]))
case("viz-positions-len-zero", "cli viz", "viz positions --len 0", "error: must be an int >= 1, got 0")(
    lambda fx, tmp: cli(["viz", "positions", "--len", "0", "--out", tmp / "p.png"]))
case("viz-positions-dims", "cli viz", "viz positions --dims 0,999 (past the 128 channels)",
     "error: dims must be channels in [0, 128), got 999")(
    lambda fx, tmp: cli(["viz", "positions", "--dims", "0,999", "--out", tmp / "p.png"]))
case("viz-mask-lengths", "cli viz", "viz mask --kind padding --lengths 3,x",
     "error: --lengths must be comma-separated integers")(
    lambda fx, tmp: cli(["viz", "mask", "--kind", "padding", "--lengths", "3,x", "--out", tmp / "m.png"]))
case("viz-mask-other-kind", "cli viz", "viz mask --kind causal --masked-len 3 (a banded mask's flag)",
     "error: --masked-len is for --kind banded")(
    lambda fx, tmp: cli(["viz", "mask", "--kind", "causal", "--masked-len", "3", "--out", tmp / "m.png"]))
case("viz-out-below-a-file", "cli viz", "viz positions --out notes.txt/p.png (notes.txt is the user's file)",
     "error: is a file, not a folder")(
    lambda fx, tmp: cli(["viz", "positions", "--out", _write(tmp / "notes.txt", "mine\n") / "p.png"],
                        protect=(tmp / "notes.txt",)))
case("viz-params-unknown", "cli viz", "viz params no-such-preset", "error: unknown preset 'no-such-preset'")(
    lambda fx, tmp: cli(["viz", "params", "no-such-preset", "--out", tmp / "q.png"]))
case("finetune-short-run", "cli finetune", "finetune --steps 5, --warmup-steps unset (the recipe's is 20)",
     "ok: warms up for 1 step")(
    lambda fx, tmp: _warmup_of(cli(["finetune", "--from", fx.lm_run, "--data", fx.corpus, "--out", tmp / "ft",
                                    "--steps", "5", "--block-size", "16", "--batch-size", "4", "--no-progress"]),
                               tmp / "ft", 1))
case("finetune-missing", "cli finetune", "finetune --from a missing checkpoint folder",
     "error: no such file or folder, and not a named model")(
    lambda fx, tmp: cli(["finetune", "--from", tmp / "nothing", "--data", fx.corpus, "--out", tmp / "ft",
                         "--steps", "1", "--no-progress"]))
case("finetune-empty-data", "cli finetune", "finetune --from a run with an empty --data file",
     "error: is empty (0 bytes)")(
    lambda fx, tmp: cli(["finetune", "--from", fx.lm_run, "--data", _write(tmp / "empty.txt", ""), "--out", tmp / "ft",
                         "--steps", "1", "--no-progress"]))


# ----------------------------------------------------------------------------------------------------
# running and judging
# ----------------------------------------------------------------------------------------------------
def run_case(c: Case, fx: Fixtures, tmp: Path) -> Outcome:
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        outcome = c.run(fx, tmp)
    except Exception as e:  # noqa: BLE001 (a failure of the row's own set-up is reported, not hidden)
        outcome = Outcome("crash", f"{type(e).__name__}: {e}".splitlines()[0][:200], clean=False)
    return outcome if isinstance(outcome, Outcome) else Outcome("crash", f"row returned {outcome!r}", clean=False)


def check(c: Case, o: Outcome) -> str | None:
    """``None`` if the outcome meets the row's expectation, else what is wrong."""
    if o.kind == "skipped":
        return None
    kind, _, text = c.expected.partition(": ")
    problems = []
    if o.kind != kind:
        problems.append(f"expected {kind}, observed {o.kind}")
    if kind == "error" and text.strip() and text.strip().lower() not in o.message.lower():
        problems.append(f"message lacks {text.strip()!r}")
    if not o.clean:
        problems.append("not one clear line (traceback or extra output)")
    if o.nan:
        problems.append("printed NaN")
    if not o.intact:
        problems.append("changed the user's files")
    return "; ".join(problems) or None


def cli_commands() -> list[str]:
    """Every command of ``attnkit`` (``train lm``, ``eval mt``, ``sample``, ...): from its argument parser when the
    test suite installed it (:data:`BUILD_PARSER`), else from ``attnkit [COMMAND ...] --help`` (the subcommands are
    the lines indented by four spaces under "positional arguments")."""
    import argparse

    if BUILD_PARSER is not None:
        def walk(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if not subs:
                return [prefix]
            return [name for sub in subs for cmd, p in sub.choices.items()
                    for name in walk(p, f"{prefix} {cmd}".strip())]

        return walk(BUILD_PARSER(), "")

    def subcommands(words: list[str]) -> list[str]:
        text = subprocess.run([sys.executable, "-m", "attnkit", *words, "--help"], capture_output=True, text=True,
                              cwd=ROOT, check=True, timeout=120).stdout
        section = text.split("positional arguments:", 1)[1].split("\n\n", 1)[0] if "positional arguments:" in text else ""
        return [m.group(1) for m in re.finditer(r"^    (\S+)", section, re.M)]

    def walk_help(words: list[str]) -> list[str]:
        subs = subcommands(words)
        return [" ".join(words)] if not subs else [c for sub in subs for c in walk_help(words + [sub])]

    return walk_help([])


def uncovered_commands() -> list[str]:
    """Commands no row exercises. A row covers its area's command (``cli train lm`` covers ``train lm``); in an
    area that names only a command group (``cli viz``), a row covers the subcommand its input starts with
    (``viz mask --kind ...`` covers ``viz mask``)."""
    covered = set()
    for c in CASES:
        if c.area.startswith("cli "):
            covered.add(c.area.removeprefix("cli "))
            covered.add(" ".join(c.input.split()[:2]))
    return [cmd for cmd in cli_commands() if cmd not in covered]


def _machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


def kept_sections(path: Path) -> str:
    """The hand-written sections after the generated table (from the file's first ``## `` heading on), which a
    new sweep keeps: the fuzzing counts, preemption, ... ("" when there are none)."""
    if not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8")
    start = text.find("\n## ")
    return "" if start < 0 else "\n" + text[start + 1:]


def main(argv: list[str] | None = None) -> int:
    import argparse
    import datetime

    p = argparse.ArgumentParser(prog="python -m benchmarks.reliability", description=__doc__.splitlines()[0])
    p.add_argument("--write", default=None,
                   help="markdown file to write ('' = none; default docs/reliability.md, none with -k)")
    p.add_argument("-k", default="", help="only rows whose id contains this")
    args = p.parse_args(argv)
    cases = [c for c in CASES if args.k in c.id]
    if not cases:
        p.error(f"-k {args.k!r} matches no row")
    if args.write is None:  # a partial sweep must not replace the full table
        args.write = "" if args.k else str(DOC)
    rows = []
    with tempfile.TemporaryDirectory(prefix="attnkit-sweep-") as root:
        fx = Fixtures(Path(root) / "shared")
        for i, c in enumerate(cases):
            o = run_case(c, fx, Path(root) / f"{i:03d}-{c.id}")
            verdict = check(c, o)
            rows.append((c, o, verdict))
            print(f"{'PASS' if verdict is None else 'FAIL'}  {c.id:28s} {o.describe()[:150]}", flush=True)
            if verdict is not None:
                print(f"      {verdict}\n      stderr: {o.stderr[-600:]!r}", flush=True)
    passed = sum(v is None for _, o, v in rows if o.kind != "skipped")
    skipped = sum(o.kind == "skipped" for _, o, _ in rows)
    summary = f"{passed} of {len(rows) - skipped} rows as expected" + (f", {skipped} skipped" if skipped else "")
    missing = uncovered_commands()
    summary += f"; CLI commands without a row: {', '.join(missing) if missing else 'none'}"
    print(summary)
    if args.write:
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        lines = ["# Reliability: the bad-input and fault sweep", "",
                 "Generated by `python -m benchmarks.reliability` (every row is also a test: "
                 "`pytest tests/reliability`).", "",
                 f"Run {when} on {_machine()} (load: `{load}`). {summary}.", "",
                 "Expected for every row: a clear error (the API raises `ValueError` naming the problem; the CLI "
                 "exits 2 and ends with one line `attnkit <command>: error: ...`), no traceback, no NaN printed, and the "
                 "files the row protects (runs, checkpoints, the user's notes) unchanged. `<tmp>` is the row's "
                 "temporary folder. The kill -9 / resume and two-runs-on-one-folder faults are tested in "
                 "`tests/training/test_kill_resume.py` (8 kills at random moments, 4 of them inside checkpoint "
                 "writes; resume ends bit for bit where an uninterrupted run does).", "",
                 "Beside the table, property-based fuzzing (hypothesis) checks the same promises on random "
                 "input: every loader of a file a user may receive on mutated real files, hand-edited configs and "
                 "data files of random bytes and text (`tests/reliability/test_fuzz.py`, one parametrized test "
                 "over one table of targets; the 10,000-input benchmark behind it is under 'Fuzzing the loaders' "
                 "below), attention and masks (`tests/modules/test_attention_properties.py`: finite, all-masked rows "
                 "zero, fast path = reference, cached chunks = one pass) and generation "
                 "(`tests/generation/test_generation_properties.py`: cached = uncached, left-padded greedy batch "
                 "= one by one, beam 1 = greedy, any option value gives a config or a ValueError).", "",
                 "| # | area | input | expected | observed | ok |", "|---|---|---|---|---|---|"]
        for i, (c, o, v) in enumerate(rows, 1):
            cell = lambda s: re.sub(r"/tmp/attnkit-[a-z]+-\w+", "<tmp>", s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
            ok = "skipped" if o.kind == "skipped" else ("yes" if v is None else f"NO: {v}")
            lines.append(f"| {i} | {c.area} | {cell(c.input)} | {cell(c.expected)} | {cell(o.describe())} | {cell(ok)} |")
        Path(args.write).write_text("\n".join(lines) + "\n" + kept_sections(Path(args.write)), encoding="utf-8")
        print(f"wrote {args.write}")
    return 0 if passed + skipped == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
