"""Every place pipecheck relies on a private part of ``torch.utils.data``, in one module.

How it works, and why: docs/internals.md (``pipecheck/_torch_compat.py``).
"""

from __future__ import annotations

import os
import threading
from time import perf_counter
from typing import Any, Callable, Optional

from torch.utils.data import DataLoader
from torch.utils.data import dataloader as _dataloader
from torch.utils.data.dataloader import _SingleProcessDataLoaderIter

from torch.utils.data._utils import fetch as _fetch

from ._identity import IdentityWeakMap
from ._peek import on_type, own_value

_MAP_FETCHER: Any = getattr(_fetch, "_MapDatasetFetcher", None)
_ITERABLE_FETCHER: Any = getattr(_fetch, "_IterableDatasetFetcher", None)
_DATASET_KIND: Any = getattr(_dataloader, "_DatasetKind", None)

ITERATOR_HOOK = "_get_iterator"
"""The private DataLoader method every epoch's iterator is built by (torch >= 1.8)."""

HAS_ITERATOR_HOOK = callable(getattr(DataLoader, ITERATOR_HOOK, None))
"""Whether the installed torch builds iterators through :data:`ITERATOR_HOOK`."""

HAS_FETCHER_HOOK = (_MAP_FETCHER is not None and _ITERABLE_FETCHER is not None
                    and callable(getattr(_DATASET_KIND, "create_fetcher", None)))
"""Whether the installed torch builds fetchers through ``_DatasetKind.create_fetcher``."""


class IteratorHookUnavailable(RuntimeError):
    """This torch, or this loader class, builds no iterator (or fetcher) through the calls
    pipecheck hooks."""


_LEN_CALLED = "_IterableDataset_len_called"
_ABSENT = object()


def quiet_len(loader: Any) -> Optional[int]:
    """``len(loader)`` (``None`` when it has none) without side effects a user could see: for
    a DataLoader over an ``IterableDataset`` torch records that ``len()`` was called and later
    warns when more samples come than it said; pipecheck asking must not arm that warning."""
    before = own_value(loader, _LEN_CALLED, _ABSENT)
    try:
        return len(loader)
    except Exception:  # unsized loaders raise TypeError, some raise others
        return None
    finally:
        try:
            if own_value(loader, _LEN_CALLED, _ABSENT) is not before:
                # object's own setattr: no __setattr__ of a DataLoader subclass runs
                if before is _ABSENT:
                    object.__delattr__(loader, _LEN_CALLED)
                else:
                    object.__setattr__(loader, _LEN_CALLED, before)
        except Exception:  # a loader whose attributes cannot be set keeps torch's record
            pass


def has_persistent_iterator(loader: Any) -> bool:
    """Whether ``loader`` already holds a persistent-workers iterator (``DataLoader._iterator``),
    which torch reuses for every later epoch instead of building a new one."""
    return own_value(loader, "_iterator") is not None


# -- iterator substitutes: `_get_iterator` ---------------------------------------------------------


_this_pid = os.getpid()
"""This process's pid, kept at fork (``os.getpid()`` is a system call, and
:meth:`IteratorSubstitutes.take` asks at every epoch's start)."""


def _refresh_pid() -> None:
    global _this_pid
    _this_pid = os.getpid()


os.register_at_fork(after_in_child=_refresh_pid)


class IteratorSubstitutes:
    """How a registered loader's iterators are built (:func:`register`).

    ``substitute(name, value)`` gives the value the iterator gets for the loader's attribute
    ``name`` (one of ``names``) whose current value is ``value``; it is called at every build,
    so it sees the loader's attributes as they are then and holds none of them in between.
    ``owner_pid``: only this process builds with substitutes (a forked child iterating its copy
    of the loader builds as torch would, and measures nothing into its parent's probes).
    ``calls``: iterators built with substitutes so far (0 after iterating means the loader's
    class builds its iterators some other way, and nothing was measured inside them).
    ``armed``: ``None`` to substitute at every build; else the number of builds (0 or 1) that
    get them, set by :meth:`arm` (``pipecheck.wrap``, at each epoch's start: the next build is
    that epoch's, made at once by torch's ``DataLoader.__iter__`` or, by a loader class whose
    ``__iter__`` is a generator, at the epoch's first ``next()``; the user's own
    ``iter(loader)`` beside the wrapper stays unmeasured)."""

    def __init__(self, names: tuple[str, ...], substitute: Callable[[str, Any], Any], *,
                 always: bool) -> None:
        self.names = names
        self.substitute = substitute
        self.owner_pid = os.getpid()
        self.calls = 0
        self.armed: Optional[int] = None if always else 0
        self.building = False  # inside a substituted build (nested _get_iterator calls)

    def arm(self) -> None:
        """The loader's next iterator build (this epoch's) uses the substitutes."""
        if self.armed is not None:
            self.armed = 1

    def disarm(self) -> None:
        """The build :meth:`arm` was for did not happen (the loader reused an iterator): no
        later build takes its substitutes."""
        if self.armed is not None:
            self.armed = 0

    def take(self) -> bool:
        """Whether the build happening now uses the substitutes (and, when armed for one
        build, disarm)."""
        if self.owner_pid != _this_pid:
            return False
        if self.armed is None:
            return True
        if self.armed:
            self.armed = 0
            return True
        return False


