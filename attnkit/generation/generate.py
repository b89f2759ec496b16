"""Text generation for decoder-only language models (``attnkit.models.gpt.GPT`` or anything shaped like it).

Axis legend: ``B`` batch (prompts), ``T`` tokens fed to the model in one call, ``L`` tokens of a row so far
(prompt, left padding and generated), ``S`` key positions (cached + new), ``V`` vocabulary.

One loop, one token per sequence per step::

    logits = model(tokens)[:, -1]                 # (B, V) next-token logits
    logits = process(logits)                      # repetition penalty, temperature, top-k, top-p, min-p
    next = argmax(logits) or sample(softmax(logits))
    tokens = cat(tokens, next)                    # and stop the sequences that are done

**Batches of prompts of different lengths** are padded on the *left*, so every row's next token is in
the last column::

    prompt A (3 tokens):  [pad pad  a1  a2  a3]     key_padding_mask: [T T F F F]
    prompt B (5 tokens):  [ b1  b2  b3  b4  b5]                       [F F F F F]
    position_ids A:       [  0   0   0   1   2]     (each row counts its own tokens from 0)

The padding keys are masked out and the positions restart at 0 for every row, so learned positions and
RoPE see exactly what they would see for the prompt alone: a row gives the same logits, so the same greedy
tokens, in a batch as on its own (up to float rounding; past ``block_size`` with the cache's sliding window, see
there). Sampled tokens are drawn per batch row (see **Sampling**): with a seed, a prompt's sample depends on its
row and the batch size, not only on the prompt.

**KV cache** (``use_cache=True``): the prompt is fed once ("prefill"), its keys/values are stored, and
each later step feeds only the one new token. Without the cache, every step feeds the whole sequence
again: slower, but it needs no cache and lets learned-position models slide past ``block_size``.
Both give the same tokens. The cache starts with room for the prompt and ``FIRST_ROOM`` new tokens and doubles
when full, so a generous ``max_new_tokens`` costs the memory of the tokens made, not of the limit.

**Context length.** A model with *learned* positions has no embedding for positions ``>= block_size``.
Generating needs ``L = T_prompt + max_new_tokens - 1`` positions (the last new token is never fed back).
If that exceeds ``block_size``:

* ``use_cache=False``: the context is cropped to its last ``block_size`` tokens at every step (as nanoGPT
  does) and positions are recounted from 0 in the window;
* ``use_cache=True, sliding_window=True``: the window runs in the cache (below);
* ``use_cache=True`` alone: ``ValueError`` before anything runs.

RoPE, sinusoidal and position-free models have no such table and are not cropped by default (they
extrapolate past ``block_size``, with the cache or without); ``sliding_window=True`` makes them keep to
``block_size`` too, so the model never sees a context longer than it was trained on.

**Sliding window with the cache** (``use_cache=True, sliding_window=True``). The cache holds at most
``W = block_size`` columns. When the next token would not fit (``W + 1`` columns), the window is cut
at once to its newest ``W - W // 2`` columns, the new token included, and the older ones are dropped
(a prompt longer than ``W`` is cut the same way before its prefill). The columns are the batch's: a row
shorter than the longest is cut when the longest fills the window, so it keeps fewer of its own tokens than
it would decoded alone (``use_cache=False`` crops every row to its own last ``W`` tokens):

* **RoPE** models keep the cache and *shift* it, as llama.cpp's context shift does: the kept keys move
  to the front and are rotated back by the number of real tokens dropped from their row
  (:meth:`~attnkit.modules.rotary.RotaryEmbedding.shift`), values move unchanged. What it guarantees:
  the kept keys' positions, and so every query-key *relative* position, are exactly (up to float
  rounding) those of the window counted from 0; the first layer's keys and values equal a fresh
  prefill of the window. What it does not: the deeper layers' kept keys and values were computed while
  the dropped tokens were still visible, so they still reflect them (a one-layer model equals the
  uncached window exactly; a deeper one does not).
* **Learned, sinusoidal and position-free** models drop the same half and *re-fill* the cache once from
  the kept tokens (one prefill of ``W - W // 2`` tokens per ``W // 2`` new tokens, instead of a whole window
  per token without a cache). Every logit then equals an uncached forward over the current window:
  the window starts at the last drop and grows to ``W`` before the next one.

**Code layout.** :class:`~attnkit.generation.config.GenerationConfig` holds and validates every option
before any work; each decoding path is one object with one ``next_logits(tokens, pad) -> (b, V)``:
``_Uncached`` (whole context, cropped to the window when asked), ``_Cached`` (prefill, then one column),
``_Compiled`` (its one-column steps through ``torch.compile``) and ``_WindowCache`` (above). Logits that
hold NaN or +inf, or are -inf for every token, stop generation with ``FloatingPointError`` (an argmax would
quietly return id 0, a sample has no distribution to draw from). A step reads one thing back from the device, its
ids; the compiled path, which keeps every row, runs one step ahead of that read (``_decode_ahead``), so that the
host's bookkeeping and the device's step overlap on a GPU.

**Stopping** per sequence (see :mod:`attnkit.generation.stopping`): at an ``eos_token_id`` (not included
in the output), after the token that completes a stop string (included), or after ``max_new_tokens``.
Finished rows leave the batch (``cache.reorder`` keeps the others), so they cost nothing afterwards but their
sampling draws (below).

**Sampling** with ``seed`` uses its own ``torch.Generator``: the same seed gives the same tokens, whatever
the global RNG state, and the global RNG is not consumed. Every step draws for every prompt, finished or not, so a
row's tokens do not depend on when the other rows stop (nor on the decoding path). ``seed=None`` draws from the
global RNG (compiled decoding whose rows all stop early draws once more: its step ahead).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from attnkit.checks import is_int
from attnkit.modules.rotary import RotaryEmbedding
from attnkit.modules.sinusoidal import SinusoidalPositionalEncoding
from . import processors as P
from .compiled import RECOMPILE_LIMIT, SLOT_MULTIPLE, compiled_step
from .config import GenerationConfig
from .stopping import StoppingCriteria

__all__ = ["generate", "GenerationConfig", "left_pad", "position_ids_from_padding"]


# ----------------------------------------------------------------------------------------------------
# helpers shared with the seq2seq side
# ----------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Run ``model`` in eval mode (dropout off) without gradients; restore its training flag afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU for a parameter-free model)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def left_pad(prompts: Sequence[Sequence[int]], pad_token_id: int, *, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack prompts of different lengths, padding on the left.

    Returns ``(ids, key_padding_mask)`` with ``True`` marking padding.

    Shape:
        ``B`` lists of token ids -> ids ``(B, L)`` int64, key_padding_mask ``(B, L)`` bool, ``L`` = longest prompt.
    """
    L = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), L), pad_token_id, dtype=torch.long)
    mask = torch.ones(len(prompts), L, dtype=torch.bool)
    for b, p in enumerate(prompts):
        if len(p):
            ids[b, L - len(p):] = torch.tensor(list(p), dtype=torch.long)
            mask[b, L - len(p):] = False
    return ids.to(device), mask.to(device)


