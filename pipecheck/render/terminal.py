"""The terminal summary of a ReportData, built with rich from the render model
(:mod:`pipecheck.render.sections`): verdict first, then the numbers behind it.

By default the short view, one screen (:mod:`pipecheck.render.sections.summary`): the verdict,
the changes that matter with their effects, the key figures and the findings in a line or two
each, then a line saying where the rest is. ``verbose`` (the CLI's ``--verbose``) shows every
section. Sections of the full view, in order: verdict line, run context, (ranks,) throughput,
data wait (stall), producer vs consumer, host, the optional probes (pipeline stages, shard
assignment, hot stacks, GPU) when the report has them, findings, recommendations, and the
stress sweep when the report has one. Every number carries its unit (:mod:`pipecheck.units`); values that were not measured show
as ``n/a``. Charts and detail blocks (epoch and process tables) are left to the HTML page.
:func:`renderables` returns the rich objects (``rich.print(report)`` uses them);
:func:`render_terminal` renders them to a string. Both show strings from the report literally:
control characters as escapes and rich markup as text (:mod:`pipecheck.render.inert`).
"""

from __future__ import annotations

import io
import shutil
from typing import TYPE_CHECKING, Optional

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.segment import Segment
from rich.table import Table as RichTable
from rich.text import Text

from pipecheck.kinds import BALANCED, COMPUTE_BOUND, CRITICAL, INFO, INPUT_BOUND, NO_DATA, WARNING
from pipecheck.render.base import Renderer
from pipecheck.render.inert import Inert, fields
from pipecheck.render.model import Block, Chart, Document, Facts, Items, Note, Section, Table
from pipecheck.render.phrases import verdict_line
from pipecheck.render.sections import build_document
from pipecheck.render.sections.summary import MORE_HINT

if TYPE_CHECKING:
    from pipecheck.report_data import ReportData

__all__ = ["DEFAULT_WIDTH", "MIN_WIDTH", "TerminalRenderer", "render_terminal", "renderables",
           "section_renderables", "verdict_line"]

DEFAULT_WIDTH = 100
"""Columns used when neither the caller nor the terminal gives a width."""

MIN_WIDTH = 20
"""Narrowest width accepted, in columns: below it even the stacked layout cannot hold a label
and its value on one line."""

_VERDICT_STYLES = {
    INPUT_BOUND: "bold red",
    COMPUTE_BOUND: "bold green",
    BALANCED: "bold yellow",
    NO_DATA: "bold",
}
_SEVERITY_STYLES = {CRITICAL: "bold red", WARNING: "yellow", INFO: "cyan"}
_TONE_STYLES = {"plain": "", "dim": "dim", "bold": "bold", "warning": "yellow",
                "alert": "bold yellow"}
_DIM = "dim"


class TerminalRenderer(Renderer):
    """The rich summary, ``width`` columns wide (``None``: the terminal's, else
    :data:`DEFAULT_WIDTH`), with ANSI colours when ``color``. Raises ``ValueError`` if
    ``width`` is below :data:`MIN_WIDTH`."""

    name = "terminal"
    what = "summary"

    def __init__(self, width: Optional[int] = None, color: bool = False,
                 verbose: bool = False) -> None:
        if width is not None and width < MIN_WIDTH:
            raise ValueError(f"width must be at least {MIN_WIDTH} columns, got {width}")
        self.width = width
        self.color = color
        self.verbose = verbose

    def render(self, report: "ReportData") -> str:
        return _print(renderables(report, self.verbose), self.width, self.color)

    def render_document(self, document: Document) -> str:
        """A built document (``pipecheck report --compare``'s) as this summary's text."""
        return _print(document_renderables(document, self.verbose), self.width, self.color)


def render_terminal(report: "ReportData", width: Optional[int] = None, color: bool = False,
                    verbose: bool = False) -> str:
    """The report's terminal summary as a string (:class:`TerminalRenderer`): the short view
    (one screen), or with ``verbose`` every section."""
    return TerminalRenderer(width, color, verbose).render(report)


def renderables(report: "ReportData", verbose: bool = False) -> list[RenderableType]:
    """The summary as one rich renderable in a list: :class:`~pipecheck.render.inert.Inert`
    over the lines and sections (verdict line first), so any console shows the report's strings
    literally. The short view unless ``verbose`` (then a multi-rank report's every-rank table
    too)."""
    return document_renderables(build_document(report, every_rank=verbose), verbose)


def document_renderables(document: Document, verbose: bool = False) -> list[RenderableType]:
    """A built document (:func:`renderables`' body; ``pipecheck report --compare`` builds its
    own) as one inert rich renderable in a list: its short view (``summary``, under the brief
    context line, ending with where the rest is) unless ``verbose`` or the document has
    none."""
    brief = bool(document.summary) and not verbose
    context = document.brief_context or document.context if brief else document.context
    parts: list[RenderableType] = [
        Hanging(Text(document.verdict, style=_VERDICT_STYLES.get(document.verdict_kind, "bold"))),
        Hanging(Text(context, style=_DIM)),
        *(_note(note) for note in document.notes),
    ]
    for section in document.summary if brief else document.sections:
        parts.append(Text(""))
        parts.append(Text(section.title, style="bold underline"))
        parts.append(Padding(Group(*section_renderables(section)), (0, 0, 0, 2), expand=False))
    if brief:
        parts += [Text(""), Hanging(Text(MORE_HINT, style=_DIM))]
    return [Inert(parts)]


