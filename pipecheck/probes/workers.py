"""Per-worker producer timing: how long each DataLoader worker spends fetching and collating.

How it works, and why: docs/internals.md (``pipecheck/probes/workers.py``).
"""

from __future__ import annotations

import dataclasses
import os
import random
import threading
import weakref
from typing import Any, Callable, Optional

import torch.utils.data

from pipecheck import _torch_compat
from pipecheck._locks import bounded
from pipecheck.errors import PipecheckError
from pipecheck.probes import _ring
from pipecheck.records import WorkerBatch, WorkerRecord
from pipecheck.probes.worker_side import (MAIN_PROCESS_WORKER_ID, FirstBatch, InstrumentedCollate,
                                         SharedArea, accumulator_for, accumulators,
                                         register_stage_dataset)

__all__ = ["MAIN_PROCESS_WORKER_ID", "InstrumentedCollate", "WorkerProbe",
           "WorkerProbeUnsupported"]

FAST_BATCH_S = 200e-6
"""Production time per batch (fetch + collate, seconds) under which timing every batch in the
main process (``num_workers=0``, where the training loop pays for it) costs over 1%. Measured
(docs/decisions.md#fast_batch_s)."""

MAIN_SAMPLE_AFTER = 32
"""Batches timed one by one in the main process before it may sample: enough for a mean that
a first slow batch (imports, page cache) does not decide alone."""

MAIN_WINDOW = 4
"""Batches timed in a row in each sampling window of the main process; a window opens at
every call of :meth:`WorkerProbe.between_batches` (the consumer probe makes one every
``CPU_SAMPLE_EVERY`` = 64 batches) until :data:`MAIN_DENSE_TIMED` batches are timed, so fast
batches are timed 4 in 64 at first."""

MAIN_DENSE_TIMED = 256
"""Timed batches after which the main process's windows thin out to one call in
:data:`MAIN_SPARSE_EVERY` (drawn at random so that a period in the data cannot alias with the
window cadence): 256 timed batches give the mean production time to about 6% at a coefficient of
variation of 1 (1/sqrt(256)). pipecheck's choice (docs/decisions.md#main_dense_timed)."""

MAIN_SPARSE_EVERY = 4
"""After :data:`MAIN_DENSE_TIMED` timed batches a call of :meth:`WorkerProbe.between_batches`
opens a window with probability ``1 / MAIN_SPARSE_EVERY``."""


class WorkerProbeUnsupported(PipecheckError):
    """The loader cannot be timed inside without changing what it does (for example a
    persistent-workers iterator it already holds, which torch reuses). Callers fall back to no
    worker probe."""


# ---------------------------------------------------------------------------------------------
# The probe (main process)
# ---------------------------------------------------------------------------------------------


def scaled_to(record: WorkerRecord, batches: int,
              first: Optional[FirstBatch] = None) -> WorkerRecord:
    """``record`` (the main process's, whose timed batches were sampled) scaled to
    ``batches`` produced in all: ``samples``, ``fetch_s``, ``collate_s`` and ``busy_s`` times
    ``batches / record.batches`` (the ratio estimator), ``timed_batches`` set. ``first``, the
    process's first batch (always timed, and holding its lazy initialisation: a 0.3 s first
    fetch scaled 40-fold would swamp 20 us batches), is counted once and the other timed
    batches are scaled to the other ``batches - 1``. ``record`` itself when every batch was
    timed (``batches <= record.batches``) or none was."""
    if record.batches == 0 or batches <= record.batches:
        return record
    if first is None or record.batches < 2:
        scale = batches / record.batches
        return dataclasses.replace(
            record, batches=batches, samples=round(record.samples * scale),
            fetch_s=record.fetch_s * scale, collate_s=record.collate_s * scale,
            busy_s=record.busy_s * scale, timed_batches=record.batches)
    scale = (batches - 1) / (record.batches - 1)
    fetch_s = first.fetch_s + max(record.fetch_s - first.fetch_s, 0.0) * scale
    collate_s = first.collate_s + max(record.collate_s - first.collate_s, 0.0) * scale
    return dataclasses.replace(
        record, batches=batches,
        samples=first.samples + round(max(record.samples - first.samples, 0) * scale),
        fetch_s=fetch_s, collate_s=collate_s, busy_s=fetch_s + collate_s,
        timed_batches=record.batches)


