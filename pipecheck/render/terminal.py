"""The terminal summary of a Report, built with rich: verdict first, then the numbers behind it.

Sections, in order: verdict line, run context, throughput, data wait (stall), producer vs
consumer, host, hot stacks and GPU (only when the report has them), findings, recommendations,
and the stress sweep when the report has one. Every
number carries its unit (:mod:`pipecheck.units`); values that were not measured show as
``n/a``. :func:`renderables` returns the rich objects (``rich.print(report)`` uses them);
:func:`render_terminal` renders them to a string. Both show strings from the report literally:
control characters as escapes and rich markup as text (:mod:`pipecheck.render.inert`).
"""

from __future__ import annotations

import io
import os
import shutil
import sysconfig
from typing import TYPE_CHECKING, Any, Optional

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from pipecheck import units as fmt
from pipecheck.render.attach import WORKER_HEADERS, attach_facts, unknown_lines, worker_rows
from pipecheck.render.inert import Inert
from pipecheck.render.stress_rows import epoch_start_text, tie_note

if TYPE_CHECKING:
    from pipecheck.records import (ConsumerSummary, DeviceRecord, HostRecord, ProducerSummary,
                                   Recommendation, StacksRecord)
    from pipecheck.report import Report

DEFAULT_WIDTH = 100
"""Columns used when neither the caller nor the terminal gives a width."""

MIN_WIDTH = 20
"""Narrowest width accepted, in columns: below it even the stacked layout cannot hold a label
and its value on one line."""

_VERDICT_STYLES = {
    "input-bound": "bold red",
    "compute-bound": "bold green",
    "balanced": "bold yellow",
    "no-data": "bold",
}
_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
_SEVERITY_STYLES = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
_DIM = "dim"


def render_terminal(report: "Report", width: Optional[int] = None, color: bool = False) -> str:
    """The report's terminal summary as a string, ``width`` columns wide.

    ``width=None`` uses the terminal's width (``shutil.get_terminal_size``), or
    :data:`DEFAULT_WIDTH` when there is none. ``color=True`` adds ANSI colour codes.
    Raises ``ValueError`` if ``width`` is below :data:`MIN_WIDTH`.
    """
    if width is None:
        width = max(MIN_WIDTH, shutil.get_terminal_size(fallback=(DEFAULT_WIDTH, 24)).columns)
    if width < MIN_WIDTH:
        raise ValueError(f"width must be at least {MIN_WIDTH} columns, got {width}")
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        force_terminal=color,
        color_system="standard" if color else None,
        highlight=False,
        markup=False,
        emoji=False,
        legacy_windows=False,
    )
    console.print(Inert(renderables(report)))
    text = buffer.getvalue()
    if color:
        return text
    # rich pads table cells to the column width; plain text is easier to diff and grep without.
    return "\n".join(line.rstrip() for line in text.split("\n"))


def renderables(report: "Report") -> list[RenderableType]:
    """The summary as one rich renderable in a list: :class:`~pipecheck.render.inert.Inert`
    over the lines and sections (verdict line first), so any console shows the report's strings
    literally."""
    return [Inert(_parts(report))]


def _parts(report: "Report") -> list[RenderableType]:
    """The summary's lines and sections, verdict line first."""
    parts: list[RenderableType] = [
        Text(verdict_line(report), style=_VERDICT_STYLES.get(report.diagnosis.verdict, "bold")),
        Text(_context_line(report), style=_DIM),
    ]
    ended = _ended_line(report.consumer) if report.kind != "attach" else None
    if ended is not None:
        parts.append(Text(ended, style="bold yellow"))
    sections = []
    if report.ranks is not None:  # a multi-rank run: every rank first, then one rank's detail
        from pipecheck.render.ranks import ranks_lines

        sections.append(("Ranks", ranks_lines(report.ranks, report.rank)))
    if report.attach is not None:  # no batch timing: the attach section replaces those
        sections.append(("Attached (py-spy + psutil, not wrapped)", _attach(report.attach)))
    else:
        sections += [
            ("Throughput", _throughput(report.consumer)),
            ("Data wait (stall)", _stall(report.consumer)),
            ("Producer vs consumer", _producer_vs_consumer(report)),
        ]
    sections.append(("Host", _host(report)))
    # Optional probes: a section only when the run has one.
    if report.producer.stages:
        sections.append(("Pipeline stages", _stages(report.producer.stages)))
    if report.sharding:
        from pipecheck.render.sharding import sharding_renderables

        sections.append(("Shard assignment", sharding_renderables(report.sharding)))
    if report.stacks is not None:
        sections.append(("Hot stacks (py-spy)", _stacks(report.stacks)))
    if report.device is not None:
        sections.append(("GPU (CUDA events)", _device(report.device)))
    sections += [
        ("Findings", _findings(report)),
        ("Recommendations", _recommendations(report)),
    ]
    if report.stress:
        sections.append(("Stress sweep", _stress(report.stress)))
    for title, body in sections:
        parts.append(Text(""))
        parts.append(Text(title, style="bold underline"))
        parts.append(Padding(Group(*body), (0, 0, 0, 2), expand=False))
    return parts


