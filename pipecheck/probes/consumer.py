"""Consumer timing: wait inside ``next()`` vs compute between batches, per batch, in the main
process, by timing around the real iterator (no patching of torch).

Memory is bounded whatever the run length: exact counters for the whole run, plus a timeline of
at most ``timeline_capacity`` batches kept evenly spaced (every ``stride``-th batch; the stride
doubles each time the buffer fills), plus one small record per epoch.

The hot path per batch is two clock reads, a sample count and a few additions. One batch in
``CPU_SAMPLE_EVERY`` also reads the main process's CPU clock (``time.process_time``, about 1 us
on Linux) to estimate how many cores the main process uses while waiting and while computing.
It is the process clock, not the thread's, because a training step runs on torch's intra-op
threads too (measured on the demo: 1.6 cores of CPU per wall second with 2 threads).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterable, Iterator, Optional

from .._clock import Clock, monotonic
from ..records import BatchTiming, ConsumerRecord, EpochTiming
from .batches import SampleCounter, TokenCounter, counter_for, token_counter_for

CPU_SAMPLE_EVERY = 8
"""Read the process CPU clock on one batch in this many (a power of two)."""
_CPU_SAMPLE_MASK = CPU_SAMPLE_EVERY - 1

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


class _Epoch:
    __slots__ = ("epoch", "started", "batches", "samples", "wait", "compute", "last", "first",
                 "ended")

    def __init__(self, epoch: int, started: float) -> None:
        self.epoch = epoch
        self.started = started
        self.batches = 0
        self.samples = 0
        self.wait = 0.0
        self.compute = 0.0
        self.last = started
        self.first: Optional[float] = None
        self.ended = "running"


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
        self._count_samples: SampleCounter = self._first_batch
        self._user_tokens = tokens
        self._count_tokens: Optional[TokenCounter] = None
        self._lock = threading.Lock()  # guards the lists against a concurrent snapshot()
        self._capacity = timeline_capacity
        self._stride = 1
        self._rows: list[list[Any]] = []
        self._epochs: list[_Epoch] = []
        self.batches = 0
        self.tokens: Optional[int] = None
        self._cpu = [0.0, 0.0, 0.0, 0.0]  # wait wall, wait cpu, compute wall, compute cpu
        self._error: Optional[str] = None
        self._interrupted = False

    # -- hot path ------------------------------------------------------------------------------

    def iterate(self, source: Iterable[Any]) -> Iterator[Any]:
        """One epoch over ``source`` (a generator; nothing runs until the first ``next()``)."""
        clock = self._clock
        cpu_clock = self._cpu_clock
        cpu = self._cpu
        epoch = _Epoch(len(self._epochs), clock())
        with self._lock:
            self._epochs.append(epoch)
        row: Optional[list[Any]] = None  # timeline row awaiting its compute time
        exit_at: Optional[float] = None  # when the last batch was handed to the consumer
        cpu_mark: Optional[float] = None  # process CPU clock at that hand-over, when sampled
        entered = epoch.started  # iter() (worker start-up) is part of the first wait
        try:
            iterator = iter(source)
            while True:
                if exit_at is not None:
                    entered = clock()
                    compute = entered - exit_at
                    epoch.compute += compute
                    if row is not None:
                        row[4] = compute
                    if cpu_mark is not None:
                        cpu[2] += compute
                        cpu[3] += cpu_clock() - cpu_mark
                index = self.batches
                if index & _CPU_SAMPLE_MASK:
                    try:
                        batch = next(iterator)
                    except StopIteration:
                        break
                    left = clock()
                    cpu_mark = None
                else:
                    cpu_before = cpu_clock()
                    try:
                        batch = next(iterator)
                    except StopIteration:
                        break
                    left = clock()
                    cpu_mark = cpu_clock()
                    cpu[0] += left - entered
                    cpu[1] += cpu_mark - cpu_before
                wait = left - entered
                samples = self._count_samples(batch)
                if self._count_tokens is not None:
                    self._add_tokens(batch)
                self.batches = index + 1
                epoch.wait += wait
                epoch.batches += 1
                epoch.samples += samples
                epoch.last = exit_at = left
                if epoch.first is None:
                    epoch.first = wait
                row = None if index % self._stride else self._record(
                    index, epoch.epoch, entered, wait, samples)
                yield batch
            # StopIteration: the final next() (end-of-epoch tail, worker shutdown) waits too.
            left = clock()
            epoch.wait += left - entered
            epoch.last = left
            epoch.ended = "exhausted"
        except GeneratorExit:
            # The consumer dropped the iterator (``break``): the last step ran until now.
            now = clock()
            if exit_at is not None:
                epoch.compute += now - exit_at
                if row is not None:
                    row[4] = now - exit_at
            epoch.last = now
            epoch.ended = "break"
            raise
        except KeyboardInterrupt:
            epoch.last = clock()
            epoch.ended = "interrupted"
            self._interrupted = True
            raise
        except BaseException as exc:
            epoch.last = clock()
            epoch.ended = "error"
            self._error = _describe(exc)
            raise

    def _first_batch(self, batch: Any) -> int:
        """Counts the first batch and picks the counters for the rest of the run."""
        self._count_samples = self._user_samples or counter_for(batch)
        self._count_tokens = self._user_tokens or token_counter_for(batch)
        return self._count_samples(batch)

    def _add_tokens(self, batch: Any) -> None:
        assert self._count_tokens is not None
        self.tokens = (self.tokens or 0) + int(self._count_tokens(batch))

    def _record(self, index: int, epoch: int, entered: float, wait: float,
                samples: int) -> list[Any]:
        row = [index, epoch, entered - self._run_start, wait, None, samples]
        with self._lock:
            self._rows.append(row)
            if len(self._rows) >= self._capacity:
                self._stride *= 2
                self._rows = [r for r in self._rows if r[0] % self._stride == 0]
        return row

    # -- reading -------------------------------------------------------------------------------

    def snapshot(self) -> ConsumerRecord:
        """A consistent copy of everything measured so far."""
        with self._lock:
            rows = [list(r) for r in self._rows]
            epochs = list(self._epochs)
            stride = self._stride
        timeline = [BatchTiming(index=r[0], epoch=r[1], start_at_s=r[2], wait_s=r[3],
                                compute_s=r[4], samples=r[5]) for r in rows]
        epoch_records = [
            EpochTiming(epoch=e.epoch, started_at_s=e.started - self._run_start,
                        batches=e.batches, samples=e.samples, wait_s=e.wait,
                        compute_s=e.compute, wall_s=max(0.0, e.last - e.started),
                        first_batch_s=e.first, ended=e.ended)
            for e in epochs
        ]
        return ConsumerRecord(
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
        )

    def _status(self, epochs: list[EpochTiming]) -> str:
        if self._error is not None:
            return "error"
        if self._interrupted:
            return "interrupted"
        if not epochs:
            return "not-started"
        if any(e.ended == "running" for e in epochs):
            return "in-progress"
        return "complete"