_registered: IdentityWeakMap[Any, IteratorSubstitutes] = IdentityWeakMap()
_patched_owners: set[type] = set()
_patch_lock = threading.Lock()


def _build_with(loader: Any, substitutes: IteratorSubstitutes, build: Any) -> Any:
    """``build(loader)`` (a ``_get_iterator``) with the substitutes set as ``loader``'s instance
    attributes meanwhile (``object.__setattr__``: past ``DataLoader.__setattr__``'s guard and
    any subclass's, without materializing its ``__dict__``: :mod:`pipecheck._peek`); the
    loader's own values are back before this returns or raises. A name the loader's class
    defines (a property) is left alone: the iterator would read the class's value anyway."""
    names = [name for name in substitutes.names if not on_type(type(loader), name)]
    saved = {name: own_value(loader, name, _ABSENT) for name in names}
    replaced = {name: substitutes.substitute(name, getattr(loader, name, None))
                for name in names}
    for name, value in replaced.items():
        object.__setattr__(loader, name, value)
    try:
        iterator = build(loader)
    finally:
        for name in names:
            if saved[name] is not _ABSENT:
                object.__setattr__(loader, name, saved[name])
            elif own_value(loader, name, _ABSENT) is not _ABSENT:
                object.__delattr__(loader, name)
    substitutes.calls += 1
    return iterator


def _hook_owner(owner: type) -> None:
    """Give ``owner`` (the class that defines ``_get_iterator``) a version that builds
    registered loaders' iterators with their substitutes; others build as before."""
    with _patch_lock:
        if owner in _patched_owners:
            return
        build = vars(owner)[ITERATOR_HOOK]

        def _get_iterator(self: Any) -> Any:
            substitutes = _registered.get(self)
            # A subclass's _get_iterator calling its base's: substituted once, by the outer.
            if substitutes is None or substitutes.building or not substitutes.take():
                return build(self)
            substitutes.building = True
            try:
                return _build_with(self, substitutes, build)
            finally:
                substitutes.building = False

        _get_iterator.__wrapped__ = build  # type: ignore[attr-defined]
        # type.__setattr__: a metaclass's own __setattr__ must not see pipecheck's write.
        type.__setattr__(owner, ITERATOR_HOOK, _get_iterator)
        _patched_owners.add(owner)


def register(loader: Any, names: tuple[str, ...], substitute: Callable[[str, Any], Any], *,
             always: bool) -> IteratorSubstitutes:
    """Make ``loader`` (the user's own object, never copied or re-classed) build its iterators
    with ``substitute(name, current value)`` for each attribute in ``names``; see
    :class:`IteratorSubstitutes` for ``always``. ``substitute`` must not refer to the loader.

    Raises:
        IteratorHookUnavailable: no class of the loader defines ``_get_iterator``, or the
            loader cannot be weakly referenced.
    """
    owner = next((c for c in type(loader).__mro__ if ITERATOR_HOOK in vars(c)), None)
    if owner is None or not type(loader).__dictoffset__:  # instances without attributes
        raise IteratorHookUnavailable(
            f"{type(loader).__qualname__} has no {ITERATOR_HOOK}(): per-worker timing is off")
    substitutes = IteratorSubstitutes(names, substitute, always=always)
    try:
        _registered.set(loader, substitutes)
    except TypeError as err:
        raise IteratorHookUnavailable(
            f"{type(loader).__qualname__} cannot be measured inside: {err}") from None
    _hook_owner(owner)
    return substitutes


