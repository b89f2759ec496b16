"""``chat``: a conversation with a model in its chat template (``attnkit sample --interactive``), as Hugging Face's
``transformers chat`` and llama.cpp's conversation mode hold one.

    from attnkit.api import chat
    chat(model="smollm2-135m-instruct", system="Answer in one sentence.")   # user turns from stdin, answers to stdout

Each line read is a user turn; the model answers it after every earlier turn of the conversation (the whole
conversation is rendered with the model's chat template and encoded again each turn, so what it sees is what
``transformers``' ``apply_chat_template`` makes of the same messages), streaming its answer. Answer ``i`` is drawn
with ``seed + i`` when a seed is given. Blank lines are skipped; ``/clear`` starts the conversation afresh and
``/exit`` (or the end of the input: Ctrl-D) ends it. On a terminal, Ctrl-C during an answer stops that answer (the
turn is left out of the conversation) and Ctrl-C at the ``>>>`` sign ends the conversation. When the conversation
and a full answer (``max_new_tokens``) no longer fit in the model's context, its oldest exchanges are left out, with
a note. There are no tensor axes in this file.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from attnkit.checks import SEED_MAX

from .options import Log, default_log
from .sampling import SampleOptions, Sampler

__all__ = ["chat", "CHAT_COMMANDS"]

CHAT_COMMANDS = {"/clear": "start the conversation afresh", "/exit": "end it (so does the end of the input)"}


def _fit(sampler: Sampler, text: str, history: list[dict[str, str]], log: Log) -> list[dict[str, str]]:
    """``history`` less its oldest exchanges (a user turn and its answer) until ``text`` after it and a full answer
    fit in the model's context (all of them if even the turn alone does not: it is then sampled over a sliding
    window, with :class:`Sampler`'s note)."""
    block = getattr(getattr(sampler.model, "config", None), "block_size", None)
    budget = None if block is None else block - sampler.options.max_new_tokens
    kept = history
    while kept and budget is not None and len(sampler.chat_ids(text, kept)) > budget:
        kept = kept[2:]
    if len(kept) < len(history):
        log(f"note: the conversation no longer fits the model's context of {block} tokens with a full answer "
            f"({sampler.options.max_new_tokens}); its oldest {(len(history) - len(kept)) // 2} exchange(s) are "
            f"left out")
    return kept


def chat(options: SampleOptions | None = None, *, input: TextIO | None = None, output: TextIO | None = None,
         log: Log | None = None, **kwargs: Any) -> list[dict[str, str]]:
    """Hold a conversation (see the module docstring): user turns read from ``input`` (default stdin; with
    ``prompt`` given, that is the first turn), answers streamed to ``output`` (default stdout). ``options`` are
    :class:`SampleOptions` (``chat`` is implied, ``num_samples`` must be 1); a ``>>> `` prompt is shown when
    ``input`` is a terminal. Returns the conversation kept at the end (``{"role", "content"}`` dicts, oldest
    first; the system turn is not in it)."""
    o = SampleOptions.make(options, {"chat": True, **kwargs})  # (a system turn needs chat)
    if o.num_samples != 1:
        raise ValueError(f"chat answers each turn once: --num-samples must be 1, got {o.num_samples}")
    input = sys.stdin if input is None else input
    output = sys.stdout if output is None else output
    for name, stream, method in (("input", input, "readline"), ("output", output, "write")):
        if not callable(getattr(stream, method, None)):
            raise ValueError(f"{name} must be a text stream with a {method} method, got {stream!r:.60}")
    log = default_log(log)
    # the prompt is the first turn below; the empty one the Sampler is made with is never sampled: no notes of it
    sampler = Sampler(o.replace(prompt=""), log=lambda line: None)
    terminal = bool(getattr(input, "isatty", lambda: False)())
    history: list[dict[str, str]] = []
    pending = [o.prompt] if o.prompt else []
    turn = 0
    while True:
        if pending:
            text = pending.pop()
        else:
            if terminal:
                output.write(">>> ")
                output.flush()
            line = input.readline()
            if not line:  # the end of the input
                break
            text = line.rstrip("\r\n")
        if not text.strip():
            continue
        if text.strip() == "/exit":
            break
        if text.strip() == "/clear":
            history = []
            continue
        if o.seed is not None and o.seed + turn > SEED_MAX:
            raise ValueError(f"answer {turn + 1} would be drawn with --seed + {turn} = {o.seed + turn}, past 2**64 - 1 "
                             f"(the largest seed torch takes): give a smaller --seed")
        history = _fit(sampler, text, history, log)
        try:
            answer = sampler.reply(text, history, index=turn, stream=output, log=log)
        except KeyboardInterrupt:
            if not terminal:  # (a script's Ctrl-C ends it, as any command's does)
                raise
            output.write("\n")
            log("note: answer interrupted; the turn is left out of the conversation (Ctrl-C at >>> or Ctrl-D ends it)")
            continue
        history = [*history, {"role": "user", "content": text}, {"role": "assistant", "content": answer}]
        turn += 1
    return history
