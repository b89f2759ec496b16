"""Chat templates: a conversation rendered into the prompt text a chat model was trained on.

A chat template is Jinja code shipped with a model's tokenizer (``tokenizer_config.json``, a GGUF file's
``tokenizer.chat_template``), so it lives with the tokenizers. There are no tensor axes in this file.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any, Sequence

__all__ = ["ChatTemplateError", "apply_chat_template", "check_chat_template"]


class ChatTemplateError(ValueError):
    """A model's chat template that cannot be used: not a string, not valid Jinja, or failing when rendered
    (including the sandbox refusing what it does). A ``ValueError``, so the CLI reports it in one line."""


def _raise_exception(message: str):
    # templates call raise_exception("...") to reject bad conversations (e.g. roles out of order)
    raise ValueError(f"the chat template rejected the messages: {message}")


def check_chat_template(template: Any, where: str) -> str | None:
    """``template`` as a chat template: a non-empty string, or None for none (``None`` or ``""``).

    Raises:
        ChatTemplateError: anything else (a number, a list, ...), named with ``where`` (e.g. the metadata key).
    """
    if template is None or template == "":
        return None
    if not isinstance(template, str):
        raise ChatTemplateError(f"{where} must be a string of Jinja code, got {type(template).__name__} "
                                f"{str(template)[:60]!r}")
    return template


def _to_json(value: Any, ensure_ascii: bool = False, indent: int | None = None,
             separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """The ``tojson`` filter as transformers defines it: plain ``json.dumps`` (Jinja's own escapes ``<``, ``>``,
    ``&`` and ``'`` for HTML, writes non-ASCII as ``\\u`` escapes and sorts the keys: another prompt)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    # Llama 3's templates write today's date into the system turn (a fixed date when this is undefined)
    return datetime.now().strftime(fmt)


@functools.cache  # one class for every rendering (jinja2 is imported only when a template is rendered)
def _generation_tag() -> type:
    """The ``{% generation %}...{% endgeneration %}`` block of transformers (it marks the assistant's text for a
    training mask); rendering it gives its body unchanged."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class GenerationTag(Extension):
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    return GenerationTag


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}" if text else type(err).__name__


def apply_chat_template(info: Any, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True,
                        bos_token: str | None = "", eos_token: str | None = "") -> str:
    """Render a conversation with the model's own chat template into the prompt text.

    The template is Jinja code that came with the weights, so it is treated as untrusted: it runs in Jinja's
    sandbox (``ImmutableSandboxedEnvironment``), which forbids touching Python internals. Rendering follows
    Hugging Face ``transformers`` (``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols`` extension, a
    ``raise_exception`` helper, its ``tojson`` filter, ``strftime_now``, the ``{% generation %}`` block,
    ``tools=None``, ``documents=None``), so given the tokenizer's special-token
    strings the result equals ``tokenizer.apply_chat_template(..., tokenize=False)``.

    Args:
        info: the template string itself, or anything with a ``chat_template`` attribute (a pretrained model's
            :class:`~attnkit.interop.pretrained.PretrainedInfo`) and optionally a ``name``.
        messages: ``[{"role": "system"|"user"|"assistant", "content": "..."}, ...]``.
        add_generation_prompt: end with the header of an assistant turn, so the model answers next.
        bos_token, eos_token: the tokenizer's begin/end-of-sequence token strings, which templates may use
            (e.g. Llama 3's ``{{ bos_token }}`` at the start; :meth:`attnkit.checkpoints.LoadedModel.format_chat`
            passes its tokenizer's); None leaves one undefined, as ``transformers`` does for a tokenizer without it.

    Returns:
        the prompt text; encode it with the model's tokenizer (control tokens such as ``<|im_start|>`` are
        recognised as single ids).

    Raises:
        ChatTemplateError: the template is not a string, is not valid Jinja, or fails when rendered (an undefined
            value used, something the sandbox forbids, ...). A ``ValueError``.
        ValueError: no chat template, or malformed messages (also when the template rejects them).
    """
    name = getattr(info, "name", None) or "this model"
    template = info if isinstance(info, str) else getattr(info, "chat_template", None)
    template = check_chat_template(template, f"the chat template of {name}")
    if template is None:
        raise ValueError(f"{name} has no chat template; prompt it with plain text instead of chat messages")
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError(f"messages must be a non-empty list of {{'role': ..., 'content': ...}} dicts, got {messages!r}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"message {i} must be a dict with string 'role' and 'content', got {m!r}")
    for key, token in (("bos_token", bos_token), ("eos_token", eos_token)):
        if token is not None and not isinstance(token, str):
            raise ValueError(f"{key} must be a string or None, got {type(token).__name__}")
    try:
        from jinja2 import TemplateError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as err:  # pragma: no cover - jinja2 comes with transformers and is a dependency
        raise ImportError("rendering chat templates needs the jinja2 package (pip install jinja2)") from err
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols, _generation_tag()])
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
    env.filters["tojson"] = _to_json
    try:
        compiled = env.from_string(template)
    except TemplateError as err:  # TemplateSyntaxError (and friends): the template's own fault
        raise ChatTemplateError(f"the chat template of {name} is not valid Jinja ({_one_line(err)})") from err
    specials = {k: v for k, v in (("bos_token", bos_token), ("eos_token", eos_token)) if v is not None}
    try:
        return compiled.render(messages=[dict(m) for m in messages], tools=None, documents=None,
                               add_generation_prompt=add_generation_prompt, **specials)
    except TemplateError as err:  # UndefinedError, SecurityError (the sandbox at work), TemplateRuntimeError
        raise ChatTemplateError(f"the chat template of {name} failed to render ({_one_line(err)})") from err
    except (TypeError, ArithmeticError, LookupError, AttributeError, RecursionError) as err:
        raise ChatTemplateError(f"the chat template of {name} failed to render ({_one_line(err)})") from err
