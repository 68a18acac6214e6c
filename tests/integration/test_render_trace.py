"""Chrome trace: every event has the Trace Event Format's required fields for its phase, spans
match the batches the report recorded, one track per worker, counters from the host samples."""

from __future__ import annotations

import collections
import dataclasses
import json
import numbers

from pipecheck.records import BatchTiming, WorkerBatch
from pipecheck.render.trace import MAIN_PID, WORKERS_PID, render_trace, save_trace, trace_events
from render_fixtures import real_report
from report_factory import sample_report

# Required fields per phase (Trace Event Format, "JSON Object Format" and each event type).
REQUIRED = {
    "X": {"name": str, "cat": str, "ph": str, "ts": numbers.Real, "dur": numbers.Real,
          "pid": int, "tid": int},
    "M": {"name": str, "ph": str, "pid": int, "args": dict},
    "C": {"name": str, "ph": str, "ts": numbers.Real, "pid": int, "args": dict},
}
METADATA_NAMES = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


def validate(trace: dict) -> None:
    """Assert ``trace`` is a valid JSON Object Format trace of the phases pipecheck writes."""
    assert isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit") in (None, "ms", "ns")
    for event in trace["traceEvents"]:
        fields = REQUIRED[event["ph"]]
        for key, kind in fields.items():
            assert isinstance(event.get(key), kind), (key, event)
        if event["ph"] == "X":
            assert event["ts"] >= 0 and event["dur"] >= 0, event
        if event["ph"] == "M":
            assert event["name"] in METADATA_NAMES, event
            expected = "sort_index" if event["name"].endswith("sort_index") else "name"
            assert list(event["args"]) == [expected], event
        if event["ph"] == "C":
            assert event["args"] and all(isinstance(v, numbers.Real)
                                         for v in event["args"].values()), event


def _spans(trace: dict) -> collections.Counter:
    return collections.Counter(e["cat"] for e in trace["traceEvents"] if e["ph"] == "X")


def _thread_names(trace: dict) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def test_real_run_spans_equal_the_recorded_batches():
    report = real_report()
    trace = json.loads(render_trace(report))  # strict JSON text, parsed back
    validate(trace)
    batches = report.timeline.batches
    assert len(batches) == report.consumer.batches == 48  # not decimated below 8192 batches
    spans = _spans(trace)
    assert spans["data-wait"] == len(batches)
    assert spans["compute"] == sum(1 for b in batches if b.compute_s is not None)
    assert spans["fetch"] == spans["collate"] == len(report.timeline.worker_batches) == 48
    assert spans["epoch"] == 2
    names = _thread_names(trace)
    assert {k: v.split(" (")[0] for k, v in names.items() if k[0] == WORKERS_PID} == {
        (WORKERS_PID, 1): "worker 0", (WORKERS_PID, 2): "worker 1"}
    per_worker = collections.Counter(e["tid"] for e in trace["traceEvents"]
                                     if e["ph"] == "X" and e["cat"] == "fetch")
    assert per_worker == {1: 24, 2: 24}
    counters = collections.Counter(e["name"] for e in trace["traceEvents"] if e["ph"] == "C")
    assert counters["CPU (cores)"] == counters["memory (MiB)"] == len(report.timeline.host) > 0
    assert trace["otherData"]["batches_in_run"] == trace["otherData"]["batches_in_trace"] == 48


def test_spans_follow_the_batch_timing_in_microseconds():
    report = sample_report()
    events = trace_events(report)["traceEvents"]
    waits = [e for e in events if e["ph"] == "X" and e["cat"] == "data-wait"]
    computes = [e for e in events if e["ph"] == "X" and e["cat"] == "compute"]
    first = report.timeline.batches[1]
    assert waits[1]["ts"] == 100_000 and waits[1]["dur"] == 40_000  # 0.1 s start, 0.04 s wait
    assert computes[1]["ts"] == 140_000 and computes[1]["dur"] == 50_000
    assert waits[1]["args"] == {"batch": first.index, "epoch": 0, "samples": 32}
    assert {(e["pid"], e["tid"]) for e in waits} == {(MAIN_PID, 1)}
    fetch = [e for e in events if e["ph"] == "X" and e["cat"] == "fetch"]
    collate = [e for e in events if e["ph"] == "X" and e["cat"] == "collate"]
    # worker 1's first batch ended at 0.1 s after 0.19 s fetch + 0.01 s collate: fetch is
    # clamped at the run start, collate ends at the record's end time
    assert collate[1]["ts"] + collate[1]["dur"] == 100_000 and fetch[1]["ts"] == 0


def test_decimated_timeline_gives_one_span_per_kept_batch():
    # Above 8192 batches the consumer keeps every k-th batch; the trace holds exactly those.
    kept = [BatchTiming(index=i, epoch=0, start_at_s=0.01 * i, wait_s=0.001, compute_s=0.008,
                        samples=8) for i in range(0, 20_000, 4)]
    report = sample_report()
    report = dataclasses.replace(report, timeline=dataclasses.replace(report.timeline,
                                                                      batches=kept))
    report = dataclasses.replace(report, consumer=dataclasses.replace(report.consumer,
                                                                      batches=20_000))
    trace = trace_events(report)
    validate(trace)
    assert _spans(trace)["data-wait"] == _spans(trace)["compute"] == 5_000
    assert trace["otherData"]["batches_in_run"] == 20_000
    assert trace["otherData"]["batches_in_trace"] == 5_000


def test_main_process_loading_gets_its_own_thread():
    batches = [WorkerBatch(worker_id=-1, end_at_s=0.1 * (i + 1), fetch_s=0.05, collate_s=0.01,
                           samples=32) for i in range(5)]
    report = sample_report()
    report = dataclasses.replace(report, timeline=dataclasses.replace(report.timeline,
                                                                      worker_batches=batches))
    trace = trace_events(report)
    validate(trace)
    assert _thread_names(trace)[(MAIN_PID, 3)] == "loader (main process)"
    assert not any(e["pid"] == WORKERS_PID for e in trace["traceEvents"])
    assert _spans(trace)["fetch"] == 5


def test_empty_report_is_still_a_valid_trace(tmp_path):
    from pipecheck.records import Timeline

    report = sample_report(timeline=Timeline(), host=None)
    path = save_trace(report, tmp_path / "run.trace.json")
    trace = json.loads(path.read_text(encoding="utf-8"))
    validate(trace)
    assert not _spans(trace)
