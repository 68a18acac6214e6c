"""Many short epochs of a real DataLoader: the wrapped loader's report lists its first and most
recent epochs, folds the others into ``timeline.folded_epochs``, and its figures count every
epoch; the saved report loads back the same. (The lists are shortened here so that a few dozen
epochs fold; ``benchmarks/many_epochs.py`` runs 100,000.)"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import pipecheck
from pipecheck.probes import consumer as consumer_module

FIRST, LAST = 2, 5


@pytest.fixture
def short_lists(monkeypatch):
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_FIRST", FIRST)
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_LAST", LAST)


def one_sample_loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.arange(8.0).reshape(1, 8)), batch_size=1)


def test_next_iter_and_for_loop_epochs_fold_and_still_count(short_lists, tmp_path):
    wrapped = pipecheck.wrap(one_sample_loader(), host=False)
    peeked = [next(iter(wrapped))[0].sum().item() for _ in range(30)]  # validation sampling
    looped = 0
    for _ in range(30):  # a tiny dataset trained for many epochs
        for batch in wrapped:
            looped += len(batch[0])
    assert peeked == [28.0] * 30 and looped == 30
    report = wrapped.report()
    wrapped.close()
    consumer, timeline = report.consumer, report.timeline
    assert consumer.epochs == 60 and consumer.batches == 60 and consumer.samples == 60
    assert consumer.status == "complete"
    assert [e.epoch for e in timeline.epochs] == [0, 1, 55, 56, 57, 58, 59]
    assert [e.ended for e in timeline.epochs] == ["break"] * 2 + ["exhausted"] * 5
    folded = timeline.folded_epochs
    assert folded is not None and folded.epochs == 53
    assert folded.started == 53 and folded.started_batches == 53
    assert folded.exhausted == 25 and folded.without_last_compute == 28
    assert folded.last_waits == 25
    for total in ("batches", "samples", "wait_s", "compute_s", "wall_s"):
        listed = sum(getattr(e, total) for e in timeline.epochs)
        assert getattr(consumer, total) == pytest.approx(listed + getattr(folded, total))
    assert consumer.first_batch_s == timeline.epochs[0].first_batch_s
    # every batch here is its epoch's first: nothing is left for a steady figure
    assert consumer.steady_stall_fraction is None
    saved = report.save(tmp_path / "run.json")
    again = pipecheck.load(saved)
    assert again.timeline.folded_epochs == folded
    assert again.to_dict() == report.to_dict()


def test_a_long_epoch_after_many_short_ones_is_judged_on_all_of_them(short_lists):
    """The steady stall leaves out each epoch's first batch, folded epochs' too."""
    data = TensorDataset(torch.randn(64, 4))
    wrapped = pipecheck.wrap(DataLoader(data, batch_size=1), host=False)
    for _ in range(20):
        next(iter(wrapped))
    for _ in wrapped:
        pass
    report = wrapped.report()
    wrapped.close()
    assert report.consumer.epochs == 21 and report.consumer.batches == 20 + 64
    assert report.timeline.folded_epochs.epochs == 21 - FIRST - LAST
    assert report.consumer.steady_stall_fraction is not None
    # 63 steady batches: the 21 epoch starts' waits are left out of the steady wait
    first_waits = (sum(e.first_batch_s for e in report.timeline.epochs)
                   + report.timeline.folded_epochs.first_batch_s)
    assert report.diagnosis.judgement.wait_per_batch_s == pytest.approx(
        (report.consumer.wait_s - first_waits) / 63)


def test_main_process_production_is_scaled_to_every_timed_epoch_listed_or_folded(short_lists):
    """With num_workers=0 and fast batches only some epochs are timed; the timed figures are
    scaled to all the batches of those epochs, folded ones included."""
    wrapped = pipecheck.wrap(DataLoader(TensorDataset(torch.randn(100, 4)), batch_size=1),
                             host=False)
    for _ in range(40):
        for _ in wrapped:
            pass
    record = wrapped.record()
    wrapped.close()
    assert record.consumer.folded_epochs.epochs == 40 - FIRST - LAST
    (main,) = record.workers
    assert record.probed_epochs is not None and record.probed_epochs >= 40 // 8
    assert main.batches == record.probed_epochs * 100
