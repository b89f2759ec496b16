"""Seed 002's last step, in a minute on a laptop CPU: fine-tuning a pretrained GPT on jokes.

Run it:  python examples/seed002_finetune_jokes.py [--out DIR]     (under a minute on a laptop CPU)
The first run fetches two small Debian packages (the ``shakespeare`` and ``fortunes`` data recipes, about 3 MB)
into ``$ATTNKIT_HOME`` (default ``~/.cache/attnkit``); later runs read the cache and need no network.
Open it as a notebook: Jupyter (with jupytext) or VS Code read the ``# %%`` cells.
The map from this text to attnkit's files and tests: docs/from-the-seeds.md, section 3. The rest of seed 002
(causal attention, parameter counts, generation): examples/seed002_gpt2.py.

Seed 002 fine-tunes OpenAI's GPT-2 on some sixty thousand lines of English jokes, then lets it tell jokes.
Fine-tuning means: start from a model that has already learned a language, and continue training it on the new
text with a small learning rate. A laptop CPU cannot pretrain GPT-2 in a minute, so a tiny character-level
GPT-2-shaped model stands in for it: it is "pretrained" here on Shakespeare's plays for a few hundred updates,
then fine-tuned on the ``fortunes`` corpus (13,800 jokes, quips and quotes from Debian's fortune package). The
same number of updates on the jokes from scratch shows what the pretraining bought. Both trainings use attnkit's
``Trainer`` with ``LMTask``, the loop behind ``attnkit train lm`` and ``attnkit finetune``. For a real pretrained
model: ``attnkit finetune --from smollm2-135m-instruct --data fortunes --lora`` (docs/finetune.md).

Axis legend: B batch (windows), T window length (block size), V vocabulary (characters), N characters in a split.
"""

# %%
from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from _walkthrough import annotate_axes, figure, output_dir, save, section, setup, show
from attnkit.data.corpora.text import load_text_corpus
from attnkit.data.fetch import FetchError
from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.generation import generate
from attnkit.models import GPTConfig, build_model, count_parameters
from attnkit.training import Interrupted, LMTask, TrainConfig, Trainer, read_metrics

setup(seed=0)
OUT = output_dir()
RUNS = Path(tempfile.mkdtemp(prefix="attnkit-seed002-"))  # the run folders (checkpoints, metrics) of this script
atexit.register(shutil.rmtree, RUNS, ignore_errors=True)  # only their metrics are drawn: removed at exit, failed or not
BLOCK, BATCH, EVAL_BATCHES = 32, 32, 8

# %% [markdown]
# ## 1. The data: Shakespeare for pretraining, fortunes for fine-tuning / 数据
#
# Both corpora come from attnkit's data recipes (Debian packages, fetched once and cached). One character
# vocabulary covers both; each text becomes one long stream of ids, and ``LMTask`` cuts random windows of
# ``T + 1`` characters out of it: the input is the first ``T``, the target the last ``T`` (shifted by one).
# In the fortunes every entry ends with a line holding only ``%``, so a model learns where a joke ends.
# 莎士比亚用于预训练，fortunes 笑话集用于微调。

# %%
section("1. The data: Shakespeare for pretraining, fortunes for fine-tuning", "数据：预训练与微调的语料")
try:
    plays_train, plays_valid, _ = load_text_corpus("shakespeare")
    jokes_train, jokes_valid, jokes_info = load_text_corpus("fortunes")
except FetchError as err:  # offline on the first run: say so in one line
    raise SystemExit(f"seed002_finetune_jokes.py: {err}") from None
tokenizer = CharTokenizer.train([plays_train, plays_valid, jokes_train, jokes_valid])


def ids(text: str) -> torch.Tensor:
    return torch.tensor(tokenizer.encode(text))


plays = LMTask(ids(plays_train), ids(plays_valid), block_size=BLOCK, batch_size=BATCH, seed=0)
jokes = LMTask(ids(jokes_train), ids(jokes_valid), block_size=BLOCK, batch_size=BATCH, seed=0)
print(f"  {jokes_info['counts']['entries']:,} fortunes ({len(jokes_train):,} characters of training text), "
      f"{len(plays_train):,} characters of plays; {tokenizer.vocab_size} distinct characters")
show("joke training stream", jokes.tokens["train"], "N")
x, y = jokes.batch("train", 0)
show("a batch: inputs x", x, "B, T")
show("targets y (x shifted by one)", y, "B, T")
assert torch.equal(x[:, 1:], y[:, :-1])
print("  the first joke of the validation split:\n    " + jokes_valid.split("\n%\n")[0].replace("\n", "\n    "))

