"""The explorer page in a real browser: Debian's Chromium driven by Playwright for Python.

Skipped where Playwright or a Chromium (``QKV_CHROMIUM``, else ``chromium`` on
``PATH``) is absent (no browser is ever downloaded). Each page is opened from
``file://`` with every request recorded: it loads with no console error and asks for
nothing but itself. Clicks and the keyboard open the right derivation with the right
terms, computed here from the evidence. With ``QKV_EXPLORER_SCREENSHOT=PATH`` the
chapter's page is also saved there as a PNG (docs/explorer.png is made that way); by
default nothing is written outside tmp_path.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkvcli.attention.fixture import load_attend_fixture
from qkvcli.check.attend import build_attend_evidence
from qkvcli.check.chapter26 import build_evidence
from qkvcli.cli.io import load
from qkvcli.cli.options import ATTEND_PRECISION
from qkvcli.render.numbers import fmt_float
from tests.explorer_helpers import (
    EXAMPLES,
    PAGES,
    ch37_fixture,
    gpt2_page,
    page_of,
    write_page,
)

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not "
                               "installed (pip install playwright; README.md, Testing)")


def _chromium() -> Path:
    """A Chromium: ``QKV_CHROMIUM``, else the first on ``PATH`` (no browser is downloaded)."""
    import shutil

    given = os.environ.get("QKV_CHROMIUM")
    found = given or shutil.which("chromium") or shutil.which("chromium-browser")
    return Path(found or "/usr/bin/chromium")


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no Chromium found (install the "
                                "chromium package or set QKV_CHROMIUM; README.md, Testing)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield launched
        finally:
            launched.close()


class Opened:
    """A page opened from ``file://``, with its console errors and every request it made."""

    def __init__(self, browser: Any, path: Path, width: int = 1400, height: int = 1000) -> None:
        self.page = browser.new_page(viewport={"width": width, "height": height})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error"
                     else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.url = path.resolve().as_uri()
        self.page.goto(self.url)
        self.page.wait_for_load_state("load")

    def offline(self) -> None:
        assert self.errors == []
        assert self.requests == [self.url]  # the page itself, nothing else

    def number(self, tensor: str, index: str, field: str = "") -> Any:
        selector = f'[data-tensor="{tensor}"][data-index="{index}"]'
        if field:
            selector += f'[data-field="{field}"]'
        return self.page.locator(selector).first

    def panel(self) -> str:
        panel = self.page.locator("#qkv-panel")
        assert panel.is_visible()
        assert panel.get_attribute("aria-live") == "polite"
        return str(panel.inner_text())

    def by_keyboard(self, tensor: str, index: str) -> str:
        """Tab to the number from the number before it (from the page's start for the
        first), press Enter: the panel's text (then Escape closes it and focus stays on
        the number)."""
        target = self.number(tensor, index)
        if not target.evaluate("""element => {
            const all = Array.from(document.querySelectorAll('[data-tensor]'));
            const before = all[all.indexOf(element) - 1];
            if (before) { before.focus(); }
            return Boolean(before);
        }"""):
            self.page.locator("header h1").click()  # tabbing starts from the page's top
        for _ in range(5):  # from the start: the controls and summaries come first
            self.page.keyboard.press("Tab")
            if target.evaluate("element => element === document.activeElement"):
                break
        assert target.evaluate("element => element === document.activeElement")
        self.page.keyboard.press("Enter")
        text = self.panel()
        self.page.keyboard.press("Escape")
        assert not self.page.locator("#qkv-panel").is_visible()
        assert target.evaluate("element => element === document.activeElement")
        return text

    def close(self) -> None:
        self.page.close()


@pytest.fixture(scope="module")
def chapter(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Opened]:
    folder = tmp_path_factory.mktemp("chapter")
    write_page(folder, "run")
    opened = Opened(browser, folder / "page.html")
    yield opened
    opened.close()


