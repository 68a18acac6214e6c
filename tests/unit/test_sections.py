"""Typed report sections: they load from the JSON keys saved reports hold and write the same
keys back, in the same order."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pipecheck.errors import ReportFormatError
from pipecheck.analysis.stages import stage_table
from pipecheck.records import HeadOfLineSummary, StageRow
from pipecheck.codec import to_jsonable
from pipecheck.report import Report
from report_factory import sample_report

HEAD_OF_LINE = {
    "status": "ok", "note": None, "waits": 40, "wait_s": 1.25, "blocked_waits": 12,
    "blocked_wait_s": 0.75, "mean_ready_later": 2.5,
    "wait_s_by_worker": {"0": 0.25, "1": 1.0}, "blocked_s_by_worker": {"1": 0.75},
}
"""A producer.head_of_line section as pipecheck has written it (probes.hol's keys)."""


def _saved(**producer_changes) -> dict:
    """A saved report's JSON (parsed) with ``producer`` keys replaced."""
    data = json.loads(json.dumps(sample_report().to_dict()))
    data["producer"].update(producer_changes)
    return data


def test_head_of_line_loads_typed_and_writes_the_same_json_back():
    data = _saved(head_of_line=HEAD_OF_LINE)
    report = Report.from_dict(data)
    summary = report.producer.head_of_line
    assert isinstance(summary, HeadOfLineSummary)
    assert (summary.blocked_wait_s, summary.blocked_s_by_worker) == (0.75, {"1": 0.75})
    assert json.dumps(report.to_dict()) == json.dumps(data)  # keys and order unchanged
    assert Report.from_dict(_saved(head_of_line=None)).producer.head_of_line is None


def test_head_of_line_fields_are_the_contract_keys_in_order():
    assert [f.name for f in dataclasses.fields(HeadOfLineSummary)] == list(HEAD_OF_LINE)


@pytest.mark.parametrize("key, value, message", [
    ("blocked_wait_s", -1.0, "must not be negative"),
    ("waits", "many", "must be an integer"),
    ("wait_s_by_worker", [], "must be an object"),
])
def test_a_malformed_head_of_line_fails_the_load_naming_its_path(key, value, message):
    with pytest.raises(ReportFormatError, match=rf"report\.producer\.head_of_line.*{message}"):
        Report.from_dict(_saved(head_of_line={**HEAD_OF_LINE, key: value}))


STAGES = [
    {"name": "decode", "where": "workers", "exclusive_s": 2.0, "fraction": 0.8,
     "samples_in": 10, "samples_out": 8, "bytes_read": 0, "workers": {"0": 1.25, "1": 0.75}},
    {"name": "StreamingOpen", "where": "workers", "exclusive_s": 0.5, "fraction": 0.2,
     "samples_in": None, "samples_out": 4, "bytes_read": 4096, "workers": {"0": 0.5}},
    {"name": "DataLoader", "where": "main", "exclusive_s": 0.25, "fraction": 1.0,
     "samples_in": None, "samples_out": 5, "bytes_read": 0, "workers": {"main": 0.25}},
]
"""producer.stages rows as pipecheck writes them (analysis.stages.stage_table's keys)."""


def test_stage_rows_load_typed_and_write_the_same_json_back():
    data = _saved(stages=STAGES)
    report = Report.from_dict(data)
    assert all(isinstance(row, StageRow) for row in report.producer.stages)
    assert [(r.name, r.where, r.samples_in) for r in report.producer.stages] == [
        ("decode", "workers", 10), ("StreamingOpen", "workers", None), ("DataLoader", "main", None)]
    assert json.dumps(report.to_dict()) == json.dumps(data)


def test_a_stage_row_of_a_report_written_before_bytes_read_loads():
    old = [{k: v for k, v in row.items() if k != "bytes_read"} for row in STAGES]
    report = Report.from_dict(_saved(stages=old))
    assert [row.bytes_read for row in report.producer.stages] == [None, None, None]


def test_stage_table_rows_are_stage_rows_with_the_contract_keys():
    snapshot = {"worker_id": 0, "stages": [
        {"key": "src", "name": "source", "upstream": None, "inclusive_ns": 1_000_000_000,
         "items": 4, "bytes": 4096},
        {"key": "map", "name": "decode", "upstream": "src", "inclusive_ns": 4_000_000_000,
         "items": 4}]}
    rows = stage_table([snapshot])
    assert [(r.name, r.exclusive_s, r.samples_in, r.bytes_read) for r in rows] == [
        ("decode", 3.0, 4, 0), ("source", 1.0, None, 4096)]
    assert rows[0].fraction == pytest.approx(0.75) and rows[0].workers == {"0": 3.0}
    assert list(to_jsonable(rows[0])) == list(STAGES[0])


def test_a_stage_row_with_a_wrong_type_fails_the_load_naming_its_path():
    bad = [{**STAGES[0], "workers": 2}]
    with pytest.raises(ReportFormatError, match=r"report\.producer\.stages\[0\]\.workers"):
        Report.from_dict(_saved(stages=bad))
