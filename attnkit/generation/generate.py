"""Text generation for decoder-only language models (``attnkit.models.gpt.GPT`` or anything shaped like it).

Axis legend: ``B`` batch (prompts), ``T`` tokens fed to the model in one call, ``L`` tokens of a row so far
(prompt, left padding and generated), ``S`` key positions (cached + new), ``V`` vocabulary.

One loop, one token per sequence per step::

    logits = model(tokens)[:, -1]                 # (B, V) next-token logits
    logits = process(logits)                      # repetition penalty, temperature, top-k, top-p
    next = argmax(logits) or sample(softmax(logits))
    tokens = cat(tokens, next)                    # and stop the sequences that are done

**Batches of prompts of different lengths** are padded on the *left*, so every row's next token is in
the last column::

    prompt A (3 tokens):  [pad pad  a1  a2  a3]     key_padding_mask: [T T F F F]
    prompt B (5 tokens):  [ b1  b2  b3  b4  b5]                       [F F F F F]
    position_ids A:       [  0   0   0   1   2]     (each row counts its own tokens from 0)

The padding keys are masked out and the positions restart at 0 for every row, so learned positions and
RoPE see exactly what they would see for the prompt alone: a row gives the same tokens in a batch as on
its own (up to float rounding).

**KV cache** (``use_cache=True``): the prompt is fed once ("prefill"), its keys/values are stored, and
each later step feeds only the one new token. Without the cache, every step feeds the whole sequence
again: slower, but it needs no cache and lets learned-position models slide past ``block_size``.
Both give the same tokens.

**Context length.** A model with *learned* positions has no embedding for positions ``>= block_size``.
Generating needs ``L = T_prompt + max_new_tokens - 1`` positions (the last new token is never fed back).
If that exceeds ``block_size``:

* ``use_cache=False``: the context is cropped to its last ``block_size`` tokens (as nanoGPT does) and
  positions are recounted from 0 in the window;
* ``use_cache=True``: ``ValueError`` before anything runs (a cache cannot drop its oldest positions
  without recomputing them); use ``use_cache=False`` or fewer tokens.

RoPE, sinusoidal and position-free models have no such table and are not cropped by default (they
extrapolate past ``block_size``, with the cache or without); ``sliding_window=True`` (with
``use_cache=False``) crops them too, so the model never sees a context longer than it was trained on.

**Stopping** per sequence (see :mod:`attnkit.generation.stopping`): at an ``eos_token_id`` (not included
in the output), after the token that completes a stop string (included), or after ``max_new_tokens``.
Finished rows leave the batch (``cache.reorder`` keeps the others), so they cost nothing afterwards.

**Sampling** with ``seed`` uses its own ``torch.Generator``: the same seed gives the same tokens, whatever
the global RNG state, and the global RNG is not consumed. ``seed=None`` draws from the global RNG.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from . import processors as P
from .compiled import SLOT_MULTIPLE, check_compilable, compiled_step
from .stopping import StoppingCriteria, check_max_new_tokens, normalize_eos_token_id, normalize_stop_strings

__all__ = ["generate", "left_pad", "position_ids_from_padding"]


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
            if isinstance(t, bool) or not isinstance(t, int) or t < 0 or (vocab_size is not None and t >= vocab_size):
                hi = "V" if vocab_size is None else vocab_size
                raise ValueError(f"prompt {b}: token ids must be ints in [0, {hi}), got {t!r}")
    return rows


def _check_optional_seed(seed) -> int | None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"seed must be None or an int, got {seed!r}")
    return seed


# ----------------------------------------------------------------------------------------------------
# generate
# ----------------------------------------------------------------------------------------------------
def generate(
    model: nn.Module,
    prompts: torch.Tensor | Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
    eos_token_id: int | Sequence[int] | None = None,
    stop_strings: str | Sequence[str] | None = None,
    tokenizer=None,
    seed: int | None = None,
    use_cache: bool = True,
    pad_token_id: int = 0,
    streamer=None,
    sliding_window: bool = False,
    compile: bool = False,
) -> list[list[int]]:
    """Continue each prompt with up to ``max_new_tokens`` tokens; return the new tokens of each prompt.

    Args:
        model: a decoder-only LM: ``model(idx, key_padding_mask=, position_ids=, cache=) -> logits`` and,
            for ``use_cache``, ``model.new_cache(batch_size, max_len)``; ``model.config`` may give
            ``vocab_size``, ``block_size`` and ``position``. It runs in eval mode without gradients
            (its training flag is restored afterwards).
        prompts: a ``(B, T)`` tensor (every row a full prompt) or ``B`` lists of ids of any lengths >= 1.
        max_new_tokens: the most tokens to generate per prompt (>= 0).
        do_sample: ``False`` = greedy (argmax); ``True`` = sample from the processed distribution.
        temperature, top_k, top_p: reshape the distribution when sampling (validated always, used only
            when ``do_sample``; they cannot change the argmax).
        repetition_penalty: CTRL penalty on tokens in the prompt or generated so far (greedy and sampling).
        eos_token_id: an id or ids that end a sequence; the EOS itself is not returned. ``None`` = no EOS.
        stop_strings: text that ends a sequence once the decoded generated text contains it; the
            completing token is returned. Needs ``tokenizer``.
        tokenizer: used to decode for stop strings.
        seed: seeds a private ``torch.Generator`` for sampling (``None`` = global RNG).
        use_cache: prefill once then one token per step with a KV cache (default) or recompute everything.
        pad_token_id: the id used for left padding (masked, so its value does not matter, but it must be a
            valid id).
        streamer: ``put(ids)`` / ``end()`` object (e.g. :class:`~attnkit.generation.streaming.TextStreamer`),
            fed each kept token; batch size 1 only.
        sliding_window: with ``use_cache=False``, feed at most the last ``block_size`` tokens for every kind of
            position (learned positions always slide).
        compile: run the decoding steps (not the prefill) through ``torch.compile`` on fixed shapes
            (:mod:`attnkit.generation.compiled`): faster per token once compiled, but the first step
            compiles for tens of seconds. Needs ``use_cache=True`` and a model whose forward takes
            ``cache_position`` (attnkit's GPT). Same tokens as without it (up to float rounding).

    Returns:
        ``B`` lists of new token ids (no prompt, no EOS), in prompt order.

    Shape:
        prompts ``(B, T)`` or ``B`` lists -> ``B`` lists of at most ``max_new_tokens`` ids.
    """
    # ---- validate everything before running the model ---------------------------------------------
    config = getattr(model, "config", None)
    V = getattr(config, "vocab_size", None)
    block_size = getattr(config, "block_size", None)
    learned_positions = getattr(config, "position", None) == "learned"

    max_new_tokens = check_max_new_tokens(max_new_tokens)
    if not isinstance(do_sample, bool):
        raise ValueError(f"do_sample must be a bool, got {do_sample!r}")
    P.check_temperature(temperature)
    if top_k is not None:
        P.check_top_k(top_k)
    if top_p is not None:
        P.check_top_p(top_p)
    P.check_repetition_penalty(repetition_penalty)
    eos_ids = normalize_eos_token_id(eos_token_id)
    stops = normalize_stop_strings(stop_strings, tokenizer)
    seed = _check_optional_seed(seed)
    if not isinstance(use_cache, bool):
        raise ValueError(f"use_cache must be a bool, got {use_cache!r}")
    if not isinstance(sliding_window, bool) or (sliding_window and use_cache):
        raise ValueError(f"sliding_window must be a bool and needs use_cache=False, got sliding_window="
                         f"{sliding_window!r}, use_cache={use_cache!r}")
    if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, int) or pad_token_id < 0 or (
        V is not None and pad_token_id >= V
    ):
        raise ValueError(f"pad_token_id must be an int in [0, {V if V is not None else 'V'}), got {pad_token_id!r}")
    rows = _prompts_as_lists(prompts, V)
    B = len(rows)
    if streamer is not None and B != 1:
        raise ValueError(f"a streamer prints one sequence: batch size must be 1, got {B}")
    if streamer is not None and not (callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end", None))):
        raise ValueError(f"streamer must have put(ids) and end() methods, got {type(streamer).__name__}")
    if not isinstance(compile, bool) or (compile and not use_cache):
        raise ValueError(f"compile must be a bool and needs use_cache=True, got compile={compile!r}, "
                         f"use_cache={use_cache!r}")
    if compile:
        check_compilable(model)
    if use_cache and not callable(getattr(model, "new_cache", None)):
        raise ValueError(f"use_cache=True needs model.new_cache(batch_size, max_len); "
                         f"{type(model).__name__} has none (pass use_cache=False)")

    T0 = max(len(r) for r in rows)
    needed = T0 + max_new_tokens - 1  # positions the model must see: the last new token is never fed
    if use_cache and learned_positions and block_size is not None and needed > block_size and max_new_tokens > 0:
        raise ValueError(
            f"prompt length {T0} + max_new_tokens {max_new_tokens} - 1 = {needed} positions exceed the learned "
            f"positions' block_size = {block_size}; use use_cache=False (crops the context to the last "
            f"{block_size} tokens) or at most {block_size - T0 + 1} new tokens"
        )

    stopper = StoppingCriteria(B, max_new_tokens=max_new_tokens, eos_token_id=sorted(eos_ids),
                               stop_strings=list(stops) or None, tokenizer=tokenizer)
    if stopper.all_done:  # max_new_tokens == 0
        if streamer is not None:
            streamer.end()
        return stopper.outputs

    device = model_device(model)
    generator = None
    if do_sample and seed is not None:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed)

    tokens, pad = left_pad(rows, pad_token_id, device=device)  # (B, L) each
    active = list(range(B))  # active[i] = which prompt row i of the current batch belongs to

    max_len = max(needed, T0)
    if compile:  # round up, so that nearby lengths share one compilation (never past learned positions)
        rounded = -(-max_len // SLOT_MULTIPLE) * SLOT_MULTIPLE
        max_len = min(rounded, block_size) if learned_positions and block_size is not None else rounded
    with eval_mode(model):
        cache = model.new_cache(B, max_len=max_len) if use_cache else None
        fed = 0  # columns of `tokens` already in the cache
        padded = bool(pad.any())  # new tokens are never padding, so this holds for every step
        while True:
            # ---- 1. next-token logits (b, V) for the b active rows --------------------------------
            if compile and fed:
                # one new column through the compiled step: it goes into cache slot `fed`, and the mask
                # covers all max_len slots (the ones after `fed` are masked inside GPT.forward)
                L = tokens.shape[1]
                slot_pad = torch.nn.functional.pad(pad, (0, max_len - L)) if padded else None  # (b, max_len)
                # fresh (b, 1) tensors with their own strides, not slices (see compiled_step)
                new = tokens[:, -1:].clone(memory_format=torch.contiguous_format)  # (b, 1)
                positions = position_ids_from_padding(pad)[:, -1:].clone(memory_format=torch.contiguous_format)
                slot = torch.tensor([fed], dtype=torch.long, device=device)  # (1,)
                logits = compiled_step(model, new, slot_pad, positions, cache, slot)[:, None]  # (b, 1, V)
                fed = L
            elif cache is not None:
                positions = position_ids_from_padding(pad)  # (b, L)
                # prefill feeds the whole prompt; afterwards only the newest column. The mask covers
                # every key: the cached ones and the new ones.
                logits = model(tokens[:, fed:], key_padding_mask=pad, position_ids=positions[:, fed:], cache=cache)
                fed = tokens.shape[1]
            else:
                ctx, ctx_pad = tokens, pad
                if (learned_positions or sliding_window) and block_size is not None and ctx.shape[1] > block_size:
                    ctx, ctx_pad = ctx[:, -block_size:], ctx_pad[:, -block_size:]  # crop: (b, block_size)
                logits = model(ctx, key_padding_mask=ctx_pad, position_ids=position_ids_from_padding(ctx_pad))
            logits = logits[:, -1, :].float()  # (b, V): only the last position predicts the next token

            # ---- 2. pick the next token of every active row ---------------------------------------
            logits = P.process_logits(
                logits,
                input_ids=tokens, ignore_mask=pad, repetition_penalty=repetition_penalty,
                temperature=temperature if do_sample else 1.0,
                top_k=top_k if do_sample else None,
                top_p=top_p if do_sample else None,
            )
            if do_sample:
                probs = torch.softmax(logits, dim=-1)  # (b, V); filtered tokens have probability 0
                next_ids = torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)  # (b,)
            else:
                next_ids = logits.argmax(dim=-1)  # (b,)

            # ---- 3. record, stream, stop ------------------------------------------------------------
            finished = stopper.done
            for i, tok in enumerate(next_ids.tolist()):
                if finished[active[i]]:
                    continue  # (compile: finished rows stay in the batch, their tokens are ignored)
                kept = stopper.add(active[i], tok)
                if kept and streamer is not None:
                    streamer.put([tok])
            if stopper.all_done:
                break

            # ---- 4. append the new column and drop the rows that stopped ----------------------------
            tokens = torch.cat([tokens, next_ids[:, None]], dim=1)  # (b, L + 1)
            pad = torch.cat([pad, pad.new_zeros(pad.shape[0], 1)], dim=1)  # (b, L + 1): new tokens are real
            done = stopper.done
            keep = [i for i, row in enumerate(active) if not done[row]]
            if len(keep) < len(active) and not compile:  # (compiled steps keep B fixed)
                index = torch.tensor(keep, dtype=torch.long, device=device)
                tokens, pad = tokens[index], pad[index]  # (b', L + 1)
                if cache is not None:
                    cache.reorder(index)
                active = [active[i] for i in keep]

    if streamer is not None:
        streamer.end()
    return stopper.outputs
