"""The measurement a report names where its figure is uncertain, run for the calibration suite:
``pipecheck stress`` of the recommended settings with the pipeline's own training step.

A report whose expected rate is uncertain (``Expected.uncertain``), or that proposes a change
with no figure, names a short ``pipecheck stress`` run that measures it. :func:`settle` runs
it on a calibration pipeline (:mod:`calibration_targets`): ``--workers 0,N`` (``N`` the
recommended count; the baseline first, as stress requires), ``--torch-threads`` the
recommended thread count where there is one, ``--step`` the pipeline's step (the real CPU
work, not an emulation), one trial per configuration of ``seconds`` each, no profiling trial
and no epoch-start pair. The settled figure is the measured steady samples/s of the trial with
the recommended settings: what a user who ran the named command would bank on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from calibration_targets import DATA_ENV, PIPELINE_ENV  # noqa: E402

TARGET = os.path.join(HERE, "calibration_targets.py")

SLACK_S = 120.0
"""Seconds the stress run may take beyond its trials before it is stopped (child start-up,
imports, worker start)."""


def stress_arguments(settings: dict[str, Any], threads: Optional[int], seconds: float,
                     json_path: str) -> list[str]:
    """The ``pipecheck stress`` command line (after ``python -m pipecheck``) for ``settings``
    (``num_workers`` and torch's thread count ``threads``, ``None``: the process's own)."""
    workers = int(settings.get("num_workers") or 0)
    counts = "0" if workers == 0 else f"0,{workers}"
    arguments = ["stress", f"{TARGET}:loader", "--step", f"{TARGET}:step",
                 "--workers", counts, "--no-stacks", "--no-persistent-workers",
                 "--in-order", "true", "--trial-seconds", f"{seconds:g}",
                 "--budget", f"{4 * (seconds + 10):g}", "--json", json_path, "--quiet"]
    if settings.get("prefetch_factor") and workers:
        arguments += ["--prefetch-factor", str(settings["prefetch_factor"])]
    if threads:
        arguments += ["--torch-threads", str(threads)]
    return arguments


def settle(pipeline: str, data: Optional[str], settings: dict[str, Any],
           threads: Optional[int], seconds: float) -> dict[str, Any]:
    """Run the stress measurement of ``settings`` on ``pipeline`` (its files in ``data``);
    ``{"samples_per_s": measured or None, "command": [...], "error": None or why}``."""
    env = dict(os.environ, **{PIPELINE_ENV: pipeline})
    if data:
        env[DATA_ENV] = data
    with tempfile.TemporaryDirectory(prefix="pipecheck-settle-") as folder:
        json_path = os.path.join(folder, "stress.json")
        arguments = stress_arguments(settings, threads, seconds, json_path)
        command = [sys.executable, "-m", "pipecheck", *arguments]
        found: dict[str, Any] = {"samples_per_s": None, "command": arguments, "error": None}
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=4 * (seconds + 10) + SLACK_S)
        except subprocess.TimeoutExpired:
            found["error"] = "the stress run timed out"
            return found
        if not os.path.exists(json_path):
            found["error"] = (done.stderr.strip().splitlines() or ["no report"])[-1]
            return found
        with open(json_path) as handle:
            report = json.load(handle)
    trial = matching_trial(report["stress"]["trials"], settings, threads)
    if trial is None:
        found["error"] = "no measured trial with the recommended settings"
    else:
        found["samples_per_s"] = trial["samples_per_s"]
    return found


def matching_trial(trials: list[dict[str, Any]], settings: dict[str, Any],
                   threads: Optional[int]) -> Optional[dict[str, Any]]:
    """The measured trial with the recommended ``num_workers`` (and ``threads`` when given)."""
    workers = int(settings.get("num_workers") or 0)
    for trial in trials:
        config = trial["config"]
        if (trial.get("measured") and not trial.get("error") and trial.get("samples_per_s")
                and config.get("num_workers") == workers
                and (threads is None or config.get("torch_num_threads") == threads)):
            return trial
    return None
