"""Several ranks of one torch.distributed run side by side, and the straggler among them.

Under synchronous gradients (DDP, FSDP) every step ends in a collective, so each rank waits for
the slowest one: a rank whose loader is slow makes the others wait too, and on the fast ranks
that wait shows up inside the step (compute), not as data wait. Read alone, the fast ranks look
compute-bound and the slow rank's stall looks like its own problem. The rank with the highest
mean data wait per step is the **straggler**: its extra wait per step, above the median of the
other ranks, is time every rank loses.

Finding ``straggler-rank`` (thresholds below, printed in its evidence) when that extra wait is
at least :data:`STRAGGLER_MIN_FRACTION` of the straggler's loop time; ``ranks-missing`` when
ranks below ``world_size`` have no data. :func:`job_shape` says how the wait is spread over
ranks and nodes and whether the straggler is one rank, one node or the whole job. Pure
functions of summaries (each a few hundred bytes: the cost grows with the ranks, never with
their timelines); nothing here reads files.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import statistics
from typing import Any, Iterable, Optional, Sequence

from pipecheck.analysis.verdict import DEFAULT_COMPUTE_BOUND_STALL, DEFAULT_INPUT_BOUND_STALL
from pipecheck.kinds import FindingKind, Severity, Verdict
from pipecheck.records import (ConsumerSummary, Finding, JobShape, NodeSummary, RankInfo,
                               RankSummary, RanksSummary, Recommendation, TunedRanks,
                               TuneSection)
from pipecheck.units import percent, rate, seconds

STRAGGLER_MIN_FRACTION = DEFAULT_COMPUTE_BOUND_STALL
"""Extra data wait of the straggler over the other ranks' median, as a 0-1 fraction of its loop
time (wait + compute), from which ``straggler-rank`` is reported: the compute-bound threshold
(3%) of :mod:`pipecheck.analysis.verdict`, below which data wait is not worth acting on."""

STRAGGLER_CRITICAL_FRACTION = DEFAULT_INPUT_BOUND_STALL
"""From this fraction (the input-bound threshold, 10%) the finding is ``critical``."""

NODE_SHARE = 0.5
"""The straggler is called a **node** when the slowest node's median rank carries at least this
share of the straggler rank's extra wait (and that extra wait is itself at least
:data:`STRAGGLER_MIN_FRACTION` of the loop time): a cause shared by a node (its disk, network,
CPUs, a noisy neighbour) slows most of its ranks, so its median rank is about as slow as its
slowest; one bad rank (its shards, its worker count) leaves its node's median near the job's."""

SLOWEST_LISTED = 5
"""Slowest ranks and nodes kept in :class:`~pipecheck.records.JobShape` (the JSON and the
terminal show these; every rank is in ``ranks``)."""

TUNED_RANKS_LISTED = 8
"""Ranks named for each group of :attr:`~pipecheck.records.RanksSummary.tuned` (the rest are
counted), and groups named in the ``ranks-tuned-differently`` finding."""

RANK_FINDINGS = frozenset({FindingKind.STRAGGLER_RANK, FindingKind.RANKS_MISSING,
                           FindingKind.GATHER_FAILED, FindingKind.RANKS_TUNED_DIFFERENTLY})
"""Finding kinds about the ranks together, not about one rank's own loader."""

_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def rank_summary(rank: RankInfo, consumer: ConsumerSummary, verdict: Verdict,
                 source: Optional[str] = None, findings: Sequence[Finding] = (),
                 recommendations: Sequence[Recommendation] = (),
                 tune: Optional[TuneSection] = None) -> RankSummary:
    """One rank's consumer side (``consumer`` from its report) as a :class:`RankSummary`, with
    the kind of its most severe own finding (``findings``: its report's, rank findings left
    out), the setting of its first recommendation and the settings its online tuning kept
    (``tune``: its report's tune section)."""
    per_batch = consumer.wait_s / consumer.batches if consumer.batches else None
    own = [f for f in findings if f.kind not in RANK_FINDINGS]
    top = min(own, key=lambda f: _SEVERITY_RANK.get(f.severity, 3)) if own else None
    return RankSummary(rank=rank.rank, batches=consumer.batches, samples=consumer.samples,
                       wall_s=consumer.wall_s, wait_s=consumer.wait_s,
                       compute_s=consumer.compute_s, stall_fraction=consumer.stall_fraction,
                       samples_per_s=consumer.samples_per_s, wait_per_batch_s=per_batch,
                       verdict=verdict, hostname=rank.hostname, status=consumer.status,
                       source=source, steady_stall_fraction=consumer.steady_stall_fraction,
                       shards=(sum(len(w) for w in rank.shards)
                               if rank.shards is not None else None),
                       local_rank=rank.local_rank, top_finding=top.kind if top else None,
                       top_recommendation=(recommendations[0].setting if recommendations
                                           else None),
                       tuned=(tune.chosen.short_label()
                              if tune is not None and tune.chosen is not None else None))


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
    shape = job_shape(ranks)
    if straggler is not None:
        finding = _straggler_finding(straggler, [r for r in ranks if r.rank != straggler.rank])
        if finding is not None:
            if shape.scope == "node":  # a node-wide cause: say so where the rank is named
                finding = dataclasses.replace(
                    finding, message=f"{finding.message} Most of its node's ranks are slow too "
                    f"({shape.scope_reason}): look at the node (its storage, network, CPUs, "
                    "other jobs on it) before this rank's loader.",
                    evidence={**finding.evidence, "scope": shape.scope,
                              "node": shape.slowest_nodes[0]})
            findings.append(finding)
    if missing:
        names = ", ".join(str(r) for r in missing)
        findings.append(Finding(
            kind=FindingKind.RANKS_MISSING, severity="warning",
            message=f"No data from rank(s) {names} of {world_size}: the rank died before "
            "saving, its file was not given, or it did not call report() in time; the "
            "comparison covers the other ranks only.",
            evidence={"missing_ranks": missing, "world_size": world_size}))
    tuned = tuned_groups(ranks)
    if len(tuned) >= 2:
        findings.append(_tuned_differently_finding(tuned, straggler))
    return RanksSummary(world_size=world_size, ranks=ranks,
                        straggler=straggler.rank if straggler is not None else None,
                        missing=missing, samples_per_s=sum(rates) if rates else None,
                        shape=shape, tuned=tuned), findings


