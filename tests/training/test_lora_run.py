"""LoRA runs: ``finalize_lora_run`` merges the adapters of ``best/`` into its weights, in the weights' dtype."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from attnkit.checkpoints.checkpoint import read_checkpoint_state, save_checkpoint, stored_float_dtype
from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from attnkit.modules.lora import merge_lora
from attnkit.training.lora_run import add_lora, finalize_lora_run

LORA = {"rank": 2, "alpha": 4.0, "targets": ["qkv_proj"], "dropout": 0.0}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_best_is_merged_in_the_dtype_it_was_trained_in(tmp_path, dtype):
    """A fine-tune of a bfloat16 checkpoint trains (and saves its step checkpoints) in bfloat16; its merged best/
    came out in float32, twice the size and not the weights the run evaluated."""
    config = GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8)
    torch.manual_seed(0)
    model = GPT(config)
    add_lora(model, LORA)
    model = model.to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lora_B"):
                p.normal_()  # trained adapters: the merge changes the weights
    best = tmp_path / "checkpoints" / "best"
    save_checkpoint(best, model, state={"step": 3, "model_config": config.to_dict()},
                    extra={"kind": "lm", "lora": dict(LORA, merged=False)}, include_rng=False)
    assert finalize_lora_run(tmp_path) == best
    assert stored_float_dtype(best / "model.safetensors") == dtype
    assert read_checkpoint_state(best)["extra"]["lora"]["merged"] is True
    merged, saved = merge_lora(model).state_dict(), load_file(str(best / "model.safetensors"))
    assert all(torch.equal(saved[k], merged[k]) for k in saved) and not any("lora" in k for k in saved)
    assert finalize_lora_run(tmp_path) is None  # merged already
