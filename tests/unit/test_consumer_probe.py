"""Consumer probe against a fake clock: exact wait/compute accounting, epochs, errors."""

from __future__ import annotations

import pytest

from pipecheck._clock import FakeClock
from pipecheck.probes.consumer import ConsumerProbe


class TimedSource:
    """Yields ``n`` batches; producing batch i advances the clock by ``produce_s[i]``."""

    def __init__(self, clock: FakeClock, produce_s: list[float], batch_size: int = 4,
                 fail_at: int | None = None, exc: BaseException | None = None,
                 shutdown_s: float = 0.0) -> None:
        self.clock, self.produce_s, self.batch_size = clock, produce_s, batch_size
        self.fail_at, self.exc, self.shutdown_s = fail_at, exc, shutdown_s

    def __iter__(self):
        for i, cost in enumerate(self.produce_s):
            self.clock.advance(cost)
            if i == self.fail_at:
                raise self.exc
            yield [i] * self.batch_size
        self.clock.advance(self.shutdown_s)  # torch joins non-persistent workers here


def consume(probe, source, clock, compute_s, stop_after=None):
    got = []
    for i, batch in enumerate(probe.iterate(source)):
        got.append(batch)
        clock.advance(compute_s)
        if stop_after is not None and i + 1 >= stop_after:
            break
    return got


def test_wait_and_compute_are_exact():
    clock = FakeClock(100.0)
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    source = TimedSource(clock, [0.5, 0.1, 0.1, 0.1])
    got = consume(probe, source, clock, compute_s=0.2)
    assert got == [[i] * 4 for i in range(4)]
    rec = probe.record()
    assert rec.batches == 4 and rec.samples == 16
    assert rec.wait_s == pytest.approx(0.8)
    assert rec.compute_s == pytest.approx(0.8)
    assert rec.wall_s == pytest.approx(1.6)
    (epoch,) = rec.epochs
    assert epoch.first_batch_s == pytest.approx(0.5)
    assert epoch.ended == "exhausted"
    assert rec.status == "complete"
    assert [b.wait_s for b in rec.timeline] == pytest.approx([0.5, 0.1, 0.1, 0.1])
    assert [b.compute_s for b in rec.timeline] == pytest.approx([0.2] * 4)
    assert rec.timeline[0].start_at_s == pytest.approx(0.0)
    assert rec.timeline[1].start_at_s == pytest.approx(0.7)


def test_epochs_and_break():
    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    consume(probe, TimedSource(clock, [0.1] * 5, shutdown_s=0.25), clock, 0.3)
    clock.advance(10.0)  # evaluation between epochs is neither wait nor compute
    consume(probe, TimedSource(clock, [0.1] * 5), clock, 0.3, stop_after=2)
    rec = probe.record()
    assert [e.ended for e in rec.epochs] == ["exhausted", "break"]
    # the final next() of an exhausted epoch: its wait is the workers' shutdown
    assert [e.last_wait_s for e in rec.epochs] == [pytest.approx(0.25), None]
    assert rec.epochs[0].wait_s == pytest.approx(0.5 + 0.25)
    assert rec.epochs[1].batches == 2
    assert rec.epochs[1].started_at_s == pytest.approx(0.1 * 5 + 0.3 * 5 + 0.25 + 10.0)
    assert rec.batches == 7
    assert rec.compute_s == pytest.approx(0.3 * 7)
    assert rec.wall_s == pytest.approx(2.0 + 0.25 + 0.8)


def test_loader_error_is_reraised_unchanged_and_recorded():
    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    err = ValueError("bad sample 7")
    with pytest.raises(ValueError) as info:
        consume(probe, TimedSource(clock, [0.1] * 5, fail_at=2, exc=err), clock, 0.1)
    assert info.value is err
    rec = probe.record()
    assert rec.status == "error"
    assert rec.error == "ValueError: bad sample 7"
    assert rec.batches == 2


def test_worker_error_description_keeps_the_original_message():
    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    err = ValueError("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback "
                     "(most recent call last):\n  File x, line 1\nValueError: corrupt 13\n")
    with pytest.raises(ValueError):
        consume(probe, TimedSource(clock, [0.1], fail_at=0, exc=err), clock, 0.1)
    assert probe.record().error == ("ValueError: Caught ValueError in DataLoader worker "
                                      "process 0. ValueError: corrupt 13")