def tuned_groups(ranks: Iterable[RankSummary]) -> list[TunedRanks]:
    """The settings online tuning kept (:attr:`RankSummary.tuned`), grouped: most ranks
    first, ties by settings; ranks that did not tune are left out. O(ranks)."""
    members: dict[str, list[int]] = {}
    counts: dict[str, int] = {}
    for summary in ranks:
        if summary.tuned is None:
            continue
        counts[summary.tuned] = counts.get(summary.tuned, 0) + 1
        listed = members.setdefault(summary.tuned, [])
        if len(listed) < TUNED_RANKS_LISTED:
            listed.append(summary.rank)
    return [TunedRanks(settings=s, ranks=counts[s], first_ranks=sorted(members[s]))
            for s in sorted(counts, key=lambda s: (-counts[s], s))]


def _tuned_differently_finding(groups: Sequence[TunedRanks],
                               straggler: Optional[RankSummary]) -> Finding:
    """``ranks-tuned-differently``: each rank kept what was fastest for itself, but under
    synchronous gradients the job runs at its slowest rank's pace, so one setting should hold
    on every rank."""
    def named(group: TunedRanks) -> str:
        listed = ", ".join(map(str, group.first_ranks))
        more_ranks = group.ranks - len(group.first_ranks)
        return (f"{group.settings} on {group.ranks:,} rank(s) ({listed}"
                f"{f' and {more_ranks:,} more' if more_ranks > 0 else ''})")

    shown = "; ".join(named(g) for g in groups[:TUNED_RANKS_LISTED])
    if len(groups) > TUNED_RANKS_LISTED:
        shown += f"; {len(groups) - TUNED_RANKS_LISTED:,} more settings"
    pin = groups[0].settings
    if straggler is not None and straggler.tuned is not None:
        pin = straggler.tuned
        which = f"the straggler's (rank {straggler.rank})"
    else:
        which = "the most common"
    return Finding(
        kind=FindingKind.RANKS_TUNED_DIFFERENTLY, severity="warning",
        message=f"Online tuning kept different loader settings on different ranks: {shown}. "
        "Each rank measured its own loop, but under synchronous gradients every rank waits "
        f"for the slowest, so pin one setting on every rank: {which}, {pin}.",
        evidence={"groups": len(groups), "settings": [g.settings for g in groups],
                  "ranks": [g.ranks for g in groups], "pin": pin})



