"""pipecheck stress options beyond num_workers: in_order, batch sizes, the baseline to beat,
the memory guard, live progress events, and the search's check of its own misses."""

from __future__ import annotations

import dataclasses
import re

import pytest
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

import pipecheck
from pipecheck.cli import main
from pipecheck.environment import torch_has_in_order
from pipecheck.errors import BadInputError
from pipecheck.records import ProcessStats
from pipecheck.stress import memory
from pipecheck.stress.runner import Sweep, _changes, run_trial
from pipecheck.stress.search import _unverified_neighbours, calibration_configs
from pipecheck.stress.settings import parse_bool_list, parse_config, sweep_configs
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.target import given_config, rebuild_loader
from pipecheck.stress.tracker import ProgressEvent
from pipecheck.stress.trial import TrialLimits, TrialResult
from helpers_datasets import IndexDataset
from stress_targets import SleepPerSample

needs_in_order = pytest.mark.skipif(not torch_has_in_order(), reason="torch without in_order")


# -- settings -----------------------------------------------------------------------------------


def test_sweep_varies_in_order_only_with_two_or_more_workers_and_batch_size_outermost():
    configs = sweep_configs([0, 1, 2], [2], in_orders=[True, False], batch_sizes=[4, 8])
    assert [(c.batch_size, c.num_workers, c.in_order) for c in configs] == [
        (4, 0, True), (4, 1, True), (4, 2, True), (4, 2, False),
        (8, 0, True), (8, 1, True), (8, 2, True), (8, 2, False)]
    with pytest.raises(BadInputError, match="batch_size must be >= 1"):
        sweep_configs([0], batch_sizes=[0])


def test_config_keywords_and_dict_leave_unset_settings_out():
    config = LoaderSettings(2, 4, in_order=False, batch_size=16)
    assert config.to_kwargs() == {"num_workers": 2, "prefetch_factor": 4,
                                      "persistent_workers": False, "in_order": False,
                                      "batch_size": 16}
    assert "pin_memory" not in config.to_dict()
    assert LoaderSettings.from_dict(config.to_dict()) == config


def test_parse_bool_list_and_config_give_one_line_errors():
    assert parse_bool_list("true,False,1", "--in-order") == [True, False]
    with pytest.raises(BadInputError, match="--in-order takes true or false"):
        parse_bool_list("maybe", "--in-order")
    assert parse_config("num_workers=4, prefetch_factor=2,persistent_workers=yes",
                        "--baseline") == LoaderSettings(4, 2, True)
    for text, fragment in [("prefetch_factor=2", "needs num_workers"),
                           ("num_workers=four", "num_workers must be an integer"),
                           ("workers=4", "'workers=4' is not one of"),
                           ("num_workers=2,in_order=perhaps", "in_order must be true or false")]:
        with pytest.raises(BadInputError, match=fragment):
            parse_config(text, "--baseline")


def test_changes_name_each_setting_that_differs():
    assert _changes(LoaderSettings(0), LoaderSettings(4, 2, in_order=False)) == {
        "num_workers": [0, 4], "prefetch_factor": [None, 2], "in_order": [None, False]}


# -- the given configuration as the baseline ---------------------------------------------------


def test_given_config_comes_from_a_loader_or_the_factory_defaults():
    loader = DataLoader(IndexDataset(8), num_workers=3, prefetch_factor=5)
    assert given_config(loader) == LoaderSettings(3, 5, False)
    assert given_config(DataLoader(IndexDataset(8))) == LoaderSettings(0)

    def factory(num_workers=2, persistent_workers=True, batch_size=4):
        return DataLoader(IndexDataset(8))

    assert given_config(factory) == LoaderSettings(2, 2, True)
    assert given_config(lambda num_workers, **kw: None) is None  # no default: none given
    assert given_config(lambda **kw: None) is None


@pytest.mark.slow
def test_a_loaders_own_settings_are_the_baseline_measured_first_and_the_gain_is_against_them():
    loader = DataLoader(SleepPerSample(n=400, sleep_s=0.003), batch_size=4, num_workers=1)
    report = pipecheck.stress(loader, trial_batches=25, trial_s=1.5, budget_s=8)
    section = report.stress
    first = section.trials[0].config
    assert (first["num_workers"], first["prefetch_factor"]) == (1, 2)
    recommended = section.recommended
    assert recommended.baseline == first
    assert recommended.baseline_samples_per_s == section.trials[0].samples_per_s
    assert recommended.gain == pytest.approx(
        recommended.expected.samples_per_s / recommended.baseline_samples_per_s)
    if recommended.config != first:
        assert recommended.changes
    calibration = section.search.calibration
    assert [c["num_workers"] for c in calibration] == [1]  # the baseline is the 1-worker trial


def test_an_explicit_baseline_joins_an_explicit_worker_list():
    loader = DataLoader(IndexDataset(64), batch_size=4)
    report = pipecheck.stress(loader, num_workers=[0], baseline={"num_workers": 1},
                              trial_batches=4)
    assert [t.config["num_workers"] for t in report.stress.trials] == [1, 0]
    with pytest.raises(BadInputError, match="bad baseline"):
        pipecheck.stress(loader, num_workers=[0], baseline={"workers": 1})


