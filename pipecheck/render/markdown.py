"""The report as GitHub-flavoured markdown, for CI logs and pull-request comments, serialized
from the render model (:mod:`pipecheck.render.sections`).

:func:`render_markdown` returns: the verdict (bold), the run context, a table of key numbers,
then every section the terminal shows as a level-3 heading (facts as lines, tables as markdown
tables, findings as a list). Charts and detail blocks are left to the HTML page.

Strings from the run (type names, messages, config values) are made inert: ``&`` and ``<``
become HTML entities (GitHub renders raw HTML tags in markdown, so a repr such as
``<MyDataset object>`` would otherwise vanish, and a ``<script>`` would be markup), and ``|``
inside table cells is escaped as ``\\|``. Control characters (terminal escapes) in the finished
text are written as visible escapes (:func:`pipecheck.render.inert.visible`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from pipecheck.render.base import Renderer
from pipecheck.render.inert import visible
from pipecheck.render.model import Block, Chart, Facts, Items, Note, Table
from pipecheck.render.sections import build_document

if TYPE_CHECKING:
    from pipecheck.report import Report


class MarkdownRenderer(Renderer):
    """Markdown text ending in a newline; ``title`` (e.g. the report's file name) becomes a
    level-2 heading above it."""

    name = "markdown"
    what = "markdown"

    def __init__(self, title: Optional[str] = None) -> None:
        self.title = title

    def render(self, report: "Report") -> str:
        document = build_document(report)
        lines: list[str] = []
        if self.title is not None:
            lines += [f"## {_text(self.title)}", ""]
        lines += [f"**{_text(document.verdict)}**", ""]
        lines += [f"<sub>{_text(document.context)}</sub>", ""]
        for note in document.notes:
            lines += [_note(note), ""]
        lines += _table(Table(("metric", "value"),
                              tuple((f.label, f.value) for f in document.headline),
                              right=frozenset({1})))
        for section in document.sections:
            lines += ["", f"### {_text(section.title)}"]
            for block in section.blocks:
                if not block.detail and not isinstance(block, Chart):
                    lines += ["", *_block(block)]
        return visible("\n".join(lines).rstrip("\n") + "\n")


def render_markdown(report: "Report", title: Optional[str] = None) -> str:
    """The report as markdown (:class:`MarkdownRenderer`). Raises nothing for any report that
    :meth:`pipecheck.Report.from_dict` accepts."""
    return MarkdownRenderer(title).render(report)


def _block(block: Block) -> list[str]:
    if isinstance(block, Facts):
        return [" · ".join(f"**{_text(f.label)}** {_text(f.value)}" if f.label else _text(f.value)
                           for f in block.facts)]
    if isinstance(block, Note):
        return [_note(block)]
    if isinstance(block, Items):
        return [f"- **{_text(item.severity)}**: {_text(item.text)}" for item in block.items]
    if isinstance(block, Table):
        if block.grid and not block.headers:  # numbered paragraphs, a blank line between
            paragraphs = [" ".join(_text(cell) for cell in row) for row in block.rows]
            return [line for text in paragraphs for line in ("", text)][1:]
        return _table(block)
    return []


def _note(note: Note) -> str:
    if note.tone == "alert":
        return f"> {_text(note.text)}"
    if note.tone in ("bold", "warning"):
        return f"**{_text(note.text)}**"
    return _text(note.text)


def _text(value: Any) -> str:
    """Inert text: ``&`` and ``<`` as entities, so no tag or entity can start (``>`` alone
    starts nothing inside a line and stays readable in logs: ``2 -> 4``); line breaks become
    spaces, so a value cannot start a markdown line of its own (a forged heading or verdict)."""
    return " ".join(str(value).replace("&", "&amp;").replace("<", "&lt;").splitlines())


def _cell(value: Any, code: bool = False) -> str:
    text = " ".join(_text(value).replace("|", "\\|").split())
    return f"`{text}`" if code and text else text


def _table(block: Table) -> list[str]:
    """Markdown table lines; ``right`` columns are right-aligned, ``code`` ones in backticks."""
    headers = block.headers or tuple("" for _ in block.rows[0])
    aligns = ["---:" if i in block.right else "---" for i in range(len(headers))]
    out = ["| " + " | ".join(_cell(h) for h in headers) + " |", "| " + " | ".join(aligns) + " |"]
    for row in block.rows:
        out.append("| " + " | ".join(_cell(c, i in block.code) for i, c in enumerate(row)) + " |")
    return out