def variance(png: bytes, browser: Any) -> float:
    """The variance of a screenshot's grey levels (0 for a blank one), measured by the
    browser's own decoder in a canvas."""
    page = browser.new_page()
    try:
        page.set_content("<canvas></canvas>")
        return float(page.evaluate("""async (data) => {
            const image = new Image();
            image.src = 'data:image/png;base64,' + data;
            await image.decode();
            const canvas = document.querySelector('canvas');
            canvas.width = image.width; canvas.height = image.height;
            const context = canvas.getContext('2d');
            context.drawImage(image, 0, 0);
            const pixels = context.getImageData(0, 0, image.width, image.height).data;
            let sum = 0, squares = 0, count = 0;
            for (let i = 0; i < pixels.length; i += 4) {
                const grey = (pixels[i] + pixels[i + 1] + pixels[i + 2]) / 3;
                sum += grey; squares += grey * grey; count += 1;
            }
            const mean = sum / count;
            return squares / count - mean * mean;
        }""", base64.b64encode(png).decode("ascii")))
    finally:
        page.close()


# --- the chapter (qkv run) ---------------------------------------------------------------


def test_the_chapter_page_loads_offline_with_its_numbers(chapter: Opened) -> None:
    chapter.offline()
    numbers = chapter.page.locator("[data-tensor][data-index]")
    assert numbers.count() > 80
    assert chapter.number("query", "0,0,1").get_attribute("tabindex") == "0"
    assert chapter.number("query", "0,0,1").get_attribute("role") == "button"


def test_clicking_dx_shows_its_three_path_terms_at_six_decimals(chapter: Opened) -> None:
    p = build_evidence(load(None, 1 << 20)).primary
    chapter.number("input_gradient", "0,0,0").click()
    text = chapter.panel()
    for letter, upstream, weight in zip("QKV", (p.grad_query, p.grad_key, p.grad_value),
                                        p.weights, strict=True):
        path = float(np.dot(upstream[0, 0], weight[0]))
        line = next(line for line in text.splitlines() if f"(U_{letter} W_{letter}ᵀ)[0,0,0]" in line)
        assert line.split()[-1] == fmt_float(path, 6), line
    total = next(line for line in text.splitlines() if line.startswith("="))
    assert total.split()[-1] == fmt_float(float(p.grad_input[0, 0, 0]), 6)
    lines = text.splitlines()
    assert lines.index(total) == lines.index(line) + 1  # the value right below its terms
    assert "input_gradient[0,0,0]" in text
    assert chapter.by_keyboard("input_gradient", "0,0,0") == text


def test_clicking_q_shows_its_row_times_column_terms(chapter: Opened) -> None:
    p = build_evidence(load(None, 1 << 20)).primary
    chapter.number("query", "0,0,1").click()
    text = chapter.panel()
    for i in range(p.input.shape[-1]):
        term = float(p.input[0, 0, i] * p.w_query[i, 1])
        line = next(line for line in text.splitlines() if f"X[0,0,{i}] \u00d7 W_Q[{i},1]" in line)
        assert line.split()[-1] == fmt_float(term, 6)
    assert "row 0 of X (batch 0) times column 1 of W_Q" in text
    assert chapter.by_keyboard("query", "0,0,1") == text


def test_a_weight_gradient_and_a_gradient_check_coordinate(chapter: Opened) -> None:
    chapter.number("key_weight_gradient", "1,0").click()
    assert "the sum over 1 batch items and 2 tokens" in chapter.panel()
    chapter.page.locator(".gradcheck details summary").first.click()  # passing: folded
    chapter.number("gradcheck.input", "0,0,0", "numerical").click()
    text = chapter.panel()
    assert "numerical (L(x+h) \u2212 L(x\u2212h)) / 2h" in text and "step h" in text
    # the panel ends on the number clicked, not on the analytic value it shares it with
    for field in ("numerical", "scaled_error", "analytic"):
        clicked = chapter.number("gradcheck.input", "0,0,0", field)
        clicked.click()
        last = chapter.page.locator("#qkv-panel tr.total").last.inner_text()
        assert f"the {field.replace('_', ' ')} (clicked)" in last, last
        assert clicked.inner_text().strip() in last, last


