"""Typed report sections: they load from the JSON keys saved reports hold and write the same
keys back, in the same order."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pipecheck.errors import ReportFormatError
from pipecheck.records import HeadOfLineSummary
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
