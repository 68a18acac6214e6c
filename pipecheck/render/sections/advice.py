"""The findings and the recommendations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipecheck import units as fmt
from pipecheck.render.model import Item, Items, Note, Section, by_severity, line, table
from pipecheck.render.phrases import (effect_text, expected_rate_text, recommendations_caption,
                                     why_no_recommendations)

if TYPE_CHECKING:
    from pipecheck.report import Report


def findings(report: "Report") -> Section:
    """Every finding, most severe first, with its kind and evidence."""
    found = sorted(report.diagnosis.findings, key=lambda f: by_severity(f.severity))
    if not found:
        return Section("findings", "Findings", (Note("none", "dim"),))
    return Section("findings", "Findings", (Items(tuple(
        Item(f.severity, f.message, f.kind, dict(f.evidence) or None) for f in found)),))


def recommendations(report: "Report") -> Section:
    """A compact table of the changes (stacked lines on a narrow terminal), then each one's
    reason as a numbered paragraph (reasons are long; a table column would squeeze them)."""
    if not report.recommendations:
        return Section("recommendations", "Recommendations",
                       (Note(why_no_recommendations(report)),))
    rows, narrow, reasons = [], [], []
    for number, rec in enumerate(report.recommendations, start=1):
        change = f"{fmt.setting_value(rec.current)} -> {fmt.setting_value(rec.proposed)}"
        expected_rate = expected_rate_text(rec)
        expected_stall = fmt.percent(rec.expected.stall_fraction)
        rows.append([f"{number}.", rec.setting, change, expected_rate, expected_stall])
        narrow.append(line((f"{number}. {rec.setting}:", change), ("expected", expected_rate),
                           ("stall", expected_stall)))
        reason = f"{rec.setting}: {rec.reason}"
        effect = effect_text(rec)
        if effect is not None:
            reason += f" Effect: {effect}."
        if rec.expected.note:
            reason += f" ({rec.expected.note})"
        reasons.append([f"{number}.", reason])
    return Section("recommendations", "Recommendations", (
        Note(recommendations_caption(report), "dim"),
        table(["#", "setting", "current -> proposed", "expected throughput", "expected stall"],
              rows, right=(3, 4), no_wrap=range(5), code=(1,), narrow=narrow),
        table([], reasons, no_wrap=(0,), grid=True),
    ))
