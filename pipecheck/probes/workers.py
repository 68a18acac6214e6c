"""Per-worker producer timing: how long each DataLoader worker spends fetching and collating.

:class:`WorkerProbe` gives a DataLoader's iterators a timed dataset and a timed ``collate_fn``
(:meth:`WorkerProbe.timed_dataset`, :meth:`WorkerProbe.timed_collate`; the loader's own attributes
stay the user's, see :mod:`pipecheck._torch_compat`). The timed dataset is a *twin*: an instance
of a subclass of the user's dataset class that shares the dataset's ``__dict__``, so
``isinstance`` checks and attribute writes behave as on the dataset itself (a dataset without a
``__dict__`` gets a forwarding proxy instead). Inside every worker process (or the main process
when ``num_workers=0``) the twin adds up fetch time and sample count per batch (a method calling
another, e.g. ``__getitems__`` calling ``self[i]``, is timed once); the timed collate times
``collate_fn`` and, when it returns, commits one batch record to that worker's slot of a shared
file (see :mod:`pipecheck.probes._ring`). The main process reads the slots at any time with
:meth:`WorkerProbe.record`.

What is measured, per worker id (all durations wall-clock seconds from ``time.perf_counter``):

* ``fetch_s``: time inside the wrapped dataset's ``__getitem__`` / ``__getitems__``, or inside
  ``iter()`` and every ``next()`` of an ``IterableDataset``'s iterator, including the ``next()``
  that ends it with ``StopIteration`` and samples whose batch later failed;
* ``collate_s``: time inside the loader's ``collate_fn`` (``default_convert`` when
  ``batch_size=None``);
* ``batches``/``samples``: batches returned by ``collate_fn``, and the dataset items that went
  into them (with ``batch_size=None`` every item is one "batch" of one sample).

The twin and the timed collate return exactly what the user's objects return and let their
exceptions through untouched; if the shared file cannot be opened in a worker the probe goes
silent rather than disturb loading. Works with the fork, spawn and forkserver start methods: the
twin pickles as the user's object (by its own rules), the file path and the slot layout.

Limits: fetch time of samples that ``drop_last`` discards at the very end of a worker's life is
not counted; with ``num_workers=0`` the per-batch attribution assumes one thread iterates the
loader at a time; ``samples`` counts dataset items, so a dataset that yields ready-made batches
with ``batch_size=None`` reports one sample per batch.
"""

from __future__ import annotations

import copy
import dataclasses
import mmap
import os
import random
import threading
import weakref
from time import perf_counter
from typing import Any, Callable, NamedTuple, Optional

import torch.utils.data
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from pipecheck import _owned
from pipecheck._locks import bounded
from pipecheck._torch_compat import main_process_fetcher, private_copy, \
    substitute_while_iterating
from pipecheck.errors import PipecheckError
from pipecheck.probes import _ring
from pipecheck.records import WorkerBatch, WorkerRecord

try:  # DataPipes are deprecated; guard for torch versions that drop them.
    from torch.utils.data.datapipes.datapipe import IterDataPipe, MapDataPipe

    _DATAPIPE_TYPES: tuple[type, ...] = (IterDataPipe, MapDataPipe)
except ImportError:  # pragma: no cover - depends on the torch version
    _DATAPIPE_TYPES = ()

__all__ = ["MAIN_PROCESS_WORKER_ID", "WorkerProbe", "WorkerProbeUnsupported"]

MAIN_PROCESS_WORKER_ID = -1
"""Worker id reported for the main process when the loader has ``num_workers=0``."""

