"""The report's timeline as a Chrome Trace Event Format file, for Perfetto and chrome://tracing.

How it works, and why: docs/internals.md (``pipecheck/render/trace.py``).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from typing import TYPE_CHECKING, Any, Optional, Sequence

from pipecheck.kinds import MAIN
from pipecheck.render.base import Renderer
from pipecheck.render.model import thin

if TYPE_CHECKING:
    from pipecheck.records import BatchTiming, HostSample, WorkerBatch
    from pipecheck.report_data import ReportData

MAIN_PID = 1
"""Track id of the training loop's process in the trace."""
WORKERS_PID = 2
"""Track id of the DataLoader workers' process in the trace."""
CONSUMER_TID = 1
EPOCHS_TID = 2
MAIN_LOADER_TID = 3
TRACE_ENTRIES = 40_000
"""Most entries of one timeline (consumer batches, epochs, worker batches, host samples) the
trace holds: above the 16,383 consumer batches, 32 x 1,024 worker batches and 2,048 host
samples pipecheck keeps; a longer timeline is thinned evenly."""

_US = 1e6
_MIB = 1024**2


def trace_events(report: "ReportData") -> dict[str, Any]:
    """The trace as a JSON-ready dict in the Trace Event Format's JSON Object Format: complete
    events (``ph: "X"``, ``ts`` and ``dur`` in microseconds), metadata events (``ph: "M"``)
    naming processes and threads, and counter events (``ph: "C"``). Raises nothing for any
    report :meth:`pipecheck.Report.from_dict` accepts."""
    events: list[Optional[dict[str, Any]]] = []
    timeline = report.timeline
    kept = {name: thin(getattr(timeline, name), TRACE_ENTRIES)
            for name in ("batches", "epochs", "worker_batches", "host")}
    main_pid = _main_os_pid(report)
    events.extend(_process_name(MAIN_PID, "training loop (main process"
                                + (f", pid {main_pid})" if main_pid else ")"), 0))
    events.append(_thread_name(MAIN_PID, CONSUMER_TID, "consumer (wait / compute)"))
    events.extend(_consumer_spans(kept["batches"]))
    if kept["epochs"]:
        events.append(_thread_name(MAIN_PID, EPOCHS_TID, "epochs"))
        for epoch in kept["epochs"]:
            events.append(_span(f"epoch {epoch.epoch}", "epoch", MAIN_PID, EPOCHS_TID,
                                epoch.started_at_s, epoch.wall_s,
                                {"batches": epoch.batches, "ended": epoch.ended}))
    events.extend(_worker_spans(report, kept["worker_batches"]))
    events.extend(_counters(kept["host"]))
    thinned = {name: f"{len(kept[name]):,} of {len(getattr(timeline, name)):,} entries"
               for name in kept if len(kept[name]) < len(getattr(timeline, name))}
    other = {
        "generator": f"pipecheck {report.environment.pipecheck or ''}".strip(),
        "report_kind": report.kind,
        "created": report.created,
        "verdict": report.diagnosis.verdict,
        "batches_in_run": report.consumer.batches,
        "batches_in_trace": len(kept["batches"]),
        "worker_batches_in_trace": len(kept["worker_batches"]),
        "note": "ts/dur in microseconds since the run started; the consumer timeline keeps "
                "every batch up to 8192, then an evenly spaced sample",
    }
    if thinned:
        other["thinned"] = thinned
    return {
        "traceEvents": [event for event in events if event is not None],
        "displayTimeUnit": "ms",
        "otherData": other,
    }


def render_trace(report: "ReportData") -> str:
    """:func:`trace_events` as compact JSON text (UTF-8, no NaN)."""
    return json.dumps(trace_events(report), separators=(",", ":"), allow_nan=False,
                      ensure_ascii=False)


def save_trace(report: "ReportData", path: str | os.PathLike[str]) -> pathlib.Path:
    """Write :func:`render_trace` to ``path`` atomically and return the path. Raises
    :class:`~pipecheck.errors.BadInputError` when the file cannot be written."""
    return TraceRenderer().save(report, path)


class TraceRenderer(Renderer):
    """The Chrome Trace Event Format timeline (:func:`render_trace`)."""

    name = "trace"
    what = "trace"
    to_file = True

    def render(self, report: "ReportData") -> str:
        return render_trace(report)


# -- events --------------------------------------------------------------------------------------


