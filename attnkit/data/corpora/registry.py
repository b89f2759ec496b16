"""The registry of data recipes: a name (``shakespeare``, ``de-en``, ``fortunes``) maps to a function that
fetches, converts, splits and caches a corpus, returning the folder that holds it.

A recipe registers itself with :func:`register`::

    @register("shakespeare", kind="lm", description="...")
    def prepare_shakespeare(home: Path, force: bool = False) -> Path: ...

:func:`prepare` looks a recipe up by name and runs it; unknown names raise a ``ValueError`` listing the known
ones. Recipes are idempotent: a second call returns the cached folder without fetching anything. Two processes that
prepare the same recipe in the same cache at once (two commands, or the workers of the parallel test run) take turns:
:func:`prepare` holds an advisory ``fcntl.flock`` on the recipe's folder while the recipe runs, so the second waits
(saying so on stderr) and then finds the folder ready.
"""

from __future__ import annotations

import fcntl
import importlib
import os
import shutil
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from attnkit.data.fetch import attnkit_home

__all__ = ["Recipe", "register", "get_recipe", "is_recipe", "recipe_names", "prepare"]


@dataclass(frozen=True)
class Recipe:
    name: str
    kind: str  # "lm" (plain text: train.txt / valid.txt), "mt" (parallel: train/valid/test .tsv) or "mono"
    #            (monolingual sentences for back-translation: sentences.txt, one a line)
    description: str
    fn: Callable[..., Path]


_RECIPES: dict[str, Recipe] = {}

# Modules that define recipes; imported lazily so `import attnkit` stays light.
_RECIPE_MODULES = (
    "attnkit.data.corpora.shakespeare",
    "attnkit.data.corpora.de_en",
    "attnkit.data.corpora.fortunes",
    "attnkit.data.corpora.en_mono",
)


def register(name: str, *, kind: str, description: str) -> Callable[[Callable[..., Path]], Callable[..., Path]]:
    """Decorator registering ``fn(home: Path, force: bool = False) -> Path`` as the recipe ``name``."""
    if kind not in ("lm", "mt", "mono"):
        raise ValueError(f"recipe kind must be 'lm', 'mt' or 'mono', got {kind!r}")

    def deco(fn: Callable[..., Path]) -> Callable[..., Path]:
        _RECIPES[name] = Recipe(name, kind, description, fn)
        return fn

    return deco


def _load_all() -> None:
    for mod in _RECIPE_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:  # a recipe module not written yet
            if e.name != mod:
                raise


def recipe_names(kind: str | None = None) -> list[str]:
    _load_all()
    return sorted(n for n, r in _RECIPES.items() if kind is None or r.kind == kind)


def is_recipe(name: object) -> bool:
    """Whether ``name`` names a data recipe (a string naming one is the recipe, not a local path)."""
    _load_all()
    return isinstance(name, str) and name in _RECIPES


def get_recipe(name: str, *, paths: bool = True) -> Recipe:
    """The recipe ``name``; an unknown name raises ``ValueError`` listing the known ones (and, with ``paths``, that
    the caller also takes a path)."""
    _load_all()
    if name not in _RECIPES:
        raise ValueError(f"unknown data recipe {name!r}; known recipes: {', '.join(recipe_names()) or '(none)'}"
                         + (" (or pass a path to a local file or folder)" if paths else ""))
    return _RECIPES[name]


def prepare(name: str, *, force: bool = False, home: str | os.PathLike | None = None) -> Path:
    """Run the recipe ``name`` (fetch, convert, split, cache) and return the folder holding its files; ``home``:
    the cache folder (default :func:`~attnkit.data.fetch.attnkit_home`)."""
    recipe = get_recipe(name, paths=False)  # `data prepare` takes recipe names only
    home = attnkit_home() if home is None else Path(home).expanduser()
    root = home / "data" / name
    for folder in (root, *root.parents):
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{folder} is a file, but the data cache needs a folder there (ATTNKIT_HOME: "
                             f"{home})")
    root.mkdir(parents=True, exist_ok=True)
    with _preparing(root, name):
        return recipe.fn(root, force=force)


@contextmanager
def _preparing(root: Path, name: str) -> Iterator[None]:
    """Hold an exclusive lock on the recipe folder ``root`` (waiting for another process that holds it). The lock
    lives on an open descriptor of the folder: the kernel drops it when the process ends, ``kill -9`` included, so
    no stale lock file is left and nothing is written into the folder."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process that is preparing the recipe {name!r} in {root} ...",
                  file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        for stale in root.iterdir():  # left by a prepare that was stopped (SIGTERM, kill -9): nobody else is in here
            if stale.name.startswith((".extract-", "extract.")) and stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            elif stale.name.endswith(".tmp") and stale.is_file():  # hidden (write_atomic) or older <name>.tmp
                stale.unlink()
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