FAST_BATCH_S = 200e-6
"""Production time per batch (fetch + collate, seconds) under which timing every batch in the
main process (``num_workers=0``, where the training loop pays for it) costs over 1%: the timed
dataset and collate cost about 0.3 us a sample plus 1.4 us a batch, 1.1 us of it the ring
write (timeit against the plain ones on a TensorDataset, on this project's 2-core machine),
and 2 us is 1% of 200 us."""

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
:data:`MAIN_SPARSE_EVERY` (4 in 256 batches, drawn at random so that a period in the data
cannot alias with the window cadence). 256 timed batches give the mean production time to
about 6% at a coefficient of variation of 1 (1/sqrt(256)); each timed batch of the fastest
loader costs about 2 us on a 19 us batch (:data:`FAST_BATCH_S`), so 4 in 64 cost about 0.7%
of its first epoch and 4 in 256 about 0.2%; measured with this cadence, the per-sample probe
adds 0.3-0.5 pp to that first epoch (``python benchmarks/overhead.py --fastest-only --floor
--parts``). The dense phase lasts 4,096 batches: under 0.1 s at that pace."""

MAIN_SPARSE_EVERY = 4
"""After :data:`MAIN_DENSE_TIMED` timed batches a call of :meth:`WorkerProbe.between_batches`
opens a window with probability ``1 / MAIN_SPARSE_EVERY``."""


class WorkerProbeUnsupported(PipecheckError):
    """The loader cannot be instrumented without changing what it yields (for example a
    DataPipe dataset, which torch seeds and shards by type). Callers fall back to no worker
    probe."""


# ---------------------------------------------------------------------------------------------
# Per-process state shared by the dataset proxy and the collate wrapper
# ---------------------------------------------------------------------------------------------


class _SharedArea:
    """What a worker needs to find its slot: the file path, the layout and the worker count.
    Immutable and picklable."""

    __slots__ = ("path", "layout", "num_workers")

    def __init__(self, path: str, layout: _ring.AreaLayout, num_workers: int) -> None:
        self.path = path
        self.layout = layout
        self.num_workers = num_workers

    def __getstate__(self) -> tuple:
        return (self.path, self.layout, self.num_workers)

    def __setstate__(self, state: tuple) -> None:
        self.path, self.layout, self.num_workers = state

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


class _BatchAccumulator:
    """Fetch time and samples since the last batch, in one process, for one probe.

    The dataset proxy adds to ``fetch_s``/``samples`` per sample (attribute updates only, to
    keep the per-sample cost well under a microsecond); the collate wrapper turns them into a
    batch record. Attaching to the shared file is deferred to first use because the worker id
    is only known inside the worker (``get_worker_info()``).
    """

    __slots__ = ("fetch_s", "samples", "attached", "writer", "area", "busy", "window",
                 "close_window", "timed", "timed_busy_s", "first")

    def __init__(self, area: _SharedArea) -> None:
        self.area = area
        self.fetch_s = 0.0
        self.samples = 0
        self.attached = False
        self.writer: Optional[_ring.SlotWriter] = None
        # 1 while a timed fetch runs (a dataset method calling another, e.g. __getitems__
        # calling self[i], is timed once) and while paused (num_workers=0 epochs not timed).
        self.busy = 0
        # Main-process sampling (WorkerProbe.between_batches): timed batches left in the
        # open window, and what puts the untimed dataset and collate back when it closes.
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
        process has no slot or the file is gone: the probe must never break loading."""
        self.attached = True
        info = get_worker_info()
        worker_id = MAIN_PROCESS_WORKER_ID if info is None else info.id
        slot = self.area.slot_of(worker_id)
        if slot is None:
            return
        try:
            # Only worker processes can share a slot (an old epoch's worker and a new one).
            writer = _ring.SlotWriter(self.area.path, self.area.layout, slot,
                                      locking=info is not None)
            writer.register_process(os.getpid())
        except (OSError, ValueError):
            return
        self.writer = writer

    def finish_batch(self, end_time: float, collate_s: float) -> None:
        """Commit the batch whose collation just ended at ``end_time`` (perf_counter s)."""
        fetch_s, samples = self.fetch_s, self.samples
        self.fetch_s = 0.0
        self.samples = 0
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

    def flush_unbatched(self, collate_s: float = 0.0) -> None:
        """Count pending fetch time (and ``collate_s``) as producing time that made no batch:
        a sample or collate raised, or an iterable dataset ran out."""
        fetch_s = self.fetch_s
        self.fetch_s = 0.0
        self.samples = 0
        if self.writer is not None and (fetch_s or collate_s):
            self.writer.add_time(fetch_s, collate_s)

    def fetch_failed(self, start: float) -> None:
        """A fetch that began at ``start`` (perf_counter s) raised: its time and the pending
        batch's count as producing time that made no batch. Off the per-sample success path."""
        self.fetch_s += perf_counter() - start
        self.flush_unbatched()

    def add_unbatched_fetch(self, fetch_s: float) -> None:
        """Count ``fetch_s`` seconds of fetching that belongs to no batch, leaving the pending
        batch as it is."""
        if self.writer is not None:
            self.writer.add_time(fetch_s, 0.0)

    def disable(self) -> None:
        """Stop writing for good (the probe was closed in this process)."""
        self.attached = True
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.close()

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's pending values and slot (the parent's slot is
        not ours; the child attaches to its own on first use)."""
        self.fetch_s = 0.0
        self.samples = 0
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


# One accumulator per live probe in this process, keyed by probe key. The proxy and the collate
# wrapper are pickled separately for spawn/forkserver; looking the key up here is what makes
# them share one accumulator again inside the worker.
_accumulators: dict[str, _BatchAccumulator] = {}


def _accumulator_for(key: str, area: _SharedArea) -> _BatchAccumulator:
    accumulator = _accumulators.get(key)
    if accumulator is None:
        accumulator = _accumulators[key] = _BatchAccumulator(area)
    return accumulator


def _forget_parent_state() -> None:
    for accumulator in _accumulators.values():
        accumulator.forget_after_fork()


os.register_at_fork(after_in_child=_forget_parent_state)


# ---------------------------------------------------------------------------------------------
# Timed datasets: a subclass of the user's dataset class sharing the instance's attributes
# ---------------------------------------------------------------------------------------------


def _timed_methods(base: type, acc: _BatchAccumulator) -> dict[str, Any]:
    """The methods a timed subclass of ``base`` overrides: ``__iter__`` for an
    ``IterableDataset`` (``iter()`` and every ``next()`` are fetch time), else ``__getitem__``
    and, when ``base`` has one, ``__getitems__`` (torch then fetches a batch at once)."""
    if issubclass(base, IterableDataset):
        base_iter = base.__iter__

        def __iter__(self: Any) -> Any:
            if acc.busy:
                return base_iter(self)
            if not acc.attached:
                acc.attach()
            # Samples still pending here were fetched but never collated (a partial batch
            # dropped by drop_last in a persistent worker's previous pass): busy time.
            acc.flush_unbatched()
            start = perf_counter()
            try:
                iterator = base_iter(self)
            finally:
                acc.fetch_s += perf_counter() - start
            return _TimedIterator(iterator, acc)

        return {"__iter__": __iter__}
    base_getitem = base.__getitem__  # type: ignore[index]  # base: a map-style dataset class

    def __getitem__(self: Any, index: Any) -> Any:
        if acc.busy:
            return base_getitem(self, index)
        if not acc.attached:
            acc.attach()
        acc.busy = 1
        start = perf_counter()
        try:
            item = base_getitem(self, index)
        except BaseException:
            acc.busy = 0
            acc.fetch_failed(start)
            raise
        acc.busy = 0
        acc.fetch_s += perf_counter() - start
        acc.samples += 1
        return item

    methods: dict[str, Any] = {"__getitem__": __getitem__}
    base_getitems = getattr(base, "__getitems__", None)
    if base_getitems:  # torch's fetcher: hasattr(dataset, "__getitems__") and it is truthy
        # The same steps as __getitem__, written out: a shared helper would cost a call per
        # sample on the training loop's path.

        def __getitems__(self: Any, indices: Any) -> Any:
            if acc.busy:
                return base_getitems(self, indices)
            if not acc.attached:
                acc.attach()
            acc.busy = 1
            start = perf_counter()
            try:
                items = base_getitems(self, indices)
            except BaseException:
                acc.busy = 0
                acc.fetch_failed(start)
                raise
            acc.busy = 0
            acc.fetch_s += perf_counter() - start
            acc.samples += len(indices)
            return items

        methods["__getitems__"] = __getitems__
    return methods


_timed_classes: dict[tuple[type, str], type] = {}


def _timed_class(base: type, key: str, area: _SharedArea) -> type:
    """The timed subclass of dataset class ``base`` for probe ``key`` (one per pair, per
    process). It keeps ``base``'s name, module and docstring, so ``isinstance`` checks, reprs
    and error messages read as they would. Raises ``TypeError`` when ``base`` cannot be
    subclassed so (final or C-layout classes)."""
    cls = _timed_classes.get((base, key))
    if cls is None:
        acc = _accumulator_for(key, area)
        namespace = _timed_methods(base, acc)
        namespace.update({
            "__slots__": ("_pipecheck_original",),
            "__reduce_ex__": _reduce_timed, "__copy__": _copy_timed,
            "__deepcopy__": _deepcopy_timed,
            "_pipecheck_key": key, "_pipecheck_area": area,
            "__module__": base.__module__, "__qualname__": base.__qualname__,
            "__doc__": base.__doc__})
        cls = type(base)(base.__name__, (base,), namespace)
        _timed_classes[(base, key)] = cls
    return cls


def _make_timed(original: Any, key: str, area: _SharedArea) -> Any:
    """A timed twin of ``original``: an instance of :func:`_timed_class` whose ``__dict__`` IS
    ``original``'s, so every attribute read or written on either is the same (torch's own
    example shards an ``IterableDataset`` by setting attributes on
    ``get_worker_info().dataset`` in ``worker_init_fn``, and that object is the twin).
    Raises ``TypeError`` for datasets without a replaceable ``__dict__``."""
    cls = _timed_class(type(original), key, area)
    twin: Any = object.__new__(cls)
    # object.__setattr__: a class with its own __setattr__ (a frozen dataclass) must not see it
    object.__setattr__(twin, "__dict__", original.__dict__)
    object.__setattr__(twin, "_pipecheck_original", original)
    return twin


def _reduce_timed(self: Any, protocol: int) -> tuple:
    # Pickled for spawn / forkserver workers: the user's object pickles by its own rules.
    return (_make_timed, (self._pipecheck_original, self._pipecheck_key, self._pipecheck_area))


def _copy_timed(self: Any) -> Any:
    return _make_timed(copy.copy(self._pipecheck_original), self._pipecheck_key,
                       self._pipecheck_area)


def _deepcopy_timed(self: Any, memo: dict) -> Any:
    return _make_timed(copy.deepcopy(self._pipecheck_original, memo), self._pipecheck_key,
                       self._pipecheck_area)


def timed_dataset(dataset: Any, key: str, area: _SharedArea) -> Any:
    """``dataset`` timed for probe ``key``: its timed twin (:func:`_make_timed`), or, for a
    dataset with no ``__dict__`` to share (a list, a NumPy array, a slotted class), a
    forwarding proxy (which ``isinstance`` checks on the dataset's class do not see through)."""
    if isinstance(getattr(dataset, "__dict__", None), dict):
        try:
            return _make_timed(dataset, key, area)
        except Exception:  # TypeError mostly; a metaclass or __init_subclass__ may raise others
            pass
    return _proxy_class(dataset)(dataset, key, area)


# ---------------------------------------------------------------------------------------------
# Forwarding proxies, for datasets without a __dict__ (one class per shape, so hasattr()
# answers as it would on the wrapped dataset)
# ---------------------------------------------------------------------------------------------

_PROXY_PREFIX = "_pipecheck_"


class _ProxyBase:
    """Attribute behaviour shared by all forwarding proxies.

    Reads of unknown attributes go to the wrapped dataset, and so do writes: torch's own
    example shards an ``IterableDataset`` by setting attributes on ``get_worker_info().dataset``
    in ``worker_init_fn``, and that object is the proxy. Names starting with ``_pipecheck_`` and
    dunder names are never forwarded (that keeps pickling and copying from recursing).
    """

    def __init__(self, wrapped: Any, key: str, area: _SharedArea) -> None:
        self.__setstate__((wrapped, key, area))

    def __getstate__(self) -> tuple:
        return (self._pipecheck_wrapped, self._pipecheck_key, self._pipecheck_area)

    def __setstate__(self, state: tuple) -> None:
        wrapped, key, area = state
        object.__setattr__(self, "_pipecheck_wrapped", wrapped)
        object.__setattr__(self, "_pipecheck_key", key)
        object.__setattr__(self, "_pipecheck_area", area)
        object.__setattr__(self, "_pipecheck_acc", _accumulator_for(key, area))

    def __getattr__(self, name: str) -> Any:
        if name.startswith(_PROXY_PREFIX) or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        try:
            wrapped = object.__getattribute__(self, "_pipecheck_wrapped")
        except AttributeError:  # not yet unpickled
            raise AttributeError(name) from None
        return getattr(wrapped, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith(_PROXY_PREFIX):
            object.__setattr__(self, name, value)
        else:
            setattr(self._pipecheck_wrapped, name, value)

    def __delattr__(self, name: str) -> None:
        if name.startswith(_PROXY_PREFIX):
            object.__delattr__(self, name)
        else:
            delattr(self._pipecheck_wrapped, name)

    def __repr__(self) -> str:
        return f"<pipecheck timing proxy of {self._pipecheck_wrapped!r}>"


class _SizedMixin:
    def __len__(self) -> int:
        return len(self._pipecheck_wrapped)  # type: ignore[attr-defined]  # mixed into proxies


class _MapDatasetProxy(_ProxyBase, Dataset):
    """Map-style proxy: times each ``__getitem__``.

    ``__getitems__ = None`` tells torch's fetcher "fetch one by one" (it tests
    ``hasattr(dataset, "__getitems__") and dataset.__getitems__`` on every batch) without a trip
    through ``__getattr__`` and a raised AttributeError, about 1 us per batch.
    """

    __getitems__ = None

    def __getitem__(self, index: Any) -> Any:
        acc = self._pipecheck_acc
        if acc.busy:
            return self._pipecheck_wrapped[index]
        if not acc.attached:
            acc.attach()
        start = perf_counter()
        try:
            item = self._pipecheck_wrapped[index]
        except BaseException:
            acc.fetch_failed(start)
            raise
        acc.fetch_s += perf_counter() - start
        acc.samples += 1
        return item


class _BatchedMapDatasetProxy(_MapDatasetProxy):
    """Map-style proxy for datasets with ``__getitems__`` (torch then fetches a batch at once)."""

    def __getitems__(self, indices: Any) -> Any:  # type: ignore[override]  # base: None
        acc = self._pipecheck_acc
        if acc.busy:
            return self._pipecheck_wrapped.__getitems__(indices)
        if not acc.attached:
            acc.attach()
        start = perf_counter()
        try:
            items = self._pipecheck_wrapped.__getitems__(indices)
        except BaseException:
            acc.fetch_failed(start)
            raise
        acc.fetch_s += perf_counter() - start
        acc.samples += len(indices)
        return items


class _SizedMapDatasetProxy(_SizedMixin, _MapDatasetProxy):
    pass


class _SizedBatchedMapDatasetProxy(_SizedMixin, _BatchedMapDatasetProxy):
    pass


class _TimedIterator:
    """Times every ``next()`` of an iterable dataset's iterator. A class, not a generator, so
    an iterator that raises and then carries on behaves exactly as it does unwrapped."""

    __slots__ = ("_iterator", "_acc")

    def __init__(self, iterator: Any, acc: _BatchAccumulator) -> None:
        self._iterator = iterator
        self._acc = acc

    def __iter__(self) -> _TimedIterator:
        return self

    def __next__(self) -> Any:
        acc = self._acc
        start = perf_counter()
        try:
            item = next(self._iterator)
        except StopIteration:
            # The read that finds the end is producing time too. Samples already fetched stay
            # pending: torch may still collate them as a last partial batch.
            acc.add_unbatched_fetch(perf_counter() - start)
            raise
        except BaseException:
            acc.fetch_failed(start)
            raise
        acc.fetch_s += perf_counter() - start
        acc.samples += 1
        return item


class _IterableDatasetProxy(_ProxyBase, IterableDataset):
    """Iterable proxy: ``iter()`` and each ``next()`` count as fetch time."""

    def __iter__(self) -> Any:
        acc = self._pipecheck_acc
        if acc.busy:
            return iter(self._pipecheck_wrapped)
        if not acc.attached:
            acc.attach()
        # Samples still pending here were fetched but never collated (a partial batch dropped
        # by drop_last in the previous pass of a persistent worker): not a batch, but busy time.
        acc.flush_unbatched()
        start = perf_counter()
        try:
            iterator = iter(self._pipecheck_wrapped)
        finally:
            acc.fetch_s += perf_counter() - start
        return _TimedIterator(iterator, acc)


class _SizedIterableDatasetProxy(_SizedMixin, _IterableDatasetProxy):
    pass


def _proxy_class(dataset: Any) -> type:
    sized = hasattr(dataset, "__len__")
    if isinstance(dataset, IterableDataset):
        return _SizedIterableDatasetProxy if sized else _IterableDatasetProxy
    # Mirror torch's fetcher test exactly: hasattr(dataset, "__getitems__") and it is truthy.
    if getattr(dataset, "__getitems__", None):
        return _SizedBatchedMapDatasetProxy if sized else _BatchedMapDatasetProxy
    return _SizedMapDatasetProxy if sized else _MapDatasetProxy


class _TimedCollate:
    """Wraps the loader's ``collate_fn``: times it and commits one batch record per call."""

    def __init__(self, collate_fn: Callable[[Any], Any], key: str, area: _SharedArea) -> None:
        self.__setstate__((collate_fn, key, area))

    def __getstate__(self) -> tuple:
        return (self.collate_fn, self._key, self._area)

    def __setstate__(self, state: tuple) -> None:
        self.collate_fn, self._key, self._area = state
        self._acc = _accumulator_for(self._key, self._area)

    def __call__(self, batch: Any) -> Any:
        acc = self._acc
        if acc.busy:
            return self.collate_fn(batch)
        if not acc.attached:
            acc.attach()
        start = perf_counter()
        try:
            result = self.collate_fn(batch)
        except BaseException:
            acc.flush_unbatched(collate_s=perf_counter() - start)
            raise
        end = perf_counter()
        acc.finish_batch(end, end - start)
        return result

    def __repr__(self) -> str:
        return f"<pipecheck timed {self.collate_fn!r}>"


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
    """Points a main-process fetcher at the timed or the untimed dataset and collate (two
    attribute writes). Made only when the fetcher holds pipecheck's timed pair."""

    __slots__ = ("fetcher", "timed_pair", "untimed_pair")

    def __init__(self, fetcher: Any, timed_pair: tuple, untimed_pair: tuple) -> None:
        self.fetcher, self.timed_pair, self.untimed_pair = fetcher, timed_pair, untimed_pair

    @classmethod
    def of(cls, fetcher: Any) -> Optional[_FetcherSwap]:
        if fetcher is None:
            return None
        dataset, collate = fetcher.dataset, fetcher.collate_fn
        if not isinstance(collate, _TimedCollate):
            return None
        original = (getattr(dataset, "_pipecheck_original", None)
                    if isinstance(type(dataset).__dict__.get("_pipecheck_key"), str)
                    else getattr(dataset, "_pipecheck_wrapped", None))
        if original is None:
            return None
        return cls(fetcher, (dataset, collate), (original, collate.collate_fn))

    def timed(self) -> None:
        self.fetcher.dataset, self.fetcher.collate_fn = self.timed_pair

    def untimed(self) -> None:
        self.fetcher.dataset, self.fetcher.collate_fn = self.untimed_pair


def _release_area(key: str, area: mmap.mmap, path: str, fd: int, owner_pid: int) -> None:
    """Finalizer: stop this process's writer for ``key``, unmap and delete the file. Only the
    creating process deletes it (a forked child exiting must not pull it from the workers)."""
    accumulator = _accumulators.pop(key, None)
    if accumulator is not None:
        accumulator.disable()
    for cached in [pair for pair in _timed_classes if pair[1] == key]:
        del _timed_classes[cached]
    if os.getpid() != owner_pid:
        return
    area.close()
    _owned.remove(fd, path)


class WorkerProbe:
    """Per-worker fetch/collate timing for one ``DataLoader``.

    ``num_workers`` must equal the loader's (``>= 0``; 0 means the main process produces,
    reported as worker id -1). ``run_start`` is a :data:`pipecheck._clock.monotonic` reading;
    every ``*_at_s`` in the records is seconds since it. ``ring_size`` (``>= 1``) is how many
    recent batches each worker keeps. The shared file (``/dev/shm`` when present) is created
    here, before any ``iter()``; raises ``ValueError`` for bad arguments and ``OSError`` if the
    file cannot be created.
    """

    def __init__(self, num_workers: int, *, run_start: float, ring_size: int = 1024) -> None:
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.num_workers = num_workers
        self.run_start = run_start
        self._layout = _ring.AreaLayout(num_slots=max(1, num_workers), ring_size=ring_size)
        path, area, fd = _ring.create_area(self._layout)
        self._owner_pid = os.getpid()
        self.path = path
        self._area = area
        self._key = os.path.basename(path)  # unique per live file
        self._shared = _SharedArea(path, self._layout, num_workers)
        self._known_pids: dict[int, int] = {}
        self._last_good: dict[int, _ring.SlotHeader] = {}
        self._stuck_seq: dict[int, int] = {}
        self._final: Optional[list[WorkerRecord]] = None
        self._last_records: list[WorkerRecord] = []  # what a reader gets if the lock is stuck
        # The host probe calls pid_to_worker() from its sampler thread; reads and close()
        # must not interleave (a read of an unmapped area raises).
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _release_area, self._key, area, path, fd,
                                           os.getpid())
        self._sampled_iterator: Any = None  # between_batches: the epoch it follows
        self._swap: Optional[_FetcherSwap] = None
        self._first_at_close: Optional[FirstBatch] = None
        # Which sparse-phase calls open a window; seeded, so a run's sampling is repeatable.
        self._window_draw = random.Random(0).random

    def check_supported(self, loader: torch.utils.data.DataLoader) -> None:
        """Raise unless this probe can time ``loader``: ``ValueError`` if its ``num_workers``
        differs from the probe's or the probe is closed, :class:`WorkerProbeUnsupported` for
        DataPipe datasets (torch seeds and shards those by type, which a proxy would hide)."""
        if loader.num_workers != self.num_workers:
            raise ValueError(
                f"loader has num_workers={loader.num_workers}, "
                f"probe was made for {self.num_workers}"
            )
        if not self._finalizer.alive:
            raise ValueError("this WorkerProbe is closed")
        if _DATAPIPE_TYPES and isinstance(loader.dataset, _DATAPIPE_TYPES):
            raise WorkerProbeUnsupported(
                "per-worker timing does not support DataPipe datasets "
                f"({type(loader.dataset).__name__})")

    def timed_dataset(self, dataset: Any) -> Any:
        """``dataset`` with its fetches timed for this probe (see :func:`timed_dataset`)."""
        return timed_dataset(dataset, self._key, self._shared)

    def timed_collate(self, collate_fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``collate_fn`` timed for this probe; each call that returns commits one batch."""
        return _TimedCollate(collate_fn, self._key, self._shared)

    def instrument(self, loader: torch.utils.data.DataLoader) -> torch.utils.data.DataLoader:
        """Return a private copy of ``loader`` whose iterators fetch from the timed dataset and
        collate with the timed ``collate_fn``
        (:func:`pipecheck._torch_compat.substitute_while_iterating`): its ``dataset`` and
        ``collate_fn`` attributes still read as the user's. ``loader`` itself is not modified.
        Raises as :meth:`check_supported`, and
        :class:`~pipecheck._torch_compat.IteratorHookUnavailable`."""
        self.check_supported(loader)
        clone = private_copy(loader)
        substitute_while_iterating(clone, {
            "dataset": self.timed_dataset(loader.dataset),
            "collate_fn": self.timed_collate(loader.collate_fn)})
        return clone

    def between_batches(self, iterator: Any) -> None:
        """Main-process sampling (``num_workers=0``): called between two batches of the epoch
        whose DataLoader iterator is ``iterator``, regularly (the consumer probe calls it every
        ``CPU_SAMPLE_EVERY`` batches, and at each epoch's first). Once
        :data:`MAIN_SAMPLE_AFTER` batches are timed and their mean (the first left out: lazy
        initialisation) is under :data:`FAST_BATCH_S`, each call opens a window of
        :data:`MAIN_WINDOW` timed batches (after :data:`MAIN_DENSE_TIMED` timed batches, one
        call in :data:`MAIN_SPARSE_EVERY` at random) and the batches after it are fetched with
        the untimed dataset and collate (the iterator's fetcher is pointed at them: no pipecheck code runs for those batches); in an epoch
        :meth:`pause` d, every batch is. Does nothing for other iterators (workers, an
        iterable dataset, a loader whose iterator torch does not build so), which are timed
        batch by batch. The caller scales the timed batches to all of them (the ratio
        estimator, see :attr:`~pipecheck.records.WorkerRecord.timed_batches`)."""
        acc = _accumulator_for(self._key, self._shared)
        if iterator is not self._sampled_iterator:  # a new epoch
            self._sampled_iterator = iterator
            self._swap = _FetcherSwap.of(main_process_fetcher(iterator)) \
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
        accumulator = _accumulators.get(self._key)
        return None if accumulator is None else accumulator.first

    def pause(self, paused: bool) -> None:
        """Stop (``True``) or resume timing in this process, for ``num_workers=0`` loaders
        whose batches are too fast to time every epoch; the timed dataset then costs one
        attribute test per sample."""
        _accumulator_for(self._key, self._shared).busy = 1 if paused else 0

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
        """Take a last snapshot, then unmap and delete the shared file. Idempotent. Workers
        still running keep their mapping and write into the deleted file harmlessly."""
        with self._lock:
            if self._final is None and self._finalizer.alive:
                self._read_pids()
                self._final = self._read_records()
                # The finalizer drops this process's accumulator, and its first batch with it
                self._first_at_close = self.first_batch()
            self._finalizer()

    def remove_file(self) -> None:
        """Delete the shared file now, taking no lock (for a SIGTERM that ends the process:
        :mod:`pipecheck.autosave`). The mapping stays valid; the workers keep writing into
        the deleted file harmlessly."""
        if os.getpid() == self._owner_pid:
            try:
                os.unlink(self.path)
            except OSError:
                pass

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
