"""benchmarks/masked_rows.py: the padding-only-row check runs and reports every case (on the CPU here)."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import masked_rows


def test_every_case_is_reported_and_written(tmp_path, capsys):
    rows = masked_rows.main(["--json", str(tmp_path / "m.json")])
    cases = [r["case"] for r in rows]
    assert cases[:2] == ["nn.TransformerEncoder, fp32", "nn.TransformerEncoder, bf16 autocast"]
    assert [c.split(",")[0] for c in cases[2:]] == ["sdpa math", "sdpa efficient_attention", "sdpa cudnn_attention",
                                                    "attnkit attention"]
    # attnkit's rule on every device: a row with no key to attend gives zeros, and gradients stay finite
    assert rows[-1]["masked_row"] == [0.0, 0.0, 0.0] and rows[-1]["grads_finite"]
    for row in rows[:2]:  # the other rows and the gradients are answered, whatever the device does
        assert set(row) == {"case", "padding_row_finite", "other_rows_finite", "weight_grads_finite"}
    written = json.loads((tmp_path / "m.json").read_text())
    assert written["cases"] == rows and written["torch"] == torch.__version__
    assert len(capsys.readouterr().out.splitlines()) == len(rows)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        masked_rows.main(["--device", "cuda"])
    assert e.value.code == 2 and "has no CUDA device" in capsys.readouterr().err
