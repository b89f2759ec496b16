"""The training step of issue #40 changes no number: batches built one update ahead in another thread, the loss
compiled together with the model, nothing read back from the device between logged updates.

* the Trainer's update equals a hand-written loop of the update as the trainer documents it (bit for bit on
  the CPU, with dropout, word dropout, label smoothing and gradient accumulation), for LM and MT;
* ``compile=True`` (the model and the task's loss compiled as one function) follows ``compile=False`` within
  float tolerance, for LM and MT with accumulation (MT batches of any shape from one compilation), and a
  compiled run resumes exactly; the compilation counts in a time budget but not in the schedule;
* an update reads nothing back (``.item()`` / ``.tolist()`` / ``float()`` / ``bool()`` counted by patching; CUDA:
  ``helpers.sync_sites``); the numbers are read once per ``log_every`` updates;
* the prefetcher builds in its own thread, returns what the task makes, and keeps errors for ``get``.

Axis legend: B batch, T sequence length, V vocabulary.
"""

from __future__ import annotations

import json
import threading

import pytest
import torch

from attnkit.checkpoints.checkpoint import CheckpointError, read_checkpoint_state
from attnkit.checkpoints.rng import seed_everything
from attnkit.checks import checks_on_device
from attnkit.data.pipeline.mt_batching import EncodedPairs
from attnkit.models.gpt import GPT
from attnkit.models.transformer import Transformer
from attnkit.training.config import TrainConfig
from attnkit.training.lm_task import LMTask
from attnkit.training.metrics import read_metrics
from attnkit.training.mt_task import MTTask
from attnkit.training.optim import LRScheduler, build_optimizer
from attnkit.training.prefetch import BatchPrefetcher
from attnkit.training.trainer import Trainer
from helpers import assert_close, sync_sites, tiny_gpt_config, tiny_transformer_config

PAD, BOS, EOS = 0, 1, 2


def _lm_task(seed: int = 1) -> LMTask:
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, 61, (3000,), generator=g)  # V = 61, tiny_gpt_config's vocabulary
    return LMTask(tokens[:2600], tokens[2600:], block_size=16, batch_size=4, seed=seed)


def _pairs(n: int, seed: int, longest: int = 7) -> EncodedPairs:
    """Pairs whose target is the reversed source (words 4..18; sources end with <eos>), at most ``longest`` words."""
    g = torch.Generator().manual_seed(seed)
    src, tgt = [], []
    for _ in range(n):
        words = torch.randint(4, 19, (int(torch.randint(2, longest + 1, (1,), generator=g)),), generator=g).tolist()
        src.append(words + [EOS])
        tgt.append(words[::-1])
    return EncodedPairs(src, tgt, pad_id=PAD, bos_id=BOS, eos_id=EOS)


def _mt_task(**kwargs) -> MTTask:
    return MTTask(_pairs(96, 0), _pairs(12, 1), max_tokens=48, seed=2, **kwargs)


def _gpt(dropout: float) -> tuple[GPT, object]:
    config = tiny_gpt_config(block_size=16, dropout=dropout)
    torch.manual_seed(0)
    return GPT(config), config


def _transformer(dropout: float) -> tuple[Transformer, object]:
    config = tiny_transformer_config(dropout=dropout)
    torch.manual_seed(0)
    return Transformer(config), config


def _without_key_biases(state: dict[str, torch.Tensor], kv_width: int = 32) -> dict[str, torch.Tensor]:
    """``state`` without the key rows of the packed attention biases (``qkv_proj.bias`` rows ``[q | k | v]``,
    ``kv_proj.bias`` rows ``[k | v]``; ``kv_width`` = K * D = 32 in both tiny models): a key bias shifts every
    score of a query alike, so the softmax ignores it; its gradient is rounding noise that Adam scales up to steps
    of about the learning rate, with signs that follow the order of the sums (the reason of
    ``helpers.without_key_biases``, whose suffix test also takes ``qkv_proj.bias`` for a ``kv_proj.bias``)."""
    out = {}
    for name, t in state.items():
        if name.endswith(".qkv_proj.bias"):
            q_width = t.numel() - 2 * kv_width
            out[name] = torch.cat([t[:q_width], t[q_width + kv_width:]])  # q and v
        elif name.endswith(".kv_proj.bias"):
            out[name] = t[kv_width:]  # v
        else:
            out[name] = t
    return out


