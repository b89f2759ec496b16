"""Figures draw attnkit's own numbers (checked in the image data), PNGs are valid, bad inputs are refused;
next-token predictions and token labels."""

from __future__ import annotations

import pytest
import torch

from attnkit.data.tokenizers.char_tokenizer import CharTokenizer
from attnkit.modules.masks import causal_mask, generate_mask_mat, padding_mask
from attnkit.modules.sinusoidal import sinusoidal_table
from attnkit.viz import (
    make_mask,
    next_token_predictions,
    plot_attention,
    plot_mask,
    plot_parameters,
    plot_positional_encoding,
    plot_predictions,
    save_figure,
    token_labels,
    visible,
)
from helpers import assert_close


def _image(fig, index: int = 0) -> torch.Tensor:
    """The data of the first image on axes ``index``."""
    return torch.as_tensor(fig.axes[index].images[0].get_array().data)


# --------------------------------------------------------------------------- positional encoding
def test_positional_encoding_heatmap_is_the_table_and_png_is_written(tmp_path, is_png):
    fig = plot_positional_encoding(30, 16, dims=[2, 3, 8])
    assert_close(_image(fig).float(), sinusoidal_table(30, 16), "exact")
    curves = next(ax for ax in fig.axes if ax.lines).lines
    assert [int(line.get_label().split()[2]) for line in curves] == [2, 3, 8]
    assert_close(torch.as_tensor(curves[1].get_ydata()).float(), sinusoidal_table(30, 16)[:, 3], "exact")
    path = save_figure(fig, tmp_path / "sub" / "pe.png", dpi=40)
    assert path == tmp_path / "sub" / "pe.png"
    is_png(path)


def test_positional_encoding_default_channels_exist():
    fig = plot_positional_encoding(10, 128)
    labels = [line.get_label() for ax in fig.axes for line in ax.lines]
    assert [int(label.split()[2]) for label in labels] == [16, 17, 32, 64]


def test_positional_encoding_channel_out_of_range():
    with pytest.raises(ValueError, match=r"dims must be channels in \[0, 16\), got 16"):
        plot_positional_encoding(10, 16, dims=[0, 16])


def test_positional_encoding_bad_sizes():
    with pytest.raises(ValueError, match="seq_len must be an int >= 1, got 0"):
        plot_positional_encoding(0, 16)
    with pytest.raises(ValueError, match="dim must be an int >= 1, got 2.5"):
        plot_positional_encoding(10, 2.5)


# --------------------------------------------------------------------------- masks
def test_make_mask_kinds_are_attnkits_masks():
    assert torch.equal(make_mask("causal", length=4, key_length=6), causal_mask(4, 6))
    assert torch.equal(make_mask("banded", length=7, masked_len=3), generate_mask_mat(7, 3))
    assert torch.equal(make_mask("banded", length=5), generate_mask_mat(5, 4))  # default: the look-ahead mask
    assert torch.equal(make_mask("banded", length=5), causal_mask(5))
    assert torch.equal(make_mask("padding", lengths=[2, 4]), padding_mask([2, 4]))
    assert make_mask("padding", lengths=[2, 4], key_length=6).shape == (2, 6)


def test_plot_mask_draws_the_mask(tmp_path, is_png):
    mask = generate_mask_mat(6, 2)
    fig = plot_mask(mask, title="banded")
    assert torch.equal(_image(fig).bool(), mask)
    assert sum(t.get_text() == "×" for t in fig.axes[0].texts) == int(mask.sum())  # a cross per masked cell
    is_png(save_figure(fig, tmp_path / "mask.png", dpi=40))


def test_unknown_mask_kind():
    with pytest.raises(ValueError, match=r"one of \('causal', 'banded', 'padding'\), got 'diagonal'"):
        make_mask("diagonal", length=3)


def test_padding_mask_needs_lengths():
    with pytest.raises(ValueError, match="padding mask needs lengths"):
        make_mask("padding")


