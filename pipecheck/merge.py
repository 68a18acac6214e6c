"""Merging the reports of several torch.distributed ranks into one.

The merged report is the **straggler's** own report (its loader is the one to fix, so its full
detail comes along) with ``ranks`` holding every rank side by side and the rank findings
(:mod:`pipecheck.analysis.ranks`) added to its diagnosis. Per-rank files
(``run.rank{N}.json``) come first; a rank with no file of its own but a summary rank 0 gathered
(``ranks`` of rank 0's report) is filled in from that summary.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from pipecheck.analysis.ranks import analyze_ranks, rank_summary
from pipecheck.errors import BadInputError
from pipecheck.kinds import FindingKind
from pipecheck.records import RankSummary
from pipecheck.report import Report


def own_summary(report: Report, source: Optional[str] = None) -> RankSummary:
    """The rank summary of ``report`` (which must carry ``rank``)."""
    assert report.rank is not None
    return rank_summary(report.rank, report.consumer, report.diagnosis.verdict, source)


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
        if report.rank is None:
            raise BadInputError(f"{source} was not recorded under torch.distributed (it has no "
                                "rank), so it cannot be merged with rank reports")
        if world_size is None:
            world_size = report.rank.world_size
        elif report.rank.world_size != world_size:
            raise BadInputError(f"{source} is from a world of {report.rank.world_size} ranks, "
                                f"the other files from {world_size}: not the same run")
        if report.rank.rank in by_rank:
            raise BadInputError(f"{source} and {by_rank[report.rank.rank][0]} both hold rank "
                                f"{report.rank.rank}")
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
