"""``attnkit.api.chat`` (``attnkit sample --interactive``): a conversation in the model's chat template, each turn
prompted with every earlier one as ``transformers``' ``apply_chat_template`` renders the same messages.

Axis legend: none (token id lists and text only).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from attnkit import api, generation
from attnkit.cli.main import main

from helpers import CHATML, tiny_hf_folder


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    """A tiny random Llama-shaped GPT (context 256) with a BPE tokenizer and the ChatML template."""
    return tiny_hf_folder(tmp_path_factory.mktemp("hf") / "model", chat_template=CHATML, std=0.3, tie_embeddings=True,
                          block_size=256)


class _Terminal(io.StringIO):
    """A stdin that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _answering(monkeypatch, tokenizer, answers: list[str]) -> list[tuple[list[int], int | None]]:
    """``generate`` replaced by one that answers ``answers`` in turn (streaming them) and records each prompt's ids
    and seed."""
    calls = []

    def fake_generate(model, prompts, config, *, tokenizer=tokenizer, streamer=None):
        calls.append((list(prompts[0]), config.seed))
        ids = tokenizer.encode(answers[len(calls) - 1])
        if streamer is not None:
            streamer.put(ids)
            streamer.end()
        return [ids]

    monkeypatch.setattr(generation, "generate", fake_generate)
    return calls


def test_each_turn_is_prompted_with_the_conversation_as_transformers_renders_it(hf_folder, monkeypatch):
    """The prompt of every turn is ``transformers``' ``apply_chat_template`` of the system turn, the earlier turns
    and answers and the new turn, tokenized; blank lines are skipped, ``/clear`` forgets the conversation,
    ``/exit`` ends it; answer ``i`` is drawn with ``seed + i``; the answers stream to ``output``, a line each."""
    import transformers

    hf = transformers.AutoTokenizer.from_pretrained(str(hf_folder))
    sampler = api.Sampler(model=str(hf_folder), chat=True, max_new_tokens=4)
    calls = _answering(monkeypatch, sampler.tokenizer, [" mat", " far", " ran", "never"])
    out = io.StringIO()
    turns = "the cat\n\n  \nsat on\n/clear\na dog\n/exit\nnever read\n"
    history = api.chat(model=str(hf_folder), system="Be brief.", input=io.StringIO(turns), output=out,
                       max_new_tokens=4, seed=7)
    assert out.getvalue() == " mat\n far\n ran\n"
    assert history == [{"role": "user", "content": "a dog"}, {"role": "assistant", "content": " ran"}]
    system = [{"role": "system", "content": "Be brief."}]
    conversations = [
        [*system, {"role": "user", "content": "the cat"}],
        [*system, {"role": "user", "content": "the cat"}, {"role": "assistant", "content": " mat"},
         {"role": "user", "content": "sat on"}],
        [*system, {"role": "user", "content": "a dog"}],
    ]
    want = [hf.apply_chat_template(c, tokenize=True, add_generation_prompt=True, return_dict=False)
            for c in conversations]
    assert [ids for ids, _ in calls] == want
    assert [seed for _, seed in calls] == [7, 8, 9]


def test_the_prompt_is_the_first_turn_and_a_terminal_gets_a_prompt_sign(hf_folder, monkeypatch):
    """``prompt`` is answered before anything is read; ``>>> `` is written before each read only when ``input``
    is a terminal (piped turns give the answers alone)."""
    sampler = api.Sampler(model=str(hf_folder), chat=True, max_new_tokens=4)
    for terminal, want in [(False, " mat\n far\n"), (True, " mat\n>>>  far\n>>> ")]:
        _answering(monkeypatch, sampler.tokenizer, [" mat", " far"])
        source = (_Terminal if terminal else io.StringIO)("sat on\n")
        out = io.StringIO()
        history = api.chat(model=str(hf_folder), prompt="the cat", input=source, output=out, max_new_tokens=4)
        assert out.getvalue() == want
        assert [m["content"] for m in history] == ["the cat", " mat", "sat on", " far"]


