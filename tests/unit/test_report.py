"""Report: JSON contract, round trip, atomic save, load errors, build_report assembly."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import types

import pytest

from pipecheck.errors import BadInputError, ReportFormatError
from pipecheck.records import (
    BatchTiming,
    ConsumerRecord,
    EpochTiming,
    Expected,
    HostRecord,
    HostSample,
    Recommendation,
    RunRecord,
    WorkerBatch,
    WorkerRecord,
)
from pipecheck.report import KEY_ORDER, SCHEMA, Report, build_report, load
from report_factory import replace_consumer, sample_report, stress_of

NUMBER = (int, float)
OPTIONAL_NUMBER = (int, float, type(None))


# -- JSON contract -------------------------------------------------------------------------------


def test_to_dict_keys_are_in_contract_order():
    data = sample_report().to_dict()
    assert tuple(data) == KEY_ORDER
    assert data["schema"] == SCHEMA == "pipecheck.report/1"


def _check(obj: dict, types_by_key: dict, where: str) -> None:
    for key, expected in types_by_key.items():
        assert key in obj, f"{where}.{key} missing"
        value = obj[key]
        assert isinstance(value, expected) and not (
            isinstance(value, bool) and bool not in _as_tuple(expected)
        ), f"{where}.{key} = {value!r} is not {expected}"


def _as_tuple(expected):
    return expected if isinstance(expected, tuple) else (expected,)


def test_json_has_every_contract_key_with_its_type():
    """Every key docs/architecture.md lists as contract, with the JSON type a reader may rely on."""
    data = json.loads(sample_report().to_json())
    _check(data, {"schema": str, "kind": str, "environment": dict, "loader": dict,
                  "consumer": dict, "producer": dict, "diagnosis": dict,
                  "recommendations": list}, "report")
    assert data["kind"] in ("wrap", "stress")
    assert data["stress"] is None or isinstance(data["stress"], dict)
    _check(data["environment"], {"cpu_count": int, "python": str, "torch": (str, type(None)),
                                 "platform": str, "cuda": bool}, "environment")
    _check(data["loader"], {"type": str, "num_workers": (int, type(None)),
                            "prefetch_factor": (int, type(None)),
                            "batch_size": (int, type(None)),
                            "pin_memory": (bool, type(None)),
                            "persistent_workers": (bool, type(None))}, "loader")
    consumer = data["consumer"]
    _check(consumer, {"batches": int, "samples": int, "wall_s": NUMBER, "wait_s": NUMBER,
                      "compute_s": NUMBER, "stall_fraction": OPTIONAL_NUMBER,
                      "samples_per_s": OPTIONAL_NUMBER, "batches_per_s": OPTIONAL_NUMBER,
                      "tokens_per_s": OPTIONAL_NUMBER, "first_batch_s": OPTIONAL_NUMBER},
           "consumer")
    assert 0.0 <= consumer["stall_fraction"] <= 1.0
    producer = data["producer"]
    _check(producer, {"capacity_batches_per_s": OPTIONAL_NUMBER,
                      "batch_time_s": (dict, type(None)), "workers": list}, "producer")
    _check(producer["batch_time_s"], {q: NUMBER for q in ("mean", "p50", "p90", "p99")},
           "producer.batch_time_s")
    assert producer["workers"], "the sample report has workers"
    for i, worker in enumerate(producer["workers"]):
        _check(worker, {"id": int, "pid": int, "batches": int, "busy_s": NUMBER},
               f"producer.workers[{i}]")
    _check(data["diagnosis"], {"verdict": str, "bottleneck": str, "findings": list}, "diagnosis")
    assert data["diagnosis"]["verdict"] in ("input-bound", "compute-bound", "balanced", "no-data")
    assert data["recommendations"], "the sample report has a recommendation"
    for i, rec in enumerate(data["recommendations"]):
        _check(rec, {"setting": str, "expected": dict, "reason": str}, f"recommendations[{i}]")
        assert "current" in rec and "proposed" in rec
        _check(rec["expected"],
               {"samples_per_s": OPTIONAL_NUMBER, "stall_fraction": OPTIONAL_NUMBER},
               f"recommendations[{i}].expected")


def test_stress_section_keeps_its_contract_shape():
    stress = stress_of({
        "trials": [{"config": {"num_workers": 2}, "samples_per_s": 120.5, "batches_per_s": 3.8,
                    "stall_fraction": 0.2, "measured": True},
                   {"config": {"num_workers": 4}, "samples_per_s": 200.0, "measured": False}],
        "best": {"config": {"num_workers": 2}},
        "recommended": {"config": {"num_workers": 2}},
    })
    report = sample_report(kind="stress", stress=stress)
    data = json.loads(report.to_json())
    assert list(data["stress"]) == ["trials", "best", "recommended", "skipped", "search"]
    measured, predicted = data["stress"]["trials"]
    assert list(measured) == ["config", "samples_per_s", "batches_per_s", "stall_fraction",
                              "measured", "startup_s", "batches", "wall_s", "error",
                              "run_samples_per_s", "run_batches_per_s",
                              "predicted_samples_per_s"]
    assert list(predicted) == ["config", "samples_per_s", "batches_per_s", "stall_fraction",
                               "measured", "predicted_samples_per_s", "startup_s", "batches",
                               "wall_s", "error"]
    assert measured["samples_per_s"] == 120.5 and data["stress"]["best"]["config"] == {
        "num_workers": 2}
    assert Report.from_dict(data) == report


def test_non_finite_floats_are_written_as_null():
    report = replace_consumer(sample_report(), samples_per_s=math.inf, tokens_per_s=math.nan)
    text = report.to_json()
    assert "Infinity" not in text and "NaN" not in text
    data = json.loads(text)
    assert data["consumer"]["samples_per_s"] is None
    assert data["consumer"]["tokens_per_s"] is None


def test_value_json_cannot_hold_names_its_path():
    rec = Recommendation(setting="num_workers", current=2, proposed={1, 2},
                         expected=Expected(samples_per_s=None, stall_fraction=None), reason="x")
    with pytest.raises(TypeError, match=r"report\.recommendations\[0\]\.proposed"):
        sample_report(recommendations=[rec]).to_json()


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="kind must be one of wrap, stress"):
        sample_report(kind="offline")


# -- round trip and save -------------------------------------------------------------------------


def test_save_then_load_gives_an_equal_report(tmp_path):
    report = sample_report()
    path = report.save(tmp_path / "run.json")
    assert path == tmp_path / "run.json"
    assert load(path) == report
    assert load(str(path)) == report  # plain string paths too


def test_from_dict_ignores_keys_added_by_newer_writers():
    data = sample_report().to_dict()
    data["gpu"] = {"util_fraction": 0.5}
    data["consumer"]["new_rate_per_s"] = 1.0
    assert Report.from_dict(data) == sample_report()


def test_save_replaces_an_existing_file_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "run.json"
    target.write_text("old contents")
    sample_report().save(target)
    assert json.loads(target.read_text())["schema"] == SCHEMA
    assert os.listdir(tmp_path) == ["run.json"]


def test_save_respects_the_umask(tmp_path):
    old_umask = os.umask(0o027)
    try:
        path = sample_report().save(tmp_path / "run.json")
    finally:
        os.umask(old_umask)
    assert path.stat().st_mode & 0o777 == 0o640


def test_failed_save_keeps_the_old_file_and_removes_the_temp(tmp_path, monkeypatch):
    target = tmp_path / "run.json"
    target.write_text("old contents")

    def failing_replace(src, dst, **dir_fds):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(BadInputError, match="cannot write report to .*run.json: No space left"):
        sample_report().save(target)
    assert target.read_text() == "old contents"
    assert os.listdir(tmp_path) == ["run.json"]


def test_save_into_a_missing_directory_is_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="cannot write report to"):
        sample_report().save(tmp_path / "missing" / "run.json")


# -- load errors ---------------------------------------------------------------------------------


def test_load_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(BadInputError, match="no such report file: .*nope.json") as info:
        load(missing)
    assert not isinstance(info.value, ReportFormatError)


def test_load_a_directory_is_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="is a directory"):
        load(tmp_path)


def test_load_non_json_says_where_it_broke(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("{ not json")
    with pytest.raises(ReportFormatError, match=r"run.json is not JSON \(.* line 1 column 3\)"):
        load(path)


def test_load_rejects_nan_constants(tmp_path):
    data = sample_report().to_dict()
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data).replace('"wall_s": 12.5', '"wall_s": NaN', 1))
    with pytest.raises(ReportFormatError, match="NaN"):
        load(path)


def test_load_binary_file_is_a_format_error(tmp_path):
    path = tmp_path / "run.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ReportFormatError, match="not UTF-8"):
        load(path)


def test_unknown_schema_version_is_refused_with_both_versions(tmp_path):
    data = sample_report().to_dict()
    data["schema"] = "pipecheck.report/9"
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportFormatError) as info:
        load(path)
    assert str(info.value) == (
        f"{path}: report schema 'pipecheck.report/9' is not supported; "
        "this pipecheck reads pipecheck.report/1"
    )


def test_missing_schema_is_not_a_report():
    with pytest.raises(ReportFormatError, match="no 'schema' key"):
        Report.from_dict({"kind": "wrap"})
    with pytest.raises(ReportFormatError, match="expected a JSON object, got a list"):
        Report.from_dict([1, 2])


def test_missing_key_is_named_by_its_path():
    data = sample_report().to_dict()
    del data["consumer"]["wait_s"]
    missing = r"^report is missing key report\.consumer\.wait_s$"
    with pytest.raises(ReportFormatError, match=missing):
        Report.from_dict(data)


def test_wrong_type_is_named_by_its_path():
    data = sample_report().to_dict()
    data["producer"]["workers"][1]["batches"] = "fifty"
    wrong = r"report\.producer\.workers\[1\]\.batches must be an integer"
    with pytest.raises(ReportFormatError, match=wrong):
        Report.from_dict(data)


def test_error_messages_are_one_line(tmp_path):
    data = sample_report().to_dict()
    data["diagnosis"]["findings"] = "none"
    with pytest.raises(ReportFormatError) as info:
        Report.from_dict(data)
    assert "\n" not in str(info.value)


# -- build_report --------------------------------------------------------------------------------


def _run_record() -> RunRecord:
    """A small but complete run: 2 workers whose recent batches interleave, host samples."""
    base = sample_report()
    timeline = [
        BatchTiming(index=i, epoch=0, start_at_s=0.5 + 0.15 * i, wait_s=0.1 if i else 0.5,
                    compute_s=0.05, samples=32)
        for i in range(40)
    ]
    consumer = ConsumerRecord(
        batches=40, samples=1280, tokens=None, wait_s=sum(b.wait_s for b in timeline),
        compute_s=sum(b.compute_s for b in timeline), wall_s=6.5,
        epochs=[EpochTiming(epoch=0, started_at_s=0.0, batches=40, samples=1280,
                            wait_s=sum(b.wait_s for b in timeline), compute_s=2.0, wall_s=6.5,
                            first_batch_s=0.5, ended="exhausted")],
        timeline=timeline, timeline_stride=1, status="complete",
    )

    def worker(worker_id: int, pid: int, offset_s: float) -> WorkerRecord:
        recent = [WorkerBatch(worker_id=worker_id, end_at_s=offset_s + 0.3 * i, fetch_s=0.28,
                              collate_s=0.01, samples=32) for i in range(20)]
        return WorkerRecord(id=worker_id, pid=pid, pids=[pid], batches=20, samples=640,
                            fetch_s=5.6, collate_s=0.2, busy_s=5.8, first_at_s=offset_s,
                            last_at_s=recent[-1].end_at_s, recent=recent)

    host_samples = [
        HostSample(at_s=0.5 * i, system_cpu_percent=90.0, iowait_percent=0.0,
                   main_cpu_percent=40.0, workers_cpu_percent=150.0,
                   main_rss_bytes=300 * 1024**2, workers_rss_bytes=400 * 1024**2,
                   workers_pss_bytes=None, read_bytes_per_s=0.0, read_chars_per_s=1e5,
                   available_memory_bytes=4 * 1024**3)
        for i in range(12)
    ]
    host = HostRecord(status="ok", interval_s=0.5, samples_taken=12, duration_s=6.5,
                      system_cpu_percent_mean=90.0, iowait_fraction_mean=0.0,
                      read_bytes_per_s=0.0, read_chars_per_s=1e5, main_cpu_s=2.6,
                      workers_cpu_s=9.7, overhead_cpu_s=0.02, timeline=host_samples)
    return RunRecord(kind="wrap", created="2024-05-01T12:00:00+00:00",
                     environment=base.environment, loader=base.loader, consumer=consumer,
                     workers=[worker(0, 501, 0.4), worker(1, 502, 0.55)],
                     worker_probe="dataset-proxy", host=host)


def test_build_report_assembles_analysis_recommendations_and_timeline(monkeypatch):
    """Real analysis; ``recommend`` replaced by a recorder (it is tested in its own module) so
    this checks what build_report passes and keeps."""
    run = _run_record()
    proposed = Recommendation(setting="num_workers", current=2, proposed=3,
                              expected=Expected(samples_per_s=300.0, stall_fraction=0.05),
                              reason="recorded")
    seen = []

    def recommend(run_arg, analysis_arg):
        seen.append((run_arg, analysis_arg))
        return (proposed,)  # any iterable; build_report keeps a list

    monkeypatch.setitem(sys.modules, "pipecheck.recommend",
                        types.SimpleNamespace(recommend=recommend))
    report = build_report(run)

    ((run_seen, analysis),) = seen
    assert run_seen is run
    assert report.consumer == analysis.consumer and report.consumer.batches == 40
    assert report.producer == analysis.producer
    assert report.diagnosis == analysis.diagnosis
    assert report.recommendations == [proposed]
    assert (report.kind, report.created, report.stress) == ("wrap", run.created, None)
    assert report.timeline.batches == run.consumer.timeline
    assert report.timeline.epochs == run.consumer.epochs
    ends = [b.end_at_s for b in report.timeline.worker_batches]
    assert len(ends) == 40 and ends == sorted(ends)
    assert {b.worker_id for b in report.timeline.worker_batches[:2]} == {0, 1}  # interleaved
    assert report.timeline.host == run.host.timeline
    assert report.host.timeline == [] and report.host.main_cpu_s == run.host.main_cpu_s
    assert load_round_trip(report) == report


def load_round_trip(report: Report) -> Report:
    return Report.from_dict(json.loads(report.to_json()))


def test_build_report_without_host_or_workers(monkeypatch):
    run = dataclasses.replace(_run_record(), workers=[], host=None, worker_probe="none")
    monkeypatch.setitem(sys.modules, "pipecheck.recommend",
                        types.SimpleNamespace(recommend=lambda run, analysis: []))
    report = build_report(run, stress=None)
    assert report.host is None
    assert report.timeline.host == [] and report.timeline.worker_batches == []
    assert report.recommendations == []


def test_build_report_with_the_real_rules_round_trips_and_renders(tmp_path):
    """The whole chain on a hand-made run: analyze, recommend, assemble, save, load, render."""
    from pipecheck.render.terminal import verdict_line

    report = build_report(_run_record())
    assert report.diagnosis.verdict == "input-bound"  # 0.1 s waits against 0.05 s steps
    assert all(isinstance(rec, Recommendation) for rec in report.recommendations)
    assert load(report.save(tmp_path / "run.json")) == report
    text = report.render(width=100)
    assert " ".join(text.split()).startswith(verdict_line(report))  # wrapped, still first
    assert "waited for data 66.7% of the time in steady state (threshold 10%)" in text
    assert verdict_line(report).endswith("; data goodput 33.3%")
