"""The training run that test_kill_resume.py starts, kills and resumes (run with runpy in a child process).

Globals given by the test (``init_globals``): ``OUT`` (run folder), ``RESUME`` (bool), ``KILL`` (None or
``(point, n)``: SIGKILL this process at the n-th call of that point), ``SLOW`` (seconds to sleep per
update), ``ERROR_FILE`` (where a refused start writes its message). Points: ``update`` (before an optimizer
update), ``fsync`` (inside a checkpoint write, after a tensor file), ``state`` (writing state.json into the
unfinished folder), ``rename`` (publishing a checkpoint folder).
"""

import os
import signal
import time

import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

from attnkit.models.configs import GPTConfig  # noqa: E402
from attnkit.models.gpt import GPT  # noqa: E402
from attnkit.checkpoints import checkpoint  # noqa: E402
from attnkit.training import LMTask, TrainConfig, Trainer, seed_everything  # noqa: E402

STEPS = 30
calls: dict[str, int] = {}


def _point(name: str) -> None:
    calls[name] = calls.get(name, 0) + 1
    if KILL is not None and KILL == (name, calls[name]):  # noqa: F821 (given by the test)
        os.kill(os.getpid(), signal.SIGKILL)


def _hooked(name, fn):
    def wrapper(*args, **kwargs):
        _point(name)
        return fn(*args, **kwargs)
    return wrapper


checkpoint.fsync_file = _hooked("fsync", checkpoint.fsync_file)
checkpoint.write_text_atomic = _hooked("state", checkpoint.write_text_atomic)
checkpoint.os.rename = _hooked("rename", checkpoint.os.rename)
original_update = Trainer._update


def _update(self, train_model):
    _point("update")
    if SLOW:  # noqa: F821
        time.sleep(SLOW)  # noqa: F821
    return original_update(self, train_model)


Trainer._update = _update

g = torch.Generator().manual_seed(0)
tokens = torch.arange(3000) % 19
tokens = torch.where(torch.rand(3000, generator=g) < 0.2, torch.randint(0, 24, (3000,), generator=g), tokens)
gcfg = GPTConfig(vocab_size=24, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.1)
cfg = TrainConfig(steps=STEPS, batch_size=4, block_size=8, grad_accum=2, lr=3e-3, min_lr=3e-4, warmup_steps=3,
                  eval_every=5, eval_batches=1, log_every=1, ckpt_every=3, keep_last=2, seed=5)
seed_everything(cfg.seed)
model = GPT(gcfg)
task = LMTask(tokens[:2600], tokens[2600:], cfg.block_size, cfg.batch_size, seed=11)
try:
    trainer = Trainer(model, task, cfg, OUT, model_config=gcfg, resume=RESUME, progress=False)  # noqa: F821
except ValueError as err:
    with open(ERROR_FILE, "w") as fh:  # noqa: F821
        fh.write(str(err))
    raise SystemExit(3)
trainer.fit()
