"""The calibration benchmark's pure helpers (``benchmarks/calibration.py``): reading a report's
recommendation, a row's derived figures and the summary against issue 26's targets, on
made-up figures (nothing is trained)."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import calibration  # noqa: E402
from calibration import Prediction, grid_entry, make_row, prediction_of, summarize  # noqa: E402


def _rec(setting, proposed, point=None, low=None, high=None, uncertain=None):
    expected = SimpleNamespace(samples_per_s=point, samples_per_s_low=low,
                               samples_per_s_high=high, uncertain=uncertain, note=None)
    return SimpleNamespace(setting=setting, current=None, proposed=proposed, expected=expected,
                           reason="")


def _report(*recs, measured=500.0, findings=()):
    return SimpleNamespace(recommendations=list(recs),
                           consumer=SimpleNamespace(samples_per_s=measured),
                           diagnosis=SimpleNamespace(findings=[SimpleNamespace(kind=k)
                                                               for k in findings]))


def test_the_last_figure_of_cumulative_recommendations_is_the_prediction():
    found = prediction_of(_report(_rec("num_workers", 2, 900, 800, 1000),
                                  _rec("prefetch_factor", 4, 950, 850, 1100, False),
                                  _rec("persistent_workers", True, 960, 860, 1110),
                                  _rec("num_shards", 12, None)))
    assert found.settings == {"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}
    assert (found.samples_per_s, found.low, found.high) == (960, 860, 1110)
    assert found.not_applied == {"num_shards": 12}
    assert found.source == "recommendation"


def test_no_recommendation_predicts_the_measured_rate_without_an_interval():
    found = prediction_of(_report(measured=432.0))
    assert found.settings == {"num_workers": 0}
    assert (found.samples_per_s, found.low, found.source) == (432.0, None, "no change")


def test_grid_entry_only_for_plain_worker_counts_in_the_grid():
    assert grid_entry({"num_workers": 3}, 4) == 3
    assert grid_entry({"num_workers": 3, "prefetch_factor": 2}, 4) == 3
    assert grid_entry({"num_workers": 3, "prefetch_factor": 4}, 4) is None
    assert grid_entry({"num_workers": 3, "persistent_workers": True}, 4) is None
    assert grid_entry({"num_workers": 8}, 4) is None


def _row(condition, predicted, achieved, best, low=None, high=None, ceiling=None):
    return make_row("p", condition, Prediction({"num_workers": 1}, predicted, low, high),
                    "nw=1", achieved, best, "nw=1", ceiling)


def test_row_figures():
    row = _row("quiet", 1000, 900, 1000, low=800, high=1200, ceiling=1000)
    assert row["error"] == pytest.approx(-0.1)
    assert row["width"] == pytest.approx(1.5)
    assert row["covered"] is True and row["above_ceiling"] is False
    assert row["best_ratio"] == pytest.approx(0.9)
    above = _row("busy", 1100, 900, 900, low=1000, high=1200, ceiling=1000)
    assert above["covered"] is False and above["above_ceiling"] is True
    within_tolerance = _row("busy", 1000 * (1 + calibration.CEILING_TOLERANCE), 900, 900,
                            ceiling=1000)
    assert within_tolerance["above_ceiling"] is False and within_tolerance["covered"] is None


def test_summary_against_the_targets():
    rows = [_row("quiet", 1000, 1050, 1050, 900, 1200, 2000),   # +5%, covered, width 1.33
            _row("quiet", 1000, 800, 1000, 900, 1100, 2000),    # -20%, missed, width 1.22
            _row("busy", 1000, 950, 1200, 500, 2000, 900),      # 0.79 of best, above ceiling
            _row("busy", 600, 600, 600)]                         # no interval
    summary = summarize(rows)
    assert summary["quiet_median_error"] == pytest.approx(0.125)
    assert summary["quiet_max_error"] == pytest.approx(0.20)
    assert summary["best_ratio_ok"] == 2 and summary["best_ratio_cases"] == 4
    assert summary["above_ceiling"] == 1
    assert (summary["covered"], summary["with_interval"]) == (2, 3)
    assert summary["median_width"] == pytest.approx(4 / 3)
    verdicts = summary["verdicts"]
    assert verdicts["best_ratio"] == "MISSED by 2 cases"
    assert verdicts["quiet_median_error"] == "MISSED by 2 pp"
    assert verdicts["quiet_max_error"] == "MISSED by 5 pp"
    assert verdicts["above_ceiling"] == "MISSED by 1 case"
    assert verdicts["coverage"] == "MISSED by 13 pp"
    assert verdicts["median_width"] == "ok"
    assert all(calibration.format_summary(summary))
    assert all(calibration.format_row(row) for row in rows)


def test_a_change_without_a_figure_is_no_prediction():
    found = prediction_of(_report(_rec("num_workers", 1), measured=432.0))
    assert found.settings == {"num_workers": 1}
    assert (found.samples_per_s, found.low, found.source) == (None, None, "no prediction")
    pinned = prediction_of(_report(_rec("num_workers", 2, 900, 800, 1000),
                                   _rec("pin_memory", True)))
    assert (pinned.samples_per_s, pinned.source) == (900, "recommendation")
    row = make_row("p", "quiet", found, "nw=1", 500, 600, "nw=2", 700)
    assert row["error"] is None and row["covered"] is None and row["above_ceiling"] is None
    assert summarize([row])["sources"]["no prediction"] == 1


def test_no_recommendation_for_want_of_evidence_abstains():
    found = prediction_of(_report(findings=("short-run", "insufficient-data")))
    assert (found.samples_per_s, found.source) == (None, "abstained")
    no_change = make_row("p", "busy", prediction_of(_report(measured=1200.0)), "nw=0", 1000,
                         1000, "nw=0", 1000)
    assert no_change["above_ceiling"] is None and no_change["error"] == pytest.approx(-1 / 6)


def test_needed_width_is_the_band_holding_80_percent_of_the_points():
    rows = [_row("quiet", 1000, achieved, 2000) for achieved in (1000, 1100, 900, 1250, 500)]
    # |ln ratio|: 0, 0.095, 0.105, 0.223, 0.693; the 4th of 5 (80%) is ln 1.25
    assert calibration.needed_width(rows) == pytest.approx(1.25 ** 2)
    assert summarize(rows)["needed_width"] == pytest.approx(1.5625)
    assert calibration.needed_width([_row("busy", None, 500, 500)]) is None


def test_the_figures_to_bank_on_take_the_settled_measurement_where_the_report_was_unsure():
    unsure = make_row("p", "quiet", Prediction({"num_workers": 2}, 1000, 700, 1100, True),
                      "nw=2", 700, 700, "nw=2", 5000,
                      extra={"settled": {"samples_per_s": 720.0}, "settled_error": 700 / 720 - 1})
    unsettled = make_row("p", "quiet", Prediction({"num_workers": 2}, 1000, 700, 1100, True),
                         "nw=2", 800, 800, "nw=2", 5000)
    sure = _row("quiet", 1000, 1100, 1100, 900, 1200, 5000)
    unpredicted = make_row("p", "busy", Prediction({"num_workers": 1}, None,
                                                   source="no prediction"),
                           "nw=1", 400, 400, "nw=1", 900,
                           extra={"settled": {"samples_per_s": 500.0},
                                  "settled_error": 400 / 500 - 1})
    rows = [unsure, unsettled, sure, unpredicted]
    assert [calibration.banked_error(r) for r in rows] == [
        pytest.approx(700 / 720 - 1), None, pytest.approx(0.1), pytest.approx(-0.2)]
    summary = summarize(rows)
    assert summary["quiet_max_error"] == pytest.approx(0.3)  # every quiet point, unsure or not
    assert summary["quiet_sure_max_error"] == pytest.approx(0.1)
    assert summary["quiet_sure_predictions"] == 1
    assert (summary["quiet_banked"], summary["settled"]) == (2, 2)
    assert summary["quiet_banked_max_error"] == pytest.approx(0.1)
    assert summary["banked_max_error"] == pytest.approx(0.2) and summary["banked"] == 3
    assert summary["verdicts"]["quiet_banked_max_error"] == "ok"
    assert "settled 720 (-3%)" in calibration.format_row(unsure)
    failed = make_row("p", "quiet", Prediction({"num_workers": 2}, 1000, 700, 1100, True),
                      "nw=2", 700, 700, "nw=2", 5000,
                      extra={"settled": {"samples_per_s": None, "error": "timed out"}})
    assert calibration.banked_error(failed) is None
    assert "settled: failed (timed out)" in calibration.format_row(failed)


def test_only_uncertain_or_unpredicted_recommendations_are_settled():
    assert calibration.needs_settling(Prediction({"num_workers": 2}, 900, 800, 1000, True))
    assert calibration.needs_settling(Prediction({"num_workers": 1}, None,
                                                 source="no prediction"))
    assert not calibration.needs_settling(Prediction({"num_workers": 2}, 900, 800, 1000, False))
    assert not calibration.needs_settling(Prediction({"num_workers": 0}, 900,
                                                     source="no change"))
    assert not calibration.needs_settling(Prediction({"num_workers": 0}, None,
                                                     source="abstained"))
