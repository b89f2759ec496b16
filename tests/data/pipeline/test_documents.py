"""Fine-tuning documents: where a text splits into documents (fortune '%' lines, blank-line paragraphs)."""

from __future__ import annotations

import pytest

from attnkit.data.pipeline.documents import split_documents

FORTUNES = "First one.\n%\nSecond\n  -- someone\n%\n"


@pytest.mark.parametrize("ending", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_auto_finds_fortune_separators_with_either_line_end(ending):
    """'%\\r' did not match the separator, so a CR LF fortune file trained as one stream with its '%' lines."""
    assert split_documents(FORTUNES.replace("\n", ending), "auto") == ["First one.", "Second\n  -- someone"]


@pytest.mark.parametrize("text", ["a\n \n \nb", "a\n\n  \nb", "a\n\t\n\n \nb\n", "a\r\n \r\n\r\nb"])
def test_a_run_of_blank_lines_is_one_separator(text):
    """Only one blank line was taken per separator: the rest (spaces and all) began the next document."""
    assert split_documents(text, "blank-line") == ["a", "b"]


class _Tok:
    """A whitespace tokenizer with <bos> = 1 and <eos> = 2."""

    bos_id, eos_id = 1, 2

    def encode(self, text):
        return [10 + len(w) for w in text.split()]

    def encode_batch(self, texts):
        return [self.encode(t) for t in texts]


def test_documents_start_with_bos_for_a_model_that_prompts_with_it():
    """A GGUF model with add_bos_token reads its prompts after <bos>; it was fine-tuned on documents without it."""
    from attnkit.data.pipeline.documents import encode_documents

    text = "aa b\n\nccc\n"
    assert encode_documents(_Tok(), text, "blank-line").tolist() == [12, 11, 2, 13, 2]
    assert encode_documents(_Tok(), text, "blank-line", add_bos=True).tolist() == [1, 12, 11, 2, 1, 13, 2]


@pytest.mark.parametrize("percent_line_in", ["train", "valid"])
def test_auto_encodes_both_splits_in_the_mode_of_the_train_text(tmp_path, percent_line_in):
    """Was: "auto" looked at each split on its own, so a "%" line in the last tenth only cut the valid text into
    fortunes (with <eos>, "%" lines dropped) while train stayed one stream and the info said "none"; one in the
    train part only left the valid text a stream with its "%" lines in it."""
    from attnkit.data.pipeline.documents import prepare_finetune_data

    lines = [f"line {i} of a plain text." for i in range(100)]
    lines.insert(10 if percent_line_in == "train" else 95, "%")
    path = tmp_path / "text.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    train, valid, info = prepare_finetune_data(str(path), _Tok(), "auto")
    want = "fortune" if percent_line_in == "train" else "none"
    assert info["documents"] == want
    for ids in (train, valid):
        assert (2 in ids.tolist()) == (want == "fortune")  # <eos> (2) ends each document, and only documents


@pytest.mark.parametrize("separator", ["%\f", "%\xa0", "% \t\f"], ids=["form-feed", "nbsp", "blanks"])
def test_auto_and_the_fortunes_recipe_take_the_same_separator_lines(separator):
    """Was: the recipe's parse_fortunes split at '%' plus a form feed or a no-break space, while "auto" (its own
    regex: spaces, tabs, CR) did not see a fortune file in such a text and trained on it as one stream."""
    from attnkit.data.corpora.fortunes import parse_fortunes

    text = f"First.\n{separator}\nSecond.\n"
    assert parse_fortunes(text) == ["First.", "Second."]
    assert split_documents(text, "auto") == split_documents(text, "fortune") == ["First.", "Second."]


def test_a_fortune_file_with_old_mac_line_ends_is_split():
    """Was: lines ending in a lone CR were one line to both readers: "auto" found no '%' line and "fortune" gave one
    entry with the '%' lines in it ('First.%Second.')."""
    text = FORTUNES.replace("\n", "\r")
    assert split_documents(text, "auto") == split_documents(text, "fortune") == ["First one.", "Second\n  -- someone"]


def test_blank_line_documents_keep_their_line_ends_as_the_stream_does():
    """Was: blank-line mode turned every CR LF into LF inside its documents while "none" kept the text exactly."""
    text = "one\r\ntwo\r\n\r\n  \r\nthree\r\nfour\r\n"
    assert split_documents(text, "blank-line") == ["one\r\ntwo", "three\r\nfour"]
    assert split_documents("a\r\nb\rc\r\rd", "blank-line") == ["a\r\nb\rc", "d"]  # a lone CR ends a line too


@pytest.mark.parametrize("mode", ["auto", "blank-line"])
def test_split_documents_refuses_text_that_is_not_a_str(mode):
    """Was: a TypeError from the regex ("cannot use a string pattern on a bytes-like object")."""
    with pytest.raises(ValueError, match="split_documents expects the text as a str, got bytes"):
        split_documents(b"a\n%\nb\n", mode)


def test_blank_line_documents_keep_their_indentation_and_trailing_spaces():
    """Blank-line documents are kept as they are: only the line ends at their edges go, not a poem's indentation."""
    assert split_documents("  indented\n  lines  \n\n\tb\n", "blank-line") == ["  indented\n  lines  ", "\tb"]


def test_an_evaluation_encodes_only_the_valid_split_in_the_train_texts_mode(tmp_path):
    """``encode_train=False`` (``eval lm``): no train ids, and the same valid ids and mode, still judged from the
    train text (a "%" line only there makes both splits fortunes)."""
    from attnkit.data.pipeline.documents import prepare_finetune_data

    lines = [f"line {i} of a plain text." for i in range(100)]
    lines.insert(10, "%")
    path = tmp_path / "text.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, valid, info = prepare_finetune_data(str(path), _Tok(), "auto")
    train, alone, alone_info = prepare_finetune_data(str(path), _Tok(), "auto", encode_train=False)
    assert train is None and alone.tolist() == valid.tolist() and alone_info == info == {**info, "documents": "fortune"}