def unregister(loader: Any, substitutes: IteratorSubstitutes) -> None:
    """Forget ``loader``'s registration when it is still ``substitutes`` (idempotent)."""
    if _registered.get(loader) is substitutes:
        _registered.pop(loader)


# -- timed fetchers: `_DatasetKind.create_fetcher` -----------------------------------------------

INSTRUMENTED_COLLATE: list[type] = []
"""The collate class whose instances make :func:`install_fetcher_factory`'s factory build a
timed fetcher (set once by :mod:`pipecheck.probes.workers`, which defines it)."""


class FetchTimer:
    """What the timed fetchers expect of the object in the instrumented collate's ``timer``
    attribute (:class:`pipecheck.probes.worker_side.BatchAccumulator`), for documentation: the
    fetcher sets ``fetch_start`` (``perf_counter`` s) and ``expected_samples`` (samples of this
    fetch, or -1 to count the collated list) before calling the dataset, and calls
    ``fetch_failed(start)`` when the fetch raised before collation began (``in_fetch`` still
    true); ``busy`` true means an untimed epoch, ``attached`` false means ``attach()`` first,
    ``add_pending(seconds)`` counts fetch time (an iterable dataset's ``iter()``) towards the
    next batch."""

    busy: int
    attached: bool
    in_fetch: bool
    fetch_start: float
    expected_samples: int

    def attach(self) -> None: ...
    def fetch_failed(self, start: float) -> None: ...
    def add_pending(self, seconds: float) -> None: ...


def _timed_fetch(self: Any, index: Any, base_fetch: Callable[[Any, Any], Any],
                 samples: int) -> Any:
    timer = self.collate_fn.timer
    if timer is None or timer.busy:
        return base_fetch(self, index)
    if not timer.attached:
        timer.attach()
    start = perf_counter()
    timer.fetch_start = start
    timer.expected_samples = samples
    timer.in_fetch = True
    try:
        return base_fetch(self, index)
    except BaseException:
        if timer.in_fetch:  # the dataset raised (or ran out) before collation
            timer.fetch_failed(start)
        raise
    finally:
        timer.in_fetch = False


if HAS_FETCHER_HOOK:
    assert _MAP_FETCHER is not None and _ITERABLE_FETCHER is not None

    class TimedMapFetcher(_MAP_FETCHER):  # type: ignore[valid-type,misc]
        """torch's map-style fetcher with ``fetch()`` timed (docs/internals.md)."""

        def fetch(self, possibly_batched_index: Any) -> Any:
            if type(self.collate_fn) is not INSTRUMENTED_COLLATE[0]:
                # between main-process windows (set_fetcher_timed): torch's fetch, untimed
                return _MAP_FETCHER.fetch(self, possibly_batched_index)
            if not self.auto_collation:
                samples = 1
            else:
                try:
                    samples = len(possibly_batched_index)
                except TypeError:  # a batch sampler yielding unsized batches
                    samples = -1
            return _timed_fetch(self, possibly_batched_index, _MAP_FETCHER.fetch, samples)

    class TimedIterableFetcher(_ITERABLE_FETCHER):  # type: ignore[valid-type,misc]
        """torch's iterable fetcher with ``iter(dataset)`` and ``fetch()`` timed."""

        def __init__(self, dataset: Any, auto_collation: Any, collate_fn: Any,
                     drop_last: Any) -> None:
            timer = collate_fn.timer
            start = perf_counter()
            try:
                super().__init__(dataset, auto_collation, collate_fn, drop_last)
            finally:
                if timer is not None and not timer.busy:
                    if not timer.attached:
                        timer.attach()
                    timer.add_pending(perf_counter() - start)

        def fetch(self, possibly_batched_index: Any) -> Any:
            return _timed_fetch(self, possibly_batched_index, _ITERABLE_FETCHER.fetch,
                                -1 if self.auto_collation else 1)
else:  # pragma: no cover - depends on the torch version
    TimedMapFetcher = TimedIterableFetcher = None  # type: ignore[assignment,misc]

_original_create_fetcher: Any = None
_on_fetcher: list[Callable[[Any, Any], None]] = []


