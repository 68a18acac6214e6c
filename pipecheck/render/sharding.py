"""The ``sharding`` section (:mod:`pipecheck.analysis.sharding`) for the terminal: the setup,
shards and estimated samples per (rank, worker), findings and sharding recommendations.

:func:`sharding_renderables` returns rich objects (the terminal summary of a report embeds
them); :func:`render_sharding` renders them to a string for ``pipecheck shards``.
"""

from __future__ import annotations

import io
from typing import Any

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from pipecheck import units as fmt
from pipecheck.render.inert import Inert

MAX_READER_ROWS = 16
"""(rank, worker) rows shown in rank order; beyond it the least and most loaded are kept (the
JSON has them all)."""


def sharding_renderables(section: dict[str, Any]) -> list[RenderableType]:
    """Rich objects for ``section`` (a report's ``sharding`` dict)."""
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
    out: list[RenderableType] = [Text(
        f"{fmt.count(shards, 'shard')}, {samples} samples; world size "
        f"{section.get('world_size')} ({section.get('world_size_source')}), "
        f"{section.get('num_workers')} workers per rank; split by {split}"
        + ("; resampled" if section.get("resampled") else ""))]
    readers = list(section.get("assignments") or [])
    if len(readers) > MAX_READER_ROWS:
        readers.sort(key=lambda a: (a.get("samples") is None, a.get("samples") or 0,
                                    a.get("shards") or 0))
        half = MAX_READER_ROWS // 2
        hidden = len(readers) - MAX_READER_ROWS
        readers = readers[:half] + [None] + readers[-half:]
    else:
        hidden = 0
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for header in ("rank", "worker", "shards", "samples"):
        table.add_column(header, justify="right")
    for reader in readers:
        if reader is None:
            table.add_row("...", "", f"{hidden} more", "")
            continue
        value = reader.get("samples")
        table.add_row(str(reader.get("rank")), str(reader.get("worker")),
                      str(reader.get("shards")), "n/a" if value is None else f"{value:,.0f}")
    out.append(table)
    ranks = section.get("ranks") or []
    if len(ranks) > 1:
        parts = []
        for rank in ranks:
            batches = rank.get("batches")
            parts.append(f"rank {rank.get('rank')}: "
                         + ("n/a" if rank.get("samples") is None else
                            f"{rank['samples']:,.0f} samples")
                         + ("" if batches is None else f", {batches:,} batches"))
        out.append(Text("per rank: " + "; ".join(parts)))
    idle = section.get("idle_fraction_at_epoch_end")
    if idle is not None:
        out.append(Text(f"epoch-end idle share: {fmt.percent(idle)} of worker time"))
    for finding in section.get("findings") or []:
        out.append(Text(f"{finding.get('severity')}: {finding.get('kind')}: "
                        f"{finding.get('message')}"))
    for number, rec in enumerate(section.get("recommendations") or [], start=1):
        note = (rec.get("expected") or {}).get("note")
        out.append(Text(f"{number}. {rec.get('setting')}: {fmt.setting_value(rec.get('current'))}"
                        f" -> {fmt.setting_value(rec.get('proposed'))}"
                        + (f" · {note}" if note else "") + f" · {rec.get('reason')}"))
    if not section.get("findings"):
        out.append(Text("no sharding problem found"))
    return out


def render_sharding(section: dict[str, Any], width: int = 100) -> str:
    """``section`` as plain text, ``width`` columns wide (trailing spaces removed)."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None,
                      highlight=False, markup=False, emoji=False)
    console.print(Inert(sharding_renderables(section)))
    return "\n".join(line.rstrip() for line in buffer.getvalue().split("\n"))
