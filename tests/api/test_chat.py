"""``attnkit.api.chat`` (``attnkit sample --interactive``): a conversation in the model's chat template, each turn
prompted with every earlier one as ``transformers``' ``apply_chat_template`` renders the same messages.

Axis legend: none (token id lists and text only).
"""

from __future__ import annotations

import io
import re
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


class _Shown(io.StringIO):
    """A stdout that shows (``shown``) only what was written before its last flush, as a line-buffered one does."""

    shown = ""

    def flush(self) -> None:
        self.shown = self.getvalue()


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
    ``/exit`` ends it; answer ``i`` is drawn with ``seed + i``; the answers stream to ``output``, a line each, and
    a special token drawn (``<|endoftext|>``) is in neither the stream nor the conversation."""
    import transformers

    hf = transformers.AutoTokenizer.from_pretrained(str(hf_folder))
    sampler = api.Sampler(model=str(hf_folder), chat=True, max_new_tokens=4)
    calls = _answering(monkeypatch, sampler.tokenizer, [" mat", " far", " ran<|endoftext|>", "never"])
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
    """``prompt`` is answered before anything is read; ``>>> `` is written (and flushed, so that a terminal shows
    it while it waits) before each read only when ``input`` is a terminal (piped turns give the answers alone)."""
    sampler = api.Sampler(model=str(hf_folder), chat=True, max_new_tokens=4)
    for terminal, want in [(False, " mat\n far\n"), (True, " mat\n>>>  far\n>>> ")]:
        _answering(monkeypatch, sampler.tokenizer, [" mat", " far"])
        source = (_Terminal if terminal else io.StringIO)("sat on\n")
        out = _Shown()
        history = api.chat(model=str(hf_folder), prompt="the cat", input=source, output=out, max_new_tokens=4)
        assert out.getvalue() == want == out.shown
        assert [m["content"] for m in history] == ["the cat", " mat", "sat on", " far"]


def test_ctrl_c_during_an_answer_on_a_terminal_drops_that_turn_and_the_chat_goes_on(hf_folder, monkeypatch):
    """On a terminal, Ctrl-C while an answer streams ends that answer (a newline, a note) and leaves the turn out of
    the conversation; the next turn is answered as if it had not been asked (after the earlier exchanges, with the
    seed the interrupted answer had). Piped turns: Ctrl-C ends the chat."""
    sampler = api.Sampler(model=str(hf_folder), chat=True, max_new_tokens=4)
    calls = _answering(monkeypatch, sampler.tokenizer, [" mat", " far", " mat"])
    real = generation.generate
    asked = []

    def interrupted_second(model, prompts, config, **kwargs):
        asked.append(config.seed)
        if len(asked) == 2:
            kwargs["streamer"].put(sampler.tokenizer.encode(" ma"))
            raise KeyboardInterrupt
        return real(model, prompts, config, **kwargs)

    monkeypatch.setattr(generation, "generate", interrupted_second)
    out, notes = io.StringIO(), []
    history = api.chat(model=str(hf_folder), input=_Terminal("the cat\nsat on\na dog\n"), output=out,
                       max_new_tokens=4, seed=5, log=notes.append)
    assert out.getvalue() == ">>>  mat\n>>>  ma\n>>>  far\n>>> "
    assert notes == ["note: answer interrupted; the turn is left out of the conversation (Ctrl-C at >>> or Ctrl-D "
                     "ends it)"]
    first = [{"role": "user", "content": "the cat"}, {"role": "assistant", "content": " mat"}]
    assert history == [*first, {"role": "user", "content": "a dog"}, {"role": "assistant", "content": " far"}]
    assert calls[-1] == (sampler.chat_ids("a dog", first), 6)  # the interrupted turn is not in the prompt
    assert asked == [5, 6, 6]
    asked.clear()  # piped: the second turn's Ctrl-C ends the chat
    with pytest.raises(KeyboardInterrupt):
        api.chat(model=str(hf_folder), input=io.StringIO("the cat\nsat on\n"), output=io.StringIO(), max_new_tokens=4)


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


def test_a_conversation_that_just_fits_is_kept_and_only_whole_exchanges_are_left_out(hf_folder, monkeypatch):
    """A prompt and a full answer may fill the context exactly (the conversation is kept whole, without a note);
    past it the oldest exchanges are left out a whole exchange (a user turn and its answer) at a time and no more
    than needed (never leaving an answer without its turn), and the note counts the exchanges."""
    first = " ".join(f"line {i}: the cat sat on the mat and ran away." for i in (1, 2))
    second, third = "sat on", "the mat"
    sampler = api.Sampler(model=str(hf_folder), chat=True, max_new_tokens=4)
    one = [{"role": "user", "content": first}, {"role": "assistant", "content": " mat"}]
    two = [*one, {"role": "user", "content": second}, {"role": "assistant", "content": " far"}]
    fits = len(sampler.chat_ids(second, one))  # the second turn and an answer of 256 - fits fill the context
    assert len(sampler.chat_ids(third, two[1:])) <= fits < len(sampler.chat_ids(third, two))
    calls = _answering(monkeypatch, sampler.tokenizer, [" mat", " far", " ran"])
    notes = []
    history = api.chat(model=str(hf_folder), input=io.StringIO(f"{first}\n{second}\n{third}\n"), output=io.StringIO(),
                       max_new_tokens=256 - fits, log=notes.append)
    want = [sampler.chat_ids(first), sampler.chat_ids(second, one), sampler.chat_ids(third, two[2:])]
    assert [ids for ids, _ in calls] == want
    assert notes == [f"note: the conversation no longer fits the model's context of 256 tokens with a full answer "
                     f"({256 - fits}); its oldest 1 exchange(s) are left out"]
    assert history == [*two[2:], {"role": "user", "content": third}, {"role": "assistant", "content": " ran"}]


def test_windows_line_ends_commands_between_blanks_and_a_first_turn_past_the_context(hf_folder):
    """A ``\\r\\n`` line end is a line end and a command may have blanks around it; a turn longer than the context
    (256) is answered over a sliding window with the Sampler's note, once (``prompt``, the first turn, is not also
    read as the Sampler's own prompt)."""
    notes = []
    history = api.chat(model=str(hf_folder), prompt="the cat sat on the mat " * 50, output=io.StringIO(),
                       input=io.StringIO("  /clear \r\nsat on\r\n\t/exit \r\nnever\r\n"), max_new_tokens=3, seed=0,
                       log=notes.append)
    assert [m["content"] for m in history if m["role"] == "user"] == ["sat on"]
    assert len(notes) == 1, notes
    assert re.fullmatch(r"note: \d{3} prompt \+ 3 new tokens exceed the model's context of 256; sampling with a "
                        r"sliding window \(.*\)", notes[0]), notes
    notes.clear()  # (was: also a note for the empty prompt the Sampler is made with, which is never sampled)
    api.chat(model=str(hf_folder), input=io.StringIO("hi\n"), output=io.StringIO(), max_new_tokens=250,
             log=notes.append)
    assert len(notes) == 1 and "prompt + 250 new tokens exceed the model's context of 256" in notes[0], notes


