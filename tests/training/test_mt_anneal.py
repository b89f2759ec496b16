"""MTTask annealing: for the last share of the budget every training batch comes from the anneal pairs; the
trainer reports the budget before each update; the switch is kept in the checkpoint so a resumed run continues
with the same batches; TrainConfig.budget_used counts steps or time."""

from __future__ import annotations

import pytest
import torch

from attnkit.data.pipeline.mt_batching import EncodedPairs
from attnkit.models.configs import TransformerConfig
from attnkit.models.transformer import Transformer
from attnkit.training.config import TrainConfig
from attnkit.training.mt_task import MTTask
from attnkit.training.trainer import Trainer

PAD, BOS, EOS = 0, 1, 2
V = 16


def _pairs(n: int, seed: int, low: int = 4, high: int = 10) -> EncodedPairs:
    """Reversal pairs over the word ids [low, high) (a different range = a different "domain")."""
    g = torch.Generator().manual_seed(seed)
    src, tgt = [], []
    for _ in range(n):
        words = torch.randint(low, high, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist()
        src.append(words + [EOS])
        tgt.append(words[::-1])
    return EncodedPairs(src, tgt, pad_id=PAD, bos_id=BOS, eos_id=EOS)


def _task(share: float | None = 0.25, **kwargs) -> MTTask:
    anneal = _pairs(24, 2, low=10, high=V) if share is not None else None
    return MTTask(_pairs(64, 0), _pairs(8, 1), max_tokens=30, seed=0, anneal=anneal, anneal_share=share, **kwargs)


def _model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=16, num_heads=2,
                                         num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32,
                                         dropout=0.0, max_len=16, pad_id=PAD))


def _is_anneal(batch) -> bool:
    words = batch.src[~batch.src_key_padding_mask & (batch.src != EOS)]
    assert bool((words >= 10).all()) or bool((words < 10).all()), "a batch mixes the two sets"
    return bool((words >= 10).all())


def test_switches_once_when_the_last_share_of_the_budget_begins():
    task = _task(0.25)
    assert task.on_budget(0, 0.0) is None and task.on_budget(7, 0.74) is None
    assert task.anneal_from is None and not _is_anneal(task.batch("train", 9))
    note = task.on_budget(9, 0.75)
    assert note is not None and "24 anneal pairs" in note and "last 25%" in note
    assert task.anneal_from == 9
    assert task.on_budget(12, 0.9) is None and task.anneal_from == 9  # once
    assert not _is_anneal(task.batch("train", 8))  # the batches before the switch are as they were
    for step in (9, 10, 30):  # 30: past one pass over the anneal pairs
        assert _is_anneal(task.batch("train", step))
    # batch 9 is the anneal set's batch 0, the same batch every time
    assert torch.equal(task.batch("train", 9).src, task.batchers["anneal"].batch(0).src)
    assert not _is_anneal(task.batch("valid", 0))  # validation is never annealed


@pytest.mark.parametrize("steps", [10, 100, 1000])
@pytest.mark.parametrize("share", [0.1, 0.2, 0.3, 0.5, 0.7, 0.9])
def test_the_anneal_phase_is_the_share_of_the_steps(steps, share):
    task, cfg = _task(share), TrainConfig(steps=steps, warmup_steps=1)
    notes = [task.on_budget(step, cfg.budget_used(step, 0.0)) for step in range(steps)]  # before each update
    assert sum(n is not None for n in notes) == 1
    assert steps - task.anneal_from == round(share * steps)  # 0.7 of 10 steps: 7 updates, not 6


def test_without_anneal_pairs_the_budget_changes_nothing():
    task = _task(None)
    before = task.batch("train", 5).src
    assert task.on_budget(5, 0.99) is None and task.anneal_from is None
    assert torch.equal(task.batch("train", 5).src, before)
    assert "anneal_from" not in task.state_dict()


