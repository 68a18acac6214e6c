"""The short view of a report, one screen: after the verdict line, the changes that matter
(one line of change and effect each, then the reason's first sentence), what online tuning kept,
the key figures (a few lines), and the findings in a line or two each. Everything else is in the full view (the
terminal's ``--verbose``, markdown, the HTML page's collapsed sections, the JSON).

Built from the full view's own sections where it can (the findings' short texts, the attach and
ranks figures), so the two views never disagree."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, AbstractSet, Optional

from pipecheck import units as fmt
from pipecheck.kinds import FindingKind
from pipecheck.render.model import (Block, Chart, Facts, Item, Items, Note, Section, Table, capped,
                                    line, table)
from pipecheck.render.phrases import capacity_phrase, config_text
from pipecheck.render.sections.attach import (WORKER_HEADERS, attach_facts, unknown_lines,
                                              worker_rows)
from pipecheck.render.sections.advice import brief_recommendations
from pipecheck.render.sections.ranks import job_blocks, straggler_section
from pipecheck.render.sections.stress import summary_facts

if TYPE_CHECKING:
    from pipecheck.report_data import ReportData

BRIEF_FAILED = 3
"""Failed stress trials the short view names with their error (the rest counted)."""

BRIEF_FINDINGS = 6
"""Findings the short view lists, most severe first; the rest are counted."""

STRESS_FACTS = ("training step:", "model-guided search:", "recommended:",
                "expected gain over the baseline:", "epoch start:")
"""Labels of the stress sweep's facts (:func:`pipecheck.render.sections.stress.summary_facts`)
the short view keeps."""

MORE_HINT = ("--verbose (or --markdown, --html FILE) shows every section: per-batch figures, "
             "workers, host, stages, shards, the full reasons and findings")
"""The short view's last line: where the rest is."""


def summary_sections(report: "ReportData", sections: tuple[Section, ...]) -> tuple[Section, ...]:
    """The short view's sections of ``report``, given the full view's ``sections`` (built
    once by :func:`pipecheck.render.sections.build_document`)."""
    if report.ranks is not None and len(report.ranks.ranks) > 1:
        return job_sections(report)
    by_key = {section.key: section for section in sections}
    out: list[Section] = [brief_recommendations(report)]
    if "ranks" in by_key:  # every rank side by side, before one rank's own figures
        out.append(_first_blocks(by_key["ranks"], 8))
    if report.attach is not None and "attach" in by_key:  # stands in for the run's figures
        out.append(brief_attach(report, by_key["attach"].title))
    if "tune" in by_key:  # what online tuning kept: status, settings, gain, the pin line
        out.append(Section("tune", by_key["tune"].title, tuple(
            b for b in by_key["tune"].blocks
            if isinstance(b, Facts) or (isinstance(b, Note) and b.tone in ("bold", "alert")))))
    if "comparison" in by_key:  # its verdict line is among the notes; its caveats here
        caveats = tuple(b for b in by_key["comparison"].blocks
                        if isinstance(b, Note) and b.tone == "warning")
        if caveats:
            out.append(Section("comparison", by_key["comparison"].title, caveats))
    figures = key_figures(report)
    if figures is not None:
        out.append(figures)
    if "findings" in by_key:
        # An attach report's insufficient-data finding repeats what its section lists once.
        skip = {FindingKind.INSUFFICIENT_DATA} if report.attach is not None else set()
        out.append(brief_findings(by_key["findings"], skip))
    return tuple(out)


def job_sections(report: "ReportData") -> tuple[Section, ...]:
    """The short view of a multi-rank report (merged rank files, or rank 0's gathered one):
    the job's shape (:func:`pipecheck.render.sections.ranks.job_blocks`: data wait per step
    over ranks and nodes, the slowest ranks and nodes, whether the straggler is a rank, a node
    or the job, ranks missing or failed) and the straggler's diagnosis and first
    recommendation (:func:`~pipecheck.render.sections.ranks.straggler_section`). Its length
    does not grow with the ranks (about 50 lines at 100 columns; ``benchmarks/many_ranks.py``
    counts them at 1,024 and 8,192 ranks)."""
    assert report.ranks is not None
    out = [Section("ranks", "Ranks", tuple(job_blocks(report.ranks)))]
    straggler = straggler_section(report)
    if straggler is not None:
        out.append(straggler)
    return tuple(out)


BRIEF_ROWS = 8
"""Rows of a table (ranks, attached workers) the short view shows; ``--verbose`` shows up to
the full view's caps."""


def _first_blocks(section: Section, count: int) -> Section:
    """``section`` with its first ``count`` blocks that are not detail or charts, each table
    cut to :data:`BRIEF_ROWS` rows (saying so)."""
    shown: list[Block] = []
    for block in [b for b in section.blocks if not b.detail and not isinstance(b, Chart)][:count]:
        if isinstance(block, Table) and len(block.rows) > BRIEF_ROWS:
            shown.append(dataclasses.replace(block, rows=block.rows[:BRIEF_ROWS],
                                             narrow=block.narrow[:BRIEF_ROWS]))
            shown.append(Note(f"... {len(block.rows) - BRIEF_ROWS:,} more rows here "
                              "(--verbose)", "dim"))
        else:
            shown.append(block)
    return Section(section.key, section.title, tuple(shown))


