"""``attnkit finetune`` end to end on a tiny random "pretrained" model (never the 135M one: tests stay fast).

The fixture builds a 2-layer Llama-style GPT with a small byte-level BPE tokenizer, saves it both as an attnkit
checkpoint folder (with a chat template) and as a Hugging Face folder, and writes a small corpus in fortune-file
format. Each test runs ``attnkit.cli.main.main([...])`` in-process.

Axis legend: B batch, T positions, V vocabulary.
"""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

import pytest
import torch

from attnkit.data.pipeline.documents import encode_documents, split_documents
from attnkit.cli.main import main
from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
from attnkit.models.configs import GPTConfig
from attnkit.models.gpt import GPT
from attnkit.modules.lora import LoRALinear
from attnkit.checkpoints.checkpoint import save_checkpoint
from attnkit.checkpoints import load
from helpers import CHATML, assert_close

CHAT_TEMPLATE = CHATML
FAST = ["--batch-size", "4", "--block-size", "32", "--eval-every", "4", "--eval-batches", "2", "--ckpt-every", "4",
        "--log-every", "2", "--no-progress"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """~300 short "fortunes" separated by '%' lines, from a seeded generator."""
    rng = random.Random(0)
    subjects = ["A cat", "The moon", "My code", "Every bug", "A wise man", "The printer"]
    verbs = ["runs", "sleeps", "compiles", "laughs", "fails", "shines"]
    tails = ["at night.", "on Mondays.", "without tests.", "in silence.", "for no reason."]
    entries = []
    for _ in range(300):
        lines = [f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(tails)}" for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.3:
            lines.append("\t\t-- " + rng.choice(["Anonymous", "Zippy", "A. Fortune"]))
        entries.append("\n".join(lines))
    path = tmp_path_factory.mktemp("corpus") / "fortunes.txt"
    path.write_text("".join(f"{e}\n%\n" for e in entries), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, corpus) -> dict[str, Path]:
    """A tiny random Llama-style GPT + BPE tokenizer saved as an attnkit checkpoint and as an HF folder."""
    root = tmp_path_factory.mktemp("pretrained")
    tok = BPETokenizer.train(corpus.read_text(encoding="utf-8"), vocab_size=320,
                             special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], eos="<|im_end|>")
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=tok.vocab_size, block_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=32,
                    ffn_hidden=64, activation="swiglu", norm="rmsnorm", bias=False, position="rope",
                    tie_embeddings=True)
    model = GPT(cfg)
    ckpt = save_checkpoint(root / "attnkit_ckpt", model, state={"model_config": cfg.to_dict()},
                           extra={"kind": "lm", "tokenizer": tok.to_dict(), "chat_template": CHAT_TEMPLATE})
    from attnkit.interop.hf import save_hf

    hf = save_hf(model, root / "hf")
    tok.backend.save(str(hf / "tokenizer.json"))
    (hf / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "chat_template": CHAT_TEMPLATE}))
    return {"ckpt": ckpt, "hf": hf, "root": root}


def _finetune(src: Path, corpus: Path, out: Path, *extra: str) -> int:
    return main(["finetune", "--from", str(src), "--data", str(corpus), "--out", str(out), *FAST, *extra])


def _valid_losses(out: Path) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["valid_loss"] for r in rows if "valid_loss" in r]


def _train_losses(out: Path) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r]


# -------------------------------------------------------------------------------------------------
# data
# -------------------------------------------------------------------------------------------------

def test_documents_split_and_eos_between_entries(pretrained):
    tok = load(pretrained["ckpt"]).tokenizer
    text = "First one.\n%\nSecond\n  -- someone\n%\n"
    assert split_documents(text, "auto") == ["First one.", "Second\n  -- someone"]
    assert split_documents("a b\n\n\nc\nd\n", "blank-line") == ["a b", "c\nd"]
    assert split_documents("a\n%\nb\n", "none") is None
    ids = encode_documents(tok, text, "auto").tolist()
    eos = tok.eos_id
    assert ids.count(eos) == 2 and ids[-1] == eos
    first = ids[: ids.index(eos)]
    assert tok.decode(first) == "First one."
    assert "%" not in tok.decode(ids, skip_special_tokens=True)
    with pytest.raises(ValueError, match="documents mode must be one of"):
        split_documents(text, "paragraphs")


