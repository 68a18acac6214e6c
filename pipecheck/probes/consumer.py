"""Consumer timing: wait inside ``next()`` vs compute between batches, per batch, in the main
process, by timing around the real iterator (no patching of torch).

Memory is bounded whatever the run length: exact counters for the whole run, plus a timeline of
at most ``timeline_capacity`` batches kept evenly spaced (every ``stride``-th batch; the stride
doubles each time the buffer fills), plus one small record per epoch.

The hot path per batch is two clock reads, two appends to a typed array and, unless the batch
sizes are known up front (``FixedBatches``), a sample count (about 1 us in all;
``benchmarks/overhead.py``). Every ``FOLD_BATCHES`` batches the arrays are folded
with numpy into the counters and the timeline, so they never grow past that. One batch in
``CPU_SAMPLE_EVERY`` also reads the main process's CPU clock (``time.process_time``, about 1 us
on Linux) to estimate how many cores the main process uses while waiting and while computing.
It is the process clock, not the thread's, because a training step runs on torch's intra-op
threads too (the demo's main process averaged 1.5 cores with torch's 2 threads).
"""

from __future__ import annotations

import threading
import time
from array import array
from typing import Any, Iterable, Iterator, NamedTuple, Optional

import numpy as np

from .._clock import Clock, monotonic
from .._locks import bounded
from ..records import BatchTiming, ConsumerRecord, EpochTiming
from .batches import (SampleCounter, TokenCounter, batch_nbytes, count_samples, counter_for,
                      token_counter_for)

CPU_SAMPLE_EVERY = 64
"""Read the process CPU clock on one batch in this many (dividing ``FOLD_BATCHES``, so a fold
always falls on a sampled batch)."""

_PLAIN_BATCHES = range(CPU_SAMPLE_EVERY - 1)  # the unsampled batches between two sampled ones

FOLD_BATCHES = 4096
"""Batches buffered (16 bytes of timestamps and 8 of sample count each) before folding."""

DEFAULT_TIMELINE_CAPACITY = 8192
"""Timeline rows kept (about 100 bytes each: under 1 MB)."""