def test_banded_masked_len_out_of_range():
    with pytest.raises(ValueError, match=r"masked_len must be in \[0, 5\] for length 5, got 9"):
        make_mask("banded", length=5, masked_len=9)


def test_plot_mask_wants_a_2d_bool_mask():
    with pytest.raises(ValueError, match=r"2-D bool tensor .*got torch.float32 tensor of shape \(3, 3\)"):
        plot_mask(torch.zeros(3, 3))


def test_plot_mask_label_count_checked():
    with pytest.raises(ValueError, match="col_labels must have 4 entries, got 2"):
        plot_mask(causal_mask(4), col_labels=["a", "b"])


# --------------------------------------------------------------------------- attention
def test_plot_attention_one_panel_per_head_with_token_ticks(tmp_path, is_png):
    w = torch.softmax(torch.randn(3, 4, 5), dim=-1)
    fig = plot_attention(w, query_labels=list("abcd"), key_labels=list("vwxyz"), title="t")
    panels = [ax for ax in fig.axes if ax.images and ax.get_title().startswith("head")]
    assert [ax.get_title() for ax in panels] == ["head 0", "head 1", "head 2"]
    for h, ax in enumerate(panels):
        assert_close(torch.as_tensor(ax.images[0].get_array().data).float(), w[h], "exact")
    assert [t.get_text() for t in panels[0].get_xticklabels()] == list("vwxyz")
    assert [t.get_text() for t in panels[0].get_yticklabels()] == list("abcd")
    is_png(save_figure(fig, tmp_path / "attn.png", dpi=40))


def test_plot_attention_single_map():
    fig = plot_attention(torch.rand(4, 4), panel_titles=["head 2"])
    assert [ax.get_title() for ax in fig.axes if ax.images] == ["head 2"]


def test_plot_attention_label_count_checked():
    with pytest.raises(ValueError, match=r"key_labels must have 5 entries \(one per key\), got 4"):
        plot_attention(torch.rand(2, 4, 5), key_labels=list("abcd"))


