"""Every place pipecheck relies on a private part of torchdata's ``StatefulDataLoader``, in one
module: the layout of the checkpoint its ``state_dict()`` returns.

How it works, and why: docs/internals.md (``pipecheck/_torchdata_compat.py``).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Optional

from pipecheck._identity import IdentityWeakMap

StateAnswer = Callable[[Any], Optional[dict]]
"""``answer(loader)``: the checkpoint to return for ``loader``, or ``None`` for the loader's
own ``state_dict()``. Must not raise."""

_MAIN_KEYS = ("_INDEX_SAMPLER_STATE", "_SAMPLER_ITER_STATE", "_SAMPLER_ITER_YIELDED",
              "_ITERABLEDATASET_LEN_CALLED", "_SHARED_SEED", "_ITERATOR_FINISHED")
_WORKER_KEYS = ("_WORKER_ID", "_FETCHER_STATE", "_DATASET_STATE")
_SINGLE_KEYS = ("_NUM_YIELDED",)
_MULTI_KEYS = ("_SNAPSHOT", "_SNAPSHOT_STEP", "_LAST_YIELDED_WORKER_ID", "_MAIN_SNAPSHOT",
               "_WORKER_SNAPSHOTS", "_STEPS_SINCE_SNAPSHOT", "_NUM_WORKERS", "_BASE_SEED")


def _stateful_module() -> Any:
    try:
        from torchdata.stateful_dataloader import stateful_dataloader
    except Exception:
        return None
    return stateful_dataloader


def is_stateful_dataloader(loader: Any) -> bool:
    """Whether ``loader`` is a torchdata ``StatefulDataLoader`` (or a subclass)."""
    module = _stateful_module()
    return module is not None and isinstance(loader, module.StatefulDataLoader)


def state_keys() -> Optional[dict[str, str]]:
    """The checkpoint's key names, read from the installed torchdata (constant name -> key),
    or ``None`` when torchdata is absent or lacks one of them."""
    module = _stateful_module()
    if module is None:
        return None
    single: Any = getattr(module, "_StatefulSingleProcessDataLoaderIter", None)
    multi: Any = getattr(module, "_StatefulMultiProcessingDataLoaderIter", None)
    try:
        from torchdata.stateful_dataloader import incremental_state
    except Exception:
        return None
    keys: dict[str, str] = {}
    for names, owner in ((_MAIN_KEYS, module), (_WORKER_KEYS, incremental_state),
                         (_SINGLE_KEYS, single), (_MULTI_KEYS, multi)):
        for name in names:
            value = getattr(owner, name, None)
            if not isinstance(value, str):
                return None
            keys[name] = value
    try:  # the name of worker 0's entry in a snapshot, as a format with the worker's number
        worker_key = multi._worker_key(None, 0)
    except Exception:
        return None
    if not isinstance(worker_key, str) or not worker_key.endswith("0"):
        return None
    keys["worker_key"] = worker_key[:-1].replace("{", "{{").replace("}", "}}") + "{}"
    return keys


def serialize(obj: Any) -> Optional[dict]:
    """``obj.state_dict()`` when ``obj`` has both ``state_dict`` and ``load_state_dict``
    (torchdata's ``Stateful``), else ``None``: what torchdata records for a sampler or its
    iterator."""
    if callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict",
                                                                        None)):
        return obj.state_dict()
    return None


def resume_pending(loader: Any) -> bool:
    """Whether ``loader.load_state_dict()`` left a checkpoint for its next iterator to resume
    from (``next_iter_state``)."""
    return getattr(loader, "next_iter_state", None) is not None


def live_iterator(loader: Any) -> Any:
    """The iterator ``loader`` keeps for its ``state_dict()`` (``_iterator``), or ``None``."""
    return getattr(loader, "_iterator", None)


def iterator_seeds(iterator: Any) -> tuple[Any, Any, Any]:
    """``(base seed, shared seed, _IterableDataset_len_called)`` of a torch iterator: drawn
    when it was built, and written into its checkpoint."""
    return (getattr(iterator, "_base_seed", None), getattr(iterator, "_shared_seed", None),
            getattr(iterator, "_IterableDataset_len_called", None))


def untuned_state(keys: dict[str, str], *, num_workers: int, handed: int,
                  index_sampler_state: Optional[dict], sampler_iter_state: Optional[dict],
                  seeds: tuple[Any, Any, Any], finished: bool) -> dict:
    """The checkpoint a map-style ``StatefulDataLoader`` with ``num_workers`` workers (>= 0)
    writes after ``handed`` batches (>= 0) of an epoch, its sampler states as they were right
    after that batch's indices were taken; ``seeds`` from :func:`iterator_seeds` of the epoch's
    first iterator; ``finished``: the loop was told the epoch ended. ``keys``:
    :func:`state_keys`."""
    base_seed, shared_seed, len_called = seeds
    main = {
        keys["_INDEX_SAMPLER_STATE"]: index_sampler_state,
        keys["_SAMPLER_ITER_STATE"]: sampler_iter_state,
        keys["_SAMPLER_ITER_YIELDED"]: handed,
        keys["_ITERABLEDATASET_LEN_CALLED"]: len_called,
        keys["_SHARED_SEED"]: shared_seed,
    }
    if num_workers == 0:
        return {**main, keys["_NUM_YIELDED"]: handed, keys["_FETCHER_STATE"]: None,
                keys["_DATASET_STATE"]: None, keys["_ITERATOR_FINISHED"]: finished}
    workers = {keys["worker_key"].format(worker): {keys["_WORKER_ID"]: worker,
                                                   keys["_FETCHER_STATE"]: None,
                                                   keys["_DATASET_STATE"]: None}
               for worker in range(num_workers)}
    snapshot = {
        keys["_SNAPSHOT_STEP"]: handed,
        keys["_LAST_YIELDED_WORKER_ID"]: (handed - 1) % num_workers,
        keys["_MAIN_SNAPSHOT"]: {**main, keys["_NUM_WORKERS"]: num_workers,
                                 keys["_BASE_SEED"]: base_seed},
        keys["_WORKER_SNAPSHOTS"]: workers,
    }
    return {keys["_SNAPSHOT"]: snapshot, keys["_STEPS_SINCE_SNAPSHOT"]: 0,
            keys["_ITERATOR_FINISHED"]: finished}


_answers: IdentityWeakMap[Any, tuple[int, StateAnswer]] = IdentityWeakMap()
_hooked_owners: set[type] = set()
_hook_lock = threading.Lock()


def _hook_state_dict(owner: type) -> None:
    """Give ``owner`` (the class in the loader's MRO that defines ``state_dict``) a version that
    returns a registered loader's answer when it has one; others answer as before."""
    with _hook_lock:
        if owner in _hooked_owners:
            return
        own = vars(owner)["state_dict"]

        def state_dict(self: Any) -> Any:
            entry = _answers.get(self)
            if entry is not None and entry[0] == os.getpid():
                state = entry[1](self)
                if state is not None:
                    return state
            return own(self)

        state_dict.__wrapped__ = own  # type: ignore[attr-defined]
        state_dict.__doc__ = getattr(own, "__doc__", None)
        # type.__setattr__: a metaclass's own __setattr__ must not see pipecheck's write.
        type.__setattr__(owner, "state_dict", state_dict)
        _hooked_owners.add(owner)


def answer_state_dict(loader: Any, answer: StateAnswer) -> None:
    """Make ``loader.state_dict()`` (the user's own object, never copied or re-classed) return
    ``answer(loader)`` when that is not ``None``, in this process only. ``answer`` must not
    refer to the loader.

    Raises:
        TypeError: no class of the loader defines ``state_dict``, or the loader cannot be
            weakly referenced.
    """
    owner = next((c for c in type(loader).__mro__ if "state_dict" in vars(c)), None)
    if owner is None:
        raise TypeError(f"{type(loader).__qualname__} defines no state_dict()")
    _answers.set(loader, (os.getpid(), answer))
    _hook_state_dict(owner)


def stop_answering(loader: Any) -> None:
    """``loader.state_dict()`` is the loader's own again (idempotent)."""
    _answers.pop(loader)
