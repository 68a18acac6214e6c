"""The HTML report's charts: matplotlib figures of a finished report, returned as inline SVG text.

Each ``*_svg`` function takes a :class:`~pipecheck.report_data.ReportData` and returns one ``<svg>``
element as a string (no XML declaration, ready to paste into HTML), or ``None`` when the report
holds no data for that chart (e.g. no host samples). Axes name their units. Text is kept as SVG
``<text>`` (``svg.fonttype = "none"``), which matplotlib escapes (``&``, ``<``, ``>``); labels
that come from the user (settings, configs) are additionally passed with ``$`` escaped so
matplotlib never parses them as mathtext.

Only the object-oriented API (:class:`matplotlib.figure.Figure`) is used, never ``pyplot``: no
global figure state, no GUI backend, safe to call from any thread.
"""

from __future__ import annotations

import io
import math
import re
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeGuard, TypeVar

from pipecheck.render.inert import visible
from pipecheck.render.model import thin
from pipecheck.render.phrases import config_text

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from pipecheck.records import BatchTiming, StageRow, WorkerBatch
    from pipecheck.report_sections import StressSection, SweepTrial
    from pipecheck.report_data import ReportData

WIDTH_IN = 10.0
"""Chart width in inches (SVG points = 72 per inch); the page scales them to its width."""

WAIT_COLOR = "#d62728"
COMPUTE_COLOR = "#2ca02c"
FETCH_COLOR = "#1f77b4"
COLLATE_COLOR = "#9467bd"
IDLE_COLOR = "#dddddd"
MAIN_COLOR = "#ff7f0e"
WORKERS_COLOR = "#1f77b4"

MAX_RATE_BINS = 80
"""Most time bins the producer vs consumer rate chart uses."""

MAX_VECTOR_SHAPES = 1500
"""Above this many bars or spans, a series is drawn as an embedded PNG inside the SVG
(matplotlib's ``rasterized``): 8,192 batches as vector paths would be megabytes of SVG."""

CHART_POINTS = 40_000
"""Most entries of one timeline a chart draws; beyond it an evenly spaced sample of them (the
writer keeps at most 16,383 consumer batches, 1,024 recent batches per worker and 2,048 host
samples, so only a hand-made report is thinned): drawing cost stays bounded."""

MARKED_SAMPLES = 200
"""Most host samples drawn with a dot on each; beyond it the dots merge into the line and only
add size (a dot is about 115 bytes of SVG: 2,048 samples in six series would be 1.4 MB)."""

WORKER_BARS = 64
"""Workers drawn in the per-worker chart, in the report's order (its height grows with each)."""

EPOCH_LINES = 200
"""Most epoch-start lines drawn in the step timeline; with more, none (they would fill it)."""

STRESS_TRIALS = 300
"""Trials drawn in the stress chart, in the section's order (the largest default grid has
127 configurations)."""

RASTER_DPI = 144
"""Resolution of those embedded images, in dots per inch."""

LEGEND_CHAR_PT = 5.5
"""Width allowed per character of a legend label at font size 8, in points (DejaVu Sans
averages about 0.6 em per character; 8 pt x 0.6 = 4.8, rounded up)."""

LEGEND_HANDLE_PT = 40.0
"""Width of a legend entry's marker and padding, in points (matplotlib's default handle length
2 em plus the text and column padding at font size 8)."""

_MIB = 1024**2
T = TypeVar("T")
_SVG_START = re.compile(r"<svg\b")
_ID_REFERENCE = re.compile(r'(\bid="|\bhref="#|url\(#)')


# -- public chart functions ----------------------------------------------------------------------


