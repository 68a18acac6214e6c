"""The consumer probe's sparse blocks in fast loops (``SPARSE_BELOW_S``), on a fake clock:
counts stay exact, the wait and step estimates hold, the timeline keeps only timed batches,
and every way an epoch ends (exhausted, an error the loop goes on after, break, a snapshot in
the middle of a skipped block) keeps the batches the loop took."""

from __future__ import annotations

import random

import pytest

from pipecheck._clock import FakeClock
from pipecheck.probes.consumer import ConsumerProbe
from pipecheck.probes.consumer_epochs import CPU_SAMPLE_EVERY
from pipecheck.probes.consumer_iterator import (SPARSE_AFTER_BATCHES, SPARSE_BELOW_S,
                                                SPARSE_TIMED_EVERY)
from pipecheck.probes.base import BatchObserver


class CostedSource:
    """Yields ``len(waits)`` batches of ``size`` samples; producing batch i advances the clock
    by ``waits[i]``; raises ``ValueError`` instead of yielding batch ``fail_at`` (the next
    call goes on with batch ``fail_at + 1``, as torch's iterators do)."""

    def __init__(self, clock: FakeClock, waits: list[float], size: int = 3,
                 fail_at: int | None = None) -> None:
        self.clock, self.waits, self.size, self.fail_at = clock, waits, size, fail_at
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        i = self.i
        if i >= len(self.waits):
            raise StopIteration
        self.i += 1
        self.clock.advance(self.waits[i])
        if i == self.fail_at:
            raise ValueError(f"bad batch {i}")
        return [i] * self.size


def _probe(clock: FakeClock) -> ConsumerProbe:
    return ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)


def _run(waits: list[float], step_s: float, **source):
    """A fake-clock loop over ``waits``, going on after a ``ValueError``: (the record, the
    batches taken)."""
    clock = FakeClock(50.0)
    probe = _probe(clock)
    taken = 0
    iterator = probe.iterate(CostedSource(clock, waits, **source))
    while True:
        try:
            next(iterator)
        except StopIteration:
            break
        except ValueError:
            continue
        taken += 1
        clock.advance(step_s)
    return probe.record(), taken


def test_a_fast_loop_skips_most_blocks_and_keeps_every_count_exact():
    n, wait_s, step_s = 20_000, 4e-6, 9e-6
    rec, taken = _run([wait_s] * n, step_s)
    assert taken == n
    assert rec.batches == n and rec.samples == 3 * n
    # After the dense start, all but about 1 block in SPARSE_TIMED_EVERY goes untimed.
    expected = (n - SPARSE_AFTER_BATCHES) * (1 - 1 / SPARSE_TIMED_EVERY)
    assert 0.8 * expected < rec.untimed_batches < 1.2 * expected
    assert len(rec.timeline) == n - rec.untimed_batches
    # Constant waits and steps: the estimate is exact.
    assert rec.wait_s == pytest.approx(n * wait_s, rel=1e-6)
    assert rec.compute_s == pytest.approx(n * step_s, rel=1e-6)
    assert rec.wall_s == pytest.approx(n * (wait_s + step_s), rel=1e-6)
    (epoch,) = rec.epochs
    assert epoch.batches == n and epoch.ended == "exhausted"
    indices = [b.index for b in rec.timeline]
    assert indices == sorted(set(indices)) and indices[-1] < n
    assert indices[:SPARSE_AFTER_BATCHES] == list(range(SPARSE_AFTER_BATCHES))
    assert all(b.wait_s == pytest.approx(wait_s) for b in rec.timeline)


def test_random_waits_are_estimated_within_two_percent():
    # Exponential waits: about 1 batch in 9 of the sparse stretches is timed, so the mean
    # that stands for the others has a standard error near 0.6% (8,000 draws of sigma = mu).
    rng = random.Random(7)
    n, step_s = 160_000, 20e-6
    waits = [rng.expovariate(1 / 15e-6) for _ in range(n)]
    rec, _ = _run(waits, step_s)
    assert rec.untimed_batches > n / 2
    truth = sum(waits)
    assert rec.wait_s == pytest.approx(truth, rel=0.02)
    assert rec.wall_s == pytest.approx(truth + n * step_s, rel=1e-6)
    # the stall (wait share of the loop) within 0.5 pp
    assert rec.wait_s / rec.wall_s == pytest.approx(truth / (truth + n * step_s), abs=0.005)


