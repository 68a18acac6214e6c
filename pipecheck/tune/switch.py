"""Switching a map-style DataLoader's settings at a batch boundary inside an epoch, so that the
loop sees exactly the samples, in exactly the order, it would see untuned.

How it works, and why: docs/internals.md (``pipecheck/tune/switch.py``).
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any, Callable, Iterator, Optional

from pipecheck._torch_compat import (batches_outstanding, batches_yielded, continue_sampler,
                                     cut_sampler, index_sampler_attribute,
                                     set_batches_yielded, uncut_sampler)


class SwitchError(RuntimeError):
    """The new iterator was not built over the taken sampler iterator (the loader's class
    builds its iterators some other way): it was dropped and the old one restored."""


class _Taking:
    """The index sampler a continuing build sees: ``iter()`` is itself, ``next()`` takes the
    next index from the sampler iterator in use and notes it (put back if the build fails)."""

    __slots__ = ("_remaining", "taken")

    def __init__(self, remaining: Iterator[Any]) -> None:
        self._remaining = remaining
        self.taken: list[Any] = []

    def __iter__(self) -> "_Taking":
        return self

    def __next__(self) -> Any:
        item = next(self._remaining)
        self.taken.append(item)
        return item


def rng_state(generator: Any) -> Callable[[], None]:
    """A call that puts ``generator``'s state (the global torch CPU RNG when ``None``) back
    as it is now."""
    import torch

    if generator is None:
        state = torch.get_rng_state()
        return lambda: torch.set_rng_state(state)
    state = generator.get_state()
    return lambda: generator.set_state(state)


SEED_MIX = 0x9E3779B97F4A7C15
"""Odd 64-bit constant (the golden ratio's, as in splitmix64) that spreads switch numbers over
the seed space."""


def switch_generator(generator: Any, number: int) -> Any:
    """The private ``torch.Generator`` a switch's build draws its workers' base seed from:
    seeded from ``generator.initial_seed()`` (the global ``torch.initial_seed()`` when ``None``)
    mixed with the switch's ``number`` (>= 0). Reading an initial seed draws nothing."""
    import torch

    base = torch.initial_seed() if generator is None else generator.initial_seed()
    private = torch.Generator()
    private.manual_seed((base ^ (SEED_MIX * (number + 1))) & ((1 << 63) - 1))
    return private


def switch_iterator(loader: Any, current: Any,
                    build: Callable[[str, Any], Any]) -> Any:
    """A new iterator for ``loader`` that goes on with ``current``'s epoch (docs/internals.md):
    ``build(attribute, sampler)`` must build the loader's iterator with its attribute
    ``attribute`` (``batch_sampler`` or ``sampler``) read as ``sampler``, and its ``generator``
    as a :func:`switch_generator`, for the build. After
    the call ``current`` delivers only its outstanding batches; hand those out first.

    Raises:
        SwitchError: the build did not iterate the substituted sampler (nothing changed).
        AttributeError: ``current`` is not a torch iterator with ``_sampler_iter``.
        whatever ``build`` raises (worker start-up): ``current`` is then as it was.
    """
    attribute = index_sampler_attribute(loader)
    index_sampler = getattr(loader, attribute)
    remaining = cut_sampler(current)
    taking = _Taking(remaining)
    try:
        new = build(attribute, taking)
        if getattr(new, "_sampler_iter", None) is not taking:
            del new  # its workers (if any) stop with it
            raise SwitchError(f"{type(loader).__qualname__} did not build its iterator over "
                              "the continued sampler")
    except BaseException:
        uncut_sampler(current, itertools.chain(taking.taken, remaining)
                      if taking.taken else remaining)
        raise
    continue_sampler(new, remaining, index_sampler)
    return new


class BoundedIndices:
    """An epoch's index-sampler iterator that stops at the sampler's length without taking the
    step past its last item: a shuffling sampler's last step draws from its generator (torch's
    ``RandomSampler`` ends with an empty ``randperm``), and whether an untuned loader takes it
    depends on its settings (0 workers: only when the loop calls ``next()`` past the last
    batch; workers: when prefetching reaches the end), not on tuning's trial settings.
    :meth:`finish` takes that step when the start settings would (:class:`TuningIterator`)."""

    __slots__ = ("_source", "_left", "_finished", "_pending")

    def __init__(self, source: Iterator[Any], length: int) -> None:
        self._source = source
        self._left = length
        self._finished = False
        self._pending = False  # finish() asked before the last item was taken

    def __iter__(self) -> "BoundedIndices":
        return self

    def __next__(self) -> Any:
        if self._left <= 0:
            raise StopIteration
        self._left -= 1
        item = next(self._source)
        if not self._left and self._pending:
            self._step_past_end()
        return item

    def finish(self) -> None:
        """Take the sampler's step past its last item (once): what an untuned loader's one
        more request for an index does; while items are left, right after the last is taken
        (never taking an item the epoch still needs)."""
        if self._finished:
            return
        if self._left > 0:
            self._pending = True
            return
        self._step_past_end()

    def _step_past_end(self) -> None:
        self._finished = True
        for _ in self._source:  # a sampler whose len() holds yields nothing more
            pass


class BoundedSampler:
    """What an epoch's build reads as the loader's index sampler while tuning may run it with
    other settings than the start's: ``iter()`` gives :class:`BoundedIndices` over
    ``sampler`` (kept in :attr:`indices`), ``len()`` is ``sampler``'s."""

    __slots__ = ("sampler", "indices")

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.indices: Optional[BoundedIndices] = None

    def __iter__(self) -> BoundedIndices:
        self.indices = BoundedIndices(iter(self.sampler), len(self.sampler))
        return self.indices

    def __len__(self) -> int:
        return len(self.sampler)


def passes_per_build(num_workers: int) -> int:
    """How many times torch's iterator build calls ``iter()`` on the index sampler: once in
    ``_BaseDataLoaderIter.__init__``, and with workers once more in the first ``_reset`` (the
    last call's iterator is the epoch's). A sampler whose ``iter()`` draws from a generator at
    once (a custom sampler returning ``iter(torch.randperm(...))``, torchdata's
    ``RandomSampler``) thus draws once or twice an epoch, by worker count."""
    return 1 if num_workers == 0 else 2


class MatchedIndices:
    """The iterator :class:`MatchedPasses` hands out: the pass over its sampler in use now."""

    __slots__ = ("source",)

    def __init__(self, source: Iterator[Any]) -> None:
        self.source = source

    def __iter__(self) -> "MatchedIndices":
        return self

    def __next__(self) -> Any:
        return next(self.source)


class MatchedPasses:
    """What an epoch's build reads as the loader's index sampler when its settings would call
    ``iter()`` on it another number of times than the untuned build (:func:`passes_per_build`):
    the build's calls past ``passes`` start no new pass, and :meth:`complete` starts those it
    lacked, so the sampler sees the untuned passes and the epoch runs on the last, as untuned.
    ``len()`` is ``sampler``'s."""

    __slots__ = ("sampler", "indices", "_passes", "_calls")

    def __init__(self, sampler: Any, passes: int) -> None:
        self.sampler = sampler
        self.indices: Optional[MatchedIndices] = None
        self._passes = passes
        self._calls = 0

    def __iter__(self) -> MatchedIndices:
        self._calls += 1
        if self.indices is None:
            self.indices = MatchedIndices(iter(self.sampler))
        elif self._calls <= self._passes:
            self.indices.source = iter(self.sampler)
        return self.indices

    def __len__(self) -> int:
        return len(self.sampler)

    def complete(self) -> None:
        """After the build (before any index is taken without workers; with workers the
        build never lacks a pass): the passes the untuned build would have started and this
        one did not."""
        while self.indices is not None and self._calls < self._passes:
            self._calls += 1
            self.indices.source = iter(self.sampler)


def boundable(index_sampler: Any) -> bool:
    """Whether an epoch over ``index_sampler`` (the loader's ``batch_sampler``, or ``sampler``
    without automatic batching) needs and allows bounding: torch's own ``BatchSampler`` over
    torch's ``RandomSampler``, or that sampler alone (their ``len()`` is exact, and only a
    shuffling sampler draws at its end)."""
    from torch.utils.data import BatchSampler, RandomSampler

    inner = index_sampler.sampler if type(index_sampler) is BatchSampler else index_sampler
    return type(inner) is RandomSampler


def finish_point(start_workers: int, start_prefetch: Optional[int],
                 length: Optional[int]) -> Optional[int]:
    """Batches handed out after which an untuned loader with ``start_workers`` workers and
    ``start_prefetch`` has asked its sampler for the index past the end of a ``length``-batch
    epoch: it asks for index ``k`` once ``k - workers x prefetch + 1`` batches are handed out
    (torch primes ``workers x prefetch`` indices, then sends one per batch received). ``None``
    with 0 workers (only a ``next()`` past the last batch asks) or an unknown length."""
    if not start_workers or length is None:
        return None
    return max(0, length + 1 - start_workers * (start_prefetch or 2))


class TuningIterator:
    """The iterator the consumer probe iterates in an epoch of a tuned loader: torch's
    iterators behind it, one at a time, the batches in the untuned order.

    ``tuner`` (a :class:`pipecheck.tune.tuner.Tuner`) is told each batch's wait, loop time and
    the batch (:meth:`~pipecheck.tune.tuner.Tuner.observe`) and answers with the settings to
    switch to; ``loader`` (held weakly) is only given for map-style loaders, which switch
    here, inside the epoch; otherwise the new settings wait for the next epoch. Costs two clock
    reads and one call per batch while trials run, one call after. ``len()`` and other
    attributes are the torch iterator's in use.
    """

    __slots__ = ("_tuner", "_current", "_draining", "_loader", "_clock", "_last_left",
                 "_taken", "_length", "_observing", "_bound", "_finish_at", "_recorder",
                 "__weakref__")

    def __init__(self, tuner: Any, iterator: Any, loader: Optional[Any],
                 clock: Callable[[], float], *, observing: bool = True,
                 start: Optional[Any] = None, recorder: Optional[Any] = None) -> None:
        self._tuner = tuner
        self._recorder = recorder  # a stateful loader's RecordingIndices (tune/checkpoint.py)
        self._current = iterator
        self._draining: list[Any] = []
        self._loader = weakref.ref(loader) if loader is not None else None
        self._clock = clock
        self._last_left: Optional[float] = None
        self._taken = 0
        try:
            self._length: Optional[int] = len(iterator)
        except Exception:
            self._length = None
        self._observing = observing
        # The epoch's bounded indices (BoundedIndices) when the build read a BoundedSampler:
        # their last step is taken when the start settings (``start``) would take it.
        indices = getattr(iterator, "_sampler_iter", None)
        self._bound = indices if isinstance(indices, BoundedIndices) else None
        self._finish_at = None if self._bound is None or start is None else finish_point(
            start.num_workers, start.prefetch_factor, self._length)
        if self._finish_at == 0:
            self._finish_sampler()

    def __iter__(self) -> "TuningIterator":
        return self

    def __len__(self) -> int:
        return len(self._current)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "_current"), name)

    def _next_batch(self) -> Any:
        draining = self._draining
        while draining:
            old = draining[0]
            try:
                return next(old)
            except StopIteration:
                draining.pop(0)
                following = draining[0] if draining else self._current
                set_batches_yielded(following, batches_yielded(old))
                self._tuner.retired(self._loader() if self._loader is not None else None, old)
        return next(self._current)

    def _finish_sampler(self) -> None:
        bound, self._bound = self._bound, None
        if bound is not None:
            bound.finish()

    def _handed(self) -> Any:
        """The next batch, counted; the bounded sampler's last step taken where the start
        settings take it (the loader's exceptions and StopIteration pass through)."""
        try:
            batch = self._next_batch()
        except StopIteration:
            if self._bound is not None:  # the loop asked past the last batch
                self._finish_sampler()
            if self._recorder is not None:
                self._recorder.epoch_ended()
            self._tuner.epoch_ended(self._loader() if self._loader is not None else None,
                                    self._current)
            raise
        self._taken += 1
        if self._recorder is not None:
            self._recorder.hand_out()
        if self._bound is not None and self._finish_at is not None \
                and self._taken >= self._finish_at:
            self._finish_sampler()
        return batch

    def __next__(self) -> Any:
        if not self._observing:
            return self._handed()
        clock = self._clock
        entered = clock()
        batch = self._handed()
        left = clock()
        try:
            last = self._last_left
            self._last_left = left
            settings = self._tuner.observe(left - entered,
                                           left - (entered if last is None else last), batch)
            if settings is not None:
                self._apply(settings)
            elif not self._tuner.observing:
                self._observing = False
        except Exception as err:  # tuning is off; the loop goes on with the iterator in use
            self._observing = False
            self._tuner.turn_off(err)
        return batch

    def _apply(self, settings: Any) -> None:
        """Switch to ``settings`` now when this is a map-style epoch with enough batches left
        for a trial; else they wait for the next epoch (and this epoch is no longer
        observed)."""
        loader = self._loader() if self._loader is not None else None
        left = None if self._length is None else (
            self._length - self._taken - sum(batches_outstanding(i) for i in self._draining)
            - batches_outstanding(self._current))
        if loader is None or left is None or left < self._tuner.batches_needed(settings):
            self._observing = False
            self._tuner.defer()
            return
        outstanding = batches_outstanding(self._current)
        new = switch_iterator(loader, self._current,
                              lambda attribute, sampler: self._tuner.build(
                                  loader, settings, attribute, sampler))
        self._draining.append(self._current)
        self._current = new
        self._tuner.switched(outstanding)
        if not self._tuner.observing:
            self._observing = False
