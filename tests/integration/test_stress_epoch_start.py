"""persistent_workers in stress: the best configuration's epoch restart is measured with and
without persistent workers (real worker processes, a costly worker_init_fn), and
``persistent_workers=True`` is recommended only when epoch start matters."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from torch.utils.data import DataLoader, RandomSampler

import pipecheck
from pipecheck.cli import main
from pipecheck.recommend.limits import PERSISTENT_START_SHARE
from pipecheck.render.sections.stress import epoch_start_text
from pipecheck.report_sections import EpochStart, ExpectedRate, PersistentPair, StressChoice
from pipecheck.stress.epoch_start import RESTART_EPOCHS, SHORT_EPOCH_BATCHES, apply
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.target import FirstIndices, rebuild_loader
from stress_targets import (WORKER_START_S, long_epoch_loader, slow_start_loader,
                            slow_start_stream)
from helpers_datasets import IndexDataset
from paths import STRESS_TARGETS


def _stress(factory, **options):
    return pipecheck.stress(factory, num_workers=[2], trial_batches=12, stacks=False, **options)


def _text(report) -> str:
    """The terminal report (every section: --verbose) with its line wrapping undone."""
    return " ".join(report.render(width=120, verbose=True).split())


@pytest.mark.slow
def test_a_costly_worker_start_makes_persistent_workers_the_recommendation():
    events = []
    report = _stress(slow_start_loader, progress=events.append)
    # the live display follows the epoch-start pair too, as trials 1 and 2 of 2 after the sweep
    done = [e for e in events if e.event == "done"]
    assert [(e.config.persistent_workers, e.done, e.total) for e in done[-2:]] == \
        [(False, 1, 2), (True, 2, 2)]
    entry = report.stress.epoch_start
    assert entry.status == "ok", entry
    restart = entry.restart_s
    # Without persistent workers every epoch pays the 0.4 s worker_init_fn again; with them
    # a restart is one quick batch. Margins hold on a loaded 2-core machine.
    assert restart.not_persistent >= 0.8 * WORKER_START_S
    assert restart.persistent < 0.5 * restart.not_persistent
    short = entry.short_epoch_s
    assert entry.saving_s == pytest.approx(short.not_persistent - short.persistent)
    assert entry.saving_s >= 0.8 * WORKER_START_S
    assert entry.method == "shortened" and entry.matters is True
    assert entry.fraction >= PERSISTENT_START_SHARE and entry.epoch_s > 0
    assert [t.config["persistent_workers"] for t in entry.trials] == [False, True]
    # whole shortened epochs: every one ran to its end
    assert [t.batches for t in entry.trials] == [RESTART_EPOCHS * SHORT_EPOCH_BATCHES] * 2
    recommended = report.stress.recommended
    assert recommended.config["persistent_workers"] is True
    assert recommended.changes["persistent_workers"] == [False, True]
    assert recommended.expected.epoch_saving_s == pytest.approx(entry.saving_s)
    text = _text(report)
    assert "epoch start:" in text and "persistent_workers=True recommended" in text
    assert json.loads(report.to_json())["stress"]["epoch_start"]["matters"] is True


@pytest.mark.slow
def test_a_long_epoch_keeps_the_recommendation_unchanged():
    report = _stress(long_epoch_loader)
    entry = report.stress.epoch_start
    assert entry.status == "ok" and entry.matters is False, entry
    assert entry.fraction < PERSISTENT_START_SHARE, entry
    assert entry.epoch_s > 20 * entry.saving_s, entry
    recommended = report.stress.recommended
    assert recommended.config["persistent_workers"] is False, recommended
    assert "persistent_workers" not in recommended.changes, recommended
    assert "not worth changing" in _text(report)


@pytest.mark.slow
def test_an_iterable_without_length_is_cut_and_left_to_the_user_to_weigh():
    report = _stress(slow_start_stream)
    entry = report.stress.epoch_start
    assert entry.status == "ok" and entry.method == "cut", entry
    assert entry.epoch_s is None and entry.fraction is None and entry.matters is None
    assert entry.restart_s.not_persistent >= 0.8 * WORKER_START_S
    assert report.stress.recommended.config["persistent_workers"] is False
    text = _text(report)
    assert "no len()" in text and "lower bound" in text


def test_forcing_persistent_workers_either_way_skips_the_epoch_start_trials():
    for forced in (True, False):
        report = _stress(slow_start_loader, persistent_workers=forced)
        assert report.stress.epoch_start is None
        assert "epoch_start" not in report.to_dict()["stress"]
        assert report.stress.best.config["persistent_workers"] is forced


def test_no_workers_means_no_epoch_start_trials():
    report = pipecheck.stress(slow_start_loader, num_workers=[0], trial_batches=5, stacks=False)
    assert report.stress.epoch_start == EpochStart(
        status="skipped", reason="the best configuration has no workers")
    assert report.to_dict()["stress"]["epoch_start"] == {
        "status": "skipped", "reason": "the best configuration has no workers"}
    assert "epoch start: skipped" in _text(report)


def test_first_indices_cut_epochs_and_keep_shuffling():
    loader = DataLoader(IndexDataset(100), batch_size=4, sampler=RandomSampler(range(100)))
    short = rebuild_loader(loader, LoaderSettings(0), epoch_batches=3)
    assert len(short) == 3
    first, second = ([int(i) for b in short for i in b] for _ in range(2))
    assert len(first) == 12 and first != second  # a fresh shuffle each epoch
    batched = DataLoader(IndexDataset(100), batch_sampler=[[0, 1], [2, 3], [4, 5]])
    rebuilt = rebuild_loader(batched, LoaderSettings(0), epoch_batches=2)
    assert [b.flatten().tolist() for b in rebuilt] == \
        [[0, 1], [2, 3]]
    assert len(FirstIndices(iter(range(10)), 4)) == 4  # a sampler without a length


def _choice(config, baseline, changes, samples_per_s=None):
    return StressChoice(config=config, expected=ExpectedRate(samples_per_s, None),
                        baseline=baseline, baseline_samples_per_s=None, gain=None,
                        changes=changes)


def _epoch(matters, saving_s):
    return EpochStart(status="ok", reason=None, matters=matters, saving_s=saving_s)


def test_apply_changes_only_a_recommendation_that_epoch_start_matters_to():
    recommended = _choice({"num_workers": 2, "persistent_workers": False},
                          {"num_workers": 0, "persistent_workers": False},
                          {"num_workers": [0, 2]}, samples_per_s=10.0)
    saved = copy.deepcopy(recommended)
    assert apply(recommended, _epoch(None, 1.0)).config["persistent_workers"] is False
    matters = apply(recommended, _epoch(True, 1.0))
    assert matters.changes == {"num_workers": [0, 2], "persistent_workers": [False, True]}
    assert matters.expected == ExpectedRate(10.0, None, epoch_saving_s=1.0)
    assert matters.config == {"num_workers": 2, "persistent_workers": True}
    assert recommended == saved  # the section's entry is replaced, never edited in place
    # A baseline that already keeps its workers keeps them: trials without persistent workers
    # won on throughput, which says nothing about epoch start.
    kept = _choice({"num_workers": 4, "persistent_workers": False},
                   {"num_workers": 2, "persistent_workers": True},
                   {"num_workers": [2, 4], "persistent_workers": [True, False]})
    kept = apply(kept, _epoch(False, 0.01))
    assert kept.config["persistent_workers"] is True
    assert kept.changes == {"num_workers": [2, 4]}
    no_workers = _choice({"num_workers": 0}, None, {})
    assert apply(no_workers, _epoch(True, 1.0)) is no_workers
    assert apply(None, _epoch(True, 1.0)) is None


def test_epoch_start_text_states_its_numbers_and_its_limits():
    entry = EpochStart(status="ok", reason=None,
                       restart_s=PersistentPair(persistent=0.01, not_persistent=0.5),
                       saving_s=0.49, epoch_s=None, fraction=None, matters=None, method="cut")
    text = epoch_start_text(entry)
    assert "500 ms" in text and "no len()" in text and "lower bound" in text
    assert "each later epoch takes no longer" in epoch_start_text(
        dataclasses.replace(entry, saving_s=-0.002))
    assert epoch_start_text(None) is None
    assert epoch_start_text(EpochStart(status="failed", reason="x")) == "failed: x"


@pytest.mark.slow
def test_cli_target_file_reports_epoch_start(tmp_path, capsys):
    out = tmp_path / "stress.json"
    code = main(["stress", f"{STRESS_TARGETS}:slow_start_loader", "--workers", "1",
                 "--batches", "6", "--no-stacks", "--quiet", "--json", str(out)])
    assert code == 0
    entry = json.loads(out.read_text())["stress"]["epoch_start"]
    assert entry["status"] == "ok" and entry["matters"] is True
    assert entry["restart_s"]["not_persistent"] >= 0.8 * WORKER_START_S
