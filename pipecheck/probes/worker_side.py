"""The worker side of the producer timing (:mod:`pipecheck.probes.workers`): what runs in each
DataLoader worker process (or in the main process when ``num_workers=0``). The timed collate
function torch's iterators get (:class:`InstrumentedCollate`, pickled with the user's collate
function for spawn and forkserver) and the per-process accumulator that commits one record per
batch to that worker's slot of shared memory (:mod:`pipecheck.probes._ring`).
"""

from __future__ import annotations

import os
from time import perf_counter
from typing import Any, Callable, NamedTuple, Optional

from torch.utils.data import get_worker_info

from pipecheck import _torch_compat
from pipecheck.probes import _ring

MAIN_PROCESS_WORKER_ID = -1
"""Worker id reported for the main process when the loader has ``num_workers=0``."""


class SharedArea:
    """What a worker needs to find its slot: where the shared memory is
    (:class:`pipecheck.probes._ring.Area`'s ``path``, ``fd`` and ``device_inode``), the layout,
    the worker count and the pid of the process that made it. Immutable and picklable."""

    __slots__ = ("path", "fd", "device_inode", "layout", "num_workers", "owner_pid")

    def __init__(self, area: _ring.Area, layout: _ring.AreaLayout, num_workers: int) -> None:
        self.__setstate__((area.path, area.fd, area.device_inode, layout, num_workers,
                           os.getpid()))

    def __getstate__(self) -> tuple:
        return (self.path, self.fd, self.device_inode, self.layout, self.num_workers,
                self.owner_pid)

    def __setstate__(self, state: tuple) -> None:
        (self.path, self.fd, self.device_inode, self.layout, self.num_workers,
         self.owner_pid) = state

    def slot_of(self, worker_id: int) -> Optional[int]:
        """The slot for ``worker_id`` (-1 = main process), or ``None`` if it has none."""
        if self.num_workers == 0:
            return 0 if worker_id == MAIN_PROCESS_WORKER_ID else None
        return worker_id if 0 <= worker_id < self.num_workers else None


class FirstBatch(NamedTuple):
    """The first batch committed in a process: ``fetch_s`` and ``collate_s`` (seconds) and
    its ``samples``. It holds the process's lazy initialisation, so the main process's sampled
    totals are scaled without it (:func:`scaled_to`)."""

    fetch_s: float
    collate_s: float
    samples: int


