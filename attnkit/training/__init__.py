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

Files (one concept each): ``config`` (TrainConfig), ``optim`` (AdamW groups + LR schedules), ``task``
(the Task protocol), ``lm_task`` / ``mt_task`` (the two tasks), ``checkpoint`` (safetensors + JSON,
atomic), ``metrics`` (JSONL/CSV/PNG), ``rng`` (seeding, RNG state), ``progress`` (tqdm bar),
``atomic`` (crash-safe file writes), ``trainer`` (the loop).
"""

from .checkpoint import (CheckpointError, clean_stale, latest_checkpoint, list_checkpoints, load_checkpoint,
                         prune_checkpoints, read_checkpoint_state, save_checkpoint)
from .config import TrainConfig
from .lm_task import LMTask
from .metrics import MetricsLogger, read_metrics
from .mt_task import MTTask, greedy_translator
from .optim import LRScheduler, build_optimizer, lr_at, param_groups
from .rng import capture_rng_state, restore_rng_state, seed_everything
from .task import Task, batch_seed
from .trainer import Trainer, is_run_dir

__all__ = [
    "CheckpointError", "LMTask", "LRScheduler", "MTTask", "MetricsLogger", "Task", "TrainConfig", "Trainer",
    "batch_seed", "build_optimizer", "capture_rng_state", "clean_stale", "greedy_translator", "is_run_dir", "latest_checkpoint",
    "list_checkpoints", "load_checkpoint", "lr_at", "param_groups", "prune_checkpoints", "read_checkpoint_state",
    "read_metrics", "restore_rng_state", "save_checkpoint", "seed_everything",
]