def step_timeline_svg(report: "ReportData") -> Optional[str]:
    """Wait vs compute per batch (milliseconds, stacked) against the batch index, with epoch
    starts marked; ``None`` when the timeline holds no batches. The timeline is the report's
    bounded sample (every k-th batch above 8192 batches), so bars are the kept batches."""
    batches = _thin(report.timeline.batches)
    if not batches:
        return None
    index = [b.index for b in batches]
    wait_ms = [b.wait_s * 1e3 for b in batches]
    compute_ms = [(b.compute_s or 0.0) * 1e3 for b in batches]
    fig, ax = _figure(3.2)
    dense = len(batches) > MAX_VECTOR_SHAPES
    ax.fill_between(index, 0, wait_ms, step="mid", color=WAIT_COLOR, alpha=0.85, linewidth=0,
                    label="wait in next() (data stall)", rasterized=dense)
    top = [w + c for w, c in zip(wait_ms, compute_ms)]
    ax.fill_between(index, wait_ms, top, step="mid", color=COMPUTE_COLOR, alpha=0.6, linewidth=0,
                    label="compute (step)", rasterized=dense)
    starts = _epoch_starts(batches)[1:]
    for start in starts if len(starts) <= EPOCH_LINES else []:
        ax.axvline(start, color="#555555", linewidth=0.8, linestyle="--")
    ax.set_xlabel("batch index")
    ax.set_ylabel("time per batch (ms)")
    ax.set_xlim(index[0] - 0.5, index[-1] + 0.5)
    ax.set_ylim(bottom=0)
    _legend(fig, ax)
    return _to_svg(fig, "step-timeline")