STAGE_ROWS = 6
"""Pipeline stages listed in the terminal, most exclusive time first (the JSON has them all)."""


def _stages(rows: list[dict[str, Any]]) -> list[RenderableType]:
    """Exclusive time per stage: where it ran, seconds, share of that place's stage time, items
    in and out (a filter shows as fewer out than in)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for header in ("stage", "runs in", "exclusive", "share", "in", "out"):
        table.add_column(header, justify="left" if header in ("stage", "runs in") else "right")
    for row in rows[:STAGE_ROWS]:
        items_in = row.get("samples_in")
        table.add_row(str(row.get("name")), str(row.get("where")),
                      fmt.seconds(row.get("exclusive_s")), fmt.percent(row.get("fraction")),
                      "-" if items_in is None else f"{items_in:,}",
                      f"{row.get('samples_out') or 0:,}")
    out: list[RenderableType] = [table]
    if len(rows) > STAGE_ROWS:
        out.append(Text(f"{len(rows) - STAGE_ROWS} more stages in the JSON report", style=_DIM))
    return out


def verdict_line(report: "Report") -> str:
    """One sentence: the verdict in capitals, the stall behind it and the threshold it was judged
    against, e.g. ``INPUT-BOUND: the training loop waited for data 41.2% of the time
    (threshold 10%)``. Thresholds come from ``report.diagnosis.thresholds``."""
    diagnosis = report.diagnosis
    verdict = diagnosis.verdict
    label = verdict.upper()
    if verdict == "no-data":
        return f"{label}: no batches were measured, so there is no verdict"
    stall, steady = _verdict_stall(report)
    scope = " in steady state" if steady else ""
    if verdict == "compute-bound":
        sentence = f"the training loop waited for data only {fmt.percent(stall)} of the time{scope}"
    else:
        sentence = f"the training loop waited for data {fmt.percent(stall)} of the time{scope}"
    judgement = diagnosis.judgement
    wait_s = judgement.wait_per_batch_s if judgement is not None else None
    if verdict == "compute-bound" and judgement is not None and wait_s is not None \
            and wait_s < judgement.min_wait_per_batch_s:
        # Compute-bound on the floor, not the stall: say so instead of "only 22%".
        sentence = (f"the training loop waited for data {fmt.percent(stall)} of the time{scope} "
                    f"but only {fmt.seconds(wait_s)} per batch, under the "
                    f"{fmt.seconds(judgement.min_wait_per_batch_s)} that can hold a step back")
        threshold = ""
    else:
        threshold = _threshold_phrase(verdict, diagnosis.thresholds)
    goodput = judgement.goodput_fraction if judgement is not None else (
        None if stall is None else 1.0 - stall)
    return f"{label}: {sentence}{threshold}; data goodput {fmt.percent(goodput)}"


def capacity_phrase(report: "Report") -> Optional[str]:
    """The capacity / demand figure with the report's one conclusion about it, e.g.
    ``1.56x estimated, but the loader does not keep up with the step (measured stall)``;
    ``None`` when capacity or demand was not measured. The conclusion comes from
    ``diagnosis.judgement`` (it follows the measured stall, like the verdict); reports written
    before it existed fall back to the ratio alone."""
    diagnosis = report.diagnosis
    judgement = diagnosis.judgement
    demand = report.consumer.demand_batches_per_s
    capacity = report.producer.capacity_batches_per_s
    ratio = judgement.capacity_demand_ratio if judgement is not None else (
        capacity / demand if demand and capacity is not None else None)
    if ratio is None:
        return None
    if judgement is None or judgement.loader_keeps_up is None:
        side = "cannot keep up with" if ratio < 1 else "can keep up with"
        return f"{ratio:.2f}x (the loader {side} the step)"
    if diagnosis.verdict == "balanced":
        conclusion = "the loader nearly keeps up with the step"
    elif judgement.loader_keeps_up:
        conclusion = "the loader keeps up with the step"
    else:
        conclusion = "the loader does not keep up with the step"
    if judgement.capacity_note:
        return f"{ratio:.2f}x estimated, but {conclusion} by the measured stall, which wins"
    return f"{ratio:.2f}x ({conclusion})"


def effect_text(rec: "Recommendation") -> Optional[str]:
    """A recommendation's effect in the units users plan with: the gain in samples/s (and
    tokens/s when counted) and the wall time saved per 10,000 steps and per epoch (when the
    loader's ``len()`` is known); ``None`` when it has no such figures (e.g. ``pin_memory``)."""
    expected = rec.expected
    parts = []
    if expected.gain_samples_per_s is not None:
        gain = f"{'+' if expected.gain_samples_per_s >= 0 else ''}" \
               f"{fmt.rate(expected.gain_samples_per_s, 'samples')}"
        if expected.gain_tokens_per_s is not None:
            gain += (f" ({'+' if expected.gain_tokens_per_s >= 0 else ''}"
                     f"{fmt.rate(expected.gain_tokens_per_s, 'tokens')})")
        parts.append(gain)
    saved = []
    if expected.saved_s_per_10k_steps is not None:
        saved.append(f"{fmt.seconds(expected.saved_s_per_10k_steps)} per 10,000 steps")
    if expected.saved_s_per_epoch is not None:
        saved.append(f"{fmt.seconds(expected.saved_s_per_epoch)} per epoch")
    if saved:
        parts.append("saves " + ", ".join(saved))
    return "; ".join(parts) if parts else None


# -- verdict helpers -----------------------------------------------------------------------------


def _verdict_stall(report: "Report") -> tuple[Optional[float], bool]:
    """The stall fraction the verdict was judged on: the verdict finding's evidence when it names
    one (so the line agrees with the verdict), else the steady-state stall (the verdict's basis,
    see README), else the whole-run stall. Second item: whether it is the steady-state stall."""
    for finding in report.diagnosis.findings:
        if finding.kind != report.diagnosis.verdict:
            continue
        for key, steady in (("steady_stall_fraction", True), ("stall_fraction", False)):
            value = finding.evidence.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value), steady
    if report.consumer.steady_stall_fraction is not None:
        return report.consumer.steady_stall_fraction, True
    return report.consumer.stall_fraction, False


