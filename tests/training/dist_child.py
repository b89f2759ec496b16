"""The training run the distributed tests start, under torchrun or as one plain process.

``python dist_child.py OUT JSON`` where JSON holds TrainConfig overrides plus ``resume`` (bool), ``slow``
(seconds to sleep per update, so that a test can kill the run mid-way) and ``task``: "lm" (``LMTask``,
random windows) or "windows" (micro-batch i of size b = windows [i*b, (i+1)*b), so that grad_accum=2 at
b equals one batch of 2b). A 2-block GPT (so that FSDP2 has
blocks to shard) learns a noisy counting sequence; dropout is 0, so the only difference between 1 and N
processes is the order of float summation.
"""

import json
import sys
import time

import torch

torch.set_num_threads(1)

from attnkit.models.configs import GPTConfig  # noqa: E402
from attnkit.models.gpt import GPT  # noqa: E402
from attnkit.training import LMTask, TrainConfig, Trainer, seed_everything  # noqa: E402
from attnkit.training import distributed  # noqa: E402

out, options = sys.argv[1], json.loads(sys.argv[2])
resume = options.pop("resume", False)
slow = options.pop("slow", 0.0)
kind = options.pop("task", "lm")


class WindowsTask(LMTask):
    """LMTask whose train batch ``step`` is the windows [step*B, (step+1)*B) of a fixed list (wrapping)."""

    def batch(self, split, step):
        if split != "train":
            return super().batch(split, step)
        data, T, B = self.tokens["train"], self.block_size, self.batch_size
        starts = (torch.arange(step * B, (step + 1) * B) * 7) % (data.numel() - T)  # (B,)
        window = data[starts[:, None] + torch.arange(T + 1)]  # (B, T + 1)
        return window[:, :-1], window[:, 1:]


g = torch.Generator().manual_seed(0)
tokens = torch.arange(4000) % 19
tokens = torch.where(torch.rand(4000, generator=g) < 0.2, torch.randint(0, 24, (4000,), generator=g), tokens)
gcfg = GPTConfig(vocab_size=24, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
settings = dict(steps=12, batch_size=8, block_size=8, grad_accum=1, lr=3e-3, min_lr=3e-4, warmup_steps=2,
                eval_every=4, eval_batches=2, log_every=1, ckpt_every=2, keep_last=20, seed=5)
settings.update(options)
cfg = TrainConfig(**settings)

if slow:
    original = Trainer._update

    def _update(self, train_model):
        time.sleep(slow)
        return original(self, train_model)

    Trainer._update = _update

seed_everything(cfg.seed)
model = GPT(gcfg)
task = (WindowsTask if kind == "windows" else LMTask)(tokens[:3500], tokens[3500:], block_size=cfg.block_size, batch_size=cfg.batch_size, seed=1)
try:
    Trainer(model, task, cfg, out, model_config=gcfg, resume=resume, progress=False).fit()
finally:
    distributed.shutdown()