def test_keyboard_interrupt_inside_next_keeps_counts():
    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    src = TimedSource(clock, [0.1] * 5, fail_at=3, exc=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        consume(probe, src, clock, 0.1)
    rec = probe.record()
    assert rec.status == "interrupted"
    assert rec.batches == 3
    assert rec.epochs[0].ended == "interrupted"


def test_zero_batches():
    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    assert consume(probe, TimedSource(clock, []), clock, 0.1) == []
    rec = probe.record()
    assert rec.batches == 0 and rec.epochs[0].first_batch_s is None
    assert rec.status == "complete"


def test_timeline_is_bounded_and_evenly_spaced():
    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, timeline_capacity=64,
                          cpu_clock=lambda: 0.0)
    consume(probe, TimedSource(clock, [0.001] * 1000, batch_size=1), clock, 0.001)
    rec = probe.record()
    assert rec.batches == 1000
    assert len(rec.timeline) < 64
    strides = {b.index % rec.timeline_stride for b in rec.timeline}
    assert strides == {0}
    assert rec.timeline[-1].index > 900  # covers the whole run, not just its start


def test_tokens_from_input_ids_and_mask():
    import torch

    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    batches = [{"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": mask}] * 3
    assert len(list(probe.iterate(batches))) == 3
    rec = probe.record()
    assert rec.tokens == 9 and rec.samples == 6


def test_no_tokens_for_image_batches():
    import torch

    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    list(probe.iterate([(torch.zeros(8, 3, 4, 4), torch.zeros(8))] * 2))
    rec = probe.record()
    assert rec.tokens is None and rec.samples == 16


def test_sampled_cpu_clock_splits_wait_and_compute():
    clock = FakeClock()
    cpu = FakeClock()

    class CpuSource:
        def __iter__(self):
            for _ in range(16):
                clock.advance(0.1)
                cpu.advance(0.05)  # half of the wait burns CPU
                yield 1

    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=cpu)
    for _ in probe.iterate(CpuSource()):
        clock.advance(0.2)
        cpu.advance(0.2)  # compute is all CPU
    rec = probe.record()
    assert rec.sampled_wait_cpu_s / rec.sampled_wait_wall_s == pytest.approx(0.5)
    assert rec.sampled_compute_cpu_s / rec.sampled_compute_wall_s == pytest.approx(1.0)


def test_counts_stay_exact_across_folds_and_snapshots():
    from pipecheck.probes.consumer_epochs import FOLD_BATCHES

    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0,
                          timeline_capacity=256)
    n = FOLD_BATCHES * 2 + 123
    seen = 0
    for _ in probe.iterate(TimedSource(clock, [0.001] * n, batch_size=2)):
        clock.advance(0.002)
        seen += 1
        if seen == FOLD_BATCHES + 7:  # mid-epoch snapshot sees buffered batches too
            mid = probe.record()
            assert mid.batches == seen and mid.samples == 2 * seen
            assert mid.status == "in-progress"
    rec = probe.record()
    assert rec.batches == n and rec.samples == 2 * n
    assert rec.wait_s == pytest.approx(0.001 * n)
    assert rec.compute_s == pytest.approx(0.002 * n)
    assert all(b.compute_s == pytest.approx(0.002) for b in rec.timeline)
    assert [b.index for b in rec.timeline] == sorted(b.index for b in rec.timeline)
    assert len(rec.timeline) < 256


def test_fixed_batches_count_without_looking_and_clip_the_last():
    from pipecheck.probes.consumer import FixedBatches

    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    # 10 batches of 4 from 37 samples: the last batch holds 1
    list(probe.iterate(TimedSource(clock, [0.01] * 10, batch_size=4), FixedBatches(4, 37)))
    rec = probe.record()
    assert rec.samples == 37
    assert [b.samples for b in rec.timeline] == [4] * 9 + [1]


def test_memory_stays_bounded_as_the_run_grows():
    import itertools
    import tracemalloc

    def peak(batches):
        probe = ConsumerProbe(run_start=0.0, samples=lambda b: 1)
        tracemalloc.start()
        for _ in probe.iterate(itertools.repeat((1, 2), batches)):
            pass
        _, looping = tracemalloc.get_traced_memory()
        record = probe.record()
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert record.batches == batches
        return looping, top

    (mid, _), (long, long_top) = peak(100_000), peak(200_000)
    assert long_top < 4 * 2**20  # a few MB whatever the length: the timeline is decimated
    # O(1) per batch, checked by slope: once the bounded buffers have filled (by 100,000
    # batches, about 1 MB here), 100,000 more batches add under 1 byte each. (The record's peak
    # is left out here: it grows with the timeline's rows, up to its capacity, and how many of
    # a loop this fast are timed depends on the sparse blocks drawn and on the machine's speed.)
    assert (long - mid) / 100_000 < 1.0


