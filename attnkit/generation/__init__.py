"""Decoding: ``generate`` for decoder-only language models, greedy and beam search for encoder-decoders.

* :func:`generate` (``generate.py``) -- greedy or sampled continuation of a batch of prompts.
* :class:`GenerationConfig` (``config.py``) -- its options, validated before any work.
* :mod:`processors` -- temperature, top-k, top-p, min-p, repetition penalty on ``(B, V)`` logits.
* :mod:`stopping` -- EOS, stop strings and length limits, per sequence.
* :class:`TextStreamer` (``streaming.py``) -- print text as it is generated.
* :func:`use_decoding_layout` (``decoding_layout.py``) -- store Linear weights transposed for faster decoding.
* :func:`greedy_search` (``seq2seq.py``) and :func:`beam_search` (``beam_search.py``) -- translation.
"""

from .beam_search import Hypothesis, beam_search, beam_search_hypotheses, length_penalty_factor
from .decoding_layout import is_decoding_layout, use_decoding_layout, use_training_layout
from .config import GenerationConfig
from .generate import generate
from .processors import (
    apply_repetition_penalty,
    apply_temperature,
    min_p_filter,
    process_logits,
    top_k_filter,
    top_p_filter,
)
from .seq2seq import greedy_search
from .stopping import StoppingCriteria
from .streaming import TextStreamer

__all__ = [
    "generate",
    "GenerationConfig",
    "use_decoding_layout",
    "use_training_layout",
    "is_decoding_layout",
    "greedy_search",
    "beam_search",
    "beam_search_hypotheses",
    "Hypothesis",
    "length_penalty_factor",
    "apply_repetition_penalty",  # the processors, in the order process_logits applies them
    "apply_temperature",
    "top_k_filter",
    "top_p_filter",
    "min_p_filter",
    "process_logits",
    "StoppingCriteria",
    "TextStreamer",
]
