"""attnkit.checkpoints.rng: a malformed saved CUDA generator state is a ValueError naming it (read on a GPU only)."""

from unittest import mock

import pytest
import torch

from attnkit.checkpoints.rng import capture_rng_state, restore_rng_state


@pytest.mark.parametrize("value", [5, "AAAA", [7], [None], ["@@ not base64 @@"]])
def test_a_malformed_torch_cuda_state_is_a_value_error_naming_it(value):
    """Was: TypeError ('int' object is not iterable, ...) out of the GPU-only branch: a traceback from the CLI."""
    state = capture_rng_state()
    state["torch_cuda"] = value
    with mock.patch.object(torch.cuda, "is_available", return_value=True), \
            mock.patch.object(torch.cuda, "device_count", return_value=1), \
            mock.patch.object(torch.cuda, "set_rng_state_all") as set_all:
        with pytest.raises(ValueError, match="RNG state 'torch_cuda' is malformed"):
            restore_rng_state(state)
    set_all.assert_not_called()


def test_a_good_torch_cuda_state_is_restored():
    state = capture_rng_state()
    state["torch_cuda"] = [state["torch_cpu"]]  # any base64 bytes: set_rng_state_all is mocked
    with mock.patch.object(torch.cuda, "is_available", return_value=True), \
            mock.patch.object(torch.cuda, "device_count", return_value=1), \
            mock.patch.object(torch.cuda, "set_rng_state_all") as set_all:
        restore_rng_state(state)
    set_all.assert_called_once()
