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
