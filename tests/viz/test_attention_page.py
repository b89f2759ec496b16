"""The interactive attention page: self-contained HTML whose numbers are the captured weights, driven in a real
headless Chromium (Debian's ``chromium`` + ``chromedriver`` through Selenium; no browser download).

The browser tests skip, with the reason, when Chromium, its driver or Selenium is not installed
(``apt-get install chromium chromium-driver``; ``pip install selenium``); ``.ci/run`` installs the two Debian
packages where the CI machine can (root, apt-get), and does not fail where it cannot. Set ``ATTNKIT_SCREENSHOTS=DIR`` to keep
the screenshots they take.
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
from attnkit.viz.labels import token_labels
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
    assert view["queries"] == view["keys"] == token_labels(tok, ids)
    assert view["query_side"] == view["key_side"] == "text"
    weights_json = json.dumps(view["weights"])
    assert not re.search(r"\d\.\d{5}", weights_json), "weights are written with at most 4 decimals"
    for layer, m in enumerate(maps):
        assert torch.allclose(torch.tensor(view["weights"][layer]), m, atol=6e-5)
    probs, top = next_token_predictions(model, ids, top_k=3)
    row = data["predictions"][2]
    assert [t for t, _ in row["top"]] == token_labels(tok, top[2].tolist())
    assert [p for _, p in row["top"]] == pytest.approx(probs[2].tolist(), abs=1e-4)
    assert row["next"] == token_labels(tok, [ids[3]])[0] and data["predictions"][-1]["next"] is None
    assert data["start"] == {"view": "self", "layer": len(maps) - 1, "head": 0}


def test_script_end_tag_in_a_token_cannot_break_the_page():
    data = {"title": "x", "top_k": 1, "predictions": [{"top": [["</script>", 1.0]], "next": None}],
            "views": [{"name": "self", "title": "", "queries": ["</script>"], "keys": ["</script>"],
                       "predicts": True, "weights": [[[[1.0]]]]}]}
    html = render_attention_page(data)
    assert html.count("</script>") == 2  # the two real script elements only
    assert _data(html)["views"][0]["queries"] == ["</script>"]


def test_bad_choices(make_gpt):
    model = make_gpt("gpt2")
    with pytest.raises(ValueError, match=r"layer must be in \[0, 1\], got 2"):
        lm_attention_page(model, _Tok(), [1, 2, 3], layer=2)
    with pytest.raises(ValueError, match=r"head must be in \[0, 3\], got 4"):
        lm_attention_page(model, _Tok(), [1, 2, 3], head=4)
    with pytest.raises(ValueError, match="top_k"):
        lm_attention_page(model, _Tok(), [1, 2, 3], top_k=0)
    with pytest.raises(ValueError, match=r"view must be one of \['self'\]"):
        render_attention_page(_data(lm_attention_page(model, _Tok(), [1, 2])), view="cross")


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


def _open(driver, path: Path):
    from selenium.webdriver.common.by import By

    driver.get(path.resolve().as_uri())
    assert driver.find_element(By.ID, "status").text  # the script ran


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
    _open(browser, page)
    Select(browser.find_element(By.ID, "layer")).select_by_value("0")
    browser.find_element(By.CSS_SELECTOR, 'button.head[data-head="2"]').click()
    _hover(browser, '.query[data-i="5"]')
    assert browser.find_element(By.ID, "status").text.startswith("self layer 0 head 2 query 5")
    active = browser.find_elements(By.CSS_SELECTOR, "button.head.active")
    assert [b.get_attribute("data-head") for b in active] == ["2"]
    labels, shown = _shown_weights(browser)
    assert labels == token_labels(tok, ids)
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
    _open(browser, page)
    assert browser.find_element(By.CSS_SELECTOR, "button.view.active").text == "cross"  # the default view
    browser.find_element(By.CSS_SELECTOR, 'button.head[data-head="1"]').click()
    _hover(browser, '.query[data-i="2"]')
    labels, shown = _shown_weights(browser)
    assert labels == token_labels(tok, src)  # cross-attention: target queries over source keys
    assert [q.text for q in browser.find_elements(By.CSS_SELECTOR, ".query")] == token_labels(tok, tgt)
    assert torch.allclose(shown, maps.cross[-1][1, 2], atol=1e-4)
    assert _heatmap(browser) == (token_labels(tok, src), token_labels(tok, tgt))  # source across, target down
    assert _sides(browser) == ("target", "source")
    assert browser.find_element(By.ID, "view-title").text == "cross-attention (target → source)"
    assert browser.find_elements(By.CSS_SELECTOR, "#predictions tr.pred")
    _shot(browser, tmp_path, "attention_page_cross")

    browser.find_element(By.CSS_SELECTOR, 'button.view[data-view="encoder"]').click()
    _hover(browser, '.query[data-i="0"]')
    labels, shown = _shown_weights(browser)
    assert labels == token_labels(tok, src) and torch.allclose(shown, maps.encoder[-1][1, 0], atol=1e-4)
    assert _sides(browser) == ("source", "source") and _heatmap(browser)[0] == token_labels(tok, src)
    assert shown[-1] > 0  # the encoder is not causal: the first token sees the last
    assert not browser.find_elements(By.CSS_SELECTOR, "#predictions tr.pred")  # no predictions on source tokens

    browser.find_element(By.CSS_SELECTOR, 'button.view[data-view="decoder"]').click()
    _hover(browser, '.query[data-i="1"]')
    labels, shown = _shown_weights(browser)
    assert labels == token_labels(tok, tgt) and torch.allclose(shown, maps.decoder[-1][1, 1], atol=1e-4)
    assert _sides(browser) == ("target", "target")
    assert torch.all(shown[2:] == 0)
    _shot(browser, tmp_path, "attention_page_decoder")
