"""The "Ranks" section of a torch.distributed run: the job's shape (data wait per step over
ranks, p50 / p90 / max, and by node; the slowest ranks and nodes; whether the straggler is a
rank, a node or the whole job; the ranks missing or failed; what online tuning kept, and
whether the ranks agree), then every rank side by side in a
table shown only where there is room for it (the HTML page, collapsed; the terminal and
markdown with ``--verbose``; the JSON always holds it). :func:`straggler_section` is the
straggler's own diagnosis and first recommendation, for the short job summary
(:func:`pipecheck.render.sections.build_job_document`)."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Optional, Sequence

from pipecheck import units as fmt
from pipecheck.analysis.ranks import RANK_FINDINGS, job_shape
from pipecheck.render.model import (Block, Item, Items, Note, Section, by_severity, line, more,
                                    table)
from pipecheck.render.phrases import expected_rate_text, why_no_recommendations

if TYPE_CHECKING:
    from pipecheck.records import RankSummary, RanksSummary
    from pipecheck.report_data import ReportData

RANK_ROWS = 16_384
"""Rows of the every-rank table (HTML, ``--verbose``): the ranks in rank order, the straggler
kept in place of the last when it is not among them; the JSON holds them all."""

SLOWEST_ROWS = 5
"""Rows of the slowest-ranks and slowest-nodes tables of the job summary."""

MISSING_LISTED = 32
"""Missing or failed ranks named one by one; the rest are counted."""

_SCOPE_WORDS = {"rank": "one rank", "node": "one node", "job": "the whole job",
                "none": "no straggler worth acting on"}


def ranks(report: "ReportData", every_rank: bool = False) -> Optional[Section]:
    """The section for a multi-rank report (``None`` for a single rank): the job's shape, then
    the every-rank table as a detail block (HTML only, collapsed), or shown by every format
    when ``every_rank`` (``--verbose``)."""
    summary = report.ranks
    if summary is None:
        return None
    blocks = job_blocks(summary)
    headers, right, rows = rank_table(summary, limit=RANK_ROWS)
    blocks.append(table(headers, rows, right=right, no_wrap=range(len(headers)),
                        title=f"Every rank ({len(summary.ranks):,})", detail=not every_rank,
                        collapsed=not every_rank))
    if len(summary.ranks) > len(rows):
        blocks.append(more(len(summary.ranks) - len(rows), "ranks", detail=not every_rank))
    if report.rank is not None:
        blocks.append(Note(f"The sections below are rank {report.rank.rank}'s own measurements.",
                           "dim"))
    return Section("ranks", "Ranks", tuple(blocks))


def job_blocks(summary: "RanksSummary") -> list[Block]:
    """The job's shape as blocks: a bounded number of lines whatever the number of ranks."""
    shape = summary.shape if summary.shape is not None else job_shape(summary.ranks)
    total = fmt.rate(summary.samples_per_s, "samples")
    blocks: list[Block] = [Note(f"{len(summary.ranks):,} of {summary.world_size:,} ranks "
                                f"reported · {total} summed over ranks")]
    blocks.append(line(("data wait per step over ranks: p50", fmt.seconds(
        shape.wait_per_batch_p50_s)), ("p90", fmt.seconds(shape.wait_per_batch_p90_s)),
        ("max", fmt.seconds(shape.wait_per_batch_max_s))))
    timed = [n for n in shape.nodes if n.wait_per_batch_median_s is not None]
    if len(timed) >= 2:
        medians = sorted(n.wait_per_batch_median_s for n in timed
                         if n.wait_per_batch_median_s is not None)
        blocks.append(line((f"by node ({len(shape.nodes):,} nodes): median wait per step from",
                            f"{fmt.seconds(medians[0])} to {fmt.seconds(medians[-1])}"),
                           ("spread", fmt.seconds(shape.node_spread_s))))
    if summary.straggler is not None:
        blocks.append(Note(f"straggler: rank {summary.straggler} (highest data wait per step; "
                           "under synchronous gradients it sets every rank's pace)", "bold"))
    blocks.append(Note(f"slowness is {_SCOPE_WORDS.get(shape.scope, shape.scope)}: "
                       f"{shape.scope_reason}", "bold" if shape.scope != "none" else "dim"))
    by_rank = {r.rank: r for r in summary.ranks}
    slow = [by_rank[r] for r in shape.slowest_ranks[:SLOWEST_ROWS] if r in by_rank]
    if slow:
        headers, right, rows = _rows(summary, slow)
        blocks.append(Note(f"slowest {len(slow)} ranks", "dim"))
        blocks.append(table(headers, rows, right=right, no_wrap=range(len(headers))))
    nodes = {n.node: n for n in shape.nodes}
    slow_nodes = [nodes[n] for n in shape.slowest_nodes[:SLOWEST_ROWS] if n in nodes]
    if len(shape.nodes) >= 2 and slow_nodes:
        blocks.append(Note(f"slowest {len(slow_nodes)} nodes", "dim"))
        blocks.append(table(
            ["node", "ranks", "median wait/step", "max wait/step", "slowest rank", "failed"],
            [[n.node, f"{n.ranks:,}", fmt.seconds(n.wait_per_batch_median_s),
              fmt.seconds(n.wait_per_batch_max_s),
              str(n.slowest_rank) if n.slowest_rank is not None else "n/a", f"{n.failed:,}"]
             for n in slow_nodes],
            right=range(1, 6), no_wrap=range(6)))
    if summary.missing:
        blocks.append(Note(f"{len(summary.missing):,} rank(s) missing (no data): "
                           + _listed(summary.missing), "warning"))
    if shape.failed:
        blocks.append(Note(f"{len(shape.failed):,} rank(s) failed (loop ended in error, "
                           "interrupted or terminated): " + _listed(shape.failed), "warning"))
    if not summary.missing and not shape.failed:
        blocks.append(Note("no rank missing or failed", "dim"))
    tuned = summary.tuned
    if len(tuned) == 1:
        blocks.append(Note(f"online tuning: the {tuned[0].ranks:,} rank(s) that tuned all kept "
                           f"{tuned[0].settings}", "dim"))
    elif tuned:
        kept = "; ".join(f"{g.settings} on {g.ranks:,} rank(s)" for g in tuned[:SLOWEST_ROWS])
        if len(tuned) > SLOWEST_ROWS:
            kept += f"; {len(tuned) - SLOWEST_ROWS:,} more settings"
        blocks.append(Note(f"online tuning: ranks disagree: {kept}", "warning"))
    return blocks


