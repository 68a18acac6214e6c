"""Consumer timing: wait inside ``next()`` vs compute between batches, per batch, in the main
process, by timing around the real iterator (no patching of torch).

Memory is bounded whatever the run length: counters for the whole run, plus a timeline of
at most ``timeline_capacity`` batches kept evenly spaced (every ``stride``-th batch; the stride
doubles each time the buffer fills), plus one small record for each of the first
:data:`EPOCH_ROWS_FIRST` and the latest :data:`EPOCH_ROWS_LAST` epochs; the epochs between are
folded into running sums once ended, so starting, ending and reading epochs costs O(1)
however many came before.

The hot path per batch is two clock reads, two appends to a typed array and, unless the batch
sizes are known up front (``FixedBatches``), a sample count (about 0.4 us in all with the sizes
known, two ``perf_counter`` reads of about 0.06 us each included;
``benchmarks/consumer_cost.py``). In a loop faster than ``SPARSE_BELOW_S`` a batch, that is
still percents of the loop, so after ``SPARSE_AFTER_BATCHES`` batches one block of
``CPU_SAMPLE_EVERY`` batches in ``SPARSE_TIMED_EVERY`` (drawn at random) is timed that way and
the others only counted; their wall time is split into wait and compute at the drawn blocks'
share, and batch, sample and token counts and wall time stay exact. Every ``FOLD_BATCHES`` batches the arrays are folded
with numpy into the counters and the timeline, so they never grow past that. One batch in
``CPU_SAMPLE_EVERY`` (every batch but the run's first when batches are ``SLOW_BATCH_S`` apart
or more) also reads the main process's CPU clock (``time.process_time``, about 0.6 us on
Linux) to estimate how many cores the main process uses while waiting and while computing.
It is the process clock, not the thread's, because a training step runs on torch's intra-op
threads too (the demo's main process averaged 1.5 cores with torch's 2 threads). Around the
sampled waits and steps the calling thread's own clock (``time.thread_time``) is read as well:
with ``num_workers=0`` the gap between the two in waits is production's work on the intra-op
pool, which a worker (one thread) does not have
(:func:`pipecheck.analysis.producer.intra_op_inflation`); in steps, the calling thread's CPU
short of the step's wall time is its wait for a core while the pool ran
(:func:`pipecheck.analysis.consumer.step_on_cpu_fraction`).
"""

from __future__ import annotations

import dataclasses
import math
import random
import threading
import time
from array import array
from collections import deque
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Optional, Sequence

import numpy as np

from .._clock import Clock, monotonic
from ..errors import one_line
from .._locks import bounded
from ..kinds import (COMPLETE, ERROR, IN_PROGRESS, INTERRUPTED, NOT_STARTED, TERMINATED,
                     ConsumerStatus)
from ..records import BatchTiming, ConsumerRecord, EpochTiming, FoldedEpochs
from .base import BatchObserver
from .batches import (SampleCounter, TokenCounter, batch_storage, count_samples, counter_for,
                      guarded, token_counter_for)

CPU_SAMPLE_EVERY = 64
"""Read the process CPU clock on one batch in this many (dividing ``FOLD_BATCHES``, so a fold
always falls on a regular call), but at most once per :data:`CPU_SAMPLE_MIN_GAP_S` of the run
(across epochs: each epoch's first call is a regular one). In a
slow loop (:data:`SLOW_BATCH_S`) every batch is sampled, and the fold check and the
``periodic`` callback still come one batch in this many."""

SLOW_BATCH_S = 0.005
"""Seconds between two ``next()`` calls from which every batch's CPU is sampled, not one in
:data:`CPU_SAMPLE_EVERY`: the six CPU clock reads a sampled batch and its step take (about
0.6 us each on this project's Linux VM, ``python -m timeit -s "import time"
"time.thread_time()"``) then cost under 0.1% of the loop, and a short run of slow batches (a
10-second run of 100 ms batches has about 100) gets its steady steps sampled, not one or two
of them. pipecheck's choice."""

CPU_SAMPLE_MIN_GAP_S = 0.02
"""Least wall time in seconds from one regular CPU sample to the next, in the whole run (a
new epoch's first call waits for it too: a loop of one-batch epochs would otherwise read the
CPU clocks six times an epoch): in a loop so fast that
:data:`CPU_SAMPLE_EVERY` batches take less, the regular call in between only folds and calls
``periodic``, and reads no CPU clock. A sample and the call that closes its step take two
full calls with six CPU clock reads: on the fastest loader (19 us batches), the consumer probe
alone cost +8.2% of a first epoch sampling one batch in 64 against +6.8% one in 4,096
(medians of 4 interleaved A/B runs of ``benchmarks/overhead.py``'s ``compare`` harness,
this project's 2-core VM), about 17 us a sample. At most 50 CPU samples a second, still
thousands in a minute. pipecheck's choice."""

SPARSE_BELOW_S = 100e-6
"""Mean seconds per batch (over the last block of :data:`CPU_SAMPLE_EVERY` calls) below which
the loop is timed in sparse blocks: each block after :data:`SPARSE_AFTER_BATCHES` is timed
batch by batch with probability 1 / :data:`SPARSE_TIMED_EVERY` (a seeded draw, so a period in
the data cannot alias with the cadence); the others' batches are passed on with no clock read
(the block's first call still folds, calls ``periodic`` and may sample the CPU), and their wait
is estimated from the drawn blocks' share of wait (``_Chunk``). Two clock reads and two appends cost
0.9-1.1 us a batch on this project's 2-core VM (the floor of ``benchmarks/overhead.py``: +4.6%
to +6.7% of a 19 us batch), so under 100 us a batch they would cost about 1% of the loop or
more. pipecheck's choice."""

SPARSE_AFTER_BATCHES = 1024
"""Batches of the run timed one by one before sparse blocks may start (the warm-up, the
quantiles and the steady-state test have them all), and each epoch's first block is timed."""

SPARSE_TIMED_EVERY = 8
"""In a sparse stretch, one block in this many (on average) is timed batch by batch. On the
fastest loader's first epochs, 8 cost +2.5% to +4.2% against +4.2% to +5.6% for 4 and +6.1%
to +8.1% with every block timed (best of 200 interleaved chunks, 3 runs each, this project's
2-core VM; an ad hoc A/B setting this constant around ``benchmarks/overhead.py``'s
``compare``). The estimate's standard error is then
about 1 / sqrt(timed batches) of the wait's spread: 0.6% for exponential waits over 160,000
batches (``tests/unit/test_consumer_sparse.py``)."""

