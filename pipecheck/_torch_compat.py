"""Every place pipecheck relies on a private part of ``torch.utils.data``, in one module.

pipecheck measures a DataLoader without changing what it yields. Two things need torch
internals, each checked here against the installed torch (2.1 to 2.13 are known to have them):

* ``DataLoader._get_iterator()``: the one call through which ``DataLoader.__iter__`` (and the
  subclasses of torchdata, MosaicML streaming and litdata, which call it through ``super()``)
  builds an epoch's iterator. The iterator reads ``loader.dataset``, ``loader.collate_fn`` and
  ``loader.worker_init_fn`` once, when it is built, and hands them to the workers.
  :func:`substitute_while_iterating` hooks that call on a private copy of the user's loader, so
  that only the iterator sees pipecheck's timed dataset and collate function: every attribute a
  user or a library reads on the loader, before, during and after iteration, is their own.
* ``DataLoader._iterator``: the persistent-workers iterator a loader keeps between epochs;
  :func:`private_copy` clears it so that a copy never shares the user's workers.
* ``DataLoader._IterableDataset_len_called``: ``len(loader)`` over an ``IterableDataset`` sets
  it, and from then on torch warns when the dataset yields more than that many samples;
  :func:`quiet_len` reads the length without leaving it set.

* The multi-worker iterator's ``_task_info`` (batch index -> ``(worker_id,)`` while out,
  ``(worker_id, data)`` once it arrived ahead of its turn), ``_rcvd_idx`` (the next batch to
  return), ``_in_order`` and ``_num_workers``, which head-of-line timing reads at every
  ``next()`` (:func:`head_of_line_unsupported`, :func:`awaited_batch`).
* The single-process iterator's ``_dataset_fetcher`` (a ``_MapDatasetFetcher``) and its
  ``dataset`` / ``collate_fn``, read at every batch: main-process sampling points them at the
  timed or the untimed pair between batches (:func:`main_process_fetcher`).

Each function checks what it relies on and says so when it is missing; pipecheck then turns
that probe off with a note instead of failing.
"""

from __future__ import annotations

import copy
import weakref
from typing import Any, Optional

from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _SingleProcessDataLoaderIter

from torch.utils.data._utils import fetch as _fetch

_MAP_FETCHER: Optional[type] = getattr(_fetch, "_MapDatasetFetcher", None)

ITERATOR_HOOK = "_get_iterator"
"""The private DataLoader method every epoch's iterator is built by (torch >= 1.8)."""

HAS_ITERATOR_HOOK = callable(getattr(DataLoader, ITERATOR_HOOK, None))
"""Whether the installed torch builds iterators through :data:`ITERATOR_HOOK`."""


class IteratorHookUnavailable(RuntimeError):
    """This torch, or this loader class, builds no iterator through :data:`ITERATOR_HOOK`."""


_LEN_CALLED = "_IterableDataset_len_called"


def quiet_len(loader: Any) -> Optional[int]:
    """``len(loader)`` (``None`` when it has none) without side effects a user could see: for
    a DataLoader over an ``IterableDataset`` torch records that ``len()`` was called and later
    warns when more samples come than it said; pipecheck asking must not arm that warning."""
    state = getattr(loader, "__dict__", None)
    if not isinstance(state, dict):
        state = {}
    had = _LEN_CALLED in state
    before = state.get(_LEN_CALLED)
    try:
        return len(loader)
    except Exception:  # unsized loaders raise TypeError, some raise others
        return None
    finally:
        if _LEN_CALLED in state:
            if had:
                state[_LEN_CALLED] = before
            else:
                del state[_LEN_CALLED]


def main_process_fetcher(iterator: Any) -> Optional[Any]:
    """The fetcher of a ``num_workers=0`` DataLoader iterator over a map-style dataset
    (``_SingleProcessDataLoaderIter._dataset_fetcher``, a ``_MapDatasetFetcher``), whose
    ``dataset`` and ``collate_fn`` attributes torch reads at every batch (torch 1.8 to 2.13);
    ``None`` for any other iterator or when those attributes are missing. Main-process
    sampling (:meth:`pipecheck.probes.workers.WorkerProbe.between_batches`) points them at the
    timed or the untimed dataset and collate between batches."""
    if _MAP_FETCHER is None or type(iterator) is not _SingleProcessDataLoaderIter:
        return None
    fetcher = getattr(iterator, "_dataset_fetcher", None)
    if type(fetcher) is not _MAP_FETCHER:
        return None
    if not (hasattr(fetcher, "dataset") and hasattr(fetcher, "collate_fn")):
        return None
    return fetcher


def private_copy(loader: DataLoader) -> DataLoader:
    """A shallow copy of ``loader`` (same class, dataset, sampler, generator and settings) with
    no persistent-workers iterator of its own yet: iterating it never touches the workers the
    user's loader may already hold."""
    clone = copy.copy(loader)
    clone._iterator = None
    return clone