def rates_svg(report: "ReportData") -> Optional[str]:
    """Batches/s over time: what the consumer received (from the consumer timeline) and what the
    workers produced (from their recent-batch rings), with consumer demand and producer capacity
    as horizontal lines. ``None`` when the timeline holds fewer than 2 batches."""
    every = report.timeline.batches
    if len(every) < 2:
        return None
    batches = _thin(every)
    delivered_at = [b.start_at_s + b.wait_s for b in batches]
    weight = _weights(batches)
    span = (min(delivered_at), max(delivered_at))
    produced_at = [wb.end_at_s for wb in _thin(report.timeline.worker_batches)]
    if produced_at:
        span = (min(span[0], min(produced_at)), max(span[1], max(produced_at)))
    edges = _bin_edges(span, max(1, min(MAX_RATE_BINS, len(batches) // 4)))
    fig, ax = _figure(3.0)
    centers, received = _binned_rate(delivered_at, edges, weight)
    ax.step(centers, received, where="mid", color=COMPUTE_COLOR, linewidth=1.6,
            label="consumer received")
    if produced_at:
        thinned = len(report.timeline.worker_batches) / len(produced_at)
        centers_p, produced = _binned_rate(produced_at, edges, thinned)
        first, last = min(produced_at), max(produced_at)
        kept = [(c, r) for c, r in zip(centers_p, produced) if first <= c <= last]
        if kept:
            producer = "workers produced" if report.loader.num_workers else \
                "main process produced"
            ax.step([c for c, _ in kept], [r for _, r in kept], where="mid", color=FETCH_COLOR,
                    linewidth=1.2, linestyle="-", alpha=0.8, label=producer)
    demand = report.consumer.demand_batches_per_s
    capacity = report.producer.capacity_batches_per_s
    if _finite(demand):
        ax.axhline(demand, color=COMPUTE_COLOR, linestyle=":", linewidth=1.2,
                   label=f"consumer demand {demand:.3g} batches/s")
    if _finite(capacity):
        ax.axhline(capacity, color=FETCH_COLOR, linestyle="--", linewidth=1.2,
                   label=f"producer capacity {capacity:.3g} batches/s")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("rate (batches/s)")
    ax.set_ylim(bottom=0)
    _legend(fig, ax)
    return _to_svg(fig, "rates")


def workers_svg(report: "ReportData") -> Optional[str]:
    """Per-worker busy vs idle: left, busy (fetch, collate) and idle seconds over the run's wall
    time from the exact counters; right, each worker's recent batches as spans over time (from
    its ring). ``None`` when the report has no per-worker timing."""
    workers = report.producer.workers[:WORKER_BARS]
    if not workers:
        return None
    from matplotlib.figure import Figure

    names = [_worker_name(w.id) for w in workers]
    height = 1.2 + 0.35 * len(workers)
    fig = Figure(figsize=(WIDTH_IN, height), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1, 2])
    wall = report.consumer.wall_s
    rows = list(range(len(workers)))
    fetch = [w.fetch_s for w in workers]
    collate = [w.collate_s for w in workers]
    idle = [max(0.0, wall - w.busy_s) for w in workers]
    left.barh(rows, fetch, color=FETCH_COLOR, label="fetch")
    left.barh(rows, collate, left=fetch, color=COLLATE_COLOR, label="collate")
    left.barh(rows, idle, left=[f + c for f, c in zip(fetch, collate)], color=IDLE_COLOR,
              label="not producing")
    for row, worker in zip(rows, workers):
        share = worker.busy_s / wall if wall else None
        if share is not None:
            left.text(wall, row, f" {share * 100:.0f}% busy", va="center", fontsize=8)
    left.set_yticks(rows, [_plain(n) for n in names])
    left.invert_yaxis()
    left.set_xlabel("seconds over the run (s)")
    left.set_xlim(0, max(wall, 1e-9) * 1.3)
    _legend(fig, left)
    _worker_spans(right, _thin(report.timeline.worker_batches), [w.id for w in workers])
    return _to_svg(fig, "workers")


def host_cpu_svg(report: "ReportData") -> Optional[str]:
    """CPU over time from the host samples, in cores (psutil percent / 100): main process and
    workers, with the system's use of all cores on a second axis (percent). Each sample is the
    mean over the interval before it, so it is drawn as a step over that interval (a line
    between two samples would show a ramp nobody measured). ``None`` without host samples."""
    samples = _thin(report.timeline.host)
    if not samples:
        return None
    at = [s.at_s for s in samples]
    fig, ax = _figure(2.6)
    ax.plot(at, [s.main_cpu_percent / 100 for s in samples], color=MAIN_COLOR,
            marker=_dots(samples), drawstyle="steps-pre", label="main process")
    if any(s.workers_cpu_percent for s in samples) or report.loader.num_workers:
        ax.plot(at, [s.workers_cpu_percent / 100 for s in samples], color=WORKERS_COLOR,
                marker=_dots(samples), drawstyle="steps-pre", label="workers (all)")
    ax.set_ylabel("CPU (cores)")
    ax.set_xlabel("time since start (s)")
    ax.set_ylim(bottom=0)
    system = ax.twinx()
    system.plot(at, [s.system_cpu_percent for s in samples], color="#777777", linestyle="--",
                linewidth=1, drawstyle="steps-pre", label="system (all cores)")
    system.set_ylabel("system CPU (% of all cores)")
    system.set_ylim(0, 105)
    _legend(fig, ax, system)
    return _to_svg(fig, "host-cpu")


def host_io_svg(report: "ReportData") -> Optional[str]:
    """Bytes read per second over time (MB/s, 10^6 bytes): from storage (``read_bytes``) and
    including the page cache (``read_chars``), drawn as steps over each sample's interval.
    ``None`` when neither was measured."""
    samples = _thin(report.timeline.host)
    series = [
        ("read from storage", [s.read_bytes_per_s for s in samples], FETCH_COLOR),
        ("read incl. page cache", [s.read_chars_per_s for s in samples], COLLATE_COLOR),
    ]
    series = [(label, values, color) for label, values, color in series
              if any(v is not None for v in values)]
    if not samples or not series:
        return None
    at = [s.at_s for s in samples]
    fig, ax = _figure(2.4)
    for label, values, color in series:
        ax.plot(at, [math.nan if v is None else v / 1e6 for v in values], color=color,
                marker=_dots(samples), drawstyle="steps-pre", label=label)
    ax.set_ylabel("read (MB/s)")
    ax.set_xlabel("time since start (s)")
    ax.set_ylim(bottom=0)
    _legend(fig, ax)
    return _to_svg(fig, "host-io")


def host_memory_svg(report: "ReportData") -> Optional[str]:
    """Memory over time (MiB): main RSS, workers' RSS and PSS (when measured), and the system's
    available memory on a second axis (GiB), each value held until the next sample (steps).
    ``None`` without host samples."""
    samples = _thin(report.timeline.host)
    if not samples:
        return None
    at = [s.at_s for s in samples]
    fig, ax = _figure(2.6)
    ax.plot(at, [s.main_rss_bytes / _MIB for s in samples], color=MAIN_COLOR,
            marker=_dots(samples), drawstyle="steps-post", label="main RSS")
    if report.loader.num_workers or any(s.workers_rss_bytes for s in samples):
        ax.plot(at, [s.workers_rss_bytes / _MIB for s in samples], color=WORKERS_COLOR,
                marker=_dots(samples), drawstyle="steps-post", label="workers RSS (sum)")
        if any(s.workers_pss_bytes is not None for s in samples):
            ax.plot(at, [math.nan if s.workers_pss_bytes is None else s.workers_pss_bytes / _MIB
                         for s in samples], color=WORKERS_COLOR, linestyle="--",
                    marker=_dots(samples), drawstyle="steps-post", label="workers PSS (sum)")
    ax.set_ylabel("memory (MiB)")
    ax.set_xlabel("time since start (s)")
    ax.set_ylim(bottom=0)
    available = ax.twinx()
    available.plot(at, [s.available_memory_bytes / 1024**3 for s in samples], color="#777777",
                   linestyle=":", linewidth=1, drawstyle="steps-post",
                   label="system available")
    available.set_ylabel("available (GiB)")
    available.set_ylim(bottom=0)
    _legend(fig, ax, available)
    return _to_svg(fig, "host-memory")


def stress_svg(stress: Optional[StressSection]) -> Optional[str]:
    """The stress search: samples/s per configuration, measured trials as filled markers and the
    model's predictions as hollow ones (predicted before a measured trial ran, or for candidates
    it chose not to measure), one series per combination of the other settings that vary (e.g.
    ``prefetch_factor``); failed trials as crosses at 0. The x axis is ``num_workers`` when
    every trial has one, else the configurations in order. ``None`` without plottable trials."""
    trials = list(stress.trials[:STRESS_TRIALS]) if stress is not None else []
    configs = [t.config for t in trials]
    points = _stress_points(trials, configs)
    if not points:
        return None
    failed = [config for trial, config in zip(trials, configs) if trial.error]
    fig, ax = _figure(3.2)
    position = _stress_axis(ax, [c for c, _, _, _ in points] + failed)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    for i, name in enumerate(dict.fromkeys(s for _, s, _, _ in points)):
        color = colors[i % len(colors)]
        for measured in (True, False):
            chosen = [(position(c), r) for c, s, r, m in points if s == name and m == measured]
            if not chosen:
                continue
            kind = "measured" if measured else "predicted"
            ax.scatter([x for x, _ in chosen], [r for _, r in chosen], s=46 if measured else 60,
                       marker="o", facecolors=color if measured else "none", edgecolors=color,
                       linewidths=1.4, label=_plain(f"{kind}, {name}" if name else kind),
                       zorder=3)
    if failed:
        ax.scatter([position(c) for c in failed], [0] * len(failed), marker="x", s=50,
                   color=WAIT_COLOR, label="failed", zorder=3, clip_on=False)
    best = stress.best if stress is not None else None
    best_rate = best.samples_per_s if best is not None else None
    if best_rate is not None:
        ax.axhline(best_rate, color="#555555", linestyle=":", linewidth=1, label="best measured")
    ax.set_ylabel("throughput (samples/s)")
    ax.margins(y=0.12)  # headroom: the best point sits at the top
    ax.set_ylim(bottom=0)
    _legend(fig, ax)
    return _to_svg(fig, "stress")


# -- helpers -------------------------------------------------------------------------------------


STAGE_BARS = 10
"""Stages drawn in the stage chart, most exclusive time first."""


def stages_svg(rows: Sequence[StageRow]) -> Optional[str]:
    """Exclusive seconds per pipeline stage (``producer.stages`` rows), most first, coloured by
    where the stage ran (workers or main process), each bar labelled with its share of that
    place's stage time. ``None`` when no stage was timed."""
    rows = [r for r in rows if _number(r.exclusive_s) is not None][:STAGE_BARS]
    if not rows:
        return None
    fig, ax = _figure(1.0 + 0.3 * len(rows))
    positions = list(range(len(rows)))
    colors = [FETCH_COLOR if r.where == "workers" else COLLATE_COLOR for r in rows]
    values = [float(r.exclusive_s) for r in rows]
    ax.barh(positions, values, color=colors)
    for position, row, value in zip(positions, rows, values):
        share = _number(row.fraction)
        if share is not None:
            ax.text(value, position, f" {share * 100:.0f}% of {row.where}",
                    va="center", fontsize=8)
    ax.set_yticks(positions, [_plain(f"{r.name} ({r.where})") for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("exclusive time (s)")
    ax.set_xlim(0, max(values) * 1.35 or 1.0)
    return _to_svg(fig, "stages")


def _figure(height_in: float) -> tuple["Figure", "Axes"]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, height_in), layout="constrained")
    ax = fig.subplots()
    ax.grid(True, color="#eeeeee", linewidth=0.8)
    ax.set_axisbelow(True)
    return fig, ax


def _to_svg(fig: "Figure", name: str) -> str:
    """The figure as one ``<svg>`` element (XML prologue dropped), ids salted with ``name`` so
    several charts can share a page, and no creation date (the same report gives the same
    text)."""
    import matplotlib
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    FigureCanvasSVG(fig)
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"pipecheck-{name}"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None}, dpi=RASTER_DPI)
    text = buffer.getvalue()
    match = _SVG_START.search(text)
    if match is None:  # matplotlib always writes one; guard against a future format change
        raise RuntimeError("matplotlib produced no <svg> element")
    # Element ids (figure_1, axes_1, ...) repeat from chart to chart; in one HTML document they
    # must be unique, so each chart's ids and references to them get the chart's name.
    return _ID_REFERENCE.sub(rf"\1{name}-", text[match.start():].strip())


