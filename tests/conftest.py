"""Suite-wide test settings and shared fixtures (``tiny_lm``: a tiny language model; ``make_copy_task``: a
prepared translation folder of letter sequences and their copies).

Every test runs torch on one thread: the models in the tests are tiny, so a second thread costs more in
start-up and synchronisation than it saves, and on a loaded 2-core machine a thread waiting for a busy
core slows tiny-model steps by an order of magnitude. (Tests that need more set it themselves.)
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import pytest
import torch

from helpers import TinyLM

# No test reaches the network: Hugging Face libraries read local files only (the hub reads this when imported, so it
# is set before any test module imports transformers), and print errors only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@pytest.fixture(autouse=True, scope="session")
def _attnkit_home_of_the_session(tmp_path_factory):
    """What the runs of the suite cache (token stores of temporary corpora, prepared data) goes to a temporary
    folder, never to the user's ``~/.cache/attnkit``; tests that need the fetched recipes pass the tests' package
    cache (``attnkit_test_home``) explicitly. A given ``$ATTNKIT_HOME`` is kept."""
    if os.environ.get("ATTNKIT_HOME"):
        yield
        return
    os.environ["ATTNKIT_HOME"] = str(tmp_path_factory.mktemp("attnkit-home"))
    try:
        yield
    finally:
        os.environ.pop("ATTNKIT_HOME", None)


@pytest.fixture(autouse=True, scope="session")
def _sigint_as_in_a_terminal():
    """pytest-xdist's workers (``scripts/test.sh`` runs the suite in them) ignore SIGINT, leaving Ctrl-C to the
    controller, and a subprocess inherits an ignored signal. The preemption tests stop training runs with SIGINT as a
    terminal's Ctrl-C does, and a run started with SIGINT ignored rightly keeps it ignored; so the suite gives itself
    (and so its subprocesses) Python's usual SIGINT handler back."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture(autouse=True)
def _torch_one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pytest_collection_modifyitems(config, items):
    """End-to-end command-line tests (tests/cli, and the ``test_cli_*.py`` files beside the package parts they
    drive, e.g. tests/viz/test_cli_trace.py: each runs `attnkit ...` commands that train, translate, sample or
    draw) are marked ``slow``. The README's test command runs them all; ``-m "not slow"`` skips them for a
    quick local run."""
    for item in items:
        if "cli" in item.path.parts[-2:-1] or item.path.name.startswith("test_cli_"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def tiny_lm():
    """Factory: ``tiny_lm(seed=0, dropout=0.0, vocab_size=32)`` -> a freshly initialised TinyLM."""

    def make(seed: int = 0, dropout: float = 0.0, vocab_size: int = 32) -> TinyLM:
        torch.manual_seed(seed)
        return TinyLM(vocab_size=vocab_size, dropout=dropout)

    return make


def _make_copy_task(folder: Path, *, seed: int = 0, sizes=(("train", 1500), ("valid", 60), ("test", 60)),
                    letters: str = "abcdefgh", lengths: tuple[int, int] = (3, 7), target: str = "upper") -> Path:
    """A prepared data folder (``<split>.tsv`` for each of ``sizes``) of letter sequences (``lengths`` words drawn
    from ``letters``) and their targets: upper-cased copies (``target="upper"``: source and target are different
    strings, the model must map, not just echo ids) or the words reversed (``"reversed"``)."""
    if target not in ("upper", "reversed"):
        raise ValueError(f"target must be 'upper' or 'reversed', got {target!r}")
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in sizes:
        lines = []
        for _ in range(n):
            words = [rng.choice(letters) for _ in range(rng.randint(*lengths))]
            out = [w.upper() for w in words] if target == "upper" else list(reversed(words))
            lines.append(" ".join(words) + "\t" + " ".join(out))
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def make_copy_task():
    """``make_copy_task(folder, *, seed=0, sizes=((split, n), ...), letters=, lengths=, target=) -> folder``."""
    return _make_copy_task


@pytest.fixture
def count_calls(monkeypatch):
    """``count_calls(module, "name")``: a list that gets one entry per call of ``module.name`` while the test runs
    (the function itself still runs)."""

    def install(module, name: str) -> list[int]:
        calls: list[int] = []
        real = getattr(module, name)

        def counting(*args, **kwargs):
            calls.append(1)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)
        return calls

    return install


@pytest.fixture
def checkpoint_calls(count_calls) -> list[int]:
    """Counts the blocks run through activation checkpointing's ``torch.utils.checkpoint.checkpoint``."""
    import attnkit.modules.activation_checkpointing as ac

    return count_calls(ac, "checkpoint")


@pytest.fixture
def chunk_calls(count_calls) -> list[int]:
    """Counts the loss chunks run through the chunked loss's ``torch.utils.checkpoint.checkpoint``."""
    import attnkit.modules.chunked_cross_entropy as cce

    return count_calls(cce, "checkpoint")