# %% [markdown]
# ## 2. Pretraining (the stand-in for GPT-2's) / 预训练（代替 GPT-2 的预训练）
#
# A GPT-2-shaped model (learned positions, pre-norm blocks, GELU MLP, tied head), 2 layers of width 96, trained
# on the plays. Before pretraining it guesses; after it, it knows English spelling and some words, which helps on
# the jokes too, although it has never seen one.
# 在莎士比亚剧本上预训练一个很小的 GPT。

# %%
section("2. Pretraining (the stand-in for GPT-2's)", "预训练（代替 GPT-2 的预训练）")
config = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=BLOCK, n_layer=2, n_head=4, n_embd=96, dropout=0.0)


def train(model, task: LMTask, steps: int, lr: float, name: str) -> dict:
    """``steps`` updates of attnkit's Trainer (AdamW, 20 warmup updates, cosine to lr / 10), run folder RUNS/name."""
    train_config = TrainConfig(steps=steps, lr=lr, min_lr=lr / 10, warmup_steps=20, batch_size=BATCH,
                               block_size=BLOCK, weight_decay=0.0, eval_every=steps, eval_batches=EVAL_BATCHES,
                               log_every=10, ckpt_every=steps)
    try:
        summary = Trainer(model, task, train_config, RUNS / name, model_config=config, progress=False, log=False).fit()
    except Interrupted as stop:  # Ctrl-C or SIGTERM: its checkpoint is in RUNS, removed at exit, so not resumable
        print(f"seed002_finetune_jokes.py: {stop.signal_name}: stopped after update {stop.step} of {name}; its run "
              f"folder was temporary and is removed: run the script again to start over", file=sys.stderr)
        raise SystemExit(stop.exit_code) from None
    print(f"  {name}: {steps} updates in {summary['elapsed']:.1f} s, validation loss {summary['valid_loss']:.3f}")
    return summary


def joke_loss(model) -> float:
    """Mean next-character loss on the first EVAL_BATCHES validation batches of the jokes (the same every time)."""
    return jokes.evaluate(model, EVAL_BATCHES)["loss"]


pretrained = build_model(config)
print(f"  {count_parameters(pretrained):,} parameters; an untrained model's joke loss: {joke_loss(pretrained):.3f}")
train(pretrained, plays, steps=300, lr=3e-3, name="pretrain")
before = joke_loss(pretrained)
print(f"  after pretraining on plays, its loss on the jokes: {before:.3f} (it has never seen a joke)")


def sample(model, seed: int) -> str:
    """A new text: what the model writes after a '%' line, sampled at temperature 0.8, until the next '%' (the
    context slides over the last BLOCK characters, the window the model was trained on)."""
    prompt = tokenizer.encode("%\n")
    out = generate(model, [prompt], max_new_tokens=160, do_sample=True, temperature=0.8, seed=seed,
                   eos_token_id=tokenizer.encode("%")[0], sliding_window=True)[0]
    return tokenizer.decode(out).strip()


print("  a sample of the pretrained model:\n    " + sample(pretrained, seed=1).replace("\n", "\n    "))

# %% [markdown]
# ## 3. Fine-tuning on the jokes, and the same from scratch / 在笑话上微调，并与从零训练比较
#
# Fine-tuning continues training the pretrained model on the jokes with a smaller learning rate. A second model,
# freshly initialised, gets the same number of updates on the same batches. The fine-tuned model ends lower:
# what it learned from the plays carries over.
# 微调后的模型比同样步数从零训练的模型损失更低。

# %%
section("3. Fine-tuning on the jokes, and the same from scratch", "在笑话上微调，并与从零训练比较")
finetuned = train(pretrained, jokes, steps=150, lr=1e-3, name="finetune")
torch.manual_seed(0)
scratch = build_model(config)
from_scratch = train(scratch, jokes, steps=150, lr=3e-3, name="scratch")
after, scratch_loss = joke_loss(pretrained), joke_loss(scratch)
assert after < before - 0.2, (after, before)
assert after < scratch_loss - 0.1, (after, scratch_loss)
print(f"  joke validation loss: pretrained {before:.3f} -> fine-tuned {after:.3f}; from scratch with the same "
      f"150 updates {scratch_loss:.3f}")
for seed in (1, 2):
    print(f"  a sample of the fine-tuned model (seed {seed}):\n    " + sample(pretrained, seed).replace("\n", "\n    "))

fig, ax = figure(8, 4.5)
for name, curve in (("pretrain", "pretraining on plays"), ("finetune", "fine-tuning on jokes (from the plays)"),
                    ("scratch", "jokes from scratch")):
    rows = [r for r in read_metrics(RUNS / name) if "loss" in r]
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], marker=".", label=curve)
annotate_axes(ax, "update", "training loss (nats per character)",
              f"fine-tuned: joke validation loss {after:.2f}, from scratch {scratch_loss:.2f}")
save(fig, OUT, "seed002_finetune_loss.png")