class IteratorSubstitutes:
    """What a hooked loader's iterators are built with: ``values`` (attribute name -> value,
    e.g. ``dataset``, ``collate_fn``, ``worker_init_fn``) in place of the loader's own, and
    ``calls``, the iterators built so far (0 after iterating means the loader class builds
    its iterators some other way, and nothing was measured inside them)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = dict(values)
        self.calls = 0


_STATE_KEY = "_pipecheck_iterator_substitutes"


def _build_with(loader: Any, substitutes: IteratorSubstitutes, build: Any) -> Any:
    """``build(loader)`` (a ``_get_iterator``) with ``substitutes`` set in ``loader``'s
    ``__dict__`` meanwhile (past ``DataLoader.__setattr__``'s guard); the loader's own values
    are back before this returns or raises."""
    state = loader.__dict__
    saved = {name: state[name] for name in substitutes.values if name in state}
    state.update(substitutes.values)
    try:
        iterator = build(loader)
    finally:
        for name in substitutes.values:
            if name in saved:
                state[name] = saved[name]
            else:
                state.pop(name, None)
    substitutes.calls += 1
    return iterator

_hooked_classes: dict[type, type] = {}


def _hooked_class(base: type) -> type:
    """A subclass of the loader class ``base`` whose ``_get_iterator`` applies the instance's
    :class:`IteratorSubstitutes` around ``base``'s own (so ``isinstance`` checks on the loader
    hold, and copies of the loader stay hooked the same way)."""
    hooked = _hooked_classes.get(base)
    if hooked is not None:
        return hooked
    build = getattr(base, ITERATOR_HOOK)

    def _get_iterator(self: Any) -> Any:
        substitutes = self.__dict__.get(_STATE_KEY)
        if substitutes is None:
            return build(self)
        return _build_with(self, substitutes, build)

    hooked = type(base)(base.__name__, (base,), {
        ITERATOR_HOOK: _get_iterator, "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__})
    _hooked_classes[base] = hooked
    return hooked


def substitute_while_iterating(loader: DataLoader,
                               values: dict[str, Any]) -> IteratorSubstitutes:
    """Make ``loader`` (pipecheck's own copy: see :func:`private_copy`) build each epoch's
    iterator with ``values`` (attribute name -> value) in place of its own attributes; the
    attributes anyone reads on the loader stay its own. Changes ``loader``'s class to a
    subclass of it (:func:`_hooked_class`). Returns the substitutes record.

    Raises:
        IteratorHookUnavailable: the installed torch has no ``DataLoader._get_iterator``, or
            the loader's class cannot be subclassed.
    """
    if not HAS_ITERATOR_HOOK:
        raise IteratorHookUnavailable(
            f"this torch's DataLoader has no {ITERATOR_HOOK}(): per-worker timing is off")
    try:
        hooked = _hooked_class(type(loader))
        object.__setattr__(loader, "__class__", hooked)
    except Exception as err:  # TypeError mostly: a layout or metaclass that refuses
        raise IteratorHookUnavailable(
            f"{type(loader).__qualname__} cannot be hooked: {err}") from None
    substitutes = IteratorSubstitutes(values)
    loader.__dict__[_STATE_KEY] = substitutes
    return substitutes


def substitutes_of(loader: Any, in_place: bool = False) -> Any:
    """The :class:`IteratorSubstitutes` of a hooked ``loader`` (one registered in place with
    ``in_place``), or ``None``."""
    if in_place:
        try:
            return _in_place.get(loader)
        except TypeError:  # unhashable or not weak-referenceable: never registered
            return None
    return getattr(loader, "__dict__", {}).get(_STATE_KEY)


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


# -- in place: `pipecheck run` instruments the user's own loader objects ----------------------

_in_place: "weakref.WeakKeyDictionary[Any, IteratorSubstitutes]" = weakref.WeakKeyDictionary()
_patched_owners: set[type] = set()


def register_in_place(loader: DataLoader, values: dict[str, Any]) -> IteratorSubstitutes:
    """Make the user's own ``loader`` build its iterators with ``values`` substituted, without
    copying it or changing its class: the class in its MRO that defines ``_get_iterator`` gets,
    once, a version that looks the loader up in a weak registry (unregistered loaders build as
    before). For ``pipecheck run``, where the program holds the loader itself.

    Raises:
        IteratorHookUnavailable: no class of the loader defines ``_get_iterator``.
    """
    owner = next((c for c in type(loader).__mro__ if ITERATOR_HOOK in vars(c)), None)
    if owner is None:
        raise IteratorHookUnavailable(
            f"{type(loader).__qualname__} has no {ITERATOR_HOOK}(): per-worker timing is off")
    if owner not in _patched_owners:
        build = vars(owner)[ITERATOR_HOOK]

        def _get_iterator(self: Any) -> Any:
            substitutes = _in_place.get(self)
            if substitutes is None:
                return build(self)
            return _build_with(self, substitutes, build)

        setattr(owner, ITERATOR_HOOK, _get_iterator)
        _patched_owners.add(owner)
    substitutes = IteratorSubstitutes(values)
    _in_place[loader] = substitutes
    return substitutes
