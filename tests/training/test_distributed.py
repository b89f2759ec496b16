"""N processes train exactly like one: DDP and FSDP2 under torchrun, on the CPU with gloo.

Every run is ``dist_child.py`` (a 2-block GPT, dropout 0), started as one plain process or through
``python -m torch.distributed.run`` (torchrun). Tolerance: N processes sum the same float32 numbers in a
different order (each rank's share, then the all-reduce), and AdamW turns those last-bit differences into
weight differences of a few 1e-6 after a dozen updates; the tests allow 1e-4 on weights and 1e-5
(relative) on every logged loss, far below what one changed batch row does (see
``test_a_changed_batch_is_detected``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnkit.training import distributed as D
from attnkit.checkpoints.checkpoint import latest_checkpoint
from attnkit.training.sharded import convert_sharded, is_sharded
from helpers import assert_close

CHILD = Path(__file__).with_name("dist_child.py")
ROOT = Path(__file__).resolve().parents[2]
LOSS_RTOL = 1e-5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    # PYTHONFAULTHANDLER: a rank that dies of a signal prints every thread's Python stack into the stderr that a
    # failing assertion shows (rank 0 of test_time_budget_is_agreed_by_all_ranks was seen, twice in about two hundred
    # runs, to abort with "terminate called without an active exception": the cause, and the fix in shutdown(), are
    # at test_a_successful_job_ends_without_an_abort)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", PYTHONFAULTHANDLER="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def launch(out: Path, nproc: int = 1, *, torchrun_args: list[str] | None = None, **options) -> list[str]:
    """The command line of one run: plain python for nproc=1 (no torchrun args), torchrun otherwise."""
    script = [str(CHILD), str(out), json.dumps(options)]
    if nproc == 1 and torchrun_args is None:
        return [sys.executable, *script]
    args = torchrun_args or ["--standalone", f"--nproc_per_node={nproc}"]
    return [sys.executable, "-m", "torch.distributed.run", *args, *script]


def run(out: Path, nproc: int = 1, **options) -> Path:
    proc = subprocess.run(launch(out, nproc, **options), env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def weights(out: Path, step: int | None = None) -> dict[str, torch.Tensor]:
    ckpt = latest_checkpoint(out / "checkpoints") if step is None else out / "checkpoints" / f"step_{step:08d}"
    return load_file(str(ckpt / "model.safetensors"))


def losses(out: Path, valid: bool = True) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r] + [r["valid_loss"] for r in rows if "valid_loss" in r and valid]


def assert_same_training(a: Path, b: Path, step: int | None = None, valid: bool = True) -> None:
    wa, wb = weights(a, step), weights(b, step)
    assert sorted(wa) == sorted(wb)
    for name in wa:
        assert_close(wb[name], wa[name], "trained_float32", msg=name)
    la, lb = losses(a, valid), losses(b, valid)
    assert len(la) == len(lb) > 10
    torch.testing.assert_close(torch.tensor(lb), torch.tensor(la), rtol=LOSS_RTOL, atol=0)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    """The reference: one process, global batch 8, 12 updates."""
    return run(tmp_path_factory.mktemp("single") / "run")


# ------------------------------------------------------------------------------------------------
# the pieces, in one process
# ------------------------------------------------------------------------------------------------

def test_shard_batch_splits_rows_disjointly_and_completely():
    x = torch.arange(10 * 3).reshape(10, 3)
    batch = {"x": x, "pair": (x + 1, x.sum(1)), "note": "kept"}
    shares = [D.shard_batch(batch, r, 3) for r in range(3)]
    assert [s["x"].shape[0] for s in shares] == [4, 3, 3]
    torch.testing.assert_close(torch.cat([s["x"] for s in shares]), x)
    torch.testing.assert_close(torch.cat([s["pair"][1] for s in shares]), x.sum(1))
    assert all(s["note"] == "kept" for s in shares)
    assert D.shard_batch(batch, 0, 1) is batch
    with pytest.raises(ValueError, match="a batch of 2 rows cannot be shared by 3 processes"):
        D.shard_batch(x[:2], 0, 3)
    with pytest.raises(ValueError, match="holds no tensor"):
        D.shard_batch(["a"], 0, 2)


def test_backend_follows_the_device():
    assert D.backend_for(torch.device("cpu")) == "gloo"
    assert D.backend_for(torch.device("cuda", 0)) == "nccl"
    with pytest.raises(ValueError, match="supports devices"):
        D.backend_for(torch.device("meta"))


def test_one_process_is_a_world_of_one(monkeypatch):
    for key in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    world = D.init_from_env(torch.device("cpu"))
    assert (world.rank, world.size, world.is_main, world.distributed) == (0, 1, True, False)
    assert D.all_sum([1.5, 2.0]) == [1.5, 2.0]
    assert D.on_main(lambda: 7) == 7


def test_fsdp_needs_several_processes(tmp_path):
    from attnkit.models.configs import GPTConfig
    from attnkit.models.gpt import GPT
    from attnkit.training import LMTask, TrainConfig, Trainer

    gcfg = GPTConfig(vocab_size=8, block_size=4, n_layer=1, n_head=1, n_embd=8)
    task = LMTask(torch.arange(50) % 8, torch.arange(50) % 8, block_size=4, batch_size=2)
    with pytest.raises(ValueError, match=r"fsdp=True needs several processes \(--fsdp, which a resumed run keeps\)"):
        Trainer(GPT(gcfg), task, TrainConfig(steps=1, batch_size=2, block_size=4, warmup_steps=0, fsdp=True), tmp_path / "r",
                model_config=gcfg)


# ------------------------------------------------------------------------------------------------
# N processes == 1 process
# ------------------------------------------------------------------------------------------------

def test_two_processes_with_half_the_batch_each_equal_one_process(single, tmp_path):
    two = run(tmp_path / "two", nproc=2)
    assert_same_training(single, two)
    # only rank 0 wrote files; the run's files are the same set as one process writes
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in single.iterdir())


def test_a_changed_batch_is_detected(single, tmp_path):
    """The tolerance is tight enough: a run that sees other data (another seed) fails the comparison."""
    other = run(tmp_path / "other", seed=6)
    with pytest.raises(AssertionError):
        assert_same_training(single, other)


def test_grad_accumulation_equals_the_big_batch_with_and_without_ddp(tmp_path):
    big = run(tmp_path / "big", task="windows")
    # (validation batches hold batch_size windows, so only the training losses are comparable here)
    accum = run(tmp_path / "accum", task="windows", batch_size=4, grad_accum=2)
    assert_same_training(big, accum, valid=False)
    ddp_accum = run(tmp_path / "ddp_accum", nproc=2, task="windows", batch_size=4, grad_accum=2)  # 2 rows per rank
    assert_same_training(big, ddp_accum, valid=False)
    fsdp_accum = run(tmp_path / "fsdp_accum", nproc=2, task="windows", batch_size=4, grad_accum=2, fsdp=True)
    from attnkit.models.configs import GPTConfig
    from attnkit.models.gpt import GPT

    gcfg = GPTConfig.from_dict(json.loads((fsdp_accum / "run.json").read_text())["model_config"])
    converted = convert_sharded(latest_checkpoint(fsdp_accum / "checkpoints"), tmp_path / "fsdp_accum_1", GPT(gcfg))
    wa, wb = weights(big), load_file(str(converted / "model.safetensors"))
    for name in wa:
        assert_close(wb[name], wa[name], "trained_float32", msg=name)


def test_fsdp_with_two_processes_equals_one_process(single, tmp_path):
    sharded = run(tmp_path / "fsdp", nproc=2, fsdp=True)
    last = latest_checkpoint(sharded / "checkpoints")
    assert is_sharded(last) and not (last / "model.safetensors").exists()
    best = sharded / "checkpoints" / "best"
    assert not is_sharded(best) and (best / "model.safetensors").is_file()  # converted at the end of the run
    from attnkit.models.configs import GPTConfig
    from attnkit.models.gpt import GPT

    gcfg = GPTConfig.from_dict(json.loads((sharded / "run.json").read_text())["model_config"])
    converted = convert_sharded(last, tmp_path / "converted", GPT(gcfg))
    wa, wb = weights(single), load_file(str(converted / "model.safetensors"))
    assert sorted(wa) == sorted(wb)
    for name in wa:
        assert_close(wb[name], wa[name], "trained_float32", msg=name)
    torch.testing.assert_close(torch.tensor(losses(sharded)), torch.tensor(losses(single)), rtol=LOSS_RTOL, atol=0)


def test_activation_checkpointing_under_ddp_and_fsdp_equals_one_process(single, tmp_path):
    """Non-reentrant checkpointing composes with DDP's gradient hooks and with FSDP2's per-block all-gathers (the
    recomputation in the backward pass finds the block's parameters gathered by its pre-backward hook)."""
    ddp = run(tmp_path / "ddp", nproc=2, activation_checkpointing=True)
    assert json.loads((ddp / "run.json").read_text())["train_config"]["activation_checkpointing"] is True
    assert_same_training(single, ddp)
    sharded = run(tmp_path / "fsdp", nproc=2, fsdp=True, activation_checkpointing=True)
    torch.testing.assert_close(torch.tensor(losses(sharded)), torch.tensor(losses(single)), rtol=LOSS_RTOL, atol=0)


def test_chunked_loss_under_ddp_and_fsdp_equals_one_process(single, tmp_path):
    """The chunked loss runs inside the model's forward pass (``output_fn``), so DDP's hooks see the head used, and
    under FSDP2 each chunk's recomputation in the backward pass reads the head's weight through the module, where
    the root's pre-forward all-gather left it whole (the root is not resharded after its forward pass)."""
    ddp = run(tmp_path / "ddp", nproc=2, loss_chunks=3)
    assert json.loads((ddp / "run.json").read_text())["train_config"]["loss_chunks"] == 3
    assert_same_training(single, ddp)
    sharded = run(tmp_path / "fsdp", nproc=2, fsdp=True, loss_chunks=3)
    torch.testing.assert_close(torch.tensor(losses(sharded)), torch.tensor(losses(single)), rtol=LOSS_RTOL, atol=0)


SAVE_SHARDED_CHILD = """
import sys
import torch
torch.set_num_threads(1)
from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from attnkit.training import TrainConfig, distributed as D
from attnkit.training.optim import LRScheduler, build_optimizer
from attnkit.training.sharded import save_sharded
D.init_from_env(torch.device("cpu"))
model = D.shard_fsdp(GPT(GPTConfig(vocab_size=8, block_size=4, n_layer=1, n_head=1, n_embd=8)))
cfg = TrainConfig(steps=1, warmup_steps=0)
optimizer = build_optimizer(model, cfg)
for path in sys.argv[1:]:
    try:
        save_sharded(path, model, optimizer, LRScheduler(optimizer, cfg), state={"step": 1}, extra={})
    except ValueError as err:
        print(f"rank {D.current_world().rank}: {err}", flush=True)
D.shutdown()
"""


def test_a_sharded_save_replaces_no_folder_of_the_users(tmp_path):
    """FSDP's save refuses, as the one-file save does, a best/ holding the user's notes: every rank raises the
    ValueError (none is left waiting) and nothing is removed; a new folder is saved as usual."""
    mine, fresh = tmp_path / "best", tmp_path / "fresh"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    child = tmp_path / "child.py"
    child.write_text(SAVE_SHARDED_CHILD)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(child), str(mine), str(fresh)], env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        assert (f"rank {rank}: save_sharded: {mine} exists and holds ['notes.txt'], not a checkpoint's files; it "
                f"would be replaced") in proc.stdout
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep me"
    assert is_sharded(fresh) and not (tmp_path / "best.tmp").exists()