class BatchAccumulator:
    """The batch being produced in one process, for one probe: the timer the timed fetchers
    and :class:`InstrumentedCollate` share (:class:`pipecheck._torch_compat.FetchTimer`).

    The fetcher notes when a fetch starts and how many samples it asked for; the collate turns
    that into one batch record. Attaching to the shared memory is deferred to the first fetch
    because the worker id is only known inside the worker (``get_worker_info()``).
    """

    __slots__ = ("pending_s", "in_fetch", "fetch_start", "expected_samples", "attached",
                 "writer", "area", "busy", "window", "close_window", "timed", "timed_busy_s",
                 "first")

    def __init__(self, area: SharedArea) -> None:
        self.area = area
        self.pending_s = 0.0  # fetch time towards the next batch (an iterable's iter())
        self.in_fetch = False  # a timed fetch is running and has not reached collation
        self.fetch_start = 0.0
        self.expected_samples = 0
        self.attached = False
        self.writer: Optional[_ring.SlotWriter] = None
        # 1 while paused (num_workers=0 epochs not timed): everything passes through.
        self.busy = 0
        # Main-process sampling (WorkerProbe.between_batches): timed batches left in the
        # open window, and what puts torch's own fetch and the user's collate back.
        self.window = 0
        self.close_window: Optional[Callable[[], None]] = None
        # Batches committed in this process, and the fetch + collate s of all but the first:
        # a first batch's lazy initialisation (0.5 s, say) would otherwise hold the mean
        # over FAST_BATCH_S, and a fast loader timed batch by batch, for thousands of batches.
        self.timed = 0
        self.timed_busy_s = 0.0
        self.first: Optional[FirstBatch] = None  # the first committed batch, as written

    def attach(self) -> None:
        """Open this process's slot and register its pid. Silent (no writer) when this
        process has no slot, is not the probe's (a forked child of the main process), or
        the memory cannot be opened: the probe must never break loading."""
        self.attached = True
        info = get_worker_info()
        if info is None and os.getpid() != self.area.owner_pid:
            return
        worker_id = MAIN_PROCESS_WORKER_ID if info is None else info.id
        slot = self.area.slot_of(worker_id)
        if slot is None:
            return
        try:
            fd = _ring.open_area(self.area.path, self.area.fd, self.area.device_inode)
            # Only worker processes can share a slot (an old epoch's worker and a new one).
            writer = _ring.SlotWriter(fd, self.area.layout, slot, locking=info is not None)
            writer.register_process(os.getpid())
        except (OSError, ValueError):
            return
        self.writer = writer

    def add_pending(self, seconds: float) -> None:
        """Count ``seconds`` of fetching (an iterable dataset's ``iter()``) towards the next
        batch."""
        self.pending_s += seconds

    def fetch_failed(self, start: float) -> None:
        """A fetch that began at ``start`` (perf_counter s) raised before collation (a sample
        error, the end of an iterable dataset, a last batch ``drop_last`` discards): its time
        is producing time that made no batch."""
        fetch_s = self.pending_s + perf_counter() - start
        self.pending_s = 0.0
        if self.writer is not None:
            self.writer.add_time(fetch_s, 0.0)

    def collate_failed(self, fetch_s: float, collate_s: float) -> None:
        """The collate function raised: its batch's time made no batch."""
        if self.writer is not None:
            self.writer.add_time(fetch_s, collate_s)

    def finish_batch(self, end_time: float, fetch_s: float, collate_s: float,
                     samples: int) -> None:
        """Commit the batch whose collation just ended at ``end_time`` (perf_counter s)."""
        if self.writer is not None:
            self.writer.add_batch(end_time, fetch_s, collate_s, samples)
        if self.timed:
            self.timed_busy_s += fetch_s + collate_s
        else:
            self.first = FirstBatch(fetch_s, collate_s, samples)
        self.timed += 1
        if self.window:
            self.window -= 1
            if not self.window and self.close_window is not None:
                self.close_window()

    def disable(self) -> None:
        """Stop writing for good (the probe was closed in this process)."""
        self.attached = True
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.close()

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's pending values and slot (the parent's slot is
        not ours; a worker attaches to its own on first use, any other child never does)."""
        self.pending_s = 0.0
        self.in_fetch = False
        self.attached = False
        self.busy = 0
        self.window = self.timed = 0
        self.timed_busy_s = 0.0
        self.first = None
        self.close_window = None
        writer, self.writer = self.writer, None
        if writer is not None:
            try:
                writer.close()  # the child's copies of the mapping and descriptor
            except (OSError, BufferError, ValueError):
                pass  # a fork hook must never fail the fork


# One accumulator per live probe in this process, keyed by probe key. The collate is pickled on
# its own for spawn/forkserver; looking the key up here finds the process's accumulator.
accumulators: dict[str, BatchAccumulator] = {}


def accumulator_for(key: str, area: SharedArea) -> BatchAccumulator:
    accumulator = accumulators.get(key)
    if accumulator is None:
        accumulator = accumulators[key] = BatchAccumulator(area)
    return accumulator


def _forget_parent_state() -> None:
    for accumulator in accumulators.values():
        accumulator.forget_after_fork()


os.register_at_fork(after_in_child=_forget_parent_state)


# ---------------------------------------------------------------------------------------------
# The collate function torch's iterators get
# ---------------------------------------------------------------------------------------------


def register_stage_dataset(dataset: Any, collate: "InstrumentedCollate") -> None:
    """The fetcher factory's callback: time ``dataset``'s webdataset stages in this process
    when ``collate`` carries a stage folder (:mod:`pipecheck.probes.stages`)."""
    # Only webdataset pipelines have stages (a ``pipeline`` list): others return at once,
    # before the import, which would cost every epoch of a tiny loader a few microseconds.
    if collate.stage_folder is not None and isinstance(getattr(dataset, "pipeline", None), list):
        from pipecheck.probes.stages import time_pipeline_stages

        time_pipeline_stages(dataset, collate.stage_folder, "workers")


class InstrumentedCollate:
    """What a measured loader's iterators get as ``collate_fn``: the user's ``collate_fn``,
    timed for the worker probe ``key`` (``None``: not timed) and carrying the stage probe's
    folder (``stage_folder``, ``None``: no stage timing) into the worker processes, where the
    fetcher factory sees it (:func:`pipecheck._torch_compat.install_fetcher_factory`). Calling
    it returns exactly what ``collate_fn`` returns and lets its exceptions through; each call
    inside a timed fetch commits one batch record. Picklable when ``collate_fn`` is."""

    __slots__ = ("collate_fn", "timer", "key", "area", "stage_folder")

    def __init__(self, collate_fn: Callable[[Any], Any], key: Optional[str],
                 area: Optional[SharedArea], stage_folder: Optional[str]) -> None:
        self.collate_fn = collate_fn
        self.key, self.area, self.stage_folder = key, area, stage_folder
        self.timer = accumulator_for(key, area) if key is not None and area is not None \
            else None
        # Here too, for spawn and forkserver workers, which unpickle this before torch builds
        # their fetcher.
        _torch_compat.install_fetcher_factory(register_stage_dataset)

    def __reduce__(self) -> tuple:
        return (InstrumentedCollate, (self.collate_fn, self.key, self.area, self.stage_folder))

    def __call__(self, batch: Any) -> Any:
        timer = self.timer
        if timer is None or timer.busy or not timer.in_fetch:
            # Untimed: a paused epoch, or a call outside a timed fetch (an iterator class that
            # builds its fetchers some other way), whose fetch time is unknown.
            return self.collate_fn(batch)
        start = perf_counter()
        timer.in_fetch = False
        fetch_s = timer.pending_s + (start - timer.fetch_start)
        timer.pending_s = 0.0
        samples = timer.expected_samples
        if samples < 0:
            try:
                samples = len(batch)
            except TypeError:
                samples = 1
        try:
            result = self.collate_fn(batch)
        except BaseException:
            timer.collate_failed(fetch_s, perf_counter() - start)
            raise
        end = perf_counter()
        timer.finish_batch(end, fetch_s, end - start, samples)
        return result

    def __repr__(self) -> str:
        return f"<pipecheck timed {self.collate_fn!r}>"


_torch_compat.INSTRUMENTED_COLLATE[:] = [InstrumentedCollate]
