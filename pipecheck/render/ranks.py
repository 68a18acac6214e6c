"""The "Ranks" section of the terminal summary: every rank of a torch.distributed run side by
side (steps, data wait per step, stall, throughput, shards read, verdict), the straggler
marked, and the ranks with no data. Takes a finished
:class:`~pipecheck.records.RanksSummary`; returns rich renderables. Every number carries its
unit (:mod:`pipecheck.units`)."""

from __future__ import annotations

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from pipecheck import units as fmt
from pipecheck.records import RankInfo, RanksSummary


def ranks_lines(ranks: RanksSummary, shown: "RankInfo | None") -> list[RenderableType]:
    """The section body. ``shown``: the rank whose full report follows (named in the text)."""
    lines: list[RenderableType] = []
    total = fmt.rate(ranks.samples_per_s, "samples")
    lines.append(Text(f"{len(ranks.ranks)} of {ranks.world_size} ranks reported · "
                      f"{total} summed over ranks"))
    if ranks.straggler is not None:
        lines.append(Text(f"straggler: rank {ranks.straggler} (highest data wait per step; "
                          "under synchronous gradients it sets every rank's pace)",
                          style="bold"))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    headers, right, rows = rank_table(ranks)
    for i, header in enumerate(headers):
        table.add_column(header, justify="right" if i in right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    lines.append(table)
    if ranks.missing:
        lines.append(Text("no data from rank(s) " + ", ".join(map(str, ranks.missing)),
                          style="yellow"))
    if shown is not None:
        lines.append(Text(f"The sections below are rank {shown.rank}'s own measurements.",
                          style="dim"))
    return lines


def rank_table(ranks: RanksSummary) -> tuple[list[str], list[int], list[list[str]]]:
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
