"""The Report: what a run measured, what analysis concluded and what to change, in one object.

A :class:`Report` is built once from a finished :class:`~pipecheck.records.RunRecord`
(:func:`build_report`), then rendered (``print(report)``), saved as JSON (:meth:`Report.save`) and
read back (:func:`load`). The JSON layout is the contract in docs/architecture.md, schema
:data:`SCHEMA`: readers reject other schema versions instead of guessing. Keys are written in a
fixed order (:data:`KEY_ORDER`) so saved reports diff cleanly. NaN and infinity never reach the
JSON: they are written as ``null`` ("not measured").
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
import pathlib
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Optional

from pipecheck.errors import BadInputError, ReportFormatError, one_line
from pipecheck.kinds import REPORT_KINDS, ReportKind
from pipecheck.rank_files import rank_path
from pipecheck.report_sections import AttachSection, StressSection
from pipecheck.records import (Comparison, ConsumerSummary, DeviceRecord, Diagnosis, Environment,
                               HostRecord, LoaderConfig, ProducerSummary, RankInfo, RanksSummary,
                               Recommendation, ShardingSection, StacksRecord, TuneSection, Timeline)
from pipecheck.codec import from_jsonable, to_jsonable

if TYPE_CHECKING:
    from pipecheck.records import RunRecord

SCHEMA = "pipecheck.report/1"
"""Schema identifier written into (and required from) every saved report."""

KINDS = REPORT_KINDS
"""Which driver produced a report: ``wrap`` (online, inside training), ``stress`` (offline) or
``attach`` (``pipecheck attach PID``: py-spy and psutil on a process never wrapped)."""

KEY_ORDER = (
    "schema",
    "kind",
    "created",
    "environment",
    "loader",
    "consumer",
    "producer",
    "host",
    "stacks",
    "device",
    "rank",
    "ranks",
    "sharding",
    "diagnosis",
    "recommendations",
    "tune",
    "stress",
    "attach",
    "comparison",
    "timeline",
)
"""Top-level JSON keys in the order they are written (the large timeline last)."""


@dataclass(frozen=True)
class Report:
    """One run's measurements, diagnosis and recommendations.

    ``kind`` is one of :data:`KINDS` (``ValueError`` otherwise); ``created`` is ISO 8601 UTC.
    ``host`` is the host sampler's summary with its ``timeline`` emptied: the host samples live in
    ``timeline.host``. ``stress`` holds the offline sweep (trials, best, recommended:
    :class:`~pipecheck.report_sections.StressSection`) for ``kind="stress"`` reports, else
    ``None``. ``stacks``: py-spy's hot functions when asked for
    (``wrap(..., stacks=True)``); ``device``: GPU idle around ``next()`` when CUDA was used;
    ``None`` otherwise. ``rank``: the torch.distributed rank that recorded the run (``None``
    without a process group); ``ranks``: every rank side by side with the straggler, on rank 0's
    gathered report and on reports merged from several rank files
    (:mod:`pipecheck.analysis.ranks`); ``None`` otherwise. ``attach``: for ``kind="attach"``,
    the stall estimate from stack samples with its interval, the workers seen and what cannot
    be known without wrapping (:mod:`pipecheck.analysis.attach`); ``None`` otherwise.
    ``tune``: what ``wrap(tune=True)`` tried in the live run and kept
    (:class:`~pipecheck.records.TuneSection`); ``None`` without tuning.
    ``comparison``: this run compared with an earlier report
    (:class:`~pipecheck.records.Comparison`: ``pipecheck report --compare``, or the report
    ``wrap(save=PATH)`` / ``pipecheck run --json PATH`` replaced); ``None`` otherwise.
    """

    kind: ReportKind
    created: str
    environment: Environment
    loader: LoaderConfig
    consumer: ConsumerSummary
    producer: ProducerSummary
    host: Optional[HostRecord]
    diagnosis: Diagnosis
    recommendations: list[Recommendation]
    timeline: Timeline = field(repr=False)
    stress: Optional[StressSection] = None
    stacks: Optional[StacksRecord] = None
    device: Optional[DeviceRecord] = None
    rank: Optional[RankInfo] = None
    ranks: Optional[RanksSummary] = None
    sharding: Optional[ShardingSection] = None
    attach: Optional[AttachSection] = None
    comparison: Optional[Comparison] = None
    tune: Optional[TuneSection] = None
    schema: str = SCHEMA

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    # -- JSON ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (docs/architecture.md) as plain Python values, keys in
        :data:`KEY_ORDER`.

        Non-finite floats become ``None``. Raises ``TypeError`` naming the key path if a value
        (e.g. a recommendation's ``proposed``) is not representable in JSON.
        """
        flat = to_jsonable(self)
        ordered = {key: flat[key] for key in KEY_ORDER}
        return _json_safe(ordered, "report")

    def to_json(self, indent: Optional[int] = 2) -> str:
        """The report as JSON text (``indent`` spaces per level; ``None`` for one line)."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: Any) -> "Report":
        """Rebuild a report from :meth:`to_dict` output (e.g. parsed JSON).

        Unknown keys are ignored (newer writers may add keys). Raises
        :class:`~pipecheck.errors.ReportFormatError` (one line, naming the key path) when
        ``data`` is not an object, its schema is missing or not :data:`SCHEMA`, a required key is
        missing, a value has the wrong type, a number is out of range
        (:func:`~pipecheck.codec.from_jsonable` with ``ranges``: infinity or NaN anywhere,
        evidence and configurations included; an integer beyond 2**63 - 1; negative durations,
        counts or rates, fractions outside 0-1), or a rank lies outside its world size (at most
        :data:`~pipecheck.records.MAX_WORLD_SIZE`).
        """
        check_schema(data)
        try:
            report: Report = from_jsonable(cls, data, "report", ranges=True)
            return report
        except KeyError as err:
            raise ReportFormatError(f"report is missing key {err.args[0]}") from err
        except (TypeError, ValueError) as err:
            raise ReportFormatError(f"report is malformed: {err}") from err

    def save(self, path: str | os.PathLike[str], *, per_rank: bool = True) -> pathlib.Path:
        """Write the report as JSON to ``path`` atomically and return the path written.

        A report recorded under torch.distributed (``rank`` set) goes to its rank's own file,
        ``run.json`` -> ``run.rank{N}.json`` (:func:`pipecheck.rank_files.rank_path`), so every
        rank can save to the same name without overwriting the others; ``per_rank=False``
        writes ``path`` exactly.
        The text goes to a temporary file in the same directory, is flushed to disk (``fsync``) and
        then renamed over ``path`` (``os.replace``), so a reader never sees a half-written report;
        a symlink keeps pointing at its replaced target, a device or pipe (``/dev/null``,
        ``/dev/stdout``) is written through and ``-`` means stdout (:mod:`pipecheck._atomic`).
        The file of a rank other than 0 holds a sampled timeline (:func:`rank_file_report`).
        Raises :class:`~pipecheck.errors.BadInputError` when the file cannot be written (missing
        directory, no permission).
        """
        from pipecheck._atomic import is_stdout, write_text_atomic

        target = pathlib.Path(path)
        written = self
        if per_rank and self.rank is not None and not is_stdout(path):
            target = rank_path(target, self.rank.rank)
            written = rank_file_report(self)
        write_text_atomic(target, written.to_json() + "\n", "report")
        if os.path.isfile(target):  # renamed into place: make that durable
            _fsync_directory(pathlib.Path(os.path.realpath(target)).parent)
        return target

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


RANK_FILE_TIMELINE_ROWS = 256
"""Most entries of each timeline list (consumer ``batches``, ``worker_batches``, ``host``
samples) in the file of a rank other than 0 (``run.rank{N}.json``, N > 0): an evenly spaced
sample, the first and last entries kept. A rank file then weighs about 100 KB however long
the run (``benchmarks/many_ranks.py``), so 1,024 of them are read in seconds. Rank 0 keeps the
full bounded timeline (8,192 batches), every rank's figures (consumer, producer, host,
findings) are computed from the full data before the save, and the merged report's timeline
is the straggler's file's."""


def _sampled(entries: list[Any], limit: int) -> list[Any]:
    """At most ``limit`` (>= 2) of ``entries``, evenly spaced, the first and last kept."""
    count = len(entries)
    if count <= limit:
        return entries
    return [entries[round(i * (count - 1) / (limit - 1))] for i in range(limit)]


def rank_file_report(report: Report, limit: int = RANK_FILE_TIMELINE_ROWS) -> Report:
    """``report`` as its rank file holds it: for a rank other than 0, each timeline list cut
    to ``limit`` evenly spaced entries (:data:`RANK_FILE_TIMELINE_ROWS`); otherwise
    unchanged."""
    if report.rank is None or report.rank.rank == 0:
        return report
    timeline = report.timeline
    cut = dataclasses.replace(timeline, batches=_sampled(timeline.batches, limit),
                              worker_batches=_sampled(timeline.worker_batches, limit),
                              host=_sampled(timeline.host, limit))
    return dataclasses.replace(report, timeline=cut)


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


def check_schema(data: Any) -> None:
    """Raise :class:`~pipecheck.errors.ReportFormatError` (one line) unless ``data`` is a JSON
    object with ``schema`` :data:`SCHEMA` (what :meth:`Report.from_dict` checks first)."""
    if not isinstance(data, dict):
        raise ReportFormatError(
            f"not a pipecheck report: expected a JSON object, got {_json_type_name(data)}")
    schema = data.get("schema")
    if schema is None:
        raise ReportFormatError("not a pipecheck report: it has no 'schema' key")
    if schema != SCHEMA:
        raise ReportFormatError(
            f"report schema {schema!r} is not supported; this pipecheck reads {SCHEMA}")


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


# -- helpers -----------------------------------------------------------------------------------


def _json_safe(value: Any, where: str) -> Any:
    """Copy of ``value`` that ``json.dumps(allow_nan=False)`` accepts: non-finite floats become
    ``None``, numpy-style scalars become ``int``/``float``, paths become strings."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        as_float = float(value)
        return as_float if math.isfinite(as_float) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{where} holds a {type(value).__name__}, which JSON cannot represent")


def _json_type_name(value: Any) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"holds {name}, which is not valid JSON")


def _fsync_directory(directory: pathlib.Path) -> None:
    """Make the rename durable; some filesystems refuse directory fsync, which is harmless."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
