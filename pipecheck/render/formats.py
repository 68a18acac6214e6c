"""The output formats by name: the registry the CLI's output options loop over."""

from __future__ import annotations

from pipecheck.render.base import Renderer
from pipecheck.render.html import HtmlRenderer
from pipecheck.render.markdown import MarkdownRenderer
from pipecheck.render.terminal import TerminalRenderer
from pipecheck.render.trace import TraceRenderer

RENDERERS: dict[str, type[Renderer]] = {
    cls.name: cls for cls in (TerminalRenderer, MarkdownRenderer, HtmlRenderer, TraceRenderer)
}
"""Renderer classes by format name."""

FILE_FORMATS: tuple[type[Renderer], ...] = tuple(cls for cls in RENDERERS.values()
                                                 if cls.to_file)
"""Formats written to a file the user names (``--html FILE``, ``--trace FILE``)."""