class _Observer:
    """A batch observer that notes what it sees and raises at the ``fail_at``-th batch."""

    name = "test_observer"

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at, self.waits, self.raises = fail_at, [], 0

    def attach(self, iterator) -> bool:
        return True

    def before_next(self) -> None:
        pass

    def after_next(self, wait_s: float, batch=None) -> None:
        if len(self.waits) == self.fail_at:
            raise RuntimeError("observer bug")
        self.waits.append(wait_s)

    def after_raise(self) -> None:
        self.raises += 1


def test_one_iterator_calls_observers_with_the_consumer_wait_and_drops_one_that_raises():
    clock = FakeClock(100.0)
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    good, bad, dropped = _Observer(), _Observer(fail_at=1), []
    source = TimedSource(clock, [0.5, 0.25, 0.125, 0.0625], fail_at=3, exc=ValueError("bad"))
    iterator = probe.iterate(source, observers=(good, bad),
                             on_observer_error=lambda o, e: dropped.append((o, str(e))))
    got = [next(iterator) for _ in range(3)]
    with pytest.raises(ValueError, match="bad"):  # the loader's own error, unchanged
        next(iterator)
    assert got == [[0] * 4, [1] * 4, [2] * 4]
    assert good.waits == [0.5, 0.25, 0.125] and good.raises == 1
    assert bad.waits == [0.5] and bad.raises == 0  # dropped at its second batch
    assert dropped == [(bad, "observer bug")]
    assert probe.record().batches == 3


class FlakySource:
    """A torch-like iterator (a Python ``__next__``): batch ``fail_at`` raises, and the same
    iterator goes on with the rest of the epoch; an instance attribute named ``__next__``,
    which ``next()`` ignores, is there to be ignored."""

    def __init__(self, n: int, fail_at: int) -> None:
        self.n, self.fail_at, self.i = n, fail_at, 0
        self.__next__ = self._ignored  # type: ignore[method-assign]

    def _ignored(self):
        raise AssertionError("the instance attribute __next__ was called; next() ignores it")

    def __iter__(self):
        return self

    def __next__(self):
        i = self.i
        if i >= self.n:
            raise StopIteration
        self.i += 1
        if i == self.fail_at:
            raise KeyError(i)
        return (i,)


def drain(iterator):
    """Every batch and every exception's args, in order, as a plain loop that skips bad
    batches sees them."""
    seen = []
    while True:
        try:
            seen.append(next(iterator))
        except StopIteration:
            return seen
        except KeyError as err:
            seen.append(("raised", err.args))


@pytest.mark.parametrize("fail_at", [0, 1, 62, 63, 64, 65, 100])
def test_the_source_is_advanced_as_next_would_on_every_path(fail_at):
    # fail_at covers the first call, the fast path, and the calls around a CPU sample (one
    # in CPU_SAMPLE_EVERY = 64 takes the full path, and the one after it).
    probe = ConsumerProbe(run_start=0.0)
    wrapped = drain(probe.iterate(FlakySource(150, fail_at)))
    assert wrapped == drain(FlakySource(150, fail_at))
    assert len(wrapped) == 150 and wrapped[fail_at] == ("raised", (fail_at,))
    rec = probe.record()
    assert (rec.batches, rec.errors, rec.status) == (149, 1, "complete")


def test_generators_and_non_iterators_behave_as_unwrapped():
    probe = ConsumerProbe(run_start=0.0)
    assert list(probe.iterate(range(200))) == list(range(200))  # a C __next__
    assert list(probe.iterate(x for x in "abc")) == ["a", "b", "c"]

    class NotAnIterator:
        """What an ``open_iterator`` may hand over (``pipecheck run`` passes torch's own
        ``__iter__``): no ``__next__``, so ``next()`` raises TypeError."""

    with pytest.raises(TypeError) as unwrapped:
        next(NotAnIterator())  # type: ignore[call-overload]
    wrapped_iterator = probe.open_epoch(NotAnIterator)
    with pytest.raises(TypeError) as wrapped:
        next(wrapped_iterator)
    assert str(wrapped.value) == str(unwrapped.value)
    with pytest.raises(TypeError):  # the same iterator goes on raising it, as next() does
        next(wrapped_iterator)