FOLD_BATCHES = 4096
"""Batches buffered (16 bytes of timestamps and 8 of sample count each) before folding."""

SMALL_FOLD_BATCHES = 64
"""Buffered batches up to which a fold (an epoch's end, mostly) is worked out in plain Python
rather than numpy, when no sparse stretch is among them: numpy's fixed cost per fold would
otherwise be paid by every short epoch, more than a whole one-batch epoch of a plain
DataLoader. Process CPU per epoch of the consumer probe alone over a list (an ad hoc timing on
this project's 2-core VM, under load; best of 5 x 2,000 epochs): 1 batch 20 us in Python
against 136 us with numpy, 32 batches 60 against 191 us, 64 batches 102 against 181 us; they
meet past 128 batches. ``benchmarks/many_epochs.py`` times the whole wrapper."""

EPOCH_ROWS_FIRST = 16
"""Epochs listed one by one from the run's start (``ConsumerRecord.epochs``): the start-up
ones, whatever comes after them."""

EPOCH_ROWS_LAST = 1024
"""The most recent epochs listed one by one beside the first :data:`EPOCH_ROWS_FIRST`. An
epoch that leaves both is added to the running sums (``ConsumerRecord.folded_epochs``) once it
has ended, unless it is the run's first to deliver a batch (kept: the cold start of a run
with persistent workers); so a run's epochs cost bounded memory and time however many there
are (a few hundred bytes a listed epoch). pipecheck's choice: 1,040 rows still show a long
run's recent trend epoch by epoch, in about 200 KB of JSON."""

_ROW_BUFFER_ROWS = 256
"""Timeline rows of small folds buffered flat before they are made into one array."""

_ROW_ARRAYS = 64
"""Timeline arrays kept apart before they are joined into one."""

ObserverErrorHandler = Callable[[BatchObserver, Exception], None]
"""``(observer, exc)``: told when a batch observer raised and was dropped."""

DEFAULT_TIMELINE_CAPACITY = 8192
"""Timeline rows kept (about 100 bytes each: under 1 MB)."""


class FixedBatches(NamedTuple):
    """Batch sizes known without looking at batches: torch's ``BatchSampler`` with
    ``default_collate`` yields ``batch_size`` samples per batch except the epoch's last, and
    ``samples_per_epoch`` in all (``len(sampler)``, rounded down to whole batches with
    ``drop_last``). Counting from it saves about 0.6 us per batch."""

    batch_size: int
    samples_per_epoch: int