class _FetcherSwap:
    """Switches one epoch's main-process fetcher between the timed fetch with pipecheck's
    collate and torch's own fetch with the user's collate
    (:func:`pipecheck._torch_compat.set_fetcher_timed`). Holds the fetcher weakly: the
    iterator, and the dataset behind it, stay the user's to drop."""

    __slots__ = ("_fetcher", "_instrumented", "_user_collate")

    def __init__(self, fetcher: Any) -> None:
        self._fetcher = weakref.ref(fetcher)
        self._instrumented = fetcher.collate_fn
        self._user_collate = fetcher.collate_fn.collate_fn

    @classmethod
    def of(cls, fetcher: Any) -> Optional[_FetcherSwap]:
        if fetcher is None or type(fetcher.collate_fn) is not InstrumentedCollate:
            return None
        return cls(fetcher)

    def timed(self) -> None:
        fetcher = self._fetcher()
        if fetcher is not None:
            _torch_compat.set_fetcher_timed(fetcher, True, self._instrumented)

    def untimed(self) -> None:
        fetcher = self._fetcher()
        if fetcher is not None:
            _torch_compat.set_fetcher_timed(fetcher, False, self._user_collate)


def _release_area(key: str, area: _ring.Area, owner_pid: int) -> None:
    """Finalizer: stop this process's writer for ``key`` and release the shared memory. Only
    the creating process releases it (a forked child exiting must not pull a named file from
    the workers)."""
    accumulator = accumulators.pop(key, None)
    if accumulator is not None:
        accumulator.disable()
    if os.getpid() != owner_pid:
        return
    area.release()