def _config(**overrides) -> TrainConfig:
    base = dict(steps=6, batch_size=4, block_size=16, grad_accum=2, lr=3e-3, min_lr=3e-4, warmup_steps=2,
                eval_every=3, eval_batches=2, log_every=1, ckpt_every=3, keep_last=3, seed=5)
    return TrainConfig(**(base | overrides))


def _fit(tmp_path, name, model_and_config, task, cfg, **kwargs) -> tuple[list[float], dict]:
    model, config = model_and_config
    Trainer(model, task, cfg, tmp_path / name, model_config=config, progress=False, log=False, **kwargs).fit()
    losses = [r["loss"] for r in read_metrics(tmp_path / name) if "loss" in r]
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _hand_written_updates(model, task, cfg: TrainConfig) -> tuple[list[float], dict]:
    """The update of trainer.py's docstring, written out: per micro-batch ``(loss * n).backward()``, gradients
    divided by the update's tokens, clipping, AdamW, the schedule; the losses as the trainer logs them."""
    seed_everything(cfg.seed)
    model.train()
    optimizer = build_optimizer(model, cfg)
    schedule = LRScheduler(optimizer, cfg, clock=lambda: 0.0)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    logged = []
    for step in range(cfg.steps):
        optimizer.zero_grad(set_to_none=True)
        losses, counts = [], []
        for micro in range(cfg.grad_accum):
            loss, n = task.loss(model, task.batch("train", step * cfg.grad_accum + micro))
            (loss * n).backward()
            losses.append(loss.detach())
            counts.append(n)
        total = sum(counts)
        for p in params:
            p.grad.div_(total)
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        optimizer.step()
        schedule.step()
        logged.append(sum(float(v) * n for v, n in zip(losses, counts)) / total)
    return logged, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("kind", ["lm", "mt"])
def test_the_update_equals_the_hand_written_loop_bit_for_bit(tmp_path, kind):
    """Dropout (and for MT word dropout and label smoothing) draws from the same generator in the same order, the
    batches come from the prefetching thread, the gradients are divided with one foreach call: the same bits."""
    if kind == "lm":
        make, task, extra = (lambda: _gpt(0.1)), _lm_task, {}
    else:
        make, task, extra = (lambda: _transformer(0.1)), (lambda: _mt_task(word_dropout=0.2)), {}
    cfg = _config(**extra)
    losses, weights = _fit(tmp_path, "trainer", make(), task(), cfg)
    model, _ = make()
    expected_losses, expected_weights = _hand_written_updates(model, task(), cfg)
    assert losses == expected_losses
    assert len(set(losses)) == cfg.steps  # the losses move: the comparison means something
    for name, value in expected_weights.items():
        assert_close(weights[name], value, "exact")


