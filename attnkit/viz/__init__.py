"""Tools to see inside a Transformer: attention weights captured from a running model, and figures.

    from attnkit.viz import attention_maps, plot_attention, save_figure, text_labels

    maps = attention_maps(model, ids)                  # per layer (H, T, T), captured with hooks
    labels = text_labels(tokenizer, ids)               # the characters each token spells in this text
    save_figure(plot_attention(maps[0], query_labels=labels, key_labels=labels), "attn.png")

Modules: :mod:`~attnkit.viz.attention_maps` (capturing), :mod:`~attnkit.viz.predictions` (next-token
probabilities), :mod:`~attnkit.viz.trace` (every module's shapes, parameters and masks, in forward order),
:mod:`~attnkit.viz.attention_page` (the interactive, self-contained HTML page: ``lm_attention_page``,
``mt_attention_page``, ``write_page``),
:mod:`~attnkit.viz.labels` (readable labels for tokens: byte-level pieces decoded to the characters they spell), :mod:`~attnkit.viz.plots` (figures).
The same figures are on the command line: ``attnkit viz positions|mask|attention|predict|params`` (``attention
--html`` for the page) and ``attnkit trace``.
"""

from .attention_maps import (
    AttentionCapture,
    Seq2SeqAttention,
    attention_maps,
    capture_attention,
    select_attention,
    seq2seq_attention_maps,
)
from .attention_page import lm_attention_page, mt_attention_page, render_attention_page, write_page
from .labels import text_labels, token_labels, token_pieces, token_titles, visible
from .plots import (
    MASK_KINDS,
    make_mask,
    plot_attention,
    plot_mask,
    plot_parameters,
    plot_positional_encoding,
    plot_predictions,
    save_figure,
)
from .predictions import next_token_predictions
from .trace import Trace, TraceRow, trace

__all__ = [
    "AttentionCapture",
    "MASK_KINDS",
    "Seq2SeqAttention",
    "Trace",
    "TraceRow",
    "attention_maps",
    "capture_attention",
    "lm_attention_page",
    "make_mask",
    "mt_attention_page",
    "next_token_predictions",
    "plot_attention",
    "plot_mask",
    "plot_parameters",
    "plot_positional_encoding",
    "plot_predictions",
    "render_attention_page",
    "save_figure",
    "select_attention",
    "seq2seq_attention_maps",
    "text_labels",
    "token_labels",
    "token_pieces",
    "token_titles",
    "trace",
    "visible",
    "write_page",
]
