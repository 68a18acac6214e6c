"""The HTML report: one self-contained page (inline CSS and SVG charts, no script, no network).

:func:`render_html` takes a finished :class:`~pipecheck.report.Report` and returns the page as
text; :meth:`pipecheck.Report.save_html` writes it. Sections follow the terminal summary
(:mod:`pipecheck.render.terminal`): the verdict banner with the numbers behind it, data wait
with the step timeline, producer vs consumer with rates over time and per-worker busy / idle,
host CPU / IO / memory over time, findings, recommendations with their expected effect, the
stress search when present, then any further report sections (stages, sharding, stacks, device,
...) rendered generically from their JSON.

Safety: every string that comes from the run (dataset and loader type names, exception text,
paths, config values, finding messages) goes through :func:`html.escape`; chart text is escaped
by matplotlib's SVG writer. A Content-Security-Policy meta tag forbids scripts and every
network fetch, so the page cannot load anything even if a string slipped through.
"""

from __future__ import annotations

import dataclasses
import html
from typing import TYPE_CHECKING, Any, Iterable, Optional

from pipecheck import units as fmt
from pipecheck.records import to_jsonable
from pipecheck.render import charts, stress_rows
from pipecheck.render.attach import WORKER_HEADERS, attach_facts, unknown_lines, worker_rows
from pipecheck.render.generic import to_html as generic_html
from pipecheck.render.terminal import (_why_no_recommendations, capacity_phrase, effect_text,
                                       recommendations_caption, verdict_line)

if TYPE_CHECKING:
    from pipecheck.report import Report

CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
"""The page's policy: inline styles and data: images only; no script, no fetch of any kind."""

KNOWN_FIELDS = frozenset({
    "kind", "created", "environment", "loader", "consumer", "producer", "host", "diagnosis",
    "recommendations", "timeline", "stress", "schema", "attach",
})
"""Report fields with a dedicated section; any other non-empty field gets a generic one."""

SECTION_TITLES = {
    "stages": "Pipeline stages",
    "sharding": "Sharding",
    "stacks": "Where the time goes (stack samples)",
    "device": "Device (GPU)",
    "memory": "Memory",
}
"""Titles of the optional sections other modules add; others are titled from their key."""

_VERDICT_CLASSES = {"input-bound": "bad", "compute-bound": "good", "balanced": "warn"}
_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1080px;margin:0 auto;padding:16px 20px 40px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ccd;
 padding-bottom:3px}h3{font-size:14px;margin:14px 0 4px}
