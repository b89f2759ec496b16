"""The copy task: an encoder-decoder learns to copy random digit sequences, in seconds on a laptop CPU.

Run it:  python examples/annotated_copy_task.py [--out DIR]     (about 10-20 s on a laptop CPU)
Open it as a notebook: Jupyter (with jupytext) or VS Code read the ``# %%`` cells.
Part of the walkthroughs of the seeds (docs/from-the-seeds.md): the encoder-decoder of seed 003
(examples/seed003_encoder_decoder.py) trained end to end, with the <start>/<end> framing of seed 004
(examples/seed004_embeddings.py), the schedule of examples/annotated_lr_schedule.py and the loss of
examples/annotated_label_smoothing.py. The Annotated Transformer's first experiment is the same task.

The data is random: sequences of 10 digits, and the target is the source itself. There is nothing to learn but
the mechanism, so a small model learns it in a few hundred updates, and whether it did is easy to check: greedy
decoding of sequences it has never seen must give them back exactly. The script trains with attnkit's pieces
(``MTTask`` batches and loss, ``build_optimizer``, ``LRScheduler``, ``greedy_search``), prints the falling loss,
checks the copies and draws the loss curve and the cross-attention of the trained model.

Axis legend: B batch (sequence pairs), S source length (10 digits + <eos>), T target length (<bos> + 10 digits),
C model width, H heads, V vocabulary (3 special tokens + 10 digits).
"""

# %%
from __future__ import annotations

import time

import torch

from _walkthrough import annotate_axes, figure, output_dir, save, section, setup, show
from attnkit.data.pipeline.mt_batching import EncodedPairs
from attnkit.generation import greedy_search
from attnkit.models import Transformer, TransformerConfig, count_parameters
from attnkit.training import LRScheduler, MTTask, TrainConfig, build_optimizer
from attnkit.viz import plot_attention, seq2seq_attention_maps

setup(seed=0)
OUT = output_dir()
PAD, BOS, EOS = 0, 1, 2  # digits d are tokens d + 3
V, LENGTH = 13, 10


def random_pairs(n: int, generator: torch.Generator) -> EncodedPairs:
    """``n`` random digit sequences; each source ends with <eos>, each target is the same digits (``MTTask``
    frames it as <bos> + digits for the decoder and digits + <eos> for the labels)."""
    digits = torch.randint(3, V, (n, LENGTH), generator=generator).tolist()
    return EncodedPairs(src=[d + [EOS] for d in digits], tgt=digits, pad_id=PAD, bos_id=BOS, eos_id=EOS)


def as_digits(ids: list[int]) -> str:
    return "".join(str(i - 3) if i >= 3 else "?" for i in ids)


# %% [markdown]
# ## 1. The data: random digit sequences / 数据：随机数字序列
#
# 20,000 training pairs and 200 held-out ones, drawn independently: a held-out sequence is almost surely new to
# the model (10^10 possible sequences). ``MTTask`` groups them into batches of 64 pairs and frames them as in
# translation: the encoder reads the digits and ``<eos>``, the decoder reads ``<bos>`` and the digits, and the
# labels are the digits and ``<eos>``.
# 源序列是随机数字，目标就是源序列本身。

# %%
section("1. The data: random digit sequences", "数据：随机数字序列")
data_generator = torch.Generator().manual_seed(1)
train_pairs, valid_pairs = random_pairs(20_000, data_generator), random_pairs(200, data_generator)
task = MTTask(train_pairs, valid_pairs, max_tokens=64 * (LENGTH + 1), label_smoothing=0.0, seed=0)
batch = task.batch("train", 0)
show("src: digits + <eos>", batch.src, "B, S")
show("tgt_in: <bos> + digits", batch.tgt_in, "B, T")
show("labels: digits + <eos>", batch.labels, "B, T")
assert torch.equal(batch.labels[:, :LENGTH], batch.src[:, :LENGTH]) and (batch.tgt_in[:, 0] == BOS).all()
print(f"  first pair: source {as_digits(batch.src[0].tolist())}, decoder input {as_digits(batch.tgt_in[0].tolist())}"
      f" ('?' = a special token)")

# %% [markdown]
# ## 2. The model and the untrained baseline / 模型与训练前的结果
#
# A small post-norm encoder-decoder: 2 + 2 layers, width 64, 4 heads. Untrained, its greedy output has nothing
# to do with its input, and its loss is above ``log V``, the loss of a uniform guess over the 13 tokens (a fresh
# model is confidently wrong).
# 训练前，模型的输出与输入无关。

# %%
section("2. The model and the untrained baseline", "模型与训练前的结果")
config = TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=64, num_heads=4, num_encoder_layers=2,
                           num_decoder_layers=2, dim_feedforward=128, dropout=0.0, pad_id=PAD, max_len=32)
model = Transformer(config)
print(f"  {count_parameters(model):,} parameters")
held_out = torch.tensor(valid_pairs.src)  # (200, S)
show("held-out sources", held_out, "B, S")