def position_ids_from_padding(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted from each row's first real (non-padding) token; padding gets position 0.

    Shape:
        key_padding_mask ``(B, L)`` bool -> position_ids ``(B, L)`` int64.
    """
    real = (~key_padding_mask).long()  # (B, L)
    return (real.cumsum(dim=1) - 1).clamp(min=0)  # (B, L)


def _prompts_as_lists(prompts, vocab_size: int | None) -> list[list[int]]:
    """Validate the prompts and return them as lists of Python ints."""
    if isinstance(prompts, torch.Tensor):
        if prompts.dim() != 2 or prompts.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"prompts tensor must be int64/int32 with shape (B, T), got {prompts.dtype} "
                             f"{tuple(prompts.shape)}")
        rows = prompts.tolist()
    elif isinstance(prompts, (list, tuple)) and all(isinstance(p, (list, tuple)) for p in prompts):
        rows = [list(p) for p in prompts]
    else:
        raise ValueError(f"prompts must be a LongTensor (B, T) or a list of lists of token ids, got "
                         f"{type(prompts).__name__}" + (" of ints (wrap one prompt in a list: [ids])"
                                                         if isinstance(prompts, (list, tuple)) else ""))
    if not rows:
        raise ValueError("prompts must contain at least one prompt, got B = 0")
    for b, row in enumerate(rows):
        if not row:
            raise ValueError(f"every prompt needs at least one token (e.g. a BOS token), got an empty prompt at index {b}")
        for t in row:
            if not is_int(t) or t < 0 or (vocab_size is not None and t >= vocab_size):
                hi = "V" if vocab_size is None else vocab_size
                raise ValueError(f"prompt {b}: token ids must be ints in [0, {hi}), got {t!r}")
    return rows




# ----------------------------------------------------------------------------------------------------
# one next_logits per decoding path
# ----------------------------------------------------------------------------------------------------
class _Uncached:
    """Feed the whole context every step (its last ``window`` tokens when ``window`` is set)."""

    keeps_batch = False  # finished rows may leave the batch

    def __init__(self, model: nn.Module, window: int | None):
        self.model, self.window = model, window

    def next_logits(self, tokens: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        """Shape: tokens, pad ``(b, L)`` -> logits ``(b, V)`` of the next token."""
        if self.window is not None and tokens.shape[1] > self.window:
            tokens, pad = tokens[:, -self.window:], pad[:, -self.window:]  # crop: (b, window)
        return self.model(tokens, key_padding_mask=pad, position_ids=position_ids_from_padding(pad))[:, -1]

    def reorder(self, index: torch.Tensor) -> None:
        pass


class _Cached:
    """Prefill the prompt once, then feed one new column per step; the cache holds every column. Its buffers start
    with room for ``capacity`` columns (default ``max_len``) and double when full, up to ``max_len``: a large
    ``max_new_tokens`` costs the memory of the tokens made, not of the limit (a cache without ``grow`` is made
    whole)."""

    keeps_batch = False

    def __init__(self, model: nn.Module, batch_size: int, max_len: int, capacity: int | None = None):
        self.model, self.max_len = model, max_len
        self.room = max_len if capacity is None else min(capacity, max_len)  # columns the cache has room for
        self.cache = model.new_cache(batch_size, max_len=self.room)
        # a model is asked for new_cache(batch_size, max_len) only: a cache without grow (or max_len) is made whole
        if self.room < max_len and not callable(getattr(self.cache, "grow", None)):
            self.room = max_len
            self.cache = model.new_cache(batch_size, max_len=max_len)
        self.start = 0  # first column of `tokens` in the cache
        self.fed = 0  # columns of `tokens` already in the cache

    def next_logits(self, tokens: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        """Shape: tokens, pad ``(b, L)`` -> logits ``(b, V)``. The mask covers the cached and the new keys."""
        if tokens.shape[1] - self.start > self.room:  # full: double it
            self.room = min(max(2 * self.room, tokens.shape[1] - self.start), self.max_len)
            self.cache.grow(self.room)
        window_pad = pad[:, self.start:]  # (b, S)
        positions = position_ids_from_padding(window_pad)[:, self.fed - self.start:]  # (b, new columns)
        logits = self.model(tokens[:, self.fed:], key_padding_mask=window_pad, position_ids=positions, cache=self.cache)
        self.fed = tokens.shape[1]
        return logits[:, -1]

    def reorder(self, index: torch.Tensor) -> None:
        self.cache.reorder(index)


class _Compiled(_Cached):
    """:class:`_Cached` whose one-column steps run through ``torch.compile`` on fixed shapes (B stays fixed)."""

    keeps_batch = True

    def __init__(self, model: nn.Module, batch_size: int, max_len: int):
        super().__init__(model, batch_size, max_len)  # every slot now: a compiled step's shapes never change
        for module in model.modules():  # a compiled step cannot grow a position table: size it for every slot now
            if isinstance(module, SinusoidalPositionalEncoding):
                module.reserve(max_len)
            elif isinstance(module, RotaryEmbedding):  # (looking up the last slot's angles grows its tables)
                module.cos_sin(torch.tensor([max_len - 1], device=module.cos_cached.device))

    def next_logits(self, tokens: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        if not self.fed:  # the prefill runs eagerly; what the steps need is read from the prompt once, here
            self.padded = bool(pad.any())  # new columns are never padding: this holds for every step
            self.position = position_ids_from_padding(pad)[:, -1:]  # (b, 1): the last prompt column's
            self.slot = torch.tensor([tokens.shape[1]], dtype=torch.long, device=tokens.device)  # (1,): next slot
            return super().next_logits(tokens, pad)
        # one new column into cache slot `fed`; the mask covers all max_len slots (the ones after `fed` are
        # masked inside GPT.forward). Fresh (b, 1) tensors with their own strides, not slices (see compiled_step);
        # positions and slots advance on the device, so a step reads nothing back and copies nothing over.
        L = tokens.shape[1]
        slot_pad = torch.nn.functional.pad(pad, (0, self.max_len - L)) if self.padded else None  # (b, max_len)
        new = tokens[:, -1:].clone(memory_format=torch.contiguous_format)  # (b, 1)
        positions = self.position = self.position + 1  # (b, 1), a fresh tensor
        slot, self.slot = self.slot, self.slot + 1  # (1,)
        self.fed = L
        return compiled_step(self.model, new, slot_pad, positions, self.cache, slot)  # (b, V)

    def reorder(self, index: torch.Tensor) -> None:
        raise AssertionError("compiled decoding keeps every row in the batch")


class _WindowCache(_Cached):
    """A cache of at most ``window`` columns: when full, cut to the newest ``window - window // 2``.

    RoPE models (``rotary`` given) shift the kept keys; the others re-fill the cache from the kept tokens.
    """

    def __init__(self, model: nn.Module, batch_size: int, window: int, rotary):
        super().__init__(model, batch_size, window)
        self.window, self.rotary = window, rotary

    def next_logits(self, tokens: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        L = tokens.shape[1]
        if L - self.start > self.window:
            new_start = L - (self.window - self.window // 2)
            if self.rotary is not None and self.fed > new_start:
                self._shift(pad, new_start)
            else:  # re-fill: the kept columns are fed again as one prefill
                self.cache.reset()
                self.fed = new_start
            self.start = new_start
        return super().next_logits(tokens, pad)

    def _shift(self, pad: torch.Tensor, new_start: int) -> None:
        """Drop columns ``start .. new_start - 1`` from the cache and renumber the kept keys' positions."""
        dropped = (~pad[:, self.start:new_start]).sum(dim=1)  # (b,) real tokens each row loses
        for layer in self.cache:
            layer.drop_front(new_start - self.start)
            keys = layer.k_cache.narrow(2, 0, layer.length)  # (b, K, kept, D)
            keys.copy_(self.rotary.shift(keys, -dropped))


# new-token columns an eager cache has room for after the prompt before it first grows (it doubles when full)
FIRST_ROOM = 256


def _decoding_path(model: nn.Module, cfg: GenerationConfig, batch_size: int, needed: int, prompt_len: int):
    """The object whose ``next_logits`` runs the model for ``cfg`` (see the module doc for each path)."""
    mcfg = getattr(model, "config", None)
    block_size = getattr(mcfg, "block_size", None)
    learned = getattr(mcfg, "position", None) == "learned"
    if not cfg.use_cache:
        return _Uncached(model, block_size if (learned or cfg.sliding_window) else None)
    if cfg.sliding_window and block_size is not None:
        rotary = getattr(model, "rotary", None) if getattr(mcfg, "position", None) == "rope" else None
        return _WindowCache(model, batch_size, min(block_size, needed), rotary)
    if cfg.compile:  # round up, so that nearby lengths share one compilation (never past learned positions)
        rounded = -(-needed // SLOT_MULTIPLE) * SLOT_MULTIPLE
        return _Compiled(model, batch_size, min(rounded, block_size) if learned and block_size else rounded)
    return _Cached(model, batch_size, needed, capacity=prompt_len + FIRST_ROOM)


def _check_context(model: nn.Module, cfg: GenerationConfig, prompt_len: int) -> int:
    """Positions the cache must hold; ``ValueError`` where learned positions cannot reach them."""
    mcfg = getattr(model, "config", None)
    block_size = getattr(mcfg, "block_size", None)
    needed = prompt_len + cfg.max_new_tokens - 1  # the last new token is never fed
    if (cfg.use_cache and not cfg.sliding_window and getattr(mcfg, "position", None) == "learned"
            and block_size is not None and needed > block_size and cfg.max_new_tokens > 0):
        room = block_size - prompt_len + 1  # new tokens that fit after the prompt (< 1: the prompt alone is too long)
        fewer = f"at most {room} new tokens" if room >= 1 else f"a prompt of at most {block_size} tokens"
        raise ValueError(
            f"prompt length {prompt_len} + max_new_tokens {cfg.max_new_tokens} - 1 = {needed} positions exceed "
            f"the learned positions' block_size = {block_size}; use sliding_window=True (drops half the window "
            f"when full), use_cache=False (crops the context to the last {block_size} tokens) or {fewer}")
    return max(needed, prompt_len)


def _pick(logits: torch.Tensor, tokens: torch.Tensor, pad: torch.Tensor, cfg: GenerationConfig,
          generator: torch.Generator | None, rows: torch.Tensor | None = None, batch_size: int = 0) -> torch.Tensor:
    """The next token of every row: processed logits, then argmax or a sample; -1 for a row whose logits hold NaN or
    +inf or are all -inf (argmax would quietly pick id 0, and a broken model must not look fine: the loop raises when
    it reads the ids, so that the check costs no wait for the device of its own). ``rows``: which of the
    ``batch_size`` prompts the rows are (``None``: all of them, in order).

    Shape:
        logits ``(b, V)``; tokens, pad ``(b, L)``; rows ``(b,)`` -> ``(b,)``.
    """
    if cfg.vocab_size is not None:
        logits = logits[:, :cfg.vocab_size]  # (b, V'): the ids past it (a padded output layer) are never chosen
        if cfg.repetition_penalty != 1.0 or cfg.no_repeat_ngram_size:  # ids past V' in the rows (a prompt's, the
            # padding) have no logit to penalise or ban
            outside = tokens >= cfg.vocab_size  # (b, L)
            tokens, pad = tokens.masked_fill(outside, 0), pad | outside  # (b, L) each: read as padding
    broken = ~torch.isfinite(logits.amax(dim=-1))  # (b,): a NaN or +inf logit, or none above -inf
    logits = logits.masked_fill(broken[:, None], 0.0)  # (b, V): such a row is no distribution to sample from
    return torch.where(broken, -1, _choose(logits, tokens, pad, cfg, generator, rows, batch_size))


def _choose(logits: torch.Tensor, tokens: torch.Tensor, pad: torch.Tensor, cfg: GenerationConfig,
            generator: torch.Generator | None, rows: torch.Tensor | None, batch_size: int) -> torch.Tensor:
    """Processed logits, then argmax or a sample (see :func:`_pick`).

    A sample is ``argmax(p / q)`` with ``q ~ Exp(1)`` per token (an exact draw from ``p``, as ``torch.multinomial``
    makes one), and ``q`` is drawn for every prompt's row, finished or not: a row's tokens do not depend on which
    other rows have stopped (nor on whether finished rows stay in the batch, as in compiled decoding).

    Shape:
        logits ``(b, V)``; tokens, pad ``(b, L)``; rows ``(b,)`` -> ``(b,)``.
    """
    logits = P.process_logits(
        logits.float(), input_ids=tokens, ignore_mask=pad, repetition_penalty=cfg.repetition_penalty,
        no_repeat_ngram_size=cfg.no_repeat_ngram_size,
        temperature=cfg.temperature if cfg.do_sample else 1.0,
        top_k=cfg.top_k if cfg.do_sample else None,
        top_p=cfg.top_p if cfg.do_sample else None,
        min_p=cfg.min_p if cfg.do_sample else None,
    )
    if not cfg.do_sample:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits, dim=-1)  # (b, V): filtered tokens have probability 0
    B = probs.shape[0] if rows is None else batch_size
    q = torch.empty(B, probs.shape[1], dtype=probs.dtype, device=probs.device).exponential_(generator=generator)
    if rows is not None:
        q = q[rows]  # (b, V): the draws of the rows still decoding
    return (probs / q).argmax(dim=-1)


def _check_streamer(streamer, batch_size: int) -> None:
    if streamer is None:
        return
    if batch_size != 1:
        raise ValueError(f"a streamer prints one sequence: batch size must be 1, got {batch_size}")
    if not (callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end", None))):
        raise ValueError(f"streamer must have put(ids) and end() methods, got {type(streamer).__name__}")


# ----------------------------------------------------------------------------------------------------
# generate
# ----------------------------------------------------------------------------------------------------
def generate(
    model: nn.Module,
    prompts: torch.Tensor | Sequence[Sequence[int]],
    config: GenerationConfig | None = None,
    *,
    tokenizer=None,
    streamer=None,
    **options,
) -> list[list[int]]:
    """Continue each prompt with up to ``max_new_tokens`` tokens; return the new tokens of each prompt.

    Args:
        model: a decoder-only LM: ``model(idx, key_padding_mask=, position_ids=, cache=) -> logits`` and,
            for ``use_cache``, ``model.new_cache(batch_size, max_len)``; ``model.config`` may give
            ``vocab_size``, ``block_size`` and ``position``. It runs in eval mode without gradients
            (its training flag is restored afterwards).
        prompts: a ``(B, T)`` tensor (every row a full prompt) or ``B`` lists of ids of any lengths >= 1.
        config: a :class:`GenerationConfig`; ``options`` (its field names: ``max_new_tokens=``,
            ``do_sample=``, ``temperature=``, ``top_k=``, ``top_p=``, ``min_p=``, ``repetition_penalty=``,
            ``no_repeat_ngram_size=``, ``eos_token_id=``, ``stop_strings=``, ``seed=``, ``use_cache=``,
            ``pad_token_id=``, ``sliding_window=``, ``compile=``, ``vocab_size=``) replace its fields, or make one
            without it.
        tokenizer: used to decode for stop strings; one with fewer tokens than the model's output layer (a
            padded vocabulary) limits the generated ids to its own (``config.vocab_size``, unless given).
        streamer: ``put(ids)`` / ``end()`` object (e.g. :class:`~attnkit.generation.streaming.TextStreamer`),
            fed each kept token; batch size 1 only. Without ``tokenizer``, the streamer's ``tokenizer`` (if it has
            one) limits the generated ids as ``tokenizer`` would, so that every id streamed has text.

    Everything is validated before the model runs. Returns ``B`` lists of new token ids (no prompt, no
    EOS), in prompt order.

    Shape:
        prompts ``(B, T)`` or ``B`` lists -> ``B`` lists of at most ``max_new_tokens`` ids.
    """
    cfg = GenerationConfig.from_options(config, **options)
    cfg.check_for(model, tokenizer)
    # (the streamer's tokenizer must decode every id it is fed: a padded output layer's ids have no text)
    cfg = _tokenizer_vocab(cfg, model, tokenizer if tokenizer is not None else getattr(streamer, "tokenizer", None))
    rows = _prompts_as_lists(prompts, getattr(getattr(model, "config", None), "vocab_size", None))
    B = len(rows)
    _check_streamer(streamer, B)
    T0 = max(len(r) for r in rows)
    needed = _check_context(model, cfg, T0)

    stopper = StoppingCriteria(B, max_new_tokens=cfg.max_new_tokens, eos_token_id=list(cfg.eos_token_id or ()),
                               stop_strings=list(cfg.stop_strings) or None, tokenizer=tokenizer, contexts=rows)
    if not stopper.all_done:  # (max_new_tokens == 0 runs nothing)
        _decode(model, cfg, rows, needed, stopper, streamer)
    if streamer is not None:
        streamer.end()
    return stopper.outputs


def text_vocab_limit(output_size: Any, tokenizer: Any) -> int | None:
    """The tokenizer's size when the model's output layer (``output_size`` ids) is larger, else ``None``: the ids
    past it are padding (``--set vocab_size``) and have no text, so decoding never chooses them."""
    n = getattr(tokenizer, "vocab_size", None)
    return n if is_int(output_size) and is_int(n) and 0 < n < output_size else None


def _tokenizer_vocab(cfg: GenerationConfig, model: nn.Module, tokenizer) -> GenerationConfig:
    """``cfg`` with ``vocab_size`` the tokenizer's when it is not given and the model's output layer is larger."""
    limit = text_vocab_limit(getattr(getattr(model, "config", None), "vocab_size", None), tokenizer)
    return dataclasses.replace(cfg, vocab_size=limit) if cfg.vocab_size is None and limit is not None else cfg


def _decode(model: nn.Module, cfg: GenerationConfig, rows: list[list[int]], needed: int,
            stopper: StoppingCriteria, streamer) -> None:
    """The loop: next logits, pick, record/stream/stop, append, drop finished rows (into ``stopper``)."""
    device = model_device(model)
    generator = None
    if cfg.do_sample and cfg.seed is not None:
        generator = torch.Generator(device=device)
        generator.manual_seed(cfg.seed)
    tokens, pad = left_pad(rows, cfg.pad_token_id, device=device)  # (B, L) each
    active = list(range(len(rows)))  # active[i] = which prompt row i of the current batch belongs to
    active_rows = None  # the same on the device, once a row has left
    # compiled steps: dynamo's recompile limit raised once for the loop (compiled_step then skips its own patch)
    limit = torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT) if cfg.compile else contextlib.nullcontext()
    with eval_mode(model), limit:
        path = _decoding_path(model, cfg, len(rows), needed, tokens.shape[1])
        if path.keeps_batch:
            return _decode_ahead(path, tokens, pad, cfg, generator, stopper, streamer)
        while True:
            next_ids = _pick(path.next_logits(tokens, pad), tokens, pad, cfg, generator, active_rows, len(rows))
            _book(next_ids, active, stopper, streamer)
            if stopper.all_done:
                return
            tokens = torch.cat([tokens, next_ids[:, None]], dim=1)  # (b, L + 1)
            pad = torch.cat([pad, pad.new_zeros(pad.shape[0], 1)], dim=1)  # (b, L + 1): new tokens are real
            done = stopper.done
            keep = [i for i, row in enumerate(active) if not done[row]]
            if len(keep) < len(active):
                index = torch.tensor(keep, dtype=torch.long, device=device)
                tokens, pad = tokens[index], pad[index]  # (b', L + 1)
                path.reorder(index)
                active = [active[i] for i in keep]
                active_rows = torch.tensor(active, dtype=torch.long, device=device)  # (b',)


def _book(next_ids: torch.Tensor, active: list[int], stopper: StoppingCriteria, streamer) -> None:
    """Read a step's ids (the one wait for the device a step), raise on broken logits (-1, see :func:`_pick`), record
    each unfinished row's token, stream it. Shape: next_ids ``(b,)``."""
    finished = stopper.done
    picked = next_ids.tolist()
    if min(picked) < 0:
        bad = [active[i] for i, tok in enumerate(picked) if tok < 0]
        raise FloatingPointError(f"the model's next-token logits hold NaN or +inf, or are -inf for every token (batch "
                                 f"rows {bad}): its weights or inputs are not finite")
    for i, tok in enumerate(picked):
        if finished[active[i]]:
            continue  # (compiled: finished rows stay in the batch, their tokens are ignored)
        if stopper.add(active[i], tok) and streamer is not None:
            streamer.put([tok])


def _decode_ahead(path, tokens: torch.Tensor, pad: torch.Tensor, cfg: GenerationConfig, generator, stopper,
                  streamer) -> None:
    """The loop of a path that keeps every row (compiled decoding), one step ahead: step ``n + 1`` is handed to
    the device before step ``n``'s ids are read, so that on a GPU the host books (and streams, and checks for a
    stop) while the device computes, instead of each waiting for the other. The tokens are the same; when the
    rows stop before ``max_new_tokens`` one step is computed and thrown away. Shape: tokens, pad ``(B, L)``."""
    active = list(range(tokens.shape[0]))
    next_ids = _pick(path.next_logits(tokens, pad), tokens, pad, cfg, generator)  # (B,)
    for step in range(1, cfg.max_new_tokens + 1):
        ahead = None
        if step < cfg.max_new_tokens:  # (after max_new_tokens every row is done: nothing to compute ahead)
            # -1 (NaN logits) is raised on when read; meanwhile a valid id keeps the next step's lookup in range
            tokens = torch.cat([tokens, next_ids.clamp(min=0)[:, None]], dim=1)  # (B, L + 1)
            pad = torch.cat([pad, pad.new_zeros(pad.shape[0], 1)], dim=1)  # (B, L + 1): new tokens are real
            ahead = _pick(path.next_logits(tokens, pad), tokens, pad, cfg, generator)  # (B,)
        _book(next_ids, active, stopper, streamer)
        if stopper.all_done or ahead is None:
            return
        next_ids = ahead
