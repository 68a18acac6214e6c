"""The "Ranks" section: every rank of a torch.distributed run side by side (steps, data wait
per step, stall, throughput, shards read, verdict), the straggler marked, and the ranks with no
data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pipecheck import units as fmt
from pipecheck.render.model import Block, Note, Section, table

if TYPE_CHECKING:
    from pipecheck.records import RanksSummary
    from pipecheck.report import Report


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
    headers, right, rows = rank_table(summary)
    blocks.append(table(headers, rows, right=right, no_wrap=range(len(headers))))
    if summary.missing:
        blocks.append(Note("no data from rank(s) " + ", ".join(map(str, summary.missing)),
                           "warning"))
    if report.rank is not None:
        blocks.append(Note(f"The sections below are rank {report.rank.rank}'s own measurements.",
                           "dim"))
    return Section("ranks", "Ranks", tuple(blocks))


def rank_table(ranks: "RanksSummary") -> tuple[list[str], list[int], list[list[str]]]:
    """``(headers, indexes of right-aligned columns, rows)``: one row of plain text cells per
    rank, the straggler marked; a ``shards`` column when any rank knows its shards."""
    with_shards = any(rank.shards is not None for rank in ranks.ranks)
    headers = ["rank", "host", "steps", "wait/step", "stall", "throughput"]
    headers += ["shards"] if with_shards else []
    headers += ["verdict", ""]
    rows = []
    for rank in ranks.ranks:
        mark = "◀ straggler" if rank.rank == ranks.straggler else ""
        if rank.status not in ("complete", "exhausted"):
            mark = f"{mark} ({rank.status})".strip()
        row = [str(rank.rank), rank.hostname or "n/a", f"{rank.batches:,}",
               fmt.seconds(rank.wait_per_batch_s), fmt.percent(rank.stall_fraction),
               fmt.rate(rank.samples_per_s, "samples")]
        row += [fmt.count(rank.shards, "shard")] if with_shards else []
        rows.append(row + [rank.verdict, mark])
    return headers, list(range(2, 7 if with_shards else 6)), rows
