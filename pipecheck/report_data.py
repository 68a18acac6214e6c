"""A report's data: what a run measured, what analysis concluded and what to change, with its
JSON form and its file.

:class:`ReportData` holds the fields, writes them as JSON (:meth:`ReportData.to_dict`,
:meth:`ReportData.save`) and reads them back (:meth:`ReportData.from_dict`). It knows no views:
the renderers of :mod:`pipecheck.render` take a ``ReportData``, and :class:`pipecheck.report.Report`
(what users hold) adds ``print(report)``, ``render()`` and ``save_html()`` on top. The JSON
layout is the contract in docs/architecture.md, schema :data:`SCHEMA`: readers reject other
schema versions instead of guessing. Keys are written in a fixed order (:data:`KEY_ORDER`) so
saved reports diff cleanly. NaN and infinity never reach the JSON: they are written as ``null``
("not measured").
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
import pathlib
from dataclasses import dataclass, field
from typing import Any, Optional, TypeVar

from pipecheck.codec import from_jsonable, to_jsonable
from pipecheck.errors import ReportFormatError
from pipecheck.kinds import REPORT_KINDS, ReportKind
from pipecheck.rank_files import rank_path
from pipecheck.records import (Comparison, ConsumerSummary, DeviceRecord, Diagnosis, Environment,
                               HostRecord, LoaderConfig, ProducerSummary, RankInfo, RanksSummary,
                               Recommendation, ShardingSection, StacksRecord, TuneSection, Timeline)
from pipecheck.report_sections import AttachSection, StressSection

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


_R = TypeVar("_R", bound="ReportData")


@dataclass(frozen=True)
class ReportData:
    """One run's measurements, diagnosis and recommendations: the data, its JSON and its file.
    Users hold the subclass :class:`pipecheck.report.Report`, which adds the views.

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
    def from_dict(cls: type[_R], data: Any) -> _R:
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
            report: _R = from_jsonable(cls, data, "report", ranges=True)
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


def rank_file_report(report: _R, limit: int = RANK_FILE_TIMELINE_ROWS) -> _R:
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