def _threshold_phrase(verdict: str, thresholds: dict[str, float]) -> str:
    """`` (threshold 10%)`` for the key naming this verdict, else all thresholds, else nothing."""
    if not thresholds:
        return ""
    wanted = verdict.replace("-", "_")
    own = [value for key, value in thresholds.items() if wanted in key.replace("-", "_")]
    if len(own) == 1:
        return f" (threshold {_short_percent(own[0])})"
    listed = ", ".join(f"{_threshold_name(k)} {_short_percent(v)}" for k, v in thresholds.items())
    return f" (thresholds: {listed})"


def _threshold_name(key: str) -> str:
    for suffix in ("_stall_fraction", "_fraction"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
    return key.replace("_", " ")


def _short_percent(fraction: float) -> str:
    """``0.1 -> "10%"``, ``0.125 -> "12.5%"``: thresholds are round numbers, print them so."""
    as_percent = fraction * 100
    decimals = 0 if abs(as_percent - round(as_percent)) < 1e-9 else 1
    return f"{as_percent:.{decimals}f}%"


def _context_line(report: "Report") -> str:
    env, loader = report.environment, report.loader
    names = ("num_workers", "prefetch_factor", "batch_size", "pin_memory", "persistent_workers")
    settings = [
        f"{name}={fmt.setting_value(getattr(loader, name))}"
        for name in names
        if getattr(loader, name) is not None
    ]
    cuda = "no CUDA" if not env.cuda else " ".join(filter(None, ("CUDA", env.cuda_device)))
    torch = f"torch {env.torch}" if env.torch else (
        "torch unknown" if report.kind == "attach" else "no torch")
    where = (f", rank {report.rank.rank} of {report.rank.world_size}"
             if report.rank is not None else "")
    return " · ".join(
        [
            f"{report.kind} report{where}, {report.created}",
            " ".join([loader.type, *settings]),
            f"{env.cpu_count} CPUs ({env.usable_cpus} usable), {cuda}",
            f"Python {env.python}, {torch}",
        ]
    )


def _ended_line(consumer: "ConsumerSummary") -> Optional[str]:
    if consumer.status == "complete":
        return None
    detail = f": {consumer.error}" if consumer.error else ""
    return f"the run did not complete (status {consumer.status}{detail}); numbers cover what ran"


# -- sections ------------------------------------------------------------------------------------


def _line(*pairs: tuple[str, str]) -> Text:
    """A line of ``label value`` pairs separated by `` · ``; labels dim, values plain."""
    text = Text()
    for i, (label, value) in enumerate(pairs):
        if i:
            text.append(" · ", style=_DIM)
        if label:
            text.append(f"{label} ", style=_DIM)
        text.append(value)
    return text



def _throughput(consumer: "ConsumerSummary") -> list[RenderableType]:
    rates = [
        ("", fmt.rate(consumer.samples_per_s, "samples")),
        ("", fmt.rate(consumer.batches_per_s, "batches")),
    ]
    if consumer.tokens_per_s is not None:
        rates.append(("", fmt.rate(consumer.tokens_per_s, "tokens")))
    return [
        _line(*rates),
        _line(
            ("wall", fmt.seconds(consumer.wall_s)),
            ("", fmt.count(consumer.batches, "batch", "batches")),
            ("", fmt.count(consumer.samples, "sample")),
            ("", fmt.count(consumer.epochs, "epoch")),
        ),
    ]


def _attach(section: dict[str, Any]) -> list[RenderableType]:
    """``pipecheck attach``: the stall estimate and its interval, the workers seen, and what
    cannot be known without wrapping (:mod:`pipecheck.render.attach`)."""
    out: list[RenderableType] = [_line((label, value)) for label, value in attach_facts(section)]
    rows = worker_rows(section)
    if rows:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        for header in WORKER_HEADERS:
            table.add_column(header, justify="left" if header in ("pid", "class") else "right")
        for row in rows:
            table.add_row(*row)
        out.append(table)
    out.append(Text("cannot be known without wrapping:", style=_DIM))
    out += [Text(f"- {item}") for item in unknown_lines(section)]
    return out


def _stall(consumer: "ConsumerSummary") -> list[RenderableType]:
    lines: list[RenderableType] = [
        _line(
            ("waited", fmt.seconds(consumer.wait_s)),
            ("computed", fmt.seconds(consumer.compute_s)),
            ("stall", fmt.percent(consumer.stall_fraction)),
            ("steady-state stall", fmt.percent(consumer.steady_stall_fraction)),
        ),
        _line(("first batch after", fmt.seconds(consumer.first_batch_s))),
    ]
    if consumer.wait_time_s is not None:
        lines.append(_line(("wait per batch:", fmt.duration_quantiles(consumer.wait_time_s))))
    if consumer.compute_time_s is not None:
        lines.append(_line(("step per batch:", fmt.duration_quantiles(consumer.compute_time_s))))
    return lines


def _producer_vs_consumer(report: "Report") -> list[RenderableType]:
    consumer, producer = report.consumer, report.producer
    demand = consumer.demand_batches_per_s
    capacity = producer.capacity_batches_per_s
    lines: list[RenderableType] = [
        _line(("consumer demand", f"{fmt.rate(demand, 'batches')} (1 / mean step time)")),
    ]
    basis = f" ({producer.capacity_basis})" if producer.capacity_basis else ""
    lines.append(_line(("producer capacity", f"{fmt.rate(capacity, 'batches')}{basis}")))
    phrase = capacity_phrase(report)
    if phrase is not None:
        lines.append(_line(("capacity / demand", phrase)))
    judgement = report.diagnosis.judgement
    if judgement is not None and judgement.capacity_note:
        lines.append(Text(judgement.capacity_note, style=_DIM))
    details = []
    if producer.batch_time_s is not None:
        details.append(("batch build time:", fmt.duration_quantiles(producer.batch_time_s)))
    if producer.per_worker_batches_per_s is not None:
        details.append(("per worker", fmt.rate(producer.per_worker_batches_per_s, "batches")))
    if producer.cpu_per_batch_s is not None:
        details.append(("CPU per batch", fmt.seconds(producer.cpu_per_batch_s)))
    if producer.cpu_fraction is not None:
        details.append(("worker CPU while busy", fmt.percent(producer.cpu_fraction)))
    if details:
        lines.append(_line(*details))
    if producer.workers_class is not None:
        basis = f" ({producer.workers_class_basis})" if producer.workers_class_basis else ""
        lines.append(_line(("producer is", f"{producer.workers_class}{basis}")))
    if producer.workers:
        lines.append(_worker_table(producer))
    else:
        lines.append(Text(f"no per-worker timing (worker probe: {producer.probe})", style=_DIM))
    return lines


def _worker_table(producer: "ProducerSummary") -> RenderableType:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for header in ("worker", "pid", "batches", "busy", "rate", "CPU/busy", "RSS max"):
        table.add_column(header, justify="left" if header == "worker" else "right", no_wrap=True)
    stacked = []
    for worker in producer.workers:
        name = "main" if worker.id == -1 else str(worker.id)
        cells = (
            f"{worker.batches:,}",
            fmt.seconds(worker.busy_s),
            fmt.rate(worker.rate_batches_per_s, "batches"),
            fmt.percent(worker.cpu_fraction),
            fmt.mib(worker.rss_max_bytes),
        )
        table.add_row(name, str(worker.pid), *cells)
        stacked.append(
            Text(f"worker {name} (pid {worker.pid}): ")
            + _line(
                ("batches", cells[0]),
                ("busy", cells[1]),
                ("rate", cells[2]),
                ("CPU while busy", cells[3]),
                ("RSS max", cells[4]),
            )
        )
    return _FitOrStack(table, Group(*stacked))


class _FitOrStack:
    """A table where it fits without wrapping its cells, else the same facts as stacked lines
    (a squeezed table breaks numbers from their units on narrow terminals)."""

    def __init__(self, table: Table, stacked: RenderableType) -> None:
        self.table = table
        self.stacked = stacked

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table if _unwrapped_width(self.table) <= options.max_width else self.stacked


def _unwrapped_width(table: Table) -> int:
    """Columns ``table`` needs with its ``no_wrap`` columns whole and the others at their
    ``min_width`` (rich's own measurement assumes every cell may wrap between words)."""
    total = 0
    for column in table.columns:
        cells = [column.header, *column.cells]
        if column.no_wrap:
            total += max(cell_len(c.plain if isinstance(c, Text) else str(c)) for c in cells)
        else:
            total += column.min_width or 0
    # Between two columns: right padding, the blank divider of SIMPLE_HEAD, left padding.
    return total + 3 * (len(table.columns) - 1)


def _host(report: "Report") -> list[RenderableType]:
    host: Optional[HostRecord] = report.host
    if host is None:
        return [Text("host sampling was not run", style=_DIM)]
    if host.status != "ok":
        note = f": {host.note}" if host.note else ""
        return [Text(f"host sampling {host.status}{note}", style=_DIM)]
    # With num_workers=0 there are no worker processes: say nothing rather than "0" or "n/a".
    # None (a generic iterable) and 0 both mean no worker processes to show
    has_workers = bool(report.loader.num_workers)
    cpu = [("CPU main", fmt.cores(_per_wall(host.main_cpu_s, host.duration_s)))]
    if has_workers:
        cpu.append(("workers", fmt.cores(_per_wall(host.workers_cpu_s, host.duration_s))))
    cpu.append(("system", f"{fmt.percent_value(host.system_cpu_percent_mean)} of all cores"))
    cpu.append(("iowait", fmt.percent(host.iowait_fraction_mean)))
    lines: list[RenderableType] = [
        _line(*cpu),
        _line(
            ("read from storage", fmt.bytes_rate(host.read_bytes_per_s)),
            ("incl. page cache", fmt.bytes_rate(host.read_chars_per_s)),
            *([(f"disk {host.busiest_disk} busy", fmt.percent(host.disk_busy_fraction_mean))]
              if host.disk_busy_fraction_mean is not None else []),
        ),
    ]
    memory = _memory_line(report, has_workers)
    if memory is not None:
        lines.append(memory)
    samples = fmt.count(host.samples_taken, "sample")
    overhead_cores = _per_wall(host.overhead_cpu_s, host.duration_s)
    lines.append(
        _line(
            ("sampler", f"{samples} every {fmt.seconds(host.interval_s)}"),
            ("overhead", f"{fmt.seconds(host.overhead_cpu_s)} CPU "
             f"({fmt.percent(overhead_cores)} of one core)"),
        )
    )
    return lines


def _per_wall(cpu_s: Optional[float], wall_s: float) -> Optional[float]:
    """CPU seconds per wall second (cores); ``None`` when either is unknown or the wall is 0."""
    if cpu_s is None or not wall_s:
        return None
    return cpu_s / wall_s


def _memory_line(report: "Report", has_workers: bool) -> Optional[Text]:
    """Peak memory from the host samples in the timeline; ``None`` when there are none."""
    samples = report.timeline.host
    if not samples:
        return None
    pairs = [("memory: main RSS peak", fmt.size(max(s.main_rss_bytes for s in samples)))]
    if has_workers:
        pairs.append(("workers RSS peak", fmt.size(max(s.workers_rss_bytes for s in samples))))
        pss = [s.workers_pss_bytes for s in samples if s.workers_pss_bytes is not None]
        if pss:
            pairs.append(("workers PSS peak", fmt.size(max(pss))))
    pairs.append(("lowest available", fmt.size(min(s.available_memory_bytes for s in samples))))
    return _line(*pairs)


def _findings(report: "Report") -> list[RenderableType]:
    findings = sorted(report.diagnosis.findings, key=lambda f: _SEVERITY_ORDER.get(f.severity, 3))
    if not findings:
        return [Text("none", style=_DIM)]
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for finding in findings:
        marker = Text(f"[{finding.severity}]", style=_SEVERITY_STYLES.get(finding.severity, ""))
        grid.add_row(marker, Text(finding.message))
    return [grid]


def _recommendations(report: "Report") -> list[RenderableType]:
    """A compact table of the changes, then each one's reason as a numbered paragraph (reasons
    are long; a table column would squeeze them into a narrow strip)."""
    if not report.recommendations:
        return [Text(_why_no_recommendations(report))]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("#", no_wrap=True)
    table.add_column("setting", no_wrap=True)
    table.add_column("current -> proposed", no_wrap=True)
    table.add_column("expected throughput", justify="right", no_wrap=True)
    table.add_column("expected stall", justify="right", no_wrap=True)
    stacked = []
    reasons = Table.grid(padding=(0, 1))
    reasons.add_column(no_wrap=True)
    reasons.add_column()
    for number, rec in enumerate(report.recommendations, start=1):
        change = f"{fmt.setting_value(rec.current)} -> {fmt.setting_value(rec.proposed)}"
        expected_rate = fmt.rate(rec.expected.samples_per_s, "samples")
        expected_stall = fmt.percent(rec.expected.stall_fraction)
        table.add_row(f"{number}.", rec.setting, change, expected_rate, expected_stall)
        summary = _line(
            (f"{rec.setting}:", change), ("expected", expected_rate), ("stall", expected_stall)
        )
        stacked.append(Text(f"{number}. ") + summary)
        reason = Text.assemble((f"{rec.setting}: ", "bold"), rec.reason)
        effect = effect_text(rec)
        if effect is not None:
            reason.append(f" Effect: {effect}.")
        if rec.expected.note:
            reason.append(f" ({rec.expected.note})", style=_DIM)
        reasons.add_row(f"{number}.", reason)
    return [
        Text(recommendations_caption(report), style=_DIM),
        _FitOrStack(table, Group(*stacked)),
        Text(""),
        reasons,
    ]


def recommendations_caption(report: "Report") -> str:
    """How to read the recommendations' figures: measured together (stress) or cumulative."""
    if report.kind == "stress":
        return ("Measured by the stress sweep: each figure is the recommended configuration's, "
                "every change together.")
    return "Cumulative: each figure assumes the changes above it."


def _why_no_recommendations(report: "Report") -> str:
    consumer, diagnosis = report.consumer, report.diagnosis
    recommended = (report.stress or {}).get("recommended") if report.kind == "stress" else None
    if isinstance(recommended, dict) and recommended.get("config") is not None:
        expected = (recommended.get("expected") or {}).get("samples_per_s")
        return ("No recommendations: the baseline was the fastest configuration measured "
                f"({_config_text(recommended.get('baseline'))}, "
                f"{fmt.rate(_number(expected), 'samples')}).")
    if report.kind == "attach":
        return ("No recommendations: attached without wrapping, the effect of a change cannot "
                "be predicted (no batch or per-worker times); `pipecheck run -- python "
                "train.py` measures them.")
    if diagnosis.verdict == "no-data" or consumer.batches == 0:
        measured = fmt.count(consumer.batches, "batch", "batches")
        return f"No recommendations: insufficient data ({measured} measured); run more steps."
    if any(finding.kind == "insufficient-data" for finding in diagnosis.findings):
        return (
            "No recommendations: the measurements are insufficient to predict the effect of a "
            "change (see Findings)."
        )
    if diagnosis.verdict == "compute-bound":
        return (
            "No recommendations: the loop is compute-bound, so no loader change is predicted "
            "to help."
        )
    judgement = diagnosis.judgement
    if diagnosis.verdict == "input-bound" and judgement is not None and judgement.capacity_note:
        return (
            "No recommendations: the measured stall says the loop is input-bound, but the "
            "what-if model is built on the capacity estimate "
            f"({judgement.capacity_demand_ratio:.2f}x the demand) that the stall contradicts "
            "(see Producer vs consumer), so it predicts no gain from any loader change; "
            "`pipecheck stress` measures the alternatives instead of predicting them."
        )
    if report.producer.capacity_batches_per_s is None:
        return (
            "No recommendations: producer capacity was not measured, so the effect of a change "
            "cannot be predicted."
        )
    return "No recommendations: no change is predicted to help."


PREDICTED_ROWS = 5
"""Unmeasured (predicted-only) configurations shown in the stress table, highest predicted
throughput first; the JSON report lists them all."""


def _stacks(stacks: "StacksRecord") -> list[RenderableType]:
    """Status and the hottest functions by share of on-CPU worker samples."""
    if stacks.status != "ok":
        return [Text(f"not sampled ({stacks.status}): {stacks.note}", style=_DIM)]
    overhead = ("py-spy overhead", fmt.NOT_MEASURED if stacks.overhead_cpu_s is None
                else f"{fmt.seconds(stacks.overhead_cpu_s)} CPU")
    lines: list[RenderableType] = [
        _line(("worker samples", f"{stacks.worker_samples:,}"),
              ("start-up/shutdown", f"{stacks.worker_other_samples:,}"),
              ("main", f"{stacks.main_samples:,}")),
        _line(("window", fmt.seconds(stacks.window_s)), ("rate", f"{stacks.rate_hz} Hz"),
              overhead),
    ]
    if stacks.main_wait:
        split = [(name, fmt.percent(share)) for name, share in stacks.main_wait.items()]
        split[0] = (f"main thread in next(): {split[0][0]}", split[0][1])
        split[-1] = (split[-1][0], f"{split[-1][1]} ({stacks.main_wait_samples:,} samples)")
        lines.append(_line(*split))
    if stacks.stages:
        shares = [(name, fmt.percent(share)) for name, share in list(stacks.stages.items())[:5]]
        shares[0] = (f"worker stages: {shares[0][0]}", shares[0][1])
        lines.append(_line(*shares))
    if stacks.pin_memory_busy_fraction is not None:
        busy = fmt.percent(stacks.pin_memory_busy_fraction)
        lines.append(_line(("pin-memory thread busy", busy)))
    scope = "worker" if stacks.worker_samples else "main-process"
    if not stacks.top:
        return lines + [Text("no on-CPU samples", style=_DIM)]
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column()
    grid.add_row(Text("self", style=_DIM), Text("total", style=_DIM),
                 Text(f"function (share of {scope} samples)", style=_DIM))
    for hot in stacks.top[:5]:
        where = _short_path(hot.file) + (f":{hot.line}" if hot.line is not None else "")
        stage = f"  [{hot.stage}]" if hot.stage else ""
        grid.add_row(fmt.percent(hot.fraction), fmt.percent(hot.inclusive_fraction),
                     Text(f"{hot.function}{stage}  {where}"))
    return lines + [grid]


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


def _device(device: "DeviceRecord") -> list[RenderableType]:
    """GPU idle caused by data and the batches behind it."""
    pinned = ("pinned batches", fmt.percent(device.pinned_fraction))
    return [
        _line(("GPU idle waiting for data", fmt.seconds(device.idle_s)),
              ("share of stream time", fmt.percent(device.idle_fraction))),
        _line(("batches timed", f"{device.batches:,}"), ("pending", f"{device.unresolved:,}"),
              ("not timed (pool full)", f"{device.dropped:,}"), pinned),
    ]


def _stress(stress: dict[str, Any]) -> list[RenderableType]:
    """The sweep's trials (config, throughput, stall, measured or predicted) and its choices.

    The config column names only the settings that vary between trials (the rest are printed
    once above the table); measured trials come in run order, then the best
    :data:`PREDICTED_ROWS` predicted-only ones."""
    trials = [t for t in stress.get("trials") or [] if isinstance(t, dict)]
    lines: list[RenderableType] = []
    configs = [t["config"] for t in trials if isinstance(t.get("config"), dict)]
    varying = _varying_keys(configs)
    constant = {k: v for k, v in (configs[0] if configs else {}).items()
                if k not in varying and v is not None}
    if constant and len(trials) > 1:
        lines.append(_line(("every trial:", _config_text(constant))))
    measured = [t for t in trials if t.get("measured")]
    # Unmeasured candidates the model gave no figure for (the budget ran out first) stay in
    # the JSON: a row of n/a would say nothing.
    predicted_only = sorted((t for t in trials if not t.get("measured")
                             and _number(t.get("samples_per_s")) is not None),
                            key=lambda t: -(_number(t.get("samples_per_s")) or 0.0))
    shown = measured + predicted_only[:PREDICTED_ROWS]
    if shown:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        # The "predicted" column (the search model's samples/s before a measured trial ran)
        # appears only when some measured trial has one, so grid tables keep their shape.
        show_predicted = any(_number(t.get("predicted_samples_per_s")) is not None
                             for t in measured)
        # One column per varying setting, in the config's own key order.
        setting_columns = [k for k in (configs[0] if configs else {}) if k in varying]
        setting_columns += sorted(varying - set(setting_columns))
        if not setting_columns:
            setting_columns = ["config"]
        headers = ["samples/s", "batches/s", "stall", "source"]
        if show_predicted:
            headers.insert(1, "predicted samples/s")
        for header in setting_columns:
            table.add_column(header, justify="right")
        for header in headers:
            table.add_column(header, justify="right")
        for trial in shown:
            config = trial.get("config")
            if setting_columns == ["config"]:
                cells = [_config_text(config)]
            else:
                config = config if isinstance(config, dict) else {}
                cells = ["-" if config.get(k) is None else fmt.setting_value(config.get(k))
                         for k in setting_columns]
            # Units sit in the headers ("samples/s"), so rows stay one line on a narrow terminal.
            row = cells + [
                fmt.significant(_number(trial.get("samples_per_s"))),
                fmt.significant(_number(trial.get("batches_per_s"))),
                fmt.percent(_number(trial.get("stall_fraction"))),
                _trial_source(trial),
            ]
            if show_predicted:
                predicted = _number(trial.get("predicted_samples_per_s"))
                row.insert(len(cells) + 1, fmt.significant(predicted)
                           if trial.get("measured") and predicted is not None else "")
            table.add_row(*row)
        lines.append(table)
    hidden = len(predicted_only) - PREDICTED_ROWS
    if hidden > 0:
        lines.append(Text(f"{hidden} more predicted, unmeasured configurations are listed in "
                          f"the JSON report", style=_DIM))
    for trial in trials:
        if trial.get("error"):
            lines.append(_line(("failed:", f"{_config_text(trial.get('config'))}: "
                                           f"{trial['error']}")))
    skipped: dict[str, list[str]] = {}
    for entry in stress.get("skipped") or []:
        if isinstance(entry, dict):
            skipped.setdefault(str(entry.get("reason")), []).append(
                _config_text(entry.get("config")))
    for reason, configs in skipped.items():
        listed = "; ".join(configs) if len(configs) <= PREDICTED_ROWS else \
            f"{len(configs)} configurations (listed in the JSON report)"
        lines.append(_line((f"skipped ({reason}):", listed)))
    search = stress.get("search")
    if isinstance(search, dict) and search:
        lines.append(_line(("model-guided search:",
                            f"measured {search.get('measured')} of {search.get('candidates')} "
                            f"configurations; stopped: {search.get('stop_reason')}")))
    for key in ("best", "recommended"):
        choice = stress.get(key)
        if isinstance(choice, dict) and choice:
            config = choice.get("config", choice)
            note = tie_note(stress) if key == "recommended" else ""
            lines.append(_line((f"{key}:", _config_text(config) + note)))
    recommended = stress.get("recommended") or {}
    gain = _number(recommended.get("gain"))
    if gain is not None:
        base = _number(recommended.get("baseline_samples_per_s"))
        expected = _number((recommended.get("expected") or {}).get("samples_per_s"))
        lines.append(_line((
            "expected gain over the baseline:",
            f"{gain:.2f}x ({fmt.rate(base, 'samples')} -> {fmt.rate(expected, 'samples')}, "
            f"baseline {_config_text(recommended.get('baseline'))})")))
    profile = stress.get("profile")
    if isinstance(profile, dict) and profile.get("status") in ("ok", "failed", "skipped"):
        text = ("one extra trial of the best configuration sampled hot stacks (see Hot stacks)"
                if profile["status"] == "ok" else f"{profile['status']}: {profile.get('reason')}")
        lines.append(_line(("profiling trial:", text)))
    epoch = epoch_start_text(stress.get("epoch_start"))
    if epoch is not None:
        lines.append(_line(("epoch start:", epoch)))
    changes = recommended.get("changes")
    if isinstance(changes, dict) and changes:
        lines.append(_line(("change:", ", ".join(
            f"{name} {fmt.setting_value(pair[0])} -> {fmt.setting_value(pair[1])}"
            for name, pair in changes.items() if isinstance(pair, list) and len(pair) == 2))))
        if (changes.get("in_order") or [None, None])[1] is False:
            lines.append(_line(("note:", "in_order=False delivers batches as workers finish "
                                         "them, not in sampler order")))
    return lines or [Text("no trials recorded", style=_DIM)]


def _trial_source(trial: dict[str, Any]) -> str:
    if trial.get("error"):
        return "failed"
    return "measured" if trial.get("measured") else "predicted"


def _config_text(config: Any) -> str:
    """``num_workers=2 prefetch_factor=4``: settings left unset (``None``) are left out."""
    if isinstance(config, dict):
        return " ".join(f"{k}={fmt.setting_value(v)}" for k, v in config.items()
                        if v is not None) or "the target's own settings"
    return fmt.NOT_MEASURED if config is None else str(config)


def _varying_keys(configs: list[dict[str, Any]]) -> set[str]:
    """Settings whose value differs between ``configs`` (a setting missing counts as None)."""
    keys = {k for c in configs for k in c}
    return {k for k in keys if len({repr(c.get(k)) for c in configs}) > 1}


def _number(value: Any) -> Optional[float]:
    """A JSON number as a float; ``None`` for anything else (null, text, booleans)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