@pytest.mark.parametrize("kind", ["lm", "mt"])
def test_the_compiled_step_follows_the_eager_step(tmp_path, kind):
    """``compile=True`` compiles the model and the task's loss as one function (one graph: fixed shapes here, for
    MT through ``shape_multiple``): the same losses and weights as the eager reference within float tolerance,
    with gradient accumulation. Dropout is off: compiled dropout draws other random numbers."""
    if kind == "lm":
        make, task = (lambda: _gpt(0.0)), _lm_task
    else:
        make, task = (lambda: _transformer(0.0)), (lambda: _mt_task(shape_multiple=8))
    eager = _fit(tmp_path, "eager", make(), task(), _config())
    compiled = _fit(tmp_path, "compiled", make(), task(), _config(compile=True))
    assert_close(torch.tensor(compiled[0]), torch.tensor(eager[0]), "float32")
    # within 1e-4, as docs/scaling.md's exactness tests: AdamW turns last-bit differences of the gradients into
    # weight differences of a few 1e-6 (the key biases aside, whose gradient is rounding noise: _without_key_biases)
    weights = [_without_key_biases(w) for w in (compiled[1], eager[1])]
    assert weights[0].keys() == weights[1].keys()
    for name, value in weights[1].items():
        torch.testing.assert_close(weights[0][name], value, rtol=0.0, atol=1e-4)


def test_a_compiled_run_resumes_exactly(tmp_path):
    """A compiled run of 3 steps resumed to 6 equals the compiled run straight to 6, bit for bit (both with the
    schedule of 6 steps: ``schedule_steps``)."""
    straight = _fit(tmp_path, "straight", _gpt(0.0), _lm_task(), _config(compile=True, schedule_steps=6))
    _fit(tmp_path, "part", _gpt(0.0), _lm_task(), _config(compile=True, steps=3, schedule_steps=6))
    resumed = _fit(tmp_path, "part", _gpt(0.0), _lm_task(), _config(compile=True, schedule_steps=6), resume=True)
    assert resumed[0] == straight[0]
    for name, value in straight[1].items():
        assert_close(resumed[1][name], value, "exact")


def test_a_compiled_translator_takes_batches_of_any_shape_from_one_compilation(tmp_path):
    """Sentence batches change shape at every update (``dynamic_shapes``): the loss is compiled for any shape
    at once, one graph for six updates of different shapes, and follows the eager step."""
    task = _mt_task()
    shapes = {tuple(task.batch("train", i).tgt_in.shape) for i in range(12)}
    assert task.dynamic_shapes and len(shapes) > 2  # the batches do change shape
    assert not _mt_task(shape_multiple=8).dynamic_shapes  # a few fixed shapes: one graph each
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = _fit(tmp_path, "compiled", _transformer(0.0), _mt_task(), _config(compile=True))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    eager = _fit(tmp_path, "eager", _transformer(0.0), _mt_task(), _config())
    assert_close(torch.tensor(compiled[0]), torch.tensor(eager[0]), "float32")


def test_compilation_counts_in_the_time_budget_but_not_in_the_schedule(tmp_path):
    """With ``max_time`` the schedule reads the seconds after compiling, stretched over the whole budget: 20 s
    of compilation in a 60 s budget leave the warmup and the decay to the other 40 s."""
    model, config = _gpt(0.0)
    cfg = TrainConfig(steps=None, max_time=1.0, lr=1e-3, min_lr=0.0, warmup_steps=1000, warmup_time_share=0.1,
                      batch_size=4, block_size=16)
    trainer = Trainer(model, _lm_task(), cfg, tmp_path / "run", model_config=config, progress=False)
    lr = {}
    for compile_s, clock in ((0.0, 3.0), (0.0, 30.0), (20.0, 20.0), (20.0, 22.0), (20.0, 40.0), (20.0, 60.0)):
        trainer._compile_s, trainer._clock = compile_s, clock
        lr[compile_s, clock] = trainer.scheduler.get_lr()
    assert lr[20.0, 20.0] == pytest.approx(0.0, abs=1e-6)  # right after compiling: the warmup begins
    assert lr[20.0, 22.0] == pytest.approx(lr[0.0, 3.0])  # 2 of 40 s after compiling = 3 of 60 s
    assert lr[20.0, 40.0] == pytest.approx(lr[0.0, 30.0]) == pytest.approx(0.5e-3)  # half way: half the lr
    assert lr[20.0, 60.0] == pytest.approx(0.0, abs=1e-12)  # the decay ends with the budget


