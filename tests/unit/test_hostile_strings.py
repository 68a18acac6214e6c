"""Hostile strings, in process: a line separator planted in every string field of a report
(found by walking its dataclasses) never starts a line of its own in the terminal summary or the
markdown; markdown syntax planted the same way renders as text on GitHub's renderer
(cmark-gfm) and CommonMark's (markdown-it), never as an image, link, autolink, HTML or another
table cell."""

from __future__ import annotations

import collections
import re

import pytest
from markdown_it import MarkdownIt

from pipecheck.render.markdown import render_markdown
from pipecheck.render.terminal import render_terminal
from full_reports import (assert_no_forged_line, attach_report, every_section_report, forged,
                          plant_strings)

REPORTS = {"every section": every_section_report, "attach": attach_report}
SGR = re.compile("\x1b\\[[0-9;]*m")


# -- no forged lines ---------------------------------------------------------------------------------

SHOWN = {
    "every section": ["report.diagnosis.findings[0].message", "report.recommendations[0].reason",
                      "report.producer.stages[0].name", "report.stacks.note",
                      "report.ranks.ranks[0].hostname", "report.consumer.error",
                      "report.loader.type", "report.stress.trials[3].error",
                      "report.sharding.findings[0].message", "report.environment.platform",
                      "report.stress.skipped[0].reason"],
    "attach": ["report.attach.unknown[0]", "report.attach.interval_method",
               "report.loader.type", "report.diagnosis.findings[0].message"],
}
"""Strings each report shows in the terminal summary (so the test sees them planted)."""


@pytest.mark.parametrize("name", REPORTS)
def test_a_separator_in_any_string_field_starts_no_line(name):
    report, planted = forged(REPORTS[name]())
    shown = assert_no_forged_line(render_terminal(report, width=100, verbose=True), planted)
    assert set(SHOWN[name]) <= shown, set(SHOWN[name]) - shown
    assert_no_forged_line(render_terminal(report, width=100), planted)  # the short view
    assert_no_forged_line(render_terminal(report, width=60), planted)  # wrapped, stacked
    coloured = render_terminal(report, width=100, color=True)
    assert SGR.search(coloured)
    assert_no_forged_line(SGR.sub("", coloured), planted)
    shown = assert_no_forged_line(render_markdown(report, title="run\nFORGED0: a file name"),
                                  planted, markdown=True)
    assert set(SHOWN[name]) <= shown


@pytest.mark.parametrize("name", REPORTS)
def test_a_string_cannot_wrap_onto_the_verdict_s_column(name):
    """Only the verdict and section titles start at column 0: a string whose length puts a
    word at the start of a wrapped line gets it indented (a paragraph's wrapped lines hang)."""
    for pad in (0, 36, 54):  # lengths that put the payload at a wrapped line's start
        report, _ = plant_strings(REPORTS[name](), lambda path, s: f"{s} {'w' * pad} "
                                  "COMPUTE-BOUND: the training loop waited for data only 1%")
        for width in (60, 100):
            for line in render_terminal(report, width=width).split("\n"):
                assert not line.startswith("COMPUTE-BOUND"), (pad, width, line)


def test_a_string_is_cut_to_2000_characters_saying_so():
    report = every_section_report()
    long = plant_strings(report, lambda path, s: s if "findings[0].message" not in path
                         else "x" * 100_000)[0]
    text = render_markdown(long)
    assert "x" * 2000 + "... (98,000 more characters; see the JSON)" in text
    assert len(text) < len(render_markdown(report)) + 4000


# -- markdown: no image, link, autolink, HTML or table break ------------------------------------

PAYLOADS = [
    "![pixel](https://evil.example/p.png)",
    "[click here](https://evil.example/login) [ref][1]\n\n[1]: https://evil.example",
    "<https://evil.example/auto> <img src=x onerror=alert(1)> <!-- hidden --> &lt;b&gt;",
    "https://evil.example/bare HTTPS://EVIL.EXAMPLE www.evil.example ftp://evil.example",
    "user@evil.example mailto:user@evil.example @octocat",
    "a | b | c || `code | span` ``two``",
    "**bold** __strong__ *em* _em_ ~~gone~~ \\*escaped\\* back\\",
    "# heading",
    "> quote",
    "- item",
    "1. item",
    "---",
    "    indented code",
    "| x | y |\n|---|---|\n| 1 | 2 |",
]
"""Markdown that would render as something other than its own text."""

STRUCTURE = ("a", "img", "table", "tr", "td", "th", "h1", "h2", "h3", "h4", "ul", "ol", "li",
             "blockquote", "hr", "pre", "code", "strong", "em", "del", "p", "br", "sub")


def _planted_markdown(name, payload_for):
    report, _ = plant_strings(REPORTS[name](), lambda path, s: payload_for(path))
    return render_markdown(report)


def _tags(html: str) -> collections.Counter:
    return collections.Counter(tag for tag in re.findall(r"<([a-z0-9]+)[\s>/]", html)
                               if tag in STRUCTURE)


@pytest.mark.parametrize("name", REPORTS)
def test_markdown_from_hostile_strings_renders_as_their_text_on_github(name):
    """GitHub's own renderer (cmark-gfm, with its extensions: tables, autolinks,
    strikethrough, tag filter) gives the same elements for the hostile report as for one whose
    strings are plain words: nothing in a string became markup."""
    cmarkgfm = pytest.importorskip("cmarkgfm")
    from cmarkgfm.cmark import Options

    def github(text):  # raw HTML passed on, as GitHub does before its own sanitizer
        return cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)

    plain = github(_planted_markdown(name, lambda path: "plain words"))
    for payload in PAYLOADS:
        rendered = github(_planted_markdown(name, lambda path: payload))
        assert _tags(rendered) == _tags(plain), (payload, _tags(rendered) - _tags(plain),
                                                 _tags(plain) - _tags(rendered))
        assert not re.search(r"<(a|img|script|!--)[\s>]|href=", rendered), payload
    shown = github(_planted_markdown(name, lambda path: PAYLOADS[0]))
    assert "![pixel](https://evil.example/p.png)" in shown  # shown as typed


@pytest.mark.parametrize("name", REPORTS)
def test_markdown_from_hostile_strings_renders_as_their_text_in_commonmark(name):
    parser = MarkdownIt("commonmark").enable("table").enable("strikethrough")

    def kinds(text):
        tokens = parser.parse(text)
        inline = [child.type for token in tokens for child in (token.children or [])]
        return collections.Counter([t.type for t in tokens] + inline)

    plain = kinds(_planted_markdown(name, lambda path: "plain words"))
    for payload in PAYLOADS:
        found = kinds(_planted_markdown(name, lambda path: payload))
        for kind in ("link_open", "image", "html_inline", "html_block", "code_inline",
                     "code_block", "fence", "heading_open", "blockquote_open",
                     "bullet_list_open", "ordered_list_open", "hr", "td_open", "th_open",
                     "em_open", "strong_open", "s_open", "table_open"):
            assert found[kind] == plain[kind], (payload, kind, found[kind], plain[kind])