def _consumer_spans(batches: Sequence["BatchTiming"]) -> list[Optional[dict[str, Any]]]:
    events = []
    for batch in batches:
        args = {"batch": batch.index, "epoch": batch.epoch, "samples": batch.samples}
        events.append(_span("wait", "data-wait", MAIN_PID, CONSUMER_TID, batch.start_at_s,
                            batch.wait_s, args))
        if batch.compute_s is not None:
            events.append(_span("compute", "compute", MAIN_PID, CONSUMER_TID,
                                batch.start_at_s + batch.wait_s, batch.compute_s, args))
    return events


def _worker_spans(report: "ReportData", batches: Sequence["WorkerBatch"]
                  ) -> list[Optional[dict[str, Any]]]:
    if not batches:
        return []
    pids = {w.id: w.pid for w in report.producer.workers}
    events: list[Optional[dict[str, Any]]] = []
    ids = sorted({b.worker_id for b in batches})
    if any(i >= 0 for i in ids):
        events.extend(_process_name(WORKERS_PID, "DataLoader workers", 1))
    for worker_id in ids:
        pid, tid = _worker_track(worker_id)
        pid_note = f" (pid {pids[worker_id]})" if worker_id in pids else ""
        name = "loader (main process)" if worker_id < 0 else f"worker {worker_id}{pid_note}"
        events.append(_thread_name(pid, tid, name))
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"sort_index": tid}})
    for batch in batches:
        pid, tid = _worker_track(batch.worker_id)
        collate_start = batch.end_at_s - batch.collate_s
        fetch_start = max(0.0, collate_start - batch.fetch_s)
        args = {"samples": batch.samples}
        events.append(_span("fetch", "fetch", pid, tid, fetch_start,
                            collate_start - fetch_start, args))
        events.append(_span("collate", "collate", pid, tid, collate_start, batch.collate_s, args))
    return events


def _counters(samples: Sequence["HostSample"]) -> list[dict[str, Any]]:
    events = []
    for sample in samples:
        ts = _us(sample.at_s)
        events.append(_counter("CPU (cores)", ts, {
            "main": sample.main_cpu_percent / 100, "workers": sample.workers_cpu_percent / 100}))
        memory = {"main RSS": sample.main_rss_bytes / _MIB,
                  "workers RSS": sample.workers_rss_bytes / _MIB}
        if sample.workers_pss_bytes is not None:
            memory["workers PSS"] = sample.workers_pss_bytes / _MIB
        events.append(_counter("memory (MiB)", ts, memory))
        reads = {name: value / 1e6 for name, value in (
            ("storage", sample.read_bytes_per_s), ("incl. page cache", sample.read_chars_per_s))
            if value is not None}
        if reads:
            events.append(_counter("read (MB/s)", ts, reads))
    return events


# -- event constructors --------------------------------------------------------------------------


def _us(seconds: float) -> float:
    """Seconds to microseconds, rounded to 0.001 us (keeps the file short)."""
    return round(seconds * _US, 3)


def _span(name: str, category: str, pid: int, tid: int, start_s: float, duration_s: float,
          args: dict[str, Any]) -> Optional[dict[str, Any]]:
    """A complete event; a start before the run (a worker's first fetch) is clamped to 0.
    ``None`` for a non-finite time, which JSON cannot hold (and which is no measurement)."""
    if not (math.isfinite(start_s) and math.isfinite(duration_s)):
        return None
    return {"name": name, "cat": category, "ph": "X", "ts": _us(max(0.0, start_s)),
            "dur": _us(max(0.0, duration_s)), "pid": pid, "tid": tid, "args": args}


def _counter(name: str, ts: float, values: dict[str, float]) -> dict[str, Any]:
    """A counter event; non-finite values are left out (JSON cannot hold them)."""
    return {"name": name, "ph": "C", "ts": ts, "pid": MAIN_PID, "tid": 0,
            "args": {k: round(v, 3) for k, v in values.items() if math.isfinite(v)}}


def _process_name(pid: int, name: str, sort_index: int) -> list[dict[str, Any]]:
    return [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}},
            {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
             "args": {"sort_index": sort_index}}]


def _thread_name(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def _worker_track(worker_id: int) -> tuple[int, int]:
    """``(pid, tid)`` of a worker's track: the main process's loader thread for id -1."""
    if worker_id < 0:
        return MAIN_PID, MAIN_LOADER_TID
    return WORKERS_PID, worker_id + 1


def _main_os_pid(report: "ReportData") -> Optional[int]:
    if report.host is not None:
        for process in report.host.processes:
            if process.role == MAIN:
                return process.pid
    return None
