"""Sinusoidal positions: equal element by element to the seeds' loop formula (exact), growth, buffers."""

import pytest
import torch

from attnkit.modules import SinusoidalPositionalEncoding, positional_encoding, sinusoidal_table
from helpers import assert_close


def seed_table(seq_len, dim, dtype=torch.float32):
    """The seed-000 loop: angle pos / 10000**(i/dim) as a Python float, cast to dtype, sin/cos in dtype."""
    out = torch.zeros(seq_len, dim, dtype=dtype)
    for pos in range(seq_len):
        for i in range(dim):
            if i % 2 == 0:
                out[pos][i] = torch.sin(torch.tensor(pos / (10000 ** (i / dim)), dtype=dtype))
            else:
                out[pos][i] = torch.cos(torch.tensor(pos / (10000 ** ((i - 1) / dim)), dtype=dtype))
    return out


@pytest.mark.parametrize("seq_len,dim", [(40, 16), (33, 7), (25, 1), (60, 33)])
def test_table_equals_seed_formula_exactly(seq_len, dim):
    assert torch.equal(sinusoidal_table(seq_len, dim), seed_table(seq_len, dim))


def test_table_float64_equals_seed_formula():
    assert torch.equal(sinusoidal_table(20, 9, dtype=torch.float64), seed_table(20, 9, torch.float64))


def test_positional_encoding_seed000_api():
    pe = positional_encoding(3, 10, 6)
    assert pe.shape == (3, 10, 6)
    for b in range(3):
        assert torch.equal(pe[b], seed_table(10, 6))


def test_module_lookup_and_growth_past_max_len():
    enc = SinusoidalPositionalEncoding(10, max_len=4)
    assert enc.pe.shape == (4, 10)
    ids = torch.tensor([[0, 3, 9], [12, 1, 2]])  # beyond the initial length
    out = enc(ids)
    assert out.shape == (2, 3, 10)
    table = seed_table(13, 10)
    assert torch.equal(out, table[ids])
    assert enc.pe.shape[0] >= 13
    assert torch.equal(enc.forward_len(13), table)


def test_buffer_follows_to_and_is_not_persistent():
    enc = SinusoidalPositionalEncoding(8, max_len=16)
    assert "pe" not in enc.state_dict()
    enc = enc.to(torch.float64)  # dtype change stands in for a device move
    assert enc.pe.dtype == torch.float64
    assert enc.forward_len(20).dtype == torch.float64  # growth keeps the moved dtype
    assert_close(enc.forward_len(20), seed_table(20, 8).double(), "exact")


def test_negative_position_rejected():
    with pytest.raises(ValueError, match=r">= 0, got min -1"):
        SinusoidalPositionalEncoding(8)(torch.tensor([0, -1]))


def test_float_positions_rejected():
    with pytest.raises(ValueError, match=r"integer tensor, got torch.float32"):
        SinusoidalPositionalEncoding(8)(torch.tensor([0.0, 1.0]))


def test_no_host_reads_looks_up_without_growing_and_reserve_grows():
    """Under ``no_host_reads`` (torch.compile, checks_on_device) the lookup reads no position back to the host, so
    the table cannot grow there: ``reserve`` sizes it first, with the rows it would have grown to."""
    from attnkit.checks import checks_on_device
    from attnkit.modules.sinusoidal import SinusoidalPositionalEncoding, sinusoidal_table

    pe = SinusoidalPositionalEncoding(8, max_len=4)
    pos = torch.tensor([[0, 1, 2, 3]])
    with checks_on_device():
        assert torch.equal(pe(pos), sinusoidal_table(4, 8)[pos])
        assert pe.pe.shape[0] == 4
    pe.reserve(10)
    assert pe.pe.shape[0] >= 10
    with checks_on_device():
        assert torch.equal(pe(torch.tensor([9, 0])), sinusoidal_table(10, 8)[[9, 0]])
    with pytest.raises(ValueError, match="length must be >= 0"):
        pe.reserve(-1)


@pytest.mark.parametrize("base", [-5.0, 0.0, 1.0, float("nan"), float("inf"), "10000"])
def test_table_refuses_a_base_without_a_real_frequency_ladder(base):
    """-5 gave complex powers (a TypeError deep inside), 0 and nan a table of NaN."""
    with pytest.raises(ValueError, match=r"finite base > 1 \(10000 in the paper\), got"):
        sinusoidal_table(4, 8, base=base)
