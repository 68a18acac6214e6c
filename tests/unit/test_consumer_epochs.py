"""Many epochs on a fake clock: the consumer probe lists the run's first and most recent epochs
one by one and folds the others into running sums (``ConsumerRecord.folded_epochs``), and every
figure the analysis takes from epochs comes out as a direct computation over all of them gives,
and as the same run with nothing folded gives."""

from __future__ import annotations

import dataclasses
import random
import tracemalloc
from dataclasses import dataclass
from typing import Optional

import pytest

from pipecheck._clock import FakeClock
from pipecheck.analysis import consumer as analysis
from pipecheck.probes import consumer as consumer_module
from pipecheck.probes.consumer import (EPOCH_ROWS_FIRST, EPOCH_ROWS_LAST, ConsumerProbe,
                                       FixedBatches)
from pipecheck.records import ConsumerRecord, FoldedEpochs, Timeline
from pipecheck.codec import from_jsonable, to_jsonable


class Source:
    """Yields ``len(waits)`` batches of ``size`` samples; producing batch i advances the clock by
    ``waits[i]``; the call for batch ``fail_at`` raises ``ValueError`` after its wait and the
    next call goes on (as torch's iterators do); the final call (StopIteration) advances it by
    ``shutdown_s`` (torch joining its workers)."""

    def __init__(self, clock: FakeClock, waits: list[float], size: int, shutdown_s: float,
                 fail_at: Optional[int] = None) -> None:
        self.clock, self.waits, self.size = clock, waits, size
        self.shutdown_s, self.fail_at, self.i = shutdown_s, fail_at, 0

    def __iter__(self) -> "Source":
        return self

    def __next__(self) -> list[int]:
        i = self.i
        if i >= len(self.waits):
            self.clock.advance(self.shutdown_s)
            raise StopIteration
        self.i += 1
        self.clock.advance(self.waits[i])
        if i == self.fail_at:
            raise ValueError(f"bad batch {i}")
        return [i] * self.size


@dataclass
class Plan:
    """One epoch of the loop: the loader's wait per call, the step after each batch, where
    the loop breaks off (``None``: it runs to the end) and the time spent outside the loop
    after it (evaluation)."""

    waits: list[float]
    compute_s: float
    stop_after: Optional[int] = None
    fail_at: Optional[int] = None
    shutdown_s: float = 0.0
    pause_s: float = 0.0
    size: int = 2


@dataclass
class Truth:
    """What one epoch was, counted directly while driving it."""

    batches: int = 0
    samples: int = 0
    wait_s: float = 0.0
    compute_s: float = 0.0
    wall_s: float = 0.0
    first_s: Optional[float] = None
    ended: str = "running"
    last_wait_s: Optional[float] = None


def plans(n: int, seed: int = 7, empty_first: int = 0) -> list[Plan]:
    """``n`` varied short epochs: 0-5 batches (the first ``empty_first`` epochs deliver
    none), a slow first batch (start-up), each ending by exhaustion, a break, or an error the
    loop goes on after."""
    rng = random.Random(seed)
    made = []
    for k in range(n):
        count = 0 if k < empty_first else rng.choice([0, 1, 1, 1, 2, 3, 5])
        waits = [rng.uniform(0.001, 0.01) for _ in range(count)]
        if waits:
            waits[0] += rng.uniform(0.05, 0.2)
        stop_after = rng.randint(1, count) if count and rng.random() < 0.3 else None
        fail_at = rng.randint(1, count - 1) if count > 2 and rng.random() < 0.1 else None
        made.append(Plan(waits=waits, compute_s=rng.uniform(0.005, 0.02), stop_after=stop_after,
                         fail_at=fail_at, shutdown_s=rng.uniform(0.0, 0.03),
                         pause_s=rng.choice([0.0, 0.0, 0.5]), size=rng.choice([1, 2, 4])))
    return made


def drive(probe: ConsumerProbe, clock: FakeClock, plan: Plan, fixed: bool = False) -> Truth:
    """Run one epoch of ``plan`` through ``probe`` and count what happened. ``fixed``: the
    batch sizes are given up front (``FixedBatches``: the last batch one sample short)."""
    truth = Truth()
    source = Source(clock, plan.waits, plan.size, plan.shutdown_s, plan.fail_at)
    started = clock()
    sizes = FixedBatches(plan.size, max(plan.size * len(plan.waits) - 1, 0)) if fixed else None
    iterator = probe.iterate(source, sizes)
    after_step = False  # a step just ended: the next call's entry closes it
    while True:
        entered = clock()
        try:
            batch = next(iterator)
        except StopIteration:
            truth.wait_s += clock() - entered
            truth.last_wait_s = clock() - entered
            truth.ended = "exhausted"
            break
        except ValueError:
            truth.wait_s += clock() - entered
            continue
        finally:
            if after_step:
                truth.compute_s += plan.compute_s
            after_step = False
        truth.wait_s += clock() - entered
        if truth.first_s is None:
            truth.first_s = clock() - entered
        truth.batches += 1
        truth.samples += len(batch)
        clock.advance(plan.compute_s)
        after_step = True
        if plan.stop_after is not None and truth.batches >= plan.stop_after:
            truth.compute_s += plan.compute_s  # its step runs until the iterator is dropped
            truth.ended = "break"
            break
    del iterator  # dropped: a break ends the epoch now
    truth.wall_s = clock() - started
    clock.advance(plan.pause_s)
    return truth


