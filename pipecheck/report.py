"""The Report users hold: a report's data (:class:`~pipecheck.report_data.ReportData`) with its
views, and the functions that build, load and compare reports.

A :class:`Report` is built once from a finished :class:`~pipecheck.records.RunRecord`
(:func:`build_report`), then rendered (``print(report)``, :meth:`Report.render`,
:meth:`Report.save_html`), saved as JSON (:meth:`~pipecheck.report_data.ReportData.save`) and
read back (:func:`load`). The views live in :mod:`pipecheck.render`, which types against
``ReportData`` only, so this module is the one place where the data meets its views.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Optional

from pipecheck.errors import BadInputError, ReportFormatError, one_line
from pipecheck.records import Timeline
from pipecheck.report_data import (KEY_ORDER, KINDS, RANK_FILE_TIMELINE_ROWS, SCHEMA, ReportData,
                                   check_schema, rank_file_report)
from pipecheck.report_sections import StressSection

if TYPE_CHECKING:
    from pipecheck.records import RunRecord

__all__ = ["KEY_ORDER", "KINDS", "MAX_REPORT_BYTES", "RANK_FILE_TIMELINE_ROWS", "SCHEMA", "Earlier",
           "Report", "build_report", "check_schema", "compared_with_earlier", "load",
           "rank_file_report", "read_earlier", "read_json"]


class Report(ReportData):
    """One run's measurements, diagnosis and recommendations (the fields of
    :class:`~pipecheck.report_data.ReportData`), with its views: ``print(report)`` and
    :meth:`render` (the terminal summary), :meth:`save_html` and ``rich.print(report)``."""

    def save_html(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Write the self-contained HTML report (:mod:`pipecheck.render.html`: inline SVG charts,
        no script, no network) to ``path`` atomically and return the path. Raises
        :class:`~pipecheck.errors.BadInputError` when the file cannot be written."""
        from pipecheck.render.html import HtmlRenderer

        return HtmlRenderer().save(self, path)

    # -- rendering -----------------------------------------------------------------------------

    def render(self, width: Optional[int] = None, verbose: bool = False) -> str:
        """The terminal summary as plain text, ``width`` columns wide (``None``: the terminal's
        width, 100 when there is no terminal): the short view that fits a screen, or with
        ``verbose`` every section. See :mod:`pipecheck.render.terminal`."""
        from pipecheck.render.terminal import render_terminal

        return render_terminal(self, width=width, verbose=verbose)

    def __str__(self) -> str:
        return self.render()

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        """Lets ``rich.print(report)`` show the summary with the console's colours and width."""
        from pipecheck.render.terminal import renderables

        yield from renderables(self)


MAX_REPORT_BYTES = 64 * 1024 * 1024
"""Largest report file :func:`load` reads, in bytes (64 MiB). A report holds bounded timelines
(8192 consumer batches, 2048 host samples by default), a few MB; parsing a 64 MiB JSON file of
tiny objects takes about 1 GB of memory, so a larger or endless file (``/dev/zero``) is refused
before it can exhaust memory (pipecheck's choice)."""


def load(path: str | os.PathLike[str]) -> Report:
    """Read a report saved by :meth:`Report.save`.

    Only a regular file is read (a FIFO or device would block or never end), and at most
    :data:`MAX_REPORT_BYTES`. Raises :class:`~pipecheck.errors.BadInputError` when ``path`` does
    not exist, is a directory or another non-regular file, is larger than that, or cannot be
    read, and :class:`~pipecheck.errors.ReportFormatError` (a subclass) when it is not UTF-8
    JSON, is nested too deeply, or is not a :data:`SCHEMA` report (including values out of range,
    :meth:`Report.from_dict`). Messages are one line and name the path.
    """
    source = pathlib.Path(path)
    data = read_json(source)
    try:
        return Report.from_dict(data)
    except ReportFormatError as err:
        raise ReportFormatError(f"{source}: {err}") from err


def read_json(path: str | os.PathLike[str]) -> Any:
    """The parsed JSON of the report file at ``path``, not yet checked against the contract:
    :func:`load`'s reading half (a regular file of at most :data:`MAX_REPORT_BYTES`, UTF-8
    JSON, no ``NaN`` / ``Infinity`` constants), with its errors (one line naming the path).
    The streaming merge (:func:`pipecheck.merge.merge_files`) decodes only the parts it
    needs of what this returns."""
    source = pathlib.Path(path)
    try:
        raw = _read_regular(source, MAX_REPORT_BYTES)
    except FileNotFoundError as err:
        ranks = sorted(source.parent.glob(f"{source.stem}.rank*{source.suffix}"))
        if ranks:  # saved under torch.distributed: one file per rank
            raise BadInputError(
                f"no such report file: {source}; the run saved one file per rank "
                f"({', '.join(r.name for r in ranks[:3])}{', ...' if len(ranks) > 3 else ''}): "
                f"pipecheck report {source.parent / (source.stem + '.rank*' + source.suffix)} "
                "merges them") from err
        raise BadInputError(f"no such report file: {source}") from err
    except IsADirectoryError as err:
        raise BadInputError(f"{source} is a directory, not a report file") from err
    except OSError as err:
        raise BadInputError(f"cannot read {source}: {err.strerror or err}") from err
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as err:
        raise ReportFormatError(f"{source} is not a pipecheck report (not UTF-8 text)") from err
    except json.JSONDecodeError as err:
        raise ReportFormatError(
            f"{source} is not JSON ({err.msg} at line {err.lineno} column {err.colno})"
        ) from err
    except ValueError as err:  # raised by _reject_constant
        raise ReportFormatError(f"{source}: {err}") from err
    except RecursionError as err:
        raise ReportFormatError(f"{source} is not a pipecheck report (JSON nested too deeply)"
                                ) from err
    return data


