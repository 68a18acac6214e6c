"""This run compared with an earlier report (``pipecheck report --compare``, or the report
``wrap(save=PATH)`` / ``pipecheck run --json PATH`` replaced): the verdict on throughput, the
figures side by side, the settings that changed and the caveats."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pipecheck import units as fmt
from pipecheck.render.model import Block, Note, Section, capped, line, more, table
from pipecheck.render.phrases import (FIGURE_LABELS, comparison_line, comparison_notes,
                                      figure_change, figure_value)

if TYPE_CHECKING:
    from pipecheck.records import Comparison
    from pipecheck.report_data import ReportData

CHANGED_ROWS = 20
"""Changed settings shown (a DataLoader has about ten; the JSON has them all)."""

FIGURE_ROWS = 20
"""Compared figures shown (pipecheck writes seven; the JSON has them all)."""


def comparison(report: "ReportData") -> Optional[Section]:
    """The comparison section of a report compared with an earlier one (its one-line verdict
    is among the document's notes, under the context line)."""
    if report.comparison is None or report.comparison.status != "compared":
        return None  # the document's notes give the verdict line, or why it was not compared
    return comparison_section(report.comparison, verdict=False)


def comparison_section(found: "Comparison", verdict: bool) -> Section:
    """The section for ``found``: the verdict line (when ``verdict``; ``pipecheck report
    --compare`` shows it above as the document's verdict instead), the figures side by side,
    the settings that changed, each run's noise and the caveats."""
    blocks: list[Block] = []
    fell = found.verdict == "fell"
    if verdict:
        blocks.append(Note(comparison_line(found), "alert" if fell else "bold"))
    if found.status != "compared":
        return Section("comparison", "Compared with the earlier report", tuple(blocks))
    figures, hidden = capped(found.figures, FIGURE_ROWS)
    blocks.append(table(
        ["", "earlier", "this run", "change"],
        [[FIGURE_LABELS.get(f.name, f.name), figure_value(f.name, f.old),
          figure_value(f.name, f.new), figure_change(f.name, f.old, f.new)]
         for f in figures],
        right={1, 2, 3}, no_wrap={1, 2, 3}))
    if hidden:
        blocks.append(more(hidden, "compared figures"))
    shown, hidden = capped(found.settings, CHANGED_ROWS)
    if shown:
        blocks.append(table(["setting changed", "earlier", "this run"],
                            [[c.name, fmt.setting_value(c.old), fmt.setting_value(c.new)]
                             for c in shown], code={0}))
        if hidden:
            blocks.append(more(hidden, "changed settings"))
    else:
        blocks.append(Note("no loader setting changed", "dim"))
    blocks.append(line(
        ("earlier report", f"{found.old_path} ({found.old_created or 'time unknown'})"),
        ("noise", f"earlier +-{fmt.percent(found.old_noise_fraction)}, this run "
                  f"+-{fmt.percent(found.new_noise_fraction)} (90% interval of loop time per "
                  "batch, batch means)")))
    blocks += [Note(text, "warning") for text in comparison_notes(found)]
    return Section("comparison", "Compared with the earlier report", tuple(blocks))
