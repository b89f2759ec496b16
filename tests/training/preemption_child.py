"""The ``attnkit`` command line with test hooks, started by test_preemption_cli.py and test_preemption_torchrun.py.

    python preemption_child.py RECORD_DIR [--slow-save] [--signal-at N] -- ARGS...     (also under torchrun)

Runs ``attnkit.cli.main.main(ARGS)`` and exits with its code. Each process writes its id to
``RECORD_DIR/rank<R>.pid`` at the start (R = its torchrun rank, 0 for a plain process) and ``RECORD_DIR/rank<R>.json``
at the end: ``{"exit_code", "stop"}`` where ``stop`` is what the run's ``Interrupted`` said (signal, step,
checkpoint, immediate) or None.

``--signal-at N``: the process sends itself SIGTERM when update N starts. ``--slow-save``: once a signal has asked
the run to stop, the checkpoint write that follows creates ``RECORD_DIR/saving`` after its first tensor file and
then sleeps for ten minutes, so that a test can send the second signal while the write is under way (the sleep
ends early only if that signal stops the process).
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

record_dir = Path(sys.argv[1])
rank = os.environ.get("RANK", "0")
(record_dir / f"rank{rank}.pid").write_text(str(os.getpid()))
options = sys.argv[2:sys.argv.index("--")]
slow_save = "--slow-save" in options
signal_at = int(options[options.index("--signal-at") + 1]) if "--signal-at" in options else None
args = sys.argv[sys.argv.index("--") + 1:]

from attnkit.checkpoints import checkpoint  # noqa: E402
from attnkit.cli.main import main  # noqa: E402
from attnkit.training.preemption import Interrupted  # noqa: E402
from attnkit.training.trainer import Trainer  # noqa: E402

stops: list[dict] = []
stopping = False
original_fit, original_stop, original_fsync = Trainer.fit, Trainer._stop_on_signal, checkpoint.fsync_file
original_update = Trainer._update


def fit(self):
    try:
        return original_fit(self)
    except Interrupted as stop:
        stops.append({"signal": stop.signal_name, "step": stop.step, "immediate": stop.immediate,
                      "checkpoint": None if stop.checkpoint is None else str(stop.checkpoint)})
        raise


def stop_on_signal(self, signum):
    global stopping
    stopping = True
    return original_stop(self, signum)


def fsync_file(path):
    original_fsync(path)
    if slow_save and stopping:
        (record_dir / "saving").touch()
        time.sleep(600)


def update(self, train_model):
    if self.step + 1 == signal_at:
        os.kill(os.getpid(), signal.SIGTERM)
    return original_update(self, train_model)


Trainer.fit, Trainer._stop_on_signal, Trainer._update, checkpoint.fsync_file = fit, stop_on_signal, update, fsync_file
code = 1
try:
    code = main(args)
finally:
    record = {"exit_code": code, "stop": stops[0] if stops else None}
    (record_dir / f"rank{rank}.json").write_text(json.dumps(record))
sys.exit(code)