# -- batch sizes and in_order ------------------------------------------------------------------


def test_batch_sizes_are_compared_in_samples_per_second():
    loader = DataLoader(IndexDataset(400), batch_size=4)
    report = pipecheck.stress(loader, num_workers=[0], batch_size=[2, 8], trial_batches=6)
    trials = report.stress.trials
    assert [t.config["batch_size"] for t in trials] == [2, 8]
    for trial in trials:
        assert trial.error is None
        assert trial.samples_per_s == pytest.approx(
            trial.batches_per_s * trial.config["batch_size"], rel=1e-6)


def test_rebuild_applies_a_batch_size_and_refuses_one_it_cannot_set():
    loader = DataLoader(IndexDataset(32), batch_size=4, drop_last=True)
    rebuilt = rebuild_loader(loader, LoaderSettings(0, batch_size=8))
    assert rebuilt.batch_size == 8 and rebuilt.drop_last is True
    own_sampler = DataLoader(IndexDataset(32),
                             batch_sampler=BatchSampler(SequentialSampler(range(32)), 4, False))
    with pytest.raises(BadInputError, match="cannot set batch_size"):
        rebuild_loader(own_sampler, LoaderSettings(0, batch_size=8))


@needs_in_order
def test_in_order_false_runs_out_of_order_and_is_reported():
    loader = DataLoader(SleepPerSample(n=64, sleep_s=0.002), batch_size=4)
    report = pipecheck.stress(loader, num_workers=[2], in_order=[True, False], trial_batches=6)
    trials = report.stress.trials
    assert [t.config["in_order"] for t in trials] == [True, False]
    assert all(t.error is None for t in trials)
    rebuilt = rebuild_loader(loader, LoaderSettings(2, 2, in_order=False))
    assert rebuilt.in_order is False


# -- the memory guard --------------------------------------------------------------------------


def _record_with_processes(processes):
    result = run_trial(DataLoader(IndexDataset(16), batch_size=4), LoaderSettings(0),
                       TrialLimits(batches=3), step=None, timeout_s=30.0)
    host = dataclasses.replace(result.record.host, processes=processes)
    return dataclasses.replace(result.record, host=host)


def _process(role, rss, pss=None):
    return ProcessStats(pid=1, role=role, cpu_s=0.0, cpu_percent_mean=0.0, rss_max_bytes=rss,
                        pss_max_bytes=pss, read_bytes=None, read_chars=None,
                        first_seen_at_s=0.0, last_seen_at_s=1.0)


