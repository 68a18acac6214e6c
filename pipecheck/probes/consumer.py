"""Consumer timing: wait inside ``next()`` vs compute between batches, per batch, in the main
process, by timing around the real iterator (no patching of torch).

How it works, and why: docs/internals.md (``pipecheck/probes/consumer.py``).
"""

from __future__ import annotations

import math
import threading
import time
from array import array
from collections import deque
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import numpy as np

from .._clock import Clock, monotonic
from ..errors import one_line
from .._locks import bounded
from ..kinds import (COMPLETE, ERROR, IN_PROGRESS, INTERRUPTED, NOT_STARTED, TERMINATED,
                     ConsumerStatus)
from ..records import BatchTiming, ConsumerRecord, EpochTiming, FoldedEpochs
from .base import BatchObserver
from .batches import SampleCounter, TokenCounter, batch_storage, counter_for, guarded, \
    token_counter_for
from .consumer_epochs import ConsumerState, EpochChunk, FixedBatches, FoldedSums, OpenEpoch
from .consumer_iterator import EpochIterator, ObservedEpochIterator, ObserverErrorHandler

SMALL_FOLD_BATCHES = 64
"""Buffered batches up to which a fold (an epoch's end, mostly) is worked out in plain Python
rather than numpy, when no sparse stretch is among them: numpy's fixed cost per fold would
otherwise be paid by every short epoch. pipecheck's choice
(docs/decisions.md#small_fold_batches)."""

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

DEFAULT_TIMELINE_CAPACITY = 8192
"""Timeline rows kept (about 100 bytes each: under 1 MB)."""



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
        # An injected process clock stands for the thread's too unless one is given (tests).
        self.state = ConsumerState(clock, cpu_clock or time.process_time,
                                   thread_cpu_clock or cpu_clock or time.thread_time)
        self._run_start = run_start
        # Sample/token counters are specialised on the first batch (see first_batch).
        self._user_samples = samples
        self._user_tokens = tokens
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
        self._first_epochs: list[OpenEpoch] = []
        self._last_epochs: deque[OpenEpoch] = deque()
        self._pinned: Optional[OpenEpoch] = None
        self._first_started_listed = False  # one of _first_epochs delivered a batch
        self._open: dict[int, OpenEpoch] = {}
        self._folded = FoldedSums()
        self._batches_folded = 0  # batches folded, every epoch's: the next epoch's first index
        self.batch_bytes: Optional[int] = None
        self.batch_tensors: Optional[int] = None
        self._error: Optional[str] = None
        self.errors = 0  # next() calls that raised
        self._failed = False  # the run ended by an uncaught exception (mark_ended)
        self._interrupted = False
        self.sigterms_continued = 0  # SIGTERMs the program handled and went on after

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
            self.record_raise(epoch, epoch.started, exc)
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

    def _begin_epoch(self, fixed: Optional[FixedBatches]) -> OpenEpoch:
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
            epoch = OpenEpoch(self._epoch_count, self._clock(), base, fixed)
            self._epoch_count += 1
            epoch.run_pool = self.state.pool
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

    def _retire(self, epoch: OpenEpoch) -> None:
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

    def _listed(self) -> list[OpenEpoch]:
        """The epochs listed one by one, in epoch order. Caller holds the lock (or its wait
        timed out: a snapshot of lists a stopped holder may have been changing)."""
        between = [e for e in list(self._open.values()) if e.evicted]
        if self._pinned is not None:
            between.append(self._pinned)
        between.sort(key=lambda e: e.epoch)
        return self._first_epochs + between + list(self._last_epochs)

    def record_raise(self, epoch: OpenEpoch, entered: float, exc: BaseException) -> None:
        """A ``next()`` that began at ``entered`` raised ``exc``: its time is waiting that
        gave no batch, and the epoch stays open (the same iterator may go on, as torch's
        does); it reads as ended by the error until a later ``next()`` returns a batch."""
        end = self._clock()
        self.errors += 1
        if isinstance(exc, KeyboardInterrupt):
            self._interrupted = True
            self.finish(epoch, entered, end, "interrupted")
        else:
            self._error = one_line(exc)
            self.finish(epoch, entered, end, "error")

    def first_batch(self, batch: Any) -> None:
        """Picks the sample and token counters for the rest of the run from its first batch.
        The user's counters are guarded (:func:`~pipecheck.probes.batches.guarded`): a batch
        they cannot read counts as one sample and no tokens, never an exception."""
        self.state.primed = True
        # Once a run: for the /dev/shm headroom check and the hand-over estimate.
        self.batch_bytes, self.batch_tensors = batch_storage(batch)
        self.state.count_samples = (guarded(self._user_samples, 1) if self._user_samples
                               else counter_for(batch))
        try:
            self.state.count_tokens = (guarded(self._user_tokens, 0) if self._user_tokens
                                  else token_counter_for(batch))
        except Exception:  # a mapping that raises on lookup: no token count
            self.state.count_tokens = None

    # -- folding -------------------------------------------------------------------------------

    def fold(self, epoch: OpenEpoch, next_entered: float) -> None:
        """Move the buffered batches into the counters and the timeline."""
        with self._lock:
            self._fold_locked(epoch, next_entered)

    def _fold_locked(self, epoch: OpenEpoch, next_entered: float) -> None:
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

    def _fold_small(self, epoch: OpenEpoch, next_entered: Optional[float]) -> None:
        """:meth:`_fold_locked` for at most :data:`SMALL_FOLD_BATCHES` buffered batches, all
        timed (no sparse stretch among them), in plain Python: the figures of a
        :class:`EpochChunk`, without numpy's fixed cost per fold. Timeline rows go to a flat
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

    def _fold_one(self, epoch: OpenEpoch, next_entered: Optional[float]) -> None:
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

    def _rows_of(self, epoch: OpenEpoch, chunk: EpochChunk) -> np.ndarray:
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

    def finish(self, epoch: OpenEpoch, last_entered: float, end: float, how: str) -> None:
        """Close an epoch: fold what is buffered (the last batch's step ran until
        ``last_entered``) and count ``end - last_entered`` as wait (the final ``next()``)."""
        with self._lock:
            self._finish_locked(epoch, last_entered, end, how)

    def _finish_locked(self, epoch: OpenEpoch, last_entered: float, end: float, how: str) -> None:
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
        cpu = self.state.cpu
        self._last = ConsumerRecord(
            batches=folded_epochs.batches + sum(e.batches for e in epoch_records),
            samples=folded_epochs.samples + sum(e.samples for e in epoch_records),
            tokens=self.state.tokens,
            wait_s=folded_epochs.wait_s + sum(e.wait_s for e in epoch_records),
            compute_s=folded_epochs.compute_s + sum(e.compute_s for e in epoch_records),
            wall_s=folded_epochs.wall_s + sum(e.wall_s for e in epoch_records),
            epochs=epoch_records,
            timeline=timeline,
            timeline_stride=stride,
            status=self._status(epoch_records, folded_epochs),
            error=self._error,
            errors=self.errors,
            sampled_wait_wall_s=cpu.wait_wall_s,
            sampled_wait_cpu_s=cpu.wait_cpu_s,
            sampled_compute_wall_s=cpu.compute_wall_s,
            sampled_compute_cpu_s=cpu.compute_cpu_s,
            sampled_wait_thread_cpu_s=cpu.wait_thread_cpu_s,
            sampled_compute_thread_cpu_s=cpu.compute_thread_cpu_s,
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