def key_figures(report: "ReportData") -> Optional[Section]:
    """Throughput (samples/s, tokens/s where the run counted tokens, batches/s), the data wait,
    demand against capacity, the producer's class and the host's CPU in a few lines; a stress report
    adds its sweep's choice. ``None`` for an attach report (its own section has the figures)."""
    if report.attach is not None:
        return None
    consumer, producer = report.consumer, report.producer
    blocks: list[Block] = []
    headline = report.stress.headline if report.stress is not None else None
    if headline is not None and headline.steady_samples_per_s is not None:
        blocks.append(line(("steady", f"{fmt.rate(headline.steady_samples_per_s, 'samples')} "
                                      "(the sweep's recommended trial)")))
    blocks.append(line(
        ("whole run" if blocks else "throughput",
         " · ".join([fmt.rate(consumer.samples_per_s, 'samples'),
                     *([fmt.rate(consumer.tokens_per_s, 'tokens')]
                       if consumer.tokens_per_s is not None else []),
                     fmt.rate(consumer.batches_per_s, 'batches')])),
        ("", f"{fmt.count(consumer.batches, 'batch', 'batches')} in "
             f"{fmt.seconds(consumer.wall_s)}, {fmt.count(consumer.epochs, 'epoch')}")))
    wait = [("data stall", f"{fmt.percent(consumer.stall_fraction)} (steady state "
                           f"{fmt.percent(consumer.steady_stall_fraction)})")]
    if consumer.wait_time_s is not None:
        wait.append(("wait per batch", _mean_p99(consumer.wait_time_s)))
    if consumer.compute_time_s is not None:
        wait.append(("step", _mean_p99(consumer.compute_time_s)))
    blocks.append(line(*wait))
    blocks.append(line(
        ("demand", fmt.rate(consumer.demand_batches_per_s, "batches")),
        ("capacity", fmt.rate(producer.capacity_batches_per_s, "batches"))))
    phrase = capacity_phrase(report)
    if phrase is not None:
        blocks.append(line(("capacity / demand", phrase)))
    machine: list[tuple[str, str]] = []
    if producer.workers_class is not None:
        machine.append(("producer", producer.workers_class))
    host = report.host
    if host is not None and host.status == "ok":
        machine.append(("system CPU", f"{fmt.percent_value(host.system_cpu_percent_mean)} "
                                      "of all cores"))
    if report.diagnosis.bottleneck:
        machine.append(("bottleneck", report.diagnosis.bottleneck))
    if machine:
        blocks.append(line(*machine))
    if report.stress is not None:
        kept = [pair for pair in summary_facts(report.stress) if pair[0] in STRESS_FACTS]
        blocks += [line(pair) for pair in kept]
        failed = [t for t in report.stress.trials if t.error]
        blocks += [line(("failed:", f"{config_text(t.config)}: {t.error}"))
                   for t in failed[:BRIEF_FAILED]]
        if len(failed) > BRIEF_FAILED:
            blocks.append(Note(f"... and {len(failed) - BRIEF_FAILED:,} more failed trials "
                               "(--verbose)", "dim"))
    return Section("figures", "Key figures", tuple(blocks))


def brief_attach(report: "ReportData", title: str) -> Section:
    """An attach report's figures for the short view: the stall estimate and the window, the
    workers (at most :data:`BRIEF_ROWS` rows) and, once, in one line, what cannot be known
    without wrapping."""
    section = report.attach
    assert section is not None
    blocks: list[Block] = [line(pair) for pair in attach_facts(section)]
    rows = worker_rows(section, BRIEF_ROWS)
    if rows:
        blocks.append(table(WORKER_HEADERS, rows, right=(1, 2, 3, 5, 6)))
    if len(section.workers) > len(rows):
        blocks.append(Note(f"... and {len(section.workers) - len(rows):,} more workers "
                           "(--verbose)", "dim"))
    unknown, hidden = capped(unknown_lines(section), BRIEF_ROWS)
    if unknown:
        text = "cannot be known without wrapping: " + "; ".join(unknown)
        blocks.append(Note(text + (f"; and {hidden:,} more" if hidden else ""), "dim"))
    return Section("attach", title, tuple(blocks))


def _mean_p99(quantiles: object) -> str:
    mean, p99 = getattr(quantiles, "mean", None), getattr(quantiles, "p99", None)
    return f"mean {fmt.seconds(mean)}, p99 {fmt.seconds(p99)}"


def brief_findings(section: Section, skip: AbstractSet[str] = frozenset()) -> Section:
    """The findings section with each finding's short text (at most
    :data:`BRIEF_FINDINGS`, most severe first; the rest counted), leaving out the kinds in
    ``skip`` (said elsewhere in the short view)."""
    items = [item for block in section.blocks if isinstance(block, Items)
             for item in block.items if item.kind not in skip]
    if not items:  # "none", or only kinds said elsewhere
        return Section(section.key, section.title, (Note("none", "dim"),))
    shown = items[:BRIEF_FINDINGS]
    blocks: list[Block] = [Items(tuple(Item(i.severity, i.short or i.text, i.kind)
                                       for i in shown))]
    if len(items) > len(shown):
        blocks.append(Note(f"... and {len(items) - len(shown):,} more findings (--verbose)",
                           "dim"))
    return Section(section.key, section.title, tuple(blocks))