def test_a_slow_loop_samples_every_batch_but_the_runs_first():
    from pipecheck.probes.consumer_iterator import SLOW_BATCH_S

    clock, cpu, thread = FakeClock(), FakeClock(), FakeClock()
    n = 40

    class Slow:
        def __iter__(self):
            for i in range(n):
                wait = 1.0 if i == 0 else SLOW_BATCH_S  # start-up, then steady batches
                clock.advance(wait)
                cpu.advance(wait / 2)
                thread.advance(wait / 4)
                yield 1

    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=cpu, thread_cpu_clock=thread)
    for i, _ in enumerate(probe.iterate(Slow())):
        step = 2.0 if i == 0 else SLOW_BATCH_S  # lazy initialisation, then steady steps
        clock.advance(step)
        cpu.advance(step)  # the step's process CPU: one core's worth ...
        thread.advance(step * 0.4)  # ... of which the calling thread ran 40%
    rec = probe.record()
    # Every wait and step after the first is sampled: far more than one in CPU_SAMPLE_EVERY.
    assert rec.sampled_wait_wall_s == pytest.approx((n - 1) * SLOW_BATCH_S)
    assert rec.sampled_compute_wall_s == pytest.approx((n - 1) * SLOW_BATCH_S)
    assert rec.sampled_wait_cpu_s / rec.sampled_wait_wall_s == pytest.approx(0.5)
    assert rec.sampled_wait_thread_cpu_s / rec.sampled_wait_wall_s == pytest.approx(0.25)
    assert rec.sampled_compute_cpu_s / rec.sampled_compute_wall_s == pytest.approx(1.0)
    assert rec.sampled_compute_thread_cpu_s / rec.sampled_compute_wall_s == pytest.approx(0.4)


def test_a_fast_loop_samples_one_batch_in_cpu_sample_every():
    from pipecheck.probes.consumer_epochs import CPU_SAMPLE_EVERY
    from pipecheck.probes.consumer_iterator import CPU_SAMPLE_MIN_GAP_S

    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    n = CPU_SAMPLE_EVERY * 4
    # CPU_SAMPLE_EVERY batches take longer than the gap, so every regular call samples.
    wait_s, step_s = 0.0001, 1.5 * CPU_SAMPLE_MIN_GAP_S / CPU_SAMPLE_EVERY
    consume(probe, TimedSource(clock, [wait_s] * n), clock, step_s)
    rec = probe.record()
    # The second batch, then one in CPU_SAMPLE_EVERY.
    assert rec.sampled_wait_wall_s == pytest.approx(wait_s * 4)
    assert rec.sampled_compute_wall_s == pytest.approx(step_s * 4)


def _loop_with_periodic(n: int, wait_s: float, step_s: float):
    """A fake-clock loop of ``n`` batches with a ``periodic`` callback: (the record, the
    callback's calls, the most batches ever buffered before a fold)."""
    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0,
                          timeline_capacity=256)
    calls: list = []
    iterator = probe.open_epoch(lambda: iter(TimedSource(clock, [wait_s] * n)),
                                periodic=calls.append)
    biggest = 0
    for _ in iterator:
        clock.advance(step_s)
        biggest = max(biggest, iterator._epoch.buffered())
    return probe.record(), calls, biggest


def test_a_very_fast_loop_samples_the_cpu_once_per_gap_and_still_folds_and_calls_periodic():
    from pipecheck.probes.consumer_epochs import CPU_SAMPLE_EVERY, FOLD_BATCHES
    from pipecheck.probes.consumer_iterator import CPU_SAMPLE_MIN_GAP_S

    n = FOLD_BATCHES * 3
    wait_s, step_s = 5e-6, 15e-6  # 20 us a batch: CPU_SAMPLE_EVERY of them take 1.3 ms
    rec, calls, biggest = _loop_with_periodic(n, wait_s, step_s)
    assert rec.batches == n and rec.wait_s == pytest.approx(wait_s * n)
    samples = rec.sampled_wait_wall_s / wait_s
    run_s = n * (wait_s + step_s)
    # One sample per gap (rounded up to the next regular call), not one in CPU_SAMPLE_EVERY.
    assert run_s / CPU_SAMPLE_MIN_GAP_S * 0.8 <= samples <= run_s / CPU_SAMPLE_MIN_GAP_S + 1
    assert samples < n / CPU_SAMPLE_EVERY / 4
    assert rec.sampled_compute_wall_s == pytest.approx(step_s * samples)
    assert len(calls) == pytest.approx(n / CPU_SAMPLE_EVERY, abs=2)  # periodic unchanged
    assert biggest <= FOLD_BATCHES + CPU_SAMPLE_EVERY  # still folded


def test_a_slow_loop_still_folds_and_calls_periodic_one_batch_in_cpu_sample_every():
    from pipecheck.probes.consumer_epochs import CPU_SAMPLE_EVERY, FOLD_BATCHES
    from pipecheck.probes.consumer_iterator import SLOW_BATCH_S

    n = FOLD_BATCHES * 2 + 123
    rec, calls, biggest = _loop_with_periodic(n, SLOW_BATCH_S, SLOW_BATCH_S)
    assert rec.batches == n and rec.compute_s == pytest.approx(SLOW_BATCH_S * n)
    assert biggest <= FOLD_BATCHES + CPU_SAMPLE_EVERY  # folded, so the buffer stays bounded
    assert len(calls) == pytest.approx(n / CPU_SAMPLE_EVERY, abs=2)
