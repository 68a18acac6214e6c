"""The consumer probe's per-epoch records: the buffered batches of an epoch not yet folded
(:class:`OpenEpoch`), the figures derived from them at a fold (:class:`EpochChunk`), the sums
of the epochs folded away (:class:`FoldedSums`), and the state the probe shares with its
epochs' iterators (:class:`ConsumerState`, :class:`EpochOwner`).
"""

from __future__ import annotations

import dataclasses
import math
import random
from array import array
from typing import Any, NamedTuple, Optional, Protocol

import numpy as np

from .._clock import Clock
from ..records import FoldedEpochs
from .batches import SampleCounter, TokenCounter, count_samples

CPU_SAMPLE_EVERY = 64
"""Read the process CPU clock on one batch in this many (dividing ``FOLD_BATCHES``, so a fold
always falls on a regular call), but at most once per :data:`CPU_SAMPLE_MIN_GAP_S` of the run
(across epochs: each epoch's first call is a regular one). In a
slow loop (:data:`SLOW_BATCH_S`) every batch is sampled, and the fold check and the
``periodic`` callback still come one batch in this many."""

FOLD_BATCHES = 4096
"""Batches buffered (16 bytes of timestamps and 8 of sample count each) before folding."""


class FixedBatches(NamedTuple):
    """Batch sizes known without looking at batches: torch's ``BatchSampler`` with
    ``default_collate`` yields ``batch_size`` samples per batch except the epoch's last, and
    ``samples_per_epoch`` in all (``len(sampler)``, rounded down to whole batches with
    ``drop_last``). Counting from it saves about 0.6 us per batch."""

    batch_size: int
    samples_per_epoch: int


class EpochChunk:
    """Derived figures of a run of buffered batches (see :meth:`OpenEpoch.chunk`).

    The buffer holds an (entered, left) pair per timed batch and, for each sparse stretch of
    a fast loop (:data:`SPARSE_BELOW_S`), one gap pair ``(-k, end)``: ``k`` batches taken
    without a clock read, up to ``end``, when the ``next()`` after them was entered. A gap's
    wall time runs from the buffered moment before it (the timed batch's hand-over, the
    previous gap's end, or ``prev_left``) to its end; its wait is estimated as that wall (less
    one mean step when a timed batch's step runs into it) times the share of wait in the wall
    time of ``pool`` (batches, wait and wall in seconds: the blocks drawn to be timed, a random
    sample of the sparse stretches), and the rest is compute. A ratio of the same blocks' wait
    and wall follows the loop as the machine speeds up or slows down: on a real 27 us loop it
    spread 1 pp from run to run, where ``k`` times the mean wait spread 6 pp (an ad hoc A/B
    of the two estimators on ``benchmarks/sparse_accuracy.py``'s loop, 100,000 batches, 4
    interleaved runs each, against an independent clock around the loop body). Without a drawn block
    yet, ``k`` times this chunk's mean timed wait (an epoch's first batch left out), clipped to
    the gap. Per-row arrays (``offsets``, ``entered``, ``waits``, ``computes``, ``sizes``)
    hold the timed batches only; the totals hold every batch."""

    __slots__ = ("offsets", "entered", "waits", "computes", "sizes", "last_left", "batches",
                 "samples", "wait", "compute", "untimed", "counted_to")

    def __init__(self, marks: array, sizes: array, next_entered: Optional[float],
                 fixed: Optional[FixedBatches], samples_before: int,
                 pool: tuple[int, float, float] = (0, 0.0, 0.0),
                 prev_left: Optional[float] = None) -> None:
        # Slicing copies under the GIL in one step; a numpy view of the live array would block
        # the generator's appends (BufferError) if another thread took this snapshot.
        n = len(marks) // 2 if fixed is not None else min(len(sizes), len(marks) // 2)
        times = np.array(marks[: 2 * n], dtype=np.float64)
        entered_all, left_all = times[0::2], times[1::2]
        gap = entered_all < 0
        counts = np.where(gap, -entered_all, 1.0).astype(np.int64)
        if fixed is None:
            row_sizes = np.array(sizes[:n], dtype=np.int64)
        else:
            full = counts * fixed.batch_size
            room = fixed.samples_per_epoch - samples_before - (np.cumsum(full) - full)
            row_sizes = np.clip(room, 0, full)
        timed = ~gap
        self.batches = int(counts.sum())
        self.untimed = int(counts[gap].sum())
        self.samples = int(row_sizes.sum())
        self.offsets = (np.cumsum(counts) - counts)[timed]
        self.entered = entered_all[timed]
        self.sizes = row_sizes[timed]
        self.waits = left_all[timed] - self.entered
        # compute of a timed batch: from its hand-over to the next next() call; unknown for
        # the last batch until that call happens, and part of the gap before a gap (NaN)
        after = np.append(entered_all[1:], np.nan if next_entered is None else next_entered)
        after_gap = np.append(gap[1:], False)
        self.computes = np.where(after_gap, np.nan, after - left_all)[timed]
        self.wait = float(self.waits.sum())
        self.compute = float(np.nansum(self.computes))
        if n and gap.any():
            before = np.concatenate(([np.nan if prev_left is None else prev_left],
                                     left_all[:-1]))
            walls = np.nan_to_num(left_all[gap] - before[gap], nan=0.0)
            if pool[0] and pool[2] > 0:
                # the drawn blocks' share of wait in their wall time; a gap right after a
                # timed batch also holds that batch's step, at the drawn blocks' mean
                share = pool[1] / pool[2]
                step_s = (pool[2] - pool[1]) / pool[0]
                after_timed = np.concatenate(([False], timed[:-1]))[gap]
                spans = walls - np.where(after_timed, np.minimum(step_s, walls), 0.0)
                gap_waits = spans * share
            else:  # no drawn block yet (a short epoch, an early snapshot): the mean wait
                waits = self.waits[1:] if samples_before == 0 else self.waits
                mean_wait = float(waits.mean()) if len(waits) else 0.0
                gap_waits = np.clip(counts[gap] * mean_wait, 0.0, walls)
            self.wait += float(gap_waits.sum())
            self.compute += float((walls - gap_waits).sum())
        self.last_left = float(left_all[-1]) if n else None
        # how far wait and compute are counted: the last timed batch's step ends at the next
        # call, when it is known (a gap at the next chunk's start begins there)
        self.counted_to = (next_entered if n and not gap[-1] and next_entered is not None
                           else self.last_left)


