"""What every probe a :class:`pipecheck.wrap.WrappedLoader` drives has in common.

Two small protocols (structural: a probe needs no base class):

* :class:`Probe`: ``name`` (its key in ``RunRecord.probes_off``), ``start()`` (at each
  ``iter()``; idempotent), ``stop()`` (when the wrapper is closed or collected; idempotent) and
  ``record()``, the one read-out name: what the probe measured so far, as the record type
  ``RunRecord`` holds for it. The wrapper calls each of them in one loop; a probe that raises
  is turned off with a note in ``RunRecord.probes_off`` and the run goes on.
* :class:`BatchObserver`: a probe that sees every ``next()`` of an epoch. The consumer probe's
  epoch iterator (:class:`pipecheck.probes.consumer_iterator.EpochIterator`) is the one iterator between
  the training loop and the loader; it calls each observer around each ``next()``, so a batch
  passes through one Python iterator whatever the number of observers.

No torch here: the protocols are plain typing.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Probe(Protocol):
    """The lifecycle the wrapper drives (see the module docstring)."""

    name: str

    def start(self) -> None:
        """Begin measuring (at every ``iter()``; a running probe ignores it)."""

    def stop(self) -> None:
        """Stop measuring and release threads and files (idempotent)."""

    def record(self) -> Any:
        """Everything measured so far (safe at any time, during an epoch too)."""


@runtime_checkable
class BatchObserver(Protocol):
    """Called by the epoch iterator around every ``next()``, in the thread that iterates.

    ``attach(iterator)`` is called once per epoch with the loader's iterator; ``False`` leaves
    this epoch unobserved. Then, per ``next()``: ``before_next()``, and either
    ``after_next(wait_s, batch)`` (``wait_s``: seconds the call blocked, by the consumer
    probe's clock) or ``after_raise()`` (the call raised, ``StopIteration`` included). An
    observer that raises is dropped for the rest of the run with a note; the batch and the
    user's exception pass through untouched.
    """

    name: str

    def attach(self, iterator: Any) -> bool:
        """Follow a new epoch's ``iterator``; whether to observe this epoch."""

    def before_next(self) -> None:
        """At ``next()`` entry."""

    def after_next(self, wait_s: float, batch: Any = None) -> None:
        """After ``next()`` returned ``batch`` having blocked ``wait_s`` seconds."""

    def after_raise(self) -> None:
        """After ``next()`` raised (no batch)."""