@pytest.mark.parametrize("period", [CPU_SAMPLE_EVERY, 4 * CPU_SAMPLE_EVERY])
def test_a_loader_slow_once_a_period_is_not_aliased_with_the_blocks(period):
    # One slow batch per period, falling on the first call of a block (the full call, which
    # also folds and samples the CPU): had that call been timed in every block, skipped or
    # not, an estimate from the timed batches would count it as 1 in 16 instead of 1 in 64.
    n, fast_s, slow_s, step_s = 64_000, 2e-6, 500e-6, 10e-6
    plain, _ = _run([fast_s] * 4 * SPARSE_AFTER_BATCHES, step_s)
    kept = [b.index for b in plain.timeline]
    first_skipped = next(i for i, index in enumerate(kept) if index != i)
    block_start = first_skipped % CPU_SAMPLE_EVERY  # a skipped block's first batch
    waits = [slow_s if i % period == block_start else fast_s for i in range(n)]
    rec, _ = _run(waits, step_s)
    truth = sum(waits)
    # one block in SPARSE_TIMED_EVERY of the 1,000 is timed: about 125, each holding its
    # slow batch (64-batch period) or about 31 of them with one (256)
    assert rec.wait_s == pytest.approx(truth, rel=0.1)


def test_a_slow_epoch_start_and_a_slow_warm_up_do_not_weigh_in_the_estimate():
    # Each epoch's first batch waits 1 s (worker start-up) and the first 1,024 batches of
    # the run (the dense start) wait 20 us, the rest 3 us: only blocks drawn at random stand
    # for the sparse stretches, so neither is spread over them.
    clock = FakeClock()
    probe = _probe(clock)
    truth = 0.0
    for epoch in range(2):
        n = 10_000
        waits = [1.0] + [20e-6 if epoch == 0 and i < SPARSE_AFTER_BATCHES else 3e-6
                         for i in range(1, n)]
        truth += sum(waits)
        for _ in probe.iterate(CostedSource(clock, waits)):
            clock.advance(5e-6)
    rec = probe.record()
    assert rec.untimed_batches > 10_000
    assert rec.wait_s == pytest.approx(truth, rel=1e-3)
    assert rec.compute_s == pytest.approx(20_000 * 5e-6, rel=1e-2)


def test_a_loop_slower_than_the_threshold_times_every_batch():
    n = 3 * SPARSE_AFTER_BATCHES
    rec, _ = _run([SPARSE_BELOW_S / 2] * n, SPARSE_BELOW_S)
    assert rec.untimed_batches == 0 and len(rec.timeline) == n


def test_an_error_inside_a_skipped_block_passes_through_and_the_epoch_goes_on():
    n = 8_000
    fail_at = n - 100  # with the seeded draws, its call takes the skip path
    rec, taken = _run([3e-6] * n, 5e-6, fail_at=fail_at)
    assert taken == n - 1 and rec.batches == n - 1
    assert rec.errors == 1 and rec.error == "ValueError: bad batch 7900"
    assert rec.epochs[0].ended == "exhausted" and rec.status == "complete"
    assert rec.wall_s == pytest.approx(n * 3e-6 + (n - 1) * 5e-6, rel=1e-6)


def test_breaking_out_inside_a_skipped_block_counts_the_batches_taken():
    clock = FakeClock()
    probe = _probe(clock)
    iterator = probe.iterate(CostedSource(clock, [3e-6] * 10_000))
    for i in range(6_000 + 17):
        next(iterator)
        clock.advance(5e-6)
    assert iterator._skip_len, "a skipped block is open (the draw is seeded)"
    del iterator
    rec = probe.record()
    assert rec.batches == 6_017 and rec.samples == 3 * 6_017
    assert rec.epochs[0].ended == "break"


def test_a_snapshot_inside_a_skipped_block_is_at_most_one_block_behind():
    clock = FakeClock()
    probe = _probe(clock)
    iterator = probe.iterate(CostedSource(clock, [3e-6] * 12_000))
    behind = []
    for i in range(12_000):
        next(iterator)
        clock.advance(5e-6)
        if i % 97 == 0:
            behind.append(i + 1 - probe.record().batches)
    assert 0 <= min(behind) and max(behind) <= CPU_SAMPLE_EVERY
    assert max(behind) > 0  # some snapshots fell inside a skipped block


def test_known_batch_sizes_and_token_counts_are_exact_across_skipped_blocks():
    from pipecheck.probes.consumer import FixedBatches

    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0,
                          tokens=lambda batch: 2 * len(batch))
    n = 9_000
    iterator = probe.iterate(CostedSource(clock, [3e-6] * n), FixedBatches(3, 3 * n - 2))
    for _ in iterator:
        clock.advance(5e-6)
    rec = probe.record()
    assert rec.untimed_batches > 0
    assert rec.samples == 3 * n - 2  # the last batch clipped
    assert rec.tokens == 6 * n


class _Watcher(BatchObserver):
    def __init__(self) -> None:
        self.waits: list[float] = []

    def attach(self, iterator) -> bool:
        return True

    def before_next(self) -> None:
        pass

    def after_raise(self) -> None:
        pass

    def after_next(self, wait_s: float, batch) -> None:
        self.waits.append(wait_s)


def test_observers_keep_every_batch_timed():
    clock = FakeClock()
    probe = _probe(clock)
    watcher = _Watcher()
    n = 6_000
    for _ in probe.iterate(CostedSource(clock, [3e-6] * n), observers=(watcher,)):
        clock.advance(5e-6)
    rec = probe.record()
    assert rec.untimed_batches == 0 and len(watcher.waits) == n
