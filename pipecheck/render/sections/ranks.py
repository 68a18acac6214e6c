"""The "Ranks" section: every rank of a torch.distributed run side by side (steps, data wait
per step, stall, throughput, shards read, verdict), the straggler marked, and the ranks with no
data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pipecheck import units as fmt
from pipecheck.render.model import Block, Note, Section, more, table

if TYPE_CHECKING:
    from pipecheck.records import RanksSummary
    from pipecheck.report import Report

RANK_ROWS = 64
"""Rank rows shown: the first ranks in the report's order, and the straggler wherever it is."""

MISSING_LISTED = 32
"""Missing ranks named one by one; the rest are counted."""


def ranks(report: "Report") -> Optional[Section]:
    """The section for a merged multi-rank report; ``None`` for a single rank."""
    summary = report.ranks
    if summary is None:
        return None
    total = fmt.rate(summary.samples_per_s, "samples")
    blocks: list[Block] = [Note(f"{len(summary.ranks)} of {summary.world_size} ranks reported · "
                                f"{total} summed over ranks")]
    if summary.straggler is not None:
        blocks.append(Note(f"straggler: rank {summary.straggler} (highest data wait per step; "
                           "under synchronous gradients it sets every rank's pace)", "bold"))
    headers, right, rows = rank_table(summary, limit=RANK_ROWS)
    blocks.append(table(headers, rows, right=right, no_wrap=range(len(headers))))
    if len(summary.ranks) > len(rows):
        blocks.append(more(len(summary.ranks) - len(rows), "ranks"))
    if summary.missing:
        listed = ", ".join(map(str, summary.missing[:MISSING_LISTED]))
        if len(summary.missing) > MISSING_LISTED:
            listed += f" and {len(summary.missing) - MISSING_LISTED:,} more"
        blocks.append(Note("no data from rank(s) " + listed, "warning"))
    if report.rank is not None:
        blocks.append(Note(f"The sections below are rank {report.rank.rank}'s own measurements.",
                           "dim"))
    return Section("ranks", "Ranks", tuple(blocks))


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
