"""Head-of-line blocking from :class:`pipecheck.probes.hol.HeadOfLineProbe` totals: how much of
the data wait was spent on one batch while later batches were already done, and whose worker.

The fix, ``in_order=False`` with its expected effect, is proposed by
:func:`pipecheck.recommend.head_of_line.in_order_recommendation`.
"""

from __future__ import annotations

from typing import Optional

from pipecheck.analysis.verdict import DEFAULT_COMPUTE_BOUND_STALL
from pipecheck.kinds import FindingKind
from pipecheck.records import Finding, HeadOfLineSummary

SHARE_OF_WAIT_THRESHOLD = 0.25
"""Blocked wait / data wait (0-1) from which ``head-of-line-blocking`` is reported
(pipecheck's choice)."""

SHARE_OF_LOOP_THRESHOLD = DEFAULT_COMPUTE_BOUND_STALL
"""Blocked wait / loop time (0-1) from which it is reported: the compute-bound verdict's
threshold (3 %, :mod:`pipecheck.analysis.verdict`), below which data wait is not worth acting
on."""


IMBALANCE_THRESHOLD = 1.25
"""Slowest / fastest worker's mean batch time from which blocked waits are blamed on a slow
worker (pipecheck's choice: below it the waits are the jitter any balanced pipeline shows, and
out-of-order delivery would gain little)."""


def head_of_line_finding(summary: Optional[HeadOfLineSummary], loop_s: float,
                         worker_batch_s: dict[str, float]) -> Optional[Finding]:
    """``head-of-line-blocking`` when the blocked wait passes both thresholds and the worker
    that caused most of it is slower per batch than the fastest by :data:`IMBALANCE_THRESHOLD`
    or more; else ``None``. ``loop_s`` is the consumer's wait + compute seconds;
    ``worker_batch_s`` maps worker id (text) to its mean production time per batch in seconds
    (the worker probe's busy time / batches)."""
    if summary is None or summary.status != "ok" or loop_s <= 0:
        return None
    blocked = summary.blocked_wait_s
    wait = summary.wait_s
    if wait <= 0 or blocked / wait < SHARE_OF_WAIT_THRESHOLD \
            or blocked / loop_s < SHARE_OF_LOOP_THRESHOLD:
        return None
    by_worker = summary.blocked_s_by_worker
    if not by_worker:
        return None
    worst, worst_s = max(by_worker.items(), key=lambda kv: kv[1])
    times = [t for t in worker_batch_s.values() if t > 0]
    if worst not in worker_batch_s or not times \
            or worker_batch_s[worst] < IMBALANCE_THRESHOLD * min(times):
        return None
    ready = summary.mean_ready_later
    return Finding(
        FindingKind.HEAD_OF_LINE_BLOCKING, "warning",
        f"{blocked / wait:.0%} of the data wait ({blocked:.2f} s, {blocked / loop_s:.1%} of "
        f"loop time) was spent on one batch while later ones were done"
        + (f" ({ready:.1f} on average)" if ready is not None else "")
        + f"; worker {worst}'s batches ({worker_batch_s[worst] * 1e3:.1f} ms each vs "
          f"{min(times) * 1e3:.1f} ms for the fastest worker) caused {worst_s / blocked:.0%} "
          f"of it",
        {"blocked_wait_s": blocked, "wait_s": wait, "loop_s": loop_s,
         "blocked_fraction_of_wait": blocked / wait, "mean_ready_later": ready,
         "worst_worker": worst, "worst_worker_blocked_s": worst_s,
         "worst_worker_batch_s": worker_batch_s[worst], "fastest_worker_batch_s": min(times)})
