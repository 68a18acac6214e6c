"""GPU idle caused by data: CUDA events recorded on the current stream at ``next()`` entry and
exit, resolved lazily, never synchronizing in the training loop.

The entry event completes when the stream has finished everything queued before ``next()``; the
exit event, recorded when ``next()`` returns, completes at once if the stream had run dry. The
stream time between them is therefore the time the GPU sat idle because the host was still
waiting for the batch (zero when the GPU was still busy with earlier steps). Pairs are resolved
with ``query()`` (non-blocking) at later ``next()`` calls and at snapshot time; a pair not yet
complete stays pending. Events come from a fixed pool (:data:`DEFAULT_POOL_SIZE`); when all are
pending the batch is not timed and counted as ``dropped``, so memory is bounded.

The CUDA calls sit behind :class:`EventBackend` (``new_event``, ``record``, ``query``,
``elapsed_s``): :class:`TorchCudaEvents` in production, a fake in the tests. ``record`` and
``query`` cost a few microseconds each on the host.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Optional, Protocol

from pipecheck.records import DeviceRecord

DEFAULT_POOL_SIZE = 256
"""Events in the pool (two per timed batch): enough for 128 batches the GPU has not reached yet."""

PINNED_CHECK_EVERY = 64
"""Check whether the batch's tensors are page-locked on one batch in this many."""


class EventBackend(Protocol):
    """The four operations the probe needs from a device's event API."""

    name: str

    def new_event(self) -> Any:
        """A reusable timing event."""

    def record(self, event: Any) -> None:
        """Enqueue ``event`` on the current stream (non-blocking)."""

    def query(self, event: Any) -> bool:
        """Whether the stream has reached ``event`` (non-blocking)."""

    def elapsed_s(self, start: Any, end: Any) -> float:
        """Stream seconds between two completed events."""