def install_fetcher_factory(on_fetcher: Optional[Callable[[Any, Any], None]] = None) -> None:
    """Replace ``_DatasetKind.create_fetcher`` in this process, once (idempotent; also called in
    spawned workers when pipecheck's collate is unpickled there): a fetcher whose collate
    function is an :data:`INSTRUMENTED_COLLATE` is built as a timed one, every other as torch
    builds it. ``on_fetcher(dataset, collate)``, when given, is called (once per distinct
    callback) before such a fetcher is built (the stage probe registers the dataset there).

    Raises:
        IteratorHookUnavailable: this torch builds no fetchers through
            ``_DatasetKind.create_fetcher``.
    """
    global _original_create_fetcher
    if not HAS_FETCHER_HOOK:
        raise IteratorHookUnavailable(
            "this torch's DataLoader has no _DatasetKind.create_fetcher: per-worker timing "
            "is off")
    with _patch_lock:
        if on_fetcher is not None and on_fetcher not in _on_fetcher:
            _on_fetcher.append(on_fetcher)
        if _original_create_fetcher is not None:
            return
        original = _DATASET_KIND.__dict__["create_fetcher"].__func__  # type: ignore[union-attr]
        map_kind = _DATASET_KIND.Map  # type: ignore[union-attr]

        def create_fetcher(kind: Any, dataset: Any, auto_collation: Any, collate_fn: Any,
                           drop_last: Any) -> Any:
            if not INSTRUMENTED_COLLATE or type(collate_fn) is not INSTRUMENTED_COLLATE[0]:
                return original(kind, dataset, auto_collation, collate_fn, drop_last)
            for callback in list(_on_fetcher):
                try:
                    callback(dataset, collate_fn)
                except Exception:  # a probe's bookkeeping never breaks loading
                    pass
            fetcher_class = TimedMapFetcher if kind == map_kind else TimedIterableFetcher
            return fetcher_class(dataset, auto_collation, collate_fn, drop_last)

        create_fetcher.__wrapped__ = original  # type: ignore[attr-defined]
        type.__setattr__(_DATASET_KIND, "create_fetcher",  # type: ignore[arg-type]
                         staticmethod(create_fetcher))
        _original_create_fetcher = original


def main_process_fetcher(iterator: Any) -> Optional[Any]:
    """The timed fetcher of a ``num_workers=0`` DataLoader iterator over a map-style dataset
    (``_SingleProcessDataLoaderIter._dataset_fetcher``, a :class:`TimedMapFetcher`), whose
    ``fetch`` and ``collate_fn`` torch reads at every batch (torch 1.8 to 2.13); ``None`` for
    any other iterator. Main-process sampling
    (:meth:`pipecheck.probes.workers.WorkerProbe.between_batches`) opens and closes its timed
    windows with :func:`set_fetcher_timed`."""
    if TimedMapFetcher is None or type(iterator) is not _SingleProcessDataLoaderIter:
        return None
    fetcher = getattr(iterator, "_dataset_fetcher", None)
    if type(fetcher) is not TimedMapFetcher:
        return None
    return fetcher


def set_fetcher_timed(fetcher: Any, timed: bool, collate_fn: Any) -> None:
    """Point a fetcher from :func:`main_process_fetcher` at pipecheck's instrumented
    ``collate_fn`` (``timed``: the fetch is timed) or at the loader's own (torch's fetch, called
    at once: one type test per untimed batch). One attribute write: the fetcher keeps its class,
    since assigning ``__class__`` makes every later attribute read of the object slower (it
    loses CPython 3.11's inline-values fast path, 15 -> 42 ns a read; 5% more time per batch on
    a 40 us batch)."""
    assert type(fetcher) is TimedMapFetcher
    assert timed == (type(collate_fn) is INSTRUMENTED_COLLATE[0])
    fetcher.collate_fn = collate_fn


# -- head-of-line state --------------------------------------------------------------------------


def head_of_line_unsupported(iterator: Any) -> Optional[str]:
    """``None`` when ``iterator`` is an in-order multi-worker DataLoader iterator whose
    head-of-line state :func:`awaited_batch` can read; else why not, as one line."""
    if not isinstance(getattr(iterator, "_task_info", None), dict) or not isinstance(
            getattr(iterator, "_rcvd_idx", None), int):
        return ("this DataLoader iterator has no _task_info / _rcvd_idx (single-process "
                "loading, or a torch version pipecheck does not know)")
    if getattr(iterator, "_in_order", True) is False:
        return "in_order=False: batches are not delivered in order"
    if getattr(iterator, "_num_workers", 0) < 2:
        return "fewer than 2 workers: no batch can overtake another"
    return None


