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
from helpers import assert_close, tiny_gpt_config, tiny_transformer_config

from attnkit.data.pipeline.mt_batching import EncodedPairs
from attnkit.models.gpt import GPT
from attnkit.models.transformer import Transformer
from attnkit.training.config import RESUMABLE_CHANGES, TrainConfig
from attnkit.training.lm_task import LMTask
from attnkit.training.metrics import read_metrics
from attnkit.training.mt_task import MTTask
from attnkit.training.trainer import Trainer


def _lm_task() -> LMTask:
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, 61, (3000,), generator=g)  # tiny_gpt_config's vocabulary: 61
    return LMTask(tokens[:2600], tokens[2600:], block_size=16, batch_size=4, seed=1)


def _pairs(n: int, seed: int) -> EncodedPairs:
    """Pairs whose target is the reversed source (words 4..18, sources end with <eos> = 2; <pad> 0, <bos> 1)."""
    g = torch.Generator().manual_seed(seed)
    src, tgt = [], []
    for _ in range(n):
        words = torch.randint(4, 19, (int(torch.randint(2, 8, (1,), generator=g)),), generator=g).tolist()
        src.append(words + [2])
        tgt.append(words[::-1])
    return EncodedPairs(src, tgt, pad_id=0, bos_id=1, eos_id=2)


def _mt_task() -> MTTask:
    return MTTask(_pairs(96, 0), _pairs(12, 1), max_tokens=48, seed=2)


def _config(**overrides) -> TrainConfig:
    base = dict(steps=4, batch_size=4, block_size=16, grad_accum=2, lr=3e-3, min_lr=3e-4, warmup_steps=1,
                eval_every=2, eval_batches=1, log_every=1, ckpt_every=2, keep_last=3, seed=5)
    return TrainConfig(**(base | overrides))


def _gpt():
    config = tiny_gpt_config(block_size=16, dropout=0.2)
    torch.manual_seed(0)
    return GPT(config), config


def _translator():
    config = tiny_transformer_config(dropout=0.2, layer_drop=0.3, num_encoder_layers=3, num_decoder_layers=3)
    torch.manual_seed(0)
    return Transformer(config), config


def _fit(tmp_path, name, model_and_config, task, cfg, **kwargs):
    model, config = model_and_config
    Trainer(model, task, cfg, tmp_path / name, model_config=config, progress=False, log=False, **kwargs).fit()
    rows = read_metrics(tmp_path / name)
    losses = [r["loss"] for r in rows if "loss" in r] + [r["valid_loss"] for r in rows if "valid_loss" in r]
    return losses, model


def _same_weights(a, b) -> None:
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name


@pytest.mark.parametrize("build, task", [(_gpt, _lm_task), (_translator, _mt_task)], ids=["gpt", "translator"])
def test_a_run_with_it_equals_a_run_without_bit_for_bit(tmp_path, checkpoint_calls, build, task):
    plain, plain_model = _fit(tmp_path, "plain", build(), task(), _config())
    assert checkpoint_calls == [] and plain_model.activation_checkpointing is False
    ckpt, ckpt_model = _fit(tmp_path, "ckpt", build(), task(), _config(activation_checkpointing=True))
    assert ckpt_model.activation_checkpointing is True
    assert len(checkpoint_calls) >= 4 * 2  # blocks of every micro-batch of every update (LayerDrop skips some)
    assert len(plain) == len(ckpt) == 4 + 2 and plain == ckpt
    _same_weights(plain_model, ckpt_model)


def test_a_resumed_run_may_switch_it_on_or_off(tmp_path, checkpoint_calls):
    assert "activation_checkpointing" in RESUMABLE_CHANGES
    straight, straight_model = _fit(tmp_path, "straight", _gpt(), _lm_task(), _config(steps=6, schedule_steps=6))
    _fit(tmp_path, "run", _gpt(), _lm_task(), _config(steps=2, schedule_steps=6))
    assert checkpoint_calls == []
    on = _config(steps=4, schedule_steps=6, activation_checkpointing=True)
    _fit(tmp_path, "run", _gpt(), _lm_task(), on, resume=True)
    assert checkpoint_calls != []
    checkpoint_calls.clear()
    resumed, resumed_model = _fit(tmp_path, "run", _gpt(), _lm_task(), _config(steps=6, schedule_steps=6), resume=True)
    assert checkpoint_calls == []  # switched off again
    assert resumed == straight
    _same_weights(straight_model, resumed_model)
    with pytest.raises(ValueError, match="compile"):  # (an ordinary field is still refused)
        _fit(tmp_path, "run", _gpt(), _lm_task(), _config(steps=8, schedule_steps=6, compile=True), resume=True)


def test_with_compile_it_is_compiled_with_the_loss_and_follows_the_compiled_run(tmp_path, checkpoint_calls):
    compiled, _ = _fit(tmp_path, "compiled", _gpt(), _lm_task(), _config(steps=2, compile=True))
    checkpoint_calls.clear()
    both, _ = _fit(tmp_path, "both", _gpt(), _lm_task(), _config(steps=2, compile=True, activation_checkpointing=True))
    assert checkpoint_calls != []  # traced by the compiler (and evaluation runs eagerly, in eval mode: none)
    assert_close(torch.tensor(both), torch.tensor(compiled), kind="float32")


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_the_config_refuses_a_value_that_is_not_a_bool(bad):
    with pytest.raises(ValueError, match=rf"TrainConfig.activation_checkpointing must be a bool, got {bad!r}"):
        _config(activation_checkpointing=bad)
    assert TrainConfig.from_dict(_config().to_dict() | {"activation_checkpointing": True}).activation_checkpointing


def test_a_model_without_the_switch_is_refused_only_when_it_is_asked_for(tmp_path):
    from helpers import TinyLM

    with pytest.raises(ValueError, match="activation_checkpointing=True needs a model with "
                                         r"enable_activation_checkpointing\(\) \(GPT, Transformer\), got TinyLM"):
        Trainer(TinyLM(61), _lm_task(), _config(activation_checkpointing=True), tmp_path / "a", model_config={},
                progress=False, log=False)
    Trainer(TinyLM(61), _lm_task(), _config(), tmp_path / "b", model_config={}, progress=False, log=False)


def test_the_trainer_switches_it_off_in_a_model_handed_over_with_it_on(tmp_path):
    """The config decides both ways: activation_checkpointing=False switches off a model that arrives with it on."""
    model, config = _gpt()
    model.enable_activation_checkpointing()
    Trainer(model, _lm_task(), _config(), tmp_path / "run", model_config=config, progress=False, log=False)
    assert model.activation_checkpointing is False


def test_cuda_graphs_refuse_it_by_name(tmp_path):
    """cuda_graphs lists activation checkpointing among what it cannot run with (also where the device is wrong)."""
    cfg = _config(cuda_graphs=True, activation_checkpointing=True, device="cpu")
    with pytest.raises(ValueError, match=r"cuda_graphs needs .*no activation checkpointing \(got "
                                         r"activation_checkpointing=True"):
        _fit(tmp_path, "run", _gpt(), _lm_task(), cfg)
