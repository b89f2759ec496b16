"""The interactive attention page: self-contained HTML whose numbers are the captured weights, driven in a real
headless Chromium (Debian's ``chromium`` + ``chromedriver`` through Selenium; no browser download): the model view
(one panel per layer and head, a click opens it), the head view (lines per head from the chosen token), the detail
(weights, heat map, predictions), zoom, and readable tokens with their raw form on hover.

The browser tests skip, with the reason, when Chromium, its driver or Selenium is not installed
(``apt-get install chromium chromium-driver``; ``pip install selenium``); ``.ci/run`` installs the two Debian
packages where the CI machine can (root, apt-get), and does not fail where it cannot. Every browser test writes
screenshots of what it checked into its pytest ``tmp_path``; set ``ATTNKIT_SCREENSHOTS=DIR`` to keep copies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from attnkit.cli.main import main
from attnkit.viz.attention_maps import attention_maps, seq2seq_attention_maps
from attnkit.viz.attention_page import lm_attention_page, mt_attention_page, render_attention_page, write_page
from attnkit.viz.labels import text_labels, token_labels, token_titles
from attnkit.viz.predictions import next_token_predictions


class _Tok:
    """A tiny tokenizer for pages of the fixture models: id i is the letter chr(97 + i % 26) + a suffix."""

    bos_id = eos_id = pad_id = None

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.token(i) for i in ids)

    @staticmethod
    def token(i):
        return chr(97 + i % 26) + ("" if i < 26 else str(i // 26))

    def id_to_token(self, i):
        return self.token(i)


def _data(html: str) -> dict:
    m = re.search(r'<script id="attention-data" type="application/json">(.*?)</script>', html, re.S)
    assert m, "no inlined data"
    return json.loads(m.group(1))


# ---------------------------------------------------------------------------------------------- without a browser

def test_page_is_self_contained_and_holds_the_captured_weights(make_gpt):
    model, tok = make_gpt("gpt2"), _Tok()
    ids = [1, 5, 9, 2, 7, 3]
    html = lm_attention_page(model, tok, ids, top_k=3, title="t")
    assert not re.search(r"https?://|<link|<script[^>]+src=|@import|url\(", html), "the page must not fetch anything"
    data = _data(html)
    maps = attention_maps(model, ids)
    (view,) = data["views"]
    assert view["queries"] == view["keys"] == text_labels(tok, ids)
    assert view["query_titles"] == view["key_titles"] == token_titles(tok, ids)
    assert view["query_side"] == view["key_side"] == "text"
    weights_json = json.dumps(view["weights"])
    assert not re.search(r"\d\.\d{5}", weights_json), "weights are written with at most 4 decimals"
    for layer, m in enumerate(maps):
        assert torch.allclose(torch.tensor(view["weights"][layer]), m, atol=6e-5)
    probs, top = next_token_predictions(model, ids, top_k=3)
    row = data["predictions"][2]
    assert [t for t, _ in row["top"]] == token_labels(tok, top[2].tolist())
    assert row["top_ids"] == top[2].tolist() and row["top_titles"] == token_titles(tok, top[2].tolist())
    assert [p for _, p in row["top"]] == pytest.approx(probs[2].tolist(), abs=1e-4)
    assert row["next"] == token_labels(tok, [ids[3]])[0] and row["next_id"] == ids[3]
    assert data["predictions"][-1]["next"] is None
    assert data["start"] == {"view": "self", "layer": len(maps) - 1, "head": 0, "tab": "model", "cell": 28}


def test_script_end_tag_in_a_token_cannot_break_the_page():
    data = {"title": "x", "top_k": 1, "predictions": [{"top": [["</script>", 1.0]], "next": None}],
            "views": [{"name": "self", "title": "", "queries": ["</script>"], "keys": ["</script>"],
                       "predicts": True, "weights": [[[[1.0]]]]}]}
    html = render_attention_page(data)
    assert html.count("</script>") == 2  # the two real script elements only
    assert _data(html)["views"][0]["queries"] == ["</script>"]
    data["views"][0]["queries"] = data["views"][0]["keys"] = ["<!--<script>"]
    html = render_attention_page(data)
    assert "<!--" not in html and html.count("<script") == 2 and _data(html)["views"][0]["keys"] == ["<!--<script>"]


def test_bad_choices(make_gpt):
    model = make_gpt("gpt2")
    with pytest.raises(ValueError, match=r"layer must be in \[0, 2\) \(the model has 2 layers\), got 2"):
        lm_attention_page(model, _Tok(), [1, 2, 3], layer=2)
    with pytest.raises(ValueError, match=r"head must be in \[0, 4\) \(the layer has 4 heads\), got 4"):
        lm_attention_page(model, _Tok(), [1, 2, 3], head=4)
    with pytest.raises(ValueError, match="top_k"):
        lm_attention_page(model, _Tok(), [1, 2, 3], top_k=0)
    with pytest.raises(ValueError, match=r"view must be one of \['self'\]"):
        render_attention_page(_data(lm_attention_page(model, _Tok(), [1, 2])), view="cross")
    with pytest.raises(ValueError, match=r"tab must be one of \['model', 'head', 'detail'\], got 'heads'"):
        lm_attention_page(model, _Tok(), [1, 2, 3], tab="heads")


def test_the_data_must_match_its_labels(make_gpt):
    data = _data(lm_attention_page(make_gpt("gpt2"), _Tok(), [1, 2, 3]))
    data["views"][0]["keys"] = ["a", "b"]
    with pytest.raises(ValueError, match=r"layer 0 head 0 must be \(T, S\) = \(3, 2\) like its labels, got 3 rows "
                                         r"of lengths \[3\]"):
        render_attention_page(data)
    data = _data(lm_attention_page(make_gpt("gpt2"), _Tok(), [1, 2, 3]))
    data["views"][0]["weights"][1].pop()
    with pytest.raises(ValueError, match="every layer must have 4 heads, layer 1 has 3"):
        render_attention_page(data)
    data = _data(lm_attention_page(make_gpt("gpt2"), _Tok(), [1, 2, 3]))
    data["views"][0]["query_titles"].pop()
    with pytest.raises(ValueError, match="query_titles must have 3 entries, got 2"):
        render_attention_page(data)
    data["views"][0]["query_titles"] = data["views"][0]["key_titles"]
    data["predictions"].pop()
    with pytest.raises(ValueError, match="predicts at its 3 query positions, but there are 2 prediction rows"):
        render_attention_page(data)
    del data["predictions"]
    with pytest.raises(ValueError, match=r"a view that predicts needs data\['predictions'\]"):
        render_attention_page(data)



def test_non_finite_weights_and_a_title_that_is_no_text_are_refused(make_gpt):
    # NaN is no JSON: the page would open empty; a None title failed inside html.escape
    data = _data(lm_attention_page(make_gpt("gpt2"), _Tok(), [1, 2, 3]))
    data["views"][0]["weights"][0][0][2][0] = float("nan")
    with pytest.raises(ValueError, match="weights and probabilities must be finite numbers, got NaN or inf"):
        render_attention_page(data)
    data = _data(lm_attention_page(make_gpt("gpt2"), _Tok(), [1, 2, 3]))
    data["title"] = None
    with pytest.raises(ValueError, match=r"data\['title'\] must be a string, got NoneType"):
        render_attention_page(data)


def test_write_page(tmp_path):
    assert write_page("<html></html>", tmp_path / "a" / "p.html").read_text() == "<html></html>"
    with pytest.raises(ValueError, match=r"\.html"):
        write_page("<html></html>", tmp_path / "p.png")


def test_cli_html(lm_checkpoint, mt_checkpoint, tmp_path, capsys):
    out = tmp_path / "lm.html"
    assert main(["viz", "attention", "--ckpt", str(lm_checkpoint), "--text", "romeo", "--html", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert _data(out.read_text(encoding="utf-8"))["views"][0]["queries"] == list("romeo")
    out = tmp_path / "mt.html"
    assert main(["viz", "attention", "--ckpt", str(mt_checkpoint), "--src", "das haus", "--tgt", "the house",
                 "--attn", "encoder", "--html", str(out)]) == 0
    data = _data(out.read_text(encoding="utf-8"))
    assert [v["name"] for v in data["views"]] == ["encoder", "decoder", "cross"] and data["start"]["view"] == "encoder"
    assert [(v["query_side"], v["key_side"]) for v in data["views"]] == [
        ("source", "source"), ("target", "target"), ("target", "source")]
    capsys.readouterr()
    assert main(["viz", "attention", "--ckpt", str(lm_checkpoint), "--text", "x", "--html", str(tmp_path / "a.png")]) == 2
    err = capsys.readouterr().err
    assert "--html must name an .html file" in err and len(err.strip().splitlines()) == 1


def test_a_page_too_large_to_open_is_refused_before_the_model_runs(make_gpt, make_transformer, monkeypatch):
    """Was: any text length was written out: smollm2-135m-instruct's 30 layers x 9 heads on a text of 600 tokens make
    a page of ~700 MB (and ~7 GB of Python lists while writing it), and Chromium opens a page past its ~537 million
    character string limit empty."""
    import attnkit.viz.attention_page as page

    assert page.MAX_PAGE_WEIGHTS == 1 << 25
    gpt, tok = make_gpt("llama"), _Tok()  # 2 layers x 4 heads: 8 weights per (query, key) pair
    monkeypatch.setattr(page, "MAX_PAGE_WEIGHTS", 8 * 10 * 10)
    page.lm_attention_page(gpt, tok, list(range(10)))  # exactly at the limit: written
    monkeypatch.setattr(page, "attention_maps", lambda *a: pytest.fail("the model ran"))
    with pytest.raises(ValueError, match=r"would hold 968 attention weights \(self 2 layers x 4 heads x 11 x 11\), "
                                         r"expected at most 800 .*at most 10 tokens"):
        page.lm_attention_page(gpt, tok, list(range(11)))
    mt = make_transformer()  # 2 + 2 layers x 4 heads
    monkeypatch.setattr(page, "seq2seq_attention_maps", lambda *a: pytest.fail("the model ran"))
    with pytest.raises(ValueError, match=r"would hold 872 attention weights \(encoder 2 layers x 4 heads x 7 x 7 \+ "
                                         r"decoder 2 layers x 4 heads x 5 x 5 \+ cross 2 layers x 4 heads x 5 x 7\)"):
        page.mt_attention_page(mt, tok, [3, 4, 5, 6, 7, 8, 2], [1, 3, 4, 5, 6])


# ---------------------------------------------------------------------------------------------- in Chromium

def _find_chromium() -> tuple[str | None, str | None, str]:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return None, None, "selenium is not installed (pip install selenium; it is in the [test] extra)"
    browser = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                                shutil.which("google-chrome")) if p), None)
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        return None, None, ("no Chromium and chromedriver on PATH (Debian: apt-get install chromium "
                            "chromium-driver); the page's browser tests need a real browser")
    return browser, driver, ""


def test_without_a_browser_the_skip_reason_says_how_to_get_one(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    binary, driver, why = _find_chromium()
    if "selenium is not installed" in why:
        pytest.skip(why)
    assert (binary, driver) == (None, None)
    assert "apt-get install chromium chromium-driver" in why


@pytest.fixture(scope="module")
def browser():
    binary, driver_path, why = _find_chromium()
    if binary is None:
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    yield driver
    driver.quit()


def _shot(driver, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    assert driver.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    keep = os.environ.get("ATTNKIT_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)
    return path


def _open(driver, path: Path, tab: str = "model"):
    """Open the page; it starts on the model view, then go to ``tab``."""
    from selenium.webdriver.common.by import By

    driver.get(path.resolve().as_uri())
    assert driver.find_element(By.ID, "status").text  # the script ran
    assert driver.find_element(By.ID, "model-view").is_displayed()
    _tab(driver, tab)


def _tab(driver, name: str):
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f'button.tab[data-tab="{name}"]').click()
    shown = [s.get_attribute("id") for s in driver.find_elements(By.CSS_SELECTOR, "section[data-tab]")
             if s.is_displayed()]
    assert shown == [f"{name}-view"]


def _hover(driver, css: str):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    ActionChains(driver).move_to_element(driver.find_element(By.CSS_SELECTOR, css)).perform()


def _heatmap(driver) -> tuple[list[str], list[str]]:
    """The heatmap's column labels (keys) and row labels (queries), as the page wrote them."""
    from selenium.webdriver.common.by import By

    cols = [c.get_attribute("textContent") for c in driver.find_elements(By.CSS_SELECTOR, "#heat th.col")]
    rows = [r.find_element(By.CSS_SELECTOR, "th").get_attribute("textContent")
            for r in driver.find_elements(By.CSS_SELECTOR, "#heat tr[data-i]")]
    return cols, rows