def test_ctrl_c_during_an_answer_on_a_terminal_drops_that_turn_and_the_chat_goes_on(hf_folder, monkeypatch):
    """On a terminal, Ctrl-C while an answer streams ends that answer (a newline, a note) and leaves the turn out of
    the conversation; the next turn is answered as if it had not been asked. Piped turns: Ctrl-C ends the chat."""
    sampler = api.Sampler(model=str(hf_folder), chat=True, max_new_tokens=4)
    calls = _answering(monkeypatch, sampler.tokenizer, [" far"])
    real = generation.generate

    def interrupted_once(model, prompts, config, **kwargs):
        if not hasattr(interrupted_once, "done"):
            interrupted_once.done = True
            kwargs["streamer"].put(sampler.tokenizer.encode(" ma"))
            raise KeyboardInterrupt
        return real(model, prompts, config, **kwargs)

    monkeypatch.setattr(generation, "generate", interrupted_once)
    out, notes = io.StringIO(), []
    history = api.chat(model=str(hf_folder), input=_Terminal("the cat\nsat on\n"), output=out, max_new_tokens=4,
                       log=notes.append)
    assert out.getvalue() == ">>>  ma\n>>>  far\n>>> "
    assert notes == ["note: answer interrupted; the turn is left out of the conversation (Ctrl-C at >>> or Ctrl-D "
                     "ends it)"]
    assert history == [{"role": "user", "content": "sat on"}, {"role": "assistant", "content": " far"}]
    assert calls[-1][0] == sampler.chat_ids("sat on")  # the interrupted turn is not in the prompt
    del interrupted_once.done
    with pytest.raises(KeyboardInterrupt):
        api.chat(model=str(hf_folder), input=io.StringIO("the cat\n"), output=io.StringIO(), max_new_tokens=4)


def test_the_oldest_exchanges_are_left_out_when_the_conversation_outgrows_the_context(hf_folder, monkeypatch):
    """With a full answer (``max_new_tokens``) the prompt must fit the model's context (256): the oldest exchanges
    are dropped, a note says how many, and the prompt that is sampled fits."""
    sampler = api.Sampler(model=str(hf_folder), chat=True, max_new_tokens=200)
    calls = _answering(monkeypatch, sampler.tokenizer, [" the cat sat on the mat"] * 6)
    notes = []
    turns = "".join(f"line {i}: the cat sat on the mat\n" for i in range(6))
    history = api.chat(model=str(hf_folder), input=io.StringIO(turns), output=io.StringIO(), max_new_tokens=200,
                       log=notes.append)
    assert all(len(ids) <= 256 - 200 for ids, _ in calls)
    assert notes and all(n.startswith("note: the conversation no longer fits the model's context of 256 tokens "
                                      "with a full answer (200); its oldest ") for n in notes)
    assert len(history) < 12 and history[-2] == {"role": "user", "content": "line 5: the cat sat on the mat"}
    kept = [m["content"] for m in history if m["role"] == "user"]
    assert kept == [f"line {i}: the cat sat on the mat" for i in range(6 - len(kept), 6)]


def test_bad_chats_are_refused_with_what_is_wrong(hf_folder, tmp_path):
    """More than one answer a turn, an input that cannot be read or an output that cannot be written: ValueError
    naming it (before the model is read); a model without a chat template: the --chat message."""
    with pytest.raises(ValueError, match=r"chat answers each turn once: --num-samples must be 1, got 2"):
        api.chat(model=str(hf_folder), num_samples=2, input=io.StringIO(""))
    with pytest.raises(ValueError, match=r"input must be a text stream with a readline method, got 'hi'"):
        api.chat(model=str(hf_folder), input="hi")
    with pytest.raises(ValueError, match=r"output must be a text stream with a write method, got 5"):
        api.chat(model=str(hf_folder), input=io.StringIO(""), output=5)
    plain = tiny_hf_folder(tmp_path / "plain")
    with pytest.raises(ValueError, match=r"--chat needs a model with a chat template"):
        api.chat(model=str(plain), input=io.StringIO("hi\n"))


def test_sample_interactive_reads_turns_from_stdin(hf_folder, monkeypatch, capsys):
    """``attnkit sample --interactive``: stdin's lines are the turns (``--system`` needs no ``--chat`` then) and
    the answers are the api's, a line each."""
    turns = "the cat\nsat on\n"
    want = io.StringIO()
    api.chat(model=str(hf_folder), system="Be brief.", input=io.StringIO(turns), output=want, max_new_tokens=5,
             seed=3)
    monkeypatch.setattr(sys, "stdin", io.StringIO(turns))
    assert main(["sample", "--model", str(hf_folder), "--interactive", "--system", "Be brief.", "--max-new-tokens",
                 "5", "--seed", "3"]) == 0
    assert capsys.readouterr().out == want.getvalue() and want.getvalue().count("\n") == 2
