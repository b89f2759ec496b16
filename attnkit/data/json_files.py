"""Reading a JSON file that a user may have edited or damaged: parse it, or raise the caller's clear error.

There are no tensor axes in this file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

__all__ = ["read_json_file"]


def read_json_file(path: str | os.PathLike, make_error: Callable[[Exception], Exception]) -> Any:
    """The parsed content of the UTF-8 JSON file ``path``; a file that is not UTF-8 or not valid JSON raises
    ``make_error(the parser's error)`` (a ``ValueError`` or ``CheckpointError`` worded for the caller). So do
    JSON the parser refuses for its size: a number of more than 4,300 digits, arrays or objects nested thousands
    deep (Python's parser would run out of stack)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, an integer past the digit limit
        raise make_error(err) from None
    except RecursionError:
        raise make_error(ValueError("arrays or objects nested too deeply")) from None