.banner{border-radius:8px;padding:14px 18px;color:#fff;background:#555}
.banner.bad{background:#b3261e}.banner.good{background:#2e7d32}.banner.warn{background:#b26a00}
.banner .context{opacity:.9;font-size:12px;margin-top:4px;word-break:break-word}
.numbers{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:8px;
 margin:12px 0}
.number{background:#fff;border:1px solid #dde;border-radius:6px;padding:8px 10px}
.number .v{font-size:18px;font-weight:600}.number .k{font-size:12px;color:#556}
.alert{background:#fff4ce;border:1px solid #e0c060;border-radius:6px;padding:8px 12px;margin:10px 0}
.chart{background:#fff;border:1px solid #dde;border-radius:6px;padding:6px;margin:8px 0}
.chart svg{width:100%;height:auto;display:block}
.caption{font-size:12px;color:#556;margin:2px 4px}
table{border-collapse:collapse;background:#fff;margin:6px 0;font-size:13px}
th,td{border:1px solid #dde;padding:3px 8px;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;white-space:nowrap}
ul.facts{list-style:none;padding:0;margin:4px 0}
ul.facts li{display:inline-block;margin:2px 22px 2px 0}
.dim{color:#667}.sev{display:inline-block;min-width:62px;font-weight:600}
.sev.critical{color:#b3261e}.sev.warning{color:#b26a00}.sev.info{color:#1565c0}
dl.kv{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:4px 0}
dl.kv dt{color:#556}dl.kv dd{margin:0}
footer{margin-top:30px;font-size:12px;color:#667}
code{font-size:12px}
"""


def render_html(report: "Report") -> str:
    """The report as one self-contained HTML5 page (UTF-8 text).

    Charts are inline SVG drawn by matplotlib; a chart whose data the report lacks is replaced
    by a sentence saying what is missing. Raises nothing for any report that
    :meth:`pipecheck.Report.from_dict` accepts.
    """
    title = verdict_line(report)
    body = [_banner(report)]
    if report.attach is not None:  # no batch timing: the attach section replaces those
        body.append(_section("Attached (py-spy + psutil, not wrapped)", _attach(report.attach)))
    else:
        body += [_section("Data wait (stall)", _stall(report)),
                 _section("Producer vs consumer", _producer(report))]
    body.append(_section("Host: CPU, IO and memory", _host(report)))
    if report.producer.stages:
        body.append(_section("Pipeline stages", _stages(report.producer.stages)))
    body += [
        _section("Findings", _findings(report)),
        _section("Recommendations", _recommendations(report)),
    ]
    if report.stress:
        body.append(_section("Stress search", _stress(report.stress)))
    for name, value in _extra_sections(report):
        body.append(_section(SECTION_TITLES.get(name, name.replace("_", " ").capitalize()),
                             [generic_html(value, name)]))
    body.append(_footer(report))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>pipecheck: {_e(title)}</title><style>{_CSS}</style></head>\n"
        f"<body><main>\n{''.join(body)}</main></body></html>\n"
    )


# -- building blocks -----------------------------------------------------------------------------


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _section(title: str, parts: Iterable[str]) -> str:
    return f"<section><h2>{_e(title)}</h2>\n{''.join(parts)}</section>\n"


def _facts(*pairs: tuple[str, str]) -> str:
    items = "".join(f'<li><span class="dim">{_e(k)}</span> {_e(v)}</li>' for k, v in pairs)
    return f'<ul class="facts">{items}</ul>'


def _chart(svg: Optional[str], caption: str, missing: str) -> str:
    """A chart box (``svg`` from :mod:`pipecheck.render.charts`, trusted: matplotlib escapes
    its text) with its caption, or the ``missing`` sentence when there is no chart."""
    if svg is None:
        return f'<p class="dim">{_e(missing)}</p>'
    return f'<figure class="chart">{svg}<figcaption class="caption">{_e(caption)}</figcaption>' \
           "</figure>"


def _table(headers: list[str], rows: Iterable[list[str]], numeric_from: int = 1) -> str:
    """An HTML table of already-formatted (unescaped) cells; columns from ``numeric_from`` on
    are right-aligned."""
    def cls(i: int) -> str:
        return ' class="n"' if i >= numeric_from else ""

    head = "".join(f"<th{cls(i)}>{_e(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td{cls(i)}>{_e(c)}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"



# -- sections ------------------------------------------------------------------------------------


def _banner(report: "Report") -> str:
    consumer, producer = report.consumer, report.producer
    verdict = report.diagnosis.verdict
    demand, capacity = consumer.demand_batches_per_s, producer.capacity_batches_per_s
    ratio = capacity_phrase(report) or fmt.NOT_MEASURED
    judgement = report.diagnosis.judgement
    numbers = [
        ("throughput", fmt.rate(consumer.samples_per_s, "samples")),
        ("batches", fmt.rate(consumer.batches_per_s, "batches")),
        ("data stall (whole run)", fmt.percent(consumer.stall_fraction)),
        ("steady-state stall", fmt.percent(consumer.steady_stall_fraction)),
        ("consumer demand", fmt.rate(demand, "batches")),
        ("producer capacity", fmt.rate(capacity, "batches")),
        ("capacity / demand", ratio),
        ("first batch after", fmt.seconds(consumer.first_batch_s)),
        ("wall time", fmt.seconds(consumer.wall_s)),
        ("measured", f"{fmt.count(consumer.batches, 'batch', 'batches')}, "
                     f"{fmt.count(consumer.epochs, 'epoch')}"),
    ]
    if consumer.tokens_per_s is not None:
        numbers.insert(2, ("tokens", fmt.rate(consumer.tokens_per_s, "tokens")))
    if judgement is not None and judgement.goodput_fraction is not None:
        numbers.insert(1, ("data goodput", fmt.percent(judgement.goodput_fraction)))
    if report.diagnosis.bottleneck:
        numbers.append(("bottleneck", report.diagnosis.bottleneck))
    cards = "".join(
        f'<div class="number"><div class="v">{_e(v)}</div><div class="k">{_e(k)}</div></div>'
        for k, v in numbers
    )
    note = ""
    if judgement is not None and judgement.capacity_note:
        note = f'<p class="alert">{_e(judgement.capacity_note)}</p>\n'
    unfinished = ""
    if consumer.status != "complete":
        detail = f": {consumer.error}" if consumer.error else ""
        unfinished = (f'<p class="alert">The run did not complete (status {_e(consumer.status)}'
                      f"{_e(detail)}); the numbers cover what ran.</p>")
    return (
        f'<header class="banner {_VERDICT_CLASSES.get(verdict, "")}">'
        f"<h1>{_e(verdict_line(report))}</h1>"
        f'<div class="context">{_e(_context(report))}</div></header>\n'
        f"{unfinished}<div class=\"numbers\">{cards}</div>\n{note}"
    )


def _context(report: "Report") -> str:
    env, loader = report.environment, report.loader
    names = ("num_workers", "prefetch_factor", "batch_size", "pin_memory", "persistent_workers",
             "in_order")
    settings = " ".join(f"{n}={fmt.setting_value(getattr(loader, n))}" for n in names
                        if getattr(loader, n) is not None)
    dataset = f" · dataset {loader.dataset_type}" if loader.dataset_type else ""
    cuda = " ".join(filter(None, ("CUDA", env.cuda_device))) if env.cuda else "no CUDA"
    torch = f"torch {env.torch}" if env.torch else "no torch"
    return (f"{report.kind} report, {report.created} · {loader.type} {settings}{dataset} · "
            f"{env.cpu_count} CPUs ({env.usable_cpus} usable), {cuda} · Python {env.python}, "
            f"{torch} · {env.platform}")


def _attach(section: dict[str, Any]) -> list[str]:
    """``pipecheck attach``: the stall estimate and its interval, the workers seen, and what
    cannot be known without wrapping (:mod:`pipecheck.render.attach`)."""
    parts = [_facts(*attach_facts(section))]
    rows = worker_rows(section)
    if rows:
        parts.append(_table(WORKER_HEADERS, rows))
    items = "".join(f"<li>{_e(item)}</li>" for item in unknown_lines(section))
    parts.append(f'<p class="dim">Cannot be known without wrapping:</p><ul>{items}</ul>')
    return parts


def _stall(report: "Report") -> list[str]:
    consumer = report.consumer
    parts = [_facts(
        ("waited", fmt.seconds(consumer.wait_s)),
        ("computed", fmt.seconds(consumer.compute_s)),
        ("stall", f"{fmt.percent(consumer.stall_fraction)} (steady state "
                  f"{fmt.percent(consumer.steady_stall_fraction)})"),
        ("wait per batch:", fmt.duration_quantiles(consumer.wait_time_s)),
        ("step per batch:", fmt.duration_quantiles(consumer.compute_time_s)),
    )]
    kept = len(report.timeline.batches)
    caption = "Wait vs compute per batch; dashed lines mark epoch starts."
    if kept and kept < consumer.batches:
        caption += (f" The report keeps an evenly spaced sample of the batches: {kept:,} of "
                    f"{consumer.batches:,} are shown.")
    parts.append(_chart(charts.step_timeline_svg(report), caption,
                        "No per-batch timeline was recorded."))
    if report.timeline.epochs:
        rows = [[str(e.epoch), f"{e.batches:,}", fmt.seconds(e.wait_s), fmt.seconds(e.compute_s),
                 fmt.seconds(e.wall_s), fmt.seconds(e.first_batch_s), e.ended]
                for e in report.timeline.epochs]
        parts.append(_table(["epoch", "batches", "waited", "computed", "wall", "first batch",
                             "ended"], rows))
    return parts


def _producer(report: "Report") -> list[str]:
    consumer, producer = report.consumer, report.producer
    basis = f" ({producer.capacity_basis})" if producer.capacity_basis else ""
    facts = [
        ("consumer demand", f"{fmt.rate(consumer.demand_batches_per_s, 'batches')} "
                            "(1 / mean step time)"),
        ("producer capacity", f"{fmt.rate(producer.capacity_batches_per_s, 'batches')}{basis}"),
        ("batch build time:", fmt.duration_quantiles(producer.batch_time_s)),
    ]
    if producer.per_worker_batches_per_s is not None:
        facts.append(("per worker", fmt.rate(producer.per_worker_batches_per_s, "batches")))
    if producer.cpu_per_batch_s is not None:
        facts.append(("CPU per batch", fmt.seconds(producer.cpu_per_batch_s)))
    if producer.cpu_fraction is not None:
        facts.append(("worker CPU while busy", fmt.percent(producer.cpu_fraction)))
    parts = [_facts(*facts)]
    parts.append(_chart(
        charts.rates_svg(report),
        "Batches per second over time: received by the training loop (from the consumer "
        "timeline) and produced by the workers (from each worker's most recent batches).",
        "Too few batches to chart rates over time."))
    if not producer.workers:
        parts.append(f'<p class="dim">No per-worker timing (worker probe: '
                     f"{_e(producer.probe)}).</p>")
        return parts
    rows = [["main" if w.id == -1 else str(w.id), str(w.pid), f"{w.batches:,}",
             fmt.seconds(w.busy_s), fmt.seconds(w.fetch_s), fmt.seconds(w.collate_s),
             fmt.rate(w.rate_batches_per_s, "batches"), fmt.percent(w.cpu_fraction),
             fmt.mib(w.rss_max_bytes)] for w in producer.workers]
    parts.append(_table(["worker", "pid", "batches", "busy", "fetch", "collate", "rate",
                         "CPU/busy", "RSS max"], rows))
    parts.append(_chart(
        charts.workers_svg(report),
        "Per-worker busy (fetch, collate) and idle time over the run's wall time; right: each "
        "worker's recent batches as spans.",
        "No per-worker timing."))
    return parts


def _host(report: "Report") -> list[str]:
    host = report.host
    if host is None:
        return ['<p class="dim">Host sampling was not run.</p>']
    if host.status != "ok":
        note = f": {host.note}" if host.note else ""
        return [f'<p class="dim">Host sampling {_e(host.status)}{_e(note)}.</p>']

    def cores(cpu_s: Optional[float]) -> str:
        return fmt.cores(cpu_s / host.duration_s if cpu_s is not None and host.duration_s
                         else None)

    parts = [_facts(
        ("CPU main", cores(host.main_cpu_s)),
        ("CPU workers", cores(host.workers_cpu_s)),
        ("system", f"{fmt.percent_value(host.system_cpu_percent_mean)} of all cores"),
        ("iowait", fmt.percent(host.iowait_fraction_mean)),
        ("read from storage", fmt.bytes_rate(host.read_bytes_per_s)),
        ("incl. page cache", fmt.bytes_rate(host.read_chars_per_s)),
        ("sampler", f"{fmt.count(host.samples_taken, 'sample')} every "
                    f"{fmt.seconds(host.interval_s)}, overhead {fmt.seconds(host.overhead_cpu_s)} "
                    "CPU"),
    )]
    missing = "No host samples were recorded."
    parts.append(_chart(charts.host_cpu_svg(report),
                        "CPU over time per process group (1 core = 100% of one CPU).", missing))
    parts.append(_chart(charts.host_io_svg(report), "Bytes read per second over time.",
                        "Read rates were not measured."))
    parts.append(_chart(charts.host_memory_svg(report), "Memory over time.", missing))
    if host.processes:
        rows = [[str(p.pid), p.role + ("" if p.worker_id is None else f" {p.worker_id}"),
                 fmt.seconds(p.cpu_s), fmt.percent_value(p.cpu_percent_mean),
                 fmt.mib(p.rss_max_bytes), fmt.mib(p.pss_max_bytes), fmt.size(p.read_bytes),
                 f"{fmt.seconds(p.first_seen_at_s)} - {fmt.seconds(p.last_seen_at_s)}"]
                for p in host.processes]
        parts.append("<h3>Processes</h3>")
        parts.append(_table(["pid", "role", "CPU time", "CPU mean", "RSS max", "PSS max",
                             "read from storage", "seen"], rows, numeric_from=2))
    return parts


def _findings(report: "Report") -> list[str]:
    findings = sorted(report.diagnosis.findings,
                      key=lambda f: _SEVERITY_ORDER.get(f.severity, 3))
    if not findings:
        return ['<p class="dim">None.</p>']
    items = []
    for finding in findings:
        evidence = ""
        if finding.evidence:
            evidence = f"<details><summary class=\"dim\">evidence</summary>" \
                       f"{generic_html(finding.evidence)}</details>"
        items.append(f'<li><span class="sev {_e(finding.severity)}">[{_e(finding.severity)}]'
                     f"</span> {_e(finding.message)} <span class=\"dim\">({_e(finding.kind)})"
                     f"</span>{evidence}</li>")
    return [f'<ul class="facts">{"".join(items)}</ul>']


def _recommendations(report: "Report") -> list[str]:
    if not report.recommendations:
        return [f"<p>{_e(_why_no_recommendations(report))}</p>"]
    rows = []
    for number, rec in enumerate(report.recommendations, start=1):
        note = f" ({rec.expected.note})" if rec.expected.note else ""
        rows.append(
            f"<tr><td>{number}.</td><td><code>{_e(rec.setting)}</code></td>"
            f"<td>{_e(fmt.setting_value(rec.current))} &rarr; "
            f"<b>{_e(fmt.setting_value(rec.proposed))}</b></td>"
            f'<td class="n">{_e(fmt.rate(rec.expected.samples_per_s, "samples"))}</td>'
            f'<td class="n">{_e(fmt.percent(rec.expected.stall_fraction))}</td>'
            f"<td>{_e(effect_text(rec) or fmt.NOT_MEASURED)}</td>"
            f"<td>{_e(rec.reason)}<span class=\"dim\">{_e(note)}</span></td></tr>"
        )
    head = ("<tr><th>#</th><th>setting</th><th>current &rarr; proposed</th>"
            '<th class="n">expected throughput</th><th class="n">expected stall</th>'
            "<th>effect</th><th>why</th></tr>")
    return [f'<p class="dim">{_e(recommendations_caption(report))}</p>',
            f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"]


def _stress(stress: dict[str, Any]) -> list[str]:
    parts = [_chart(charts.stress_svg(stress),
                    "Throughput per configuration: filled markers were measured, hollow ones are "
                    "the model's predictions (before a trial ran, or for candidates not measured).",
                    "No trial measured or predicted a throughput.")]
    headers, rows = stress_rows.trial_table(stress)
    if rows:
        parts.append(_table(headers, rows))
    facts = stress_rows.summary_facts(stress)
    if facts:
        parts.append(_facts(*facts))
    return parts


def _stages(rows: list[dict[str, Any]]) -> list[str]:
    parts = [_chart(charts.stages_svg(rows),
                    "Exclusive time per pipeline stage (its own work, not the stages it pulls "
                    "from); blue ran in the workers, purple in the main process.",
                    "No stage was timed.")]
    table = [[str(r.get("name")), str(r.get("where")), fmt.seconds(r.get("exclusive_s")),
              fmt.percent(r.get("fraction")),
              "-" if r.get("samples_in") is None else f"{r['samples_in']:,}",
              f"{r.get('samples_out') or 0:,}"] for r in rows]
    parts.append(_table(["stage", "runs in", "exclusive", "share", "in", "out"], table,
                        numeric_from=2))
    return parts


def _extra_sections(report: "Report") -> list[tuple[str, Any]]:
    """Non-empty Report fields without a dedicated section, as JSON values, in field order."""
    found = []
    for f in dataclasses.fields(report):
        if f.name in KNOWN_FIELDS:
            continue
        value = to_jsonable(getattr(report, f.name))
        if value not in (None, {}, [], ""):
            found.append((f.name, value))
    return found


def _footer(report: "Report") -> str:
    version = report.environment.pipecheck or "unknown version"
    return (f"<footer>pipecheck {_e(version)} · schema {_e(report.schema)} · "
            "self-contained page: no script, no network</footer>\n")

