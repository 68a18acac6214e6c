"""The "Shard assignment" section (:mod:`pipecheck.analysis.sharding`): the setup, shards and
estimated samples per (rank, worker), findings and sharding recommendations. Also the whole
output of ``pipecheck shards``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pipecheck import units as fmt
from pipecheck.records import ShardingSection, ShardReader
from pipecheck.render.model import Block, Note, Section, capped, more, table

if TYPE_CHECKING:
    from pipecheck.report_data import ReportData

MAX_READER_ROWS = 16
"""(rank, worker) rows shown in rank order; beyond it the least and most loaded are kept (the
JSON has them all)."""

SPLITTERS_LISTED = 16
"""Splitters of a chain named (a pipeline has one or two)."""

RANKS_LISTED = 16
"""Ranks whose samples and batches the per-rank line names, in rank order."""

NOTE_ROWS = 20
"""Sharding findings, and sharding recommendations, shown each (the analysis gives a few)."""

TITLE = "Shard assignment"


def sharding(report: "ReportData") -> Optional[Section]:
    """The section when the report has a ``sharding`` section, else ``None``."""
    return sharding_section(report.sharding) if report.sharding else None


def sharding_section(section: ShardingSection) -> Section:
    """The section for a ``sharding`` section (a report's, or ``pipecheck shards``' own)."""
    total = section.samples_total
    counted = section.counted_shards
    shards = section.shards
    samples = ("n/a (remote shards are not counted)" if total is None else
               f"{total:,.0f}" + ("" if counted == shards else
                                  f" (counted in {counted} of {shards} shards, the rest "
                                  f"estimated by size)"))
    splitters = section.splitters
    chain = splitters.get("chain")
    if chain is None:
        chain = [splitters.get("node"), splitters.get("worker")]
    elif not isinstance(chain, list):  # a hand-edited report: show what it holds
        chain = [chain]
    split = " then ".join(str(name) for name in chain[:SPLITTERS_LISTED]) if chain else \
        "nothing (every reader gets every shard)"
    if len(chain) > SPLITTERS_LISTED:
        split += f" and {len(chain) - SPLITTERS_LISTED:,} more"
    blocks: list[Block] = [Note(
        f"{fmt.count(shards, 'shard')}, {samples} samples; world size "
        f"{section.world_size} ({section.world_size_source}), "
        f"{section.num_workers} workers per rank; split by {split}"
        + ("; resampled" if section.resampled else ""))]
    readers: list[Optional[ShardReader]] = list(section.assignments)
    hidden = len(readers) - MAX_READER_ROWS
    if hidden > 0:
        readers.sort(key=lambda a: (a is None or a.samples is None,
                                    (a.samples or 0) if a else 0, a.shards if a else 0))
        half = MAX_READER_ROWS // 2
        readers = readers[:half] + [None] + readers[-half:]
    rows = []
    for reader in readers:
        if reader is None:
            rows.append(["...", "", f"{hidden} more", ""])
            continue
        value = reader.samples
        rows.append([str(reader.rank), str(reader.worker),
                     str(reader.shards), "n/a" if value is None else f"{value:,.0f}"])
    blocks.append(table(["rank", "worker", "shards", "samples"], rows, right=range(4)))
    if len(section.ranks) > 1:
        parts = []
        for rank in section.ranks[:RANKS_LISTED]:
            batches = rank.batches
            parts.append(f"rank {rank.rank}: "
                         + ("n/a" if rank.samples is None else
                            f"{rank.samples:,.0f} samples")
                         + ("" if batches is None else f", {batches:,} batches"))
        if len(section.ranks) > RANKS_LISTED:
            parts.append(f"and {len(section.ranks) - RANKS_LISTED:,} more ranks (see the JSON)")
        blocks.append(Note("per rank: " + "; ".join(parts)))
    idle = section.idle_fraction_at_epoch_end
    if idle is not None:
        blocks.append(Note(f"epoch-end idle share: {fmt.percent(idle)} of worker time"))
    findings, hidden = capped(section.findings, NOTE_ROWS)
    for finding in findings:
        blocks.append(Note(f"{finding.severity}: {finding.kind}: {finding.message}"))
    if hidden:
        blocks.append(more(hidden, "sharding findings"))
    recommendations, hidden = capped(section.recommendations, NOTE_ROWS)
    for number, rec in enumerate(recommendations, start=1):
        note = rec.expected.note
        blocks.append(Note(f"{number}. {rec.setting}: "
                           f"{fmt.setting_value(rec.current)} -> "
                           f"{fmt.setting_value(rec.proposed)}"
                           + (f" · {note}" if note else "") + f" · {rec.reason}"))
    if hidden:
        blocks.append(more(hidden, "sharding recommendations"))
    if not section.findings:
        blocks.append(Note("no sharding problem found"))
    return Section("sharding", TITLE, tuple(blocks))
