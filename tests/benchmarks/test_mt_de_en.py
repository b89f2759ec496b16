"""benchmarks/mt_de_en.py: what a record says about the machine that ran it."""

from __future__ import annotations

import pytest
import torch

from benchmarks import mt_de_en


def test_a_cpu_run_records_the_cpu_and_its_cores():
    text = mt_de_en.machine_description("cpu")
    assert "cores" in text and torch.__version__ in text


def test_a_cuda_run_records_the_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: f"NVIDIA H200 #{index}")
    assert mt_de_en.machine_description("cuda").startswith("NVIDIA H200 #0 (torch ")
    assert mt_de_en.machine_description("cuda:1").startswith("NVIDIA H200 #1 ")
    assert mt_de_en.machine_description(None).startswith("NVIDIA H200 #0 ")  # auto picks CUDA where present
    assert "cores" in mt_de_en.machine_description("cpu")


@pytest.mark.parametrize("device", [None, "auto"])
def test_auto_without_cuda_records_the_cpu(monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "cores" in mt_de_en.machine_description(device)
