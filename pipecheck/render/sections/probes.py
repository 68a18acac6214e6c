"""Sections of the optional probes, present only when the run has them: pipeline stages, hot
stacks (py-spy) and the GPU (CUDA events)."""

from __future__ import annotations

import itertools
import os
import sysconfig
from typing import TYPE_CHECKING, Optional

from pipecheck import units as fmt
from pipecheck.render.model import Block, Chart, Note, Section, line, more, table

if TYPE_CHECKING:
    from pipecheck.report_data import ReportData

STAGE_ROWS = 6
"""Pipeline stages listed in the terminal, most exclusive time first (the JSON has them all)."""

STACK_ROWS = 5
"""Hottest functions listed, by share of on-CPU samples."""

SHARE_ITEMS = 5
"""Entries of a share map listed (where the main thread waited, worker time per stage), in the
report's order (largest first)."""


def stages(report: "ReportData") -> Optional[Section]:
    """Exclusive time per stage: where it ran, seconds, share of that place's stage time, items
    in and out (a filter shows as fewer out than in), and a bar chart."""
    rows = report.producer.stages
    if not rows:
        return None
    cells = [[row.name, row.where, fmt.seconds(row.exclusive_s), fmt.percent(row.fraction),
              "-" if row.samples_in is None else f"{row.samples_in:,}",
              f"{row.samples_out:,}"] for row in rows[:STAGE_ROWS]]
    blocks: list[Block] = [table(["stage", "runs in", "exclusive", "share", "in", "out"], cells,
                                 right=range(2, 6))]
    if len(rows) > STAGE_ROWS:
        blocks.append(more(len(rows) - STAGE_ROWS, "stages"))
    blocks.append(Chart("stages", "Exclusive time per pipeline stage (its own work, not the "
                        "stages it pulls from); blue ran in the workers, purple in the main "
                        "process.", "No stage was timed."))
    return Section("stages", "Pipeline stages", tuple(blocks))


def stacks(report: "ReportData") -> Optional[Section]:
    """Status and the hottest functions by share of on-CPU worker samples."""
    record = report.stacks
    if record is None:
        return None
    title = "Hot stacks (py-spy)"
    if record.status != "ok":
        return Section("stacks", title, (
            Note(f"not sampled ({record.status}): {record.note}", "dim"),))
    overhead = ("py-spy overhead", fmt.NOT_MEASURED if record.overhead_cpu_s is None
                else f"{fmt.seconds(record.overhead_cpu_s)} CPU")
    blocks: list[Block] = [
        line(("worker samples", f"{record.worker_samples:,}"),
             ("start-up/shutdown", f"{record.worker_other_samples:,}"),
             ("main", f"{record.main_samples:,}")),
        line(("window", fmt.seconds(record.window_s)), ("rate", f"{record.rate_hz} Hz"),
             overhead),
    ]
    if record.main_wait:
        split = [(name, fmt.percent(share))
                 for name, share in itertools.islice(record.main_wait.items(), SHARE_ITEMS)]
        split[0] = (f"main thread in next(): {split[0][0]}", split[0][1])
        split[-1] = (split[-1][0], f"{split[-1][1]} ({record.main_wait_samples:,} samples)")
        blocks.append(line(*split))
    if record.stages:
        shares = [(name, fmt.percent(share))
                  for name, share in itertools.islice(record.stages.items(), SHARE_ITEMS)]
        shares[0] = (f"worker stages: {shares[0][0]}", shares[0][1])
        blocks.append(line(*shares))
    if record.pin_memory_busy_fraction is not None:
        blocks.append(line(("pin-memory thread busy",
                            fmt.percent(record.pin_memory_busy_fraction))))
    if not record.top:
        blocks.append(Note("no on-CPU samples", "dim"))
        return Section("stacks", title, tuple(blocks))
    scope = "worker" if record.worker_samples else "main-process"
    rows = []
    for hot in record.top[:STACK_ROWS]:
        where = _short_path(hot.file) + (f":{hot.line}" if hot.line is not None else "")
        stage = f"  [{hot.stage}]" if hot.stage else ""
        rows.append([fmt.percent(hot.fraction), fmt.percent(hot.inclusive_fraction),
                     f"{hot.function}{stage}  {where}"])
    blocks.append(table(["self", "total", f"function (share of {scope} samples)"], rows,
                        right=(0, 1), no_wrap=(0, 1), grid=True))
    if len(record.top) > STACK_ROWS:
        blocks.append(more(len(record.top) - STACK_ROWS, "functions"))
    return Section("stacks", title, tuple(blocks))


def _short_path(path: str) -> str:
    """``path`` from its package on for installed code (``.../site-packages/torch/x.py`` ->
    ``torch/x.py``) and the standard library (``threading.py``), relative to the working
    directory below it; the JSON keeps it whole."""
    marker = "site-packages/"
    if marker in path:
        return path.split(marker, 1)[1]
    stdlib = sysconfig.get_paths()["stdlib"] + os.sep
    if path.startswith(stdlib):
        return path[len(stdlib):]
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if relative.startswith("..") else relative


def device(report: "ReportData") -> Optional[Section]:
    """GPU idle caused by data and the batches behind it (the pinned share only when known)."""
    record = report.device
    if record is None:
        return None
    pinned = ([("pinned batches", fmt.percent(record.pinned_fraction))]
              if record.pinned_fraction is not None else [])
    return Section("device", "GPU (CUDA events)", (
        line(("GPU idle waiting for data", fmt.seconds(record.idle_s)),
             ("share of stream time", fmt.percent(record.idle_fraction))),
        line(("batches timed", f"{record.batches:,}"), ("pending", f"{record.unresolved:,}"),
             ("not timed (pool full)", f"{record.dropped:,}"), *pinned),
    ))
