"""Make text safe for a terminal: control characters shown as escapes, never acted on.

How it works, and why: docs/internals.md (``pipecheck/render/inert.py``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable, TypeVar

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064"
                     "\u2066-\u2069\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")
"""Characters a terminal may act on, that break, reorder or hide displayed text."""

MAX_FIELD_CHARS = 2000
"""Longest string :func:`fields` keeps, in characters (about 20 lines of a 100-column
terminal; the longest sentence pipecheck writes itself is under 600): a longer one is cut
and says how much was left out (the JSON keeps it whole). pipecheck's choice: a runaway
exception text or repr must not make the summary unreadable or slow."""

_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}

T = TypeVar("T")


def _escape(match: "re.Match[str]") -> str:
    char = match.group()
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str, keep_newlines: bool = True) -> str:
    """``text`` with every :data:`CONTROL` character written as a Python-style escape
    (``ESC`` -> ``\\x1b``, line feed -> ``\\n``, U+202E -> ``\\u202e``), so it shows and is
    never acted on. With ``keep_newlines`` line feeds stay line breaks (for finished text whose
    fields are already one line each); tabs, carriage returns and every other line separator
    never do."""
    if keep_newlines:
        return "\n".join(CONTROL.sub(_escape, line) for line in text.split("\n"))
    return CONTROL.sub(_escape, text)


def one_line(text: str) -> str:
    """``text`` as one inert line: every :data:`CONTROL` character, line breaks included,
    written as an escape (:func:`visible` without newlines)."""
    return CONTROL.sub(_escape, text)


def clipped(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """``text`` cut to its first ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters; see the JSON)"


def field(text: str) -> str:
    """One string of the render model made inert: cut to :data:`MAX_FIELD_CHARS`, then
    :func:`one_line`."""
    return one_line(clipped(text))


def fields(value: T) -> T:
    """``value`` (a frozen dataclass of the render model, or the tuples, lists, dicts and
    frozensets inside one) with every string in it, dict keys included, passed through
    :func:`field`. Walks the value generically, so a new block type or field needs nothing
    here. Other values (numbers, ``None``, booleans) are kept."""
    return _walk(value)  # type: ignore[no-any-return]


def _walk(value: Any) -> Any:
    if isinstance(value, str):
        return field(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _walk(getattr(value, f.name)) for f in dataclasses.fields(value)
                   if f.init}
        return dataclasses.replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(_walk(item) for item in value)
    if isinstance(value, list):
        return [_walk(item) for item in value]
    if isinstance(value, frozenset):
        return frozenset(_walk(item) for item in value)
    if isinstance(value, dict):
        return {_walk(key): _walk(item) for key, item in value.items()}
    return value


class Inert:
    """A rich renderable showing ``renderables`` in turn (as ``Console.print`` would) with rich
    markup off and every segment's text passed through :func:`visible`. Segments rich marks as
    control (cursor moves it emits itself) pass unchanged; user text is never one. Line breaks
    in a segment are rich's own layout: the strings from a report reach rich one line each
    (:func:`fields`)."""

    def __init__(self, renderables: Iterable[RenderableType]) -> None:
        self.renderables = list(renderables)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        literal = options.update(markup=False, highlight=False)
        for renderable in self.renderables:
            for segment in console.render(renderable, literal):
                if segment.control:
                    yield segment
                else:
                    yield Segment(visible(segment.text), segment.style)
