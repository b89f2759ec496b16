"""Language modelling as a training :class:`~attnkit.training.task.Task`: predict the next token.

The data is one long stream of token ids per split. A batch is ``B`` random windows of ``T + 1``
consecutive tokens; the input is the first ``T`` and the target the last ``T`` (shifted by one):

    tokens  t0 t1 t2 t3 t4          (a window of T + 1 = 5)
    x       t0 t1 t2 t3             model input        (B, T)
    y          t1 t2 t3 t4          next-token targets (B, T)

The streams are token stores on disk (:class:`~attnkit.data.pipeline.token_store.TokenStore`, memory-mapped:
a batch reads and converts to int64 only its own ``B x (T + 1)`` ids) or tensors; the batches are the same.

Window starts come from a ``torch.Generator`` seeded from (seed, split, step), so batch ``step`` is the
same in every process: resuming needs only the step number. Validation uses batches ``0..n_batches-1`` of
the "valid" split, i.e. the same fixed windows at every evaluation, so evaluations are comparable.

Axis legend: B batch, T sequence length (block size), V vocabulary, N tokens in a split.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.checks import check_int
from attnkit.data.pipeline.token_store import TokenStore
from attnkit.generation.generate import model_device
from attnkit.modules.chunked_cross_entropy import chunked_cross_entropy, head_vocab_size

from .task import batch_seed, check_split, check_step, tensor_fingerprint


def _fingerprint(tokens: torch.Tensor | TokenStore) -> str:
    """A store's ``content_id`` (recorded when it was built), a tensor's content hash."""
    return tokens.content_id if isinstance(tokens, TokenStore) else tensor_fingerprint(tokens)


def _tensor_fingerprint_of_store(store: TokenStore) -> str:
    """:func:`~attnkit.training.task.tensor_fingerprint` of the store's ids as one int64 tensor, computed a slice at
    a time: what a run trained on the same ids in memory (before the token store) recorded."""
    import hashlib

    h = hashlib.blake2b(digest_size=12)
    h.update(f"{torch.int64}:{(store.numel(),)}:".encode())
    for chunk in store.chunks():
        h.update(chunk.astype("<i8").tobytes())
    return h.hexdigest()


def _as_token_stream(name: str, tokens: Any, block_size: int) -> torch.Tensor | TokenStore:
    if isinstance(tokens, TokenStore):
        if tokens.numel() < block_size + 1:
            raise ValueError(f"{name} must hold at least block_size + 1 = {block_size + 1} tokens, got "
                             f"{tokens.numel()}")
        return tokens
    if not isinstance(tokens, torch.Tensor):
        try:
            tokens = torch.as_tensor(tokens)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"{name} must be a 1-D integer tensor of token ids, got {type(tokens).__name__} ({err})") from None
    if tokens.ndim != 1:
        raise ValueError(f"{name} must be 1-D (N,), got shape {tuple(tokens.shape)}")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    if tokens.numel() < block_size + 1:
        raise ValueError(f"{name} must hold at least block_size + 1 = {block_size + 1} tokens, got {tokens.numel()}")
    tokens = tokens.to(torch.long).contiguous()
    if int(tokens.min()) < 0:
        raise ValueError(f"{name} must hold token ids >= 0, got min {int(tokens.min())}")
    return tokens


class LMTask:
    """Next-token prediction on token streams.

    Args:
        train_tokens: a :class:`~attnkit.data.pipeline.token_store.TokenStore` or a LongTensor ``(N_train,)``
            (anything ``torch.as_tensor`` turns into 1-D integers).
        valid_tokens: the same, ``(N_valid,)``.
        block_size: T, the context length of each window.
        batch_size: B, windows per batch.
        seed: data seed (which windows each step sees); independent of the model/dropout seed.

    Shape:
        ``batch(split, step) -> (x, y)``, both LongTensor ``(B, T)``.
        ``loss(model, (x, y))``: ``model(x)`` must return logits ``(B, T, V)``; returns (mean cross-entropy
        over all ``B * T`` positions, ``B * T``).
    """

    # K >= 1: in training (with gradients on) the loss is chunked_cross_entropy over K row chunks, the final hidden
    # states given to it by ``model(x, output_fn=)``: no (B, T, V) logits kept for the backward pass. The trainer
    # sets it (TrainConfig.loss_chunks); 0 is the plain loss (and evaluation always is).
    loss_chunks: int = 0

    def __init__(self, train_tokens: Any, valid_tokens: Any, block_size: int, batch_size: int, seed: int = 0):
        for name, value in (("block_size", block_size), ("batch_size", batch_size)):
            check_int(f"LMTask {name}", value, minimum=1)
        check_int("LMTask seed", seed, minimum=0)
        self.block_size = block_size
        self.batch_size = batch_size
        self.seed = seed
        self.tokens = {"train": _as_token_stream("train_tokens", train_tokens, block_size),
                       "valid": _as_token_stream("valid_tokens", valid_tokens, block_size)}
        # Computed once: the checkpoint stores them so a resume with different data is refused.
        self._fingerprints = {split: _fingerprint(t) for split, t in self.tokens.items()}
        # bounds every batch's ids (see loss)
        self._max_id = max(t.max_id if isinstance(t, TokenStore) else int(t.max()) for t in self.tokens.values())

    # --------------------------------------------------------------------------------------------
    def batch(self, split: str, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch number ``step`` of ``split``: ``(x, y)``, LongTensors ``(B, T)``, y = x shifted by one.

        Shape: returns ``(B, T)``, ``(B, T)``.
        """
        check_split(split)
        check_step(step)
        data = self.tokens[split]
        T = self.block_size
        gen = torch.Generator().manual_seed(batch_seed(self.seed, split, step))
        starts = torch.randint(0, data.numel() - T, (self.batch_size,), generator=gen)  # (B,)
        idx = starts[:, None] + torch.arange(T + 1)  # (B, T + 1) positions of each window
        window = data[idx]  # (B, T + 1)
        return window[:, :-1].contiguous(), window[:, 1:].contiguous()  # (B, T), (B, T)

    @staticmethod
    def count_tokens(batch: tuple[torch.Tensor, torch.Tensor]) -> int:
        """The number of positions ``loss`` averages over (``B * T``), from the shape alone."""
        return batch[1].numel()

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, int]:
        """Mean next-token cross-entropy over all positions, and the number of positions
        (:func:`next_token_loss`).

        The target ids are checked against the model's vocabulary: on the CPU the batch's own largest id; on
        an accelerator, and inside ``torch.compile`` (the trainer's ``compile=True`` compiles this method with the
        model), the largest id of the task's token streams (computed once), because reading the batch's back would
        make every training step wait for the device (and break the compiled graph in two).
        """
        on_cpu = batch[1].device.type == "cpu" and not torch.compiler.is_compiling()
        chunks = self.loss_chunks if self.loss_chunks and model.training and torch.is_grad_enabled() else 0
        return next_token_loss(model, batch, max_id=None if on_cpu else self._max_id, chunks=chunks)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, n_batches: int) -> dict[str, float]:
        """Validation loss (mean over all tokens of ``n_batches`` fixed batches) and perplexity ``exp(loss)``."""
        check_int("n_batches", n_batches, minimum=1)
        mean, _ = mean_token_loss(model, (self.batch("valid", i) for i in range(n_batches)), self.loss)
        return {"loss": mean, "ppl": perplexity(mean)}

    # --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-able description of the data; :meth:`load_state_dict` refuses a different one."""
        return {"kind": "lm", "seed": self.seed, "block_size": self.block_size, "batch_size": self.batch_size,
                "n_train": self.tokens["train"].numel(), "n_valid": self.tokens["valid"].numel(),
                "train_fingerprint": self._fingerprints["train"], "valid_fingerprint": self._fingerprints["valid"]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Check that a checkpoint was trained on this very task (same data, seed and batch shape)."""
        if not isinstance(state, dict):
            raise ValueError(f"LMTask state must be a dict, got {type(state).__name__}")
        mine = self.state_dict()
        diffs = [f"{k} (checkpoint {state.get(k)!r}, now {v!r})" for k, v in mine.items()
                 if state.get(k) != v and not self._same_ids(k, state.get(k))]
        if diffs:
            raise ValueError("cannot resume: the language-modelling data differ from the checkpoint's in "
                             + ", ".join(diffs))

    def _same_ids(self, key: str, recorded: Any) -> bool:
        """Whether a checkpoint's ``<split>_fingerprint`` of a run that kept its ids in memory (a tensor
        fingerprint) names this task's token store's ids: such a run resumes from the store unchanged."""
        split = key.removesuffix("_fingerprint")
        tokens = self.tokens.get(split) if key.endswith("_fingerprint") else None
        if not isinstance(tokens, TokenStore) or not isinstance(recorded, str) or recorded.startswith("store:"):
            return False
        return _tensor_fingerprint_of_store(tokens) == recorded


def perplexity(mean_loss: float) -> float:
    """``exp(mean_loss)``, capped so that a diverged loss gives a huge number instead of an overflow."""
    return math.exp(min(mean_loss, 700.0))  # exp overflows a float past ~709


def mean_token_loss(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                    loss_fn: Callable[[nn.Module, tuple[torch.Tensor, torch.Tensor]], tuple[torch.Tensor, int]]
                    ) -> tuple[float, int]:
    """The one language-model evaluation: mean next-token loss over every position of ``batches``.

    Used by :meth:`LMTask.evaluate` (fixed random validation batches during training) and by ``attnkit eval lm``
    (every window of the split). ``loss_fn(model, (x, y))`` returns the mean loss of one batch and its number of
    positions (:meth:`LMTask.loss`); the batches are moved to the model's device. Returns ``(mean, positions)``.

    Shape: each batch ``(x (B, T), y (B, T))``.
    """
    device = model_device(model)
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0
    for x, y in batches:
        loss, n = loss_fn(model, (x.to(device), y.to(device)))
        total += loss.double() * n  # summed on the device, read once below
        count += n
    if count == 0:
        raise ValueError("mean_token_loss got no batch to evaluate")
    return float(total) / count, count


def check_target_ids(y: torch.Tensor, V: int, max_id: int | None = None) -> None:
    """Every target id in ``[0, V)``, else ``ValueError`` naming the first one outside (``max_id``: a bound known on
    the host, checked instead of reading ``y``). Shape: y ``(B, T)``."""
    # a negative id (-100, cross_entropy's ignore_index) would be dropped from the mean but counted in y.numel()
    y_min, y_max = (int(v) for v in torch.aminmax(y)) if max_id is None else (0, max_id)
    if y_min < 0 or y_max >= V:
        raise ValueError(f"target token id {y_min if y_min < 0 else y_max} is outside the model's vocabulary "
                         f"[0, {V})")


def _chunked_loss(h: torch.Tensor, head: nn.Module, *, y: torch.Tensor, chunks: int,
                  max_id: int | None) -> torch.Tensor:
    """The model's ``output_fn`` for ``chunks >= 1``: the targets checked against the head's vocabulary, then
    :func:`~attnkit.modules.chunked_cross_entropy.chunked_cross_entropy`. Shape: h ``(B, T, C)``, y ``(B, T)``."""
    check_target_ids(y, head_vocab_size(head), max_id)
    return chunked_cross_entropy(h, head, y, chunks=chunks)


def next_token_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], *,
                    max_id: int | None = None, chunks: int = 0) -> tuple[torch.Tensor, int]:
    """Mean next-token cross-entropy over all positions, and the number of positions.

    ``chunks`` >= 1: the same loss up to float rounding, computed by
    :func:`~attnkit.modules.chunked_cross_entropy.chunked_cross_entropy` over that many row chunks from the model's
    final hidden states (``model(x, output_fn=...)``), without keeping the ``(B, T, V)`` logits for the backward pass.

    ``max_id``: a bound on the target ids known on the host, checked against the vocabulary instead of the
    batch's largest id (None: read ``y``'s smallest and largest ids, which waits for the device when the batch is
    on a GPU). Targets that are not integer ids of ``x``'s shape, or ids outside ``[0, V)`` (``-100`` too:
    ``cross_entropy`` would leave it out of the mean, yet it counts in the positions) raise ``ValueError``.

    Shape: batch ``(x (B, T), y (B, T))``; ``model(x)`` -> logits ``(B, T, V)``; returns a 0-dim loss.
    """
    x, y = batch
    if not isinstance(y, torch.Tensor) or y.shape != x.shape or y.dtype.is_floating_point or y.dtype.is_complex \
            or y.dtype == torch.bool:
        got = f"{tuple(y.shape)} {y.dtype}" if isinstance(y, torch.Tensor) else type(y).__name__
        raise ValueError(f"targets y must be integer token ids of x's shape (B, T) = {tuple(x.shape)}, got {got}")
    if chunks:
        return model(x, output_fn=functools.partial(_chunked_loss, y=y, chunks=chunks, max_id=max_id)), y.numel()
    logits = model(x)
    if not isinstance(logits, torch.Tensor) or logits.ndim != 3 or logits.shape[:2] != x.shape:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"model(x) must return logits (B, T, V) = ({x.shape[0]}, {x.shape[1]}, V), got {got}")
    V = logits.shape[-1]
    check_target_ids(y, V, max_id)
    y = y.long()
    # Cross-entropy in float32 even under bf16 autocast: the log-softmax over V needs the precision.
    loss = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1))  # (B*T, V) vs (B*T,)
    return loss, y.numel()
