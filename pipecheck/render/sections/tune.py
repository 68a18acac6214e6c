"""The "Online tuning" section (``wrap(tune=True)``): the status and its reason, the starting and
kept settings, each trial (settings, batches, samples/s, stall, noise), the measured gain and
what tuning cost, and the one line of code that pins the kept settings.

Input is the report's typed ``tune`` section (:class:`~pipecheck.records.TuneSection`,
:meth:`pipecheck.tune.tuner.Tuner.section`); unmeasured values show as
:data:`pipecheck.units.NOT_MEASURED`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pipecheck import units as fmt
from pipecheck.records import TuneSection
from pipecheck.render.model import Block, Note, Section, capped, line, more, table

if TYPE_CHECKING:
    from pipecheck.report_data import ReportData

TRIAL_ROWS = 50
"""Trials shown in run order (the default schedule runs under 10; the JSON has them all)."""

NOTE_LINES = 10
"""Notes (settings not tried, and why) shown."""

STATUS_TEXT = {
    "settled": "settled: trials are over and the kept settings are in use",
    "tuning": "tuning: trials were still running when this report was taken",
    "off": "off: tuning failed and turned itself off; the loop went on",
    "skipped": "skipped: nothing was tried",
}


def tune(report: "ReportData") -> Optional[Section]:
    """The section when the report has a ``tune`` section, else ``None``."""
    if report.tune is None:
        return None
    return Section("tune", "Online tuning", tuple(tune_blocks(report.tune)))


def tune_blocks(section: TuneSection) -> list[Block]:
    """The section's blocks for a ``tune`` section."""
    blocks: list[Block] = [Note(STATUS_TEXT.get(section.status, section.status),
                                "alert" if section.status == "off" else "bold")]
    if section.reason:
        blocks.append(Note(section.reason, "alert" if section.status == "off" else "plain"))
    if section.start is not None:
        blocks.append(line(("started with", section.start.short_label()),
                           ("kept", section.chosen.short_label() if section.chosen is not None
                            else fmt.NOT_MEASURED)))
    if section.speedup is not None or section.tuning_s is not None:
        gain = (fmt.NOT_MEASURED if section.speedup is None
                else f"x{section.speedup:.2f} samples/s over the start")
        blocks.append(line(("measured gain", gain),
                           ("tuning took", fmt.seconds(section.tuning_s) + " of loop time"
                            + ("" if section.tuning_batches is None
                               else f", {section.tuning_batches:,} batches")
                            + (f", re-tuned {section.retunes}x after a drop"
                               if section.retunes else "")),
                           ("slower trials cost", fmt.seconds(section.cost_s))))
    trials, hidden = capped(section.trials, TRIAL_ROWS)
    if trials:
        rows = [[t.settings.short_label(), f"{t.batches:,}", fmt.rate(t.samples_per_s, "samples"),
                 fmt.percent(t.stall_fraction), fmt.percent(t.noise_fraction)]
                for t in trials]
        blocks.append(table(["settings", "batches", "throughput", "stall", "noise"], rows,
                            right=range(1, 5)))
        blocks.append(Note("each trial's window leaves out the batches right after its switch "
                           "(the old iterator's outstanding batches, the new workers' start)",
                           "dim"))
    if hidden:
        blocks.append(more(hidden, "trials"))
    notes, hidden_notes = capped(section.notes, NOTE_LINES)
    for text in notes:
        blocks.append(Note(text, "dim"))
    if hidden_notes:
        blocks.append(more(hidden_notes, "notes"))
    if section.pin_line:
        blocks.append(line(("pin it for the next run", section.pin_line)))
    return blocks
