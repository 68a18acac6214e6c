"""Make text safe for a terminal: control characters shown as escapes, never acted on.

Strings in a report come from the user's run (dataset and loader reprs, stage, file and shard
names, exception text) and from files anyone can write. A terminal acts on control
characters: ``ESC`` starts CSI/OSC sequences that can move the cursor, clear the screen (and
forge the verdict line), retitle the window or write the clipboard (OSC 52); ``BEL``, backspace
and carriage return overwrite what was shown. So every string that leaves pipecheck for a
terminal or markdown passes through :func:`visible`, at the point where it leaves:

* the terminal summary and ``pipecheck shards``: :class:`Inert` wraps the rich renderables, so
  each segment's text is made visible after rich laid it out, and rich markup in strings is
  not interpreted (``markup=False``); only the styles rich itself renders emit escape codes;
* markdown: the finished text (:func:`pipecheck.render.markdown.render_markdown`);
* the CLI's own lines (errors, headers, ``check`` results): :func:`pipecheck.cli._say`.

The characters made visible (:data:`CONTROL`): C0 (U+0000-U+001F) except the line feed where a
line break is wanted, DEL and C1 (U+007F-U+009F), the Unicode line and paragraph separators and
the bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069), which reorder what
is shown ("Trojan Source", CVE-2021-42574).
"""

from __future__ import annotations

import re
from typing import Iterable

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""Characters a terminal may act on, or that reorder or break displayed lines."""


def _escape(match: "re.Match[str]") -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, keep_newlines: bool = True) -> str:
    """``text`` with every :data:`CONTROL` character written as a Python-style escape
    (``ESC`` -> ``\\x1b``, U+202E -> ``\\u202e``), so it shows and is never acted on. With
    ``keep_newlines`` line feeds stay line breaks; tabs and carriage returns never do."""
    if keep_newlines:
        return "\n".join(CONTROL.sub(_escape, line) for line in text.split("\n"))
    return CONTROL.sub(_escape, text)


class Inert:
    """A rich renderable showing ``renderables`` in turn (as ``Console.print`` would) with rich markup off and every segment's text passed through :func:`visible`. Segments
    rich marks as control (cursor moves it emits itself) pass unchanged; user text is never
    one."""

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