def node_of(rank: RankSummary) -> str:
    """The node ``rank`` ran on: its ``hostname``; without one, ``ranks from K`` where K is
    the node's first rank (``rank - local_rank``, torchrun's contiguous layout); ``unknown``
    without either."""
    if rank.hostname:
        return rank.hostname
    if rank.local_rank is not None and rank.local_rank <= rank.rank:
        return f"ranks from {rank.rank - rank.local_rank}"
    return "unknown"


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0-1) of ``ordered`` (sorted, not empty)."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def job_shape(ranks: Sequence[RankSummary]) -> JobShape:
    """How the mean data wait per step is spread over ``ranks`` (at most one summary per rank)
    and their nodes (:func:`node_of`), and where the straggler's extra wait comes from.

    The rule, with the straggler the rank of highest wait per step and its **loop time** its
    wait plus compute per step (seconds):

    * ``node`` when there are 2+ nodes, the slowest node (highest median wait per step) has 2+
      ranks, and its median rank waits longer than the median of the ranks on other nodes by
      at least :data:`STRAGGLER_MIN_FRACTION` (3%) of the loop time *and* by at least
      :data:`NODE_SHARE` (half) of the straggler rank's own extra wait: most of that node's
      ranks are slow, so the cause is the node's;
    * else ``rank`` when the straggler waits longer than the median of the other ranks by at
      least 3% of its loop time (the compute-bound threshold, below which data wait is not
      worth acting on): one rank's loader or data;
    * else ``job`` when the median rank's stall (``stall_fraction``) is itself at least 3%:
      every rank waits about alike, so the pipeline, not a rank, is slow;
    * else ``none``.

    O(ranks log ranks) time, O(ranks) memory; nothing about a rank but its summary is read.
    """
    measured = [r for r in ranks if r.wait_per_batch_s is not None]
    waits = sorted(r.wait_per_batch_s for r in measured if r.wait_per_batch_s is not None)
    by_node: dict[str, list[RankSummary]] = {}
    for rank in ranks:
        by_node.setdefault(node_of(rank), []).append(rank)
    nodes = []
    for name in sorted(by_node):
        members = by_node[name]
        node_waits = sorted(r.wait_per_batch_s for r in members if r.wait_per_batch_s is not None)
        slowest = max((r for r in members if r.wait_per_batch_s is not None),
                      key=lambda r: (r.wait_per_batch_s, -r.rank), default=None)
        nodes.append(NodeSummary(
            node=name, ranks=len(members),
            wait_per_batch_median_s=statistics.median(node_waits) if node_waits else None,
            wait_per_batch_max_s=node_waits[-1] if node_waits else None,
            slowest_rank=slowest.rank if slowest is not None else None,
            failed=sum(1 for r in members if r.failed)))
    timed_nodes = [n for n in nodes if n.wait_per_batch_median_s is not None]
    slowest_nodes = heapq.nlargest(SLOWEST_LISTED, timed_nodes,
                                   key=lambda n: n.wait_per_batch_median_s or 0.0)
    slowest_ranks = heapq.nlargest(SLOWEST_LISTED, measured,
                                   key=lambda r: (r.wait_per_batch_s or 0.0, -r.rank))
    spread = None
    if len(timed_nodes) >= 2:
        medians = [n.wait_per_batch_median_s for n in timed_nodes
                   if n.wait_per_batch_median_s is not None]
        spread = max(medians) - min(medians)
    scope, reason = _scope(measured, waits, by_node, slowest_nodes)
    return JobShape(
        wait_per_batch_p50_s=_quantile(waits, 0.5) if waits else None,
        wait_per_batch_p90_s=_quantile(waits, 0.9) if waits else None,
        wait_per_batch_max_s=waits[-1] if waits else None,
        node_spread_s=spread,
        slowest_ranks=[r.rank for r in slowest_ranks],
        slowest_nodes=[n.node for n in slowest_nodes],
        scope=scope, scope_reason=reason, nodes=nodes,
        failed=[r.rank for r in ranks if r.failed])


def _scope(measured: list[RankSummary], waits: list[float],
           by_node: dict[str, list[RankSummary]],
           slowest_nodes: list[NodeSummary]) -> tuple[Any, str]:
    """``(scope, reason)`` by :func:`job_shape`'s rule."""
    if len(measured) < 2:
        return "none", "fewer than 2 ranks measured"
    slow = max(measured, key=lambda r: (r.wait_per_batch_s or 0.0, -r.rank))
    loop_s = (slow.wait_s + slow.compute_s) / slow.batches if slow.batches else 0.0
    if loop_s <= 0:
        return "none", "the straggler has no loop time"
    assert slow.wait_per_batch_s is not None
    rank_excess = slow.wait_per_batch_s - statistics.median(waits[:-1])  # waits sorted: max last
    rank_fraction = rank_excess / loop_s
    threshold = percent(STRAGGLER_MIN_FRACTION, 0)
    if len(by_node) >= 2 and slowest_nodes and slowest_nodes[0].ranks >= 2:
        node = slowest_nodes[0]
        others = [r.wait_per_batch_s for name, members in by_node.items() if name != node.node
                  for r in members if r.wait_per_batch_s is not None]
        if others and node.wait_per_batch_median_s is not None:
            node_excess = node.wait_per_batch_median_s - statistics.median(others)
            node_fraction = node_excess / loop_s
            if node_fraction >= STRAGGLER_MIN_FRACTION and node_excess >= NODE_SHARE * rank_excess:
                return "node", (
                    f"node {node.node}: its median rank waits {seconds(node_excess)} per step "
                    f"more than the other nodes' ranks ({percent(node_fraction)} of the loop "
                    f"time, threshold {threshold}; at least {NODE_SHARE:.0%} of rank "
                    f"{slow.rank}'s {seconds(rank_excess)})")
    if rank_fraction >= STRAGGLER_MIN_FRACTION:
        return "rank", (f"rank {slow.rank}: it waits {seconds(rank_excess)} per step more than "
                        f"the other ranks' median ({percent(rank_fraction)} of its loop time, "
                        f"threshold {threshold}), not most of its node's ranks")
    stalls = sorted(r.stall_fraction for r in measured if r.stall_fraction is not None)
    if stalls and _quantile(stalls, 0.5) >= STRAGGLER_MIN_FRACTION:
        return "job", (f"every rank: the median rank's stall is {percent(_quantile(stalls, 0.5))}"
                       f" (threshold {threshold}) and no rank or node stands out")
    return "none", (f"no rank, node or job-wide wait reaches {threshold} of the loop time")


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
