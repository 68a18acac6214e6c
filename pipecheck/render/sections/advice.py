"""The findings and the recommendations."""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING, Any, Optional

from pipecheck import units as fmt
from pipecheck.render.model import (Block, Item, Items, Note, Section, by_severity, capped,
                                    line, more, table)
from pipecheck.effects import change_effects
from pipecheck.kinds import FINDING_KINDS, FINDINGS_PAGE
from pipecheck.render.phrases import (effect_line, effect_text, expected_rate_text,
                                     first_sentence, interval_tag,
                                     recommendations_caption, why_no_recommendations)

if TYPE_CHECKING:
    from pipecheck.effects import ChangeEffect
    from pipecheck.records import Recommendation
    from pipecheck.report_data import ReportData

FINDING_ROWS = 50
"""Findings shown, most severe first (a run gives a handful; the JSON has them all)."""

EVIDENCE_KEYS = 50
"""Keys of one finding's evidence shown (HTML), in the evidence's order."""

RECOMMENDATION_ROWS = 20
"""Recommendations shown, in order (the rules give at most a handful)."""


def findings(report: "ReportData") -> Section:
    """The findings, most severe first (at most :data:`FINDING_ROWS`), with their kind and
    evidence (at most :data:`EVIDENCE_KEYS` keys each), and each one's short text for the
    short view (:func:`short_finding`)."""
    every = report.diagnosis.findings
    # nsmallest is sorted()[:n], stable, without sorting all of a runaway list.
    found = heapq.nsmallest(FINDING_ROWS, every, key=lambda f: by_severity(f.severity))
    hidden = len(every) - len(found)
    if not found:
        return Section("findings", "Findings", (Note("none", "dim"),))
    blocks: list[Block] = [Items(tuple(
        Item(f.severity, f.message, f.kind, _evidence(f.evidence), short_finding(f.message,
                                                                            f.kind))
        for f in found))]
    if hidden:
        blocks.append(more(hidden, "findings"))
    return Section("findings", "Findings", tuple(blocks))


def short_finding(message: str, kind: str) -> str:
    """A finding in a line or two: the message's first sentence
    (:func:`~pipecheck.render.phrases.first_sentence`) and, when the rest is left out and
    the kind is a documented one (:data:`pipecheck.kinds.FINDING_KINDS`), ``see
    docs/findings.md#<kind>``."""
    link = f" (see {FINDINGS_PAGE}#{kind})" if kind in FINDING_KINDS else ""
    short, cut = first_sentence(message, SHORT_FINDING_CHARS - len(link))
    if cut and link and FINDINGS_PAGE not in short:
        short += link
    return short


SHORT_FINDING_CHARS = 170
"""Longest short finding with its docs link, in characters: two lines beside the severity
column of a 100-column terminal."""


def _evidence(evidence: dict[str, Any]) -> Optional[dict[str, Any]]:
    if not evidence:
        return None
    kept = dict(itertools.islice(evidence.items(), EVIDENCE_KEYS))
    if len(evidence) > EVIDENCE_KEYS:
        kept["not shown"] = f"{len(evidence) - EVIDENCE_KEYS:,} more keys (see the JSON)"
    return kept


def recommendations(report: "ReportData") -> Section:
    """A compact table of the changes (stacked lines on a narrow terminal), then each one's
    reason as a numbered paragraph (reasons are long; a table column would squeeze them); at
    most :data:`RECOMMENDATION_ROWS`."""
    if not report.recommendations:
        return Section("recommendations", "Recommendations",
                       (Note(why_no_recommendations(report)),))
    shown, hidden = capped(report.recommendations, RECOMMENDATION_ROWS)
    rows, narrow, reasons = [], [], []
    for number, (rec, effect) in enumerate(zip(shown, effects_of(report, shown)), start=1):
        change = f"{fmt.setting_value(rec.current)} -> {fmt.setting_value(rec.proposed)}"
        expected_rate = expected_rate_text(rec)
        expected_stall = fmt.percent(rec.expected.stall_fraction)
        rows.append([f"{number}.", rec.setting, change, expected_rate, expected_stall])
        narrow.append(line((f"{number}. {rec.setting}:", change), ("expected", expected_rate),
                           ("stall", expected_stall)))
        reason = f"{rec.setting}: {rec.reason}"
        if rec.expected.samples_per_s is not None:
            reason += f" Effect: {effect_text(rec, effect)}."
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


def effects_of(report: "ReportData", shown: "list[Recommendation]") -> "list[ChangeEffect]":
    """Each shown recommendation's effect on its own and with the changes above it
    (:func:`pipecheck.effects.change_effects`, from the report's own figures)."""
    consumer = report.consumer
    return change_effects(shown, consumer.samples_per_s, consumer.batches_per_s,
                          report.loader.batches_per_epoch, together=report.kind == "stress")


def brief_recommendations(report: "ReportData") -> Section:
    """The changes that matter for the short view: per change one line of what to change and
    its effect (:func:`~pipecheck.render.phrases.effect_line`), then its reason's first
    sentence; the caption says how the figures add up. At most
    :data:`BRIEF_RECOMMENDATIONS` changes; the rest are counted."""
    title = "Changes that matter"
    if not report.recommendations:
        return Section("recommendations", title, (Note(why_no_recommendations(report)),))
    shown, hidden = capped(report.recommendations, BRIEF_RECOMMENDATIONS)
    blocks: list[Block] = []
    if len(shown) > 1 or report.kind == "stress":  # how the figures add up, or were measured
        blocks.append(Note(recommendations_caption(report).split(" In brackets")[0], "dim"))
    rows = []
    for number, (rec, effect) in enumerate(zip(shown, effects_of(report, shown)), start=1):
        change = (f"{rec.setting} {fmt.setting_value(rec.current)} -> "
                  f"{fmt.setting_value(rec.proposed)}")
        rows.append([f"{number}.", f"{change}: {effect_line(rec, effect)}{interval_tag(rec)}"])
        rows.append(["", first_sentence(rec.reason)[0]])
    blocks.append(table([], rows, no_wrap=(0,), grid=True))
    if hidden:
        blocks.append(Note(f"... and {hidden:,} more changes (--verbose)", "dim"))
    return Section("recommendations", title, tuple(blocks))


BRIEF_RECOMMENDATIONS = 3
"""Changes the short view lists (the rules give one or two that matter); ``--verbose``, the
markdown, the HTML page and the JSON list every one."""
