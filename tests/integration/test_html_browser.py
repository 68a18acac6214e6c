"""The HTML report in a real browser: headless Chromium, driven over the DevTools protocol
(tests/cdp_browser.py), loads the page from a file and we check that it logged no error, drew
every chart, requested nothing but the file itself, and ran no script even when the report's
strings hold ``<script>``. Skipped when no Chromium is installed (CI installs Debian's)."""

from __future__ import annotations

import json
import os

import pytest

from cdp_browser import Browser, find_chromium
from render_fixtures import SCRIPT, hostile_report, real_report

CHROMIUM = find_chromium()
REQUIRED = bool(os.environ.get("PIPECHECK_REQUIRE_BROWSER"))  # set by .ci/run
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not REQUIRED,
    reason="no chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)")

# Every chart: its size on screen, the size of what it drew, and how many shapes it holds.
CHARTS = """(document.querySelectorAll('details').forEach(d => { d.open = true; }),
JSON.stringify({
  figures: document.querySelectorAll('figure.chart').length,
  scripts: document.scripts.length,
  text: document.body.innerText,
  svgs: Array.from(document.querySelectorAll('figure.chart svg')).map(svg => {
    const box = svg.getBoundingClientRect(), drawn = svg.getBBox();
    return {width: box.width, height: box.height, drawnWidth: drawn.width,
            drawnHeight: drawn.height, shapes: svg.querySelectorAll('path, text, use').length};
  })
}))"""
"""Opens every collapsed section first (the test's own script over DevTools; the page has
none), then measures."""


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.fail("PIPECHECK_REQUIRE_BROWSER is set but no chromium is on PATH")
    with Browser(CHROMIUM) as running:
        yield running


def _load(browser, report, path):
    report.save_html(path)
    url = path.resolve().as_uri()
    load = browser.open(url)
    return url, load, json.loads(browser.evaluate(CHARTS))


def test_real_report_loads_cleanly_with_every_chart_drawn(browser, tmp_path):
    url, load, page = _load(browser, real_report(), tmp_path / "run.html")
    assert load.errors == []
    # the page itself and nothing else (dense charts embed data: images, loaded from the page)
    assert [r for r in load.requests if not r.startswith("data:")] == [url]
    assert page["figures"] == len(page["svgs"]) == 6
    for svg in page["svgs"]:
        assert svg["width"] > 300 and svg["height"] > 100, svg
        assert svg["drawnWidth"] > 100 and svg["drawnHeight"] > 50, svg
        assert svg["shapes"] > 10, svg
    assert page["scripts"] == 0
    verdict = real_report().diagnosis.verdict.upper()
    assert page["text"].startswith(f"{verdict}: ")


def test_script_in_report_strings_is_shown_not_run(browser, tmp_path):
    url, load, page = _load(browser, hostile_report(), tmp_path / "hostile.html")
    assert load.errors == []  # nothing ran, so nothing was blocked either
    assert [r for r in load.requests if not r.startswith("data:")] == [url]
    assert page["scripts"] == 0
    assert f"ValueError: bad sample {SCRIPT}" in page["text"]
    assert f"<MyDataset {SCRIPT} at 0x7f>" in page["text"]
    assert page["figures"] == len(page["svgs"]) == 7


COLLAPSED = """JSON.stringify({
  sections: document.querySelectorAll('details.section').length,
  open: document.querySelectorAll('details.section[open]').length,
  cardHeights: Array.from(document.querySelectorAll('.number'))
    .map(c => c.getBoundingClientRect().height),
  listNumbers: Array.from(document.querySelectorAll('td.nw'))
    .filter(td => /^[0-9]+[.]$/.test(td.textContent))
    .map(td => { const r = document.createRange(); r.selectNodeContents(td);
                 return r.getClientRects().length === 1; }),
})"""


@pytest.mark.parametrize("width", [1280, pytest.param(420, marks=pytest.mark.slow)])
def test_sections_start_collapsed_and_cards_and_list_numbers_stay_short(browser, tmp_path, width):
    path = tmp_path / "run.html"
    real_report().save_html(path)
    browser.set_width(width)
    try:
        browser.open(path.resolve().as_uri())
        page = json.loads(browser.evaluate(COLLAPSED))
        browser.screenshot(str(tmp_path / f"run-{width}.png"))  # kept by pytest for a look
    finally:
        browser.set_width(1280)
    assert (tmp_path / f"run-{width}.png").stat().st_size > 1000
    assert page["sections"] > 3 and page["open"] == 0
    assert max(page["cardHeights"]) < 140  # a figure and a line or two of words, not a paragraph
    assert page["listNumbers"] and all(page["listNumbers"])
