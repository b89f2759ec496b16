"""attnkit.checks: the shared argument checks, with the messages the models report."""

from __future__ import annotations

import pytest
import torch

from attnkit.checks import check_token_ids


@pytest.mark.parametrize("ids, message", [
    ([[1, 2]], r"src must be a torch.Tensor of token ids with shape \(B, L\), got list"),
    (torch.tensor([[1.0, 2.0]]), r"src must have dtype torch.int64 or torch.int32, got torch.float32"),
    (torch.tensor([1, 2]), r"src must have shape \(B, L\), got 1-D shape \(2,\)"),
    (torch.zeros(1, 0, dtype=torch.long), r"src must have B >= 1 and L >= 1, got shape \(1, 0\)"),
    (torch.tensor([[1, 10]]), r"src token ids must be in \[0, src_vocab_size\) = \[0, 10\), got id 10"),
    (torch.tensor([[-1, 3]]), r"got id -1"),
])
def test_bad_token_ids_are_named(ids, message):
    with pytest.raises(ValueError, match=message):
        check_token_ids(ids, name="src", vocab_size=10, vocab_name="src_vocab_size")


def test_good_ids_pass_and_the_decoder_only_wording():
    check_token_ids(torch.tensor([[0, 9]], dtype=torch.int32), name="idx", vocab_size=10)
    with pytest.raises(ValueError, match=r"^token ids must be in \[0, vocab_size\) = \[0, 4\), got id 7$"):
        check_token_ids(torch.tensor([[7]]), name="idx", vocab_size=4, length_axis="T", range_label="token ids")