def run(schedule: list[Plan], fixed: bool = False,
        **probe_options) -> tuple[ConsumerRecord, list[Truth]]:
    clock = FakeClock(50.0)
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0,
                          **probe_options)
    truths = [drive(probe, clock, plan, fixed) for plan in schedule]
    return probe.record(), truths


def mean(values: list[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def direct_figures(truths: list[Truth]) -> dict:
    """The epoch figures the analysis needs, computed straight from every epoch."""
    started = [t for t in truths if t.batches > 0]
    finished = [t for t in started if t.ended == "exhausted"]
    firsts = [t.first_s for t in started]
    return {
        "epochs": len(truths),
        "batches": sum(t.batches for t in truths),
        "samples": sum(t.samples for t in truths),
        "wait_s": sum(t.wait_s for t in truths),
        "compute_s": sum(t.compute_s for t in truths),
        "wall_s": sum(t.wall_s for t in truths),
        "started": len(started),
        "steady_batches": sum(t.batches for t in truths) - len(started),
        "steady_wait_s": sum(t.wait_s for t in truths) - sum(firsts),
        "cold_start_s": mean(firsts),
        "cold_start_persistent_s": firsts[0] if firsts else None,
        "warm_start_s": mean(firsts[1:]),
        "shutdown_wait_s": mean([t.last_wait_s for t in started if t.ended == "exhausted"]),
        "mean_epoch_wall_s": mean([t.wall_s for t in (finished or started)]),
        "compute_measured_batches": sum(t.batches for t in truths)
        - sum(1 for t in started if t.ended == "break"),
        "started_steady": (sum(t.batches - 1 for t in started),
                           sum(t.wall_s - t.first_s for t in started)),
    }


def analysed_figures(record: ConsumerRecord) -> dict:
    """The same figures as the analysis computes them from a record."""
    return {
        "epochs": analysis.epoch_count(record),
        "batches": record.batches,
        "samples": record.samples,
        "wait_s": record.wait_s,
        "compute_s": record.compute_s,
        "wall_s": record.wall_s,
        "started": analysis.started_epoch_count(record),
        "steady_batches": analysis.steady_batch_count(record),
        "steady_wait_s": analysis.steady_wait_s(record),
        "cold_start_s": analysis.cold_start_s(record, persistent_workers=False),
        "cold_start_persistent_s": analysis.cold_start_s(record, persistent_workers=True),
        "warm_start_s": analysis.warm_start_s(record),
        "shutdown_wait_s": analysis.shutdown_wait_s(record, persistent_workers=False),
        "mean_epoch_wall_s": analysis.mean_epoch_wall_s(record),
        "compute_measured_batches": analysis.compute_measured_batches(record),
        "started_steady": analysis.started_steady_s(record),
    }


def approx_dict(expected: dict) -> dict:
    return {k: v if isinstance(v, int) or v is None else pytest.approx(v, rel=1e-9, abs=1e-12)
            for k, v in expected.items()}


def test_a_long_run_of_short_epochs_gives_the_figures_of_a_direct_computation():
    n = EPOCH_ROWS_FIRST + EPOCH_ROWS_LAST + 500
    record, truths = run(plans(n))
    assert record.folded_epochs.epochs == 500
    assert len(record.epochs) == EPOCH_ROWS_FIRST + EPOCH_ROWS_LAST
    assert analysed_figures(record) == approx_dict(direct_figures(truths))
    summary = analysis.summarize_consumer(record)
    assert summary.epochs == n
    assert summary.first_batch_s == pytest.approx(truths[0].first_s)
    assert record.status == "complete"
    # The errors the loop went on after are counted, not folded away.
    assert record.errors == sum(1 for p in plans(n) if p.fail_at is not None
                                and (p.stop_after is None or p.stop_after > p.fail_at))


def test_folding_changes_no_figure_of_the_summary(monkeypatch):
    schedule = plans(EPOCH_ROWS_FIRST + EPOCH_ROWS_LAST + 300, seed=11)
    folded, _ = run(schedule)
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_LAST", 10**9)
    listed, _ = run(schedule)
    assert listed.folded_epochs == FoldedEpochs() and len(listed.epochs) == len(schedule)
    assert folded.folded_epochs.epochs == 300
    assert analysed_figures(folded) == approx_dict(analysed_figures(listed))
    want = dataclasses.asdict(analysis.summarize_consumer(listed))
    got = dataclasses.asdict(analysis.summarize_consumer(folded))
    assert got == {k: pytest.approx(v, rel=1e-9) if isinstance(v, float) else v
                   for k, v in want.items()}
    assert analysis.steady_stall_fraction(folded) == pytest.approx(
        analysis.steady_stall_fraction(listed), rel=1e-9)
    assert analysis.steady_batches_per_s(folded) == pytest.approx(
        analysis.steady_batches_per_s(listed), rel=1e-9)
    assert folded.timeline == listed.timeline and folded.untimed_batches == 0


def test_the_listed_epochs_and_the_folded_sums_add_up_to_the_run(monkeypatch):
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_FIRST", 3)
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_LAST", 5)
    record, truths = run(plans(40, seed=3))
    assert [e.epoch for e in record.epochs] == [0, 1, 2, 35, 36, 37, 38, 39]
    folded = record.folded_epochs
    assert folded.epochs == 32
    middle = truths[3:35]
    assert folded.batches == sum(t.batches for t in middle)
    assert folded.samples == sum(t.samples for t in middle)
    assert folded.wait_s == pytest.approx(sum(t.wait_s for t in middle))
    assert folded.compute_s == pytest.approx(sum(t.compute_s for t in middle))
    assert folded.wall_s == pytest.approx(sum(t.wall_s for t in middle))
    assert folded.exhausted == sum(1 for t in middle if t.batches and t.ended == "exhausted")
    assert folded.without_last_compute == sum(1 for t in middle
                                              if t.batches and t.ended == "break")
    for total in ("batches", "samples", "wait_s", "compute_s", "wall_s"):
        listed = sum(getattr(e, total) for e in record.epochs)
        assert getattr(record, total) == pytest.approx(listed + getattr(folded, total))
    assert analysed_figures(record) == approx_dict(direct_figures(truths))


def test_the_first_epoch_to_deliver_a_batch_stays_listed(monkeypatch):
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_FIRST", 3)
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_LAST", 5)
    record, truths = run(plans(60, seed=5, empty_first=6))
    first = next(i for i, t in enumerate(truths) if t.batches)
    assert first >= 6
    assert first in [e.epoch for e in record.epochs]
    assert analysis.cold_start_s(record, persistent_workers=True) == pytest.approx(
        truths[first].first_s)
    assert analysed_figures(record) == approx_dict(direct_figures(truths))


def test_an_unfinished_epoch_stays_listed_until_it_ends(monkeypatch):
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_FIRST", 2)
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_LAST", 4)
    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    for _ in range(5):
        list(probe.iterate(Source(clock, [0.1], 1, 0.0)))
    held = probe.iterate(Source(clock, [0.2, 0.1, 0.1], 1, 0.0))  # epoch 5, kept open
    next(held)
    clock.advance(0.05)
    for _ in range(20):
        list(probe.iterate(Source(clock, [0.1], 1, 0.0)))
    record = probe.record()
    assert 5 in [e.epoch for e in record.epochs]
    assert record.status == "in-progress"
    assert [e.ended for e in record.epochs if e.epoch == 5] == ["running"]
    assert list(held) == [[1], [2]]
    record = probe.record()
    assert 5 not in [e.epoch for e in record.epochs]
    assert record.status == "complete"
    assert record.batches == 5 + 3 + 20
    assert analysis.epoch_count(record) == 26
    assert record.folded_epochs.epochs == 26 - 2 - 4


def test_an_old_epoch_ended_by_an_error_is_folded_and_still_makes_the_run_an_error(monkeypatch):
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_FIRST", 2)
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_LAST", 4)
    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    for k in range(30):
        iterator = probe.iterate(Source(clock, [0.1, 0.1], 1, 0.0, fail_at=1 if k == 3 else None))
        try:
            for _ in iterator:
                clock.advance(0.01)
        except ValueError:
            pass  # the loop stops at the error; the iterator is dropped with it
        del iterator
    record = probe.record()
    assert record.folded_epochs.errors == 1
    assert 3 not in [e.epoch for e in record.epochs]
    assert record.status == "error" and record.errors == 1
    assert record.batches == 2 * 30 - 1


def test_iterators_that_fail_to_open_are_folded(monkeypatch):
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_FIRST", 2)
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_LAST", 4)
    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)

    def broken():
        clock.advance(0.01)
        raise OSError("no shard")

    for _ in range(50):
        with pytest.raises(OSError):
            probe.open_epoch(broken)
    list(probe.iterate(Source(clock, [0.1], 1, 0.0)))
    record = probe.record()
    assert len(record.epochs) == 6 and record.folded_epochs.epochs == 45
    assert record.folded_epochs.errors == 45
    assert record.wait_s == pytest.approx(50 * 0.01 + 0.1)
    assert record.status == "error" and record.errors == 50
    assert analysis.epoch_count(record) == 51


def test_flagged_epochs_count_their_batches_folded_or_listed(monkeypatch):
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_FIRST", 2)
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_LAST", 4)
    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0)
    flagged = 0
    for k in range(40):
        source = Source(clock, [0.01] * (k % 3 + 1), 1, 0.0)
        list(probe.open_epoch(lambda: iter(source), flagged=k % 8 == 0))
        flagged += k % 3 + 1 if k % 8 == 0 else 0
    record = probe.record()
    assert record.folded_epochs.epochs == 34
    assert record.flagged_batches == flagged