def test_the_close_button_and_escape_close_the_panel(chapter: Opened) -> None:
    chapter.number("value", "0,1,1").click()
    chapter.page.locator("#qkv-panel .close").click()
    assert not chapter.page.locator("#qkv-panel").is_visible()
    chapter.offline()


def test_a_screenshot_of_the_chapter_is_not_blank(chapter: Opened, browser: Any) -> None:
    chapter.number("input_gradient", "0,0,0").click()
    png = chapter.page.screenshot(full_page=False)
    assert variance(png, browser) > 100.0
    target = os.environ.get("QKV_EXPLORER_SCREENSHOT")
    if target:
        Path(target).write_bytes(png)


# --- the bundled head (qkv attend --causal) ------------------------------------------------


def test_an_attention_weight_shows_its_scaled_score_and_its_rows_softmax(
        browser: Any, tmp_path: Path) -> None:
    write_page(tmp_path, "attend", "--causal")
    opened = Opened(browser, tmp_path / "page.html")
    try:
        opened.offline()
        evidence = build_attend_evidence(load_attend_fixture(None, "chapter", 1 << 20, None,
                                                             True), causal=True)
        a = evidence.primary.tensors
        opened.number("weights", "0,1,0").click()
        text = opened.panel()
        z = a["scaled_scores"][0, 1]
        exps = np.exp(z - z.max())
        assert f"scale\t{fmt_float(evidence.config.scale, ATTEND_PRECISION)}" in text
        assert f"scaled score S \u00d7 scale (then masked)\t{fmt_float(z[0], ATTEND_PRECISION)}" in text
        assert f"the row's maximum z\t{fmt_float(z.max(), ATTEND_PRECISION)}" in text
        assert f"sum of the row's exponentials\t{fmt_float(exps.sum(), ATTEND_PRECISION)}" in text
        for key in range(2):
            assert f"key {key}: exp(z \u2212 max)\t{fmt_float(exps[key], ATTEND_PRECISION)}" in text
        assert text.splitlines()[-1].split()[-1] == fmt_float(a["attention"][0, 1, 0], ATTEND_PRECISION)
        assert opened.by_keyboard("weights", "0,1,0") == text
        opened.number("input", "0,1,2").click()
        assert "given by the fixture" in opened.panel()
        opened.number("scores", "0,1,0").click()  # query row times key row
        assert "Q[0,1,0] \u00d7 K[0,0,0]" in opened.panel()
        opened.number("weights", "0,0,1").click()  # above the diagonal
        assert "no: z = the scaled score)\tyes" in opened.panel()
        # the causal toggle: the same weights without the mask, from the engine's forward
        shown = opened.page.locator(".mask:not([hidden])")
        assert shown.count() == 1 and shown.get_attribute("data-causal") == "true"
        opened.page.select_option("#qkv-causal", "false")
        assert shown.count() == 1 and shown.get_attribute("data-causal") == "false"
        unmasked = opened.page.locator('.mask[data-causal="false"] [data-index="0,0,1"]')
        unmasked.click()
        text = opened.panel()
        assert "no: z = the scaled score)\tno" in text and "(other mask)" in text
        assert text.splitlines()[-1].split()[-1] == unmasked.inner_text()
        opened.page.select_option("#qkv-causal", "true")
        # the scale switch changes what shades a cell: row-relative by default
        assert opened.page.evaluate("document.body.dataset.scale") == "row"
        opened.page.locator("input[value=abs]").check()
        assert opened.page.evaluate("document.body.dataset.scale") == "abs"
        legend = opened.page.locator('.legend[data-scale-for="abs"]')
        assert legend.is_visible() and not opened.page.locator(
            '.legend[data-scale-for="row"]').is_visible()
        opened.offline()
    finally:
        opened.close()


