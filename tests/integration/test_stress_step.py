"""The step a stress trial runs after each batch (``pipecheck/stress/step.py``): none, emulated
(asleep, or a share busy on the CPU) or the user's own function; how ``stress()`` takes it and
how the report names it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from pipecheck.errors import BadInputError
from pipecheck.render.sections.stress import step_text
from pipecheck.report_sections import StressStep
from pipecheck.stress import _trial_step, stress
from pipecheck.stress.settings import StepFunction, StepTime, step_from_dict
from pipecheck.stress.step import step_runner
from paths import REPO_ROOT, STRESS_TARGETS
from stress_targets import STEP_LOG_ENV


def _thread_cpu_share(run, batches: int = 4) -> tuple[float, float]:
    """(CPU seconds of this thread, wall seconds) over ``batches`` calls of ``run``."""
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(batches):
        run(None)
    return time.thread_time() - cpu, time.perf_counter() - wall


def test_no_step_and_a_zero_step_run_nothing():
    assert step_runner(None) is None
    assert step_runner(StepTime(0.0)) is None


def test_a_sleeping_step_leaves_the_cpu_and_a_busy_one_takes_it():
    asleep = step_runner(StepTime(0.02))
    cpu, wall = _thread_cpu_share(asleep)
    assert wall >= 4 * 0.02 * 0.95
    assert cpu < 0.5 * wall
    busy = step_runner(StepTime(0.02, cpu_share=1.0))
    cpu, wall = _thread_cpu_share(busy)
    assert wall >= 4 * 0.02 * 0.95
    # Busy until a wall-clock deadline: on a loaded machine the thread gets less than all of
    # it, but far more than a sleep's.
    assert cpu > 0.2 * wall


def test_step_values_round_trip_through_the_trial_request():
    for step in (StepTime(0.05, 0.01, 0.4), StepFunction("train.py:step")):
        assert step_from_dict(step.to_dict()) == step
    assert step_from_dict(None) is None
    with pytest.raises(BadInputError, match="CPU share"):
        StepTime(0.05, cpu_share=1.5)


def test_stress_takes_a_time_or_a_function_never_both(tmp_path):
    assert _trial_step(None, 0.0, None, True) is None
    assert _trial_step("0.05+-0.01", 0.3, None, True) == StepTime(0.05, 0.01, 0.3)
    with pytest.raises(BadInputError, match="needs a step time"):
        _trial_step(None, 0.5, None, True)
    with pytest.raises(BadInputError, match="not both"):
        _trial_step(0.05, 0.0, "train.py:step", True)
    with pytest.raises(BadInputError, match="step file not found"):
        _trial_step(None, 0.0, str(tmp_path / "missing.py") + ":step", True)
    with pytest.raises(BadInputError, match="file.py:function"):
        _trial_step(None, 0.0, lambda batch: None, True)


def test_the_report_names_the_step_each_trial_ran():
    assert step_text(None) is None
    assert step_text(StressStep(kind="none")).startswith("none")
    assert step_text(StressStep(kind="function", function="t.py:f")) == "your function t.py:f"
    line = step_text(StressStep(kind="emulated", mean_s=0.05, jitter_s=0.0, cpu_share=0.6))
    assert "50.0 ms" in line and "60.0% busy on the CPU" in line
    assert "asleep" in step_text(StressStep(kind="emulated", mean_s=0.05, jitter_s=0.0,
                                            cpu_share=0.0))


def test_a_callable_step_runs_after_every_batch_in_process():
    seen = []
    loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8)
    report = stress(loader, num_workers=[0], step=lambda batch: seen.append(len(batch[0])),
                    budget_s=30.0, trial_s=0.3, stacks=False)
    assert report.stress.step.kind == "function"
    assert seen and set(seen) == {8}
    measured = sum(t.batches for t in report.stress.trials if t.batches)
    assert len(seen) >= measured


@pytest.mark.slow  # a real stress CLI run (10 s); the in-process step test covers the loop
def test_cli_runs_the_users_step_in_the_trial_process(tmp_path):
    log = tmp_path / "steps.log"
    env = dict(os.environ, **{STEP_LOG_ENV: str(log)})
    done = subprocess.run(
        [sys.executable, "-m", "pipecheck", "stress", f"{STRESS_TARGETS}:sleepy_loader",
         "--workers", "0", "--step", f"{STRESS_TARGETS}:logging_step", "--trial-seconds", "1",
         "--budget", "30", "--no-stacks", "--json", str(tmp_path / "r.json")],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pids = {line.split()[0] for line in log.read_text().splitlines()}
    assert pids and str(os.getpid()) not in pids  # ran in the trial's process, not here
    assert "training step:" in done.stdout and "logging_step" in done.stdout


def test_trials_run_the_step_on_each_thread_count_and_restore_the_process():
    seen = []
    before = torch.get_num_threads()
    loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8)
    report = stress(loader, num_workers=[0, 1], torch_threads=[1, 2],
                    step=lambda batch: seen.append(torch.get_num_threads()),
                    budget_s=60.0, trial_s=0.3, stacks=False, persistent_workers=False)
    assert set(seen) == {1, 2}
    assert torch.get_num_threads() == before
    configs = [t.config for t in report.stress.trials if t.measured]
    assert {c.get("torch_num_threads") for c in configs} == {1, 2}
    assert {(c["num_workers"], c["torch_num_threads"]) for c in configs} == {
        (0, 1), (0, 2), (1, 1), (1, 2)}


@pytest.mark.slow  # a real stress CLI run; the in-process test above covers the trials
def test_cli_runs_the_users_step_on_the_threads_asked(tmp_path):
    log = tmp_path / "steps.log"
    env = dict(os.environ, **{STEP_LOG_ENV: str(log)})
    done = subprocess.run(
        [sys.executable, "-m", "pipecheck", "stress", f"{STRESS_TARGETS}:sleepy_loader",
         "--workers", "0", "--torch-threads", "1,2", "--step",
         f"{STRESS_TARGETS}:logging_step", "--trial-seconds", "1", "--budget", "40",
         "--no-stacks", "--json", str(tmp_path / "r.json")],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert {line.split()[2] for line in log.read_text().splitlines()} == {"1", "2"}
    bad = subprocess.run(
        [sys.executable, "-m", "pipecheck", "stress", f"{STRESS_TARGETS}:sleepy_loader",
         "--torch-threads", "0"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "--torch-threads" in bad.stderr and len(bad.stderr.strip().splitlines()) <= 2