def section_renderables(section: Section) -> list[RenderableType]:
    """A section's body as rich objects (no title): the blocks a terminal shows. Paragraphs (a
    grid without headers) right after a table are set off from it by a blank line."""
    shown = [block for block in section.blocks
             if not block.detail and not isinstance(block, Chart)]
    out: list[RenderableType] = []
    for previous, block in zip([None, *shown], shown):
        if isinstance(block, Table) and block.grid and not block.headers \
                and isinstance(previous, Table) and not previous.grid:
            out.append(Text(""))
        part = _block(block)
        if part is not None:
            out.append(part)
    return out


def render_section(section: Section, width: Optional[int] = None) -> str:
    """One section's body as plain text, ``width`` columns wide (``pipecheck shards``); its
    strings made one inert line each, as :func:`~pipecheck.render.sections.build_document`
    does for a report."""
    return _print([Inert(section_renderables(fields(section)))], width, False)


def _print(parts: list[RenderableType], width: Optional[int], color: bool) -> str:
    if width is None:
        width = max(MIN_WIDTH, shutil.get_terminal_size(fallback=(DEFAULT_WIDTH, 24)).columns)
    if width < MIN_WIDTH:
        raise ValueError(f"width must be at least {MIN_WIDTH} columns, got {width}")
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=color,
                      color_system="standard" if color else None, highlight=False, markup=False,
                      emoji=False, legacy_windows=False)
    console.print(Inert(parts))
    text = buffer.getvalue()
    if color:
        return text
    # rich pads table cells to the column width; plain text is easier to diff and grep without.
    return "\n".join(line.rstrip() for line in text.split("\n"))


# -- blocks --------------------------------------------------------------------------------------


def _block(block: Block) -> Optional[RenderableType]:
    if isinstance(block, Facts):
        return _line(block)
    if isinstance(block, Note):
        return _note(block)
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Items):
        grid = RichTable.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column()
        for item in block.items:
            grid.add_row(Text(f"[{item.severity}]", style=_SEVERITY_STYLES.get(item.severity, "")),
                         Text(item.text))
        return grid
    return None


def _note(note: Note) -> "Hanging":
    return Hanging(Text(note.text, style=_TONE_STYLES.get(note.tone, "")))


def _line(facts: Facts) -> "Hanging":
    """A line of ``label value`` pairs separated by `` · ``; labels dim, values plain."""
    text = Text()
    for i, fact in enumerate(facts.facts):
        if i:
            text.append(" · ", style=_DIM)
        if fact.label:
            text.append(f"{fact.label} ", style=_DIM)
        text.append(fact.value)
    return Hanging(text)


class Hanging:
    """A paragraph whose wrapped lines are indented by ``indent`` columns past its first: a
    string from the report that wraps can never start a line where pipecheck's own lines start
    (the verdict at column 0, a fact or note at its section's indent), so it cannot pass for
    one of them however its length is chosen."""

    def __init__(self, text: Text, indent: int = 2) -> None:
        self.text = text
        self.indent = indent

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        first, *more = self.text.wrap(console, width)
        yield from first.render(console)
        yield Segment.line()
        if not more:
            return
        rest = self.text[len(first.plain):]  # the first line at full width, the rest indented
        while rest.plain[:1] == " ":
            rest = rest[1:]
        for line in rest.wrap(console, max(1, width - self.indent)):
            yield Segment(" " * self.indent)
            yield from line.render(console)
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        measured = Measurement.get(console, options, self.text)
        return Measurement(measured.minimum + self.indent,
                           measured.maximum + self.indent).clamp(max_width=options.max_width)


def _table(block: Table) -> RenderableType:
    if block.grid:
        grid = RichTable.grid(padding=(0, 1))
        for i in range(len(block.headers or block.rows[0])):
            grid.add_column(justify="right" if i in block.right else "left",
                            no_wrap=i in block.no_wrap)
        if block.headers:
            grid.add_row(*(Text(h, style=_DIM) for h in block.headers))
        for row in block.rows:
            grid.add_row(*(Text(cell) for cell in row))
        return grid
    table = RichTable(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for i, header in enumerate(block.headers):
        table.add_column(header, justify="right" if i in block.right else "left",
                         no_wrap=i in block.no_wrap)
    for row in block.rows:
        table.add_row(*(Text(cell) for cell in row))
    if not block.narrow:
        return table
    return _FitOrStack(table, Group(*(_line(facts) for facts in block.narrow)))


class _FitOrStack:
    """A table where it fits without wrapping its cells, else the same facts as stacked lines
    (a squeezed table breaks numbers from their units on narrow terminals)."""

    def __init__(self, table: RichTable, stacked: RenderableType) -> None:
        self.table = table
        self.stacked = stacked

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table if _unwrapped_width(self.table) <= options.max_width else self.stacked


def _unwrapped_width(table: RichTable) -> int:
    """Columns ``table`` needs with its ``no_wrap`` columns whole and the others at their
    ``min_width`` (rich's own measurement assumes every cell may wrap between words)."""
    total = 0
    for column in table.columns:
        cells = [column.header, *column.cells]
        if column.no_wrap:
            total += max(cell_len(c.plain if isinstance(c, Text) else str(c)) for c in cells)
        else:
            total += column.min_width or 0
    # Between two columns: right padding, the blank divider of SIMPLE_HEAD, left padding.
    return total + 3 * (len(table.columns) - 1)