def test_a_compiled_run_keeps_its_compilation_time_across_a_resume(tmp_path):
    """The compilation seconds (each segment's first update) go into every checkpoint and add up on resume; a
    hand-edited value is refused by name."""
    def state(step: int) -> dict:
        return read_checkpoint_state(tmp_path / "run" / "checkpoints" / f"step_{step:08d}")

    first = _fit_summary(tmp_path, _config(compile=True, steps=3, schedule_steps=6))
    assert state(3)["compile_s"] == first["first_update_s"] > 0
    second = _fit_summary(tmp_path, _config(compile=True, schedule_steps=6), resume=True)
    assert state(6)["compile_s"] == pytest.approx(first["first_update_s"] + second["first_update_s"])
    eager = _fit_summary(tmp_path / "eager", _config(steps=3))
    assert read_checkpoint_state(tmp_path / "eager" / "run" / "checkpoints" / "step_00000003")["compile_s"] == 0.0
    assert eager["first_update_s"] > 0

    path = tmp_path / "run" / "checkpoints" / "step_00000006" / "state.json"
    edited = json.loads(path.read_text()) | {"compile_s": 1e9}
    path.write_text(json.dumps(edited))
    with pytest.raises(CheckpointError, match=r"'compile_s' must be a number in \[0, elapsed = .*\], got 1000000000"):
        _fit_summary(tmp_path, _config(compile=True, steps=9, schedule_steps=6), resume=True)


def _fit_summary(tmp_path, cfg: TrainConfig, **kwargs) -> dict:
    model, config = _gpt(0.0)
    return Trainer(model, _lm_task(), cfg, tmp_path / "run", model_config=config, progress=False, log=False,
                   **kwargs).fit()


def test_compile_compiles_the_loss_with_the_model_and_evaluates_eagerly(tmp_path):
    model, config = _gpt(0.0)
    task = _lm_task()
    trainer = Trainer(model, task, _config(compile=True), tmp_path / "run", model_config=config, progress=False)
    assert trainer._loss == task.loss  # the task's own loss until fit() starts
    assert trainer._loss_function() is not task.loss and callable(trainer._loss_function())
    assert trainer._eval_model is model


# --- nothing read back during an update ------------------------------------------------------------------------------
_READS = ("item", "tolist", "__float__", "__bool__")


