"""Builds the render model (:class:`~pipecheck.render.model.Document`) of a ReportData, once, for
every format.

:data:`SECTIONS` is the section-builder registry: ``(key, builder)`` in display order; a builder
takes the :class:`~pipecheck.report_data.ReportData` and returns a
:class:`~pipecheck.render.model.Section`, or ``None`` when the report has nothing for it
(optional probes, stress, sharding, ranks). A new report section is one builder module here,
one entry in :data:`SECTIONS` and, when it shows a ReportData field of its own, that field's name
in :data:`RENDERED_FIELDS` (else HTML would also dump the field generically); every renderer
then shows it: the terminal and markdown its facts, notes, tables and findings, HTML those and
its charts (a :class:`~pipecheck.render.model.Chart` names an entry of
:data:`pipecheck.render.charts.CHARTS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from pipecheck import units as fmt
from pipecheck.render.inert import fields
from pipecheck.kinds import COMPUTE_BOUND, INPUT_BOUND, NO_DATA
from pipecheck.render.model import Document, Fact, Note, Section
from pipecheck.render.phrases import (capacity_phrase, comparison_line, context_line,
                                      ended_line, verdict_line)
from pipecheck.render.sections import (advice, attach, comparison, probes, ranks, run, sharding,
                                      stress, summary, tune)
from pipecheck.render.sections.comparison import comparison_section

if TYPE_CHECKING:
    from pipecheck.report_data import ReportData

SectionBuilder = Callable[["ReportData"], Optional[Section]]

SECTIONS: tuple[tuple[str, SectionBuilder], ...] = (
    ("ranks", ranks.ranks),  # a multi-rank run: every rank first, then one rank's detail
    ("attach", attach.attach),  # pipecheck attach: stands in for the three below
    ("throughput", run.throughput),
    ("stall", run.stall),
    ("comparison", comparison.comparison),  # this run against an earlier report of it
    ("producer", run.producer),
    ("host", run.host),
    ("stages", probes.stages),
    ("sharding", sharding.sharding),
    ("stacks", probes.stacks),
    ("device", probes.device),
    ("findings", advice.findings),
    ("recommendations", advice.recommendations),
    ("tune", tune.tune),  # wrap(tune=True): what was tried in the run and kept
    ("stress", stress.stress),
)
"""The section builders in display order."""

NEED_BATCH_TIMING = frozenset({"throughput", "stall", "producer"})
"""Sections an attach report (no batch timing: :mod:`pipecheck.attach`) leaves out; its
``attach`` section gives what stack samples can tell instead."""

RENDERED_FIELDS = frozenset({
    "kind", "created", "environment", "loader", "consumer", "producer", "host", "diagnosis",
    "recommendations", "timeline", "stress", "schema", "rank", "ranks", "sharding", "stacks",
    "device", "attach", "comparison", "tune",
})
"""ReportData fields the document shows; HTML renders any other non-empty field generically."""


def build_document(report: "ReportData", every_rank: bool = False) -> Document:
    """The report's document: verdict, context, caveats, key numbers and every section, and
    the short view's sections (:mod:`pipecheck.render.sections.summary`; for a multi-rank
    report the job summary, :func:`pipecheck.render.sections.summary.job_sections`); every
    string in it one inert line (:func:`pipecheck.render.inert.fields`: control characters and
    line breaks as escapes, at most :data:`~pipecheck.render.inert.MAX_FIELD_CHARS`
    characters), whatever the report's strings hold. Each builder caps the lists it shows
    and says how many it left out, so the cost does not grow with the report's lists beyond
    one pass over them. ``every_rank``: the every-rank table of a multi-rank report is in the
    full view of every format (the terminal's ``--verbose``), not only in HTML's."""
    notes = []
    ended = ended_line(report) if report.attach is None else None
    if ended is not None:
        notes.append(Note(ended, "alert"))
    if report.comparison is not None:  # the one-line verdict against the earlier report
        notes.append(Note(comparison_line(report.comparison),
                          "alert" if report.comparison.verdict == "fell" else "bold"))
    skipped = NEED_BATCH_TIMING if report.attach is not None else frozenset()
    sections = tuple(section for key, build in SECTIONS
                     if key not in skipped and (section := (
                         ranks.ranks(report, every_rank) if key == "ranks" else build(report)))
                     is not None)
    version = report.environment.pipecheck or "unknown version"
    return fields(Document(
        verdict=verdict_line(report), verdict_kind=report.diagnosis.verdict,
        context=context_line(report), notes=tuple(notes), headline=headline(report),
        sections=sections,
        footer=f"pipecheck {version} · schema {report.schema}",
        summary=summary.summary_sections(report, sections),
        brief_context=context_line(report, brief=True),
    ))


def build_comparison_document(report: "ReportData", path: str) -> Document:
    """The document ``pipecheck report --compare OLD NEW`` shows for ``report`` (NEW, read
    from ``path``, with its ``comparison`` against OLD): the comparison's verdict line first,
    the two files and times as the context, the caveats, then the comparison section alone.
    Every string one inert line, as in :func:`build_document`. Raises ``ValueError`` when the
    report has no comparison."""
    found = report.comparison
    if found is None:
        raise ValueError("the report has no comparison")
    verdict_kind = {"fell": INPUT_BOUND, "rose": COMPUTE_BOUND}.get(found.verdict or "", NO_DATA)
    version = report.environment.pipecheck or "unknown version"
    context = (f"earlier {found.old_path} ({found.old_created or 'time unknown'}) · "
               f"this run {path} ({report.created})")
    return fields(Document(
        verdict=comparison_line(found), verdict_kind=verdict_kind, context=context, notes=(),
        headline=(), sections=(comparison_section(found, verdict=False),),
        footer=f"pipecheck {version} · schema {report.schema}"))


def headline(report: "ReportData") -> tuple[Fact, ...]:
    """The key numbers: throughput, data goodput, stall, wait and step per batch, demand,
    capacity and their ratio, the first batch, what was measured, the bottleneck."""
    consumer, producer = report.consumer, report.producer
    if report.attach is not None:  # no batch timing: the attach section has the estimates
        return ()
    judgement = report.diagnosis.judgement
    numbers = [
        ("throughput", f"{fmt.rate(consumer.samples_per_s, 'samples')} · "
                       f"{fmt.rate(consumer.batches_per_s, 'batches')}"),
        ("data stall", f"{fmt.percent(consumer.stall_fraction)} (steady state "
                       f"{fmt.percent(consumer.steady_stall_fraction)})"),
        ("waited / computed", f"{fmt.seconds(consumer.wait_s)} / "
                              f"{fmt.seconds(consumer.compute_s)}"),
        ("wait per batch", fmt.duration_quantiles(consumer.wait_time_s)),
        ("step per batch", fmt.duration_quantiles(consumer.compute_time_s)),
        ("consumer demand", fmt.rate(consumer.demand_batches_per_s, "batches")),
        ("producer capacity", fmt.rate(producer.capacity_batches_per_s, "batches")),
        ("capacity / demand", capacity_phrase(report) or fmt.NOT_MEASURED),
        ("first batch after", fmt.seconds(consumer.first_batch_s)),
        ("measured", f"{fmt.count(consumer.batches, 'batch', 'batches')} · "
                     f"{fmt.count(consumer.samples, 'sample')} · "
                     f"{fmt.count(consumer.epochs, 'epoch')} · "
                     f"wall {fmt.seconds(consumer.wall_s)}"),
    ]
    if consumer.tokens_per_s is not None:
        numbers.insert(1, ("tokens", fmt.rate(consumer.tokens_per_s, "tokens")))
    if judgement is not None and judgement.goodput_fraction is not None:
        numbers.insert(1, ("data goodput", fmt.percent(judgement.goodput_fraction)))
    if report.diagnosis.bottleneck:
        numbers.append(("bottleneck", report.diagnosis.bottleneck))
    return tuple(Fact(label, value) for label, value in numbers)