def _describe(exc: BaseException) -> str:
    """One line: the exception type and first message line; for torch's re-raised worker
    errors ("Caught ValueError in DataLoader worker process 0." + traceback) also the last
    line, which holds the original message."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    name = type(exc).__name__
    if not lines:
        return name
    text = lines[0]
    if len(lines) > 1 and lines[-1] != lines[0]:
        text = f"{text} {lines[-1]}"
    return f"{name}: {text}"


class FixedBatches(NamedTuple):
    """Batch sizes known without looking at batches: torch's ``BatchSampler`` with
    ``default_collate`` yields ``batch_size`` samples per batch except the epoch's last, and
    ``samples_per_epoch`` in all (``len(sampler)``, rounded down to whole batches with
    ``drop_last``). Counting from it saves about 0.6 us per batch."""

    batch_size: int
    samples_per_epoch: int


class _Chunk:
    """Derived figures of a run of buffered batches (see :meth:`_Epoch.chunk`)."""

    __slots__ = ("entered", "waits", "computes", "sizes", "last_left")

    def __init__(self, marks: array, sizes: array, next_entered: Optional[float],
                 fixed: Optional[FixedBatches], samples_before: int) -> None:
        # Slicing copies under the GIL in one step; a numpy view of the live array would block
        # the generator's appends (BufferError) if another thread took this snapshot.
        if fixed is None:
            n = min(len(sizes), len(marks) // 2)
            self.sizes = np.array(sizes[:n], dtype=np.int64)
        else:
            n = len(marks) // 2
            full = np.full(n, fixed.batch_size, dtype=np.int64)
            room = fixed.samples_per_epoch - samples_before - (np.cumsum(full) - full)
            self.sizes = np.clip(room, 0, full)
        times = np.array(marks[: 2 * n], dtype=np.float64)
        self.entered = times[0::2]
        left = times[1::2]
        self.waits = left - self.entered
        # compute of batch i: from its hand-over to the next next() call; unknown for the last
        # batch until that call happens (NaN)
        self.computes = np.full(n, np.nan)
        if n:
            self.computes[:-1] = self.entered[1:] - left[:-1]
            if next_entered is not None:
                self.computes[-1] = next_entered - left[-1]
        self.last_left = float(left[-1]) if n else None


class _Epoch:
    """One pass: folded counters plus the batches buffered since the last fold."""

    __slots__ = ("epoch", "started", "base_index", "batches", "samples", "wait", "compute",
                 "last", "first", "ended", "marks", "sizes", "fixed", "last_wait")

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

    def chunk(self, next_entered: Optional[float]) -> _Chunk:
        return _Chunk(self.marks, self.sizes, next_entered, self.fixed, self.samples)

    def buffered(self) -> int:
        return len(self.marks) // 2


class ConsumerProbe:
    """Times every batch the consumer takes from an iterable.

    ``iterate(source)`` returns a generator over ``source`` that yields the same objects in the
    same order and re-raises whatever ``source`` raises, unchanged. Each call is one epoch.
    ``snapshot()`` returns a :class:`~pipecheck.records.ConsumerRecord` at any time (during an
    epoch too), with times relative to ``run_start`` (seconds from ``clock``).

    ``samples`` / ``tokens``: optional callables ``batch -> int``; by default samples are read
    from the batch's structure (:func:`~pipecheck.probes.batches.count_samples`) and tokens are
    counted when batches are mappings with ``input_ids``.
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
    ) -> None:
        if timeline_capacity < 2:
            raise ValueError(f"timeline_capacity must be >= 2, got {timeline_capacity}")
        self._clock = clock
        self._cpu_clock = cpu_clock or time.process_time
        self._run_start = run_start
        # Sample/token counters are specialised on the first batch (see _first_batch).
        self._user_samples = samples
        self._count_samples: SampleCounter = count_samples
        self._user_tokens = tokens
        self._count_tokens: Optional[TokenCounter] = None
        self._primed = False
        self._lock = threading.Lock()  # folds vs a concurrent snapshot()
        self._last: Optional[ConsumerRecord] = None  # for a snapshot whose lock wait timed out
        self._terminated = False
        self._capacity = timeline_capacity
        self._stride = 1
        self._rows: list[tuple] = []
        self._epochs: list[_Epoch] = []
        self.tokens: Optional[int] = None
        self.batch_bytes: Optional[int] = None
        self._cpu = [0.0, 0.0, 0.0, 0.0]  # wait wall, wait cpu, compute wall, compute cpu
        self._error: Optional[str] = None
        self._interrupted = False

    # -- hot path ------------------------------------------------------------------------------

    def iterate(self, source: Iterable[Any],
                fixed: Optional[FixedBatches] = None) -> Iterator[Any]:
        """One epoch over ``source`` (a generator; nothing runs until the first ``next()``).
        ``fixed``: batch sizes known up front (ignored when a ``samples`` counter was given)."""
        clock = self._clock
        cpu_clock = self._cpu_clock
        cpu = self._cpu
        if self._user_samples is not None:
            fixed = None
        with self._lock:
            base = sum(e.batches + e.buffered() for e in self._epochs)
            epoch = _Epoch(len(self._epochs), clock(), base, fixed)
            self._epochs.append(epoch)
        marks = epoch.marks
        add_mark = marks.append
        add_size = epoch.sizes.append
        count = None if fixed is not None else self._count_samples
        tokens = self._count_tokens
        left = entered = epoch.started  # iter() (worker start-up) is part of the first wait
        try:
            iterator = iter(source)
            while True:
                # One sampled batch (process CPU clock; fold when the buffer is full) ...
                if len(marks) >> 1 == FOLD_BATCHES:
                    self._fold(epoch, entered)
                before = cpu_clock()
                batch = next(iterator)
                left = clock()
                cpu_mark = cpu_clock()
                cpu[0] += left - entered
                cpu[1] += cpu_mark - before
                add_mark(entered)
                add_mark(left)
                if not self._primed:
                    self._first_batch(batch)
                if count is not None:
                    count = self._count_samples  # specialised by the run's first batch
                    add_size(count(batch))
                tokens = self._count_tokens
                if tokens is not None:
                    self.tokens = (self.tokens or 0) + int(tokens(batch))
                yield batch
                entered = clock()
                cpu[2] += entered - left
                cpu[3] += cpu_clock() - cpu_mark
                # ... then the plain ones: nothing on this path but what each batch needs.
                if count is None and tokens is None:  # batch sizes known up front
                    for _ in _PLAIN_BATCHES:
                        batch = next(iterator)
                        left = clock()
                        add_mark(entered)
                        add_mark(left)
                        yield batch
                        entered = clock()
                    continue
                for _ in _PLAIN_BATCHES:
                    batch = next(iterator)
                    left = clock()
                    add_mark(entered)
                    add_mark(left)
                    if count is not None:
                        add_size(count(batch))
                    if tokens is not None:
                        self.tokens = (self.tokens or 0) + int(tokens(batch))
                    yield batch
                    entered = clock()
        except StopIteration:
            # The final next() (end-of-epoch tail, worker shutdown) is waiting too.
            self._finish(epoch, entered, clock(), "exhausted")
        except GeneratorExit:
            # The consumer dropped the iterator (``break``): the last step ran until now.
            now = clock()
            self._finish(epoch, now, now, "break")
            raise
        except KeyboardInterrupt:
            self._interrupted = True
            self._finish(epoch, entered, clock(), "interrupted")
            raise
        except BaseException as exc:
            self._error = _describe(exc)
            self._finish(epoch, entered, clock(), "error")
            raise

    def _first_batch(self, batch: Any) -> None:
        """Picks the sample and token counters for the rest of the run from its first batch."""
        self._primed = True
        self.batch_bytes = batch_nbytes(batch)  # once a run: for the /dev/shm headroom check
        self._count_samples = self._user_samples or counter_for(batch)
        self._count_tokens = self._user_tokens or token_counter_for(batch)

    # -- folding -------------------------------------------------------------------------------

    def _fold(self, epoch: _Epoch, next_entered: float) -> None:
        """Move the buffered batches into the counters and the timeline."""
        with self._lock:
            chunk = epoch.chunk(next_entered)
            rows = self._rows_of(epoch, chunk)
            n = len(chunk.sizes)
            if n:
                if epoch.first is None and epoch.batches == 0:
                    epoch.first = float(chunk.waits[0])
                epoch.batches += n
                epoch.samples += int(chunk.sizes.sum())
                epoch.wait += float(chunk.waits.sum())
                epoch.compute += float(np.nansum(chunk.computes))
                epoch.last = chunk.last_left
            del epoch.sizes[:]
            del epoch.marks[:]
            self._rows.extend(rows)
            while len(self._rows) >= self._capacity:
                self._stride *= 2
                self._rows = [r for r in self._rows if r[0] % self._stride == 0]

    def _rows_of(self, epoch: _Epoch, chunk: _Chunk) -> list[tuple]:
        """Timeline rows (every ``stride``-th run-wide batch index) of a chunk."""
        first = epoch.base_index + epoch.batches
        offset = (-first) % self._stride
        picked = slice(offset, None, self._stride)
        computes = [None if c != c else c for c in chunk.computes[picked].tolist()]  # NaN: None
        starts = (chunk.entered[picked] - self._run_start).tolist()
        indices = range(first + offset, first + len(chunk.sizes), self._stride)
        return list(zip(indices, [epoch.epoch] * len(starts), starts,
                        chunk.waits[picked].tolist(), computes, chunk.sizes[picked].tolist()))

    def _finish(self, epoch: _Epoch, last_entered: float, end: float, how: str) -> None:
        """Close an epoch: fold what is buffered (the last batch's step ran until
        ``last_entered``) and count ``end - last_entered`` as wait (the final ``next()``)."""
        self._fold(epoch, last_entered)
        epoch.wait += max(0.0, end - last_entered) if how != "break" else 0.0
        if how == "exhausted":
            epoch.last_wait = max(0.0, end - last_entered)
        epoch.last = end
        epoch.ended = how

    # -- reading -------------------------------------------------------------------------------

    def snapshot(self) -> ConsumerRecord:
        """A consistent copy of everything measured so far (buffered batches included). When
        the lock is not free within :data:`~pipecheck._locks.SNAPSHOT_LOCK_TIMEOUT_S` (its
        holder was stopped by a signal whose handler is saving the report), the previous
        snapshot, or without one the data as the stopped holder left it."""
        with bounded(self._lock) as held:
            if not held and self._last is not None:  # holder stopped by a signal: last copy
                return self._last
            rows = list(self._rows)
            stride = self._stride
            epoch_records = []
            for e in self._epochs:
                chunk = e.chunk(None)
                rows.extend(self._rows_of(e, chunk))
                n = len(chunk.sizes)
                first = e.first
                if first is None and e.batches == 0 and n:
                    first = float(chunk.waits[0])
                last = chunk.last_left if (n and e.ended == "running") else e.last
                epoch_records.append(EpochTiming(
                    epoch=e.epoch, started_at_s=e.started - self._run_start,
                    batches=e.batches + n, samples=e.samples + int(chunk.sizes.sum()),
                    wait_s=e.wait + float(chunk.waits.sum()),
                    compute_s=e.compute + float(np.nansum(chunk.computes)),
                    wall_s=max(0.0, last - e.started), first_batch_s=first, ended=e.ended,
                    last_wait_s=e.last_wait))
        rows.sort()
        timeline = [BatchTiming(index=r[0], epoch=r[1], start_at_s=r[2], wait_s=r[3],
                                compute_s=r[4], samples=r[5]) for r in rows]
        self._last = ConsumerRecord(
            batches=sum(e.batches for e in epoch_records),
            samples=sum(e.samples for e in epoch_records),
            tokens=self.tokens,
            wait_s=sum(e.wait_s for e in epoch_records),
            compute_s=sum(e.compute_s for e in epoch_records),
            wall_s=sum(e.wall_s for e in epoch_records),
            epochs=epoch_records,
            timeline=timeline,
            timeline_stride=stride,
            status=self._status(epoch_records),
            error=self._error,
            sampled_wait_wall_s=self._cpu[0],
            sampled_wait_cpu_s=self._cpu[1],
            sampled_compute_wall_s=self._cpu[2],
            sampled_compute_cpu_s=self._cpu[3],
            batch_bytes=self.batch_bytes,
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
        if status == "error" and exc is not None and self._error is None:
            self._error = _describe(exc)
        elif status == "interrupted":
            self._interrupted = True
        elif status == "terminated":
            self._terminated = True

    def _status(self, epochs: list[EpochTiming]) -> str:
        if self._error is not None:
            return "error"
        if self._interrupted:
            return "interrupted"
        if self._terminated:
            return "terminated"
        if not epochs:
            return "not-started"
        if any(e.ended == "running" for e in epochs):
            return "in-progress"
        return "complete"