def test_the_switch_travels_in_the_state_and_a_different_anneal_set_is_refused():
    task = _task(0.25)
    task.on_budget(11, 0.8)
    state = task.state_dict()
    assert state["anneal_from"] == 11 and state["anneal_share"] == 0.25 and state["n_anneal"] == 24
    resumed = _task(0.25)
    resumed.load_state_dict(state)
    assert resumed.anneal_from == 11
    assert torch.equal(resumed.batch("train", 12).src, task.batch("train", 12).src)
    with pytest.raises(ValueError, match=r"anneal_share \(checkpoint 0.25, now 0.5\)"):
        _task(0.5).load_state_dict(state)
    with pytest.raises(ValueError, match="n_anneal"):
        _task(None).load_state_dict(state)  # the checkpoint annealed, this task would not
    with pytest.raises(ValueError, match="n_anneal"):
        _task(0.25).load_state_dict(_task(None).state_dict())


@pytest.mark.parametrize("kwargs,message", [
    (dict(anneal_share=0.2), "anneal and anneal_share go together, got anneal None and anneal_share 0.2"),
    (dict(anneal="pairs"), "anneal must be EncodedPairs"),
    (dict(anneal=True), "anneal must be EncodedPairs"),
])
def test_bad_anneal_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MTTask(_pairs(16, 0), _pairs(8, 1), max_tokens=30, **{"anneal_share": 0.2, **kwargs})


@pytest.mark.parametrize("share", [0.0, 1.0, -0.1, float("nan"), "0.2"])
def test_anneal_share_must_be_inside_zero_one(share):
    with pytest.raises(ValueError, match="anneal_share must be in \\(0, 1\\)"):
        MTTask(_pairs(16, 0), _pairs(8, 1), max_tokens=30, anneal=_pairs(8, 2), anneal_share=share)


def test_anneal_pairs_need_the_same_special_ids():
    other = EncodedPairs([[5, 3]], [[6]], pad_id=PAD, bos_id=BOS, eos_id=3)
    with pytest.raises(ValueError, match="special ids"):
        MTTask(_pairs(16, 0), _pairs(8, 1), max_tokens=30, anneal=other, anneal_share=0.2)


def test_budget_used_counts_steps_or_time_whichever_is_further():
    assert TrainConfig(steps=200).budget_used(50, 1e6) == 0.25
    assert TrainConfig(steps=None, max_time=2.0).budget_used(10**6, 60.0) == 0.5
    assert TrainConfig(steps=100, max_time=1.0).budget_used(10, 30.0) == 0.5
    assert TrainConfig(steps=100, max_time=1.0).budget_used(90, 30.0) == 0.9


class _Stop(Exception):
    pass


def test_the_trainer_anneals_the_last_steps_and_a_resumed_run_continues_identically(tmp_path, capsys):
    cfg = TrainConfig(steps=16, lr=3e-3, warmup_steps=2, eval_every=100, eval_batches=2, log_every=1,
                      ckpt_every=7, keep_last=5, seed=0)
    seen: list[bool] = []

    class Recording(MTTask):
        """Records what each update trains on (in ``loss``: the trainer builds batches one update ahead and builds
        them again when the task switches to the anneal pairs); stops when training batch ``stop_at`` is asked for
        (built ahead, the error comes when update ``stop_at + 1`` takes it)."""

        stop_at: int | None = None

        def batch(self, split, step):
            if split == "train" and step == self.stop_at:
                raise _Stop
            return super().batch(split, step)

        def loss(self, model, batch):
            seen.append(_is_anneal(batch))
            return super().loss(model, batch)

    def task(stop_at: int | None = None) -> Recording:
        t = Recording(_pairs(64, 0), _pairs(8, 1), max_tokens=30, seed=0, anneal=_pairs(24, 2, low=10, high=V),
                      anneal_share=0.25)
        t.stop_at = stop_at
        return t

    def trainer(t: MTTask, folder: str, **kwargs) -> Trainer:
        model = _model()
        return Trainer(model, t, cfg, tmp_path / folder, model_config=model.config.to_dict(), **kwargs)

    full = trainer(task(), "full", progress=True)
    full.fit()
    assert seen == [False] * 12 + [True] * 4  # 16 steps, the last quarter on the anneal pairs
    assert ("step 12: batch 12 (75% of the budget): the last 25% trains on the 24 anneal pairs only"
            in capsys.readouterr().out)

    # stopped before update 15 (the last checkpoint is step 14, after the switch), then resumed
    with pytest.raises(_Stop):
        trainer(task(stop_at=15), "part", progress=False).fit()
    seen.clear()
    resumed = trainer(task(), "part", resume=True, progress=False)
    assert resumed.step == 14 and resumed.task.anneal_from == 12
    resumed.fit()
    assert seen[:2] == [True, True]
    for k, v in resumed.model.state_dict().items():
        torch.testing.assert_close(v, full.model.state_dict()[k], rtol=0, atol=0)