def _sides(driver) -> tuple[str, str]:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, "query-side").text, driver.find_element(By.ID, "key-side").text


def _shown_weights(driver) -> tuple[list[str], torch.Tensor]:
    from selenium.webdriver.common.by import By

    keys = driver.find_elements(By.CSS_SELECTOR, "#keys .key")
    labels = [k.text.split("\n")[0] for k in keys]
    weights = torch.tensor([float(k.get_attribute("data-weight")) for k in keys])
    texts = torch.tensor([float(k.find_element(By.CSS_SELECTOR, ".w").text) for k in keys])
    assert torch.allclose(weights, texts, atol=1e-3)  # the number on screen is the attribute
    return labels, weights


def test_language_model_page_in_chromium(browser, make_gpt, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    model, tok = make_gpt("gpt2"), _Tok()
    ids = [3, 11, 4, 20, 8, 15, 6, 2]
    page = write_page(lm_attention_page(model, tok, ids, top_k=4, title="gpt2-style, random weights"),
                      tmp_path / "lm.html")
    maps = attention_maps(model, ids)
    probs, top = next_token_predictions(model, ids, top_k=4)
    _open(browser, page, "detail")
    Select(browser.find_element(By.ID, "layer")).select_by_value("0")
    browser.find_element(By.CSS_SELECTOR, 'button.head[data-head="2"]').click()
    _hover(browser, '.query[data-i="5"]')
    assert browser.find_element(By.ID, "status").text.startswith("self layer 0 head 2 query 5")
    active = browser.find_elements(By.CSS_SELECTOR, "button.head.active")
    assert [b.get_attribute("data-head") for b in active] == ["2"]
    labels, shown = _shown_weights(browser)
    assert labels == text_labels(tok, ids)
    assert _heatmap(browser) == (labels, labels) and _sides(browser) == ("text", "text")
    active_row = browser.find_element(By.CSS_SELECTOR, "#heat tr.active")
    assert active_row.get_attribute("data-i") == "5"  # the hovered query's row is lit
    assert torch.allclose(shown, maps[0][2, 5], atol=1e-4)
    assert torch.all(shown[6:] == 0)  # causal: the future gets nothing
    rows = browser.find_elements(By.CSS_SELECTOR, "#predictions tr.pred")
    assert [r.find_element(By.CSS_SELECTOR, ".pred-token").text for r in rows] == token_labels(tok, top[5].tolist())
    got = [float(r.find_element(By.CSS_SELECTOR, ".pred-prob").text) for r in rows]
    assert got == pytest.approx(probs[5].tolist(), abs=1e-4)
    _shot(browser, tmp_path, "attention_page_lm")
    # another layer and head, another token: the shown weights follow
    Select(browser.find_element(By.ID, "layer")).select_by_value("1")
    browser.find_element(By.CSS_SELECTOR, 'button.head[data-head="0"]').click()
    _hover(browser, '.query[data-i="7"]')
    assert torch.allclose(_shown_weights(browser)[1], maps[1][0, 7], atol=1e-4)


def test_translation_page_in_chromium(browser, make_transformer, tmp_path):
    from selenium.webdriver.common.by import By

    model, tok = make_transformer(), _Tok()
    src, tgt = [5, 9, 12, 3, 7, 2], [1, 4, 8, 6]
    page = write_page(mt_attention_page(model, tok, src, tgt, title="encoder-decoder, random weights"),
                      tmp_path / "mt.html")
    maps = seq2seq_attention_maps(model, src, tgt)
    _open(browser, page, "detail")
    assert browser.find_element(By.CSS_SELECTOR, "button.view.active").text == "cross"  # the default view
    browser.find_element(By.CSS_SELECTOR, 'button.head[data-head="1"]').click()
    _hover(browser, '.query[data-i="2"]')
    labels, shown = _shown_weights(browser)
    assert labels == text_labels(tok, src)  # cross-attention: target queries over source keys
    assert [q.text for q in browser.find_elements(By.CSS_SELECTOR, ".query")] == text_labels(tok, tgt)
    assert torch.allclose(shown, maps.cross[-1][1, 2], atol=1e-4)
    assert _heatmap(browser) == (text_labels(tok, src), text_labels(tok, tgt))  # source across, target down
    assert _sides(browser) == ("target", "source")
    assert browser.find_element(By.ID, "view-title").text == "cross-attention (target → source)"
    assert browser.find_elements(By.CSS_SELECTOR, "#predictions tr.pred")
    _shot(browser, tmp_path, "attention_page_cross")

    browser.find_element(By.CSS_SELECTOR, 'button.view[data-view="encoder"]').click()
    _hover(browser, '.query[data-i="0"]')
    labels, shown = _shown_weights(browser)
    assert labels == text_labels(tok, src) and torch.allclose(shown, maps.encoder[-1][1, 0], atol=1e-4)
    assert _sides(browser) == ("source", "source") and _heatmap(browser)[0] == text_labels(tok, src)
    assert shown[-1] > 0  # the encoder is not causal: the first token sees the last
    assert not browser.find_elements(By.CSS_SELECTOR, "#predictions tr.pred")  # no predictions on source tokens

    browser.find_element(By.CSS_SELECTOR, 'button.view[data-view="decoder"]').click()
    _hover(browser, '.query[data-i="1"]')
    labels, shown = _shown_weights(browser)
    assert labels == text_labels(tok, tgt) and torch.allclose(shown, maps.decoder[-1][1, 1], atol=1e-4)
    assert _sides(browser) == ("target", "target")
    assert torch.all(shown[2:] == 0)
    _shot(browser, tmp_path, "attention_page_decoder")


# ---------------------------------------------------------------------------------------------- the model view

_PANEL_ALPHAS = """
const out = {};
for (const p of document.querySelectorAll("#model-grid .panel")) {
  const cv = p.querySelector("canvas"), c = +p.dataset.cell, ctx = cv.getContext("2d"), rows = [];
  for (let i = 0; i < cv.height / c; i++) {
    const row = [];
    for (let j = 0; j < cv.width / c; j++) row.push(ctx.getImageData(j * c + (c >> 1), i * c + (c >> 1), 1, 1).data[3]);
    rows.push(row);
  }
  out[p.dataset.layer + "," + p.dataset.head] = rows;
}
return out;
"""


def _panels(driver) -> dict[tuple[int, int], torch.Tensor]:
    """Every model-view panel's cells as drawn: the alpha of each cell's centre pixel / 255, by (layer, head)."""
    drawn = driver.execute_script(_PANEL_ALPHAS)
    return {tuple(int(x) for x in k.split(",")): torch.tensor(v, dtype=torch.float64) / 255 for k, v in drawn.items()}


def test_model_view_shows_every_layer_and_head_and_a_click_opens_one(browser, make_gpt, tmp_path):
    from selenium.webdriver.common.by import By

    model, tok = make_gpt("gpt2", n_layer=3), _Tok()
    ids = [3, 11, 4, 20, 8, 15, 6, 2, 9]
    maps = attention_maps(model, ids)  # 3 x (4, 9, 9)
    _open(browser, write_page(lm_attention_page(model, tok, ids, layer=1, head=3), tmp_path / "lm.html"))
    panels = browser.find_elements(By.CSS_SELECTOR, "#model-grid .panel")
    assert len(panels) == 3 * 4  # layers x heads
    assert [(int(p.get_attribute("data-layer")), int(p.get_attribute("data-head"))) for p in panels] == [
        (layer, head) for layer in range(3) for head in range(4)]
    drawn = _panels(browser)
    for (layer, head), cells in drawn.items():
        assert cells.shape == (9, 9)
        assert torch.allclose(cells, maps[layer][head].double(), atol=1 / 255 + 5e-4), (layer, head)
    active = browser.find_elements(By.CSS_SELECTOR, ".panel.active")
    assert [(p.get_attribute("data-layer"), p.get_attribute("data-head")) for p in active] == [("1", "3")]
    assert browser.find_element(By.ID, "status").text == "self: 3 layers × 4 heads; chosen: layer 1 head 3"
    _shot(browser, tmp_path, "attention_page_model_view")

    browser.find_element(By.CSS_SELECTOR, '.panel[data-layer="2"][data-head="1"]').click()
    assert browser.find_element(By.ID, "detail-view").is_displayed()
    # (the query is the last one, or the one the detail view put under the mouse)
    status = re.fullmatch(r"self layer 2 head 1 query (\d+) \(.+\)", browser.find_element(By.ID, "status").text)
    assert status, browser.find_element(By.ID, "status").text
    assert [b.get_attribute("data-head") for b in browser.find_elements(By.CSS_SELECTOR, "button.head.active")] == ["1"]
    assert browser.find_element(By.ID, "layer").get_attribute("value") == "2"
    assert torch.allclose(_shown_weights(browser)[1], maps[2][1, int(status.group(1))], atol=1e-4)
    assert browser.execute_script("return location.hash") == "#detail"
    _tab(browser, "model")
    active = browser.find_elements(By.CSS_SELECTOR, ".panel.active")
    assert [(p.get_attribute("data-layer"), p.get_attribute("data-head")) for p in active] == [("2", "1")]


def test_model_view_follows_the_chosen_attention(browser, make_transformer, tmp_path):
    from selenium.webdriver.common.by import By

    model, tok = make_transformer(num_encoder_layers=3), _Tok()
    src, tgt = [5, 9, 12, 3, 7], [1, 4, 8]
    maps = seq2seq_attention_maps(model, src, tgt)
    _open(browser, write_page(mt_attention_page(model, tok, src, tgt), tmp_path / "mt.html"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#model-grid .panel")) == 2 * 4  # cross: 2 decoder layers
    drawn = _panels(browser)
    assert drawn[(1, 2)].shape == (3, 5)  # target queries down, source keys across
    assert torch.allclose(drawn[(1, 2)], maps.cross[1][2].double(), atol=1 / 255 + 5e-4)
    browser.find_element(By.CSS_SELECTOR, 'button.view[data-view="encoder"]').click()
    assert len(browser.find_elements(By.CSS_SELECTOR, "#model-grid .panel")) == 3 * 4
    assert torch.allclose(_panels(browser)[(2, 0)], maps.encoder[2][0].double(), atol=1 / 255 + 5e-4)
    _shot(browser, tmp_path, "attention_page_model_view_encoder")


# ---------------------------------------------------------------------------------------------- zoom

def _cell_size(driver) -> float:
    return driver.execute_script("return document.querySelector('#heat td').getBoundingClientRect().width")


def test_zoom_sets_the_cell_size(browser, make_gpt, tmp_path):
    from selenium.webdriver.common.by import By

    model, tok = make_gpt("gpt2"), _Tok()
    ids = list(range(1, 11))
    _open(browser, write_page(lm_attention_page(model, tok, ids), tmp_path / "lm.html"), "detail")
    assert _cell_size(browser) == pytest.approx(28, abs=1)  # larger than the 18 px of the first pages
    browser.find_element(By.ID, "zoom-in").click()
    assert _cell_size(browser) == pytest.approx(32, abs=1)
    assert browser.find_element(By.ID, "zoom-value").text == "32 px cells"
    browser.execute_script("const z = document.getElementById('zoom'); z.value = 60;"
                           "z.dispatchEvent(new Event('input'));")
    assert _cell_size(browser) == pytest.approx(60, abs=1)
    _shot(browser, tmp_path, "attention_page_zoomed")
    _tab(browser, "model")  # the panels grow with the cells: about 4 cells of the detail per panel
    canvas = browser.find_element(By.CSS_SELECTOR, '.panel[data-layer="0"][data-head="0"] canvas')
    assert int(canvas.get_attribute("width")) == 10 * (4 * 60 // 10)
    for _ in range(20):
        browser.find_element(By.ID, "zoom-out").click()
    assert browser.find_element(By.ID, "zoom").get_attribute("value") == "12"  # the range's end
    canvas = browser.find_element(By.CSS_SELECTOR, '.panel[data-layer="0"][data-head="0"] canvas')
    assert int(canvas.get_attribute("width")) == 10 * (4 * 12 // 10)


# ---------------------------------------------------------------------------------------------- the head view

def _lines(driver) -> list[dict]:
    from selenium.webdriver.common.by import By

    return [{"head": int(ln.get_attribute("data-head")), "i": int(ln.get_attribute("data-i")),
             "j": int(ln.get_attribute("data-j")), "weight": float(ln.get_attribute("data-weight")),
             "width": float(ln.get_attribute("stroke-width")), "opacity": float(ln.get_attribute("stroke-opacity")),
             "colour": ln.get_attribute("stroke")}
            for ln in driver.find_elements(By.CSS_SELECTOR, "#hv-lines line.hv-line")]


def _expected_lines(m: torch.Tensor, queries, heads) -> set[tuple[int, int, int]]:
    """(head, query, key) of every weight the head view draws: >= 0.01 as written on the page (4 decimals)."""
    w = torch.round(m.double(), decimals=4)
    return {(h, i, j) for h in heads for i in queries for j in range(w.shape[2]) if w[h, i, j] >= 0.01}


def test_head_view_draws_a_line_per_head_from_the_chosen_token(browser, make_gpt, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    model, tok = make_gpt("gpt2"), _Tok()
    ids = [3, 11, 4, 20, 8, 15, 6, 2]
    maps = attention_maps(model, ids)  # 2 x (4, 8, 8)
    _open(browser, write_page(lm_attention_page(model, tok, ids), tmp_path / "lm.html"), "head")
    left = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".hv-query")]
    right = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".hv-key")]
    assert left == right == text_labels(tok, ids)
    lines = _lines(browser)  # the last token is chosen first: it sees the whole text
    assert {(ln["head"], ln["i"], ln["j"]) for ln in lines} == _expected_lines(maps[1], [7], range(4))
    for ln in lines:
        assert ln["weight"] == pytest.approx(maps[1][ln["head"], 7, ln["j"]].item(), abs=1e-4)
    by_weight = sorted(lines, key=lambda ln: ln["weight"])
    assert [ln["width"] for ln in by_weight] == sorted(ln["width"] for ln in lines)  # heavier: thicker
    assert [ln["opacity"] for ln in by_weight] == sorted(ln["opacity"] for ln in lines)  # and more opaque
    assert by_weight[-1]["width"] > by_weight[0]["width"]
    colours = {h: {ln["colour"] for ln in lines if ln["head"] == h} for h in range(4)}
    assert all(len(c) == 1 for c in colours.values()) and len(set.union(*colours.values())) == 4  # one per head
    assert "heads 0 1 2 3 query 7" in browser.find_element(By.ID, "status").text
    _shot(browser, tmp_path, "attention_page_head_view")

    _hover(browser, '.hv-query[data-i="4"]')
    assert {(ln["head"], ln["i"], ln["j"]) for ln in _lines(browser)} == _expected_lines(maps[1], [4], range(4))
    assert browser.find_element(By.CSS_SELECTOR, ".hv-query.active").get_attribute("data-i") == "4"
    toggle = browser.find_element(By.CSS_SELECTOR, 'button.head-toggle[data-head="1"]')
    toggle.click()  # hide head 1
    assert "on" not in toggle.get_attribute("class").split()
    assert {(ln["head"], ln["i"], ln["j"]) for ln in _lines(browser)} == _expected_lines(maps[1], [4], [0, 2, 3])
    ActionChains(browser).double_click(browser.find_element(By.CSS_SELECTOR, 'button.head-toggle[data-head="2"]')
                                       ).perform()  # head 2 alone
    assert {ln["head"] for ln in _lines(browser)} == {2}
    assert "heads 2 query 4" in browser.find_element(By.ID, "status").text
    Select(browser.find_element(By.ID, "layer")).select_by_value("0")
    assert {(ln["head"], ln["i"], ln["j"]) for ln in _lines(browser)} == _expected_lines(maps[0], [4], [2])
    browser.find_element(By.ID, "heads-all").click()
    browser.find_element(By.ID, "all-queries").click()  # every query at once
    assert {(ln["head"], ln["i"], ln["j"]) for ln in _lines(browser)} == _expected_lines(maps[0], range(8), range(4))
    _shot(browser, tmp_path, "attention_page_head_view_all")


def test_head_view_of_cross_attention(browser, make_transformer, tmp_path):
    from selenium.webdriver.common.by import By

    model, tok = make_transformer(), _Tok()
    src, tgt = [5, 9, 12, 3, 7, 2], [1, 4, 8, 6]
    maps = seq2seq_attention_maps(model, src, tgt)
    _open(browser, write_page(mt_attention_page(model, tok, src, tgt), tmp_path / "mt.html"), "head")
    assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".hv-query")] == text_labels(tok, tgt)
    assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".hv-key")] == text_labels(tok, src)
    assert browser.find_element(By.ID, "hv-qside").text == "queries: target"
    assert browser.find_element(By.ID, "hv-kside").text == "keys: source"
    _hover(browser, '.hv-query[data-i="2"]')
    lines = _lines(browser)
    assert {(ln["head"], ln["i"], ln["j"]) for ln in lines} == _expected_lines(maps.cross[1], [2], range(4))
    for ln in lines:
        assert ln["weight"] == pytest.approx(maps.cross[1][ln["head"], 2, ln["j"]].item(), abs=1e-4)
    _shot(browser, tmp_path, "attention_page_head_view_cross")