class OpenEpoch:
    """One pass: folded counters plus the batches buffered since the last fold."""

    __slots__ = ("epoch", "started", "base_index", "batches", "samples", "wait", "compute",
                 "last", "first", "ended", "marks", "sizes", "fixed", "last_wait", "dropped_at",
                 "pool", "run_pool", "untimed", "counted_to", "released", "final", "evicted",
                 "flagged")

    def __init__(self, epoch: int, started: float, base_index: int,
                 fixed: Optional[FixedBatches]) -> None:
        self.epoch = epoch
        self.started = started
        self.base_index = base_index  # run-wide index of this epoch's first batch
        self.batches = 0
        self.samples = 0
        self.wait = 0.0
        self.compute = 0.0
        self.last = started
        self.first: Optional[float] = None
        self.ended = "running"
        self.last_wait: Optional[float] = None  # the final next()'s wait, when exhausted
        self.marks = array("d")  # entered, left per buffered batch
        self.sizes = array("q")  # samples per buffered batch (unless fixed)
        self.fixed = fixed
        self.dropped_at: Optional[float] = None  # when its iterator was dropped mid-epoch
        # batches of the blocks drawn to be timed, and their wait in seconds (EpochChunk's pool)
        self.pool: list[float] = [0, 0.0, 0.0]
        self.run_pool: Optional[list[float]] = None  # the probe's, over every epoch
        self.counted_to = started  # the end of the folded batches' last step, when known
        self.untimed = 0  # folded batches of sparse stretches (no clock read)
        self.released = False  # its iterator is gone, or was never made (set without a lock)
        self.final = False  # ended for good: its figures will not change any more
        self.evicted = False  # neither among the run's first epochs nor its most recent
        self.flagged = False  # opened with flagged=True (ConsumerRecord.flagged_batches)

    def started_batch(self) -> bool:
        """Whether it delivered a first batch (so has a first-batch wait); its buffered
        batches not counted."""
        return self.batches > 0 and self.first is not None

    def wall_s(self, last: float) -> float:
        return max(0.0, last - self.started)

    def chunk(self, next_entered: Optional[float]) -> EpochChunk:
        return EpochChunk(self.marks, self.sizes, next_entered, self.fixed, self.samples,
                      self.pool_for_estimates(), self.counted_to)

    def pool_for_estimates(self) -> tuple[int, float, float]:
        """The epoch's drawn blocks once they hold :data:`CPU_SAMPLE_EVERY` batches, else the
        whole run's (``run_pool``, set by the probe)."""
        pool = self.pool if self.pool[0] >= CPU_SAMPLE_EVERY or self.run_pool is None \
            else self.run_pool
        return (int(pool[0]), float(pool[1]), float(pool[2]))

    def buffered(self) -> int:
        return len(self.marks) // 2


_FOLDED_FIELDS = tuple(f.name for f in dataclasses.fields(FoldedEpochs))


