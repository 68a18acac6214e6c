"""The findings and the recommendations."""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING, Any, Optional

from pipecheck import units as fmt
from pipecheck.render.model import (Block, Item, Items, Note, Section, by_severity, capped,
                                    line, more, table)
from pipecheck.render.phrases import (effect_text, expected_rate_text, recommendations_caption,
                                     why_no_recommendations)

if TYPE_CHECKING:
    from pipecheck.report import Report

FINDING_ROWS = 50
"""Findings shown, most severe first (a run gives a handful; the JSON has them all)."""

EVIDENCE_KEYS = 50
"""Keys of one finding's evidence shown (HTML), in the evidence's order."""

RECOMMENDATION_ROWS = 20
"""Recommendations shown, in order (the rules give at most a handful)."""


def findings(report: "Report") -> Section:
    """The findings, most severe first (at most :data:`FINDING_ROWS`), with their kind and
    evidence (at most :data:`EVIDENCE_KEYS` keys each)."""
    every = report.diagnosis.findings
    # nsmallest is sorted()[:n], stable, without sorting all of a runaway list.
    found = heapq.nsmallest(FINDING_ROWS, every, key=lambda f: by_severity(f.severity))
    hidden = len(every) - len(found)
    if not found:
        return Section("findings", "Findings", (Note("none", "dim"),))
    blocks: list[Block] = [Items(tuple(
        Item(f.severity, f.message, f.kind, _evidence(f.evidence)) for f in found))]
    if hidden:
        blocks.append(more(hidden, "findings"))
    return Section("findings", "Findings", tuple(blocks))


def _evidence(evidence: dict[str, Any]) -> Optional[dict[str, Any]]:
    if not evidence:
        return None
    kept = dict(itertools.islice(evidence.items(), EVIDENCE_KEYS))
    if len(evidence) > EVIDENCE_KEYS:
        kept["not shown"] = f"{len(evidence) - EVIDENCE_KEYS:,} more keys (see the JSON)"
    return kept


def recommendations(report: "Report") -> Section:
    """A compact table of the changes (stacked lines on a narrow terminal), then each one's
    reason as a numbered paragraph (reasons are long; a table column would squeeze them); at
    most :data:`RECOMMENDATION_ROWS`."""
    if not report.recommendations:
        return Section("recommendations", "Recommendations",
                       (Note(why_no_recommendations(report)),))
    shown, hidden = capped(report.recommendations, RECOMMENDATION_ROWS)
    rows, narrow, reasons = [], [], []
    for number, rec in enumerate(shown, start=1):
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
        *([more(hidden, "recommendations")] if hidden else []),
    ))