def exact_copies() -> int:
    """How many held-out sequences greedy decoding gives back exactly."""
    outputs = greedy_search(model, held_out, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    return sum(out == digits for out, digits in zip(outputs, valid_pairs.tgt))


before = task.evaluate(model, n_batches=4)["loss"]
copies_before = exact_copies()
assert copies_before == 0 and before > torch.log(torch.tensor(float(V)))
print(f"  before training: held-out loss {before:.3f} (log V = {torch.log(torch.tensor(float(V))):.3f}), "
      f"exact copies {copies_before} / {len(held_out)}")

# %% [markdown]
# ## 3. Training / 训练
#
# 300 updates of AdamW with a linear warmup (50 updates) and a cosine decay, gradients clipped to norm 1: each
# update takes a batch from ``MTTask``, computes its loss (teacher forcing; no label smoothing, since the copy has
# exactly one right answer) and steps. attnkit's ``Trainer`` runs the same loop with evaluation, checkpoints and
# logging around it (``attnkit train mt``).
# 每次更新：取一批数据、计算损失（教师强制）、反向传播、更新参数。

# %%
section("3. Training", "训练")
train_config = TrainConfig(steps=300, lr=3e-3, min_lr=3e-4, warmup_steps=50, schedule="cosine", weight_decay=0.0,
                           betas=(0.9, 0.98), grad_clip=1.0)
optimizer = build_optimizer(model, train_config)
sched = LRScheduler(optimizer, train_config)
losses, rates = [], []
start = time.perf_counter()
model.train()
for step in range(train_config.steps):
    loss, _ = task.loss(model, task.batch("train", step))
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), train_config.grad_clip)
    rates.append(optimizer.param_groups[0]["lr"])
    optimizer.step()
    sched.step()
    losses.append(loss.item())
    if step % 50 == 0 or step == train_config.steps - 1:
        elapsed = time.perf_counter() - start
        print(f"  update {step + 1:>3}: loss {loss.item():.4f}  lr {rates[-1]:.2e}  ({elapsed:.1f} s)")
model.eval()
first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
assert last < 0.01 * first
print(f"  mean loss of the first 10 updates {first:.3f}, of the last 10 {last:.5f}")

# %% [markdown]
# ## 4. The model copies sequences it has never seen / 模型能复制从未见过的序列
#
# Greedy decoding from ``<bos>`` alone, one token per step until ``<eos>``: every held-out sequence must come
# back exactly. The cross-attention of the last decoder layer shows how: the decoder, about to write digit i,
# looks mostly at source position i (a diagonal; checked: for at least 8 of the 10 digits).
# 贪心解码：每个未见过的序列都被原样复制；交叉注意力呈对角线。

# %%
section("4. The model copies sequences it has never seen", "模型能复制从未见过的序列")
after = task.evaluate(model, n_batches=4)["loss"]
copies = exact_copies()
assert copies == len(held_out) and after < 0.05
print(f"  after training: held-out loss {after:.5f}, exact copies {copies} / {len(held_out)}")
for digits in ([d + 3 for d in range(10)], [d + 3 for d in (9, 9, 0, 0, 1, 2, 7, 7, 7, 3)]):
    out = greedy_search(model, torch.tensor([digits + [EOS]]), bos_id=BOS, eos_id=EOS, pad_id=PAD)[0]
    assert out == digits
    print(f"    {as_digits(digits)} -> {as_digits(out)}")

src_ids = valid_pairs.src[0]
tgt_ids = [BOS] + valid_pairs.tgt[0]
cross = seq2seq_attention_maps(model, src_ids, tgt_ids).cross[-1]  # (H, T, S), last decoder layer
show("cross-attention, last decoder layer", cross, "H, T, S")
looked_at = cross.mean(0)[:LENGTH, :LENGTH].argmax(-1)  # where each writing step looks, averaged over heads
print(f"  the source position each of the 10 writing steps attends to most: {looked_at.tolist()}")
assert (looked_at == torch.arange(LENGTH)).sum() >= 8
fig = plot_attention(cross, query_labels=["<bos>"] + [as_digits([t]) for t in tgt_ids[1:]],
                     key_labels=[as_digits([s]) for s in src_ids[:-1]] + ["<eos>"],
                     title="trained copy model, last decoder layer: cross-attention")
save(fig, OUT, "annotated_copy_cross_attention.png")

fig, (loss_ax, lr_ax) = figure(11, 4, ncols=2)
loss_ax.plot(range(1, len(losses) + 1), losses)
loss_ax.set_yscale("log")
annotate_axes(loss_ax, "update", "training loss (cross-entropy, log scale)",
              f"copy task: loss {first:.2f} -> {last:.4f}; held-out copies {copies}/{len(held_out)}", legend=False)
lr_ax.plot(range(1, len(rates) + 1), rates)
annotate_axes(lr_ax, "update", "learning rate", "warmup + cosine", legend=False)
save(fig, OUT, "annotated_copy_loss.png")
