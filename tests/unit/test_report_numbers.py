"""Finite numbers only: a number that is not finite (``1e999`` is valid JSON and parses as
infinity; NaN given in Python), an integer beyond 64 bits or a free-form value nested too deep,
anywhere in a report, fails the load naming its path (one line, exit 2 from the CLI). The
numbers are found by walking the report's JSON, not from a list of fields."""

from __future__ import annotations

import json
import re

import pytest

from pipecheck.errors import ReportFormatError
from pipecheck.render.markdown import render_markdown
from pipecheck.render.terminal import render_terminal
from pipecheck.report import Report, load
from full_reports import attach_report, every_section_report, json_with, numeric_leaves

REPORTS = {"every section": every_section_report, "attach": attach_report}


def _leaves(name):
    data = REPORTS[name]().to_dict()
    return data, list(numeric_leaves(data))


@pytest.mark.parametrize("name", REPORTS)
def test_infinity_in_any_numeric_field_fails_the_load_naming_it(name, tmp_path):
    data, leaves = _leaves(name)
    assert len(leaves) > 100  # every section's numbers, evidence and configurations included
    for i, (path, keys) in enumerate(leaves):
        holder = data
        for key in keys[:-1]:
            holder = holder[key]
        kept, holder[keys[-1]] = holder[keys[-1]], (float("inf"), float("-inf"), 10**30)[i % 3]
        with pytest.raises(ReportFormatError) as caught:
            Report.from_dict(data)
        holder[keys[-1]] = kept
        message = str(caught.value)
        assert f"{path} must" in message and "\n" not in message, (path, message)
        if i % 10 == 0:  # the text JSON holds: 1e999 parses as infinity
            file = tmp_path / "run.json"
            file.write_text(json_with(data, keys, "1e999"))
            with pytest.raises(ReportFormatError, match=re.escape(f"{path} must")):
                load(file)


def test_nan_and_huge_numbers_given_in_python_are_refused_too():
    data = every_section_report().to_dict()
    for value, fragment in [(float("nan"), "must be a finite number, got nan"),
                            (float("inf"), "must be a finite number, got inf"),
                            (10**400, "must be an integer of at most 2**63 - 1"),
                            (-(2**63), "must be an integer of at most 2**63 - 1")]:
        changed = json.loads(json.dumps(data))
        changed["consumer"]["wait_s"] = value
        with pytest.raises(ReportFormatError, match=re.escape(f"consumer.wait_s {fragment}")):
            Report.from_dict(changed)
        changed = json.loads(json.dumps(data))
        changed["diagnosis"]["findings"][0]["evidence"]["deep"] = {"x": [value]}
        with pytest.raises(ReportFormatError, match=re.escape("evidence.deep.x[0]")):
            Report.from_dict(changed)


def test_free_form_values_nest_at_most_32_levels():
    data = every_section_report().to_dict()
    deep: object = 1
    for _ in range(40):
        deep = [deep]
    data["diagnosis"]["findings"][0]["evidence"]["deep"] = deep
    with pytest.raises(ReportFormatError, match="nested more than 32 levels deep"):
        Report.from_dict(data)


def test_the_largest_64_bit_numbers_still_load():
    data = every_section_report().to_dict()
    data["consumer"]["batches"] = 2**63 - 1
    data["consumer"]["wait_s"] = 1.7976931348623157e308
    report = Report.from_dict(data)
    assert report.consumer.batches == 2**63 - 1
    render_terminal(report, width=100)
    render_markdown(report)
