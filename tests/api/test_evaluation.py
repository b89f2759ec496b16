"""``attnkit.api.evaluate_lm``: the loss it reports is the mean next-token cross-entropy over the very tokens of
the validation split the run held out, computed here by hand.

Axis legend: T block size (windows of T + 1 ids).
"""

from __future__ import annotations

import io
import json
import random
import re
import sys

import pytest
import torch
import torch.nn.functional as F

from attnkit import api
from attnkit.checkpoints import load
from attnkit.data.pipeline.documents import prepare_finetune_data

TINY_LM = dict(preset="char-small", overrides={"n_layer": 1, "n_head": 2, "n_embd": 32}, block_size=16,
               batch_size=8, warmup_steps=2, eval_every=10, eval_batches=2, progress=False)


def _mean_loss_by_hand(model: torch.nn.Module, ids: torch.Tensor, T: int) -> tuple[float, int]:
    """Non-overlapping windows of T + 1 ids at 0, T, 2T, ...: every target once (a tail shorter than T left out)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, (ids.numel() - 1) // T * T, T):
            window = ids[start:start + T + 1]  # (T + 1,)
            total += float(F.cross_entropy(model(window[None, :-1])[0], window[1:], reduction="sum"))
            count += T
    return total / count, count


def _strided_loss_by_hand(model: torch.nn.Module, ids: torch.Tensor, T: int, stride: int) -> tuple[float, int]:
    """Hugging Face's strided loop ("Perplexity of fixed-length models") over the targets the non-overlapping windows
    score (ids 1 … nT, n = (N - 1) // T): windows of T + 1 ids moved by ``stride`` (the last one moved back to end on
    target nT), each scoring the targets past the end of the one before; the log-softmax in float64."""
    end = (ids.numel() - 1) // T * T
    total, count, prev_end, begin = 0.0, 0, 0, 0
    with torch.no_grad():
        while prev_end < end:
            start = min(begin, end - T)
            window = ids[start:start + T + 1]  # (T + 1,)
            new = start + T - prev_end  # the targets this window is the first to reach
            losses = F.cross_entropy(model(window[None, :-1])[0].double(), window[1:], reduction="none")  # (T,)
            total += float(losses[-new:].sum())
            count += new
            prev_end, begin = start + T, begin + stride
    return total / count, count


def test_strided_evaluation_equals_a_hand_loop_and_stride_T_is_the_non_overlapping_evaluation(tmp_path):
    """``stride``: overlapping windows, each scoring only its new targets; the loss is the hand loop's for strides 1
    to T over a split that is not a whole number of windows, and stride T (or None) gives today's figures exactly."""
    from attnkit.data.pipeline.lm_dataset import eval_batches, prepare_lm_data
    from attnkit.training.lm_task import mean_token_loss, next_token_loss

    rng = random.Random(5)
    words = "the cat sat on a mat and dog ran far".split()
    text = tmp_path / "text.txt"
    text.write_text("\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(120)), encoding="utf-8")
    run = api.train_lm(data=str(text), out=tmp_path / "run", steps=30, **TINY_LM).out
    loaded = load(run, expect_kind="lm")
    valid = prepare_lm_data(str(text), loaded.tokenizer, block_size=16).valid  # (N,)
    n_targets = (valid.numel() - 1) // 16 * 16
    assert (valid.numel() - 1) % 16 and n_targets >= 10 * 16  # a tail the windows leave out, and many windows

    def evaluate(stride, batch_size):
        result = api.evaluate_lm(ckpt=run, data=str(text), stride=stride, batch_size=batch_size,
                                 json=tmp_path / f"eval_{stride}.json")
        assert json.loads(result.path.read_text()) == result.metrics  # the record, with its stride
        return result.metrics

    today = evaluate(None, 16)
    with torch.no_grad():  # the computation eval lm made before strides: non-overlapping windows, next_token_loss
        old, old_count = mean_token_loss(loaded.model, eval_batches(valid, 16, 16), next_token_loss)
    assert (today["loss"], today["tokens"], today["stride"], today["windows"]) == (old, old_count, 16, n_targets // 16)
    assert today["documents"] is None  # a train lm run's split is one stream, read in no documents mode
    same = evaluate(16, 16)
    assert (same["loss"], same["ppl"], same["tokens"], same["stride"]) == (old, today["ppl"], old_count, 16)
    for stride in (1, 5, 7, 16):
        got = evaluate(stride, 3)
        loss, count = _strided_loss_by_hand(loaded.model, valid, 16, stride)
        assert got["tokens"] == count == n_targets and got["stride"] == stride  # every target scored once
        assert got["windows"] == 1 + -(-(n_targets - 16) // stride)
        assert got["loss"] == pytest.approx(loss, rel=1e-6, abs=0)


def test_a_stride_outside_1_to_the_window_length_is_refused(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 60, encoding="utf-8")
    run = api.train_lm(data=str(text), out=tmp_path / "run", steps=2, **TINY_LM).out
    for stride in (0, -3):
        with pytest.raises(ValueError, match=rf"^--stride must be an int from 1 to the window length, or None, got "
                                             rf"{stride}$"):
            api.evaluate_lm(ckpt=run, data=str(text), stride=stride, json=tmp_path / "eval.json")
    for stride in (True, 2.5, "4"):
        with pytest.raises(ValueError, match=rf"^EvalLMOptions.stride must be an int or None, got "
                                             rf"{re.escape(repr(stride))} \({type(stride).__name__}\)$"):
            api.evaluate_lm(ckpt=run, data=str(text), stride=stride, json=tmp_path / "eval.json")
    with pytest.raises(ValueError, match=r"^--stride must be an int from 1 to the window length 16 \(the block size "
                                         r"the model was trained with\), got 17$"):
        api.evaluate_lm(ckpt=run, data=str(text), stride=17, json=tmp_path / "eval.json")
    assert not (tmp_path / "eval.json").exists()


def test_a_finetuned_run_is_scored_on_its_own_documents_each_ending_with_eos(tmp_path):
    """Was: the fortune file's valid text scored as one plain stream, its ``%`` lines included and no ``<eos>``
    (176 tokens here instead of the 128 of the documents the run held out), a loss the run never measured."""
    rng = random.Random(3)
    words = "the cat sat on a mat and dog ran far".split()
    entries = [" ".join(rng.choice(words) for _ in range(6)) for _ in range(200)]
    text = tmp_path / "fortunes.txt"
    text.write_text("\n%\n".join(entries) + "\n%\n", encoding="utf-8")
    base = api.train_lm(api.TrainLMOptions(data=str(text), out=tmp_path / "base", steps=2, tokenizer="bpe",
                                           vocab_size=300, **TINY_LM),
                        log=lambda line: None).out
    tuned = tmp_path / "tuned"
    api.finetune(source=str(base), data=str(text), out=tuned, steps=2, block_size=16, batch_size=8,
                 eval_batches=2, progress=False, log=lambda line: None)

    result = api.evaluate_lm(ckpt=tuned, data=str(text), json=tmp_path / "eval.json").metrics

    loaded = load(tuned, expect_kind="lm")
    _, valid, info = prepare_finetune_data(str(text), loaded.tokenizer, "fortune")
    assert info["documents"] == "fortune" and int((valid == loaded.tokenizer.eos_id).sum()) > 0
    loss, count = _mean_loss_by_hand(loaded.model, valid, 16)
    assert result["tokens"] == count
    assert result["loss"] == pytest.approx(loss, rel=1e-5)
    assert result["ppl"] == pytest.approx(torch.tensor(loss, dtype=torch.float64).exp().item(), rel=1e-5)


def test_a_best_checkpoint_replaced_during_the_evaluation_gets_no_record_of_the_old_one(tmp_path, monkeypatch):
    """Was: ``eval lm --ckpt RUN`` of a run that is training wrote ``eval_lm.json`` into whatever ``best/`` was
    there at the end: a newer checkpoint, with the older one's step and loss (or a raw FileNotFoundError when the
    swap came during the write)."""
    import shutil

    import attnkit.training.lm_task as lm_task

    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 60, encoding="utf-8")
    run = api.train_lm(data=str(text), out=tmp_path / "run", steps=10, **TINY_LM).out
    best = run / "checkpoints" / "best"
    step = load(run).state["step"]
    real = lm_task.mean_token_loss

    def swap_then_score(*args, **kwargs):  # the trainer publishes a new best/ while this evaluation runs
        shutil.copytree(best, tmp_path / "new")
        shutil.rmtree(best)
        (tmp_path / "new").rename(best)
        return real(*args, **kwargs)

    monkeypatch.setattr(lm_task, "mean_token_loss", swap_then_score)
    with pytest.raises(ValueError, match=rf"best was replaced or removed by its training run while it was evaluated, "
                                         rf"so the record \(step {step}: valid loss \d+\.\d{{4}}, perplexity "
                                         rf"[\d.]+\) is not written into it; pass --json FILE to keep one"):
        api.evaluate_lm(ckpt=str(run), data=str(text))
    assert not (best / "eval_lm.json").exists()
    kept = tmp_path / "eval.json"  # a record elsewhere is written
    assert api.evaluate_lm(ckpt=str(run), data=str(text), json=kept).path == kept and kept.exists()
    monkeypatch.setattr(lm_task, "mean_token_loss", real)
    assert api.evaluate_lm(ckpt=str(run), data=str(text)).path == best / "eval_lm.json"  # in place: written


def test_a_strided_batch_with_a_target_outside_the_vocabulary_is_refused_by_name():
    """A strided batch (some targets NOT_SCORED) checks its scored targets against [0, V) as next_token_loss does:
    id V and a negative id other than NOT_SCORED raise ValueError naming the id (mutation check: ``> V`` let id V
    through to cross_entropy's IndexError); a valid one is the mean over the scored targets only."""
    from attnkit.api.evaluation import _scored_token_loss
    from attnkit.data.pipeline.lm_dataset import NOT_SCORED

    V = 5
    logits = torch.randn(1, 3, V, generator=torch.Generator().manual_seed(0))
    model = lambda x: logits  # noqa: E731  (B, T) -> (B, T, V)
    x = torch.zeros(1, 3, dtype=torch.long)
    for bad in (V, -3):
        with pytest.raises(ValueError, match=rf"^target token id {bad} is outside the model's vocabulary \[0, {V}\)$"):
            _scored_token_loss(model, (x, torch.tensor([[NOT_SCORED, 1, bad]])))
    loss, count = _scored_token_loss(model, (x, torch.tensor([[NOT_SCORED, 1, V - 1]])))
    assert count == 2 and torch.allclose(loss, F.cross_entropy(logits[0, 1:], torch.tensor([1, V - 1])))


def _fortunes(path, n: int = 200, seed: int = 3):
    """A fortune file of ``n`` short entries (``%`` lines between them), written at ``path``."""
    rng = random.Random(seed)
    words = "the cat sat on a mat and dog ran far".split()
    path.write_text("\n%\n".join(" ".join(rng.choice(words) for _ in range(6)) for _ in range(n)) + "\n%\n",
                    encoding="utf-8")
    return path


def test_a_pretrained_model_is_scored_as_transformers_scores_the_same_windows(tmp_path, monkeypatch):
    """``model=``: a Hugging Face folder is scored on the valid split as ``finetune`` encodes it (documents, each
    ending with ``<eos>``), in windows of ``block_size``; the loss is transformers' own loss of those windows
    (its ``labels``, shifted inside the model); with no ``json`` nothing is written (not in the model's folder nor
    in the working folder). Default window: fine-tuning's 256, cut to the model's context (64 here)."""
    import transformers

    from attnkit.interop.load import load_model

    from helpers import tiny_hf_folder

    folder = tiny_hf_folder(tmp_path / "hf", std=0.3)
    text = _fortunes(tmp_path / "fortunes.txt")
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = api.evaluate_lm(model=str(folder), data=str(text), block_size=16)
    assert result.path is None and sorted(p.name for p in tmp_path.rglob("*")) == before
    m = result.metrics
    assert (m["model"], m["ckpt"], m["checkpoint"], m["step"], m["block_size"]) == (str(folder), None, None, None, 16)

    loaded = load_model(str(folder))
    _, valid, info = prepare_finetune_data(str(text), loaded.tokenizer, "auto", add_bos=loaded.add_bos)
    assert info["documents"] == "fortune"
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    T, total, count = 16, 0.0, 0
    with torch.no_grad():
        for start in range(0, (valid.numel() - 1) // T * T, T):
            window = valid[None, start:start + T + 1]  # (1, T + 1): T inputs, T targets
            total += float(hf(input_ids=window, labels=window).loss) * T
            count += T
    assert m["tokens"] == count and m["windows"] == count // T
    assert m["loss"] == pytest.approx(total / count, rel=1e-5)

    assert api.evaluate_lm(model=str(folder), data=str(text)).metrics["block_size"] == 64  # min(256, context)
    kept = tmp_path / "base.json"
    assert api.evaluate_lm(model=folder, data=str(text), block_size=16, json=kept).path == kept
    assert json.loads(kept.read_text())["loss"] == m["loss"]


def test_a_base_model_and_its_finetune_are_scored_on_the_same_tokens(tmp_path):
    """What ``eval lm --model`` is for: the pretrained model and a ``finetune`` run of it (same data, same window)
    are measured on the very same valid tokens, so their losses compare."""
    from helpers import tiny_hf_folder

    folder = tiny_hf_folder(tmp_path / "hf", std=0.3)
    text = _fortunes(tmp_path / "fortunes.txt")
    tuned = tmp_path / "tuned"
    api.finetune(source=str(folder), data=str(text), out=tuned, steps=3, block_size=16, batch_size=8, lr=1e-2,
                 eval_batches=2, progress=False, log=lambda line: None)
    base = api.evaluate_lm(model=str(folder), data=str(text), block_size=16).metrics
    after = api.evaluate_lm(ckpt=tuned, data=str(text), json=tmp_path / "tuned.json").metrics
    assert (base["tokens"], base["windows"], base["block_size"]) == (after["tokens"], after["windows"], 16)
    assert (base["ckpt"], base["model"], after["ckpt"], after["model"]) == (None, str(folder), str(tuned), None)
    assert after["loss"] < base["loss"]


def test_a_window_length_is_given_checked_and_named_in_the_errors(tmp_path):
    """``block_size`` replaces the trained window of a checkpoint (the loss is then the hand loop's at that length)
    and must be at most the model's context; the errors say where the window length came from."""
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 60, encoding="utf-8")
    run = api.train_lm(data=str(text), out=tmp_path / "run", steps=4, **TINY_LM).out
    result = api.evaluate_lm(ckpt=run, data=str(text), block_size=8, json=tmp_path / "eval.json").metrics
    loaded = load(run, expect_kind="lm")
    from attnkit.data.pipeline.lm_store import open_lm_stores

    valid = open_lm_stores(str(text), loaded.tokenizer, splits=("valid",)).stores["valid"]
    loss, count = _mean_loss_by_hand(loaded.model, torch.as_tensor(valid[:]).long(), 8)
    assert (result["block_size"], result["tokens"]) == (8, count)
    assert result["loss"] == pytest.approx(loss, rel=1e-5)
    with pytest.raises(ValueError, match=r"--block-size must be <= the model's context length = 16, got 17"):
        api.evaluate_lm(ckpt=run, data=str(text), block_size=17, json=tmp_path / "eval.json")
    with pytest.raises(ValueError, match=r"--stride must be an int from 1 to the window length 8 \(--block-size\), "
                                         r"got 9"):
        api.evaluate_lm(ckpt=run, data=str(text), block_size=8, stride=9, json=tmp_path / "eval.json")
    with pytest.raises(ValueError, match=r"--block-size must be an int from 1 to the model's context length, or "
                                         r"None, got 0"):
        api.evaluate_lm(ckpt=run, data=str(text), block_size=0)


def test_an_attnkit_run_as_model_is_sent_to_ckpt_and_a_bad_json_is_refused_before_loading(tmp_path, monkeypatch):
    """``model=`` an attnkit run would be scored on finetune's split, not the one it held out: refused with the
    flag to use. A ``json`` that is the data is refused before a (possibly large) pretrained model is read."""
    import attnkit.interop.load as interop_load

    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 60, encoding="utf-8")
    run = api.train_lm(data=str(text), out=tmp_path / "run", steps=2, **TINY_LM).out
    with pytest.raises(ValueError, match=r"--model '.*run' is an attnkit checkpoint; give it as --ckpt"):
        api.evaluate_lm(model=str(run), data=str(text))
    monkeypatch.setattr(interop_load, "load_named", lambda *a, **k: pytest.fail("the model was read"))
    with pytest.raises(ValueError, match=r"--json '.*corpus.txt' is \(or is inside\) the data being scored"):
        api.evaluate_lm(model="smollm2-135m-instruct", data=str(text), json=text)


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_the_evaluation_shows_a_bar_of_its_batches_on_a_terminal_only(tmp_path, monkeypatch):
    """A pretrained model's evaluation takes minutes on a CPU: a tqdm bar of the batches ("evaluating", out of
    ceil(windows / batch size)) on a terminal's stderr by default, erased when done (no line left before the
    summary); none in a log file, none with ``progress=False``."""
    from helpers import tiny_hf_folder

    folder = tiny_hf_folder(tmp_path / "hf", std=0.3)
    text = _fortunes(tmp_path / "fortunes.txt")
    for options, err in [({}, _Terminal()), ({}, io.StringIO()), ({"progress": False}, _Terminal())]:
        monkeypatch.setattr(sys, "stderr", err)
        m = api.evaluate_lm(model=str(folder), data=str(text), block_size=16, batch_size=4, **options).metrics
        batches = -(-m["windows"] // 4)
        shown = not options and isinstance(err, _Terminal)
        assert (f"evaluating:   0%|          | 0/{batches}" in err.getvalue()) == shown
        assert (err.getvalue() == "") != shown and "\n" not in err.getvalue()


def test_bits_per_byte_divide_the_summed_loss_by_the_bytes_of_the_scored_text(tmp_path):
    """``bytes``: the UTF-8 bytes of the text of the scored targets (ids 1 … nT of the valid split; ``<eos>`` has no
    text), whatever the stride and the batch size; ``bits_per_byte`` = loss x tokens / (ln 2 x bytes), so a
    character model on ASCII text has ``loss / ln 2`` and models of different tokenizers compare."""
    import math

    from attnkit.interop.load import load_model

    from helpers import tiny_hf_folder

    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 60, encoding="utf-8")
    run = api.train_lm(data=str(text), out=tmp_path / "run", steps=2, **TINY_LM).out
    m = api.evaluate_lm(ckpt=run, data=str(text), json=tmp_path / "char.json").metrics
    assert m["bytes"] == m["tokens"] and m["bits_per_byte"] == pytest.approx(m["loss"] / math.log(2), rel=1e-12)

    folder = tiny_hf_folder(tmp_path / "hf", std=0.3)
    fortunes = tmp_path / "fortunes.txt"
    fortunes.write_text("\n%\n".join(f"Tür {i}: the cat sat on the mat — ça va? 🐈" for i in range(150)) + "\n%\n",
                        encoding="utf-8")
    loaded = load_model(str(folder))
    valid = prepare_finetune_data(str(fortunes), loaded.tokenizer, "auto", add_bos=loaded.add_bos)[1]
    T = 16
    targets = valid[1:(valid.numel() - 1) // T * T + 1].tolist()
    want = len(loaded.tokenizer.decode(targets, skip_special_tokens=True).encode("utf-8"))
    assert want > len(targets)  # multi-byte characters, and <eos> tokens with no text
    for stride, batch_size in [(None, 16), (None, 3), (5, 2)]:
        m = api.evaluate_lm(model=str(folder), data=str(fortunes), block_size=T, stride=stride,
                            batch_size=batch_size).metrics
        assert m["bytes"] == want
        assert m["bits_per_byte"] == pytest.approx(m["loss"] * m["tokens"] / math.log(2) / want, rel=1e-12)

def test_the_first_scored_target_counts_the_bytes_it_adds_after_id_0(tmp_path):
    """A SentencePiece-style decoder drops the space of a ``▁word`` at the start of a text: ``bytes`` counts the
    first target as it continues id 0 (the text of ids 0 … nT less that of id 0), not as a text of its own; after
    a ``<bos>`` (no text) the first target does start the text."""
    import json

    from attnkit.interop.load import load_model

    from helpers import metaspace_tokenizer, tiny_hf_folder

    fortunes = tmp_path / "fortunes.txt"
    fortunes.write_text("\n%\n".join(["once upon a time there was a cat"] * 150) + "\n%\n", encoding="utf-8")
    for bos in (False, True):
        folder = tiny_hf_folder(tmp_path / f"sp_{bos}", tokenizer=metaspace_tokenizer(), std=0.3)
        if bos:
            (folder / "tokenizer_config.json").write_text(json.dumps(
                {"eos_token": "<|im_end|>", "bos_token": "<|im_start|>", "add_bos_token": True}))
        loaded = load_model(str(folder))
        tok, T = loaded.tokenizer, 16
        valid = prepare_finetune_data(str(fortunes), tok, "auto", add_bos=loaded.add_bos)[1].tolist()
        ids = valid[:(len(valid) - 1) // T * T + 1]
        assert (ids[0] == tok.bos_id) == bos
        whole, first, alone = (len(tok.decode(i, skip_special_tokens=True).encode("utf-8"))
                               for i in (ids, ids[:1], ids[1:]))
        assert alone == whole - first - (not bos)  # (without <bos>: the space the first target has after id 0)
        assert api.evaluate_lm(model=str(folder), data=str(fortunes), block_size=T).metrics["bytes"] == whole - first


def test_a_pretrained_models_window_is_256_by_default_up_to_its_context_and_one_id_short_of_the_split(tmp_path):
    """``model=`` without ``block_size`` reads windows of fine-tuning's 256 also when its context is longer (300
    here); ``block_size`` may be the whole context. A valid split of N ids holds one window of N - 1 (its N - 1
    targets); a window of N is refused with the advice of ``eval lm`` (naming ``--block-size``)."""
    from attnkit.interop.load import load_model

    from helpers import tiny_hf_folder

    folder = tiny_hf_folder(tmp_path / "hf", std=0.3, block_size=300)
    text = _fortunes(tmp_path / "fortunes.txt", n=600)
    assert api.evaluate_lm(model=str(folder), data=str(text)).metrics["block_size"] == 256
    assert api.evaluate_lm(model=str(folder), data=str(text), block_size=300).metrics["block_size"] == 300

    few = _fortunes(tmp_path / "few.txt", n=40)
    loaded = load_model(str(folder))
    N = prepare_finetune_data(str(few), loaded.tokenizer, "auto", add_bos=loaded.add_bos)[1].numel()
    m = api.evaluate_lm(model=str(folder), data=str(few), block_size=N - 1).metrics
    assert (m["windows"], m["tokens"]) == (1, N - 1)
    with pytest.raises(ValueError, match=rf"has {N} tokens, but this model reads windows of {N} \(--block-size\) "
                                         rf"and needs at least {N + 1}: give more text$"):
        api.evaluate_lm(model=str(folder), data=str(few), block_size=N)


def test_a_json_named_state_json_is_refused_before_it_makes_its_folder_a_checkpoint(tmp_path):
    """Was: ``json=<a Hugging Face or run folder>/state.json`` wrote the record there, and the folder then read as a
    broken attnkit checkpoint ("... is not an attnkit checkpoint" for ``model=`` and ``ckpt=``) until it was
    removed."""
    from helpers import tiny_hf_folder

    folder = tiny_hf_folder(tmp_path / "hf", std=0.3)
    text = _fortunes(tmp_path / "fortunes.txt")
    with pytest.raises(ValueError, match=r"^--json '.*state.json': a file named state.json marks its folder as an "
                                         r"attnkit checkpoint; give another file name$"):
        api.evaluate_lm(model=str(folder), data=str(text), block_size=16, json=folder / "state.json")
    assert not (folder / "state.json").exists()
    assert api.evaluate_lm(model=str(folder), data=str(text), block_size=16).metrics["block_size"] == 16


def test_a_models_documents_are_read_as_the_finetune_run_of_that_mode_read_them(tmp_path):
    """``documents`` (``model=`` only): the base model is scored on the very tokens a ``finetune --documents`` run
    of it holds out (``auto``, also given, would read these paragraphs as one stream: other tokens); the record names
    the mode. A checkpoint is scored as it was trained: ``documents`` with ``ckpt`` is refused, as is an unknown
    mode."""
    from helpers import tiny_hf_folder

    folder = tiny_hf_folder(tmp_path / "hf", std=0.3)
    text = tmp_path / "notes.txt"
    text.write_text("".join(f"note {i}: the cat sat\non the mat.\n\n" for i in range(300)), encoding="utf-8")
    tuned = tmp_path / "tuned"
    api.finetune(source=str(folder), data=str(text), documents="blank-line", out=tuned, steps=1, block_size=16,
                 batch_size=8, eval_batches=2, progress=False, log=lambda line: None)
    after = api.evaluate_lm(ckpt=tuned, data=str(text), json=tmp_path / "tuned.json").metrics
    base = api.evaluate_lm(model=str(folder), data=str(text), block_size=16, documents="blank-line").metrics
    stream = api.evaluate_lm(model=str(folder), data=str(text), block_size=16, documents="auto").metrics
    assert (base["documents"], after["documents"], stream["documents"]) == ("blank-line", "blank-line", "none")
    assert base["tokens"] == after["tokens"] != stream["tokens"]
    with pytest.raises(ValueError, match=r"--documents is for --model \(a checkpoint is scored as it was trained\), "
                                         r"got --documents 'none' with --ckpt"):
        api.evaluate_lm(ckpt=tuned, data=str(text), documents="none")
    with pytest.raises(ValueError, match=r"--documents must be one of \['auto', 'fortune', 'blank-line', 'none'\], "
                                         r"got 'pages'"):
        api.evaluate_lm(model=str(folder), data=str(text), documents="pages")
