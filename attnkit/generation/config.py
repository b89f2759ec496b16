"""``GenerationConfig``: every decoding option of :func:`~attnkit.generation.generate`, checked at once.

The options are validated when the config is made (a ``ValueError`` naming the option, what it must be
and what it got), so a caller can build it before any work or output: ``attnkit sample --top-p 2``
fails before it prints the prompt. What needs the model (ids below the vocabulary size, a cache, a
compilable forward) or the tokenizer (stop strings) is checked by :meth:`GenerationConfig.check_for`,
which ``generate`` calls before it runs the model. JSON round trip: :meth:`to_dict` / :meth:`from_dict`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from attnkit.checks import SEED_MAX, SEED_MIN, check_bool, check_int, check_seed
from . import processors as P
from .stopping import check_max_new_tokens, normalize_eos_token_id, normalize_stop_strings

__all__ = ["GenerationConfig", "SEED_MIN", "SEED_MAX"]

def _check_stop_strings(stop_strings: Any) -> tuple[str, ...]:
    if stop_strings is None:
        return ()
    strings = [stop_strings] if isinstance(stop_strings, str) else stop_strings
    if not isinstance(strings, (list, tuple)) or not all(isinstance(s, str) and s for s in strings):
        raise ValueError(f"stop_strings must be None, a non-empty str or a list of them, got {stop_strings!r}")
    return tuple(strings)


@dataclass(frozen=True)
class GenerationConfig:
    """How to decode: length, greedy or sampled, filters, stopping, cache and context handling.

    Attributes:
        max_new_tokens: the most tokens to generate per prompt (>= 0).
        do_sample: ``False`` = greedy (argmax); ``True`` = sample from the processed distribution.
        temperature, top_k, top_p, min_p: reshape the distribution when sampling (validated always, used only
            when ``do_sample``; they cannot change the argmax). ``min_p`` (``0 <= min_p <= 1``, ``None`` = off)
            keeps the tokens at least ``min_p`` times as likely as the most likely one, after temperature, top-k
            and top-p (:func:`~attnkit.generation.processors.min_p_filter`).
        repetition_penalty: CTRL penalty on tokens in the prompt or generated so far (greedy and sampling).
        no_repeat_ngram_size: ``n > 0``: never generate a token that repeats an n-gram of the prompt and the
            tokens so far (greedy and sampling; :func:`~attnkit.generation.processors.no_repeat_ngram_filter`).
        eos_token_id: an id or ids that end a sequence (kept as a sorted tuple); ``None`` = no EOS.
        stop_strings: text that ends a sequence once the decoded generated text contains it (needs a
            tokenizer); kept as a tuple.
        seed: seeds a private ``torch.Generator`` for sampling (``None`` = global RNG).
        use_cache: prefill once, then one token per step with a KV cache; ``False`` recomputes everything.
        pad_token_id: the id used for left padding (masked; it must still be a valid id).
        sliding_window: never show the model more than ``block_size`` tokens. Without the cache the
            context is cropped at every step; with it, half the window is dropped when it is full (RoPE
            models shift the cache, others re-fill it once). See :mod:`attnkit.generation.generate`.
        compile: run the decoding steps through ``torch.compile`` (needs ``use_cache`` and no
            ``sliding_window``).
        vocab_size: generate only ids below this (a model whose output layer is padded beyond its tokenizer's
            vocabulary: the padding ids decode to nothing). ``None``: every id of the model's output, or, when
            :func:`~attnkit.generation.generate` is given a tokenizer with fewer tokens, the tokenizer's.
    """

    max_new_tokens: int
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    eos_token_id: int | tuple[int, ...] | None = None
    stop_strings: tuple[str, ...] = ()
    seed: int | None = None
    use_cache: bool = True
    pad_token_id: int = 0
    sliding_window: bool = False
    compile: bool = False
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        check_max_new_tokens(self.max_new_tokens)
        for name in ("do_sample", "use_cache", "sliding_window", "compile"):
            check_bool(name, getattr(self, name))
        P.check_temperature(self.temperature)
        if self.top_k is not None:
            P.check_top_k(self.top_k)
        if self.top_p is not None:
            P.check_top_p(self.top_p)
        if self.min_p is not None:
            P.check_min_p(self.min_p)
        P.check_repetition_penalty(self.repetition_penalty)
        P.check_no_repeat_ngram_size(self.no_repeat_ngram_size)
        eos = normalize_eos_token_id(self.eos_token_id)
        object.__setattr__(self, "eos_token_id", tuple(sorted(eos)) if eos else None)
        object.__setattr__(self, "stop_strings", _check_stop_strings(self.stop_strings))
        check_seed("seed", self.seed)
        check_int("pad_token_id", self.pad_token_id, minimum=0)
        check_int("vocab_size", self.vocab_size, minimum=1, allow_none=True)
        if self.compile and (not self.use_cache or self.sliding_window):
            raise ValueError(f"compile=True needs use_cache=True and sliding_window=False, got use_cache="
                             f"{self.use_cache!r}, sliding_window={self.sliding_window!r}")

    # ---- construction ------------------------------------------------------------------------------
    @classmethod
    def from_options(cls, config: GenerationConfig | None = None, **options: Any) -> GenerationConfig:
        """``config`` with ``options`` replacing its fields (or a new config from ``options`` alone)."""
        if config is not None and not isinstance(config, GenerationConfig):
            raise ValueError(f"config must be a GenerationConfig, got {type(config).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise ValueError(f"unknown generation option(s) {unknown}; expected some of {sorted(names)}")
        if config is not None:
            return dataclasses.replace(config, **options)
        if "max_new_tokens" not in options:
            raise ValueError("max_new_tokens is required (an int >= 0)")
        return cls(**options)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["eos_token_id"] = None if self.eos_token_id is None else list(self.eos_token_id)
        out["stop_strings"] = list(self.stop_strings)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GenerationConfig:
        if not isinstance(data, dict):
            raise ValueError(f"a generation config must be a dict, got {type(data).__name__}")
        return cls.from_options(**data)

    # ---- what needs the model ----------------------------------------------------------------------
    def check_for(self, model: Any, tokenizer: Any = None) -> None:
        """Raise ``ValueError`` if this config cannot run on ``model`` (with ``tokenizer``)."""
        from .compiled import check_compilable  # (imports torch's compiler helpers lazily)

        V = getattr(getattr(model, "config", None), "vocab_size", None)
        if V is not None and self.pad_token_id >= V:
            raise ValueError(f"pad_token_id must be an int in [0, {V}), got {self.pad_token_id}")
        if V is not None and self.vocab_size is not None and self.vocab_size > V:
            raise ValueError(f"vocab_size must be at most the model's vocab_size = {V}, got {self.vocab_size}")
        normalize_stop_strings(self.stop_strings or None, tokenizer)  # (stop strings need a tokenizer)
        if self.use_cache and not callable(getattr(model, "new_cache", None)):
            raise ValueError(f"use_cache=True needs model.new_cache(batch_size, max_len); "
                             f"{type(model).__name__} has none (pass use_cache=False)")
        if self.compile:
            check_compilable(model)
