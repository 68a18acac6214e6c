"""``pipecheck check``: CI thresholds on real saved reports, run in-process with ``main([...])``.

The reports come from real ``pipecheck.wrap`` runs: one input-bound (the dataset sleeps, the
step is short) and one compute-bound (the reverse). Thresholds are set from each report's own
measured figures with wide margins, so the tests hold on a loaded machine."""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import pipecheck
from pipecheck.cli import main

SLEEP_S = 0.008
"""The slow side of each run (data or step), per batch: 8 ms against ~0.1 ms for the other."""
BATCHES = 20


class _Sleepy(Dataset):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def __len__(self) -> int:
        return BATCHES * 2

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.delay_s:
            time.sleep(self.delay_s / 2)  # 2 samples a batch
        return torch.zeros(4)


def _run(data_s: float, step_s: float, path) -> pipecheck.Report:
    wrapped = pipecheck.wrap(DataLoader(_Sleepy(data_s), batch_size=2), host=False)
    for _ in wrapped:
        if step_s:
            time.sleep(step_s)
    report = wrapped.report()
    wrapped.close()
    report.save(path)
    return report


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("check")
    slow = _run(SLEEP_S, 0.0, folder / "input_bound.json")
    fast = _run(0.0, SLEEP_S, folder / "compute_bound.json")
    # The premise of every test below: the two runs sit far apart on either side of 50%.
    assert slow.consumer.steady_stall_fraction > 0.5 > fast.consumer.steady_stall_fraction
    return folder, slow, fast


def test_all_thresholds_met_is_exit_0_with_a_line_each(runs, capsys):
    folder, _, fast = runs
    code = main(["check", str(folder / "compute_bound.json"), "--max-stall", "0.5",
                 "--min-samples-per-s", str(fast.consumer.samples_per_s / 2),
                 "--max-wait-per-batch-s", str(SLEEP_S / 2)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err == ""
    lines = out.splitlines()
    assert len(lines) == 3 and all(line.startswith("pipecheck: check passed: ") for line in lines)
    assert "steady-state data stall" in lines[0] and "--max-stall 50.0%" in lines[0]
    assert "samples/s" in lines[1] and " ms" in lines[2]


def test_each_violated_threshold_gives_one_line_and_exit_1(runs, capsys):
    folder, slow, _ = runs
    code = main(["check", str(folder / "input_bound.json"), "--max-stall", "0.5",
                 "--min-samples-per-s", str(slow.consumer.samples_per_s * 2),
                 "--max-wait-per-batch-s", str(SLEEP_S / 4)])
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 3 and all(line.startswith("pipecheck: check failed: ") for line in lines)
    assert "exceeds --max-stall 50.0%" in lines[0]
    assert "is below --min-samples-per-s" in lines[1]
    assert "exceeds --max-wait-per-batch-s" in lines[2]


def test_only_the_violated_threshold_fails_and_quiet_hides_the_passed(runs, capsys):
    folder, slow, _ = runs
    code = main(["check", str(folder / "input_bound.json"), "--quiet", "--max-stall", "0.5",
                 "--min-samples-per-s", str(slow.consumer.samples_per_s / 2)])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "--max-stall" in err


def test_several_plain_reports_are_each_checked_and_named(runs, capsys):
    folder, _, _ = runs
    files = [str(folder / "compute_bound.json"), str(folder / "input_bound.json")]
    code = main(["check", *files, "--max-stall", "0.5"])
    out, err = capsys.readouterr()
    assert code == 1
    assert out.count("\n") == 1 and files[0] in out
    assert err.count("\n") == 1 and files[1] in err


@pytest.mark.parametrize("argv, message", [
    (["--max-stall", "5"], "0-1 fraction"),
    (["--max-stall", "x"], "0-1 fraction"),
    (["--min-samples-per-s", "0"], "must be from 1e-06 to 1,000,000,000,000 samples/s"),
    ([], "at least one threshold"),
])
def test_bad_thresholds_are_exit_2_with_one_line(runs, argv, message, capsys):
    folder, _, _ = runs
    code = main(["check", str(folder / "input_bound.json"), *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and message in err


def test_missing_or_unreadable_report_is_exit_2(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["check", str(tmp_path / "none.json"), "--max-stall", "0.1"]) == 2
    assert main(["check", str(tmp_path / "bad.json"), "--max-stall", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "no such report file" in err and "not JSON" in err


def test_a_run_without_batches_fails_its_thresholds(tmp_path, capsys):
    wrapped = pipecheck.wrap(DataLoader(_Sleepy(0.0), batch_size=2), host=False)
    report = wrapped.report()
    wrapped.close()
    path = report.save(tmp_path / "empty.json")
    assert main(["check", str(path), "--max-stall", "0.5", "--min-samples-per-s", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("not measured") == 2
