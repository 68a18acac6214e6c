"""The report as GitHub-flavoured markdown, for CI logs and pull-request comments, serialized
from the render model (:mod:`pipecheck.render.sections`).

:func:`render_markdown` returns: the verdict (bold), the run context, a table of key numbers,
then every section the terminal shows as a level-3 heading (facts as lines, tables as markdown
tables, findings as a list). Charts and detail blocks are left to the HTML page.

Strings from the run (type names, messages, config values, file names) are made inert by
:func:`inline`, so nothing in them renders as markup on GitHub (checked against its own
renderer, cmark-gfm, in the tests): they are one line each (control characters and line
separators as visible escapes, :mod:`pipecheck.render.inert`); ``&`` and ``<`` become HTML
entities (no tag, comment, entity or ``<https://...>`` autolink can start); ``\\``, backticks,
``*``, ``[``, ``]``, ``|``, ``~`` and ``_`` (unless inside a word, ``num_workers``) are
backslash-escaped (no code span, emphasis, strikethrough, link, image ``![x](...)`` or table
cell break); the extended autolinks are broken: ``://`` is written ``\\://``, ``www.`` as
``www\\.`` and an ``@`` before a name or domain gets a zero-width space after it (``&#8203;``:
no e-mail link, no @mention). A line that a string starts (a note, a fact without a label) has
its leading blanks dropped and a leading ``#``, ``>``, ``-``, ``+``, ``=`` or ``1.`` escaped, so
it cannot become a heading, quote, list or rule. ``code`` cells are code spans fenced with more
backticks than they hold (escapes do not apply inside code spans; ``|`` is still ``\\|``, as
GFM tables require). Control characters in the finished text are written as visible escapes
(:func:`pipecheck.render.inert.visible`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Optional

from pipecheck.render.base import Renderer
from pipecheck.render.inert import one_line, visible
from pipecheck.render.model import Block, Chart, Document, Facts, Items, Note, Table
from pipecheck.render.sections import build_document

if TYPE_CHECKING:
    from pipecheck.report_data import ReportData


class MarkdownRenderer(Renderer):
    """Markdown text ending in a newline; ``title`` (e.g. the report's file name) becomes a
    level-2 heading above it."""

    name = "markdown"
    what = "markdown"

    def __init__(self, title: Optional[str] = None) -> None:
        self.title = title

    def render(self, report: "ReportData") -> str:
        return self.render_document(build_document(report))

    def render_document(self, document: Document) -> str:
        """A built document (``pipecheck report --compare``'s) as markdown; the key-numbers
        table only when the document has key numbers."""
        lines: list[str] = []
        if self.title is not None:
            lines += [f"## {inline(self.title)}", ""]
        lines += [f"**{inline(document.verdict)}**", ""]
        lines += [f"<sub>{inline(document.context)}</sub>", ""]
        for note in document.notes:
            lines += [_note(note), ""]
        if document.headline:
            lines += _table(Table(("metric", "value"),
                                  tuple((f.label, f.value) for f in document.headline),
                                  right=frozenset({1})))
        for section in document.sections:
            lines += ["", f"### {inline(section.title)}"]
            for block in section.blocks:
                if not block.detail and not isinstance(block, Chart):
                    lines += ["", *_block(block)]
        return visible("\n".join(lines).rstrip("\n") + "\n")


def render_markdown(report: "ReportData", title: Optional[str] = None) -> str:
    """The report as markdown (:class:`MarkdownRenderer`). Raises nothing for any report that
    :meth:`pipecheck.Report.from_dict` accepts."""
    return MarkdownRenderer(title).render(report)


def _block(block: Block) -> list[str]:
    if isinstance(block, Facts):
        return [_line_start(" · ".join(f"**{inline(f.label)}** {inline(f.value)}"
                                       if inline(f.label) else inline(f.value)
                                       for f in block.facts))]
    if isinstance(block, Note):
        return [_note(block)]
    if isinstance(block, Items):
        return [f"- **{inline(item.severity)}**: {inline(item.text)}" for item in block.items]
    if isinstance(block, Table):
        if block.grid and not block.headers:  # numbered paragraphs, a blank line between
            # After the number ("1."), the text starts a list item's first line.
            paragraphs = [" ".join([inline(row[0]), *(_line_start(inline(cell))
                                                     for cell in row[1:])])
                          for row in block.rows if row]
            return [line for text in paragraphs for line in ("", text)][1:]
        return _table(block)
    return []


def _note(note: Note) -> str:
    text = _line_start(inline(note.text))
    if note.tone == "alert":
        return f"> {text}"
    if note.tone in ("bold", "warning"):
        return f"**{text}**"
    return text


_INLINE = re.compile(
    r"(?P<scheme>://)"
    r"|(?P<www>(?<![0-9A-Za-z])[Ww][Ww][Ww]\.)"
    r"|(?P<at>@(?=[0-9A-Za-z]))"
    r"|(?P<inword>(?<=[0-9A-Za-z])_(?=[0-9A-Za-z]))"
    r"|(?P<char>[\\`*_\[\]|~])"
    r"|(?P<amp>&)|(?P<lt><)")
"""What :func:`inline` rewrites, first alternative first: a URL scheme's ``://``, ``www.``, an
``@`` before a name, an underscore inside a word (kept), markdown punctuation, ``&``, ``<``."""

_ENTITIES = {"&": "&amp;", "<": "&lt;"}


def _inline_piece(match: "re.Match[str]") -> str:
    kind, text = match.lastgroup, match.group()
    if kind == "scheme":
        return "\\://"
    if kind == "www":
        return text[:3] + "\\."
    if kind == "at":
        return "@&#8203;"
    if kind == "inword":
        return text
    if kind == "char":
        return "\\" + text
    return _ENTITIES[text]


def inline(value: Any) -> str:
    """``value`` as inert inline markdown text: one line (:func:`pipecheck.render.inert.one_line`)
    without its leading and trailing blanks (``** x**`` is no bold) and with no markup GitHub
    would render (see the module docstring); a markdown viewer shows the original text."""
    return _INLINE.sub(_inline_piece, one_line(str(value)).strip(" "))


_BLOCK_START = re.compile(r"(?P<mark>[#>+=-])|(?P<number>\d{1,9})(?P<dot>[.)])(?=\s|$)")


def _line_start(text: str) -> str:
    """``text`` that begins a markdown line: leading blanks dropped (four would make a code
    block) and a leading ``#``, ``>``, ``-``, ``+``, ``=`` or ``12.`` / ``12)`` escaped, so it
    stays a paragraph (no heading, quote, list item, rule or setext underline)."""
    text = text.lstrip(" ")
    match = _BLOCK_START.match(text)
    if match is None:
        return text
    if match.group("mark"):
        return "\\" + text
    return f"{match.group('number')}\\{match.group('dot')}{text[match.end():]}"


def _cell(value: Any, code: bool = False) -> str:
    if code:
        return _code(value)
    return " ".join(inline(value).split())


def _code(value: Any) -> str:
    """``value`` as a code span in a table cell: fenced with one more backtick than its longest
    run of backticks (escapes do not work inside a code span), ``|`` escaped for the table."""
    text = " ".join(one_line(str(value)).split()).replace("|", "\\|")
    if not text:
        return ""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _table(block: Table) -> list[str]:
    """Markdown table lines; ``right`` columns are right-aligned, ``code`` ones in backticks."""
    headers = block.headers or tuple("" for _ in block.rows[0])
    aligns = ["---:" if i in block.right else "---" for i in range(len(headers))]
    out = ["| " + " | ".join(_cell(h) for h in headers) + " |", "| " + " | ".join(aligns) + " |"]
    for row in block.rows:
        out.append("| " + " | ".join(_cell(c, i in block.code) for i, c in enumerate(row)) + " |")
    return out