def test_plot_attention_rejects_nan():
    w = torch.rand(2, 3, 3)
    w[0, 1, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        plot_attention(w)


def test_plot_attention_rejects_wrong_rank():
    with pytest.raises(ValueError, match=r"\(H, T, S\) or \(T, S\), got torch.float32 tensor of shape \(1, 2, 3, 3\)"):
        plot_attention(torch.rand(1, 2, 3, 3))


# --------------------------------------------------------------------------- parameters
def test_plot_parameters_of_the_seed002_preset(tmp_path, is_png):
    from attnkit.models.presets import get_preset

    fig = plot_parameters(get_preset("gpt2-seed002"), title="gpt2-seed002")
    ax = fig.axes[0]
    assert "163,109,376 parameters" in ax.get_title()  # seed 002's total (vocab 50304, untied)
    widths = [int(p.get_width()) for p in ax.patches]
    assert widths == [38_633_472, 786_432, 85_054_464, 1_536, 38_633_472]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["wte", "wpe", "blocks", "ln_f", "lm_head"]
    is_png(save_figure(fig, tmp_path / "params.png", dpi=40))


def test_plot_parameters_notes_tied_weights(make_gpt):
    fig = plot_parameters(make_gpt("gpt2"))
    assert "lm_head.weight tied, counted once" in fig.axes[0].get_title()


# --------------------------------------------------------------------------- predictions
def test_next_token_predictions_are_the_softmax_top_k(make_gpt):
    model = make_gpt("gpt2")
    ids = torch.randint(0, 41, (7,))
    probs, top = next_token_predictions(model, ids, top_k=3)
    assert probs.shape == (7, 3) and top.shape == (7, 3)
    with torch.no_grad():
        full = torch.softmax(model(ids[None])[0], dim=-1)  # (T, V)
    torch.testing.assert_close(probs, full.topk(3).values, atol=1e-6, rtol=0)
    torch.testing.assert_close(probs, full.gather(1, top), atol=1e-6, rtol=0)
    assert torch.all(probs[:, :-1] >= probs[:, 1:])


def test_next_token_predictions_leave_out_the_padding_of_a_larger_output_layer(make_gpt):
    model = make_gpt("gpt2")  # V = 41, as if padded past a 30-token tokenizer
    with torch.no_grad():
        model.lm_head.weight[30:] = 0.0
        model.lm_head.weight[30:, 0] = 100.0  # the padding ids would win every position
    ids = torch.randint(0, 30, (6,))
    probs, top = next_token_predictions(model, ids, top_k=5, vocab_size=30)
    assert int(top.max()) < 30
    with torch.no_grad():
        full = torch.softmax(model(ids[None])[0], dim=-1)  # (T, V): the model's own probabilities are shown
    torch.testing.assert_close(probs, full[:, :30].topk(5).values, atol=1e-6, rtol=0)
    assert int(next_token_predictions(model, ids, top_k=5)[1].max()) >= 30  # without vocab_size: all V


def test_next_token_predictions_for_the_decoder_of_a_transformer(make_transformer):
    model = make_transformer()
    probs, top = next_token_predictions(model, [1, 5, 8], src=[3, 9, 4, 2], top_k=2)
    with torch.no_grad():
        full = model.predict_proba(torch.tensor([[3, 9, 4, 2]]), torch.tensor([[1, 5, 8]]))[0]
    torch.testing.assert_close(probs, full.topk(2).values, atol=1e-6, rtol=0)


def test_next_token_predictions_transformer_needs_src(make_transformer):
    with pytest.raises(ValueError, match="needs src"):
        next_token_predictions(make_transformer(), [1, 2])


def test_next_token_predictions_top_k_range(make_gpt):
    with pytest.raises(ValueError, match=r"top_k must be an int in \[1, 41\] \(the vocabulary size\), got 42"):
        next_token_predictions(make_gpt(), [1, 2], top_k=42)


def test_plot_predictions_outlines_the_real_next_token(tmp_path, is_png):
    probs = torch.tensor([[0.7, 0.2], [0.5, 0.1], [0.9, 0.05]])
    hits = torch.tensor([[False, True], [True, False], [False, False]])
    fig = plot_predictions(probs, [["a", "b"], ["c", "d"], ["e", "f"]], context_labels=["x", "y", "z"], hits=hits)
    ax = fig.axes[0]
    assert len(ax.patches) == 2  # one outline per hit
    assert "a\n0.70" in [t.get_text() for t in ax.texts]
    is_png(save_figure(fig, tmp_path / "pred.png", dpi=40))


def test_plot_predictions_label_shape_checked():
    with pytest.raises(ValueError, match=r"candidate_labels must be 2 rows of 2 strings, got \[2, 1\]"):
        plot_predictions(torch.rand(2, 2), [["a", "b"], ["c"]])


# --------------------------------------------------------------------------- saving and labels
def test_save_figure_wants_png(tmp_path):
    with pytest.raises(ValueError, match=r"must end in .png, got '.*attn.jpg'"):
        save_figure(plot_attention(torch.rand(2, 2)), tmp_path / "attn.jpg")
    assert not (tmp_path / "attn.jpg").exists()


def test_visible_whitespace():
    assert visible(" the") == "·the"
    assert visible("a\n") == "a↵"
    assert visible("  ") == "··"
    assert visible("") == "∅"


def test_token_labels_decode_each_token():
    tok = CharTokenizer.train("ab \n")
    ids = tok.encode("a b\n")
    assert token_labels(tok, ids) == ["a", "·", "b", "↵"]
    assert token_labels(None, [3, 4]) == ["3", "4"]


# --------------------------------------------------------------------------- text drawn as given ('$' is no mathtext)
DOLLARS = ["$$", "a$b$", "$^$", "$x_$"]  # '$$' and '$^$' made matplotlib raise; 'a$b$' was drawn as math


def _texts_drawn_as_given(fig, wanted: list[str]) -> None:
    from matplotlib.text import Text

    texts = [t for t in fig.findobj(Text) if "$" in t.get_text()]
    for w in wanted:
        assert any(w in t.get_text() for t in texts), (w, [t.get_text() for t in texts])
    assert texts and all(not t.get_parse_math() for t in texts)


def test_dollar_labels_and_titles_of_attention_are_plain_text(tmp_path, is_png):
    w = torch.softmax(torch.randn(2, 4, 4), dim=-1)
    fig = plot_attention(w, query_labels=DOLLARS, key_labels=DOLLARS, title="$$run$$", panel_titles=["$a$", "$$"])
    _texts_drawn_as_given(fig, DOLLARS + ["$$run$$", "$a$"])
    is_png(save_figure(fig, tmp_path / "attn.png", dpi=40))  # '$$' raised a multi-line ParseException here


def test_dollar_labels_of_predictions_and_mask_are_plain_text(tmp_path, is_png):
    fig = plot_predictions(torch.rand(4, 2), [[d, "x"] for d in DOLLARS], context_labels=DOLLARS, title="$$")
    _texts_drawn_as_given(fig, [f"{d}\n" for d in DOLLARS] + DOLLARS)
    is_png(save_figure(fig, tmp_path / "pred.png", dpi=40))
    fig = plot_mask(causal_mask(4), row_labels=DOLLARS, col_labels=DOLLARS, title="$$", xlabel="$x_$",
                    ylabel="$$")
    _texts_drawn_as_given(fig, DOLLARS)
    is_png(save_figure(fig, tmp_path / "mask.png", dpi=40))


# --------------------------------------------------------------------------- numbers out of range
@pytest.mark.parametrize("base", [-5, -5.0, 0, 0.0, 0.5, 1, float("nan"), float("inf")])
def test_positional_encoding_base_must_be_finite_above_one(base):
    # -5 gave a TypeError from a complex power; 0 and nan drew a table of NaN without a word
    with pytest.raises(ValueError, match=r"^base must be a finite number in \(1.0, inf\), got "):
        plot_positional_encoding(5, 8, base=base)
    with pytest.raises(ValueError, match=r"^base must be a number, got '10'"):
        plot_positional_encoding(5, 8, base="10")


def test_positional_encoding_other_bases_draw():
    assert_close(_image(plot_positional_encoding(5, 8, base=100)).float(), sinusoidal_table(5, 8, base=100.0),
                 "exact")


@pytest.mark.parametrize("dpi", [9, 1201, 100000, float("nan"), float("inf")])
def test_save_figure_dpi_range(tmp_path, dpi):
    # 100000 died with MemoryError (std::bad_alloc) inside Agg
    with pytest.raises(ValueError, match=r"^dpi must be a finite number in \[10, 1200\], got "):
        save_figure(plot_attention(torch.rand(2, 2)), tmp_path / "a.png", dpi=dpi)
    assert not (tmp_path / "a.png").exists()


def test_save_figure_pixel_limit(tmp_path, is_png):
    from attnkit.viz.plots import _figure

    big = _figure(100, 100)  # 100 x 100 inches: 1200 dpi would be 14,400 megapixels
    with pytest.raises(ValueError, match=r"^dpi 1200 would make a 120000 x 120000 pixel image \(14400 megapixels\): "
                                         r"expected at most 100 megapixels, i.e. dpi <= 100 for this"):
        save_figure(big, tmp_path / "big.png", dpi=1200)
    assert not (tmp_path / "big.png").exists()
    is_png(save_figure(plot_attention(torch.rand(2, 2)), tmp_path / "ok.png", dpi=1200))  # a small figure may