# -------------------------------------------------------------------------------------------------
# full fine-tuning and LoRA
# -------------------------------------------------------------------------------------------------

def test_full_finetune_lowers_loss_and_sample_works(pretrained, corpus, tmp_path, capsys):
    out = tmp_path / "full"
    assert _finetune(pretrained["ckpt"], corpus, out, "--steps", "12", "--lr", "3e-3") == 0
    losses = _valid_losses(out)
    assert len(losses) >= 3 and losses[-1] < losses[0] - 0.1
    loaded = load(out)
    model, tok, state = loaded.model, loaded.tokenizer, loaded.state
    extra = state["extra"]
    assert extra["kind"] == "lm" and extra["chat_template"] == CHAT_TEMPLATE and extra["documents"] == "fortune"
    assert "lora" not in extra and state["train_config"]["lr"] == 3e-3
    # the fine-tuned weights differ from the pretrained ones
    base = load(pretrained["ckpt"]).model
    assert not torch.equal(model.blocks[0].attn.qkv_proj.weight, base.blocks[0].attn.qkv_proj.weight)
    capsys.readouterr()
    assert main(["sample", "--ckpt", str(out), "--prompt", "A cat", "--max-new-tokens", "8", "--seed", "1",
                 "--no-stream"]) == 0
    assert capsys.readouterr().out.startswith("A cat")
    # the stored chat template renders prompts for the fine-tuned model (what `sample --chat` uses)
    from attnkit.interop.pretrained import apply_chat_template

    prompt = apply_chat_template(extra["chat_template"], [{"role": "user", "content": "hi"}])
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.encode(prompt)[0] == tok.token_to_id("<|im_start|>")


