"""attnkit.checks: the shared argument checks, with the messages the models report."""

from __future__ import annotations

import pytest
import torch

from attnkit.checks import (check_bool, check_choice, check_float, check_id, check_index_tensor, check_int,
                            check_padding_mask, check_probability, check_token_ids, is_int, is_number)


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


def test_checks_on_device_check_ids_without_reading_them_back():
    from attnkit.checks import checks_on_device, no_host_reads

    bad = torch.tensor([[1, 12]])
    assert not no_host_reads()
    with checks_on_device():
        assert no_host_reads()
        with checks_on_device(False):  # a no-op: still inside the outer block
            assert no_host_reads()
        check_token_ids(torch.tensor([[0, 9]]), name="src", vocab_size=10)
        # on the CPU the device-side assert fails at once; on a GPU it stops the program with CUDA's assert
        with pytest.raises(RuntimeError, match=r"src token ids must be in \[0, vocab_size\) = \[0, 10\)"):
            check_token_ids(bad, name="src", vocab_size=10)
    assert not no_host_reads()
    with checks_on_device(False):
        assert not no_host_reads()
    with pytest.raises(ValueError, match="got id 12"):
        check_token_ids(bad, name="src", vocab_size=10)


def test_good_ids_pass_and_the_decoder_only_wording():
    check_token_ids(torch.tensor([[0, 9]], dtype=torch.int32), name="idx", vocab_size=10)
    with pytest.raises(ValueError, match=r"^token ids must be in \[0, vocab_size\) = \[0, 4\), got id 7$"):
        check_token_ids(torch.tensor([[7]]), name="idx", vocab_size=4, length_axis="T", range_label="token ids")


@pytest.mark.parametrize("call, message", [
    (lambda: check_int("n", True, minimum=1), r"^n must be an int >= 1, got True \(bool\)$"),
    (lambda: check_int("n", 0, minimum=1), r"^n must be an int >= 1, got 0$"),
    (lambda: check_int("n", "3", minimum=0, allow_none=True), r"^n must be an int >= 0 or None, got '3' \(str\)$"),
    (lambda: check_float("x", "a", low=0.0), r"^x must be a number, got 'a' \(str\)$"),
    (lambda: check_float("x", 0, low=0.0, low_inclusive=False), r"^x must be a finite number in \(0.0, inf\), got 0.0$"),
    (lambda: check_float("x", float("inf"), low=0.0), r"^x must be a finite number in \[0.0, inf\), got inf$"),
    (lambda: check_float("x", 1.0, low=0.0, high=1.0, high_inclusive=False),
     r"^x must be a finite number in \[0.0, 1.0\), got 1.0$"),
    (lambda: check_float("x", -10**400, low=0.0),  # float() of it would be an OverflowError
     r"^x must be a finite number in \[0.0, inf\), got an int too large for a float \(about 10\^400\)$"),
    (lambda: check_probability("p", 1), r"^p must be a number in \[0, 1\), got 1$"),
    (lambda: check_probability("p", float("nan")), r"^p must be a number in \[0, 1\), got nan$"),
    (lambda: check_probability("p", "0.1"), r"^p must be a number in \[0, 1\), got '0.1'$"),
    (lambda: check_bool("b", 1), r"^b must be a bool, got 1 \(int\)$"),
    (lambda: check_choice("c", "x", ("a", "b")), r"^c must be one of \['a', 'b'\], got 'x'$"),
    (lambda: check_index_tensor("position_ids", torch.zeros(2)), r"^position_ids must be an int64/int32 tensor, got torch.float32$"),
    (lambda: check_index_tensor("position_ids", [0, 1]), r"^position_ids must be an int64/int32 tensor, got list$"),
    (lambda: check_id("bos_id", 5, 5), r"^bos_id must be an int in \[0, 5\), got 5$"),
    (lambda: check_id("pad_id", -1, None), r"^pad_id must be an int in \[0, V\), got -1$"),
    (lambda: check_id("eos_id", 1.0, 5), r"^eos_id must be an int in \[0, 5\), got 1.0$"),
    (lambda: check_padding_mask("m", torch.zeros(2, 3)), r"^m must be a bool tensor \(True = padding\), got torch.float32$"),
    (lambda: check_padding_mask("m", None, (2, 3)), r"^m must be a bool tensor \(True = padding\), got NoneType$"),
    (lambda: check_padding_mask("m", torch.zeros(2, 4, dtype=torch.bool), (2, 3), axes="(B, T)", detail=" (T = 3)"),
     r"^m must have shape \(B, T\) = \(2, 3\) \(T = 3\), got \(2, 4\)$"),
])
def test_scalar_checks_name_expected_and_actual(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_scalar_checks_return_the_value():
    assert check_int("n", None, minimum=1, allow_none=True) is None and check_int("n", 3, minimum=1) == 3
    assert check_float("x", 2, low=0.0) == 2.0 and isinstance(check_float("x", 2, low=0.0), float)
    assert check_bool("b", False) is False and check_choice("c", "a", ("a",)) == "a"
    check_index_tensor("i", torch.zeros(3, dtype=torch.int32))
    assert check_id("bos_id", 4, 5) == 4 and check_id("pad_id", 99, None) == 99
    mask = torch.zeros(2, 3, dtype=torch.bool)
    assert check_padding_mask("m", mask, (2, 3)) is mask and check_padding_mask("m", mask) is mask
    assert is_int(3) and not is_int(True) and not is_int(3.0)
    assert is_number(3.5) and is_number(float("nan")) and not is_number(False) and not is_number("1")



def test_check_probability_compiles_without_a_graph_break():
    """Attention checks its dropout rate on every forward, also inside the trainer's compiled step."""
    step = torch.compile(lambda x, p: x * (1.0 - check_probability("p", p)), fullgraph=True, backend="eager")
    assert torch.equal(step(torch.ones(2), 0.25), torch.full((2,), 0.75))
