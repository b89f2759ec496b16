"""Chat templates (attnkit.data.tokenizers.chat_template): rendered as transformers renders them, and every bad
template refused with one ``ValueError`` (``ChatTemplateError``) instead of a Jinja or Python traceback."""

from __future__ import annotations

import pytest

from attnkit.data.tokenizers.chat_template import ChatTemplateError, apply_chat_template, check_chat_template

USER = [{"role": "user", "content": "Hi"}]
# Llama-3 style: the first turn starts with bos_token; the end of a turn is eos_token
BOS_TEMPLATE = ("{% for m in messages %}{% if loop.index0 == 0 %}{{ bos_token }}{% endif %}"
                "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Mistral style: a tools block when tools are given (transformers passes tools=None)
TOOLS_TEMPLATE = ("{%- for m in messages %}{%- if tools is not none and loop.last %}[TOOLS]{{ tools }}[/TOOLS]"
                  "{%- endif %}{%- if documents is not none %}[DOCS]{%- endif %}[INST]{{ m['content'] }}[/INST]"
                  "{%- endfor %}")


@pytest.mark.parametrize("template, shown", [(7, "int"), (["a", "b"], "list"), ({"default": "x"}, "dict")])
def test_a_template_that_is_not_a_string(template, shown):
    """Was: TypeError from Jinja's from_string (an int or array stored as tokenizer.chat_template)."""
    with pytest.raises(ChatTemplateError, match=f"must be a string of Jinja code, got {shown}"):
        apply_chat_template(template if isinstance(template, str) else _Info(template), USER)
    with pytest.raises(ValueError, match="must be a string"):
        check_chat_template(template, "tokenizer.chat_template")


class _Info:
    name = "tiny"

    def __init__(self, template):
        self.chat_template = template


@pytest.mark.parametrize("template, match", [
    ("{% for m in messages %}{{ m['content'] }}", "not valid Jinja .TemplateSyntaxError"),
    ("{{ messages[0]['content'].nope.deeper }}", "failed to render .UndefinedError"),
    ("{{ messages + 1 }}", "failed to render .TypeError"),
    ("{{ 1 // 0 }}", "failed to render .ZeroDivisionError"),
])
def test_a_broken_template_is_one_value_error(template, match):
    """Was: jinja2.TemplateSyntaxError / UndefinedError or a bare TypeError, i.e. a traceback at `sample --chat`."""
    with pytest.raises(ChatTemplateError, match=match) as info:
        apply_chat_template(_Info(template), USER)
    assert isinstance(info.value, ValueError) and "tiny" in str(info.value) and "\n" not in str(info.value)


def test_the_sandbox_still_forbids_python_internals():
    from jinja2.exceptions import SecurityError

    with pytest.raises(ChatTemplateError, match="SecurityError: .*unsafe") as info:
        apply_chat_template("{{ messages.__class__.__mro__[1].__subclasses__() }}", USER)
    assert isinstance(info.value.__cause__, SecurityError)


def test_empty_template_is_no_template():
    assert check_chat_template("", "x") is None and check_chat_template(None, "x") is None
    with pytest.raises(ValueError, match="has no chat template"):
        apply_chat_template(_Info(""), USER)


def test_tools_and_documents_are_none():
    """Was: tools/documents undefined, so `tools is not none` held and a Mistral-style template printed a tools
    block that transformers does not."""
    assert apply_chat_template(TOOLS_TEMPLATE, USER) == "[INST]Hi[/INST]"


def test_bos_and_eos_token_strings_reach_the_template():
    out = apply_chat_template(BOS_TEMPLATE, USER, bos_token="<s>", eos_token="</s>")
    assert out == "<s><|im_start|>user\nHi</s>\n<|im_start|>assistant\n"
    # None leaves them undefined (as transformers does for a tokenizer without them): they render as nothing
    assert apply_chat_template(BOS_TEMPLATE, USER, bos_token=None, eos_token=None) == \
        "<|im_start|>user\nHi\n<|im_start|>assistant\n"
    with pytest.raises(ValueError, match="bos_token must be a string or None"):
        apply_chat_template(BOS_TEMPLATE, USER, bos_token=1)


@pytest.mark.parametrize("template", [BOS_TEMPLATE, TOOLS_TEMPLATE])
@pytest.mark.parametrize("gen", [False, True])
def test_rendering_equals_transformers(template, gen):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models

    backend = Tokenizer(models.WordLevel({"<s>": 0, "</s>": 1, "[UNK]": 2}, unk_token="[UNK]"))
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>")
    hf.chat_template = template
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert apply_chat_template(template, messages, add_generation_prompt=gen, bos_token="<s>", eos_token="</s>") == \
        hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)


# transformers' environment: its own tojson filter (no HTML escapes, no \u escapes, keys in order), the
# {% generation %} block of assistant-mask templates, and strftime_now (Llama 3 writes today's date)
HF_MESSAGES = [{"role": "user", "content": "a<b & 'café' 😀"}, {"role": "assistant", "content": "Oui."}]
HF_ENV_TEMPLATES = [
    ("{% for m in messages %}{{ m | tojson }}\n{% endfor %}",
     '{"role": "user", "content": "a<b & \'café\' 😀"}\n{"role": "assistant", "content": "Oui."}\n'),
    ("{% for m in messages %}{{ m['content'] | tojson(indent=2) }}{% endfor %}", '"a<b & \'café\' 😀""Oui."'),
    ("{% for m in messages %}{% generation %}[{{ m['content'] }}]{% endgeneration %}{% endfor %}",
     "[a<b & 'café' 😀][Oui.]"),
    ("{% if strftime_now is defined %}{{ strftime_now('%Y') | length }}{% else %}none{% endif %}", "4"),
]


@pytest.mark.parametrize("template, want", HF_ENV_TEMPLATES,
                         ids=["tojson", "tojson-indent", "generation", "strftime_now"])
def test_tojson_generation_and_strftime_now_render_as_in_transformers(template, want):
    """Was: Jinja's own tojson ('<' as \\u003c, 'é' as \\u00e9, keys sorted: another prompt than the model was
    trained on), {% generation %} refused as not valid Jinja, strftime_now undefined."""
    assert apply_chat_template(template, HF_MESSAGES, add_generation_prompt=False) == want
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models

    backend = Tokenizer(models.WordLevel({"<s>": 0, "</s>": 1, "[UNK]": 2}, unk_token="[UNK]"))
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>")
    hf.chat_template = template
    assert hf.apply_chat_template(HF_MESSAGES, tokenize=False) == want
