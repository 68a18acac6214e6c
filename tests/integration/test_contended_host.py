"""The ``contended-host`` finding: how much of the machine other processes took during a run."""

from __future__ import annotations

import dataclasses
import multiprocessing
import time

import pytest
from torch.utils.data import DataLoader

import pipecheck
from fake_pipeline import FakeRun, simulate
from pipecheck.analysis.causes import CONTENDED_CPU_FRACTION, contended_host_finding
from wrap_datasets import SquaresDataset


def _with_system_busy(run, fraction):
    host = dataclasses.replace(run.host, system_cpu_percent_mean=100.0 * fraction)
    return dataclasses.replace(run, host=host)


def test_a_quiet_host_gets_no_finding():
    run = simulate(FakeRun())
    assert contended_host_finding(run) is None


def test_other_processes_taking_a_core_are_reported_with_the_numbers_behind_it():
    run = simulate(FakeRun(usable_cpus=2, worker_cpu_fraction=0.2, main_step_cpu_fraction=0.2))
    ours = (run.host.main_cpu_s + run.host.workers_cpu_s) / run.host.duration_s
    busy = (ours + 1.0) / run.environment.cpu_count  # one more core's worth
    assert busy <= 1.0
    finding = contended_host_finding(_with_system_busy(run, busy))
    assert finding is not None and finding.severity == "warning"
    others = finding.evidence["other_processes_cpus"]
    assert others == pytest.approx(busy * run.environment.cpu_count - ours)
    assert others >= CONTENDED_CPU_FRACTION * run.environment.cpu_count
    assert f"{others:.1f} of {run.environment.cpu_count} CPUs" in finding.message
    assert "pipecheck stress" in finding.message


def _burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.slow
def test_busy_neighbours_of_a_real_run_are_seen():
    context = multiprocessing.get_context("fork")
    cpus = multiprocessing.cpu_count()
    burners = [context.Process(target=_burn, args=(8.0,), daemon=True) for _ in range(cpus)]
    for burner in burners:
        burner.start()
    try:
        wrapped = pipecheck.wrap(DataLoader(SquaresDataset(400), batch_size=4),
                                 host_interval_s=0.2)
        started = time.perf_counter()
        while time.perf_counter() - started < 3.0:
            for _ in wrapped:
                time.sleep(0.002)
        report = wrapped.report()
        wrapped.close()
    finally:
        for burner in burners:
            burner.kill()
    kinds = {f.kind: f for f in report.diagnosis.findings}
    assert "contended-host" in kinds, [f.kind for f in report.diagnosis.findings]
    assert kinds["contended-host"].evidence["other_processes_cpus"] >= 0.5