# --- chapter 37: a KV cache's steps ----------------------------------------------------------


def _shown(text: str, label: str) -> float:
    """The value on the panel's row ``label`` (its text, tab-separated)."""
    line = next(line for line in text.splitlines() if label in line)
    return float(line.split("\t")[-1])


def test_a_cache_steps_numbers_open_their_terms(browser: Any, tmp_path: Path) -> None:
    """A random chapter-37 fixture's page: a weight opens its scores' products and its
    row's softmax, an output its merged heads times W_O, an appended key its rotation
    pair at the cache's length, a work count its sum over the steps, the capacity says
    the fixture gave it; each checked against the engine's causal pass here."""
    import json

    from qkvcli.attention import engine
    from qkvcli.chapters import ch37

    path = ch37_fixture(tmp_path)
    write_page(tmp_path, "run", str(path))
    fixture = ch37.parse(json.loads(path.read_text(encoding="utf-8")))
    layer = ch37.decoding_layer(fixture.spec)
    full = engine.forward(layer.layer, fixture.input[:, :3], True)  # the prefix of step 2
    opened = Opened(browser, tmp_path / "page.html", 1280, 900)
    try:
        opened.offline()
        opened.page.select_option("#qkv-head", "1")
        opened.number("steps.2.weights", "0,1,0,1").click()
        text = opened.panel()
        assert _shown(text, "raw score S = q\u00b7k") == pytest.approx(
            full.stacked["scores"][0, 1, 2, 1], abs=2e-6)
        d_h = fixture.spec.table.features
        for c in range(d_h):
            assert f"RQ[0,1,0,{c}] \u00d7 K_cache[0,1,1,{c}]" in text
        assert "key 2: exp(z \u2212 max)" in text  # the step's own key, last
        assert _shown(text, "the value") == pytest.approx(full.attention[0, 1, 2, 1], abs=2e-6)
        opened.number("steps.2.output", "0,0").click()
        text = opened.panel()
        assert "C[0,2,0] \u00d7 W_O[0,0]" in text and "output projection" in text
        assert _shown(text, "the value") == pytest.approx(full.output[0, -1, 0], abs=2e-6)
        opened.page.select_option("#qkv-head", "0")
        opened.number("steps.1.appended_key", "0,0,0,0").click()
        text = opened.panel()
        omega = fixture.spec.table.base ** (-2 * 0 / d_h)
        assert _shown(text, "cos\u03b8 (pair 0, position 1)") == pytest.approx(
            np.cos(omega), abs=2e-6)
        assert _shown(text, "the value") == pytest.approx(
            full.stacked["rotated_key"][0, 0, 1, 0], abs=2e-6)
        opened.number("work.full_rows_per_projection", "").click()
        text = opened.panel()
        tokens = int(fixture.input.shape[1])
        for t in range(tokens):
            assert _shown(text, f"steps.{t}.work.full_prefix_rows") == t + 1
        assert _shown(text, "the value") == tokens * (tokens + 1) // 2
        opened.number("config.capacity", "").click()
        assert "given by the fixture" in opened.panel()
        clicked = opened.number("steps.0.output", "0,1")
        clicked.click()
        text = opened.panel()
        opened.page.keyboard.press("Escape")
        assert opened.by_keyboard("steps.0.output", "0,1") == text
        opened.offline()
    finally:
        opened.close()


# --- a checked implementation (qkv check) ---------------------------------------------------