def _process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc), parents first."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += children.get(p, [])
    return tree


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie holds no lock and runs nothing


def _kill_launcher_mid_run(out: Path, nproc: int, **options) -> str:
    """Start a slowed-down torchrun job, SIGKILL its launcher once ``step_00000004`` is saved and before the
    run ends, check that no worker outlives it, and return the name of the last checkpoint left."""
    proc = subprocess.Popen(launch(out, nproc, slow=0.3, **options), env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # kill once a checkpoint exists and before the run ends
            ckpt = latest_checkpoint(out / "checkpoints")
            if ckpt is not None and ckpt.name >= "step_00000004":
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        workers = _process_tree(proc.pid)[1:]
        assert workers, "torchrun has not started its workers"
        os.kill(proc.pid, signal.SIGKILL)  # the launcher only; its workers die with it (PR_SET_PDEATHSIG)
    finally:
        if proc.poll() is None:  # the test failed before its kill: clean up everything it started
            for pid in _process_tree(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.05)
    assert not any(_alive(p) for p in workers), "workers outlived their launcher"
    killed_at = latest_checkpoint(out / "checkpoints").name
    assert killed_at < "step_00000012"
    return killed_at


def test_sigkill_mid_run_then_resume_with_another_number_of_processes(single, tmp_path):
    out = tmp_path / "killed"
    _kill_launcher_mid_run(out, 2)
    run(out, resume=True)  # one process continues what two started
    assert_same_training(single, out)


def test_fsdp_sigkill_then_resume_resharded_over_three_processes(single, tmp_path):
    """A sharded (DCP) checkpoint written by 2 FSDP processes is re-sharded on load by 3 (``load_sharded``), and
    the resumed run ends where the uninterrupted one-process run ends (uneven shares: 8 rows = 3 + 3 + 2)."""
    out = tmp_path / "fsdp_killed"
    killed_at = _kill_launcher_mid_run(out, 2, fsdp=True)
    assert is_sharded(out / "checkpoints" / killed_at)
    run(out, nproc=3, resume=True, fsdp=True)
    from attnkit.models.configs import GPTConfig
    from attnkit.models.gpt import GPT

    gcfg = GPTConfig.from_dict(json.loads((out / "run.json").read_text())["model_config"])
    last = latest_checkpoint(out / "checkpoints")
    assert last.name == "step_00000012" and json.loads((last / "state.json").read_text())["world_size"] == 3
    converted = convert_sharded(last, tmp_path / "converted", GPT(gcfg))
    wa, wb = weights(single), load_file(str(converted / "model.safetensors"))
    for name in wa:
        assert_close(wb[name], wa[name], "trained_float32", msg=name)
    torch.testing.assert_close(torch.tensor(losses(out)), torch.tensor(losses(single)), rtol=LOSS_RTOL, atol=0)


def test_time_budget_is_agreed_by_all_ranks(tmp_path):
    """Under torchrun a run limited by time only (no step limit) stops at the same update on every rank: rank 0's
    clock decides. A rank that stopped alone would leave the others waiting in a collective (the timeout)."""
    out = tmp_path / "timed"
    proc = subprocess.run(launch(out, 2, steps=None, max_time=0.05, slow=0.1, ckpt_every=1000, eval_every=1000),
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-8000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_by"] == "max_time" and summary["steps"] >= 2
    assert 3.0 <= summary["elapsed"] < 30.0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, summary["steps"] + 1))


