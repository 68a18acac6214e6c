"""The iterator of one epoch between the training loop and the loader: yields the source's
batches unchanged, timing each ``next()`` (wait) and the gap before the next call (compute)
into the epoch's buffer (:class:`~pipecheck.probes.consumer_epochs.OpenEpoch`), and calls the
batch observers. The :class:`~pipecheck.probes.consumer.ConsumerProbe` that opened it folds
and reads what it buffered.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

from .base import BatchObserver
from .consumer_epochs import CPU_SAMPLE_EVERY, FOLD_BATCHES, EpochOwner, OpenEpoch

SLOW_BATCH_S = 0.005
"""Seconds between two ``next()`` calls from which every batch's CPU is sampled, not one in
:data:`CPU_SAMPLE_EVERY`, so that a short run of slow batches gets its steady steps sampled.
pipecheck's choice (docs/decisions.md#slow_batch_s)."""

CPU_SAMPLE_MIN_GAP_S = 0.02
"""Least wall time in seconds from one regular CPU sample to the next, in the whole run (a new
epoch's first call waits for it too: a loop of one-batch epochs would otherwise read the CPU
clocks six times an epoch): in a loop so fast that :data:`CPU_SAMPLE_EVERY` batches take less,
the regular call in between only folds and calls ``periodic``, and reads no CPU clock. At most 50
CPU samples a second. pipecheck's choice (docs/decisions.md#cpu_sample_min_gap_s)."""

SPARSE_BELOW_S = 100e-6
"""Mean seconds per batch (over the last block of :data:`CPU_SAMPLE_EVERY` calls) below which the
loop is timed in sparse blocks: each block after :data:`SPARSE_AFTER_BATCHES` is timed batch by
batch with probability 1 / :data:`SPARSE_TIMED_EVERY` (a seeded draw, so a period in the data
cannot alias with the cadence); the others' batches are passed on with no clock read (the block's
first call still folds, calls ``periodic`` and may sample the CPU), and their wait is estimated
from the drawn blocks' share of wait (``EpochChunk``). pipecheck's choice
(docs/decisions.md#sparse_below_s)."""

SPARSE_AFTER_BATCHES = 1024
"""Batches of the run timed one by one before sparse blocks may start (the warm-up, the
quantiles and the steady-state test have them all), and each epoch's first block is timed."""

SPARSE_TIMED_EVERY = 8
"""In a sparse stretch, one block in this many (on average) is timed batch by batch; the
estimate's standard error is then about 1 / sqrt(timed batches) of the wait's spread. pipecheck's
choice (docs/decisions.md#sparse_timed_every)."""

ObserverErrorHandler = Callable[[BatchObserver, Exception], None]
"""``(observer, exc)``: told when a batch observer raised and was dropped."""


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

    __slots__ = ("_owner", "_state", "_epoch", "_iterator", "_clock", "_marks", "_sizes", "_hot",
                 "_sample_due", "_regular_in", "_pending", "_done",
                 "_raised", "_cpu_mark", "_skip_len", "_skip_next", "_block_entered", "_drawn",
                 "_observers", "_on_observer_error", "_periodic", "__weakref__")

    _sparse = True  # whether fast loops may skip timing (not when observers read each wait)

    def __init__(self, owner: EpochOwner, epoch: OpenEpoch, iterator: Iterator[Any]) -> None:
        # Made by ConsumerProbe.open_epoch, which opens ``iterator`` (its time is part of the
        # first wait: ``_pending`` is the epoch's start).
        self._owner = owner
        self._state = state = owner.state
        self._epoch = epoch
        self._iterator = iterator
        self._clock = state.clock
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
                                None if epoch.fixed is not None else state.count_samples,
                                state.count_tokens, 0]
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
                state = self._state
                state.tokens = (state.tokens or 0) + tokens(batch)
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
            state = self._state
            state.tokens = (state.tokens or 0) + tokens(batch)
        return batch

    def _next_full(self) -> Any:
        if self._done:
            return next(self._iterator)  # what the source does after its end
        state = self._state
        clock = self._clock
        entered = self._pending
        if entered is None:
            entered = clock()
        else:
            self._pending = None
        epoch = self._epoch
        cpu = state.cpu
        cpu_clock = state.cpu_clock
        if self._cpu_mark is not None:  # the step after a sampled batch: its compute share
            left_before, cpu_before, thread_cpu_before = self._cpu_mark
            self._cpu_mark = None
            cpu.compute_wall_s += entered - left_before
            cpu.compute_cpu_s += cpu_clock() - cpu_before
            cpu.compute_thread_cpu_s += state.thread_cpu_clock() - thread_cpu_before
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
                self._owner.fold(epoch, entered)
            if self._periodic is not None:
                self._call_periodic()
        # Not the run's first batch: its wait and step hold start-up and lazy initialisation.
        # A regular call samples the CPU only CPU_SAMPLE_MIN_GAP_S after the last one did.
        sample = (slow or (regular and entered - state.cpu_sampled_at >= CPU_SAMPLE_MIN_GAP_S)
                  ) and state.primed
        if sample:
            before = cpu_clock()
            thread_before = state.thread_cpu_clock()
        try:
            batch = next(self._iterator)
        except BaseException as exc:
            self._close_gap(self._skip_len, entered)
            self._on_raise(entered, exc)
            raise
        left = clock()
        if sample:
            after = cpu_clock()
            thread_after = state.thread_cpu_clock()
            cpu.wait_thread_cpu_s += thread_after - thread_before
            cpu.wait_wall_s += left - entered
            cpu.wait_cpu_s += after - before
            self._cpu_mark = (left, after, thread_after)
        hot = self._hot
        if regular and not state.primed:
            hot[0] = 1  # the run's first batch: the next one is the first sample
        elif regular and not sample:
            # a fast loop: the next regular call, no step to close
            self._open_block(CPU_SAMPLE_EVERY - 1, in_gap)
        elif regular:
            state.cpu_sampled_at = entered
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
        if not state.primed:
            self._owner.first_batch(batch)
            hot[4] = None if epoch.fixed is not None else state.count_samples
            hot[5] = state.count_tokens
        count = hot[4]
        if count is not None:
            if in_gap:
                hot[6] += count(batch)
            else:
                epoch.sizes.append(count(batch))
        tokens = hot[5]
        if tokens is not None:
            state.tokens = (state.tokens or 0) + tokens(batch)
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
        if self._state.sparse_draw() * SPARSE_TIMED_EVERY >= 1.0:
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
        for pool in (self._epoch.pool, self._state.pool):
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
        owner = self._owner
        if isinstance(exc, StopIteration):
            self._done = True
            owner.finish(self._epoch, entered, self._clock(), "exhausted")
            return
        self._raised = True
        try:
            owner.record_raise(self._epoch, entered, exc)
        except Exception:  # bookkeeping must never replace the user's exception
            pass

    def __del__(self) -> None:
        # Lock-free: may run in any thread (garbage collection), or at interpreter exit.
        try:
            epoch = self._epoch
            if not self._done and epoch.ended == "running":
                now = self._clock()
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

    def __init__(self, owner: EpochOwner, epoch: OpenEpoch, iterator: Iterator[Any],
                 observers: tuple[BatchObserver, ...],
                 on_observer_error: Optional[ObserverErrorHandler]) -> None:
        super().__init__(owner, epoch, iterator)
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