def _plain(text: str) -> str:
    """``text`` for a matplotlib label, shown literally: ``$`` would start mathtext; control
    characters as escapes (:func:`pipecheck.render.inert.visible`)."""
    return visible(text, keep_newlines=False).replace("$", r"\$")


def _thin(entries: Sequence[T]) -> Sequence[T]:
    """``entries``, or an evenly spaced sample of at most :data:`CHART_POINTS` of them."""
    return thin(entries, CHART_POINTS)


def _dots(samples: Sequence[Any]) -> Optional[str]:
    """The marker for a host series of ``samples``: a dot each, or none past
    :data:`MARKED_SAMPLES`."""
    return "." if len(samples) <= MARKED_SAMPLES else None


def _finite(value: Optional[float]) -> TypeGuard[float]:
    return value is not None and math.isfinite(value) and value > 0


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _epoch_starts(batches: Sequence["BatchTiming"]) -> list[int]:
    starts, last = [], None
    for batch in batches:
        if batch.epoch != last:
            starts.append(batch.index)
            last = batch.epoch
    return starts


def _stride(batches: Sequence["BatchTiming"]) -> int:
    """The gcd of the index gaps (1 when every batch was kept)."""
    stride = 0
    for previous, current in zip(batches, batches[1:]):
        stride = math.gcd(stride, current.index - previous.index)
    return max(1, stride)


