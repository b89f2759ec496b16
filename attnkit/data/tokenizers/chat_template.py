"""Chat templates: a conversation rendered into the prompt text a chat model was trained on.

A chat template is Jinja code shipped with a model's tokenizer (``tokenizer_config.json``, a GGUF file's
``tokenizer.chat_template``), so it lives with the tokenizers. There are no tensor axes in this file.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["apply_chat_template"]


def _raise_exception(message: str):
    # templates call raise_exception("...") to reject bad conversations (e.g. roles out of order)
    raise ValueError(f"the chat template rejected the messages: {message}")


def apply_chat_template(info: Any, messages: Sequence[dict[str, str]], *,
                        add_generation_prompt: bool = True, bos_token: str = "", eos_token: str = "") -> str:
    """Render a conversation with the model's own chat template into the prompt text.

    The template is Jinja code that came with the weights, so it is treated as untrusted: it runs in Jinja's
    sandbox (``ImmutableSandboxedEnvironment``), which forbids touching Python internals. Rendering options
    follow Hugging Face ``transformers`` (``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols`` extension,
    a ``raise_exception`` helper), so the result equals ``tokenizer.apply_chat_template(..., tokenize=False)``.

    Args:
        info: the template string itself, or anything with a ``chat_template`` attribute (a pretrained model's
            :class:`~attnkit.interop.pretrained.PretrainedInfo`) and optionally a ``name``.
        messages: ``[{"role": "system"|"user"|"assistant", "content": "..."}, ...]``.
        add_generation_prompt: end with the header of an assistant turn, so the model answers next.
        bos_token, eos_token: strings the template may refer to.

    Returns:
        the prompt text; encode it with the model's tokenizer (control tokens such as ``<|im_start|>`` are
        recognised as single ids).

    Raises:
        ValueError: no chat template, or malformed messages.
    """
    template = info if isinstance(info, str) else getattr(info, "chat_template", None)
    if not template:
        name = getattr(info, "name", "this model")
        raise ValueError(f"{name} has no chat template; prompt it with plain text instead of chat messages")
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError(f"messages must be a non-empty list of {{'role': ..., 'content': ...}} dicts, got {messages!r}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"message {i} must be a dict with string 'role' and 'content', got {m!r}")
    try:
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as err:  # pragma: no cover - jinja2 comes with transformers and is a dependency
        raise ImportError("rendering chat templates needs the jinja2 package (pip install jinja2)") from err
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.globals["raise_exception"] = _raise_exception
    return env.from_string(template).render(
        messages=[dict(m) for m in messages],
        add_generation_prompt=add_generation_prompt,
        bos_token=bos_token,
        eos_token=eos_token,
    )