class _Chunk:
    """Derived figures of a run of buffered batches (see :meth:`_Epoch.chunk`).

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


class _Epoch:
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
        # batches of the blocks drawn to be timed, and their wait in seconds (_Chunk's pool)
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

    def chunk(self, next_entered: Optional[float]) -> _Chunk:
        return _Chunk(self.marks, self.sizes, next_entered, self.fixed, self.samples,
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


class _FoldedSums:
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

    def add(self, epoch: _Epoch) -> None:
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


class ConsumerProbe:
    """Times every batch the consumer takes from an iterable.

    ``iterate(source)`` (or :meth:`open_epoch`) returns one :class:`EpochIterator` over
    ``source`` that yields the same objects in the same order and re-raises whatever ``source``
    raises, unchanged; it is also the one place batch observers are called
    (:class:`~pipecheck.probes.base.BatchObserver`). Each call is one epoch.
    ``record()`` returns a :class:`~pipecheck.records.ConsumerRecord` at any time (during an
    epoch too), with times relative to ``run_start`` (seconds from ``clock``).

    ``samples`` / ``tokens``: optional callables ``batch -> int``; by default samples are read
    from the batch's structure (:func:`~pipecheck.probes.batches.count_samples`) and tokens are
    counted when batches are mappings with ``input_ids``. ``cpu_clock`` and
    ``thread_cpu_clock``: the process's and the calling thread's CPU clocks in seconds (default
    ``time.process_time`` and ``time.thread_time``; a given ``cpu_clock`` stands for both unless
    ``thread_cpu_clock`` is given too).
    """

    def __init__(
        self,
        *,
        run_start: float,
        clock: Clock = monotonic,
        samples: Optional[SampleCounter] = None,
        tokens: Optional[TokenCounter] = None,
        timeline_capacity: int = DEFAULT_TIMELINE_CAPACITY,
        cpu_clock: Optional[Clock] = None,
        thread_cpu_clock: Optional[Clock] = None,
    ) -> None:
        if timeline_capacity < 2:
            raise ValueError(f"timeline_capacity must be >= 2, got {timeline_capacity}")
        self._clock = clock
        self._cpu_clock = cpu_clock or time.process_time
        # An injected process clock stands for the thread's too unless one is given (tests).
        self._thread_cpu_clock = thread_cpu_clock or cpu_clock or time.thread_time
        self._run_start = run_start
        # Sample/token counters are specialised on the first batch (see _first_batch).
        self._user_samples = samples
        self._count_samples: SampleCounter = count_samples
        self._user_tokens = tokens
        self._count_tokens: Optional[TokenCounter] = None
        self._primed = False
        self._lock = threading.Lock()  # folds vs a concurrent record()
        self._last: Optional[ConsumerRecord] = None  # for a snapshot whose lock wait timed out
        self._terminated = False
        self._capacity = timeline_capacity
        self._stride = 1
        # Timeline rows as float arrays of (index, epoch, start, wait, compute, samples); made
        # into records only when read (building a tuple per batch at each fold cost about
        # 0.3 us a batch while the stride is 1, benchmarks/first_epoch_cost.py).
        self._rows: list[np.ndarray] = []
        self._row_buffer = array("d")  # rows of small folds (6 floats each), not yet in _rows
        self._row_count = 0
        # Epochs, in bounded memory: the first EPOCH_ROWS_FIRST and the most recent
        # EPOCH_ROWS_LAST are listed, as are the run's first started epoch when it left both
        # (_pinned) and every epoch not yet ended for good (_open, by number); the others are
        # summed in _folded once ended.
        self._epoch_count = 0
        self._first_epochs: list[_Epoch] = []
        self._last_epochs: deque[_Epoch] = deque()
        self._pinned: Optional[_Epoch] = None
        self._first_started_listed = False  # one of _first_epochs delivered a batch
        self._open: dict[int, _Epoch] = {}
        self._folded = _FoldedSums()
        self._batches_folded = 0  # batches folded, every epoch's: the next epoch's first index
        self.tokens: Optional[int] = None
        self.batch_bytes: Optional[int] = None
        self.batch_tensors: Optional[int] = None
        # wait wall, wait cpu, compute wall, compute cpu, wait cpu of the calling thread,
        # compute cpu of the calling thread
        self._cpu = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        # When the last regular CPU sample was entered: the run's, so that short epochs do
        # not each take one (CPU_SAMPLE_MIN_GAP_S).
        self._cpu_sampled_at = -math.inf
        self._error: Optional[str] = None
        self.errors = 0  # next() calls that raised
        self._failed = False  # the run ended by an uncaught exception (mark_ended)
        self._interrupted = False
        self.sigterms_continued = 0  # SIGTERMs the program handled and went on after
        # Which fast-loop blocks are timed (SPARSE_TIMED_EVERY): seeded, so runs repeat.
        self._sparse_draw = random.Random(0x5EED).random
        self._pool: list[float] = [0, 0.0, 0.0]  # batches, wait (s) of every epoch's drawn blocks

    # -- hot path ------------------------------------------------------------------------------

    def iterate(self, source: Iterable[Any], fixed: Optional[FixedBatches] = None,
                observers: Sequence[BatchObserver] = (),
                on_observer_error: Optional[ObserverErrorHandler] = None) -> "EpochIterator":
        """One epoch over ``source``: ``iter(source)`` runs now, as it would unwrapped (worker
        start-up, a dataset's ``__iter__`` errors and warnings happen here), and its time is part
        of the first batch's wait. ``fixed``: batch sizes known up front (ignored when a
        ``samples`` counter was given). ``observers`` and ``on_observer_error``: see
        :meth:`open_epoch`."""
        return self.open_epoch(lambda: iter(source), fixed, observers, on_observer_error)

    def open_epoch(self, open_iterator: Callable[[], Iterator[Any]],
                   fixed: Optional[FixedBatches] = None,
                   observers: Sequence[BatchObserver] = (),
                   on_observer_error: Optional[ObserverErrorHandler] = None,
                   periodic: Optional[Callable[[Iterator[Any]], None]] = None,
                   flagged: bool = False) -> "EpochIterator":
        """Like :meth:`iterate`, with ``open_iterator()`` making the epoch's iterator.
        ``flagged``: count the epoch's batches in ``ConsumerRecord.flagged_batches`` too.

        ``periodic(iterator)``, when given, is called before the epoch's first ``next()`` and
        then before one in :data:`CPU_SAMPLE_EVERY` (on the calls that already read the CPU
        clock: nothing is added to the others); one that raises is dropped and reported to
        ``on_observer_error`` with its owner (``periodic.__self__``).

        Each of ``observers`` (:class:`~pipecheck.probes.base.BatchObserver`) that attaches to
        that iterator is called around every ``next()`` by the one returned iterator. An
        observer that raises ``Exception`` is dropped from this epoch and
        ``on_observer_error(observer, exc)`` is called (the wrapper turns the probe off with a
        note); nothing reaches the training loop."""
        epoch = self._begin_epoch(fixed)
        epoch.flagged = flagged
        try:
            iterator = open_iterator()
        except BaseException as exc:
            epoch.released = True  # no iterator will go on with it
            self._record_raise(epoch, epoch.started, exc)
            raise
        active = []
        for observer in observers:
            try:
                if observer.attach(iterator):
                    active.append(observer)
            except Exception as exc:
                if on_observer_error is not None:
                    on_observer_error(observer, exc)
        if active:
            made: EpochIterator = ObservedEpochIterator(self, epoch, iterator, tuple(active),
                                                        on_observer_error)
        else:
            made = EpochIterator(self, epoch, iterator)
            made._on_observer_error = on_observer_error
        made._periodic = periodic
        return made

    def batches_taken(self) -> int:
        """Batches of the epochs folded so far (every epoch ended before the last one
        began, and the folded part of any still open): a count that only grows. O(1)."""
        return self._batches_folded

    def _begin_epoch(self, fixed: Optional[FixedBatches]) -> _Epoch:
        """A new epoch, listed among the most recent; the one it pushes out of them is
        folded into the sums once ended (:meth:`_retire`). O(1) however many came before:
        only the epochs not yet ended for good are looked at."""
        if self._user_samples is not None:
            fixed = None
        with self._lock:
            self._close_dropped()
            base = self._batches_folded
            for open_epoch in self._open.values():
                base += open_epoch.buffered()
            epoch = _Epoch(self._epoch_count, self._clock(), base, fixed)
            self._epoch_count += 1
            epoch.run_pool = self._pool
            self._open[epoch.epoch] = epoch
            if epoch.epoch < EPOCH_ROWS_FIRST:
                self._first_epochs.append(epoch)
            else:
                self._last_epochs.append(epoch)
                if len(self._last_epochs) > EPOCH_ROWS_LAST:
                    old = self._last_epochs.popleft()
                    old.evicted = True
                    if old.final:
                        self._retire(old)
        return epoch

    def _close_dropped(self) -> None:
        """Close every epoch whose iterator was dropped mid-epoch (``break``) since the last
        look, and retire the epochs ended for good (:meth:`_retire`). Caller holds the lock.
        The iterator's ``__del__`` only notes the time: it may run in any thread, even one
        inside this lock, so it takes none."""
        ended = []
        for epoch in self._open.values():
            if epoch.ended == "running":
                if epoch.dropped_at is not None:
                    self._finish_locked(epoch, epoch.dropped_at, epoch.dropped_at, "break")
            elif epoch.released:  # an error or Ctrl-C ended it, and no iterator goes on
                epoch.final = True
            if epoch.final:
                ended.append(epoch)
        for epoch in ended:
            del self._open[epoch.epoch]
            if epoch.evicted:
                self._retire(epoch)

    def _retire(self, epoch: _Epoch) -> None:
        """``epoch`` (ended for good, no longer among the first or the most recent) leaves the
        list: its figures go into the running sums, except for the run's first epoch to
        deliver a batch, which stays listed (the cold start of persistent workers). Caller
        holds the lock."""
        if epoch.started_batch() and not self._first_started_listed:
            self._first_started_listed = any(e.started_batch() for e in self._first_epochs)
            pinned = self._pinned
            if not self._first_started_listed and (pinned is None or epoch.epoch < pinned.epoch):
                self._pinned = epoch
                if pinned is None:
                    return
                epoch = pinned  # an earlier epoch started late: the later one is folded
        self._folded.add(epoch)

    def _listed(self) -> list[_Epoch]:
        """The epochs listed one by one, in epoch order. Caller holds the lock (or its wait
        timed out: a snapshot of lists a stopped holder may have been changing)."""
        between = [e for e in list(self._open.values()) if e.evicted]
        if self._pinned is not None:
            between.append(self._pinned)
        between.sort(key=lambda e: e.epoch)
        return self._first_epochs + between + list(self._last_epochs)

    def _record_raise(self, epoch: _Epoch, entered: float, exc: BaseException) -> None:
        """A ``next()`` that began at ``entered`` raised ``exc``: its time is waiting that
        gave no batch, and the epoch stays open (the same iterator may go on, as torch's
        does); it reads as ended by the error until a later ``next()`` returns a batch."""
        end = self._clock()
        self.errors += 1
        if isinstance(exc, KeyboardInterrupt):
            self._interrupted = True
            self._finish(epoch, entered, end, "interrupted")
        else:
            self._error = one_line(exc)
            self._finish(epoch, entered, end, "error")

    def _first_batch(self, batch: Any) -> None:
        """Picks the sample and token counters for the rest of the run from its first batch.
        The user's counters are guarded (:func:`~pipecheck.probes.batches.guarded`): a batch
        they cannot read counts as one sample and no tokens, never an exception."""
        self._primed = True
        # Once a run: for the /dev/shm headroom check and the hand-over estimate.
        self.batch_bytes, self.batch_tensors = batch_storage(batch)
        self._count_samples = (guarded(self._user_samples, 1) if self._user_samples
                               else counter_for(batch))
        try:
            self._count_tokens = (guarded(self._user_tokens, 0) if self._user_tokens
                                  else token_counter_for(batch))
        except Exception:  # a mapping that raises on lookup: no token count
            self._count_tokens = None

    # -- folding -------------------------------------------------------------------------------

    def _fold(self, epoch: _Epoch, next_entered: float) -> None:
        """Move the buffered batches into the counters and the timeline."""
        with self._lock:
            self._fold_locked(epoch, next_entered)

    def _fold_locked(self, epoch: _Epoch, next_entered: float) -> None:
        marks = epoch.marks
        if not marks:
            return
        if len(marks) == 2 and marks[0] >= 0:
            self._fold_one(epoch, next_entered)  # one timed batch: a one-batch epoch's close
        elif len(marks) >> 1 <= SMALL_FOLD_BATCHES and min(marks[0::2]) >= 0:
            self._fold_small(epoch, next_entered)
        else:
            chunk = epoch.chunk(next_entered)
            rows = self._rows_of(epoch, chunk)
            if len(rows):
                self._rows.append(rows)
                self._row_count += len(rows)
            if chunk.batches:
                if epoch.first is None and epoch.batches == 0 and len(chunk.waits):
                    epoch.first = float(chunk.waits[0])
                epoch.batches += chunk.batches
                epoch.samples += chunk.samples
                epoch.wait += chunk.wait
                epoch.compute += chunk.compute
                epoch.untimed += chunk.untimed
                # both set when the chunk has batches
                assert chunk.last_left is not None and chunk.counted_to is not None
                epoch.last = chunk.last_left
                epoch.counted_to = chunk.counted_to
                self._batches_folded += chunk.batches
        del epoch.sizes[:]
        del marks[:]
        self._bound_timeline()

    def _fold_small(self, epoch: _Epoch, next_entered: Optional[float]) -> None:
        """:meth:`_fold_locked` for at most :data:`SMALL_FOLD_BATCHES` buffered batches, all
        timed (no sparse stretch among them), in plain Python: the figures of a
        :class:`_Chunk`, without numpy's fixed cost per fold. Timeline rows go to a flat
        buffer, made into an array every :data:`_ROW_BUFFER_ROWS` rows."""
        marks, fixed = epoch.marks, epoch.fixed
        n = len(marks) >> 1
        if fixed is None:
            sizes = epoch.sizes.tolist()
            n = min(n, len(sizes))
        else:
            size, room = fixed.batch_size, fixed.samples_per_epoch - epoch.samples
        if not n:
            return
        first_index = epoch.base_index + epoch.batches
        stride, buffer, run_start, number = (self._stride, self._row_buffer, self._run_start,
                                             epoch.epoch)
        wait = compute = 0.0
        samples = rows = 0
        for i in range(n):
            entered, left = marks[2 * i], marks[2 * i + 1]
            after = marks[2 * i + 2] if i + 1 < n else next_entered
            # the step runs to the next call; the last one's is unknown until it happens
            step = math.nan if after is None else after - left
            if after is not None:
                compute += step
            batch = sizes[i] if fixed is None else min(max(room - i * size, 0), size)
            samples += batch
            wait += left - entered
            if (first_index + i) % stride == 0:
                buffer.extend((first_index + i, number, entered - run_start, left - entered,
                               step, batch))
                rows += 1
        if epoch.first is None and epoch.batches == 0:
            epoch.first = marks[1] - marks[0]
        epoch.batches += n
        epoch.samples += samples
        epoch.wait += wait
        epoch.compute += compute
        epoch.last = marks[2 * n - 1]
        epoch.counted_to = epoch.last if next_entered is None else next_entered
        self._batches_folded += n
        self._row_count += rows
        if len(buffer) >= 6 * _ROW_BUFFER_ROWS:
            self._flush_rows()

    def _fold_one(self, epoch: _Epoch, next_entered: Optional[float]) -> None:
        """:meth:`_fold_small` for exactly one buffered timed batch, without its loop: what
        an epoch of one batch (``next(iter(loader))``, a tiny dataset) folds when it ends.
        The same figures as :meth:`_fold_small`'s; clears nothing (the caller does)."""
        fixed = epoch.fixed
        if fixed is None:
            if not epoch.sizes:
                return
            batch = epoch.sizes[0]
        else:
            batch = min(max(fixed.samples_per_epoch - epoch.samples, 0), fixed.batch_size)
        marks = epoch.marks
        entered, left = marks[0], marks[1]
        index = epoch.base_index + epoch.batches
        step = math.nan if next_entered is None else next_entered - left
        if index % self._stride == 0:
            self._row_buffer.extend((index, epoch.epoch, entered - self._run_start,
                                     left - entered, step, batch))
            self._row_count += 1
        if epoch.first is None and epoch.batches == 0:
            epoch.first = left - entered
        epoch.batches += 1
        epoch.samples += batch
        epoch.wait += left - entered
        if next_entered is not None:
            epoch.compute += step
        epoch.last = left
        epoch.counted_to = left if next_entered is None else next_entered
        self._batches_folded += 1
        if len(self._row_buffer) >= 6 * _ROW_BUFFER_ROWS:
            self._flush_rows()

    def _bound_timeline(self) -> None:
        """Join the timeline's arrays every :data:`_ROW_ARRAYS` folds (a run of short epochs
        keeps a short list), and double the stride while the timeline is full."""
        if len(self._rows) >= _ROW_ARRAYS:
            self._rows = [np.concatenate(self._rows)]
        while self._row_count >= self._capacity:
            self._flush_rows()
            self._stride *= 2
            kept = (r[r[:, 0] % self._stride == 0] for r in self._rows)
            self._rows = [r for r in kept if len(r)]
            self._row_count = sum(len(r) for r in self._rows)

    def _flush_rows(self) -> None:
        """Move the buffered small-fold rows into an array of ``_rows``."""
        if self._row_buffer:
            self._rows.append(self._buffered_rows())
            del self._row_buffer[:]

    def _buffered_rows(self) -> np.ndarray:
        return np.array(self._row_buffer, dtype=np.float64).reshape(-1, 6)

    def _rows_of(self, epoch: _Epoch, chunk: _Chunk) -> np.ndarray:
        """Timeline rows (the timed batches whose run-wide index is a multiple of ``stride``)
        of a chunk: a float array
        of shape ``(rows, 6)``, columns index, epoch, start (s since the run start), wait,
        compute (NaN: not known yet) and samples."""
        indices = epoch.base_index + epoch.batches + chunk.offsets
        picked = indices % self._stride == 0
        starts = chunk.entered[picked] - self._run_start
        rows = np.empty((len(starts), 6))
        rows[:, 0] = indices[picked]
        rows[:, 1] = epoch.epoch
        rows[:, 2] = starts
        rows[:, 3] = chunk.waits[picked]
        rows[:, 4] = chunk.computes[picked]
        rows[:, 5] = chunk.sizes[picked]
        return rows

    def _finish(self, epoch: _Epoch, last_entered: float, end: float, how: str) -> None:
        """Close an epoch: fold what is buffered (the last batch's step ran until
        ``last_entered``) and count ``end - last_entered`` as wait (the final ``next()``)."""
        with self._lock:
            self._finish_locked(epoch, last_entered, end, how)

    def _finish_locked(self, epoch: _Epoch, last_entered: float, end: float, how: str) -> None:
        self._fold_locked(epoch, last_entered)
        epoch.wait += max(0.0, end - last_entered) if how != "break" else 0.0
        if how == "exhausted":
            epoch.last_wait = max(0.0, end - last_entered)
        epoch.last = end
        epoch.counted_to = end
        epoch.ended = how
        # Exhausted or dropped, it takes no more batches; after an error the same iterator
        # may go on (final once it is gone, see _close_dropped).
        epoch.final = how in ("exhausted", "break")

    # -- reading -------------------------------------------------------------------------------

    name = "consumer"

    def start(self) -> None:
        """Nothing to start: each epoch is timed by the iterator :meth:`open_epoch` makes."""

    def stop(self) -> None:
        """Nothing to stop (no thread, no file)."""

    def record(self) -> ConsumerRecord:
        """A consistent copy of everything measured so far (buffered batches included). When
        the lock is not free within :data:`~pipecheck._locks.SNAPSHOT_LOCK_TIMEOUT_S` (its
        holder was stopped by a signal whose handler is saving the report), the previous
        snapshot, or without one the data as the stopped holder left it. Its cost is bounded
        whatever the run's length: the listed epochs and the timeline are."""
        with bounded(self._lock) as held:
            if not held and self._last is not None:  # holder stopped by a signal: last copy
                return self._last
            if held:
                self._close_dropped()
            rows = list(self._rows)
            if self._row_buffer:
                rows.append(self._buffered_rows())
            stride = self._stride
            epoch_records = []
            folded = self._folded
            untimed = folded.untimed_batches
            flagged = folded.flagged_batches
            for e in self._listed():
                n, samples, wait, compute, last, first = 0, 0, 0.0, 0.0, e.last, e.first
                if e.marks:  # batches buffered since its last fold
                    chunk = e.chunk(None)
                    rows.append(self._rows_of(e, chunk))
                    n, samples, wait, compute = (chunk.batches, chunk.samples, chunk.wait,
                                                 chunk.compute)
                    untimed += chunk.untimed
                    if first is None and e.batches == 0 and len(chunk.waits):
                        first = float(chunk.waits[0])
                    if n and e.ended == "running":
                        assert chunk.last_left is not None  # set when n > 0
                        last = chunk.last_left
                untimed += e.untimed
                if e.flagged:
                    flagged += e.batches + n
                epoch_records.append(EpochTiming(
                    epoch=e.epoch, started_at_s=e.started - self._run_start,
                    batches=e.batches + n, samples=e.samples + samples,
                    wait_s=e.wait + wait, compute_s=e.compute + compute,
                    wall_s=e.wall_s(last), first_batch_s=first, ended=e.ended,
                    last_wait_s=e.last_wait))
            folded_epochs = folded.record()
        table = np.concatenate(rows) if rows else np.empty((0, 6))
        table = table[np.argsort(table[:, 0], kind="stable")]
        timeline = [BatchTiming(index=int(r[0]), epoch=int(r[1]), start_at_s=r[2], wait_s=r[3],
                                compute_s=None if r[4] != r[4] else r[4], samples=int(r[5]))
                    for r in table.tolist()]
        self._last = ConsumerRecord(
            batches=folded_epochs.batches + sum(e.batches for e in epoch_records),
            samples=folded_epochs.samples + sum(e.samples for e in epoch_records),
            tokens=self.tokens,
            wait_s=folded_epochs.wait_s + sum(e.wait_s for e in epoch_records),
            compute_s=folded_epochs.compute_s + sum(e.compute_s for e in epoch_records),
            wall_s=folded_epochs.wall_s + sum(e.wall_s for e in epoch_records),
            epochs=epoch_records,
            timeline=timeline,
            timeline_stride=stride,
            status=self._status(epoch_records, folded_epochs),
            error=self._error,
            errors=self.errors,
            sampled_wait_wall_s=self._cpu[0],
            sampled_wait_cpu_s=self._cpu[1],
            sampled_compute_wall_s=self._cpu[2],
            sampled_compute_cpu_s=self._cpu[3],
            sampled_wait_thread_cpu_s=self._cpu[4],
            sampled_compute_thread_cpu_s=self._cpu[5],
            batch_bytes=self.batch_bytes,
            batch_tensors=self.batch_tensors,
            untimed_batches=untimed,
            sigterms_continued=self.sigterms_continued,
            folded_epochs=folded_epochs,
            flagged_batches=flagged,
        )
        return self._last

    def mark_interrupted(self) -> None:
        """Record a KeyboardInterrupt that happened outside ``next()`` (in the loop body), which
        the probe cannot see for itself; the report then says the run was interrupted."""
        self._interrupted = True

    def mark_ended(self, status: str, exc: Optional[BaseException] = None) -> None:
        """Record how the run ended where the probe cannot see it (outside ``next()``; the
        exit-time save calls this, :mod:`pipecheck.autosave`): ``"error"`` with the uncaught
        exception ``exc``, ``"interrupted"`` (Ctrl-C) or ``"terminated"`` (SIGTERM). An error
        the loader itself raised is kept. Takes no lock (called from a signal handler)."""
        if status == "error":
            self._failed = True
            if exc is not None and self._error is None:
                self._error = one_line(exc)
        elif status == "interrupted":
            self._interrupted = True
        elif status == "terminated":
            self._terminated = True

    def mark_continued(self) -> None:
        """SIGTERM was received (:meth:`mark_ended` ``"terminated"``) and the program went on
        (its own handler returned): the status is again what the loop does next, and
        ``sigterms_continued`` counts such SIGTERMs. Takes no lock (a signal handler calls
        it)."""
        if self._terminated:
            self._terminated = False
            self.sigterms_continued += 1

    def _status(self, epochs: list[EpochTiming], folded: FoldedEpochs) -> ConsumerStatus:
        # An error that the loop went on after (a skipped bad batch) does not make the run
        # an error; ``errors`` and ``error`` still tell of it.
        if self._failed or folded.errors or any(e.ended == "error" for e in epochs):
            return ERROR
        if self._interrupted:
            return INTERRUPTED
        if self._terminated:
            return TERMINATED
        if not epochs and not folded.epochs:
            return NOT_STARTED
        if any(e.ended == "running" for e in epochs):
            return IN_PROGRESS
        return COMPLETE


