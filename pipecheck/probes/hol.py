"""Head-of-line blocking: at each ``next()`` on a multi-worker DataLoader iterator, which worker
the consumer is about to wait on, and how many later batches have already arrived.

With ``in_order=True`` (torch's default) torch's ``_MultiProcessingDataLoaderIter`` returns
batch ``_rcvd_idx`` next; ``_task_info[idx]`` is ``(worker_id,)`` while batch ``idx`` is out
and ``(worker_id, data)`` once it arrived ahead of its turn. Reading both at ``next()`` entry
tells whose batch the consumer waits for and how many later batches sit done meanwhile. These
are private attributes: :meth:`HeadOfLineProbe.attach` checks they exist with the expected
types (torch 1.x to 2.13 keep them) and otherwise the probe stays off and says why.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional

from pipecheck._torch_compat import awaited_batch, head_of_line_unsupported
from pipecheck.kinds import HeadOfLineStatus
from pipecheck.records import HeadOfLineSummary


class HeadOfLineProbe:
    """Per-batch head-of-line bookkeeping (two short calls per batch; the scan covers at most
    ``prefetch_factor x num_workers`` entries). Totals only, no per-batch storage. A
    :class:`~pipecheck.probes.base.Probe` and a
    :class:`~pipecheck.probes.base.BatchObserver` (the consumer probe's epoch iterator calls
    it; the waits it accounts are the consumer's)."""

    name = "head_of_line"

    def __init__(self) -> None:
        self.status: HeadOfLineStatus = "off"
        self.note: Optional[str] = "not attached"
        self._iterator: Optional[Callable[[], Any]] = None  # the epoch's iterator, weakly
        self._worker: Optional[int] = None
        self._ready_later = 0
        self.waits = 0
        self.wait_s = 0.0
        self.blocked_waits = 0
        self.blocked_wait_s = 0.0
        self.ready_later_sum = 0
        self.wait_s_by_worker: dict[int, float] = {}
        self.blocked_s_by_worker: dict[int, float] = {}

    def attach(self, iterator: Any) -> bool:
        """Follow ``iterator`` (a new epoch's). True when it is an in-order multi-worker
        iterator with the expected private state; otherwise the probe is off with a note."""
        self._iterator = None
        reason = head_of_line_unsupported(iterator)
        if reason is not None:
            self.status = "unavailable" if "_task_info" in reason else "off"
            self.note = reason
            return False
        try:  # weakly: the user's iterator (its workers, its dataset) stays theirs to drop
            self._iterator = weakref.ref(iterator)
        except TypeError:  # not a torch iterator (they all can be): held for this epoch only
            self._iterator = lambda: iterator
        self.status, self.note = "ok", None
        return True

    def before_next(self) -> None:
        """At ``next()`` entry: note the awaited batch's worker and the later ones done."""
        iterator = self._iterator() if self._iterator is not None else None
        if iterator is None:
            self._worker = None
            return
        info, head = awaited_batch(iterator)
        awaited = info.get(head)
        self._worker = awaited[0] if awaited else None
        # The awaited batch itself may have arrived already (out of turn, earlier): then
        # nothing blocks this next(), and it is not a *later* batch either.
        self._ready_later = 0 if awaited is None or len(awaited) == 2 else sum(
            1 for idx, entry in info.items() if idx != head and len(entry) == 2)

    def after_next(self, wait_s: float, batch: Any = None) -> None:
        """After ``next()`` returned: account ``wait_s`` seconds of waiting (measured by the
        consumer probe's clock) to that worker. ``batch`` is not looked at."""
        worker = self._worker
        if self._iterator is None or worker is None:
            return
        self.waits += 1
        self.wait_s += wait_s
        self.wait_s_by_worker[worker] = self.wait_s_by_worker.get(worker, 0.0) + wait_s
        if self._ready_later:
            self.blocked_waits += 1
            self.blocked_wait_s += wait_s
            self.ready_later_sum += self._ready_later
            self.blocked_s_by_worker[worker] = self.blocked_s_by_worker.get(worker, 0.0) + wait_s

    def after_raise(self) -> None:
        """``next()`` raised: no batch, no wait to account."""
        self._worker = None

    def start(self) -> None:
        """Nothing to start: the probe follows each epoch from :meth:`attach`."""

    def stop(self) -> None:
        """Stop following the current epoch's iterator."""
        self._iterator = None

    def record(self) -> HeadOfLineSummary:
        """The totals so far (:class:`~pipecheck.records.HeadOfLineSummary`: seconds waited,
        seconds waited while later batches were done, batches done ahead during those waits,
        both by worker id as text)."""
        return HeadOfLineSummary(
            status=self.status, note=self.note, waits=self.waits,
            wait_s=self.wait_s, blocked_waits=self.blocked_waits,
            blocked_wait_s=self.blocked_wait_s,
            mean_ready_later=(self.ready_later_sum / self.blocked_waits
                              if self.blocked_waits else None),
            wait_s_by_worker={str(k): v for k, v in sorted(self.wait_s_by_worker.items())},
            blocked_s_by_worker={str(k): v
                                 for k, v in sorted(self.blocked_s_by_worker.items())},
        )