@pytest.mark.parametrize("kind", ["lm", "mt"])
def test_updates_read_nothing_back_and_the_log_reads_once(tmp_path, kind, monkeypatch):
    """Counting the Python-level reads of a tensor's value: none inside an update; one ``tolist`` per read of the
    pending updates (every ``log_every`` updates), which holds every micro-batch loss and gradient norm.

    The update runs as on a GPU: ``checks_on_device`` on, so the models' value checks and the attention's test for
    fully masked rows read nothing (on the CPU the trainer leaves it off: a read costs nothing there). The LM task
    still checks the CPU batch's own largest id with ``int(y.max())``, free there (on a GPU it uses a bound known on
    the host; ``tests/training/test_device.py`` checks that update with CUDA's sync debug mode)."""
    make, task = ((lambda: _gpt(0.1)), _lm_task) if kind == "lm" else ((lambda: _transformer(0.1)), _mt_task)
    model, config = make()
    # fused AdamW (what "auto" picks on CUDA) keeps its step counts beside the weights; torch's for-loop AdamW reads
    # its host-side counts with .item(), a host read on a GPU too, but it would be counted here
    cfg = _config(steps=8, log_every=4, eval_every=100, ckpt_every=100, adamw_impl="fused")
    trainer = Trainer(model, task(), cfg, tmp_path / "run", model_config=config, progress=False, log=False)
    phases: list[str] = []  # what the main thread is doing, innermost last
    reads: dict[str, list[str]] = {"update": [], "read": [], "build": []}

    def counted(name):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            # batches are built on the host before their copy, mostly in the prefetching thread: not counted
            if phases and threading.current_thread() is threading.main_thread():
                reads[phases[-1]].append(name)
            return original(self, *args, **kwargs)
        return read

    monkeypatch.setattr("attnkit.training.trainer.checks_on_device", lambda enabled: checks_on_device(True))
    for name in _READS:
        monkeypatch.setattr(torch.Tensor, name, counted(name))
    if kind == "mt":  # the MT batch carries its counts: not even int() of a tensor
        monkeypatch.setattr(torch.Tensor, "__int__", counted("__int__"))

    def in_phase(name, method):
        def wrapped(self, *args, **kwargs):
            phases.append(name)
            try:
                return method(self, *args, **kwargs)
            finally:
                phases.pop()
        return wrapped

    calls = []
    monkeypatch.setattr(Trainer, "_update", in_phase("update", Trainer._update))
    monkeypatch.setattr(BatchPrefetcher, "_make", in_phase("build", BatchPrefetcher._make))
    read_updates = in_phase("read", Trainer._read_updates)
    monkeypatch.setattr(Trainer, "_read_updates", lambda self: (calls.append(len(self._pending)),
                                                                read_updates(self))[1])
    summary = trainer.fit()
    assert summary["steps"] == 8
    assert reads["update"] == []
    assert [n for n in calls if n] == [4, 4]  # two reads of four updates each (the later calls find nothing)
    assert reads["read"] == ["tolist", "tolist"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA's sync debug mode needs a CUDA device")
def test_compiled_updates_on_cuda_never_wait_for_the_device(tmp_path):
    model, config = _gpt(0.0)
    cfg = _config(compile=True, device="cuda", autocast="bf16", log_every=100, eval_every=100, ckpt_every=100)
    trainer = Trainer(model, _lm_task(), cfg, tmp_path / "run", model_config=config, progress=False, log=False)
    trainer._loss = trainer._loss_function()
    trainer._update(trainer.model)  # compiles
    torch.cuda.synchronize()
    assert sync_sites(lambda: [trainer._update(trainer.model) for _ in range(3)]) == []
    trainer._batches.close()
    trainer._release_lock()


# --- the prefetcher ---------------------------------------------------------------------------------------------------
def test_the_prefetcher_builds_ahead_in_its_own_thread_and_returns_what_the_task_makes():
    task = _lm_task()
    threads: dict[int, str] = {}

    def build(i):
        threads[i] = threading.current_thread().name
        return task.batch("train", i)

    batches = BatchPrefetcher(build, torch.device("cpu"))
    batches.ahead([0, 1])
    batches.ahead([1])  # already under way: not built twice
    assert batches.pending == [0, 1]
    for i in (0, 1, 2):  # 2 was not asked for ahead: built in the caller's thread
        x, y = batches.get(i)
        ex, ey = task.batch("train", i)
        assert torch.equal(x, ex) and torch.equal(y, ey)
    assert threads[0].startswith("attnkit-batches") and threads[1].startswith("attnkit-batches")
    assert threads[2] == threading.current_thread().name
    assert batches.pending == []
    batches.close()


def test_the_prefetcher_keeps_errors_for_get_and_discards_stale_batches():
    built = []

    def build(i):
        built.append(i)
        if i == 3:
            raise ValueError("no batch 3")
        return torch.full((2,), i)

    batches = BatchPrefetcher(build, torch.device("cpu"))
    batches.ahead([3, 4])
    batches.settle()  # waits, raises nothing
    with pytest.raises(ValueError, match="no batch 3"):
        batches.get(3)
    batches.discard()  # batch 4 was built from a task that has changed since
    assert batches.pending == [] and torch.equal(batches.get(4), torch.full((2,), 4))
    assert built == [3, 4, 4]
    batches.close()
    batches.close()  # twice is fine
    with pytest.raises(ValueError, match="build must be callable"):
        BatchPrefetcher(None, torch.device("cpu"))
