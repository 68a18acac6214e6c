"""Tuning a DataLoader with ``persistent_workers=True``: such a loader builds one iterator at
its first ``iter()`` and resets it at every later one (its workers live on between epochs).
Under tuning, the iterator it resets must be one with the settings in effect, and no trial's
workers may outlive their use.

At an epoch's end (:meth:`KeptIterators.epoch_ended`), the iterator an in-epoch switch built
becomes the loader's kept one, in place of the one kept before (whose workers stop). At each
epoch's start (:meth:`KeptIterators.prepare`), with the settings in effect for it:

- the loader's kept iterator has them: torch resets it, as untuned;
- else it stops, and torch builds a new one. The untuned loader would have reset
  its iterator, which draws no base seed from the loader's generator and iterates the index
  sampler once, so the tuner gives that build a private generator and matches its sampler
  passes to a reset's (``pipecheck.tune.switch``).

An iterator an in-epoch switch left behind stops its workers once its outstanding batches
are handed out (:meth:`KeptIterators.retire`): a persistent iterator's workers would otherwise
wait, idle, until it is collected. Iterators are held weakly; nothing of the user's is kept.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional

from pipecheck._torch_compat import (has_persistent_workers, keep_iterator, kept_iterator,
                                     set_index_sampler, stop_workers)
from pipecheck.loader_settings import LoaderSettings

_Known = tuple["weakref.ReferenceType[Any]", LoaderSettings]


class KeptIterators:
    """The iterators one persistent loader's tuner knows (module docstring): the loader's kept
    one with the settings it was built with, and the last one an in-epoch switch built."""

    __slots__ = ("_kept", "_switched", "_opened")

    def __init__(self) -> None:
        self._kept: Optional[_Known] = None
        self._switched: Optional[_Known] = None
        self._opened = False

    def prepare(self, loader: Any, settings: LoaderSettings, start: LoaderSettings,
                reset_sampler: Any) -> bool:
        """Before this epoch's ``iter(loader)`` with ``settings`` in effect (``start``: the
        loader's own, which an iterator built outside the tuner has). A kept iterator with
        those settings is reset over ``reset_sampler`` (the loader's own index sampler, bounded
        as the epoch is); one with others stops. Returns whether torch will build a new
        iterator where the untuned loader would reset one (module docstring)."""
        first, self._opened = not self._opened, True
        self._switched = None  # a switch of the last epoch not handed over: collected with it
        kept = kept_iterator(loader)
        if kept is not None and self._settings_of(kept, start) == settings:
            set_index_sampler(kept, reset_sampler)
            return False
        if kept is None and first:
            return False  # the first epoch: torch builds, as untuned
        if kept is not None:
            stop_workers(kept)
            keep_iterator(loader, None)
        self._kept = None
        return True

    def opened(self, loader: Any, settings: LoaderSettings, reset_sampler: Any) -> None:
        """After this epoch's ``iter(loader)``: an iterator torch built now has ``settings``,
        and resets over ``reset_sampler`` (its build may have read the index sampler through a
        wrapper whose passes are used up, ``MatchedPasses``)."""
        kept = kept_iterator(loader)
        if kept is not None and (self._kept is None or self._kept[0]() is not kept):
            self._kept = (weakref.ref(kept), settings)
            set_index_sampler(kept, reset_sampler)

    def switched_to(self, iterator: Any, settings: LoaderSettings) -> None:
        """An in-epoch switch built ``iterator`` with ``settings``."""
        self._switched = (weakref.ref(iterator), settings)

    def retire(self, loader: Any, iterator: Any) -> None:
        """``iterator`` handed out its last batch after an in-epoch switch: its workers stop
        now, and the loader keeps it no longer."""
        if kept_iterator(loader) is iterator:
            keep_iterator(loader, None)
            self._kept = None
        if has_persistent_workers(iterator):
            stop_workers(iterator)

    def epoch_ended(self, loader: Any, iterator: Any) -> None:
        """The epoch's last ``iterator`` handed out its last batch: one an in-epoch switch
        built becomes the loader's kept iterator (the next epoch resets it when its settings
        are still in effect), in place of the one kept before."""
        switched, self._switched = self._switched, None
        if switched is None or switched[0]() is not iterator:
            return
        kept = kept_iterator(loader)
        if kept is not None and kept is not iterator:
            stop_workers(kept)
        keep_iterator(loader, iterator)
        self._kept = (switched[0], switched[1])

    def release(self, loader: Any, start: LoaderSettings, own_sampler: Any) -> None:
        """Tuning is over for good (the wrapper closed): a kept iterator with the loader's own
        settings (``start``) resets over its own index sampler ``own_sampler`` from now on, as
        torch's; one with other settings stops, so the loader's next ``iter()`` builds one
        with its own settings."""
        kept = kept_iterator(loader)
        if kept is not None and self._settings_of(kept, start) == start:
            set_index_sampler(kept, own_sampler)
        elif kept is not None:
            stop_workers(kept)
            keep_iterator(loader, None)
        self._kept = self._switched = None

    def _settings_of(self, kept: Any, start: LoaderSettings) -> LoaderSettings:
        known = self._kept
        return known[1] if known is not None and known[0]() is kept else start