def test_lora_finetune_trains_only_adapters_and_exports_a_plain_model(pretrained, corpus, tmp_path, capsys):
    out = tmp_path / "lora"
    assert _finetune(pretrained["ckpt"], corpus, out, "--lora", "--lora-rank", "4", "--lora-alpha", "16",
                     "--lora-targets", "qkv_proj", "out_proj", "w_gate", "w_out", "--steps", "12", "--lr", "2e-2") == 0
    err = capsys.readouterr().err
    assert "trainable" in err and "LoRA r=4" in err
    losses = _valid_losses(out)
    assert losses[-1] < losses[0] - 0.01  # seeded: the same numbers every run
    # step checkpoints keep the adapters (for --resume) ...
    step = sorted((out / "checkpoints").glob("step_*"))[-1]
    from safetensors import safe_open

    with safe_open(str(step / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "blocks.0.attn.qkv_proj.lora_A" in keys and "blocks.1.mlp.w_out.lora_B" in keys
    # ... best/ holds them merged: a plain GPT checkpoint that load / sample read
    loaded = load(out)
    model, tok, state = loaded.model, loaded.tokenizer, loaded.state
    assert state["extra"]["lora"] == {"rank": 4, "alpha": 16.0, "dropout": 0.0,
                                      "targets": ["qkv_proj", "out_proj", "w_gate", "w_out"], "merged": True}
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    base = load(pretrained["ckpt"]).model
    # adapted layers changed, everything else (embeddings, norms, un-targeted Linears) is bit-identical
    assert not torch.equal(model.blocks[0].attn.qkv_proj.weight, base.blocks[0].attn.qkv_proj.weight)
    for name in ("wte.weight", "blocks.0.ln_1.weight", "blocks.1.mlp.w_in.weight", "ln_f.weight"):
        assert torch.equal(model.state_dict()[name], base.state_dict()[name]), name
    # the merged model computes what the adapter model computed at the best step
    x = torch.randint(0, tok.vocab_size, (2, 16))
    lora_model = load(pretrained["ckpt"]).model
    from attnkit.training.lora_run import add_lora
    from attnkit.checkpoints.checkpoint import load_checkpoint

    add_lora(lora_model, state["extra"]["lora"])
    best_step = state["best"]["step"]
    assert best_step == 12  # the loss went down to the end, so best is the last step
    load_checkpoint(out / "checkpoints" / f"step_{best_step:08d}", lora_model)
    lora_model.eval()
    with torch.no_grad():
        assert_close(model(x), lora_model(x), "float32")
    # a step checkpoint (adapters not merged) loads too: load merges them on the way in
    step = load(out / "checkpoints" / f"step_{best_step:08d}")
    step_model, step_state = step.model, step.state
    assert step_state["extra"]["lora"]["merged"] is False
    assert not any(isinstance(m, LoRALinear) for m in step_model.modules())
    with torch.no_grad():
        assert_close(step_model(x), lora_model(x), "float32")
    assert main(["sample", "--ckpt", str(out), "--prompt", "The moon", "--max-new-tokens", "6", "--seed", "0",
                 "--no-stream"]) == 0


def test_lora_resume_is_exact(pretrained, corpus, tmp_path):
    args = ("--lora", "--lora-rank", "2", "--lr", "1e-2", "--warmup-steps", "1", "--schedule", "constant")
    straight = tmp_path / "straight"
    assert _finetune(pretrained["ckpt"], corpus, straight, *args, "--steps", "8") == 0
    resumed = tmp_path / "resumed"
    assert _finetune(pretrained["ckpt"], corpus, resumed, *args, "--steps", "4") == 0
    assert (resumed / "checkpoints" / "best" / "state.json").is_file()
    assert main(["finetune", "--resume", "--out", str(resumed), "--steps", "8", "--no-progress"]) == 0
    assert _train_losses(resumed) == _train_losses(straight)  # bit for bit
    a, sa = load(straight).model, load(straight).state
    b, sb = load(resumed).model, load(resumed).state
    assert sa["step"] == sb["step"] == 8
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k


def test_resume_of_a_checkpoint_without_its_lora_dropout_is_one_line(pretrained, corpus, tmp_path, capsys):
    # was: a KeyError traceback ('dropout'), the checkpoint loader itself needing only rank, alpha and targets
    out = tmp_path / "run"
    assert _finetune(pretrained["ckpt"], corpus, out, "--lora", "--lora-rank", "2", "--steps", "4") == 0
    state_file = out / "checkpoints" / "step_00000004" / "state.json"
    state = json.loads(state_file.read_text())
    del state["extra"]["lora"]["dropout"]
    state_file.write_text(json.dumps(state))
    capsys.readouterr()
    assert main(["finetune", "--resume", "--out", str(out), "--steps", "6", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "extra.lora must hold rank, alpha, dropout, targets, got {'rank': 2" in err and "Traceback" not in err


def test_full_resume_is_exact_and_refuses_changes(pretrained, corpus, tmp_path, capsys):
    straight, resumed = tmp_path / "s", tmp_path / "r"
    assert _finetune(pretrained["ckpt"], corpus, straight, "--steps", "8", "--warmup-steps", "1", "--schedule", "constant") == 0
    assert _finetune(pretrained["ckpt"], corpus, resumed, "--steps", "4", "--warmup-steps", "1", "--schedule", "constant") == 0
    assert main(["finetune", "--resume", "--out", str(resumed), "--steps", "8", "--no-progress"]) == 0
    assert _train_losses(resumed) == _train_losses(straight)
    # a full run cannot be resumed as LoRA
    assert main(["finetune", "--resume", "--out", str(resumed), "--steps", "9", "--lora"]) == 2
    # a checkpoint that does not name the model it started from: one line, not a KeyError
    from attnkit.checkpoints.checkpoint import latest_checkpoint

    state_file = latest_checkpoint(resumed / "checkpoints") / "state.json"
    state = json.loads(state_file.read_text())
    del state["extra"]["from"]
    state_file.write_text(json.dumps(state))
    capsys.readouterr()
    assert main(["finetune", "--resume", "--out", str(resumed), "--steps", "9", "--no-progress"]) == 2
    assert "must name its 'from' in extra (a string), got None" in capsys.readouterr().err


def test_from_hugging_face_folder(pretrained, corpus, tmp_path, capsys):
    out = tmp_path / "hf_run"
    assert _finetune(pretrained["hf"], corpus, out, "--lora", "--steps", "4", "--lr", "1e-2") == 0
    assert "Hugging Face folder" in capsys.readouterr().err
    loaded = load(out)
    tok, state = loaded.tokenizer, loaded.state
    assert state["extra"]["chat_template"] == CHAT_TEMPLATE
    assert tok.eos_id == tok.token_to_id("<|im_end|>")
    # the attnkit checkpoint and the HF folder hold the same model: same starting validation loss
    out2 = tmp_path / "ck_run"
    assert _finetune(pretrained["ckpt"], corpus, out2, "--lora", "--steps", "4", "--lr", "1e-2") == 0
    assert _valid_losses(out)[0] == pytest.approx(_valid_losses(out2)[0], abs=1e-5)


def test_from_gguf_keeps_the_bos_and_stop_conventions(corpus, tmp_path, monkeypatch):
    """Was: `finetune --from file.gguf` dropped the file's add_bos_token=True and its end-of-turn stop ids, and
    the run did not record them, so `sample --ckpt RUN` prompted without <bos> and ran past <|endoftext|>."""
    gguf = pytest.importorskip("gguf")
    from benchmarks.fuzz_loaders import _write_gguf

    tok = BPETokenizer.train(corpus.read_text(encoding="utf-8"), vocab_size=320,
                             special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], bos="<|endoftext|>",
                             eos="<|im_end|>")
    eos_id = gguf.GGUFWriter.add_eos_token_id
    monkeypatch.setattr(gguf.GGUFWriter, "add_eos_token_id",
                        lambda self, i: (eos_id(self, i), self.add_add_bos_token(True))[0])
    src = tmp_path / "m.gguf"
    _write_gguf(src, tok)
    bos, stops = tok.token_to_id("<|endoftext|>"), sorted({tok.token_to_id("<|endoftext|>"), tok.eos_id})
    out = tmp_path / "run"
    assert _finetune(src, corpus, out, "--steps", "2") == 0
    for run in (load(out), load(out, prefer="latest")):
        assert run.extra["prompting"] == {"add_bos_token": True, "stop_token_ids": stops}
        assert run.add_bos is True and run.stop_ids == stops and run.encode_prompt("A cat")[0] == bos
    # a resumed run keeps them (they come back from its checkpoint)
    assert main(["finetune", "--resume", "--out", str(out), "--steps", "4", "--no-progress"]) == 0
    assert load(out, prefer="latest").extra["prompting"] == {"add_bos_token": True, "stop_token_ids": stops}


def test_no_progress_hides_the_gguf_dequantizing_bar(corpus, tmp_path, capsys):
    """Was: `finetune --from file.gguf --no-progress` (and `finetune(..., progress=False)`) still drew the
    "dequantizing GGUF" tqdm bar on stderr; --no-progress promises no progress bar."""
    pytest.importorskip("gguf")
    from benchmarks.fuzz_loaders import _write_gguf

    tok = BPETokenizer.train(corpus.read_text(encoding="utf-8"), vocab_size=320,
                             special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], eos="<|im_end|>")
    src = tmp_path / "m.gguf"
    _write_gguf(src, tok)
    capsys.readouterr()
    assert _finetune(src, corpus, tmp_path / "run", "--steps", "1") == 0  # FAST holds --no-progress
    assert "dequantizing GGUF" not in capsys.readouterr().err


def test_sample_chat_with_a_broken_template_is_one_line(pretrained, corpus, tmp_path, capsys):
    """Was: a template that is not valid Jinja was saved into the run and `sample --chat` ended in a
    TemplateSyntaxError traceback."""
    from attnkit.checkpoints.checkpoint import save_checkpoint as save

    src = load(pretrained["ckpt"])
    bad = save(tmp_path / "bad", src.model, state={"model_config": src.model.config.to_dict()},
               extra={"kind": "lm", "tokenizer": src.tokenizer.to_dict(),
                      "chat_template": "{% for m in messages %}{{ m['content'] }"})
    out = tmp_path / "run"
    assert _finetune(bad, corpus, out, "--steps", "1") == 0
    capsys.readouterr()
    assert main(["sample", "--ckpt", str(out), "--chat", "--prompt", "hi", "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnkit sample: error: the chat template") and "not valid Jinja" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


# -------------------------------------------------------------------------------------------------
# bad input
# -------------------------------------------------------------------------------------------------

def test_missing_from_folder_is_refused(corpus, tmp_path, capsys):
    assert _finetune(tmp_path / "nope", corpus, tmp_path / "o", "--steps", "2") == 2
    err = capsys.readouterr().err
    assert "no such file or folder" in err and "smollm2-135m-instruct" in err


def test_pickle_file_is_refused_with_explanation(corpus, tmp_path, capsys):
    # a pickle that would run code if loaded: it must never be unpickled
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    for name in ("model.pt", "weights.gguf"):  # by suffix and by content
        path = tmp_path / name
        path.write_bytes(pickle.dumps({"w": Evil()}, protocol=4))
        assert _finetune(path, corpus, tmp_path / "o", "--steps", "2") == 2
        err = capsys.readouterr().err
        assert "pickle" in err and "arbitrary code" in err
    assert not marker.exists()


def test_folder_with_only_a_pickle_is_refused(corpus, tmp_path, capsys):
    folder = tmp_path / "torch_run"
    folder.mkdir()
    torch.save({"w": torch.randn(2, 2)}, folder / "model.pth")
    assert _finetune(folder, corpus, tmp_path / "o", "--steps", "2") == 2
    assert "never unpickles" in capsys.readouterr().err


def test_hf_folder_with_only_pytorch_model_bin_is_refused(pretrained, corpus, tmp_path, capsys):
    """config.json + pytorch_model.bin was unpickled although the docs promise pickles are refused (that it is never
    read is tested in tests/interop/test_load.py); the command says so in one line."""
    import shutil

    folder = shutil.copytree(pretrained["hf"], tmp_path / "hf_bin")
    (folder / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model.bin")
    assert _finetune(folder, corpus, tmp_path / "o", "--steps", "2") == 2
    err = capsys.readouterr().err.strip()
    assert "pytorch_model.bin holds pickled weights" in err and "safetensors" in err and len(err.splitlines()) == 1


def test_unknown_lora_target_lists_names(pretrained, corpus, tmp_path, capsys):
    assert _finetune(pretrained["ckpt"], corpus, tmp_path / "o", "--lora", "--lora-targets", "q_proj",
                     "--steps", "2") == 2
    err = capsys.readouterr().err
    assert "q_proj" in err and "available Linear names" in err and "qkv_proj" in err


def test_lora_flags_need_lora(pretrained, corpus, tmp_path, capsys):
    assert _finetune(pretrained["ckpt"], corpus, tmp_path / "o", "--lora-rank", "4", "--steps", "2") == 2
    assert "only apply with --lora" in capsys.readouterr().err


def test_bad_lora_rank(pretrained, corpus, tmp_path, capsys):
    assert _finetune(pretrained["ckpt"], corpus, tmp_path / "o", "--lora", "--lora-rank", "0", "--steps", "2") == 2
    assert "rank must be an int >= 1, got 0" in capsys.readouterr().err


def test_preset_and_architecture_overrides_refused(pretrained, corpus, tmp_path, capsys):
    assert _finetune(pretrained["ckpt"], corpus, tmp_path / "o", "--preset", "gpt2", "--steps", "2") == 2
    assert "--preset does not apply" in capsys.readouterr().err
    assert _finetune(pretrained["ckpt"], corpus, tmp_path / "o", "--set", "n_layer=3", "--steps", "2") == 2
    assert "can only --set dropout" in capsys.readouterr().err


def test_a_length_is_required(pretrained, corpus, tmp_path, capsys):
    assert main(["finetune", "--from", str(pretrained["ckpt"]), "--data", str(corpus), "--out", str(tmp_path / "o")]) == 2
    assert "--steps N or --max-time MIN" in capsys.readouterr().err


def test_tokenizer_flag_only_for_hf_folders(pretrained, corpus, tmp_path, capsys):
    tok_file = pretrained["hf"] / "tokenizer.json"
    assert _finetune(pretrained["ckpt"], corpus, tmp_path / "o", "--tokenizer", str(tok_file), "--steps", "2") == 2
    assert "--tokenizer only applies to a Hugging Face folder" in capsys.readouterr().err


# -------------------------------------------------------------------------------------------------
# refusals a practitioner met
# -------------------------------------------------------------------------------------------------

def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_an_out_at_the_from_folder_is_refused_before_any_work(pretrained, corpus, tmp_path, capsys):
    """Was: `finetune --from X --out X` (X a Hugging Face folder) wrote the run among X's files, and a later
    `--from X` loaded the run instead of the model."""
    import shutil

    src = tmp_path / "models" / "hf"
    shutil.copytree(pretrained["hf"], src)
    before = _tree(tmp_path)
    for out, where in ((src, "is"), (src / "run", "is inside"), (tmp_path / "models", "contains")):
        capsys.readouterr()
        assert _finetune(src, corpus, out, "--steps", "1") == 2
        err = capsys.readouterr().err
        assert f"--out {out} {where} the --from folder {src}: the run would write among the source model's " \
               f"files" in err and "Traceback" not in err
        assert _tree(tmp_path) == before


def test_a_block_size_beyond_the_models_context_is_refused(pretrained, corpus, tmp_path, capsys):
    """Was: a RoPE model (context 64) fine-tuned silently on 128-token windows, while the run's block_size and
    the HF export's max_position_embeddings stayed 64."""
    for src in (pretrained["hf"], pretrained["ckpt"]):
        capsys.readouterr()
        assert _finetune(src, corpus, tmp_path / "run", "--steps", "1", "--block-size", "128") == 2
        assert "--block-size must be <= the model's context length = 64 (its block_size; a Hugging Face folder's " \
               "max_position_embeddings), got 128" in capsys.readouterr().err
    assert _finetune(pretrained["hf"], corpus, tmp_path / "run", "--steps", "1", "--block-size", "64") == 0


def test_without_block_size_a_shorter_context_is_the_block_size(pretrained, corpus, tmp_path, capsys):
    """The default block size (256) is a length, not a demand: a model of context 64 trains at 64, with a note
    (it was refused once --block-size was checked against every model's context)."""
    argv = ["finetune", "--from", str(pretrained["hf"]), "--data", str(corpus), "--out", str(tmp_path / "run"),
            "--steps", "1", "--batch-size", "2", "--eval-batches", "1", "--no-progress"]
    assert main(argv) == 0
    assert "note: --block-size 64, the model's context length (the default, 256, is longer)" in capsys.readouterr().err
    assert load(tmp_path / "run").state["train_config"]["block_size"] == 64


def test_resume_messages_name_finetune_flags_and_lora_targets_compare_as_a_set(pretrained, corpus, tmp_path, capsys):
    """Was: the resume refusal said "--stop-at-loss ... may change", a flag finetune refuses; `--set dropout` on
    resume got the trainer's list of train lm's fields; and `--lora-targets` given in another order was refused."""
    out = tmp_path / "run"
    assert _finetune(pretrained["hf"], corpus, out, "--lora", "--lora-targets", "out_proj", "qkv_proj",
                     "--steps", "2") == 0
    for flags, said in ((["--lr", "1"], "--lr 0.001, got 1.0"), (["--set", "dropout=0.1"], "--set dropout=0.0, got "
                                                                                            "dropout=0.1")):
        capsys.readouterr()
        assert main(["finetune", "--resume", "--out", str(out), "--steps", "3", "--no-progress", *flags]) == 2
        err = capsys.readouterr().err
        assert f"--resume: the run was trained with {said} (a resumed run keeps its settings; only --steps, " \
               f"--max-time, --device, --activation-checkpointing and --loss-chunks may change)" in err \
        and "stop-at-loss" not in err
    assert main(["finetune", "--resume", "--out", str(out), "--steps", "3", "--no-progress",
                 "--lora-targets", "qkv_proj", "out_proj"]) == 0
    assert load(out).extra["lora"]["targets"] == ["out_proj", "qkv_proj"]
    assert main(["finetune", "--resume", "--out", str(out), "--steps", "4", "--lora-targets", "qkv_proj"]) == 2
    assert "--lora-targets must stay ['out_proj', 'qkv_proj'] (the run's), got ['qkv_proj']" in capsys.readouterr().err


def test_too_little_data_is_named_in_the_users_terms(pretrained, tmp_path, capsys):
    """Was: "train_tokens must hold at least block_size + 1 = 33 tokens, got 3" (the task's internal names)."""
    small = tmp_path / "small.txt"
    for text, split in (("A cat.\n", "train"), ("A cat runs at night.\n" * 20, "valid")):
        small.write_text(text, encoding="utf-8")
        capsys.readouterr()
        assert _finetune(pretrained["hf"], small, tmp_path / "run", "--steps", "1") == 2
        err = capsys.readouterr().err
        assert f"--data {small}: the {split} split holds " in err and "tokens (in the model's tokenizer), expected " \
               "at least --block-size + 1 = 33: give more text or a smaller --block-size" in err