def _weights(batches: Sequence["BatchTiming"]) -> list[int]:
    """Batches each kept timeline entry stands for: itself and the untimed or unkept ones up
    to the next entry (the timeline's stride, and a fast loop's sparse stretches), the last
    entry the smallest gap's worth (:func:`_stride`)."""
    gaps = [current.index - previous.index for previous, current in zip(batches, batches[1:])]
    return [max(1, gap) for gap in gaps] + [_stride(batches)]


def _bin_edges(span: tuple[float, float], bins: int) -> list[float]:
    start, end = span
    if end <= start:
        end = start + 1e-3
    width = (end - start) / bins
    return [start + i * width for i in range(bins + 1)]


def _binned_rate(times: Sequence[float], edges: Sequence[float],
                 weight: float | Sequence[int]) -> tuple[list[float], list[float]]:
    """Events per second in each bin (each event counting ``weight``, or its own entry of
    ``weight``), and the bin centres."""
    counts: list[float] = [0] * (len(edges) - 1)
    first, width = edges[0], edges[1] - edges[0]
    weights = [weight] * len(times) if isinstance(weight, (int, float)) else weight
    for t, w in zip(times, weights):
        slot = min(len(counts) - 1, max(0, int((t - first) / width)))
        counts[slot] += w
    centers = [first + (i + 0.5) * width for i in range(len(counts))]
    return centers, [c / width for c in counts]


def _worker_name(worker_id: int) -> str:
    return "main process" if worker_id == -1 else f"worker {worker_id}"


