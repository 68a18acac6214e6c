"""Several ranks of one torch.distributed run side by side, and the straggler among them.

Under synchronous gradients (DDP, FSDP) every step ends in a collective, so each rank waits for
the slowest one: a rank whose loader is slow makes the others wait too, and on the fast ranks
that wait shows up inside the step (compute), not as data wait. Read alone, the fast ranks look
compute-bound and the slow rank's stall looks like its own problem. The rank with the highest
mean data wait per step is the **straggler**: its extra wait per step, above the median of the
other ranks, is time every rank loses.

Finding ``straggler-rank`` (thresholds below, printed in its evidence) when that extra wait is
at least :data:`STRAGGLER_MIN_FRACTION` of the straggler's loop time; ``ranks-missing`` when
ranks below ``world_size`` have no data. Pure functions of summaries; nothing here reads files.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable, Optional

from pipecheck.analysis.verdict import DEFAULT_COMPUTE_BOUND_STALL, DEFAULT_INPUT_BOUND_STALL
from pipecheck.kinds import FindingKind, Severity, Verdict
from pipecheck.records import ConsumerSummary, Finding, RankInfo, RankSummary, RanksSummary
from pipecheck.units import percent, rate, seconds

STRAGGLER_MIN_FRACTION = DEFAULT_COMPUTE_BOUND_STALL
"""Extra data wait of the straggler over the other ranks' median, as a 0-1 fraction of its loop
time (wait + compute), from which ``straggler-rank`` is reported: the compute-bound threshold
(3%) of :mod:`pipecheck.analysis.verdict`, below which data wait is not worth acting on."""

STRAGGLER_CRITICAL_FRACTION = DEFAULT_INPUT_BOUND_STALL
"""From this fraction (the input-bound threshold, 10%) the finding is ``critical``."""


def rank_summary(rank: RankInfo, consumer: ConsumerSummary, verdict: Verdict,
                 source: Optional[str] = None) -> RankSummary:
    """One rank's consumer side (``consumer`` from its report) as a :class:`RankSummary`."""
    per_batch = consumer.wait_s / consumer.batches if consumer.batches else None
    return RankSummary(rank=rank.rank, batches=consumer.batches, samples=consumer.samples,
                       wall_s=consumer.wall_s, wait_s=consumer.wait_s,
                       compute_s=consumer.compute_s, stall_fraction=consumer.stall_fraction,
                       samples_per_s=consumer.samples_per_s, wait_per_batch_s=per_batch,
                       verdict=verdict, hostname=rank.hostname, status=consumer.status,
                       source=source, steady_stall_fraction=consumer.steady_stall_fraction,
                       shards=(sum(len(w) for w in rank.shards)
                               if rank.shards is not None else None))


def analyze_ranks(summaries: Iterable[RankSummary],
                  world_size: int) -> tuple[RanksSummary, list[Finding]]:
    """Compare the ranks of one run. ``summaries``: at most one per rank (a later duplicate is
    ignored), each with ``0 <= rank < world_size``. Returns the side-by-side summary and the
    findings (``straggler-rank``, ``ranks-missing``). Raises ``ValueError`` for a rank outside
    ``0 .. world_size - 1`` or a ``world_size`` below 1."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    by_rank: dict[int, RankSummary] = {}
    for summary in summaries:
        if not 0 <= summary.rank < world_size:
            raise ValueError(f"rank {summary.rank} is outside world size {world_size}")
        by_rank.setdefault(summary.rank, summary)
    ranks = [by_rank[r] for r in sorted(by_rank)]
    missing = [r for r in range(world_size) if r not in by_rank]
    rates = [r.samples_per_s for r in ranks if r.samples_per_s is not None]
    findings: list[Finding] = []
    straggler = _straggler(ranks)
    if straggler is not None:
        finding = _straggler_finding(straggler, [r for r in ranks if r.rank != straggler.rank])
        if finding is not None:
            findings.append(finding)
    if missing:
        names = ", ".join(str(r) for r in missing)
        findings.append(Finding(
            kind=FindingKind.RANKS_MISSING, severity="warning",
            message=f"No data from rank(s) {names} of {world_size}: the rank died before "
            "saving, its file was not given, or it did not call report() in time; the "
            "comparison covers the other ranks only.",
            evidence={"missing_ranks": missing, "world_size": world_size}))
    return RanksSummary(world_size=world_size, ranks=ranks,
                        straggler=straggler.rank if straggler is not None else None,
                        missing=missing, samples_per_s=sum(rates) if rates else None), findings


def _straggler(ranks: list[RankSummary]) -> Optional[RankSummary]:
    measured = [r for r in ranks if r.wait_per_batch_s is not None]
    if len(measured) < 2:
        return None
    return max(measured, key=lambda r: (r.wait_per_batch_s, -r.rank))


def _straggler_finding(slow: RankSummary, others: list[RankSummary]) -> Optional[Finding]:
    other_waits = [r.wait_per_batch_s for r in others if r.wait_per_batch_s is not None]
    loop_s = slow.wait_s + slow.compute_s
    if not other_waits or not slow.batches or loop_s <= 0:
        return None
    assert slow.wait_per_batch_s is not None
    median_other = statistics.median(other_waits)
    excess_per_batch = slow.wait_per_batch_s - median_other
    excess_s = excess_per_batch * slow.batches
    fraction = excess_s / loop_s
    if fraction < STRAGGLER_MIN_FRACTION:
        return None
    severity: Severity = "critical" if fraction >= STRAGGLER_CRITICAL_FRACTION else "warning"
    other_shards = [r.shards for r in others if r.shards is not None]
    shards = ""
    evidence_shards: dict[str, Any] = {}
    if slow.shards is not None and other_shards:
        median_shards = statistics.median(other_shards)
        shards = (f" It reads {slow.shards} shards in an epoch against a median of "
                  f"{median_shards:g} on the other ranks.")
        evidence_shards = {"shards": slow.shards, "median_other_shards": median_shards}
    return Finding(
        kind=FindingKind.STRAGGLER_RANK, severity=severity,
        message=(f"Rank {slow.rank} is the straggler: it waits {seconds(slow.wait_per_batch_s)} "
                 f"for data per step against a median of {seconds(median_other)} on the other "
                 f"ranks, {seconds(excess_s)} more over its {slow.batches} steps "
                 f"({percent(fraction)} of its loop time, threshold "
                 f"{percent(STRAGGLER_MIN_FRACTION, 0)}); under synchronous gradients every "
                 f"rank waits that long too. Its stall is {percent(slow.stall_fraction)} at "
                 f"{rate(slow.samples_per_s, 'samples')}: fix its loader (see its report) or "
                 f"rebalance its data.{shards}"),
        evidence={"rank": slow.rank, "wait_per_batch_s": slow.wait_per_batch_s,
                  "median_other_wait_per_batch_s": median_other,
                  "excess_wait_s": excess_s, "excess_fraction": fraction,
                  "threshold_fraction": STRAGGLER_MIN_FRACTION,
                  "stall_fraction": slow.stall_fraction, "samples_per_s": slow.samples_per_s,
                  **evidence_shards})
