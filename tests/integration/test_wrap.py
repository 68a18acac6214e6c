"""pipecheck.wrap on real DataLoaders with real worker processes: transparency and robustness."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

import pipecheck
from wrap_datasets import EmptyDataset, FailingDataset, RangeStream, SquaresDataset


def seeded_loader(**kw) -> DataLoader:
    return DataLoader(SquaresDataset(37), batch_size=4, shuffle=True,
                      generator=torch.Generator().manual_seed(7), **kw)


def epochs_of(loader, n_epochs: int) -> list[list]:
    out = []
    for _ in range(n_epochs):
        out.append([(x.tolist(), y.tolist()) for x, y in loader])
    return out


@pytest.mark.parametrize("workers,context,epochs", [
    (0, None, 3), (2, "fork", 3),
    pytest.param(2, "spawn", 2, marks=pytest.mark.slow)])  # spawn: ~1.5 s a worker
def test_identical_batches_map_style(workers, context, epochs):
    kw = dict(num_workers=workers, multiprocessing_context=context)
    plain = epochs_of(seeded_loader(**kw), epochs)
    wrapped = pipecheck.wrap(seeded_loader(**kw))
    assert epochs_of(wrapped, epochs) == plain
    assert plain[0] != plain[1]  # the shuffle really differs per epoch
    report = wrapped.report()
    assert report.consumer.batches == epochs * 10
    assert report.consumer.samples == epochs * 37
    wrapped.close()


def test_identical_batches_iterable_with_workers():
    def make():
        return DataLoader(RangeStream(50), batch_size=5, num_workers=2)

    plain = [[b.tolist() for b in make()] for _ in range(2)]
    wrapped = pipecheck.wrap(make())
    got = [[b.tolist() for b in wrapped] for _ in range(2)]
    assert got == plain
    report = wrapped.report()
    assert report.consumer.samples == 100
    assert sum(w.batches for w in report.producer.workers) == 20
    wrapped.close()


def test_len_attributes_and_set_epoch():
    ds = SquaresDataset(20)
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=3)
    loader = DataLoader(ds, batch_size=5, sampler=sampler)
    wrapped = pipecheck.wrap(loader)
    assert len(wrapped) == 4
    assert wrapped.dataset is ds and wrapped.batch_size == 5 and wrapped.sampler is sampler
    wrapped.sampler.set_epoch(1)
    first = [y.tolist() for _, y in wrapped]
    sampler.set_epoch(1)
    assert first == [y.tolist() for _, y in loader]
    wrapped.set_epoch_seen = True  # the wrapper has no state of the user's: the loader's
    assert loader.set_epoch_seen is True
    del wrapped.set_epoch_seen
    assert not hasattr(loader, "set_epoch_seen")
    wrapped.close()


def test_original_loader_is_untouched():
    loader = seeded_loader(num_workers=2)
    dataset, collate = loader.dataset, loader.collate_fn
    wrapped = pipecheck.wrap(loader)
    list(wrapped)
    assert loader.dataset is dataset and loader.collate_fn is collate
    wrapped.close()


def test_break_then_next_epoch():
    wrapped = pipecheck.wrap(DataLoader(SquaresDataset(40), batch_size=4, num_workers=2))
    for i, _ in enumerate(wrapped):
        if i == 2:
            break
    assert len(list(wrapped)) == 10
    report = wrapped.report()
    assert report.consumer.batches == 13
    assert report.consumer.epochs == 2
    wrapped.close()


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_worker_exception_reaches_user_unchanged(workers):
    def run(loader):
        with pytest.raises(ValueError) as info:
            for _ in loader:
                pass
        return info.value

    plain = run(DataLoader(FailingDataset(30, bad=13), batch_size=4, num_workers=workers))
    wrapped = pipecheck.wrap(DataLoader(FailingDataset(30, bad=13), batch_size=4,
                                        num_workers=workers))
    err = run(wrapped)
    assert type(err) is type(plain)
    assert "corrupt sample 13" in str(err) and "corrupt sample 13" in str(plain)
    report = wrapped.report()
    assert report.consumer.status == "error"
    assert "corrupt sample 13" in (report.consumer.error or "")
    assert any(f.kind == "loader-error" for f in report.diagnosis.findings)
    # the wrapper still works afterwards
    wrapped_ok = pipecheck.wrap(DataLoader(SquaresDataset(8), batch_size=4))
    assert len(list(wrapped_ok)) == 2
    wrapped.close()
    wrapped_ok.close()


def test_ctrl_c_in_the_loop_keeps_a_usable_report():
    # Python's own Ctrl-C handler, as an interactive run has: a shell starts background jobs
    # with SIGINT ignored, and Python then installs none.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    wrapped = pipecheck.wrap(DataLoader(SquaresDataset(80), batch_size=4, num_workers=2))
    seen = 0
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in wrapped:
                seen += 1
                if seen == 5:
                    os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered mid-step
    finally:
        signal.signal(signal.SIGINT, previous)
    report = wrapped.report()
    assert report.consumer.batches == 5
    assert "5" in report.render(width=100)
    wrapped.close()


def test_ctrl_c_in_the_loop_body_under_with_marks_the_run_interrupted():
    with pytest.raises(KeyboardInterrupt):
        with pipecheck.wrap(DataLoader(SquaresDataset(40), batch_size=4)) as wrapped:
            for i, _ in enumerate(wrapped):
                if i == 3:
                    raise KeyboardInterrupt
    report = wrapped.report()
    assert report.consumer.status == "interrupted" and report.consumer.batches == 4
    assert any(f.kind == "run-interrupted" for f in report.diagnosis.findings)


def test_zero_batches_report_says_so():
    wrapped = pipecheck.wrap(DataLoader(EmptyDataset(), batch_size=4))
    assert list(wrapped) == []
    report = wrapped.report()
    assert report.consumer.batches == 0
    assert report.diagnosis.verdict == "no-data"
    assert any(f.kind == "no-batches" for f in report.diagnosis.findings)
    assert "no batches" in report.render(width=100).lower()
    wrapped.close()


@pytest.mark.parametrize("bad", [42, None, "images/", 3.5])
def test_wrapping_a_non_iterable_raises_type_error(bad):
    with pytest.raises(TypeError, match=type(bad).__name__):
        pipecheck.wrap(bad)


def test_generator_and_plain_iterables():
    def gen():
        for i in range(6):
            yield torch.full((3, 2), float(i))

    wrapped = pipecheck.wrap(gen())
    assert [b[0, 0].item() for b in wrapped] == [0, 1, 2, 3, 4, 5]
    report = wrapped.report()
    assert report.consumer.batches == 6 and report.consumer.samples == 18
    assert report.loader.num_workers is None
    wrapped.close()


def test_custom_sample_and_token_counters():
    batches = [{"ids": torch.ones(4, 10)}] * 3
    wrapped = pipecheck.wrap(batches, samples=lambda b: 4, tokens=lambda b: 40)
    list(wrapped)
    report = wrapped.report()
    assert report.consumer.samples == 12
    assert report.consumer.tokens == 120
    assert report.consumer.tokens_per_s is not None and report.consumer.tokens_per_s > 0
    wrapped.close()


def test_report_save_and_load_round_trip(tmp_path):
    wrapped = pipecheck.wrap(seeded_loader(num_workers=2))
    list(wrapped)
    report = wrapped.report()
    path = report.save(tmp_path / "run.json")
    again = pipecheck.load(path)
    assert again == report
    wrapped.close()


def test_samples_exact_with_drop_last_and_custom_collate():
    dropped = pipecheck.wrap(DataLoader(SquaresDataset(37), batch_size=4, drop_last=True))
    assert len(list(dropped)) == 9
    assert dropped.report().consumer.samples == 36

    def pairs_only(items):  # a collate that drops a sample: batches are counted one by one
        return torch.stack([x for x, _ in items[:2]])

    custom = pipecheck.wrap(DataLoader(SquaresDataset(12), batch_size=4, collate_fn=pairs_only))
    list(custom)
    assert custom.report().consumer.samples == 6
    dropped.close()
    custom.close()


def test_fast_main_process_loader_times_only_some_epochs(monkeypatch):
    from pipecheck.wrap import FAST_BATCH_EPOCH_STRIDE

    # Every batch counts as fast, however loaded this machine is; no spacing in batches.
    monkeypatch.setattr(sys.modules["pipecheck.measurement"], "FAST_BATCH_S", 10.0)
    monkeypatch.setattr(sys.modules["pipecheck.measurement"], "FAST_BATCH_TIMED_EPOCH_SPACING", 0)
    wrapped = pipecheck.wrap(DataLoader(SquaresDataset(64), batch_size=8), host=False)
    epochs = FAST_BATCH_EPOCH_STRIDE + 1
    for _ in range(epochs):
        list(wrapped)
    record = wrapped.record()
    assert record.probed_epochs == 2  # the first, then one in FAST_BATCH_EPOCH_STRIDE
    assert record.consumer.batches == epochs * 8  # the consumer side stays exact
    (main,) = record.workers
    assert main.id == -1 and main.batches == 2 * 8
    report = wrapped.report()
    assert report.producer.capacity_batches_per_s is not None
    wrapped.close()


def test_fast_one_batch_epochs_are_timed_only_batches_apart(monkeypatch):
    """Epochs of one fast batch: a timed epoch (one in FAST_BATCH_EPOCH_STRIDE) begins only
    FAST_BATCH_TIMED_EPOCH_SPACING batches after the last one began, so its start-up cost
    is not paid every few batches; the consumer still counts every batch."""
    import pipecheck.measurement as measurement

    monkeypatch.setattr(measurement, "FAST_BATCH_S", 10.0)
    monkeypatch.setattr(measurement, "FAST_BATCH_TIMED_EPOCH_SPACING", 16)
    assert measurement.FAST_BATCH_EPOCH_STRIDE == 8
    wrapped = pipecheck.wrap(DataLoader(SquaresDataset(8), batch_size=8), host=False)
    for _ in range(33):
        list(wrapped)
    record = wrapped.record()
    assert record.probed_epochs == 3  # epochs 0, 16 and 32
    assert record.consumer.batches == 33
    (main,) = record.workers
    assert main.batches == 3
    wrapped.close()


def test_slow_main_process_loader_times_every_epoch():
    wrapped = pipecheck.wrap(DataLoader(SquaresDataset(8, sleep_s=0.001), batch_size=4),
                             host=False)
    for _ in range(3):
        list(wrapped)
    assert wrapped.record().probed_epochs == 3
    wrapped.close()


def test_final_report_is_public_and_clock_is_not_a_wrap_option():
    """``final_report()`` (what the exit-time save writes) is public API; ``clock=`` was
    dropped from ``wrap()`` because worker, stage and head-of-line timing in worker processes
    cannot follow an injected clock."""
    wrapped = pipecheck.wrap(DataLoader(SquaresDataset(8), batch_size=4), host=False)
    assert len(list(wrapped)) == 2
    report = wrapped.final_report()
    assert report.consumer.batches == 2
    assert report.consumer.status == "complete"
    wrapped.close()
    with pytest.raises(TypeError, match="clock"):
        pipecheck.wrap(DataLoader(SquaresDataset(8)), clock=lambda: 0.0)


def test_main_process_windows_thin_out_once_enough_batches_are_timed():
    """After MAIN_DENSE_TIMED timed batches a window opens one call in MAIN_SPARSE_EVERY (the
    consumer probe calls every CPU_SAMPLE_EVERY batches): a long fast epoch is timed about 4
    in 256 batches after its first few thousand, not 4 in 64, and the totals still scale to
    every batch."""
    from torch.utils.data import TensorDataset

    from pipecheck.probes.consumer_epochs import CPU_SAMPLE_EVERY
    from pipecheck.probes.workers import (MAIN_DENSE_TIMED, MAIN_SAMPLE_AFTER,
                                          MAIN_SPARSE_EVERY, MAIN_WINDOW)

    n = 16_000
    loader = DataLoader(TensorDataset(torch.arange(n).reshape(n, 1)), batch_size=1)
    wrapped = pipecheck.wrap(loader, host=False)
    assert sum(1 for _ in wrapped) == n
    (record,) = wrapped.record().workers
    wrapped.close()
    assert record.batches == n and record.samples == n
    dense_batches = (MAIN_SAMPLE_AFTER + MAIN_DENSE_TIMED // MAIN_WINDOW * CPU_SAMPLE_EVERY)
    sparse_windows = (n - dense_batches) / CPU_SAMPLE_EVERY / MAIN_SPARSE_EVERY
    after_dense = record.timed_batches - MAIN_SAMPLE_AFTER - MAIN_DENSE_TIMED
    # Seeded draws: the count is repeatable; the bounds hold for any fair draw of ~45 windows.
    assert 0.5 * sparse_windows * MAIN_WINDOW <= after_dense <= 1.5 * sparse_windows * MAIN_WINDOW
    assert record.timed_batches < n * MAIN_WINDOW // CPU_SAMPLE_EVERY // 2


class _LazyFirstItem(torch.utils.data.Dataset):
    """Fast items, but the first fetch pays a one-time initialisation (opening an index, a
    first decode): 0.3 s."""

    def __init__(self, n: int) -> None:
        self.n, self.ready = n, False

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        if not self.ready:
            time.sleep(0.3)
            self.ready = True
        return torch.tensor([index])


def test_a_slow_first_batch_does_not_keep_a_fast_loader_timed_batch_by_batch():
    """The mean that decides whether batches are fast enough to sample leaves the first out: a
    0.3 s first fetch would otherwise hold the mean of 20 us batches over FAST_BATCH_S for
    about 1,500 batches, each timed one by one in the training loop."""
    from pipecheck.probes.consumer_epochs import CPU_SAMPLE_EVERY
    from pipecheck.probes.workers import MAIN_SAMPLE_AFTER, MAIN_WINDOW

    n = 3000
    wrapped = pipecheck.wrap(DataLoader(_LazyFirstItem(n), batch_size=1), host=False)
    assert [int(b[0]) for b in wrapped] == list(range(n))
    (record,) = wrapped.record().workers
    wrapped.close()
    assert record.batches == n
    (after_close,) = wrapped.record().workers  # the same estimate once the probe is closed
    assert after_close.busy_s == pytest.approx(record.busy_s)
    windows = n // CPU_SAMPLE_EVERY + 1
    assert record.timed_batches <= MAIN_SAMPLE_AFTER + CPU_SAMPLE_EVERY + windows * MAIN_WINDOW
    # The first batch counts once: scaled with the sampled ones it alone would make the
    # production time 0.3 s x n / timed_batches (over 3 s). That bound, not the batches' own
    # speed, is what this checks: on a loaded machine a 20 us fetch can take far longer.
    assert 0.3 <= record.busy_s < 0.3 * n / record.timed_batches
    assert record.timed_batches * 4 <= n  # so the bound above is at least 1.2 s


def test_wrapped_main_process_samples_fast_batches_and_scales_the_timed_ones():
    """num_workers=0 with batches far under FAST_BATCH_S: after MAIN_SAMPLE_AFTER timed
    batches only windows of MAIN_WINDOW batches are timed; the batch count is the consumer's
    and the timed totals are scaled to it. A slow loader is timed batch by batch."""
    from torch.utils.data import TensorDataset

    from helpers_datasets import SleepDataset

    from pipecheck.probes.workers import MAIN_SAMPLE_AFTER

    n = 2000
    loader = DataLoader(TensorDataset(torch.arange(n).reshape(n, 1)), batch_size=1)
    wrapped = pipecheck.wrap(loader, host=False)
    assert [int(b[0]) for b in wrapped] == list(range(n))
    (record,) = wrapped.record().workers
    wrapped.close()
    assert record.batches == n and record.samples == n
    assert MAIN_SAMPLE_AFTER <= record.timed_batches < n // 4
    assert len(record.recent) == record.timed_batches
    timed_busy = sum(b.fetch_s + b.collate_s for b in record.recent)
    # The first batch (lazy initialisation) counts once; the other timed ones stand for the
    # other n - 1.
    first = record.recent[0].fetch_s + record.recent[0].collate_s
    assert record.busy_s == pytest.approx(
        first + (timed_busy - first) * (n - 1) / (record.timed_batches - 1))

    slow = pipecheck.wrap(DataLoader(SleepDataset(40, 0.0003), batch_size=1), host=False)
    assert len(list(slow)) == 40
    (record,) = slow.record().workers
    slow.close()
    assert record.batches == 40 and record.timed_batches is None


def test_a_fast_loop_is_timed_in_blocks_and_its_counts_stay_exact(monkeypatch, tmp_path):
    """A real loop fast enough for sparse blocks (SPARSE_BELOW_S, raised here so that a loaded
    machine qualifies too): the batches are the unwrapped loader's, counts of batches and
    samples stay exact across epochs (the last batch short), the report says how many were
    timed, and its JSON keeps the figure."""
    from torch.utils.data import TensorDataset

    from pipecheck.probes import consumer_iterator

    monkeypatch.setattr(consumer_iterator, "SPARSE_BELOW_S", 1.0)
    n, epochs = 6_001, 2

    def make() -> DataLoader:
        return DataLoader(TensorDataset(torch.arange(n)), batch_size=2, shuffle=True,
                          generator=torch.Generator().manual_seed(3))

    unwrapped = make()
    plain = [[b[0].tolist() for b in unwrapped] for _ in range(epochs)]
    wrapped = pipecheck.wrap(make(), host=False)
    got = [[b[0].tolist() for b in wrapped] for _ in range(epochs)]
    assert got == plain
    report = wrapped.report()
    wrapped.close()
    consumer_summary = report.consumer
    assert consumer_summary.batches == epochs * 3_001
    assert consumer_summary.samples == epochs * n
    assert 0 < consumer_summary.untimed_batches < consumer_summary.batches
    assert len(report.timeline.batches) == consumer_summary.batches \
        - consumer_summary.untimed_batches
    assert consumer_summary.wait_s + consumer_summary.compute_s == pytest.approx(
        sum(e.wall_s for e in report.timeline.epochs), rel=0.01)
    assert "timed batch by batch" in report.render(width=120, verbose=True)
    again = pipecheck.load(report.save(tmp_path / "fast.json"))
    assert again.consumer.untimed_batches == consumer_summary.untimed_batches


def test_an_error_inside_a_sparse_stretch_reaches_the_loop_unchanged_and_the_epoch_goes_on(
        monkeypatch):
    """A real loader fast enough for sparse blocks raises late in the epoch: the loop gets the
    loader's own exception, the same iterator goes on with the next batch, as unwrapped, and
    the counts stay exact."""
    from pipecheck.probes import consumer_iterator

    monkeypatch.setattr(consumer_iterator, "SPARSE_BELOW_S", 1.0)
    n, bad = 6_000, 5_900

    def take(loader) -> tuple[list, list]:
        got, errors = [], []
        iterator = iter(loader)
        while True:
            try:
                got.append(next(iterator)[1].tolist())
            except StopIteration:
                return got, errors
            except ValueError as exc:
                errors.append(str(exc))

    plain = take(DataLoader(FailingDataset(n, bad), batch_size=1))
    wrapped = pipecheck.wrap(DataLoader(FailingDataset(n, bad), batch_size=1), host=False)
    assert take(wrapped) == plain
    record = wrapped.record().consumer
    wrapped.close()
    assert record.batches == n - 1 and record.errors == 1
    assert 0 < record.untimed_batches < n and record.epochs[0].ended == "exhausted"
