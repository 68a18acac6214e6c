"""Merging the reports of several torch.distributed ranks into one.

The merged report is the **straggler's** own report (its loader is the one to fix, so its full
detail comes along) with ``ranks`` holding every rank side by side and the rank findings
(:mod:`pipecheck.analysis.ranks`) added to its diagnosis. Per-rank files
(``run.rank{N}.json``) come first; a rank with no file of its own but a summary rank 0 gathered
(``ranks`` of rank 0's report) is filled in from that summary.

:func:`merge_files` (``pipecheck report`` / ``pipecheck check`` on rank files) streams: it
reads the files one at a time and keeps one :class:`~pipecheck.records.RankSummary` per rank
(a few hundred bytes), never a timeline; only the straggler's file is then read in full. Its
memory is the ranks times a summary plus one file's parse; its time about one ``json.load``
of every file (``benchmarks/many_ranks.py``). Bad input stops the merge with one line naming
the file (:class:`~pipecheck.errors.BadInputError`, exit 2): a file that is not a report
(corrupt, truncated, not JSON), one without a rank, one of another run (another world size)
or a second file of one rank. A rank whose loop ended in an error is merged and counted as
failed (:attr:`~pipecheck.records.RankSummary.failed`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional, Sequence

from pipecheck.analysis.ranks import analyze_ranks, rank_summary
from pipecheck.errors import BadInputError, ReportFormatError
from pipecheck.kinds import FindingKind
from pipecheck.records import (ConsumerSummary, Diagnosis, RankInfo, RankSummary, RanksSummary,
                               Recommendation, TuneSection)
from pipecheck.codec import from_jsonable
from pipecheck.report import Report, check_schema, load, read_json


def own_summary(report: Report, source: Optional[str] = None) -> RankSummary:
    """The rank summary of ``report`` (which must carry ``rank``)."""
    assert report.rank is not None
    return rank_summary(report.rank, report.consumer, report.diagnosis.verdict, source,
                        report.diagnosis.findings, report.recommendations, report.tune)


@dataclasses.dataclass(frozen=True)
class RankRead:
    """What the streaming merge keeps of one report file: its ``rank`` (``None``: recorded
    without torch.distributed), its :class:`~pipecheck.records.RankSummary` (``None`` without a
    rank) and the summaries rank 0 gathered (``ranks``, else ``None``)."""

    source: str
    rank: Optional[RankInfo]
    summary: Optional[RankSummary]
    gathered: Optional[RanksSummary]


def read_rank_file(path: str | os.PathLike[str]) -> RankRead:
    """Read one report file and keep only its rank summary: the JSON is parsed
    (:func:`pipecheck.report.read_json`), then only ``rank``, ``consumer``, ``diagnosis``,
    ``recommendations``, ``tune`` and ``ranks`` are decoded and range-checked as
    :func:`pipecheck.load`
    would (the timeline is never decoded). Raises :class:`~pipecheck.errors.BadInputError` /
    :class:`~pipecheck.errors.ReportFormatError` with one line naming the file."""
    source = os.fspath(path)
    data = read_json(path)
    try:
        check_schema(data)
        rank = from_jsonable(Optional[RankInfo], data.get("rank"), "report.rank", ranges=True)
        consumer = from_jsonable(ConsumerSummary, data["consumer"], "report.consumer",
                                 ranges=True)
        diagnosis = from_jsonable(Diagnosis, data["diagnosis"], "report.diagnosis", ranges=True)
        recommendations = from_jsonable(list[Recommendation], data["recommendations"],
                                        "report.recommendations", ranges=True)
        gathered = from_jsonable(Optional[RanksSummary], data.get("ranks"), "report.ranks",
                                 ranges=True)
        tune = from_jsonable(Optional[TuneSection], data.get("tune"), "report.tune",
                             ranges=True)
    except ReportFormatError as err:
        raise ReportFormatError(f"{source}: {err}") from err
    except KeyError as err:
        raise ReportFormatError(f"{source}: report is missing key {err.args[0]}") from err
    except (TypeError, ValueError) as err:
        raise ReportFormatError(f"{source}: report is malformed: {err}") from err
    summary = (rank_summary(rank, consumer, diagnosis.verdict, source, diagnosis.findings,
                            recommendations, tune) if rank is not None else None)
    return RankRead(source, rank, summary, gathered)


def merge_files(paths: Sequence[str | os.PathLike[str]]) -> Report:
    """Merge the rank files of one multi-rank run, streaming (see the module docstring): each
    file is read once (:func:`read_rank_file`) and dropped but for its summary, then the
    straggler's file is loaded in full (:func:`pipecheck.load`) and given ``ranks``
    (:func:`with_ranks`). The result is what :func:`merge_reports` gives for the same files.

    Raises :class:`~pipecheck.errors.BadInputError` (one line naming the file) for no paths, a
    file that cannot be read or is not a report, a file without a rank, two files of one rank
    or world sizes that differ."""
    if not paths:
        raise BadInputError("no reports to merge")
    world_size: Optional[int] = None
    by_rank: dict[int, RankSummary] = {}
    gathered: list[RankSummary] = []
    for path in paths:
        read = read_rank_file(path)
        # a file without a summary is reported as one without a rank
        world_size = _check_rank(read.source, read.rank if read.summary is not None else None,
                                 world_size,
                                 {r: s.source for r, s in by_rank.items()})
        assert read.rank is not None and read.summary is not None
        by_rank[read.rank.rank] = read.summary
        if read.gathered is not None:
            gathered += read.gathered.ranks
    assert world_size is not None
    summaries = list(by_rank.values())
    summaries += [s for s in gathered if s.rank not in by_rank]  # ranks without a file
    ranks, _ = analyze_ranks(summaries, world_size)
    chosen = by_rank.get(ranks.straggler) if ranks.straggler is not None else None
    if chosen is None:
        chosen = by_rank[min(by_rank)]
    assert chosen.source is not None
    return with_ranks(load(chosen.source), summaries, world_size)


def _check_rank(source: Any, rank: Any, world_size: Optional[int],
                seen: dict[int, Any]) -> int:
    """The world size of the files so far, once ``source``'s ``rank`` (a ``RankInfo`` or
    ``None``) is checked against them (``seen``: rank -> the file holding it). Raises
    :class:`~pipecheck.errors.BadInputError`, one line naming the file, for no rank, another
    world size or a rank already held."""
    if rank is None:
        raise BadInputError(f"{source} was not recorded under torch.distributed (it has no "
                            "rank), so it cannot be merged with rank reports")
    if world_size is not None and rank.world_size != world_size:
        raise BadInputError(f"{source} is from a world of {rank.world_size} ranks, the other "
                            f"files from {world_size}: not the same run")
    if rank.rank in seen:
        raise BadInputError(f"{source} and {seen[rank.rank]} both hold rank {rank.rank}")
    return rank.world_size


def with_ranks(report: Report, summaries: Sequence[RankSummary], world_size: int) -> Report:
    """``report`` with ``ranks`` set from ``summaries`` and the rank findings added (replacing
    rank findings it already had)."""
    ranks, findings = analyze_ranks(summaries, world_size)
    kept = [f for f in report.diagnosis.findings
            if f.kind not in (FindingKind.STRAGGLER_RANK, FindingKind.RANKS_MISSING)]
    diagnosis = dataclasses.replace(report.diagnosis, findings=findings + kept)
    return dataclasses.replace(report, ranks=ranks, diagnosis=diagnosis)


def merge_reports(reports: Sequence[tuple[str, Report]]) -> Report:
    """Merge ``(source, report)`` pairs of one multi-rank run (each ``report.rank`` set, one
    file per rank, all with the same world size) into one report; see the module docstring.

    Raises :class:`~pipecheck.errors.BadInputError` (one line naming the file) when a report has
    no rank, two files hold the same rank, or the world sizes differ.
    """
    if not reports:
        raise BadInputError("no reports to merge")
    world_size: Optional[int] = None
    by_rank: dict[int, tuple[str, Report]] = {}
    for source, report in reports:
        world_size = _check_rank(source, report.rank, world_size,
                                 {r: pair[0] for r, pair in by_rank.items()})
        assert report.rank is not None
        by_rank[report.rank.rank] = (source, report)
    assert world_size is not None
    summaries = [own_summary(report, source) for source, report in by_rank.values()]
    for _, report in by_rank.values():  # summaries rank 0 gathered, for ranks without a file
        if report.ranks is not None:
            summaries += [s for s in report.ranks.ranks if s.rank not in by_rank]
    ranks, _ = analyze_ranks(summaries, world_size)
    base = by_rank.get(ranks.straggler) if ranks.straggler is not None else None
    _, report = base if base is not None else by_rank[min(by_rank)]
    return with_ranks(report, summaries, world_size)
