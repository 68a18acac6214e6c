"""pipecheck stress: targets, isolated trials (timeouts, crashes), the sweep and its report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from torch.utils.data import DataLoader

import pipecheck
from pipecheck.cli import main
from pipecheck.errors import BadInputError
from pipecheck.recommend.limits import PERSISTENT_START_SHARE
from pipecheck.stress.settings import StepTime, parse_step_time, sweep_configs
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.target import rebuild_loader
from pipecheck.stress.trial import TrialLimits, measure
from pipecheck.units import rate
from helpers_datasets import IndexDataset
from stress_targets import SleepPerSample
from paths import STRESS_TARGETS

TARGETS = STRESS_TARGETS
TRIAL_KEYS = {"config", "samples_per_s", "batches_per_s", "stall_fraction", "measured",
              "startup_s", "error"}


def _target(name: str) -> str:
    return f"{TARGETS}:{name}"


def _stderr_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.slow
def test_more_workers_measure_faster_and_json_holds_the_stress_section(tmp_path, capsys):
    out = tmp_path / "run.json"
    code = main(["stress", _target("sleepy_loader"), "--workers", "0,2", "--batches", "12",
                 "--json", str(out), "--quiet"])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["kind"] == "stress"
    section = data["stress"]
    trials = section["trials"]
    assert [t["config"]["num_workers"] for t in trials] == [0, 2]
    for trial in trials:
        assert TRIAL_KEYS <= trial.keys()
        assert trial["measured"] is True and trial["error"] is None
        assert trial["samples_per_s"] > 0 and trial["batches_per_s"] > 0
        assert 0.0 <= trial["stall_fraction"] <= 1.0
        assert trial["startup_s"] > 0
        assert trial["samples_per_s"] == pytest.approx(4 * trial["batches_per_s"])
    serial, parallel = trials
    # 4 samples x 10 ms of sleep per batch: ~100 samples/s serial, ~200 with 2 workers.
    assert serial["samples_per_s"] < 110
    assert parallel["samples_per_s"] > 1.3 * serial["samples_per_s"]
    assert section["best"]["config"] == parallel["config"]
    recommended = section["recommended"]
    # persistent_workers is decided by the epoch-start pair, measured: on a busy machine a
    # worker start can well be 5% of this 2 s epoch, and then keeping workers is right.
    persistent = recommended["config"]["persistent_workers"]
    assert recommended["config"] == {**parallel["config"], "persistent_workers": persistent}
    epoch_start = section["epoch_start"]
    assert epoch_start["status"] == "ok"
    assert persistent is (epoch_start["matters"] is True)
    if persistent:
        assert epoch_start["saving_s"] > 0
        assert epoch_start["fraction"] >= PERSISTENT_START_SHARE
    assert recommended["baseline"] == serial["config"]
    assert recommended["gain"] == pytest.approx(
        parallel["samples_per_s"] / serial["samples_per_s"])
    assert section["skipped"] == []
    # The report's other sections come from the best trial.
    assert data["loader"]["num_workers"] == 2
    assert data["consumer"]["batches"] == 12


@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        ("missing_file.py:make", "no such target file: missing_file.py"),
        pytest.param(f"{TARGETS}:no_such_function", "has no function 'no_such_function'",
                     marks=pytest.mark.slow),
        pytest.param(f"{TARGETS}:NOT_A_FUNCTION", "is a int, not a function",
                     marks=pytest.mark.slow),
        (f"{TARGETS}:raises", "raised OSError: shard list /data/shards-*.tar matched nothing"),
        pytest.param(f"{TARGETS}:returns_text", "returned a str, not a DataLoader or Dataset",
                     marks=pytest.mark.slow),
        pytest.param("no_such_module_pc:make", "no module named 'no_such_module_pc'",
                     marks=pytest.mark.slow),
        ("just_a_name", "must be file.py:function or package.module:function"),
    ],
)
def test_bad_target_is_exit_2_with_one_line(target, fragment, capsys):
    assert main(["stress", target, "--workers", "0"]) == 2
    lines = _stderr_lines(capsys)
    assert len(lines) == 1
    assert lines[0].startswith("pipecheck: error: ")
    assert fragment in lines[0]


@pytest.mark.slow
def test_a_hanging_trial_is_killed_and_the_sweep_goes_on(tmp_path, capsys):
    out = tmp_path / "run.json"
    code = main(["stress", _target("hangs_with_one_worker"), "--workers", "0,1",
                 "--timeout", "3", "--batches", "5", "--json", str(out), "--quiet"])
    assert code == 0
    serial, hung = json.loads(out.read_text())["stress"]["trials"]
    assert serial["error"] is None and serial["samples_per_s"] > 0
    assert hung["config"]["num_workers"] == 1
    assert hung["error"].startswith("timed out: nothing delivered for 3 s")
    assert hung["samples_per_s"] is None and hung["stall_fraction"] is None


@pytest.mark.slow
def test_a_loader_that_never_yields_fails_every_trial_with_exit_2(capsys):
    assert main(["stress", _target("never_yields"), "--workers", "0", "--timeout", "2"]) == 2
    (line,) = _stderr_lines(capsys)
    assert line.startswith("pipecheck: error: no trial measured anything (num_workers=0")
    assert "timed out" in line


@pytest.mark.slow
def test_a_crashing_worker_fails_its_trial_with_the_error(tmp_path, capsys):
    out = tmp_path / "run.json"
    code = main(["stress", _target("crashes_in_workers"), "--workers", "0,1", "--batches", "5",
                 "--json", str(out), "--width", "100"])
    assert code == 0
    serial, crashed = json.loads(out.read_text())["stress"]["trials"]
    assert serial["error"] is None and serial["samples_per_s"] > 0
    assert "RuntimeError" in crashed["error"] and "sample" in crashed["error"]
    assert crashed["error"].endswith("RuntimeError: sample 0 is corrupt")
    assert "\n" not in crashed["error"] and "Traceback" not in crashed["error"]
    captured = capsys.readouterr()
    assert "Key figures" in captured.out  # the short view names the failed trial
    assert "failed: num_workers=1" in captured.out and "sample 0 is corrupt" in captured.out
    # with --quiet there is no summary, so the failure goes to stderr instead
    assert main(["stress", _target("crashes_in_workers"), "--workers", "0,1", "--batches", "5",
                 "--quiet"]) == 0
    quiet = capsys.readouterr()
    assert "pipecheck: trial num_workers=1" in quiet.err and "sample 0 is corrupt" in quiet.err
    assert quiet.out == ""


@pytest.mark.slow
def test_cli_subprocess_runs_a_dataset_target(tmp_path):
    out = tmp_path / "run.json"
    done = subprocess.run(
        [sys.executable, "-m", "pipecheck", "stress", _target("sleepy_dataset"), "--workers",
         "0", "--batches", "4", "--batch-size", "2", "--step-time", "0.01+-0.005",
         "--no-stacks", "--no-persistent-workers", "--json", str(out), "--quiet"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = pipecheck.load(out)
    assert report.kind == "stress" and report.loader.batch_size == 2
    (trial,) = report.stress.trials
    assert trial.samples_per_s == pytest.approx(2 * trial.batches_per_s)


def test_python_api_rebuilds_a_dataloader_per_configuration():
    loader = DataLoader(SleepPerSample(n=64, sleep_s=0.002), batch_size=4, drop_last=True)
    report = pipecheck.stress(loader, num_workers=[0, 1], prefetch_factors=[2, 3], trial_batches=5)
    configs = [t.config for t in report.stress.trials]
    assert [(c["num_workers"], c["prefetch_factor"]) for c in configs] == [
        (0, None), (1, 2), (1, 3)]
    assert all(t.error is None for t in report.stress.trials)
    assert report.loader.batch_size == 4 and report.loader.drop_last is True
    assert loader.num_workers == 0  # the user's loader is untouched


def test_budget_skips_the_remaining_configurations():
    loader = DataLoader(IndexDataset(32), batch_size=4)
    report = pipecheck.stress(loader, num_workers=[0, 1, 2], budget_s=1e-6, trial_batches=3)
    assert len(report.stress.trials) == 1
    skipped = report.stress.skipped
    assert [entry.config["num_workers"] for entry in skipped] == [1, 2]
    assert {entry.reason for entry in skipped} == {"budget spent"}


def test_persistent_workers_trial_runs_two_epochs():
    # The loader's own settings are the baseline, and the only configuration here.
    loader = DataLoader(IndexDataset(32), batch_size=4, num_workers=1, persistent_workers=True)
    report = pipecheck.stress(loader, num_workers=[1], persistent_workers=True, trial_batches=4)
    (trial,) = report.stress.trials
    assert trial.config["persistent_workers"] is True and trial.error is None
    assert report.consumer.epochs == 2 and report.loader.persistent_workers is True


def test_emulated_step_time_shows_as_compute_not_wait():
    loader = DataLoader(IndexDataset(64), batch_size=4)
    result = measure(loader, LoaderSettings(0), TrialLimits(batches=6), StepTime(0.02))
    assert result.error is None
    assert result.stall_fraction < 0.5
    assert result.batches_per_s < 1 / 0.02 * 1.05  # at most one batch per step


def test_sweep_configs_vary_prefetch_only_with_workers():
    configs = sweep_configs([0, 2, 0], [2, 4], persistent_workers=True)
    assert [(c.num_workers, c.prefetch_factor, c.persistent_workers) for c in configs] == [
        (0, None, False), (2, 2, True), (2, 4, True)]
    assert sweep_configs(None, None)[0] == LoaderSettings(0)
    with pytest.raises(BadInputError, match="prefetch_factor must be >= 1"):
        sweep_configs([1], [0])


def test_parse_step_time():
    assert parse_step_time("0.05") == StepTime(0.05, 0.0)
    assert parse_step_time("0.05+-0.01") == StepTime(0.05, 0.01)
    with pytest.raises(BadInputError, match="0.05\\+-0.01"):
        parse_step_time("fast")
    with pytest.raises(BadInputError, match="jitter"):
        parse_step_time("0.01+-0.05")
    for endless in ("inf", "nan"):  # time.sleep(inf) would fail every trial, not the option
        with pytest.raises(BadInputError, match="finite mean"):
            parse_step_time(endless)


def test_rebuild_loader_keeps_batching_and_applies_the_config():
    def collate(batch):
        return batch

    loader = DataLoader(IndexDataset(10), batch_size=3, drop_last=True, collate_fn=collate)
    rebuilt = rebuild_loader(loader, LoaderSettings(2, 4), timeout_s=5.0)
    assert (rebuilt.num_workers, rebuilt.prefetch_factor, rebuilt.timeout) == (2, 4, 5.0)
    assert rebuilt.batch_size == 3 and rebuilt.drop_last and rebuilt.collate_fn is collate
    assert rebuilt.sampler is loader.sampler


@pytest.mark.slow
def test_in_process_hung_worker_fails_through_torchs_timeout():
    loader = DataLoader(SleepPerSample(hang=True), batch_size=2)
    with pytest.raises(BadInputError, match="DataLoader timed out after 2 seconds"):
        pipecheck.stress(loader, num_workers=[1], timeout_s=2)


def test_headline_is_the_recommended_sweep_trials_steady_rate_with_the_whole_run_labelled(
        tmp_path):
    # 16 batches an epoch: the trial runs several epochs, each restarting its worker, so the
    # whole-run rate (start-ups included) is below the steady rate the sweep compares.
    loader = DataLoader(SleepPerSample(n=64, sleep_s=0.002), batch_size=4)
    report = pipecheck.stress(loader, num_workers=[1], trial_s=1.5, persistent_workers=False,
                              stacks=False)
    (trial,) = report.stress.trials
    headline = report.stress.headline
    assert headline.config == trial.config == report.stress.recommended.config
    assert headline.steady_samples_per_s == trial.samples_per_s
    assert headline.run_samples_per_s == trial.run_samples_per_s \
        == pytest.approx(report.consumer.samples_per_s)
    assert trial.epochs >= 2 and headline.run_samples_per_s < trial.samples_per_s
    text = report.render(width=200, verbose=True)
    steady_line, whole_line = text.split("Throughput\n", 1)[1].splitlines()[:2]
    assert steady_line.startswith(f"  steady {rate(trial.samples_per_s, 'samples')} · ")
    whole = rate(report.consumer.samples_per_s, "samples")
    assert whole_line.startswith(f"  whole run {whole} · ")
    assert "start-up included" in whole_line
    sweep = text.split("Stress sweep\n", 1)[1]
    assert "rates over steady batches: each epoch's first batch (worker start-up) left out" \
        in " ".join(sweep.split())
    # A report saved before the headline key existed still loads, and reads as before.
    saved = tmp_path / "old.json"
    report.save(saved)
    data = json.loads(saved.read_text())
    del data["stress"]["headline"]
    for entry in data["stress"]["trials"]:
        del entry["run_samples_per_s"], entry["run_batches_per_s"]
    saved.write_text(json.dumps(data))
    old_text = pipecheck.load(saved).render(width=200, verbose=True)
    assert "whole run" not in old_text
    assert old_text.split("Throughput\n", 1)[1].startswith(
        f"  {rate(report.consumer.samples_per_s, 'samples')} · ")
