"""attnkit.checkpoints: the one checkpoint layer, below training, generation, interop and viz.

Files (one concept each):

* ``checkpoint.py`` -- a checkpoint folder: ``model.safetensors``, ``optimizer.safetensors``, ``state.json``;
  save, load, list, prune, repair after a crash;
* ``rng.py`` -- seeding, and the RNG states a checkpoint stores as JSON (exact resume);
* ``runs.py`` -- run folders: their layout, resolving a path to a checkpoint, the state ``--resume`` reads, which
  files a command may write (``check_output_file``);
* ``run_lock.py`` -- one training process per run folder;
* ``averaging.py`` -- averaging the last N step checkpoints;
* ``load.py`` -- :func:`load`: a model, its tokenizer and state back from any attnkit checkpoint
  (:class:`LoadedModel`, also what :mod:`attnkit.interop.load` returns for other formats).

Quick start::

    from attnkit.checkpoints import load
    loaded = load("runs/char")                 # checkpoints/best of a run folder
    loaded.model, loaded.tokenizer, loaded.state["step"]

Nothing is ever unpickled. The crash-safe writes (temporary name, flush, rename) are :mod:`attnkit.files`, re-exported
here as ``write_text_atomic`` / ``write_bytes_atomic``.
"""

from attnkit.files import write_bytes_atomic, write_text_atomic
from .checkpoint import (CheckpointError, clean_stale, latest_checkpoint, list_checkpoints, load_checkpoint,
                         prune_checkpoints, read_checkpoint_state, save_checkpoint)
from .load import LoadedModel, checkpoint_kind, load
from .rng import capture_rng_state, restore_rng_state, seed_everything
from .runs import default_run_folder, is_run_dir, read_saved_run, resolve_checkpoint

__all__ = [
    "CheckpointError", "LoadedModel", "capture_rng_state", "checkpoint_kind", "clean_stale", "default_run_folder",
    "is_run_dir", "latest_checkpoint", "list_checkpoints", "load", "load_checkpoint", "prune_checkpoints",
    "read_checkpoint_state", "read_saved_run", "resolve_checkpoint", "restore_rng_state", "save_checkpoint",
    "seed_everything", "write_bytes_atomic", "write_text_atomic",
]
