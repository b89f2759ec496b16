"""attnkit.training: one training loop for language modelling and translation.

Quick start (language modelling)::

    from attnkit.training import LMTask, TrainConfig, Trainer, seed_everything
    cfg = TrainConfig(steps=2000, batch_size=32, block_size=128, lr=1e-3)
    seed_everything(cfg.seed)                       # before building the model: reproducible init
    model = GPT(gpt_config)
    task = LMTask(train_ids, valid_ids, block_size=cfg.block_size, batch_size=cfg.batch_size, seed=cfg.seed)
    summary = Trainer(model, task, cfg, "runs/lm", model_config=gpt_config).fit()
    # later, after a crash or to train longer:
    Trainer(model, task, cfg.replace(steps=4000), "runs/lm", model_config=gpt_config, resume=True).fit()

Files (one concept each): ``config`` (TrainConfig), ``optim`` (AdamW groups + LR schedules), ``muon``,
``task`` (the Task protocol), ``lm_task`` / ``mt_task`` (the two tasks), ``metrics`` (JSONL/CSV/PNG),
``progress`` (tqdm bar), ``device`` / ``distributed`` / ``sharded`` / ``cuda_graphs`` (where and how the step
runs), ``lora_run``, ``bleu``, ``trainer`` (the loop). Checkpoints, run folders, seeding and RNG state are the
layer below: :mod:`attnkit.checkpoints` (re-exported here for the training loop's users).
"""

from attnkit.checkpoints import (CheckpointError, capture_rng_state, clean_stale, is_run_dir, latest_checkpoint,
                                 list_checkpoints, load_checkpoint, prune_checkpoints, read_checkpoint_state,
                                 restore_rng_state, save_checkpoint, seed_everything)

from .config import TrainConfig
from .lm_task import LMTask
from .metrics import MetricsLogger, read_metrics
from .mt_task import MTTask, greedy_translator
from .optim import LRScheduler, build_optimizer, lr_at, param_groups
from .preemption import Interrupted
from .task import Task, batch_seed
from .trainer import Trainer

__all__ = [
    "CheckpointError", "Interrupted", "LMTask", "LRScheduler", "MTTask", "MetricsLogger", "Task", "TrainConfig", "Trainer",
    "batch_seed", "build_optimizer", "capture_rng_state", "clean_stale", "greedy_translator", "is_run_dir", "latest_checkpoint",
    "list_checkpoints", "load_checkpoint", "lr_at", "param_groups", "prune_checkpoints", "read_checkpoint_state",
    "read_metrics", "restore_rng_state", "save_checkpoint", "seed_everything",
]