def test_memory_per_epoch_stays_bounded(monkeypatch):
    monkeypatch.setattr(consumer_module, "EPOCH_ROWS_LAST", 16)
    clock = FakeClock()
    probe = ConsumerProbe(run_start=clock(), clock=clock, cpu_clock=lambda: 0.0,
                          samples=lambda batch: 1, timeline_capacity=64)
    one = [0.001]

    def epochs(n):
        for _ in range(n):
            next(probe.iterate(Source(clock, one, 1, 0.0)))  # next(iter(loader)): a break

    tracemalloc.start()  # traced from here: the listed epochs below are replaced in turn
    epochs(EPOCH_ROWS_FIRST + 16 + 100)  # the lists are full
    before, _ = tracemalloc.get_traced_memory()
    epochs(1500)
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert (after - before) / 1500 < 8  # bytes per epoch: nothing is kept per epoch
    record = probe.record()
    assert analysis.epoch_count(record) == EPOCH_ROWS_FIRST + 16 + 1600
    assert len(record.epochs) == EPOCH_ROWS_FIRST + 16
    assert len(record.timeline) < 64


def flat(rows: list, skip: tuple[str, ...] = ()) -> list[float]:
    """The numeric fields of ``rows`` (dataclasses) in one list (``None`` and NaN as -1)."""
    return [-1.0 if v is None or v != v else v for row in rows
            for k, v in dataclasses.asdict(row).items() if k not in skip]