def test_a_failed_check_opens_expected_against_actual_and_its_replay(
        browser: Any, tmp_path: Path) -> None:
    write_page(tmp_path, "check", str(EXAMPLES / "wrong_key_path_uses_query_weight.py"))
    opened = Opened(browser, tmp_path / "page.html")
    try:
        opened.offline()
        assert opened.page.locator("details.passing").get_attribute("open") is None  # folded
        opened.number("failures", "0", "actual").click()
        text = opened.panel()
        assert "actual (the implementation)" in text and "expected (qkv's engine)" in text
        assert "the slip" in text and "--save-failures DIR" in text
        assert opened.by_keyboard("failures", "0") == text
        opened.offline()
    finally:
        opened.close()


# --- a GPT-2-small layer at T=1024 ---------------------------------------------------------------


def test_a_gpt2_small_layer_page_loads_offline_and_switches_heads(
        browser: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    opened = Opened(browser, gpt2_page(tmp_path_factory))
    try:
        opened.offline()
        shown = opened.page.locator(".maps .slice:not([hidden])")
        assert shown.count() == 1 and shown.get_attribute("data-head") == "0"
        opened.page.select_option("#qkv-head", "11")
        assert shown.count() == 1 and shown.get_attribute("data-head") == "11"
        cell = opened.page.locator('.maps .slice[data-head="11"] [data-tensor="weights"]').last
        index = cell.get_attribute("data-index")
        cell.click()
        text = opened.panel()
        assert f"weights[{index}]" in text and "sum of the row's exponentials" in text
        assert opened.by_keyboard("weights", str(index)) == text
        png = opened.page.screenshot(full_page=False)
        assert variance(png, browser) > 100.0
        opened.offline()
    finally:
        opened.close()


# --- every page, on a desktop and on a phone -------------------------------------------------

WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}


def _box(locator: Any) -> dict[str, float]:
    box = locator.bounding_box()
    assert box is not None
    return dict(box)


def _apart(a: dict[str, float], b: dict[str, float]) -> bool:
    return (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
            or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("name", list(PAGES))
def test_every_page_works_on_a_desktop_and_a_phone(
        browser: Any, tmp_path_factory: pytest.TempPathFactory, name: str, width: str) -> None:
    """Offline, no wider than the screen, every number focusable, and a clicked number's
    panel on the screen, beside the number, never over it; opened gradient-check tables
    keep each number on one line."""
    wide, high = WIDTHS[width]
    opened = Opened(browser, page_of(name, tmp_path_factory), wide, high)
    try:
        opened.offline()
        page = opened.page
        assert page.evaluate("document.documentElement.scrollWidth") <= wide
        numbers = page.locator("[data-tensor]")
        assert page.evaluate("""() => Array.from(document.querySelectorAll('[data-tensor]'))
            .every(e => e.tabIndex === 0 && e.getAttribute('role') === 'button')""")
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        assert page.evaluate("document.documentElement.scrollWidth") <= wide
        one_line = page.evaluate("""() => Array.from(document.querySelectorAll(
            'table.values td[data-tensor]')).every(td => {
                const range = document.createRange();
                range.selectNodeContents(td);
                return range.getClientRects().length <= 1; })""")
        assert one_line  # no number breaks, at its exponent or anywhere
        visible = [i for i in range(numbers.count()) if numbers.nth(i).is_visible()]
        for i in sorted({visible[0], visible[len(visible) // 2], visible[-1]} if visible else ()):
            number = numbers.nth(i)
            number.click()
            panel = page.locator("#qkv-panel")
            assert panel.is_visible()
            box, shown = _box(panel), _box(number)
            assert box["x"] >= 0 and box["x"] + box["width"] <= wide
            assert _apart(box, shown), (i, box, shown)
            assert shown["y"] >= 0  # the number is still on the screen
            page.keyboard.press("Escape")
        if visible:
            number = numbers.nth(visible[-1])
            number.focus()
            page.keyboard.press("Enter")
            assert page.locator("#qkv-panel").is_visible()
            page.keyboard.press("Escape")
        opened.offline()
    finally:
        opened.close()
