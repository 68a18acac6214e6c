"""The ``attach`` section of a report (``pipecheck attach PID``): the stall estimate with its
interval, the window, the workers seen (a table) and what cannot be known without wrapping. It
replaces the Throughput, Data wait and Producer vs consumer sections, which need batch timing.
Values come from the typed :class:`~pipecheck.report_sections.AttachSection` (checked on load);
an unmeasured value shows as ``n/a``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pipecheck import units as fmt
from pipecheck.render.model import Block, Note, Section, capped, line, more, table
from pipecheck.report_sections import AttachSection

if TYPE_CHECKING:
    from pipecheck.report_data import ReportData

TITLE = "Attached (py-spy + psutil, not wrapped)"

WORKER_ROWS = 64
"""Worker rows shown, in the report's order."""

UNKNOWN_LINES = 20
"""Lines of what cannot be known without wrapping shown (pipecheck writes a handful)."""

WORKER_HEADERS = ["pid", "busy", "busy 95%", "CPU / busy s", "class", "USS peak",
                  "USS growth"]
"""Columns of :func:`worker_rows`."""


def _interval(value: Optional[list[float]]) -> str:
    if value is not None and len(value) == 2:
        low, high = value
        return f"{fmt.percent(low)}-{fmt.percent(high)}"
    return fmt.NOT_MEASURED


def _growth(rate: Optional[float], significant: Optional[bool]) -> str:
    """A memory slope (bytes/s, Theil-Sen) in words: ``growing 2.00 MiB/s``, ``shrinking 7.81
    MiB/s`` (a negative slope is no growth), each with whether it is significant."""
    if rate is None:
        return fmt.NOT_MEASURED
    direction = "growing" if rate > 0 else "shrinking" if rate < 0 else "flat"
    verdict = "significant" if significant is True else "not significant"
    if rate == 0:
        return f"flat ({verdict})"
    return f"{direction} {fmt.size(abs(rate))}/s ({verdict})"


def attach_facts(section: AttachSection) -> list[tuple[str, str]]:
    """``(label, value)`` rows: the stall estimate with its interval, the window, the workers
    seen and the main process's memory growth."""
    samples, inside = section.main_thread_samples, section.next_samples
    workers = section.num_workers
    workers_text = (fmt.NOT_MEASURED if workers is None
                    else "none seen (num_workers=0, or none alive)" if workers == 0
                    else f"{workers} seen running torch's worker loop")
    if section.workers_class:
        workers_text += f"; mostly {section.workers_class}"
    return [
        ("data stall (estimate)",
         f"{fmt.percent(section.stall_fraction)}, 95% interval "
         f"{_interval(section.stall_interval)}: {inside} of {samples} main-thread "
         "samples inside the DataLoader's __next__"),
        ("interval", section.interval_method or fmt.NOT_MEASURED),
        ("window", f"PID {section.pid} · {fmt.seconds(section.duration_s)} "
                   f"at {section.rate_hz} Hz · {section.status}"),
        ("workers", workers_text),
        ("main process memory", _growth(section.main_memory_growth_bytes_per_s,
                                        section.main_memory_growth_significant)),
        ("batch rate", fmt.NOT_MEASURED + " (not knowable from stack samples)"),
    ]


def worker_rows(section: AttachSection, limit: Optional[int] = None) -> list[list[str]]:
    """One row per worker seen (the first ``limit`` when given), in :data:`WORKER_HEADERS`
    order."""
    rows = []
    for worker in section.workers[:limit]:
        cpu = worker.cpu_fraction
        rows.append([
            str(worker.pid),
            fmt.percent(worker.busy_fraction),
            _interval(worker.busy_interval),
            fmt.NOT_MEASURED if cpu is None else f"{cpu:.2f} s",
            str(worker.bound or fmt.NOT_MEASURED),
            fmt.size(worker.uss_max_bytes),
            _growth(worker.memory_growth_bytes_per_s, worker.memory_growth_significant),
        ])
    return rows


def unknown_lines(section: AttachSection) -> list[str]:
    """What cannot be known without wrapping, one item a line."""
    return [str(item) for item in section.unknown]


def attach(report: "ReportData") -> Optional[Section]:
    """The section of an attach report; ``None`` for any other report."""
    section = report.attach
    if section is None:
        return None
    blocks: list[Block] = [line((label, value)) for label, value in attach_facts(section)]
    rows = worker_rows(section, WORKER_ROWS)
    if rows:
        blocks.append(table(WORKER_HEADERS, rows, right=(1, 2, 3, 5, 6)))
    if len(section.workers) > len(rows):
        blocks.append(more(len(section.workers) - len(rows), "workers"))
    unknown, hidden = capped(unknown_lines(section), UNKNOWN_LINES)
    if unknown:
        blocks.append(Note("cannot be known without wrapping:", "dim"))
        blocks += [Note(f"- {item}") for item in unknown]
    if hidden:
        blocks.append(more(hidden, "lines"))
    return Section("attach", TITLE, tuple(blocks))
