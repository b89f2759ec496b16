"""attnkit.checkpoints.rng: a malformed saved CUDA generator state is a ValueError naming it (read on a GPU only)."""

import contextlib
from unittest import mock

import pytest
import torch

from attnkit.checkpoints.rng import capture_rng_state, restore_rng_state


@contextlib.contextmanager
def fake_cuda(*, available: bool = True, devices: int = 1, side_effect=None):
    """torch.cuda as on a machine with ``devices`` GPUs (none when not ``available``); yields the mocked
    ``set_rng_state_all``."""
    with mock.patch.object(torch.cuda, "is_available", return_value=available), \
            mock.patch.object(torch.cuda, "device_count", return_value=devices), \
            mock.patch.object(torch.cuda, "set_rng_state_all", side_effect=side_effect) as set_all:
        yield set_all


@pytest.mark.parametrize("value", [5, "AAAA", [7], [None], ["@@ not base64 @@"]])
def test_a_malformed_torch_cuda_state_is_a_value_error_naming_it(value):
    """Was: TypeError ('int' object is not iterable, ...) out of the GPU-only branch: a traceback from the CLI."""
    state = capture_rng_state()
    state["torch_cuda"] = value
    with fake_cuda() as set_all:
        with pytest.raises(ValueError, match="RNG state 'torch_cuda' is malformed"):
            restore_rng_state(state)
    set_all.assert_not_called()


def test_a_good_torch_cuda_state_is_restored():
    state = capture_rng_state()
    state["torch_cuda"] = [state["torch_cpu"]]  # any base64 bytes: set_rng_state_all is mocked
    with fake_cuda() as set_all:
        restore_rng_state(state)
    set_all.assert_called_once()


@pytest.mark.parametrize("value", ["", "AAAA", {"AAAA": "AAAA"}, ("AAAA",)])
def test_a_torch_cuda_state_that_is_not_a_list_is_refused_by_its_type(value):
    """Not iterated: "" (nothing to restore) and a dict of base64 keys would pass as states."""
    state = capture_rng_state()
    state["torch_cuda"] = value
    with fake_cuda() as set_all:
        with pytest.raises(ValueError, match=rf"^RNG state 'torch_cuda' is malformed: a list of base64 strings "
                                             rf"expected, got {type(value).__name__}$"):
            restore_rng_state(state)
    set_all.assert_not_called()


@pytest.mark.parametrize("saved, devices", [(1, 2), (2, 1)])
def test_a_torch_cuda_state_of_another_gpu_count_is_left_unrestored(saved, devices):
    state = capture_rng_state()
    state["torch_cuda"] = [state["torch_cpu"]] * saved
    with fake_cuda(devices=devices) as set_all:
        restore_rng_state(state)
    set_all.assert_not_called()


def test_a_torch_cuda_state_torch_refuses_is_a_value_error_naming_it():
    state = capture_rng_state()
    state["torch_cuda"] = [state["torch_cpu"]]
    with fake_cuda(side_effect=RuntimeError("wrong size")):
        with pytest.raises(ValueError, match=r"^RNG state 'torch_cuda' is malformed: wrong size$"):
            restore_rng_state(state)


def test_a_machine_without_cuda_never_reads_the_torch_cuda_state():
    state = capture_rng_state()
    for value in ([state["torch_cpu"]], 5):  # a good one is not restored, a malformed one not read
        state["torch_cuda"] = value
        with fake_cuda(available=False) as set_all:
            restore_rng_state(state)
        set_all.assert_not_called()