class EpochIterator:
    """One epoch's iterator: yields the source iterator's batches unchanged, timing each
    ``next()`` (wait) and the gap before the next call (compute) for its :class:`ConsumerProbe`.

    It behaves as the iterator it wraps: exceptions pass through unchanged and the same
    iterator goes on yielding the rest of the epoch afterwards (torch's DataLoader iterators
    do); after the end, ``next()`` is passed straight on. A class rather than a generator for
    exactly that, and so that nothing is printed when one is still alive at interpreter exit.
    Dropping it mid-epoch (``break``) ends the epoch at that moment (``__del__``).

    Most calls take the fast path (two clock reads, two appends, the sample count); one in
    :data:`CPU_SAMPLE_EVERY` takes the full path (:meth:`_next_full`: fold check, ``periodic``)
    and reads the CPU clock when :data:`CPU_SAMPLE_MIN_GAP_S` has passed since the last such
    sample (the call after a sample closes its step on the full path too). The first call
    and any after an exception take the full path, as does every call while batches come
    :data:`SLOW_BATCH_S` apart or more. In a loop faster than :data:`SPARSE_BELOW_S` a batch,
    most blocks of :data:`CPU_SAMPLE_EVERY` calls take the skip path after their full call:
    the batch and its sample count, no clock read.
    """

    __slots__ = ("_probe", "_epoch", "_iterator", "_clock", "_marks", "_sizes", "_hot",
                 "_sample_due", "_regular_in", "_pending", "_done",
                 "_raised", "_cpu_mark", "_skip_len", "_skip_next", "_block_entered", "_drawn",
                 "_observers", "_on_observer_error", "_periodic", "__weakref__")

    _sparse = True  # whether fast loops may skip timing (not when observers read each wait)

    def __init__(self, probe: ConsumerProbe, epoch: _Epoch, iterator: Iterator[Any]) -> None:
        # Made by ConsumerProbe.open_epoch, which opens ``iterator`` (its time is part of the
        # first wait: ``_pending`` is the epoch's start).
        self._probe = probe
        self._epoch = epoch
        self._iterator = iterator
        self._clock = probe._clock
        self._marks = epoch.marks
        self._sizes = epoch.sizes
        self._sample_due = True  # the next full call is a regular sample (the first is)
        self._regular_in = CPU_SAMPLE_EVERY  # full calls of a slow loop before the next one
        self._pending: Optional[float] = epoch.started  # iter() is part of the first wait
        self._done = False
        self._raised = False
        # The sampled batch's (left, process cpu, thread cpu), closed by the next call
        self._cpu_mark: Optional[tuple[float, float, float]] = None
        self._skip_len = 0  # calls of the current sparse stretch (0: none open)
        self._skip_next = False  # the block of the sample being closed is to be skipped
        self._block_entered: Optional[float] = None  # when the current block's full call began
        self._drawn = False  # the current block was drawn to be timed (SPARSE_TIMED_EVERY)
        # What the fast path reads, in one list: [fast-path calls left before the next full
        # one (negative: skip-path calls left), clock, the source iterator, marks.append,
        # sample counter or None (batch sizes known up front), token counter or None,
        # samples of the skipped batches so far]. One attribute read per batch: the
        # class has a __getattr__, which keeps Python 3.11 from specialising its attribute
        # reads (about 20 ns each, benchmarks/consumer_cost.py).
        self._hot: list[Any] = [0, self._clock, iterator, epoch.marks.append,
                                None if epoch.fixed is not None else probe._count_samples,
                                probe._count_tokens, 0]
        self._periodic: Optional[Callable[[Iterator[Any]], None]] = None
        self._on_observer_error: Optional[ObserverErrorHandler] = None

    def __iter__(self) -> "EpochIterator":
        return self

    def __len__(self) -> int:
        # torch's iterators have a length; others raise TypeError, as they would unwrapped
        return len(self._iterator)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # Only names this class lacks: the wrapped iterator's own (torch's ``_workers``,
        # ``_num_yielded``, ...), so code that inspects its epoch's iterator still works.
        if name in _OWN_NAMES or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "_iterator"), name)

    def __next__(self) -> Any:
        hot = self._hot
        fast, clock, source, append, count, tokens, _ = hot
        if fast <= 1:
            if fast >= 0:
                return self._next_full()
            hot[0] = fast + 1  # the skip path: the batch, no clock read
            try:
                batch = next(source)
            except BaseException as exc:
                self._on_skip_raise(fast, exc)
                raise
            if count is not None:
                hot[6] += count(batch)
            if tokens is not None:
                probe = self._probe
                probe.tokens = (probe.tokens or 0) + tokens(batch)
            return batch
        hot[0] = fast - 1
        entered = clock()
        try:
            batch = next(source)
        except BaseException as exc:
            self._on_raise(entered, exc)
            raise
        left = clock()
        append(entered)
        append(left)
        if count is not None:
            self._sizes.append(count(batch))
        if tokens is not None:
            probe = self._probe
            probe.tokens = (probe.tokens or 0) + tokens(batch)
        return batch

    def _next_full(self) -> Any:
        if self._done:
            return next(self._iterator)  # what the source does after its end
        probe = self._probe
        clock = self._clock
        entered = self._pending
        if entered is None:
            entered = clock()
        else:
            self._pending = None
        epoch = self._epoch
        cpu = probe._cpu
        cpu_clock = probe._cpu_clock
        if self._cpu_mark is not None:  # the step after a sampled batch: its compute share
            left_before, cpu_before, thread_cpu_before = self._cpu_mark
            self._cpu_mark = None
            cpu[2] += entered - left_before
            cpu[3] += cpu_clock() - cpu_before
            cpu[5] += probe._thread_cpu_clock() - thread_cpu_before
        regular = self._sample_due
        marks = epoch.marks
        skipped = self._skip_len  # batches of the open sparse stretch
        if regular and self._drawn:
            self._pool_block(entered)
        # A slow loop samples every batch's CPU (see SLOW_BATCH_S); marks[-2] is when the
        # previous next() was entered (or, after a sparse stretch, its gap's -count: the loop
        # was fast).
        slow = (not skipped and len(marks) >= 2 and marks[-2] >= 0
                and entered - marks[-2] >= SLOW_BATCH_S)
        # Whether this call's batch joins a sparse stretch: a skipped block's regular call,
        # and the call after it that closes its CPU sample.
        in_gap = (not slow and self._skip_block(entered)) if regular else self._skip_next
        if skipped and (regular or not in_gap):
            self._close_gap(skipped, entered)  # a new block: the stretch ends here
        if regular:
            if len(marks) >> 1 >= FOLD_BATCHES:
                probe._fold(epoch, entered)
            if self._periodic is not None:
                self._call_periodic()
        # Not the run's first batch: its wait and step hold start-up and lazy initialisation.
        # A regular call samples the CPU only CPU_SAMPLE_MIN_GAP_S after the last one did.
        sample = (slow or (regular and entered - probe._cpu_sampled_at >= CPU_SAMPLE_MIN_GAP_S)
                  ) and probe._primed
        if sample:
            before = cpu_clock()
            thread_before = probe._thread_cpu_clock()
        try:
            batch = next(self._iterator)
        except BaseException as exc:
            self._close_gap(self._skip_len, entered)
            self._on_raise(entered, exc)
            raise
        left = clock()
        if sample:
            after = cpu_clock()
            thread_after = probe._thread_cpu_clock()
            cpu[4] += thread_after - thread_before
            cpu[0] += left - entered
            cpu[1] += after - before
            self._cpu_mark = (left, after, thread_after)
        hot = self._hot
        if regular and not probe._primed:
            hot[0] = 1  # the run's first batch: the next one is the first sample
        elif regular and not sample:
            # a fast loop: the next regular call, no step to close
            self._open_block(CPU_SAMPLE_EVERY - 1, in_gap)
        elif regular:
            probe._cpu_sampled_at = entered
            self._sample_due = False
            self._regular_in = CPU_SAMPLE_EVERY - 1
            self._skip_next = in_gap
            hot[0] = 1  # the next call closes the compute sample
        elif slow:
            # Every call is full while the loop stays slow; the regular sample (fold,
            # periodic) still comes one batch in CPU_SAMPLE_EVERY.
            self._regular_in -= 1
            self._sample_due = self._regular_in <= 0
            hot[0] = 1
        else:
            self._sample_due = True
            self._open_block(CPU_SAMPLE_EVERY - 2, self._skip_next)
            self._skip_next = False
        if in_gap:
            self._skip_len += 1
        else:
            marks.append(entered)
            marks.append(left)
        if self._raised:
            self._raised = False
            epoch.ended = "running"  # the error did not end the epoch after all
        if not probe._primed:
            probe._first_batch(batch)
            hot[4] = None if epoch.fixed is not None else probe._count_samples
            hot[5] = probe._count_tokens
        count = hot[4]
        if count is not None:
            if in_gap:
                hot[6] += count(batch)
            else:
                epoch.sizes.append(count(batch))
        tokens = hot[5]
        if tokens is not None:
            probe.tokens = (probe.tokens or 0) + tokens(batch)
        return batch

    def _skip_block(self, entered: float) -> bool:
        """At a regular call (the start of a block of :data:`CPU_SAMPLE_EVERY` calls): whether
        the rest of the block skips timing (:data:`SPARSE_BELOW_S`). Only once the run has
        :data:`SPARSE_AFTER_BATCHES` batches, from an epoch's second block, while the last
        block's mean time per batch is under :data:`SPARSE_BELOW_S`, and for all but one
        block in :data:`SPARSE_TIMED_EVERY` drawn at random."""
        started = self._block_entered
        self._block_entered = entered
        if not self._sparse or started is None:
            return False
        epoch = self._epoch
        if epoch.base_index + epoch.batches + epoch.buffered() < SPARSE_AFTER_BATCHES:
            return False
        if entered - started >= SPARSE_BELOW_S * CPU_SAMPLE_EVERY:
            return False
        if self._probe._sparse_draw() * SPARSE_TIMED_EVERY >= 1.0:
            return True
        self._drawn = True
        return False

    def _pool_block(self, now: float) -> None:
        """Add the block drawn to be timed, which ends now, to the pool the sparse stretches'
        wait is estimated from (the epoch's and the run's): a random sample of the blocks, so
        neither the dense start nor an epoch's first batch weighs in."""
        self._drawn = False
        calls = CPU_SAMPLE_EVERY
        block = self._marks[-2 * calls:]
        if len(block) < 2 * calls or min(block[0::2]) < 0:
            return  # not one whole timed block
        wait = sum(block[1::2]) - sum(block[0::2])
        for pool in (self._epoch.pool, self._probe._pool):
            pool[0] += calls
            pool[1] += wait
            pool[2] += now - block[0]

    def _open_block(self, calls: int, skip: bool) -> None:
        """The next ``calls`` calls take the fast path (timed), or the skip path when
        ``skip``; the call after them is full again."""
        if skip:
            self._skip_len += calls
            self._hot[0] = -calls
        else:
            self._hot[0] = calls + 1

    def _close_gap(self, calls: int, end: float) -> None:
        """Buffer the gap pair of a sparse stretch of ``calls`` batches (0: nothing to
        buffer) that ended at ``end`` (when the next ``next()`` was entered), and end it."""
        self._skip_len = 0
        hot = self._hot
        if calls > 0:
            marks = self._marks
            marks.append(-float(calls))
            marks.append(end)
            if hot[4] is not None:
                self._sizes.append(hot[6])
        hot[6] = 0

    def _on_skip_raise(self, fast: int, exc: BaseException) -> None:
        """The skip-path call that began with ``fast`` (negative) calls left raised: buffer
        the batches skipped before it, then record the raise as any other."""
        entered = self._clock()
        self._close_gap(self._skip_len + fast, entered)
        self._on_raise(entered, exc)

    def _call_periodic(self) -> None:
        periodic = self._periodic
        assert periodic is not None
        try:
            periodic(self._iterator)
        except Exception as exc:  # dropped and reported, never raised into the loop
            self._periodic = None
            handler = self._on_observer_error
            if handler is not None:
                try:
                    handler(getattr(periodic, "__self__", periodic), exc)  # type: ignore[arg-type]
                except Exception:
                    pass

    def _on_raise(self, entered: float, exc: BaseException) -> None:
        self._hot[0] = 0  # the next call takes the full path
        self._block_entered = None  # the cadence is broken: time the next block
        self._skip_next = False
        self._drawn = False
        probe = self._probe
        if isinstance(exc, StopIteration):
            self._done = True
            probe._finish(self._epoch, entered, probe._clock(), "exhausted")
            return
        self._raised = True
        try:
            probe._record_raise(self._epoch, entered, exc)
        except Exception:  # bookkeeping must never replace the user's exception
            pass

    def __del__(self) -> None:
        # Lock-free: may run in any thread (garbage collection), or at interpreter exit.
        try:
            epoch = self._epoch
            if not self._done and epoch.ended == "running":
                now = self._probe._clock()
                if self._skip_len:  # the batches of an open sparse stretch were taken
                    self._close_gap(self._skip_len + min(0, self._hot[0]), now)
                epoch.dropped_at = now
            epoch.released = True  # no more batches: it may be folded once ended
        except BaseException:
            pass


