"""The format-neutral render model: a report as a document of titled sections of blocks.

Built once from a :class:`~pipecheck.report_data.ReportData` by :mod:`pipecheck.render.sections`; the
terminal (:mod:`~pipecheck.render.terminal`), markdown (:mod:`~pipecheck.render.markdown`) and
HTML (:mod:`~pipecheck.render.html`) renderers only serialize it. Every value is finished plain
text with its unit (:mod:`pipecheck.units`); strings from the run are kept as they are, and each
renderer makes them inert for its format at its own boundary (:mod:`pipecheck.render.inert`,
HTML escaping). Blocks marked ``detail`` (epoch and process tables, evidence) are shown only by
formats with room for them (HTML); :class:`Chart` is drawn only by HTML.

Two views of one document: ``sections`` hold everything (the terminal's ``--verbose``,
markdown, HTML); ``summary`` is the short view that fits a screen (the terminal's default, and
the HTML page's open part above its collapsed sections): the changes that matter, the key
figures and the findings in a line or two each (:mod:`pipecheck.render.sections.summary`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Optional, Sequence, TypeVar, Union

from pipecheck.kinds import CRITICAL, INFO, WARNING
from pipecheck.render.inert import clipped

Tone = Literal["plain", "dim", "bold", "warning", "alert"]
"""How a note reads: ``dim`` an aside, ``warning`` (yellow) something to check, ``alert`` a
caveat on the numbers (the run did not complete, the capacity estimate is contradicted)."""

T = TypeVar("T")

SEVERITY_ORDER: dict[str, int] = {CRITICAL: 0, WARNING: 1, INFO: 2}
"""Sort key of a finding's severity, most severe first; unknown severities sort last (3)."""


def by_severity(severity: str) -> int:
    """Sort key for ``severity``: critical 0, warning 1, info 2, anything else 3."""
    return SEVERITY_ORDER.get(severity, 3)


@dataclasses.dataclass(frozen=True)
class Fact:
    """One ``label value`` pair; ``label`` may be empty (the value says what it is)."""

    label: str
    value: str


@dataclasses.dataclass(frozen=True)
class Facts:
    """One line of facts, shown ``label value · label value``."""

    facts: tuple[Fact, ...]
    detail: bool = False


@dataclasses.dataclass(frozen=True)
class Note:
    """A sentence on its own line."""

    text: str
    tone: Tone = "plain"
    detail: bool = False


@dataclasses.dataclass(frozen=True)
class Table:
    """Rows of finished cells under ``headers``.

    ``right``: indexes of right-aligned (numeric) columns; ``no_wrap``: columns a terminal must
    not break; ``code``: columns holding identifiers (markdown backticks, HTML ``<code>``).
    ``grid``: no rules and no header rule (the header row, if any, is dim). ``narrow``: the
    same facts as lines, for a terminal too narrow to show the table without breaking numbers
    from their units. ``title``: a sub-heading above it."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    right: frozenset[int] = frozenset()
    no_wrap: frozenset[int] = frozenset()
    code: frozenset[int] = frozenset()
    grid: bool = False
    narrow: tuple[Facts, ...] = ()
    title: Optional[str] = None
    detail: bool = False
    collapsed: bool = False
    """HTML shows the table folded under its title (``<details>``, opened by a click, no
    script): a long table (every rank of a job) that would bury the rest of the page."""


@dataclasses.dataclass(frozen=True)
class Item:
    """A finding: severity, message, kind, and the evidence behind it (a JSON object).
    ``short``: the message in a line or two for the short view (its first sentence, naming
    the docs page that explains the finding when the rest is left out); empty: ``text``."""

    severity: str
    text: str
    kind: str = ""
    evidence: Optional[dict[str, Any]] = None
    short: str = ""


@dataclasses.dataclass(frozen=True)
class Items:
    """A list of findings, most severe first."""

    items: tuple[Item, ...]
    detail: bool = False


@dataclasses.dataclass(frozen=True)
class Chart:
    """A reference to a chart of the report's data: ``name`` is a key of
    :data:`pipecheck.render.charts.CHARTS`; ``caption`` explains it; ``missing`` is said
    instead when the report has no data for it."""

    name: str
    caption: str
    missing: str
    detail: bool = True


Block = Union[Facts, Note, Table, Items, Chart]


@dataclasses.dataclass(frozen=True)
class Section:
    """A titled part of the report; ``key`` names it for renderers and tests."""

    key: str
    title: str
    blocks: tuple[Block, ...]


@dataclasses.dataclass(frozen=True)
class Document:
    """The whole report: verdict, context, key numbers, then the sections in order.

    ``verdict`` is the verdict line, ``verdict_kind`` the verdict (``input-bound`` ...);
    ``notes`` are caveats shown under the context line; ``headline`` the key numbers (markdown
    and HTML show them up front, the terminal in its sections). ``summary``: the short view's
    sections (empty: the document has no short view, show ``sections``); ``brief_context``:
    the context line of the short view (empty: ``context``)."""

    verdict: str
    verdict_kind: str
    context: str
    notes: tuple[Note, ...]
    headline: tuple[Fact, ...]
    sections: tuple[Section, ...]
    footer: str = ""
    summary: tuple[Section, ...] = ()
    brief_context: str = ""


def line(*pairs: tuple[str, str], detail: bool = False) -> Facts:
    """``Facts`` from ``(label, value)`` pairs."""
    return Facts(tuple(Fact(label, value) for label, value in pairs), detail=detail)


MAX_CELL_CHARS = 300
"""Longest cell of a table with headers, in characters (a configuration, a file path); a
longer one is cut saying so. Numbered paragraphs (a grid without headers: recommendation
reasons) keep :data:`pipecheck.render.inert.MAX_FIELD_CHARS`."""


def table(headers: "list[str] | tuple[str, ...]", rows: "list[list[str]]", **options: Any) -> Table:
    """A :class:`Table` from lists (options as :class:`Table`'s fields, index sets as any
    iterable); with ``headers``, each cell cut to :data:`MAX_CELL_CHARS`."""
    for key in ("right", "no_wrap", "code"):
        if key in options:
            options[key] = frozenset(options[key])
    if "narrow" in options:
        options["narrow"] = tuple(options["narrow"])
    limit = MAX_CELL_CHARS if headers else None
    return Table(tuple(headers), tuple(tuple(clipped(cell, limit) if limit else cell
                                             for cell in row) for row in rows), **options)


def capped(items: Sequence[T], limit: int) -> tuple[list[T], int]:
    """The first ``limit`` of ``items`` and how many were left out: every list a section shows
    is capped so rendering costs the same for a report of any size (the JSON keeps them
    all)."""
    return list(items[:limit]), max(0, len(items) - limit)


def more(hidden: int, noun: str, detail: bool = False) -> Note:
    """The note under a capped list: ``... and 899,990 more findings (see the JSON)``."""
    return Note(f"... and {hidden:,} more {noun} (see the JSON)", "dim", detail=detail)


def thin(entries: Sequence[T], limit: int) -> Sequence[T]:
    """``entries``, or an evenly spaced sample of at most ``limit`` of them (every k-th, the
    first kept): what a chart or trace draws of a timeline longer than any pipecheck writes."""
    if len(entries) <= limit:
        return entries
    return entries[::-(-len(entries) // limit)]
