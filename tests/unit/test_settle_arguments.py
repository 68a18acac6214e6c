"""The calibration suite's settling measurement (``benchmarks/settle.py``): the stress command
line it runs for a recommendation and the trial it reads back, on made-up reports."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from settle import matching_trial, stress_arguments  # noqa: E402


def test_the_command_measures_the_baseline_and_the_recommended_settings_with_the_real_step():
    args = stress_arguments({"num_workers": 2, "prefetch_factor": 4}, 1, 10.0, "out.json")
    assert args[0] == "stress" and args[1].endswith("calibration_targets.py:loader")
    assert args[args.index("--step") + 1].endswith("calibration_targets.py:step")
    assert args[args.index("--workers") + 1] == "0,2"
    assert args[args.index("--torch-threads") + 1] == "1"
    assert args[args.index("--prefetch-factor") + 1] == "4"
    assert args[args.index("--trial-seconds") + 1] == "10"
    assert args[args.index("--json") + 1] == "out.json"
    assert {"--no-stacks", "--no-persistent-workers", "--quiet"} <= set(args)
    serial = stress_arguments({"num_workers": 0}, None, 5.0, "o.json")
    assert serial[serial.index("--workers") + 1] == "0"
    assert "--torch-threads" not in serial and "--prefetch-factor" not in serial


def test_the_settled_figure_is_the_measured_trial_of_the_recommended_settings():
    trials = [
        {"config": {"num_workers": 0, "torch_num_threads": 1}, "measured": True,
         "samples_per_s": 90.0, "error": None},
        {"config": {"num_workers": 2, "torch_num_threads": 2}, "measured": True,
         "samples_per_s": 300.0, "error": None},
        {"config": {"num_workers": 2, "torch_num_threads": 1}, "measured": False,
         "samples_per_s": None, "error": None},
        {"config": {"num_workers": 2, "torch_num_threads": 1}, "measured": True,
         "samples_per_s": 240.0, "error": None},
    ]
    assert matching_trial(trials, {"num_workers": 2}, 1)["samples_per_s"] == 240.0
    assert matching_trial(trials, {"num_workers": 2}, None)["samples_per_s"] == 300.0
    assert matching_trial(trials, {"num_workers": 4}, None) is None
    failed = [dict(trials[3], error="too few batches")]
    assert matching_trial(failed, {"num_workers": 2}, 1) is None