@dataclass(frozen=True)
class Earlier:
    """The report found at a path before a new one replaces it (:func:`read_earlier`):
    ``path`` as given, ``report`` (its timeline cut to the consumer's batches, all a comparison
    reads) or ``None`` with ``note`` saying in one line why it could not be read."""

    path: str
    report: Optional[Report] = None
    note: Optional[str] = None


def read_earlier(path: str | os.PathLike[str]) -> Optional[Earlier]:
    """The report at ``path`` that a save is about to replace, read once (:func:`load`:
    a regular file of at most :data:`MAX_REPORT_BYTES`), for :func:`compared_with_earlier`.

    ``None`` when there is nothing to compare with: no file there, an empty file (``pipecheck
    run``'s placeholders), ``-`` (stdout), or not a regular file (a device or pipe is written
    through, never replaced). A file that cannot be
    read or is not a pipecheck report gives an :class:`Earlier` with a ``note``, never an
    exception: a comparison must never fail the save or the program."""
    from pipecheck._atomic import is_stdout

    name = os.fspath(path)
    if is_stdout(path):
        return None
    try:
        found = os.stat(name)
        if not stat.S_ISREG(found.st_mode) or found.st_size == 0:
            return None  # an empty file is a placeholder (pipecheck run's), not a report
    except OSError:  # no file there (a first run), or an unreadable folder: nothing to compare
        return None
    try:
        old = load(name)
    except Exception as err:  # one line in the new report, never an error
        text = one_line(err)
        return Earlier(name, note=f"the earlier file could not be read ({text})")
    timeline = Timeline(batches=old.timeline.batches, epochs=[], worker_batches=[], host=[])
    return Earlier(name, report=dataclasses.replace(old, timeline=timeline))


def compared_with_earlier(report: Report, earlier: Optional[Earlier]) -> Report:
    """``report`` with its ``comparison`` against ``earlier`` (:func:`read_earlier`): the
    figures side by side (:func:`pipecheck.analysis.compare.compare_reports`), or a
    ``not-compared`` entry saying why (the earlier file could not be read, is of another
    loader or dataset, or either report is a merged multi-rank one). ``report`` unchanged when
    ``earlier`` is ``None``. Raises nothing: a comparison that fails is left out."""
    if earlier is None:
        return report
    try:
        from pipecheck.analysis.compare import compare_reports, not_compared, other_loader

        if earlier.report is None:
            found = not_compared(earlier.path, earlier.note or "the earlier file could not "
                                 "be read")
        else:
            why = other_loader(earlier.report, report)
            found = (not_compared(earlier.path, f"the earlier report is of {why}") if why
                     else compare_reports(earlier.report, report, earlier.path))
        return dataclasses.replace(report, comparison=found)
    except Exception:  # never let a comparison cost the report
        return report


def _read_regular(source: pathlib.Path, limit: int) -> bytes:
    """The bytes of ``source``, a regular file of at most ``limit`` bytes. Opened without
    blocking (a FIFO with no writer would block the open) and checked with ``fstat`` on the
    open descriptor. Raises ``OSError`` from the open or read, :class:`BadInputError` for a
    file that is not regular or is larger than ``limit``."""
    if source.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(source))
    fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise BadInputError(f"{source} is {kind}, not a report file")
        raw = handle.read(limit + 1)
    if len(raw) > limit:
        size = os.stat(source).st_size
        raise BadInputError(f"{source} is {size / 2**20:.0f} MiB, larger than the "
                            f"{limit // 2**20} MiB a report can be")
    return raw


_FILE_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device",
               stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def build_report(run: "RunRecord", *, stress: Optional[StressSection] = None) -> Report:
    """Analyze a finished run, recommend changes and assemble the :class:`Report`.

    The timeline gathers the bounded per-event detail: the consumer's sampled batches, its
    listed epochs and the sums of the others, the workers' recent batches sorted by end time,
    and the host samples (moved out of ``host``).
    ``stress`` is the offline sweep for ``run.kind == "stress"``.
    """
    # Imported here so this module (and loading saved reports) does not need analysis code.
    from pipecheck.analysis import analyze
    from pipecheck.recommend import recommend

    analysis = analyze(run)
    recommendations = list(recommend(run, analysis))
    worker_batches = sorted(
        (batch for worker in run.workers for batch in worker.recent), key=lambda b: b.end_at_s
    )
    host_samples = list(run.host.timeline) if run.host is not None else []
    host = None
    if run.host is not None:
        # The per-tick CPU series served the analysis; the saved report keeps the memory series.
        processes = [dataclasses.replace(p, cpu=[]) for p in run.host.processes]
        host = dataclasses.replace(run.host, timeline=[], processes=processes)
    return Report(
        kind=run.kind,
        created=run.created,
        environment=run.environment,
        loader=run.loader,
        consumer=analysis.consumer,
        producer=analysis.producer,
        host=host,
        diagnosis=analysis.diagnosis,
        recommendations=recommendations,
        timeline=Timeline(
            batches=list(run.consumer.timeline),
            epochs=list(run.consumer.epochs),
            worker_batches=worker_batches,
            host=host_samples,
            folded_epochs=run.consumer.folded_epochs,
        ),
        stress=stress,
        stacks=run.stacks,
        device=run.device,
        rank=run.rank,
        sharding=run.sharding,
        tune=run.tune,
    )



def _reject_constant(name: str) -> Any:
    raise ValueError(f"holds {name}, which is not valid JSON")