# ---------------------------------------------------------------------------------------------- readable tokens

def test_byte_level_tokens_read_as_text_with_their_bytes_on_hover(browser, make_gpt, tmp_path):
    from attnkit.data.tokenizers.bpe_tokenizer import BPETokenizer
    from selenium.webdriver.common.by import By

    # "oÃ" is a frequent pair here and "ß" and emoji are unseen: "groß" ends in "oÃ" "Ł", "😀" is four bytes
    tok = BPETokenizer.train(["Koöln und Zoürich, Boälle und Moöwe: die Koöche von Zoüge"] * 10, 300,
                             special_tokens=["<pad>", "<bos>", "<eos>"])
    ids = tok.encode("groß 😀 und")
    assert [tok.id_to_token(i) for i in ids][2:9] == ["oÃ", "Ł", "Ġ", "ð", "Ł", "ĺ", "Ģ"]
    model = make_gpt("gpt2", vocab_size=tok.vocab_size)
    titles = token_titles(tok, ids)
    _open(browser, write_page(lm_attention_page(model, tok, ids, title="groß 😀"), tmp_path / "de.html"), "detail")
    queries = browser.find_elements(By.CSS_SELECTOR, "#queries .query")
    assert [q.text for q in queries] == text_labels(tok, ids) == [
        "g", "r", "o◌", "ß", "·", "◌", "◌", "◌", "😀", "·und"]
    assert [q.get_attribute("title") for q in queries] == titles
    _hover(browser, '.query[data-i="3"]')
    info = browser.find_element(By.ID, "token-info").get_attribute("textContent")
    assert info == f'ß   id {ids[3]} · piece "Ł" · bytes 9f'
    _hover(browser, '#keys .key[data-j="8"]')
    assert browser.find_element(By.ID, "token-info").get_attribute("textContent").startswith(
        f'😀   id {ids[8]} · piece "Ģ" · bytes 80')
    heat_cols = browser.find_elements(By.CSS_SELECTOR, "#heat th.col")
    assert [c.get_attribute("title") for c in heat_cols] == titles
    _hover(browser, '.query[data-i="3"]')
    probs, top = next_token_predictions(model, ids, top_k=5)
    cands = browser.find_elements(By.CSS_SELECTOR, "#predictions .pred-token")
    assert [c.get_attribute("title") for c in cands] == token_titles(tok, top[3].tolist())
    assert [c.text for c in cands] == token_labels(tok, top[3].tolist())
    _shot(browser, tmp_path, "attention_page_readable_tokens")
    _tab(browser, "head")
    assert [e.get_attribute("title") for e in browser.find_elements(By.CSS_SELECTOR, ".hv-key")] == titles
