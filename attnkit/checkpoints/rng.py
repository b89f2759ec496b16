"""Random-number-generator state: seed everything, capture it as JSON, restore it.

Exact resume needs the *global* generators to continue where they stopped: dropout draws from torch's
default CPU generator (and the CUDA ones on a GPU); user code may use python's ``random`` or numpy.
The training *data* does not depend on these (tasks seed their own ``torch.Generator`` from
(seed, split, step)), so these states are all that is left to save.

The captured state is plain JSON (numbers and base64 strings of the raw state words), never a pickle.
No tensors flow through this module's public API, so there are no shapes to document.
"""

from __future__ import annotations

import base64
import math
import random
from typing import Any

import numpy as np
import torch

from attnkit.checks import check_int, is_int, is_number


def seed_everything(seed: int) -> None:
    """Seed python's ``random``, numpy's legacy global generator and torch (CPU and all CUDA devices)."""
    check_int("seed", seed, minimum=0)
    random.seed(seed)
    np.random.seed(seed % 2**32)  # numpy's legacy seed must fit in 32 bits
    torch.manual_seed(seed)  # also seeds every CUDA device


def _b64(t: torch.Tensor) -> str:
    """uint8 tensor -> base64 text."""
    return base64.b64encode(t.numpy().tobytes()).decode("ascii")


def _unb64(text: str) -> torch.Tensor:
    """base64 text -> uint8 tensor."""
    return torch.frombuffer(bytearray(base64.b64decode(text, validate=True)), dtype=torch.uint8).clone()


def _words_b64(words) -> str:
    """A sequence of 32-bit unsigned words (Mersenne-Twister state) -> base64 text (little endian)."""
    return base64.b64encode(np.asarray(words, dtype="<u4").tobytes()).decode("ascii")


def _unwords_b64(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text, validate=True), dtype="<u4").astype(np.uint32)


def _reason(err: Exception) -> str:
    """What a failed read of a saved state says: a ``KeyError``'s text is only the key."""
    return f"it lacks {err}" if isinstance(err, KeyError) else str(err)


def capture_rng_state() -> dict[str, Any]:
    """JSON-able snapshot of the python, numpy and torch (CPU + CUDA) generators."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)  # {'bit_generator', 'state': {'key', 'pos'}, 'has_gauss', 'gauss'}
    state: dict[str, Any] = {
        # python's Mersenne Twister: 624 state words + the position (<= 624), all fit in uint32
        "python": {"version": version, "state": _words_b64(internal), "gauss": gauss},
        "numpy": {"bit_generator": np_state["bit_generator"],
                  "key": _words_b64(np_state["state"]["key"]), "pos": int(np_state["state"]["pos"]),
                  "has_gauss": int(np_state["has_gauss"]), "gauss": float(np_state["gauss"])},
        "torch_cpu": _b64(torch.get_rng_state()),
    }
    if torch.cuda.is_available():
        state["torch_cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`; raises ``ValueError`` naming the part that is malformed."""
    if not isinstance(state, dict):
        raise ValueError(f"RNG state must be a dict, got {type(state).__name__}")
    for key in ("python", "numpy", "torch_cpu"):
        if key not in state:
            raise ValueError(f"RNG state is missing {key!r}; it has {sorted(state)}")
    # Both Mersenne Twisters hold 624 words and a position <= 624; numpy and Python index and convert what they
    # are given (an empty key is an IndexError, an infinite position an OverflowError): check before either runs.
    try:
        py = state["python"]
        words = tuple(int(w) for w in _unwords_b64(py["state"]))
        if len(words) != 625 or not 0 <= words[-1] <= 624:
            raise ValueError(f"624 words and a position <= 624 expected, got {len(words)} words")
        if not (py["gauss"] is None or (is_number(py["gauss"]) and math.isfinite(py["gauss"]))):
            raise ValueError(f"gauss must be null or a finite number, got {py['gauss']!r}")
        random.setstate((py["version"], words, py["gauss"]))
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise ValueError(f"RNG state 'python' is malformed: {_reason(err)}") from None
    try:
        npx = state["numpy"]
        key = _unwords_b64(npx["key"])
        if len(key) != 624 or not (is_int(npx["pos"]) and 0 <= npx["pos"] <= 624):
            raise ValueError(f"a key of 624 words and a position in [0, 624] expected, got {len(key)} words and "
                             f"{npx['pos']!r}")
        if not (npx["has_gauss"] in (0, 1) and is_number(npx["gauss"]) and math.isfinite(npx["gauss"])):
            raise ValueError(f"has_gauss 0 or 1 and a finite gauss expected, got {npx['has_gauss']!r}, "
                             f"{npx['gauss']!r}")
        np.random.set_state({"bit_generator": npx["bit_generator"], "state": {"key": key, "pos": npx["pos"]},
                             "has_gauss": npx["has_gauss"], "gauss": npx["gauss"]})
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise ValueError(f"RNG state 'numpy' is malformed: {_reason(err)}") from None
    try:
        torch.set_rng_state(_unb64(state["torch_cpu"]))
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"RNG state 'torch_cpu' is malformed: {err}") from None
    if "torch_cuda" in state and torch.cuda.is_available():
        try:  # (read only on a GPU machine: a malformed entry is a ValueError here too, not a TypeError)
            if not isinstance(state["torch_cuda"], list):
                raise TypeError(f"a list of base64 strings expected, got {type(state['torch_cuda']).__name__}")
            cuda_states = [_unb64(s) for s in state["torch_cuda"]]
            if len(cuda_states) == torch.cuda.device_count():
                torch.cuda.set_rng_state_all(cuda_states)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"RNG state 'torch_cuda' is malformed: {err}") from None