def test_bad_chats_are_refused_with_what_is_wrong(hf_folder, tmp_path):
    """More than one answer a turn, an input that cannot be read or an output that cannot be written: ValueError
    naming it (before the model is read); a model without a chat template: the --chat message. ``Sampler.reply``
    refuses a negative index and a stream that cannot be written before it samples. An answer past the largest
    seed (``seed + i`` > 2**64 - 1) says so (was: "seed must be an int in ..., got 18446744073709551616")."""
    with pytest.raises(ValueError, match=r"chat answers each turn once: --num-samples must be 1, got 2"):
        api.chat(model=str(hf_folder), num_samples=2, input=io.StringIO(""))
    with pytest.raises(ValueError, match=r"input must be a text stream with a readline method, got 'hi'"):
        api.chat(model=str(hf_folder), input="hi")
    with pytest.raises(ValueError, match=r"output must be a text stream with a write method, got 5"):
        api.chat(model=str(hf_folder), input=io.StringIO(""), output=5)
    sampler = api.Sampler(model=str(hf_folder), chat=True, max_new_tokens=4)
    with pytest.raises(ValueError, match=r"index must be an int >= 0, got -1"):
        sampler.reply("hi", index=-1)
    with pytest.raises(ValueError, match=r"stream must be a text stream with a write method .* got 'out.txt' \(str\)"):
        sampler.reply("hi", stream="out.txt")
    out = io.StringIO()
    with pytest.raises(ValueError, match=r"^answer 2 would be drawn with --seed \+ 1 = 18446744073709551616, past "
                                         r"2\*\*64 - 1 \(the largest seed torch takes\): give a smaller --seed$"):
        api.chat(model=str(hf_folder), seed=2**64 - 1, input=io.StringIO("the cat\nsat on\n"), output=out,
                 max_new_tokens=2)
    assert out.getvalue().count("\n") == 1  # the first answer
    plain = tiny_hf_folder(tmp_path / "plain")
    with pytest.raises(ValueError, match=r"--chat and --interactive need a model with a chat template"):
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
