"""Checkpoints of a tuned torchdata ``StatefulDataLoader`` that resume exactly with the user's
own settings.

How it works, and why: docs/internals.md (``pipecheck/tune/checkpoint.py``).
"""

from __future__ import annotations

import collections
import weakref
from typing import Any, Iterator, Optional

from pipecheck._torchdata_compat import (live_iterator, serialize, state_keys, untuned_state,
                                         iterator_seeds)


class EpochPosition:
    """Where a tuned epoch stands as its checkpoint sees it: ``handed`` batches handed to the
    loop, the index sampler's and its iterator's states right after the last of them was
    taken, the epoch's first iterator's seeds, whether the loop was told the epoch ended."""

    __slots__ = ("handed", "index_sampler_state", "sampler_iter_state", "seeds", "finished",
                 "_iterator")

    def __init__(self) -> None:
        self.handed = 0
        self.index_sampler_state: Optional[dict] = None
        self.sampler_iter_state: Optional[dict] = None
        self.seeds: tuple[Any, Any, Any] = (None, None, None)
        self.finished = False
        self._iterator: Optional[weakref.ref] = None

    def opened(self, iterator: Any) -> None:
        """The epoch's first iterator (torch's, built by the loader's ``__iter__``)."""
        self.seeds = iterator_seeds(iterator)
        self._iterator = weakref.ref(iterator)

    def describes(self, loader: Any) -> bool:
        """Whether ``loader``'s live iterator is this epoch's."""
        live = live_iterator(loader)
        return live is not None and self._iterator is not None and self._iterator() is live


class RecordingIndices:
    """The epoch's index-sampler iterator, noting its states after each batch's indices (see
    docs/internals.md); :meth:`hand_out` moves the position to the next batch's."""

    __slots__ = ("_sampler", "_source", "_noted", "_position", "_note")

    def __init__(self, sampler: Any, position: EpochPosition) -> None:
        self._sampler = sampler
        self._source = iter(sampler)
        self._noted: collections.deque[tuple[Optional[dict], Optional[dict]]] = \
            collections.deque()
        self._position = position
        position.index_sampler_state = serialize(sampler)
        position.sampler_iter_state = serialize(self._source)
        # Samplers without state (torch's own) note nothing: no per-batch work for them.
        self._note = position.index_sampler_state is not None \
            or position.sampler_iter_state is not None

    def __iter__(self) -> "RecordingIndices":
        return self

    def __next__(self) -> Any:
        item = next(self._source)
        if self._note:
            self._noted.append((serialize(self._sampler), serialize(self._source)))
        return item

    def hand_out(self) -> None:
        """A batch was handed to the loop (batches come in the order their indices were
        taken)."""
        position = self._position
        position.handed += 1
        if self._noted:
            position.index_sampler_state, position.sampler_iter_state = self._noted.popleft()


    def epoch_ended(self) -> None:
        """The loop was told the epoch ended."""
        self._position.finished = True


class RecordingSampler:
    """What an epoch's build reads as the loader's index sampler: ``iter()`` gives a
    :class:`RecordingIndices` over ``sampler`` (the latest kept in :attr:`indices`), ``len()``
    is ``sampler``'s."""

    __slots__ = ("sampler", "position", "indices")

    def __init__(self, sampler: Any, position: EpochPosition) -> None:
        self.sampler = sampler
        self.position = position
        self.indices: Optional[RecordingIndices] = None

    def __iter__(self) -> Iterator[Any]:
        self.indices = RecordingIndices(self.sampler, self.position)
        return self.indices

    def __len__(self) -> int:
        return len(self.sampler)


def stateful_refusal(loader: Any) -> Optional[str]:
    """Why a stateful loader's checkpoints could not be written for its own settings while it
    is tuned (one line), or ``None`` for a torchdata ``StatefulDataLoader`` over a map-style
    dataset that keeps no state of its own."""
    from torch.utils.data import IterableDataset

    from pipecheck._torchdata_compat import is_stateful_dataloader

    if not is_stateful_dataloader(loader):
        return (f"{type(loader).__qualname__} has state_dict / load_state_dict: its checkpoints "
                "follow a layout pipecheck does not know, which trials would change")
    if state_keys() is None:
        return ("this torchdata's StatefulDataLoader checkpoint layout is not the one pipecheck "
                "knows (torchdata 0.11)")
    if isinstance(loader.dataset, IterableDataset):
        return ("a StatefulDataLoader over an IterableDataset: each worker's copy of the dataset "
                "holds its own state, which another worker count cannot resume")
    if serialize(loader.dataset) is not None:
        return ("a StatefulDataLoader over a dataset with state_dict: each worker's copy holds "
                "its own state, which another worker count cannot resume")
    return None


class Checkpoints:
    """The tuner's answers to a stateful loader's ``state_dict()``: the checkpoint of its own
    settings (``num_workers``) at the tuned epoch's position, while the loader's live iterator
    is that epoch's."""

    __slots__ = ("_keys", "_num_workers", "position")

    def __init__(self, num_workers: int) -> None:
        keys = state_keys()
        if keys is None:
            raise RuntimeError("torchdata's checkpoint layout is unknown")
        self._keys = keys
        self._num_workers = num_workers
        self.position: Optional[EpochPosition] = None

    def answer(self, loader: Any) -> Optional[dict]:
        """The checkpoint for ``loader`` now, or ``None`` (the loader answers itself)."""
        position = self.position
        if position is None or not position.describes(loader):
            return None
        return untuned_state(self._keys, num_workers=self._num_workers, handed=position.handed,
                             index_sampler_state=position.index_sampler_state,
                             sampler_iter_state=position.sampler_iter_state,
                             seeds=position.seeds, finished=position.finished)