class FoldedSums:
    """The running sums of :class:`~pipecheck.records.FoldedEpochs`, added to one ended epoch
    at a time (:meth:`add`), plus the flagged epochs' batches."""

    __slots__ = _FOLDED_FIELDS + ("flagged_batches",)

    def __init__(self) -> None:
        self.epochs = self.batches = self.samples = 0
        self.wait_s = self.compute_s = self.wall_s = 0.0
        self.started = self.started_batches = 0
        self.first_batch_s = self.started_wall_s = 0.0
        self.exhausted = 0
        self.exhausted_wall_s = 0.0
        self.last_waits = 0
        self.last_wait_s = 0.0
        self.without_last_compute = self.errors = self.interrupted = self.untimed_batches = 0
        self.flagged_batches = 0

    def add(self, epoch: OpenEpoch) -> None:
        """Fold in ``epoch``, ended for good (its buffer folded): the figures its
        :class:`~pipecheck.records.EpochTiming` row would have held."""
        wall = epoch.wall_s(epoch.last)
        batches = epoch.batches
        self.epochs += 1
        self.batches += batches
        self.samples += epoch.samples
        self.wait_s += epoch.wait
        self.compute_s += epoch.compute
        self.wall_s += wall
        self.untimed_batches += epoch.untimed
        ended = epoch.ended
        if epoch.started_batch():
            self.started += 1
            self.started_batches += batches
            self.first_batch_s += epoch.first  # type: ignore[operator]  # started: not None
            self.started_wall_s += wall
            if ended == "exhausted":
                self.exhausted += 1
                self.exhausted_wall_s += wall
        if batches and ended == "exhausted" and epoch.last_wait is not None:
            self.last_waits += 1
            self.last_wait_s += epoch.last_wait
        if batches and ended in ("break", "running"):
            self.without_last_compute += 1
        if ended == "error":
            self.errors += 1
        elif ended == "interrupted":
            self.interrupted += 1
        if epoch.flagged:
            self.flagged_batches += batches

    def record(self) -> FoldedEpochs:
        return FoldedEpochs(**{name: getattr(self, name) for name in _FOLDED_FIELDS})


class CpuSums:
    """The sampled batches' CPU figures in seconds (``ConsumerRecord.sampled_*``): the wall time
    and the process's and the calling thread's CPU time of the sampled waits, and of the steps
    after them."""

    __slots__ = ("wait_wall_s", "wait_cpu_s", "wait_thread_cpu_s", "compute_wall_s",
                 "compute_cpu_s", "compute_thread_cpu_s")

    def __init__(self) -> None:
        self.wait_wall_s = self.wait_cpu_s = self.wait_thread_cpu_s = 0.0
        self.compute_wall_s = self.compute_cpu_s = self.compute_thread_cpu_s = 0.0


class ConsumerState:
    """What a :class:`~pipecheck.probes.consumer.ConsumerProbe` shares with the iterators of its
    epochs (:mod:`pipecheck.probes.consumer_iterator`): its clocks, the sample and token
    counters picked on the run's first batch (``primed`` once picked), the token total, the
    sampled CPU figures and when the last regular CPU sample was taken, the run's pool of drawn
    blocks (batches, wait and wall in seconds; :class:`EpochChunk`) and the seeded draw of the
    blocks to time."""

    __slots__ = ("clock", "cpu_clock", "thread_cpu_clock", "count_samples", "count_tokens",
                 "primed", "tokens", "cpu", "cpu_sampled_at", "pool", "sparse_draw")

    def __init__(self, clock: Clock, cpu_clock: Clock, thread_cpu_clock: Clock) -> None:
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.thread_cpu_clock = thread_cpu_clock
        self.count_samples: SampleCounter = count_samples
        self.count_tokens: Optional[TokenCounter] = None
        self.primed = False
        self.tokens: Optional[int] = None
        self.cpu = CpuSums()
        # The run's, so that short epochs do not each take one (CPU_SAMPLE_MIN_GAP_S).
        self.cpu_sampled_at = -math.inf
        self.pool: list[float] = [0, 0.0, 0.0]
        # Which fast-loop blocks are timed (SPARSE_TIMED_EVERY): seeded, so runs repeat.
        self.sparse_draw = random.Random(0x5EED).random


class EpochOwner(Protocol):
    """The probe an :class:`~pipecheck.probes.consumer_iterator.EpochIterator` reports to:
    its shared :class:`ConsumerState`, and the bookkeeping the iterator hands over (a fold of
    the buffered batches, the epoch's end, a raise, the run's first batch)."""

    state: ConsumerState

    def fold(self, epoch: OpenEpoch, next_entered: float) -> None: ...

    def finish(self, epoch: OpenEpoch, last_entered: float, end: float, how: str) -> None: ...

    def record_raise(self, epoch: OpenEpoch, entered: float, exc: BaseException) -> None: ...

    def first_batch(self, batch: Any) -> None: ...
