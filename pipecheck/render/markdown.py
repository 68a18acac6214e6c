"""The report as GitHub-flavoured markdown, for CI logs and pull-request comments.

:func:`render_markdown` returns: the verdict (bold), the run context, a table of key numbers,
the findings, the recommendations with their expected effect, and the stress sweep's trials
when the report has one. Every number carries its unit (:mod:`pipecheck.units`).

Strings from the run (type names, messages, config values) are made inert: ``&`` and ``<``
become HTML entities (GitHub renders raw HTML tags in markdown, so a repr such as
``<MyDataset object>`` would otherwise vanish, and a ``<script>`` would be markup), and ``|``
inside table cells is escaped as ``\\|``. Control characters (terminal escapes) in the finished
text are written as visible escapes (:func:`pipecheck.render.inert.visible`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

from pipecheck import units as fmt
from pipecheck.render import stress_rows
from pipecheck.render.attach import WORKER_HEADERS, attach_facts, unknown_lines, worker_rows
from pipecheck.render.inert import visible
from pipecheck.render.terminal import (_why_no_recommendations, capacity_phrase, effect_text,
                                       recommendations_caption, verdict_line)

if TYPE_CHECKING:
    from pipecheck.report import Report


def render_markdown(report: "Report", title: Optional[str] = None) -> str:
    """The report as markdown text ending in a newline. ``title`` (e.g. the report's file name)
    becomes a level-2 heading above it. Raises nothing for any report that
    :meth:`pipecheck.Report.from_dict` accepts."""
    consumer, producer = report.consumer, report.producer
    lines: list[str] = []
    if title is not None:
        lines += [f"## {_text(title)}", ""]
    lines += [f"**{_text(verdict_line(report))}**", ""]
    lines += [f"<sub>{_text(_context(report))}</sub>", ""]
    if report.attach is not None:  # no batch timing: the attach section replaces the table
        lines += _attach(report.attach)
    elif consumer.status != "complete":
        detail = f": {consumer.error}" if consumer.error else ""
        lines += [f"> The run did not complete (status {_text(consumer.status)}"
                  f"{_text(detail)}); the numbers cover what ran.", ""]
    demand, capacity = consumer.demand_batches_per_s, producer.capacity_batches_per_s
    ratio = capacity_phrase(report) or fmt.NOT_MEASURED
    numbers = [] if report.attach is not None else [
        ("throughput", f"{fmt.rate(consumer.samples_per_s, 'samples')} · "
                       f"{fmt.rate(consumer.batches_per_s, 'batches')}"),
        ("data stall", f"{fmt.percent(consumer.stall_fraction)} (steady state "
                       f"{fmt.percent(consumer.steady_stall_fraction)})"),
        ("waited / computed", f"{fmt.seconds(consumer.wait_s)} / "
                              f"{fmt.seconds(consumer.compute_s)}"),
        ("wait per batch", fmt.duration_quantiles(consumer.wait_time_s)),
        ("step per batch", fmt.duration_quantiles(consumer.compute_time_s)),
        ("consumer demand", fmt.rate(demand, "batches")),
        ("producer capacity", fmt.rate(capacity, "batches")),
        ("capacity / demand", ratio),
        ("first batch after", fmt.seconds(consumer.first_batch_s)),
        ("measured", f"{fmt.count(consumer.batches, 'batch', 'batches')} · "
                     f"{fmt.count(consumer.samples, 'sample')} · "
                     f"{fmt.count(consumer.epochs, 'epoch')} · "
                     f"wall {fmt.seconds(consumer.wall_s)}"),
    ]
    if consumer.tokens_per_s is not None:
        numbers.insert(1, ("tokens", fmt.rate(consumer.tokens_per_s, "tokens")))
    if numbers:
        lines += _table(["metric", "value"], [list(row) for row in numbers], right=[1])
    judgement = report.diagnosis.judgement
    if judgement is not None and judgement.capacity_note:
        lines += ["", f"> {_text(judgement.capacity_note)}"]
    if report.ranks is not None:  # a multi-rank run: every rank, the straggler marked
        from pipecheck.render.ranks import rank_table

        headers, right, rows = rank_table(report.ranks)
        lines += ["", "### Ranks", ""]
        lines += _table(headers, rows, right=right)
        if report.rank is not None:
            lines += ["", f"The metrics table above is rank {report.rank.rank}'s own."]
    lines += ["", "### Findings", ""]
    if report.diagnosis.findings:
        order = {"critical": 0, "warning": 1, "info": 2}
        for finding in sorted(report.diagnosis.findings,
                              key=lambda f: order.get(f.severity, 3)):
            lines.append(f"- **{_text(finding.severity)}**: {_text(finding.message)}")
    else:
        lines.append("None.")
    lines += ["", "### Recommendations", ""]
    lines += _recommendations(report)
    if report.stress:
        lines += ["", "### Stress sweep", ""]
        lines += _stress(report.stress)
    return visible("\n".join(lines).rstrip("\n") + "\n")


def _attach(section: dict[str, Any]) -> list[str]:
    """``pipecheck attach``: the stall estimate and its interval, the workers seen, and what
    cannot be known without wrapping (:mod:`pipecheck.render.attach`)."""
    lines = ["### Attached (py-spy + psutil, not wrapped)", ""]
    lines += _table(["metric", "value"], [[label, value] for label, value in
                                          attach_facts(section)])
    rows = worker_rows(section)
    if rows:
        lines += [""] + _table(WORKER_HEADERS, rows, right=[1, 2, 3, 5, 6])
    lines += ["", "Cannot be known without wrapping:", ""]
    lines += [f"- {_text(item)}" for item in unknown_lines(section)]
    return lines + [""]


def _recommendations(report: "Report") -> list[str]:
    if not report.recommendations:
        return [_text(_why_no_recommendations(report))]
    rows = []
    for number, rec in enumerate(report.recommendations, start=1):
        note = f" ({rec.expected.note})" if rec.expected.note else ""
        rows.append([f"{number}.", f"`{rec.setting}`",
                     f"{fmt.setting_value(rec.current)} -> {fmt.setting_value(rec.proposed)}",
                     fmt.rate(rec.expected.samples_per_s, "samples"),
                     fmt.percent(rec.expected.stall_fraction),
                     effect_text(rec) or fmt.NOT_MEASURED, f"{rec.reason}{note}"])
    return [_text(recommendations_caption(report)), "",
            *_table(["#", "setting", "current -> proposed", "expected throughput",
                     "expected stall", "effect", "why"], rows, right=[3, 4], raw=[1])]


def _stress(stress: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    headers, rows = stress_rows.trial_table(stress)
    if rows:
        numeric = ("samples/s", "predicted before measuring", "batches/s", "stall")
        lines += _table(headers, rows, right=[i for i, h in enumerate(headers) if h in numeric])
    for label, text in stress_rows.summary_facts(stress):
        lines += ["", f"**{_text(label)}** {_text(text)}"]
    return lines or ["No trials recorded."]


# -- helpers -------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    """Inert text: ``&`` and ``<`` as entities, so no tag or entity can start (``>`` alone
    starts nothing inside a line and stays readable in logs: ``2 -> 4``); line breaks become
    spaces, so a value cannot start a markdown line of its own (a forged heading or verdict)."""
    return " ".join(str(value).replace("&", "&amp;").replace("<", "&lt;").splitlines())


def _cell(value: Any) -> str:
    return " ".join(_text(value).replace("|", "\\|").split())


def _table(headers: list[str], rows: list[list[str]], right: Sequence[int] = (),
           raw: Sequence[int] = ()) -> list[str]:
    """Markdown table lines; ``right`` columns are right-aligned, ``raw`` columns are markdown
    the caller built (only their ``|`` is escaped)."""
    aligns = ["---:" if i in right else "---" for i in range(len(headers))]
    out = ["| " + " | ".join(_cell(h) for h in headers) + " |", "| " + " | ".join(aligns) + " |"]
    for row in rows:
        cells = [c.replace("|", "\\|") if i in raw else _cell(c) for i, c in enumerate(row)]
        out.append("| " + " | ".join(cells) + " |")
    return out



def _context(report: "Report") -> str:
    env, loader = report.environment, report.loader
    names = ("num_workers", "prefetch_factor", "batch_size", "pin_memory", "persistent_workers")
    settings = " ".join(f"{n}={fmt.setting_value(getattr(loader, n))}" for n in names
                        if getattr(loader, n) is not None)
    cuda = "CUDA" if env.cuda else "no CUDA"
    torch = f"torch {env.torch}" if env.torch else (
        "torch unknown" if report.kind == "attach" else "no torch")
    return (f"{report.kind} report, {report.created} · {loader.type} {settings} · "
            f"{env.cpu_count} CPUs ({env.usable_cpus} usable), {cuda} · Python {env.python}, "
            f"{torch}")
