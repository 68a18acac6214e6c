"""The one interface every output format implements: :class:`Renderer`.

A renderer turns a finished :class:`~pipecheck.report_data.ReportData` into text (:meth:`Renderer.render`)
and writes it to a stream or, atomically, to a file. The text formats (terminal, markdown,
HTML) serialize the shared render model (:mod:`pipecheck.render.sections`); the trace is its
own event format. :mod:`pipecheck.render.formats` registers them by format name.
"""

from __future__ import annotations

import abc
import os
import pathlib
from typing import TYPE_CHECKING, ClassVar, TextIO

from pipecheck._atomic import write_text_atomic

if TYPE_CHECKING:
    from pipecheck.report_data import ReportData


class Renderer(abc.ABC):
    """Base class of the output formats.

    Class attributes: ``name`` (the format's name; a file format's CLI option is ``--NAME``),
    ``what`` (the words for it in messages: ``HTML report saved to ...``), ``to_file`` (written
    to a file the user names, rather than printed)."""

    name: ClassVar[str]
    what: ClassVar[str]
    to_file: ClassVar[bool] = False

    @abc.abstractmethod
    def render(self, report: "ReportData") -> str:
        """The report as this format's text. Raises nothing for any report that
        :meth:`pipecheck.Report.from_dict` accepts."""

    def write(self, report: "ReportData", stream: TextIO) -> None:
        """Write :meth:`render`'s text to ``stream`` and flush it."""
        stream.write(self.render(report))
        stream.flush()

    def save(self, report: "ReportData", path: str | os.PathLike[str]) -> pathlib.Path:
        """Write :meth:`render`'s text to ``path`` atomically (``-``: stdout) and return the
        path. Raises :class:`~pipecheck.errors.BadInputError` when it cannot be written."""
        return write_text_atomic(path, self.render(report), self.what)