class TorchCudaEvents:
    """:class:`EventBackend` over ``torch.cuda.Event(enable_timing=True)`` on the current
    stream. Raises ``RuntimeError`` when CUDA is not available."""

    name = "torch.cuda"

    def __init__(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available")
        self._torch = torch

    def new_event(self) -> Any:
        return self._torch.cuda.Event(enable_timing=True)

    def record(self, event: Any) -> None:
        event.record()

    def query(self, event: Any) -> bool:
        return bool(event.query())

    def elapsed_s(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1e3  # torch returns milliseconds


def cuda_backend() -> Optional[TorchCudaEvents]:
    """The CUDA backend when torch sees a GPU, else ``None`` (the probe is then not used)."""
    try:
        return TorchCudaEvents()
    except Exception:  # no torch CUDA build, no device, driver errors
        return None


class DeviceProbe:
    """Times GPU idle around ``next()`` with a pooled :class:`EventBackend`.

    A :class:`~pipecheck.probes.base.BatchObserver`: the consumer probe's epoch iterator calls
    it around each ``next()`` and it records an event before and after.
    :meth:`record` resolves what it can without blocking. ``pool_size`` (an
    even number >= 2) bounds the events in flight; ``ValueError`` otherwise.
    """

    name = "device"

    def __init__(self, backend: EventBackend, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        if pool_size < 2 or pool_size % 2:
            raise ValueError(f"pool_size must be an even number >= 2, got {pool_size!r}")
        self._backend = backend
        self._free = [backend.new_event() for _ in range(pool_size)]
        self._pending: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._batches = 0
        self._idle_s = 0.0
        self._first_entry: Any = None
        self._span_end: Any = None
        self._dropped = 0
        self._pinned_checked = 0
        self._pinned = 0
        self._seen = 0
        self._pair: Optional[list] = None  # the events of the next() under way

    def attach(self, iterator: Any) -> bool:
        """Observe every epoch (:class:`~pipecheck.probes.base.BatchObserver`)."""
        self._pair = None
        return True

    def before_next(self) -> None:
        """At ``next()`` entry: record the entry event (when the pool allows)."""
        self._pair = self._begin()

    def after_next(self, wait_s: float, batch: Any = None) -> None:
        """``next()`` returned ``batch``: record the exit event; on one batch in
        :data:`PINNED_CHECK_EVERY`, check whether its tensors are page-locked."""
        pair, self._pair = self._pair, None
        self._end(pair)
        self._check_pinned(batch)

    def after_raise(self) -> None:
        """``next()`` raised (or ended the epoch): no batch to attribute."""
        pair, self._pair = self._pair, None
        self._abandon(pair)

    def start(self) -> None:
        """Nothing to start: events are recorded from the epoch iterator."""

    def stop(self) -> None:
        """Nothing to stop: pending events are resolved by :meth:`record`."""

    def _begin(self) -> Optional[list]:
        with self._lock:
            self._resolve()
            if len(self._free) < 2:
                return None
            start, end = self._free.pop(), self._free.pop()
        self._backend.record(start)
        return [start, end]

    def _end(self, pair: Optional[list]) -> None:
        if pair is None:  # a batch arrived that the exhausted pool could not time
            with self._lock:
                self._dropped += 1
            return
        self._backend.record(pair[1])
        with self._lock:
            self._pending.append(pair)

    def _abandon(self, pair: Optional[list]) -> None:
        """The ``next()`` raised (or ended the epoch): no batch to attribute; reuse the events
        once the stream has passed the entry event."""
        if pair is None:
            return
        self._backend.record(pair[1])
        with self._lock:
            pair.append("abandoned")
            self._pending.append(pair)

    def _resolve(self) -> None:
        """Fold completed pairs, oldest first (the stream completes them in order). Caller
        holds the lock."""
        backend = self._backend
        while self._pending and backend.query(self._pending[0][1]):
            pair = self._pending.popleft()
            start, end = pair[0], pair[1]
            if len(pair) == 2:
                self._idle_s += backend.elapsed_s(start, end)
                self._batches += 1
                if self._first_entry is None:
                    self._first_entry = start
                    self._free.append(backend.new_event())  # keep the anchor out of the pool
                else:
                    self._free.append(start)
                # The latest exit event stays out of the pool as the span's end; the one it
                # replaces goes back (the first time, a new event keeps the pool at its size,
                # else a pool of 2 would never time a second batch).
                self._free.append(self._span_end if self._span_end is not None
                                  else backend.new_event())
                self._span_end = end
            else:
                self._free.extend((start, end))

    def _check_pinned(self, batch: Any) -> None:
        self._seen += 1
        if (self._seen - 1) % PINNED_CHECK_EVERY:
            return
        pinned = _is_pinned(batch)
        if pinned is not None:
            with self._lock:
                self._pinned_checked += 1
                self._pinned += pinned

    def record(self) -> DeviceRecord:
        """Everything resolved so far (non-blocking); pairs the stream has not reached yet are
        counted as ``unresolved``."""
        with self._lock:
            self._resolve()
            span_s = None
            if self._first_entry is not None and self._span_end is not None:
                span_s = self._backend.elapsed_s(self._first_entry, self._span_end)
            return DeviceRecord(
                status="ok" if self._batches else "no-data",
                backend=self._backend.name,
                batches=self._batches,
                idle_s=self._idle_s if self._batches else None,
                idle_fraction=self._idle_s / span_s if span_s else None,
                unresolved=sum(1 for p in self._pending if len(p) == 2),
                dropped=self._dropped,
                pinned_fraction=self._pinned / self._pinned_checked if self._pinned_checked
                else None,
            )


def _is_pinned(batch: Any) -> Optional[bool]:
    """Whether the first CPU tensor found in ``batch`` is page-locked; ``None`` without one."""
    stack = [batch]
    for _ in range(1000):
        if not stack:
            return None
        value = stack.pop()
        is_pinned = getattr(value, "is_pinned", None)
        if callable(is_pinned) and getattr(value, "device", None) is not None:
            if getattr(value.device, "type", None) == "cpu":
                return bool(is_pinned())
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return None