class ObservedEpochIterator(EpochIterator):
    """An :class:`EpochIterator` that also calls its batch observers around each ``next()``
    (:class:`~pipecheck.probes.base.BatchObserver`): before it, and after it with the wait the
    consumer probe measured, or after it raised. Still one iterator between the loop and the
    loader. An observer that raises is dropped and reported (``on_observer_error``); the
    batch, or the loader's exception, passes through unchanged."""

    __slots__ = ()
    _sparse = False  # observers read each call's wait from the marks

    def __init__(self, probe: ConsumerProbe, epoch: _Epoch, iterator: Iterator[Any],
                 observers: tuple[BatchObserver, ...],
                 on_observer_error: Optional[ObserverErrorHandler]) -> None:
        super().__init__(probe, epoch, iterator)
        self._observers = observers
        self._on_observer_error = on_observer_error

    def __next__(self) -> Any:
        for observer in self._observers:
            try:
                observer.before_next()
            except Exception as exc:
                self._drop(observer, exc)
        try:
            batch = EpochIterator.__next__(self)
        except BaseException:
            for observer in self._observers:
                try:
                    observer.after_raise()
                except Exception as exc:
                    self._drop(observer, exc)
            raise
        if self._done:  # past the end: the source's own behaviour, nothing timed
            return batch
        marks = self._marks
        wait_s = marks[-1] - marks[-2]  # this call's entered, left (appended just now)
        for observer in self._observers:
            try:
                observer.after_next(wait_s, batch)
            except Exception as exc:
                self._drop(observer, exc)
        return batch

    def _drop(self, observer: BatchObserver, exc: Exception) -> None:
        self._observers = tuple(o for o in self._observers if o is not observer)
        handler = self._on_observer_error
        if handler is not None:
            try:
                handler(observer, exc)
            except Exception:  # bookkeeping must never reach the training loop
                pass


_OWN_NAMES = frozenset(EpochIterator.__slots__)