def _worker_spans(ax: "Axes", batches: Sequence["WorkerBatch"], ids: list[int]) -> None:
    """Each recent batch of each worker as a fetch span then a collate span on its own row."""
    rows = {worker_id: row for row, worker_id in enumerate(ids)}
    fetch: dict[int, list[tuple[float, float]]] = {}
    collate: dict[int, list[tuple[float, float]]] = {}
    for batch in batches:
        if batch.worker_id not in rows:
            continue
        end = batch.end_at_s
        collate_start = end - batch.collate_s
        fetch_start = max(0.0, collate_start - batch.fetch_s)
        fetch.setdefault(batch.worker_id, []).append((fetch_start, collate_start - fetch_start))
        collate.setdefault(batch.worker_id, []).append((collate_start, batch.collate_s))
    dense = 2 * len(batches) > MAX_VECTOR_SHAPES
    for worker_id, row in rows.items():
        if worker_id in fetch:
            ax.broken_barh(fetch[worker_id], (row - 0.35, 0.7), facecolors=FETCH_COLOR,
                           rasterized=dense)
            ax.broken_barh(collate[worker_id], (row - 0.35, 0.7), facecolors=COLLATE_COLOR,
                           rasterized=dense)
    ax.set_yticks(list(rows.values()), [_plain(_worker_name(i)) for i in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("time since start (s)")
    ax.set_title("recent batches per worker (fetch, collate)", fontsize=9)
    ax.grid(True, axis="x", color="#eeeeee", linewidth=0.8)
    ax.set_axisbelow(True)
    if not fetch:
        ax.text(0.5, 0.5, "no batch records", transform=ax.transAxes, ha="center", fontsize=9)


def _legend(fig: "Figure", *axes: "Axes") -> None:
    """One legend for ``axes``, above the plot area (outside it, so it never hides data), with
    as many columns as fit the figure's width (a legend wider than the figure is cut off)."""
    handles: list[Any] = []
    labels: list[str] = []
    for ax in axes:
        more_handles, more_labels = ax.get_legend_handles_labels()
        handles += more_handles
        labels += more_labels
    if handles:
        widest = max(len(label) for label in labels)
        fits = int(WIDTH_IN * 72 // (widest * LEGEND_CHAR_PT + LEGEND_HANDLE_PT))
        fig.legend(handles, labels, loc="outside upper left", fontsize=8, frameon=False,
                   ncol=max(1, min(4, len(handles), fits)))


def _stress_points(trials: Sequence[SweepTrial],
                   configs: Sequence[dict[str, Any]]) -> list[tuple[dict, str, float, bool]]:
    """``(config, series, samples/s, measured?)`` per plottable figure: a measured trial gives
    its measurement and, when the search predicted it first, that prediction too."""
    varying = _varying_settings(configs)
    points = []
    for trial, config in zip(trials, configs):
        series = _series_label(config, varying)
        rate = trial.samples_per_s
        predicted = trial.predicted_samples_per_s
        if trial.measured:
            if rate is not None:
                points.append((config, series, rate, True))
            if predicted is not None:
                points.append((config, series, predicted, False))
        elif (figure := rate if rate is not None else predicted) is not None:
            points.append((config, series, figure, False))
    return points


def _stress_axis(ax: "Axes", configs: Sequence[dict[str, Any]]) -> Any:
    """Set up the x axis for ``configs`` and return ``config -> x``: ``num_workers`` when every
    config has an integer one, else one labelled slot per distinct configuration."""
    if all(_is_count(c.get("num_workers")) for c in configs):
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("num_workers")
        return lambda config: config["num_workers"]
    labels = list(dict.fromkeys(config_text(c) for c in configs))
    ax.set_xticks(range(len(labels)), [_plain(t) for t in labels], rotation=20, ha="right",
                  fontsize=7)
    ax.set_xlabel("configuration")
    return lambda config: labels.index(config_text(config))


def _varying_settings(configs: Sequence[dict[str, Any]]) -> list[str]:
    """Settings other than ``num_workers`` that take more than one non-``None`` value."""
    names = list(dict.fromkeys(k for c in configs for k in c if k != "num_workers"))
    return [n for n in names
            if len({repr(c.get(n)) for c in configs if c.get(n) is not None}) > 1]


def _series_label(config: dict[str, Any], varying: Sequence[str]) -> str:
    """The series a trial belongs to: its values of the ``varying`` settings (``None`` left
    out, so ``num_workers=0``, which has no ``prefetch_factor``, joins the unlabelled series)."""
    return " ".join(f"{k}={config[k]!r}" for k in varying if config.get(k) is not None)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


CHARTS: dict[str, Callable[["ReportData"], Optional[str]]] = {
    "step_timeline": step_timeline_svg,
    "rates": rates_svg,
    "workers": workers_svg,
    "host_cpu": host_cpu_svg,
    "host_io": host_io_svg,
    "host_memory": host_memory_svg,
    "stress": lambda report: stress_svg(report.stress),
    "stages": lambda report: stages_svg(report.producer.stages or []),
}
"""The charts a :class:`~pipecheck.render.model.Chart` block can name, each a function of the
report returning ``<svg>`` text or ``None`` when the report lacks its data."""
