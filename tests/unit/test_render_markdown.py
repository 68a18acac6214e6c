"""Markdown report: verdict first, key numbers and recommendations as tables, the stress sweep,
and user strings made inert (no raw HTML, no broken table cells)."""

from __future__ import annotations

import dataclasses

from pipecheck.render.markdown import render_markdown
from render_fixtures import SCRIPT, hostile_report, stress_report
from report_factory import sample_report, stress_of

VERDICT = ("INPUT-BOUND: the training loop waited for data 41.2% of the time (threshold 10%); "
           "data goodput 58.8%")


def _table_after(lines: list[str], heading: str) -> list[list[str]]:
    """The cells of the first table after ``heading`` (header row first, separator dropped)."""
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
        elif rows:
            break
    return [rows[0], *rows[2:]]


def test_verdict_numbers_findings_and_recommendations():
    text = render_markdown(sample_report())
    lines = text.splitlines()
    assert lines[0] == f"**{VERDICT}**"
    assert lines[2].startswith("<sub>wrap report, 2024-05-01T12:00:00+00:00 · DataLoader")
    key_numbers = _table_after(lines, lines[2])
    assert key_numbers[0] == ["metric", "value"]
    numbers = dict(row for row in key_numbers[1:])
    assert numbers["throughput"] == "256 samples/s · 8.00 batches/s"
    assert numbers["data stall"] == "41.2% (steady state 38.0%)"
    assert numbers["producer capacity"] == "9.50 batches/s"
    assert numbers["capacity / demand"] == "0.70x: the loader cannot keep up with the step"
    findings = lines[lines.index("### Findings") + 2:lines.index("### Recommendations") - 1]
    assert findings[0].startswith("- **critical**: the loop waited for data 41.2%")
    recommendations = _table_after(lines, "### Recommendations")
    assert recommendations[0] == ["#", "setting", "current -> proposed", "expected throughput",
                                  "expected stall"]
    assert recommendations[1] == ["1.", "`num_workers`", "2 -> 4", "410 samples/s", "6.0%"]
    assert ("1. num_workers: each worker delivers 4.8 batches/s; the step takes 13.6 Effect: "
            "+154 samples/s this change. (capped by 2 usable CPUs)") in lines  # as --verbose
    assert text.endswith("\n") and not text.endswith("\n\n")


def test_stress_sweep_table():
    lines = render_markdown(stress_report()).splitlines()
    table = _table_after(lines, "### Stress sweep")
    # one column per setting that varies (the constant ones are named once above the table)
    assert table[0] == ["num_workers", "prefetch_factor", "samples/s", "predicted samples/s",
                        "batches/s", "stall", "source"]
    assert "**every trial:** persistent_workers=False" in lines
    by_workers = {row[0]: row for row in table[1:]}
    assert by_workers["2"][2:4] == ["400", "420"] and by_workers["2"][6] == "measured"
    assert by_workers["4"][6] == "predicted"
    assert by_workers["3"][6] == "failed"
    assert ("**failed:** num_workers=3 prefetch_factor=2 persistent_workers=False: ValueError: "
            "corrupt sample 7") in lines
    assert any(line.startswith("**expected gain over the baseline:** 3.33x") for line in lines)
    (epoch,) = [line for line in lines if line.startswith("**epoch start:**")]
    assert "2.10 s longer" in epoch and "1.50 s for new workers" in epoch
    assert "5.0% of each epoch" in epoch and "not worth changing" in epoch


def test_user_strings_are_inert():
    text = render_markdown(hostile_report())
    assert "<script" not in text
    assert SCRIPT.replace("<", "&lt;") in text  # shown as <script>... by any markdown viewer
    piped = sample_report()
    rec = dataclasses.replace(piped.recommendations[0], setting="a | b")
    lines = render_markdown(dataclasses.replace(piped, recommendations=[rec])).splitlines()
    row = next(line for line in lines if line.startswith("| 1. |"))
    assert row.startswith(r"| 1. | `a \| b` | 2 -> 4 |")  # the cell is not split


def test_title_becomes_a_heading():
    assert render_markdown(sample_report(), title="rank<0>.json").startswith(
        "## rank&lt;0>.json\n\n**INPUT-BOUND")


def test_grid_sweep_leaves_out_empty_columns():
    stress = {"trials": [
        {"config": {"num_workers": w}, "samples_per_s": 100.0 * (w + 1), "batches_per_s": None,
         "stall_fraction": 0.5, "measured": True, "predicted_samples_per_s": None, "error": None}
        for w in (0, 2)]}
    lines = render_markdown(sample_report(kind="stress", stress=stress_of(stress))).splitlines()
    table = _table_after(lines, "### Stress sweep")
    assert table == [["num_workers", "samples/s", "batches/s", "stall", "source"],
                     ["0", "100", "n/a", "50.0%", "measured"],
                     ["2", "300", "n/a", "50.0%", "measured"]]