def test_two_machines_on_one_host_with_a_c10d_rendezvous(single, tmp_path):
    out = tmp_path / "nodes"
    endpoint = f"127.0.0.1:{free_port()}"
    procs = [subprocess.Popen(launch(out, torchrun_args=[
        "--nnodes=2", "--nproc_per_node=1", f"--node_rank={rank}", "--rdzv_backend=c10d",
        f"--rdzv_endpoint={endpoint}", "--rdzv_id=attnkit-test"]), env=_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for rank in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
    assert_same_training(single, out)


# The end of a job: a process group still held by garbage (a finished trainer's DDP model, in reference cycles), the
# last collective's tensor dropped by Python while a gloo worker thread still holds it, the GIL kept by the main thread
# (a long switch interval makes the race certain), then shutdown() and exit. Before shutdown() collected that garbage,
# the worker thread met the interpreter's exit when it took the GIL to free the tensor and the rank aborted
# ("terminate called without an active exception"): 6 of 10 such jobs.
EXIT_CHILD = """
import os, sys, time
import torch
import torch.distributed as dist
from attnkit.training import distributed as D

D.init_from_env(torch.device("cpu"))


class Holder:
    def __init__(self):
        self.me, self.group = self, dist.group.WORLD


Holder()
try:
    D.all_sum([1.0])
    D.broadcast_object({"step": 1})
    if os.environ.get("FAIL_RANK") == str(dist.get_rank()):
        raise ValueError("a failing rank")
    if dist.get_rank() == 0:
        time.sleep(0.5)  # rank 1 leaves first
    sys.setswitchinterval(10.0)
    D.all_sum([1.0])
finally:
    D.shutdown()
"""


def _exit_job(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    child = tmp_path / "exit_child.py"
    child.write_text(EXIT_CHILD)
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(child)], env=dict(_env(), **env), capture_output=True, text=True, timeout=120)


def test_shutdown_frees_the_garbage_holding_the_process_group(tmp_path):
    """shutdown() collects the reference cycles still holding the group before destroying it, so that the group's
    destructor joins its gloo worker threads while Python is alive (even with automatic collection off)."""
    import gc
    import weakref

    import torch.distributed as dist

    class Holder:
        pass

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    enabled = gc.isenabled()
    gc.disable()
    try:
        holder = Holder()
        holder.me, holder.group = holder, dist.group.WORLD
        alive = weakref.ref(holder)
        del holder
        D.shutdown()
        assert alive() is None and not dist.is_initialized()
    finally:
        if enabled:
            gc.enable()
        if dist.is_initialized():
            dist.destroy_process_group()


def test_a_successful_job_ends_without_an_abort(tmp_path):
    proc = _exit_job(tmp_path)
    assert proc.returncode == 0 and "terminate called" not in proc.stderr, proc.stderr[-3000:]


def test_a_failing_rank_ends_the_job_without_a_hang(tmp_path):
    """shutdown() waits for no other rank: the failing rank exits with its error and torchrun ends the job."""
    proc = _exit_job(tmp_path, FAIL_RANK="1")
    assert proc.returncode != 0 and "ValueError: a failing rank" in proc.stderr, proc.stderr[-3000:]