def test_memory_guard_skips_configs_whose_workers_would_not_fit():
    gib = 1024 ** 3
    record = _record_with_processes([_process("main", 2 * gib), _process("worker", 3 * gib, gib),
                                     _process("worker", 3 * gib, gib // 2)])
    seen = memory.footprint([record, None])
    assert (seen.main_bytes, seen.per_worker_bytes, seen.basis) == (2 * gib, gib, "pss")
    available = lambda: 10 * gib  # noqa: E731
    assert memory.skip_reason(LoaderSettings(4, 2), [record], available) is None  # 6 <= 8 GiB
    reason = memory.skip_reason(LoaderSettings(8, 2), [record], available)  # 10 > 8 GiB
    assert reason.startswith("memory: needs about 10") and "8 workers x 1" in reason
    assert "PSS" in reason and "available" in reason
    assert memory.skip_reason(LoaderSettings(0), [record], lambda: 1) is None
    assert memory.skip_reason(LoaderSettings(8, 2), [_record_with_processes([])], lambda: 1) is None
    rss_only = _record_with_processes([_process("worker", gib)])
    assert memory.footprint([rss_only]).basis == "rss"


def test_sweep_records_memory_skips_with_their_reason(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 1)
    monkeypatch.setattr(memory, "footprint",
                        lambda records: memory.MemoryFootprint(100, 100, "pss"))
    loader = DataLoader(IndexDataset(64), batch_size=4)
    report = pipecheck.stress(loader, num_workers=[0, 1, 2], trial_batches=4)
    assert [t.config["num_workers"] for t in report.stress.trials] == [0]
    skipped = report.stress.skipped
    assert [s.config["num_workers"] for s in skipped] == [1, 2]
    assert all(s.reason.startswith("memory: needs about") for s in skipped)


# -- live progress -----------------------------------------------------------------------------


def test_progress_events_carry_batches_rate_and_time_left():
    events: list[ProgressEvent] = []
    loader = DataLoader(SleepPerSample(n=200, sleep_s=0.01), batch_size=2)
    pipecheck.stress(loader, num_workers=[0, 1], trial_batches=40, budget_s=60,
                     progress=events.append, stacks=False, persistent_workers=False)
    kinds = [e.event for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("done") == 2
    batch_events = [e for e in events if e.event == "batch"]
    assert batch_events, "a 0.8 s trial sends batch events every 0.25 s"
    for event in batch_events:
        assert event.batches > 0 and event.batches_per_s > 0
        assert 0 <= event.time_left_s <= 60
    assert [e.done for e in events if e.event == "done"] == [1, 2]
    assert events[-1].result is not None and events[-1].result.ok


def test_time_left_is_the_budget_or_the_trials_left_whichever_is_shorter():
    config = LoaderSettings(0)
    assert ProgressEvent("start", config, 0, 10, elapsed_s=5, budget_s=60).time_left_s == 55
    event = ProgressEvent("batch", config, 8, 10, elapsed_s=20, budget_s=60, mean_trial_s=2.0,
                          trial_elapsed_s=0.5)
    assert event.time_left_s == pytest.approx(3.5)
    assert ProgressEvent("done", config, 10, 10, elapsed_s=80, budget_s=60).time_left_s == 0


def test_cli_rejects_bad_option_values_with_one_line(capsys):
    for args, fragment in [(["--in-order", "sometimes"], "--in-order takes true or false"),
                           (["--batch-size", "0"], "--batch-size: takes integers from 1 to"),
                           (["--baseline", "num_workers"], "is not one of")]:
        assert main(["stress", "nowhere.py:make", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and fragment in err[0]


# -- the search checks its own misses ----------------------------------------------------------


def _result(config, samples_per_s):
    return TrialResult(config, samples_per_s, samples_per_s / 4, 0.1, 0.5, 40, 2.0)


def test_a_missed_best_gets_its_neighbours_measured_once():
    best = _result(LoaderSettings(3, 2), 660.0)
    sweep = Sweep(trials=[best])
    sweep.predicted[best.config] = {"samples_per_s": 790.0}
    remaining = [LoaderSettings(2, 2), LoaderSettings(4, 2), LoaderSettings(2, 4),
                 LoaderSettings(5, 2)]
    assert _unverified_neighbours(sweep, best, remaining, 0.05, []) == [
        LoaderSettings(2, 2), LoaderSettings(4, 2)]
    assert _unverified_neighbours(sweep, best, remaining, 0.05, [best.config]) == []
    assert _unverified_neighbours(sweep, best, remaining, 0.25, []) == []  # within threshold
    sweep.predicted.clear()  # a calibration trial has no prediction to have missed
    assert _unverified_neighbours(sweep, best, remaining, 0.05, []) == []


def test_calibration_takes_each_batch_sizes_first_and_one_worker_configs():
    configs = sweep_configs([0, 1, 2], [2], batch_sizes=[4, 8])
    assert [(c.batch_size, c.num_workers) for c in calibration_configs(configs)] == [
        (4, 0), (4, 1), (8, 0), (8, 1)]


def test_live_display_shows_the_running_config_its_rate_and_time_left():
    import io

    from rich.console import Console

    from pipecheck.stress.progress import SweepProgress, describe

    config = LoaderSettings(2, 4)
    event = ProgressEvent("batch", config, 1, 5, elapsed_s=10, budget_s=60, mean_trial_s=3.0,
                          batches=120, trial_elapsed_s=2.0)
    assert describe(event) == "num_workers=2 prefetch_factor=4 persistent_workers=False: " \
                              "120 batches, 60.0 batches/s"
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=140)
    with SweepProgress(console=console) as display:
        display(event)
        display._progress.refresh()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "60.0 batches/s" in text and "1/5" in text and "at most 10.00 s left" in text


@pytest.mark.slow
def test_a_profiling_trial_adds_hot_stacks_to_the_stress_report():
    from pipecheck.stress import stacks_unavailable

    loader = DataLoader(SleepPerSample(n=400, sleep_s=0.002), batch_size=4, num_workers=1)
    report = pipecheck.stress(loader, num_workers=[1], trial_batches=30, trial_s=2.0, stacks=True)
    profile = report.stress.profile
    assert report.stacks is not None
    if stacks_unavailable() is None:
        assert profile.status == "ok" and profile.config["num_workers"] == 1
    else:
        assert report.stacks.status != "ok"
    off = pipecheck.stress(loader, num_workers=[1], trial_batches=4, stacks=False)
    assert off.stacks is None and off.stress.profile.status == "off"


def test_with_cuda_the_best_configuration_is_measured_again_pinned(monkeypatch):
    import importlib

    # The package, not the function pipecheck.stress that shadows it as an attribute.
    stress_module = importlib.import_module("pipecheck.stress")
    monkeypatch.setattr(stress_module, "cuda_available", lambda: True)
    loader = DataLoader(IndexDataset(64), batch_size=4, num_workers=1)
    with pytest.warns(UserWarning, match="pin_memory"):  # torch: no accelerator to pin for
        report = pipecheck.stress(loader, num_workers=[1], trial_batches=6, stacks=False)
    configs = [t.config for t in report.stress.trials]
    assert [c.get("pin_memory") for c in configs] == [None, True]
    monkeypatch.setattr(stress_module, "cuda_available", lambda: False)
    report = pipecheck.stress(loader, num_workers=[1], trial_batches=6, stacks=False)
    assert len(report.stress.trials) == 1
