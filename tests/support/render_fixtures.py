"""Reports for the HTML / trace / markdown renderer tests: a real one measured by pipecheck.wrap
on a small 2-worker DataLoader, a stress section shaped like Sweep.section(), and a report
whose user-provided strings all hold markup."""

from __future__ import annotations

import dataclasses
import functools
import time

import torch

import pipecheck
from pipecheck.records import Finding, LoaderConfig, Recommendation
from pipecheck.codec import from_jsonable
from pipecheck.report import Report
from pipecheck.report_sections import StressSection
from report_factory import replace_consumer, sample_report
from wrap_datasets import SquaresDataset

SCRIPT = "<script>alert('pwned')</script>"
"""Markup a hostile or unlucky dataset repr, exception text or config value could hold."""


@functools.lru_cache(maxsize=None)
def real_report() -> Report:
    """A wrap report measured for real: 2 workers, 24 batches, host sampled every 0.1 s (about
    1.5 s, worker start-up included). Cached: built once per test session."""
    loader = torch.utils.data.DataLoader(SquaresDataset(96, sleep_s=0.003), batch_size=4,
                                         num_workers=2)
    with pipecheck.wrap(loader, host_interval_s=0.1) as wrapped:
        for epoch in range(2):
            for _ in wrapped:
                time.sleep(0.01)
    return wrapped.report()


def stress_section(config_value: object = 2,
                   error: str = "ValueError: corrupt sample 7") -> StressSection:
    """A model-guided stress section: two calibration trials, one measured with a prediction,
    one failed (with ``error``), one predicted but not measured, one skipped.
    ``config_value`` is the ``prefetch_factor`` of the failed trial (put markup there to test
    escaping). Built from the JSON the sweep writes (:func:`from_jsonable`)."""
    def trial(workers, rate, measured=True, predicted=None, error=None, factor=2):
        config = {"num_workers": workers, "prefetch_factor": factor if workers else None,
                  "persistent_workers": False}
        return {"config": config, "samples_per_s": rate,
                "batches_per_s": None if rate is None else rate / 32,
                "stall_fraction": None if rate is None else 0.1, "measured": measured,
                "predicted_samples_per_s": predicted, "startup_s": 0.5, "batches": 50,
                "wall_s": 3.0, "error": error}

    trials = [trial(0, 120.0), trial(1, 230.0), trial(2, 400.0, predicted=420.0),
              trial(3, None, error=error, factor=config_value),
              trial(4, 610.0, measured=False, predicted=610.0)]
    return from_jsonable(StressSection, {
        "trials": trials,
        "best": trials[2],
        "recommended": {"config": trials[2]["config"],
                        "expected": {"samples_per_s": 400.0, "stall_fraction": 0.1},
                        "baseline": trials[0]["config"], "baseline_samples_per_s": 120.0,
                        "gain": 400.0 / 120.0,
                        "changes": {"num_workers": [0, 2], "prefetch_factor": [None, 2]}},
        "skipped": [{"config": {"num_workers": 8, "prefetch_factor": 2,
                                "persistent_workers": False},
                     "reason": "budget spent"}],
        "search": {"method": "model", "candidates": 9, "measured": 4,
                   "calibration": [trials[0]["config"], trials[1]["config"]],
                   "noise_fraction": 0.02, "threshold_fraction": 0.03, "verified": [],
                   "stop_reason": "predicted gain below noise",
                   "stop_reasons": ["predicted gain below noise"]},
        "epoch_start": {"status": "ok", "reason": None, "config": {"num_workers": 2},
                        "restart_s": {"persistent": 0.01, "not_persistent": 1.5},
                        "short_epoch_s": {"persistent": 0.2, "not_persistent": 2.3},
                        "saving_s": 2.1, "epoch_s": 40.0, "fraction": 2.1 / 42.1,
                        "matters": False, "method": "shortened", "trials": []},
    }, "stress")


def stress_report() -> Report:
    """The sample report as a ``stress`` report with :func:`stress_section`."""
    return sample_report(kind="stress", stress=stress_section())


def hostile_report() -> Report:
    """A stress report whose user-provided strings hold :data:`SCRIPT`: the dataset type and
    loader type (reprs), the run's exception text, a finding's message, a recommendation's
    reason, a stress config value and a trial's error."""
    report = sample_report(kind="stress", stress=stress_section(
        config_value=SCRIPT, error=f"RuntimeError: {SCRIPT}"))
    report = replace_consumer(report, status="error", error=f"ValueError: bad sample {SCRIPT}")
    loader = dataclasses.replace(report.loader, type=f"MyLoader{SCRIPT}",
                                 dataset_type=f"<MyDataset {SCRIPT} at 0x7f>")
    assert isinstance(loader, LoaderConfig)
    findings = [*report.diagnosis.findings,
                Finding(kind="slow-sample", severity="warning", message=f"sample {SCRIPT} slow",
                        evidence={"path": f"/data/{SCRIPT}.tar"})]
    diagnosis = dataclasses.replace(report.diagnosis, findings=findings)
    recommendations = [Recommendation(setting="num_workers", current=2, proposed=4,
                                      expected=report.recommendations[0].expected,
                                      reason=f"because {SCRIPT} & more")]
    return dataclasses.replace(report, loader=loader, diagnosis=diagnosis,
                               recommendations=recommendations)
