"""``TrainConfig.activation_checkpointing`` in the trainer: the switch reaches the model and changes no number.

* a run with it logs the same losses and ends with the same weights as a run without, bit for bit on the CPU,
  for a GPT with dropout and for a translator with dropout and LayerDrop (gradient accumulation on);
* a resumed run may switch it on or off, and still equals the uninterrupted run;
* with ``compile=True`` it is compiled with the loss and follows the compiled run without it;
* the config's checks: a bool, refused by name otherwise; a model without the switch is refused when it is on.

Axis legend: none (runs and numbers only).
"""

from __future__ import annotations

import pytest
import torch
from helpers import (assert_close, fit_losses, tiny_gpt_config, tiny_lm_task, tiny_mt_task, tiny_train_config,
                     tiny_transformer_config)

from attnkit.models.gpt import GPT
from attnkit.models.transformer import Transformer
from attnkit.training.config import RESUMABLE_CHANGES, TrainConfig
from attnkit.training.trainer import Trainer


def _gpt():
    config = tiny_gpt_config(block_size=16, dropout=0.2)
    torch.manual_seed(0)
    return GPT(config), config


def _translator():
    config = tiny_transformer_config(dropout=0.2, layer_drop=0.3, num_encoder_layers=3, num_decoder_layers=3)
    torch.manual_seed(0)
    return Transformer(config), config


def _same_weights(a, b) -> None:
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name


@pytest.mark.parametrize("build, task", [(_gpt, tiny_lm_task), (_translator, tiny_mt_task)], ids=["gpt", "translator"])
def test_a_run_with_it_equals_a_run_without_bit_for_bit(tmp_path, checkpoint_calls, build, task):
    plain, plain_model = fit_losses(tmp_path, "plain", build(), task(), tiny_train_config())
    assert checkpoint_calls == [] and plain_model.activation_checkpointing is False
    ckpt, ckpt_model = fit_losses(tmp_path, "ckpt", build(), task(), tiny_train_config(activation_checkpointing=True))
    assert ckpt_model.activation_checkpointing is True
    assert len(checkpoint_calls) >= 4 * 2  # blocks of every micro-batch of every update (LayerDrop skips some)
    assert len(plain) == len(ckpt) == 4 + 2 and plain == ckpt
    _same_weights(plain_model, ckpt_model)


def test_a_resumed_run_may_switch_it_on_or_off(tmp_path, checkpoint_calls):
    assert "activation_checkpointing" in RESUMABLE_CHANGES
    straight, straight_model = fit_losses(tmp_path, "straight", _gpt(), tiny_lm_task(),
                                          tiny_train_config(steps=6, schedule_steps=6))
    fit_losses(tmp_path, "run", _gpt(), tiny_lm_task(), tiny_train_config(steps=2, schedule_steps=6))
    assert checkpoint_calls == []
    on = tiny_train_config(steps=4, schedule_steps=6, activation_checkpointing=True)
    fit_losses(tmp_path, "run", _gpt(), tiny_lm_task(), on, resume=True)
    assert checkpoint_calls != []
    checkpoint_calls.clear()
    resumed, resumed_model = fit_losses(tmp_path, "run", _gpt(), tiny_lm_task(),
                                        tiny_train_config(steps=6, schedule_steps=6), resume=True)
    assert checkpoint_calls == []  # switched off again
    assert resumed == straight
    _same_weights(straight_model, resumed_model)
    with pytest.raises(ValueError, match="compile"):  # (an ordinary field is still refused)
        fit_losses(tmp_path, "run", _gpt(), tiny_lm_task(), tiny_train_config(steps=8, schedule_steps=6, compile=True),
                   resume=True)


def test_with_compile_it_is_compiled_with_the_loss_and_follows_the_compiled_run(tmp_path, checkpoint_calls):
    compiled, _ = fit_losses(tmp_path, "compiled", _gpt(), tiny_lm_task(), tiny_train_config(steps=2, compile=True))
    checkpoint_calls.clear()
    both, _ = fit_losses(tmp_path, "both", _gpt(), tiny_lm_task(),
                         tiny_train_config(steps=2, compile=True, activation_checkpointing=True))
    assert checkpoint_calls != []  # traced by the compiler (and evaluation runs eagerly, in eval mode: none)
    assert_close(torch.tensor(both), torch.tensor(compiled), kind="float32")


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_the_config_refuses_a_value_that_is_not_a_bool(bad):
    with pytest.raises(ValueError, match=rf"TrainConfig.activation_checkpointing must be a bool, got {bad!r}"):
        tiny_train_config(activation_checkpointing=bad)
    saved = tiny_train_config().to_dict() | {"activation_checkpointing": True}
    assert TrainConfig.from_dict(saved).activation_checkpointing


def test_a_model_without_the_switch_is_refused_only_when_it_is_asked_for(tmp_path):
    from helpers import TinyLM

    with pytest.raises(ValueError, match="activation_checkpointing=True needs a model with "
                                         r"enable_activation_checkpointing\(\) \(GPT, Transformer\), got TinyLM"):
        Trainer(TinyLM(61), tiny_lm_task(), tiny_train_config(activation_checkpointing=True), tmp_path / "a",
                model_config={}, progress=False, log=False)
    Trainer(TinyLM(61), tiny_lm_task(), tiny_train_config(), tmp_path / "b", model_config={}, progress=False, log=False)


def test_the_trainer_switches_it_off_in_a_model_handed_over_with_it_on(tmp_path):
    """The config decides both ways: activation_checkpointing=False switches off a model that arrives with it on."""
    model, config = _gpt()
    model.enable_activation_checkpointing()
    Trainer(model, tiny_lm_task(), tiny_train_config(), tmp_path / "run", model_config=config, progress=False,
            log=False)
    assert model.activation_checkpointing is False


def test_cuda_graphs_refuse_it_by_name(tmp_path):
    """cuda_graphs lists activation checkpointing among what it cannot run with (also where the device is wrong)."""
    cfg = tiny_train_config(cuda_graphs=True, activation_checkpointing=True, device="cpu")
    with pytest.raises(ValueError, match=r"cuda_graphs needs .*no activation checkpointing \(got "
                                         r"activation_checkpointing=True"):
        fit_losses(tmp_path, "run", _gpt(), tiny_lm_task(), cfg)