def awaited_batch(iterator: Any) -> tuple[dict[int, tuple], int]:
    """``(task_info, head)`` of a multi-worker iterator that
    :func:`head_of_line_unsupported` accepted: its task table and the index of the batch the
    next ``next()`` returns."""
    return iterator._task_info, iterator._rcvd_idx


# -- in-epoch switch of a map-style loader's iterator (`wrap(tune=True)`) -------------------------


def index_sampler_attribute(loader: Any) -> str:
    """The loader attribute torch's iterators draw indices from (``DataLoader._index_sampler``):
    ``batch_sampler`` with automatic batching, else ``sampler``."""
    return "batch_sampler" if getattr(loader, "batch_sampler", None) is not None else "sampler"


def cut_sampler(iterator: Any) -> Any:
    """Stop ``iterator`` (a torch ``_BaseDataLoaderIter``) from taking more indices: its
    ``_sampler_iter`` is swapped for an exhausted one and the original returned, so only the
    batches already sent to workers (or none, in the main process) are left in it, delivered
    in order as before. Raises ``AttributeError`` when the iterator has no ``_sampler_iter``."""
    remaining = getattr(iterator, "_sampler_iter")
    if remaining is None:
        raise AttributeError("the iterator has not started its sampler (_sampler_iter is None)")
    iterator._sampler_iter = iter(())
    return remaining


def uncut_sampler(iterator: Any, remaining: Any) -> None:
    """Undo :func:`cut_sampler`: ``iterator`` takes its indices from ``remaining`` again."""
    iterator._sampler_iter = remaining


def continue_sampler(iterator: Any, remaining: Any, index_sampler: Any) -> None:
    """Make a freshly built ``iterator`` go on with ``remaining`` (another iterator's
    ``_sampler_iter``, less what the build already took) and report ``index_sampler`` (the
    loader's own) as its ``_index_sampler`` (``len()``, a later ``_reset``)."""
    iterator._sampler_iter = remaining
    iterator._index_sampler = index_sampler


def kept_iterator(loader: Any) -> Any:
    """The iterator a DataLoader with ``persistent_workers=True`` keeps between epochs
    (``_iterator``: built by the first ``iter()``, reset by each later one), or ``None``."""
    return own_value(loader, "_iterator")


def keep_iterator(loader: Any, iterator: Any) -> None:
    """Make ``iterator`` (or ``None``: none) the one ``loader`` resets at its next ``iter()``
    (with ``None`` it builds a new one), past any ``__setattr__`` of the loader's class."""
    object.__setattr__(loader, "_iterator", iterator)


def stop_workers(iterator: Any) -> None:
    """Shut down a torch iterator's worker processes now (``_shutdown_workers``, which torch
    calls at an epoch's end without persistent workers and when the iterator is collected; it
    may be called again). A main-process iterator has none."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()


def has_persistent_workers(iterator: Any) -> bool:
    """Whether ``iterator`` keeps its workers past its epoch's end (``_persistent_workers``):
    they then stop only with :func:`stop_workers` or when it is collected."""
    return bool(getattr(iterator, "_persistent_workers", False)) \
        and bool(getattr(iterator, "_num_workers", 0))


def set_index_sampler(iterator: Any, index_sampler: Any) -> None:
    """The index sampler a kept iterator's next ``_reset`` iterates (``_index_sampler``)."""
    iterator._index_sampler = index_sampler


def batches_yielded(iterator: Any) -> int:
    """``_num_yielded`` of a torch iterator (batches it has handed out), 0 when absent."""
    return int(getattr(iterator, "_num_yielded", 0) or 0)


def set_batches_yielded(iterator: Any, count: int) -> None:
    """Set ``_num_yielded`` of a torch iterator that takes over another's epoch."""
    iterator._num_yielded = count


def batches_outstanding(iterator: Any) -> int:
    """Batches a multi-worker iterator has sent to workers and not yet handed out
    (``_send_idx - _rcvd_idx``); 0 for a main-process iterator."""
    send = getattr(iterator, "_send_idx", None)
    received = getattr(iterator, "_rcvd_idx", None)
    if isinstance(send, int) and isinstance(received, int):
        return max(0, send - received)
    return 0