@pytest.mark.parametrize("fixed", [False, True])
def test_short_epochs_folded_in_python_give_the_figures_of_the_numpy_fold(monkeypatch, fixed):
    """Epochs of up to SMALL_FOLD_BATCHES batches are folded without numpy; the records
    match the numpy fold's (a timeline stride past 1 included)."""
    schedule = plans(400, seed=13)
    for plan in schedule[::7]:  # some longer epochs: folded with numpy either way
        plan.waits = plan.waits + [0.002] * 80
    python, _ = run(schedule, timeline_capacity=256, fixed=fixed)
    monkeypatch.setattr(consumer_module, "SMALL_FOLD_BATCHES", -1)
    numpy, _ = run(schedule, timeline_capacity=256, fixed=fixed)
    assert python.timeline_stride == numpy.timeline_stride > 1
    assert flat(python.timeline) == pytest.approx(flat(numpy.timeline))
    assert [e.ended for e in python.epochs] == [e.ended for e in numpy.epochs]
    assert flat(python.epochs, skip=("ended",)) == pytest.approx(flat(numpy.epochs,
                                                                      skip=("ended",)))
    for name in ("batches", "samples", "untimed_batches"):
        assert getattr(python, name) == getattr(numpy, name)
    for name in ("wait_s", "compute_s", "wall_s"):
        assert getattr(python, name) == pytest.approx(getattr(numpy, name), rel=1e-12)
    assert dataclasses.astuple(python.folded_epochs) == pytest.approx(
        dataclasses.astuple(numpy.folded_epochs), rel=1e-12)


def test_the_folded_sums_round_trip_through_the_report_json():
    record, _ = run(plans(EPOCH_ROWS_FIRST + EPOCH_ROWS_LAST + 20))
    timeline = Timeline(epochs=record.epochs, folded_epochs=record.folded_epochs)
    data = to_jsonable(timeline)
    assert data["folded_epochs"]["epochs"] == 20
    assert from_jsonable(Timeline, data, ranges=True) == timeline
    del data["folded_epochs"]  # a report written before epochs were folded
    assert from_jsonable(Timeline, data, ranges=True).folded_epochs is None