# --- replay: some training pairs join the anneal phase ---------------------------------------------------------------
def _words(pairs) -> list[tuple[int, ...]]:
    return [tuple(s) for s in pairs.src]


def test_replay_mixes_a_fixed_sample_of_training_pairs_into_the_anneal_phase():
    task = _task(0.25, anneal_replay=0.5)
    assert task.n_replayed == 12  # 0.5 x 24 anneal pairs
    mixed = task.batchers["anneal"].data
    assert len(mixed) == 36 and _words(mixed)[:24] == _words(task.anneal)  # the anneal pairs, all of them
    replayed = _words(mixed)[24:]
    train = _words(task.train)
    assert len(set(replayed)) == 12 and all(s in train for s in replayed)  # without replacement, from train
    assert _words(_task(0.25, anneal_replay=0.5).batchers["anneal"].data) == _words(mixed)  # the same sample
    other = MTTask(task.train, task.valid, max_tokens=30, seed=1, anneal=task.anneal, anneal_share=0.25,
                   anneal_replay=0.5)
    assert _words(other.batchers["anneal"].data)[24:] != replayed  # another seed, another sample
    task.on_budget(9, 0.75)
    seen = [s for step in range(9, 9 + 3 * task.batchers["anneal"].num_batches)
            for s in task.batch("train", step).src.tolist()]
    assert any(min(w for w in s if w not in (PAD, EOS)) < 10 for s in seen)  # general pairs in the anneal phase
    assert any(min(w for w in s if w not in (PAD, EOS)) >= 10 for s in seen)  # and anneal pairs


def test_replay_is_capped_by_the_training_pairs_and_zero_is_plain_annealing():
    assert _task(0.25, anneal_replay=10.0).n_replayed == 64  # all 64 training pairs, not 240
    # Was: "cannot convert float infinity to integer" (train mt --anneal-replay 1e308): R x pairs overflowed to inf
    assert _task(0.25, anneal_replay=1e308).n_replayed == 64
    # round(R x 24 anneal pairs) below the 64 training pairs: 2.4 -> 2, 10.8 -> 11, 63.0 -> 63 (not all 64)
    assert [_task(0.25, anneal_replay=r).n_replayed for r in (0.1, 0.45, 63 / 24)] == [2, 11, 63]
    plain = _task(0.25, anneal_replay=0.0)
    assert plain.n_replayed == 0 and len(plain.batchers["anneal"].data) == 24
    assert "anneal_replay" not in plain.state_dict()  # runs from before the option resume as they were


@pytest.mark.parametrize("kwargs,message", [
    (dict(share=0.25, anneal_replay=-0.5), "anneal_replay must be a number >= 0, got -0.5"),
    (dict(share=0.25, anneal_replay=float("inf")), "anneal_replay must be a number >= 0, got inf"),
    (dict(share=None, anneal_replay=1.0), "anneal_replay 1 needs anneal pairs"),
])
def test_bad_replay(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _task(**kwargs)


def test_a_run_with_replay_resumes_only_with_the_same_replay():
    state = _task(0.25, anneal_replay=0.5).state_dict()
    assert state["anneal_replay"] == 0.5
    _task(0.25, anneal_replay=0.5).load_state_dict(state)
    for other in (0.0, 1.0):
        with pytest.raises(ValueError, match="anneal_replay"):
            _task(0.25, anneal_replay=other).load_state_dict(state)