class WorkerProbe:
    """Per-worker fetch/collate timing for one ``DataLoader``.

    ``num_workers`` must equal the loader's (``>= 0``; 0 means the main process produces,
    reported as worker id -1). ``run_start`` is a :data:`pipecheck._clock.monotonic` reading;
    every ``*_at_s`` in the records is seconds since it. ``ring_size`` (``>= 1``) is how many
    recent batches each worker keeps. The shared memory (:func:`pipecheck.probes._ring
    .create_area`: anonymous, never in ``/dev/shm`` where it can be avoided) is made here,
    before any ``iter()``; raises ``ValueError`` for bad arguments,
    :class:`~pipecheck._torch_compat.IteratorHookUnavailable` when this torch builds no
    fetchers pipecheck can time, and ``OSError`` if the memory cannot be made
    (:class:`~pipecheck.probes._ring.NoSpaceError` when ``/dev/shm`` has no room to spare).
    """

    def __init__(self, num_workers: int, *, run_start: float, ring_size: int = 1024) -> None:
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        _torch_compat.install_fetcher_factory(register_stage_dataset)
        self.num_workers = num_workers
        self.run_start = run_start
        self._layout = _ring.AreaLayout(num_slots=max(1, num_workers), ring_size=ring_size)
        area = _ring.create_area(self._layout)
        self._owner_pid = os.getpid()
        self.path = area.path
        self._area_owner = area
        self._area = area.mapping
        # Unique per live probe in this process and its workers (a memfd path repeats once
        # its descriptor number is reused).
        self._key = f"{os.getpid()}-{id(self)}-{area.device_inode[1]}"
        self._shared = SharedArea(area, self._layout, num_workers)
        self._known_pids: dict[int, int] = {}
        self._last_good: dict[int, _ring.SlotHeader] = {}
        self._stuck_seq: dict[int, int] = {}
        self._final: Optional[list[WorkerRecord]] = None
        self._last_records: list[WorkerRecord] = []  # what a reader gets if the lock is stuck
        # The host probe calls pid_to_worker() from its sampler thread; reads and close()
        # must not interleave (a read of an unmapped area raises).
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _release_area, self._key, area, os.getpid())
        # between_batches: the epoch's iterator it follows (weakly) and its fetcher switch
        self._sampled: Optional[weakref.ref] = None
        self._swap: Optional[_FetcherSwap] = None
        self._first_at_close: Optional[FirstBatch] = None
        # Which sparse-phase calls open a window; seeded, so a run's sampling is repeatable.
        self._window_draw = random.Random(0).random
        self._registered: list[tuple[weakref.ref, Any]] = []  # instrument()'s registrations

    def check_supported(self, loader: torch.utils.data.DataLoader) -> None:
        """Raise unless this probe can time ``loader``: ``ValueError`` if its ``num_workers``
        differs from the probe's or the probe is closed, :class:`WorkerProbeUnsupported` when
        the loader already holds a persistent-workers iterator (built without pipecheck's
        collate; torch reuses it for every later epoch)."""
        if loader.num_workers != self.num_workers:
            raise ValueError(
                f"loader has num_workers={loader.num_workers}, "
                f"probe was made for {self.num_workers}"
            )
        if not self._finalizer.alive:
            raise ValueError("this WorkerProbe is closed")
        if _torch_compat.has_persistent_iterator(loader):
            raise WorkerProbeUnsupported(
                "its persistent workers were started before it was measured (wrap the loader "
                "before its first epoch)")

    def collate(self, collate_fn: Callable[[Any], Any],
                stage_folder: Optional[str] = None) -> InstrumentedCollate:
        """``collate_fn`` timed for this probe (each call inside a timed fetch commits one
        batch), carrying ``stage_folder`` (the stage probe's) into the workers."""
        return InstrumentedCollate(collate_fn, self._key, self._shared, stage_folder)

    def instrument(self, loader: torch.utils.data.DataLoader) -> torch.utils.data.DataLoader:
        """Time every iterator ``loader`` builds from now on with this probe (the loader is
        registered, not copied: :func:`pipecheck._torch_compat.register`) until the probe
        closes; returns ``loader``. For tests and benchmarks: :func:`pipecheck.wrap` registers
        the loader itself, with the stage probe's folder and only while the wrapper iterates.
        Raises as :meth:`check_supported`, and
        :class:`~pipecheck._torch_compat.IteratorHookUnavailable`."""
        self.check_supported(loader)
        substitutes = _torch_compat.register(
            loader, ("collate_fn",), lambda name, value: self.collate(value), always=True)
        self._registered.append((weakref.ref(loader), substitutes))
        return loader

    def between_batches(self, iterator: Any) -> None:
        """Main-process sampling (``num_workers=0``): called between two batches of the epoch
        whose DataLoader iterator is ``iterator``, regularly (the consumer probe calls it every
        ``CPU_SAMPLE_EVERY`` batches, and at each epoch's first). Once
        :data:`MAIN_SAMPLE_AFTER` batches are timed and their mean (the first left out: lazy
        initialisation) is under :data:`FAST_BATCH_S`, each call opens a window of
        :data:`MAIN_WINDOW` timed batches (after :data:`MAIN_DENSE_TIMED` timed batches, one
        call in :data:`MAIN_SPARSE_EVERY` at random) and the batches after it are fetched by
        torch's own fetcher with the user's collate (no pipecheck code runs for those
        batches); in an epoch :meth:`pause` d, every batch is. Does nothing for other
        iterators (workers, an iterable dataset, a loader whose iterator torch does not build
        so), which are timed batch by batch. The caller scales the timed batches to all of
        them (the ratio estimator, see :attr:`~pipecheck.records.WorkerRecord.timed_batches`)."""
        acc = accumulator_for(self._key, self._shared)
        if self._sampled is None or self._sampled() is not iterator:  # a new epoch
            try:
                self._sampled = weakref.ref(iterator)
            except TypeError:  # not weakly referenceable: not a torch iterator
                self._sampled = None
            self._swap = _FetcherSwap.of(_torch_compat.main_process_fetcher(iterator)) \
                if self.num_workers == 0 else None
            acc.window = 0
            acc.close_window = None if self._swap is None else self._swap.untimed
        swap = self._swap
        if swap is None:
            return
        if acc.busy:  # a paused epoch: every batch untimed
            swap.untimed()
        elif (acc.timed >= MAIN_SAMPLE_AFTER
              and acc.timed_busy_s < FAST_BATCH_S * (acc.timed - 1)):
            if acc.timed < MAIN_DENSE_TIMED or self._window_draw() * MAIN_SPARSE_EVERY < 1.0:
                swap.timed()
                acc.window = MAIN_WINDOW

    def first_batch(self) -> Optional[FirstBatch]:
        """The first batch this process committed for this probe (``num_workers=0``: the
        main process's), or ``None`` before one; after :meth:`close`, as it was at close."""
        if self._first_at_close is not None:
            return self._first_at_close
        accumulator = accumulators.get(self._key)
        return None if accumulator is None else accumulator.first

    def main_mean_batch_s(self) -> Optional[float]:
        """Mean fetch + collate seconds of the batches this process committed (the first, which
        holds lazy initialisation, left out once there are others); ``None`` before any. O(1):
        the running totals, not the shared memory (read at every ``iter()``)."""
        acc = accumulators.get(self._key)
        if acc is None or acc.timed == 0:
            return None
        if acc.timed == 1:
            first = acc.first
            return None if first is None else first.fetch_s + first.collate_s
        return acc.timed_busy_s / (acc.timed - 1)

    def pause(self, paused: bool) -> None:
        """Stop (``True``) or resume timing in this process, for ``num_workers=0`` loaders
        whose batches are too fast to time every epoch (the epoch's fetcher is then torch's
        own from its first batch on, :meth:`between_batches`)."""
        accumulator_for(self._key, self._shared).busy = 1 if paused else 0

    name = "workers"

    def start(self) -> None:
        """Nothing to start: the shared file exists from construction."""

    def stop(self) -> None:
        """:meth:`close`."""
        self.close()

    def record(self) -> list[WorkerRecord]:
        """Exact counters for every worker id that has produced at least one batch, sorted by
        id. Safe during iteration and after a worker crash; after :meth:`close` it returns the
        records as they were at close. Never waits more than
        :data:`~pipecheck._locks.SNAPSHOT_LOCK_TIMEOUT_S` for a reader in another thread: then
        it returns the previous snapshot's records."""
        with bounded(self._lock) as held:
            if not held:  # the holder is stopped (a signal handler saving the report)
                return list(self._last_records)
            if self._final is not None:
                return list(self._final)
            self._last_records = self._read_records()
            return list(self._last_records)

    def _read_records(self) -> list[WorkerRecord]:
        records = []
        for slot in range(self._layout.num_slots):
            header = self._read_header(slot)
            if header.batches == 0:
                continue
            worker_id = MAIN_PROCESS_WORKER_ID if self.num_workers == 0 else slot
            self._remember_pids(worker_id, header.pids)
            ring = _ring.read_ring(self._area, self._layout, slot, header.batches)
            records.append(
                WorkerRecord(
                    id=worker_id,
                    pid=header.pid,
                    pids=list(header.pids),
                    batches=header.batches,
                    samples=header.samples,
                    fetch_s=header.fetch_s,
                    collate_s=header.collate_s,
                    busy_s=header.fetch_s + header.collate_s,
                    first_at_s=self._relative(header.first_end),
                    last_at_s=self._relative(header.last_end),
                    recent=[
                        WorkerBatch(
                            worker_id=worker_id,
                            end_at_s=record.end - self.run_start,
                            fetch_s=record.fetch_s,
                            collate_s=record.collate_s,
                            samples=record.samples,
                        )
                        for record in ring
                    ],
                )
            )
        return records

    def pid_to_worker(self) -> dict[int, int]:
        """Every pid that has served a worker id so far (including earlier epochs' processes)
        mapped to that id; the main process maps to -1 when ``num_workers=0``. Thread-safe."""
        with bounded(self._lock) as held:
            if held and self._final is None:
                self._read_pids()
            return dict(self._known_pids)

    def _read_pids(self) -> None:
        for slot in range(self._layout.num_slots):
            header = self._read_header(slot)
            worker_id = MAIN_PROCESS_WORKER_ID if self.num_workers == 0 else slot
            self._remember_pids(worker_id, header.pids)

    def close(self) -> None:
        """Take a last snapshot, then release the shared memory and forget the loaders
        :meth:`instrument` registered. Idempotent. Workers still running keep their mapping
        and write into it harmlessly."""
        for loader_ref, substitutes in self._registered:
            loader = loader_ref()
            if loader is not None:
                _torch_compat.unregister(loader, substitutes)
        self._registered = []
        with self._lock:
            if self._final is None and self._finalizer.alive:
                self._read_pids()
                self._final = self._read_records()
                # The finalizer drops this process's accumulator, and its first batch with it
                self._first_at_close = self.first_batch()
            self._finalizer()

    def remove_file(self) -> None:
        """Delete a named shared file now, taking no lock (for a SIGTERM that ends the process:
        :mod:`pipecheck.autosave`; anonymous memory goes with the process). The mapping stays
        valid; the workers keep writing into it harmlessly."""
        if os.getpid() == self._owner_pid:
            self._area_owner.remove_name()

    def __enter__(self) -> WorkerProbe:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _read_header(self, slot: int) -> _ring.SlotHeader:
        # A writer killed mid-update leaves the seq odd; after one timed-out wait we remember
        # that value and fall back at once to the last consistent read of the slot.
        header = _ring.read_header(
            self._area, self._layout, slot, give_up_on_seq=self._stuck_seq.get(slot)
        )
        if header.consistent:
            self._last_good[slot] = header
            return header
        self._stuck_seq[slot] = header.seq
        return self._last_good.get(slot, header)

    def _remember_pids(self, worker_id: int, pids: list[int]) -> None:
        for pid in pids:
            self._known_pids[pid] = worker_id

    def _relative(self, time_s: Optional[float]) -> Optional[float]:
        return None if time_s is None else time_s - self.run_start