def _listed(numbers: Sequence[int]) -> str:
    listed = ", ".join(map(str, numbers[:MISSING_LISTED]))
    if len(numbers) > MISSING_LISTED:
        listed += f" and {len(numbers) - MISSING_LISTED:,} more"
    return listed


def straggler_section(report: "ReportData") -> Optional[Section]:
    """The straggler's (the merged report's own rank's) diagnosis in a few lines: its figures,
    the rank findings, its own most severe finding and its first recommendation (or why it
    has none). ``None`` without a rank."""
    if report.rank is None:
        return None
    consumer = report.consumer
    per_step = consumer.wait_s / consumer.batches if consumer.batches else None
    blocks: list[Block] = [line(
        ("verdict", report.diagnosis.verdict), ("stall", fmt.percent(consumer.stall_fraction)),
        ("wait/step", fmt.seconds(per_step)), ("", fmt.rate(consumer.samples_per_s,
                                                               "samples")))]
    every = report.diagnosis.findings
    shown = [f for f in every if f.kind in RANK_FINDINGS]
    own = heapq.nsmallest(1, [f for f in every if f.kind not in RANK_FINDINGS],
                          key=lambda f: by_severity(f.severity))
    shown += own
    if shown:
        blocks.append(Items(tuple(Item(f.severity, f.message, f.kind) for f in shown)))
    if report.recommendations:
        rec = report.recommendations[0]
        blocks.append(Note(f"recommended: {rec.setting} {fmt.setting_value(rec.current)} -> "
                           f"{fmt.setting_value(rec.proposed)}, expected "
                           f"{expected_rate_text(rec)}", "bold"))
    else:
        blocks.append(Note(why_no_recommendations(report)))
    blocks.append(Note(f"rank {report.rank.rank}'s full report and every rank: --verbose, "
                       "--html FILE or --json FILE", "dim"))
    straggler = report.ranks.straggler if report.ranks is not None else None
    if straggler is None or straggler == report.rank.rank:
        return Section("straggler", f"Straggler: rank {report.rank.rank}", tuple(blocks))
    # the straggler's summary came from rank 0's gather, its own file was not given
    return Section("straggler", f"Rank {report.rank.rank} (the straggler, rank {straggler}, "
                   "has no file here)", tuple(blocks))


def rank_table(ranks: "RanksSummary", limit: Optional[int] = None
               ) -> tuple[list[str], list[int], list[list[str]]]:
    """``(headers, indexes of right-aligned columns, rows)``: one row of plain text cells per
    rank, the straggler marked; a ``shards`` column when any rank knows its shards. With
    ``limit``, rows for the first ``limit`` ranks only, the straggler's kept in place of the
    last when it is not among them."""
    shown = ranks.ranks
    if limit is not None and len(shown) > limit:
        shown = shown[:limit]
        straggler = next((r for r in ranks.ranks[limit:] if r.rank == ranks.straggler), None)
        if straggler is not None:
            shown = [*shown[:limit - 1], straggler]
    return _rows(ranks, shown)


def _rows(ranks: "RanksSummary", shown: Sequence["RankSummary"]
          ) -> tuple[list[str], list[int], list[list[str]]]:
    with_shards = any(rank.shards is not None for rank in shown)
    headers = ["rank", "host", "steps", "wait/step", "stall", "throughput"]
    headers += ["shards"] if with_shards else []
    headers += ["verdict", ""]
    rows = []
    for rank in shown:
        mark = "◀ straggler" if rank.rank == ranks.straggler else ""
        if rank.status not in ("complete", "exhausted"):
            mark = f"{mark} ({rank.status})".strip()
        row = [str(rank.rank), rank.hostname or "n/a", f"{rank.batches:,}",
               fmt.seconds(rank.wait_per_batch_s), fmt.percent(rank.stall_fraction),
               fmt.rate(rank.samples_per_s, "samples")]
        row += [fmt.count(rank.shards, "shard")] if with_shards else []
        rows.append(row + [rank.verdict, mark])
    return headers, list(range(2, 7 if with_shards else 6)), rows


__all__ = ["job_blocks", "rank_table", "ranks", "straggler_section"]
