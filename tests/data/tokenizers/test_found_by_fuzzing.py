"""attnkit's tokenizer files: the regressions of the loader bugs that fuzzing found (``tests/reliability/test_fuzz.py``
runs ``load_tokenizer`` / ``tokenizer_from_dict`` on hypothesis-drawn mutations of a character and a BPE tokenizer
JSON). Each test names what happened before the fix.
"""

import json

import pytest

from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
from attnkit.data.tokenizers.tokenizer import load_tokenizer, tokenizer_from_dict
from benchmarks.fuzz_loaders import seed_folder


def _bpe() -> dict:
    return json.loads((seed_folder() / "tokenizer_bpe.json").read_text())


@pytest.mark.parametrize("edit", [
    lambda d: d["tokenizer"].__setitem__("model", 5),  # "data did not match any variant of untagged enum"
    lambda d: d["tokenizer"]["model"]["vocab"].__setitem__("a", -2**63),  # "invalid value: integer"
    lambda d: d["tokenizer"].__setitem__("normalizer", {"type": "Nope"}),
])
def test_a_tokenizers_json_the_backend_refuses(edit):
    """Was: the tokenizers library's bare Exception escaping tokenizer_from_dict."""
    d = _bpe()
    edit(d)
    with pytest.raises(ValueError, match="not a valid tokenizers JSON"):
        tokenizer_from_dict(d)


@pytest.mark.parametrize("role, value, match", [
    ("eos", -1, "eos id must be in"),  # was: OverflowError from the backend
    ("eos", [1], "eos must be a token"),  # was: TypeError from the backend
    ("bos", True, "bos must be a token"),  # was: read as id 1
])
def test_special_token_roles_of_the_wrong_type(role, value, match):
    d = _bpe()
    d[role] = value
    with pytest.raises(ValueError, match=match):
        tokenizer_from_dict(d)


def test_a_type_that_is_not_a_string():
    """Was: TypeError (unhashable type: 'list')."""
    with pytest.raises(ValueError, match="unknown tokenizer type"):
        tokenizer_from_dict({"type": ["char"], "chars": ["a"]})


def test_a_backend_that_cannot_encode():
    """Was: a bare Exception from encode (a WordLevel model without its unknown token)."""
    import tokenizers
    from tokenizers import models

    tok = BPETokenizer(tokenizers.Tokenizer(models.WordLevel({"a": 0}, unk_token="<unk>")))
    with pytest.raises(ValueError, match="cannot encode the text"):
        tok.encode("b")


def test_a_tokenizer_file_nested_too_deeply(tmp_path):
    """Was: RecursionError from the JSON parser."""
    path = tmp_path / "tok.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        load_tokenizer(path)


@pytest.mark.parametrize("prefix", ["a" * 1_000_000, "##", "é"])
def test_a_continuing_subword_prefix_the_merges_do_not_start_with(prefix, capfd):
    """Was (tokenizer-bpe input #4687): the tokenizers library panicking while it built the model, slicing each
    merge's second part by the prefix's length, and printing a Rust backtrace to stderr before the ValueError."""
    d = _bpe()
    d["tokenizer"]["model"]["continuing_subword_prefix"] = prefix
    with pytest.raises(ValueError, match="must start with the model's continuing_subword_prefix"):
        tokenizer_from_dict(d)
    assert "panicked" not in capfd.readouterr().err


def test_a_tokenizer_file_whose_merges_do_not_start_with_the_prefix(tmp_path, capfd):
    """The same check on a ``tokenizer.json`` read from a file (a Hugging Face model's tokenizer)."""
    spec = _bpe()["tokenizer"]
    spec["model"]["continuing_subword_prefix"] = "##"
    spec["model"]["merges"] = [" ".join(m) for m in spec["model"]["merges"]]  # the older "a b" spelling
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=r"tokenizer.json is not a tokenizers JSON file: merge 0 joins"):
        BPETokenizer.from_file(path)
    assert "panicked" not in capfd.readouterr().err


def test_a_continuing_subword_prefix_the_merges_do_start_with():
    """A model that uses the prefix as intended still loads and encodes: "b" after "a" is spelled "##b"."""
    import tokenizers
    from tokenizers import models

    vocab = {"a": 0, "b": 1, "##b": 2, "ab": 3}
    backend = tokenizers.Tokenizer(models.BPE(vocab, [("a", "##b")], continuing_subword_prefix="##"))
    tok = tokenizer_from_dict(BPETokenizer(backend).to_dict())
    assert tok.encode("ab") == [3]
