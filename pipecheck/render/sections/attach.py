"""The ``attach`` section of a report (``pipecheck attach PID``): the stall estimate with its
interval, the window, the workers seen (a table) and what cannot be known without wrapping. It
replaces the Throughput, Data wait and Producer vs consumer sections, which need batch timing.
Values come from the saved JSON, so every key is read defensively (a missing or mistyped value
shows as ``n/a``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from pipecheck import units as fmt
from pipecheck.render.model import Block, Note, Section, line, table

if TYPE_CHECKING:
    from pipecheck.report import Report

TITLE = "Attached (py-spy + psutil, not wrapped)"

WORKER_HEADERS = ["pid", "busy", "busy 95%", "CPU / busy s", "class", "USS peak",
                  "USS growth"]
"""Columns of :func:`worker_rows`."""


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _interval(value: Any) -> str:
    if isinstance(value, list) and len(value) == 2:
        low, high = _number(value[0]), _number(value[1])
        if low is not None and high is not None:
            return f"{fmt.percent(low)}-{fmt.percent(high)}"
    return fmt.NOT_MEASURED


def _growth(rate: Any, significant: Any) -> str:
    value = _number(rate)
    if value is None:
        return fmt.NOT_MEASURED
    verdict = "growing" if significant is True else "not significant"
    return f"{fmt.size(value)}/s ({verdict})"


def attach_facts(section: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, value)`` rows: the stall estimate with its interval, the window, the workers
    seen and the main process's memory growth."""
    samples, inside = section.get("main_thread_samples"), section.get("next_samples")
    workers = section.get("num_workers")
    workers_text = (fmt.NOT_MEASURED if not isinstance(workers, int)
                    else "none seen (num_workers=0, or none alive)" if workers == 0
                    else f"{workers} seen running torch's worker loop")
    if section.get("workers_class"):
        workers_text += f"; mostly {section['workers_class']}"
    return [
        ("data stall (estimate)",
         f"{fmt.percent(_number(section.get('stall_fraction')))}, 95% interval "
         f"{_interval(section.get('stall_interval'))}: {inside} of {samples} main-thread "
         "samples inside the DataLoader's __next__"),
        ("interval", str(section.get("interval_method") or fmt.NOT_MEASURED)),
        ("window", f"PID {section.get('pid')} · {fmt.seconds(_number(section.get('duration_s')))} "
                   f"at {section.get('rate_hz')} Hz · {section.get('status')}"),
        ("workers", workers_text),
        ("main process memory", _growth(section.get("main_memory_growth_bytes_per_s"),
                                        section.get("main_memory_growth_significant"))),
        ("batch rate", fmt.NOT_MEASURED + " (not knowable from stack samples)"),
    ]


def worker_rows(section: dict[str, Any]) -> list[list[str]]:
    """One row per worker seen, in :data:`WORKER_HEADERS` order."""
    rows = []
    for worker in section.get("workers") or []:
        if not isinstance(worker, dict):
            continue
        cpu = _number(worker.get("cpu_fraction"))
        rows.append([
            str(worker.get("pid")),
            fmt.percent(_number(worker.get("busy_fraction"))),
            _interval(worker.get("busy_interval")),
            fmt.NOT_MEASURED if cpu is None else f"{cpu:.2f} s",
            str(worker.get("bound") or fmt.NOT_MEASURED),
            fmt.size(_number(worker.get("uss_max_bytes"))),
            _growth(worker.get("memory_growth_bytes_per_s"),
                    worker.get("memory_growth_significant")),
        ])
    return rows


def unknown_lines(section: dict[str, Any]) -> list[str]:
    """What cannot be known without wrapping, one item a line."""
    return [str(item) for item in section.get("unknown") or []]


def attach(report: "Report") -> Optional[Section]:
    """The section of an attach report; ``None`` for any other report."""
    section = report.attach
    if not isinstance(section, dict):
        return None
    blocks: list[Block] = [line((label, value)) for label, value in attach_facts(section)]
    rows = worker_rows(section)
    if rows:
        blocks.append(table(WORKER_HEADERS, rows, right=(1, 2, 3, 5, 6)))
    unknown = unknown_lines(section)
    if unknown:
        blocks.append(Note("cannot be known without wrapping:", "dim"))
        blocks += [Note(f"- {item}") for item in unknown]
    return Section("attach", TITLE, tuple(blocks))
