"""The "Shard assignment" section (:mod:`pipecheck.analysis.sharding`): the setup, shards and
estimated samples per (rank, worker), findings and sharding recommendations. Also the whole
output of ``pipecheck shards``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from pipecheck import units as fmt
from pipecheck.render.model import Block, Note, Section, table

if TYPE_CHECKING:
    from pipecheck.report import Report

MAX_READER_ROWS = 16
"""(rank, worker) rows shown in rank order; beyond it the least and most loaded are kept (the
JSON has them all)."""

TITLE = "Shard assignment"


def sharding(report: "Report") -> Optional[Section]:
    """The section when the report has a ``sharding`` dict, else ``None``."""
    return sharding_section(report.sharding) if report.sharding else None


def sharding_section(section: dict[str, Any]) -> Section:
    """The section for a ``sharding`` dict (a report's, or ``pipecheck shards``' own)."""
    total = section.get("samples_total")
    counted = section.get("counted_shards") or 0
    shards = section.get("shards") or 0
    samples = ("n/a (remote shards are not counted)" if total is None else
               f"{total:,.0f}" + ("" if counted == shards else
                                  f" (counted in {counted} of {shards} shards, the rest "
                                  f"estimated by size)"))
    splitters = section.get("splitters") or {}
    chain = splitters.get("chain")
    if chain is None:
        chain = [splitters.get("node"), splitters.get("worker")]
    split = " then ".join(str(name) for name in chain) if chain else "nothing (every reader " \
        "gets every shard)"
    blocks: list[Block] = [Note(
        f"{fmt.count(shards, 'shard')}, {samples} samples; world size "
        f"{section.get('world_size')} ({section.get('world_size_source')}), "
        f"{section.get('num_workers')} workers per rank; split by {split}"
        + ("; resampled" if section.get("resampled") else ""))]
    readers: list[Optional[dict[str, Any]]] = list(section.get("assignments") or [])
    hidden = len(readers) - MAX_READER_ROWS
    if hidden > 0:
        readers.sort(key=lambda a: (a is None or a.get("samples") is None,
                                    (a or {}).get("samples") or 0, (a or {}).get("shards") or 0))
        half = MAX_READER_ROWS // 2
        readers = readers[:half] + [None] + readers[-half:]
    rows = []
    for reader in readers:
        if reader is None:
            rows.append(["...", "", f"{hidden} more", ""])
            continue
        value = reader.get("samples")
        rows.append([str(reader.get("rank")), str(reader.get("worker")),
                     str(reader.get("shards")), "n/a" if value is None else f"{value:,.0f}"])
    blocks.append(table(["rank", "worker", "shards", "samples"], rows, right=range(4)))
    per_rank = section.get("ranks") or []
    if len(per_rank) > 1:
        parts = []
        for rank in per_rank:
            batches = rank.get("batches")
            parts.append(f"rank {rank.get('rank')}: "
                         + ("n/a" if rank.get("samples") is None else
                            f"{rank['samples']:,.0f} samples")
                         + ("" if batches is None else f", {batches:,} batches"))
        blocks.append(Note("per rank: " + "; ".join(parts)))
    idle = section.get("idle_fraction_at_epoch_end")
    if idle is not None:
        blocks.append(Note(f"epoch-end idle share: {fmt.percent(idle)} of worker time"))
    for finding in section.get("findings") or []:
        blocks.append(Note(f"{finding.get('severity')}: {finding.get('kind')}: "
                           f"{finding.get('message')}"))
    for number, rec in enumerate(section.get("recommendations") or [], start=1):
        note = (rec.get("expected") or {}).get("note")
        blocks.append(Note(f"{number}. {rec.get('setting')}: "
                           f"{fmt.setting_value(rec.get('current'))} -> "
                           f"{fmt.setting_value(rec.get('proposed'))}"
                           + (f" · {note}" if note else "") + f" · {rec.get('reason')}"))
    if not section.get("findings"):
        blocks.append(Note("no sharding problem found"))
    return Section("sharding", TITLE, tuple(blocks))
