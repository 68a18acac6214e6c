"""Judging a shard assignment: which (rank, worker) reads what, and what that costs.

Input: shard sample counts (:class:`pipecheck.probes.shards.ShardStat`) and the replayed
assignment (:func:`pipecheck.probes.shards.replay_split`). Output: the report's ``sharding``
section (:func:`analyze_sharding`) with its findings; the changes they call for are proposed by
:func:`pipecheck.recommend.sharding.sharding_recommendations`.

Model: every worker reads its shards' samples at the same per-sample cost, so a worker's share
of the epoch is its share of samples. In a DataLoader over an ``IterableDataset`` each worker
batches its own samples, so a worker with ``s`` samples yields ``ceil(s / batch_size)``
batches (``floor`` with ``drop_last``) and a rank yields the sum over its workers.

* epoch-end idle share (``shard-imbalance``): ``1 - mean / max`` samples per worker over all
  workers of all ranks: the share of worker time spent idle while the busiest worker finishes;
* ``unequal-rank-batches``: ranks yield different batch counts. Under DistributedDataParallel
  every step is a collective, so the ranks with more batches wait in it for ranks that have
  finished: a hang, or an error when the collective times out (torch DDP documentation on
  uneven inputs, the reason ``Join`` exists);
* ``shard-size-skew``: largest vs median shard samples;
* ``small-shuffle-buffer``: a ``shuffle`` buffer smaller than a shard only mixes neighbouring
  samples of the shard being read, so batches hold samples of one or two shards.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any, Optional, Sequence

from pipecheck.kinds import FindingKind
from pipecheck.probes.shards import ShardStat
from pipecheck.records import (
    Finding,
    ShardingSection,
    ShardRank,
    ShardReader,
)

IMBALANCE_THRESHOLD = 0.10
"""Epoch-end idle share (0-1) from which ``shard-imbalance`` is reported (pipecheck's choice:
below a tenth of the epoch's worker time the tail is within run-to-run noise)."""

SKEW_THRESHOLD = 2.0
"""Largest / median shard samples from which ``shard-size-skew`` is reported (pipecheck's
choice: twice the median makes one shard's worker finish last by a whole shard)."""


def analyze_sharding(stats: Sequence[ShardStat], assignment: dict[tuple[int, int], list[str]],
                     *, world_size: int, num_workers: int, batch_size: Optional[int] = None,
                     drop_last: bool = False, shuffle_buffer: Optional[int] = None,
                     resampled: bool = False, world_size_source: str = "given",
                     splitters: Optional[dict[str, Any]] = None) -> ShardingSection:
    """The ``sharding`` section for ``assignment`` (``(rank, worker) -> shard URLs``).

    ``samples_total`` is ``None`` when a shard could not be counted or estimated;
    ``assignments`` lists every (rank, worker) reader in order, ``ranks`` each rank's samples
    and batches (``batches`` needs ``batch_size``); ``splitters`` names the split:
    ``{node, worker}`` by default, or ``{chain: [...]}`` for a loader's own.
    ``resampled=True`` (shards drawn with replacement, epochs set by ``with_epoch``) skips the
    checks that depend on a fixed split.
    """
    samples_of = {s.url: s.samples for s in stats}
    known = all(v is not None for v in samples_of.values())
    assignments = [ShardReader(rank=rank, worker=worker, shards=len(urls),
                               samples=(sum(samples_of.get(u) or 0.0 for u in urls) if known
                                        else None))
                   for (rank, worker), urls in sorted(assignment.items())]
    ranks = _ranks(assignments, batch_size, drop_last)
    per_worker = [a.samples if a.samples is not None else float(a.shards) for a in assignments]
    idle = 1.0 - (sum(per_worker) / len(per_worker)) / max(per_worker) if max(per_worker) else None
    findings: list[Finding] = []
    readers = len(assignments)
    if not resampled:
        _empty_workers(assignments, len(stats), readers, findings)
        _imbalance(idle, per_worker, known, len(stats), readers, findings)
        _unequal_ranks(ranks, batch_size, findings)
    _skew(stats, findings)
    _shuffle_buffer(stats, shuffle_buffer, findings)
    return ShardingSection(
        world_size=world_size,
        num_workers=num_workers,
        world_size_source=world_size_source,
        splitters=splitters or {"node": "split_by_node", "worker": "split_by_worker"},
        shards=len(stats),
        samples_total=sum(samples_of.values()) if known else None,  # type: ignore[arg-type]
        counted_shards=sum(1 for s in stats if s.counted),
        resampled=resampled,
        assignments=assignments,
        ranks=ranks,
        idle_fraction_at_epoch_end=idle,
        findings=findings,
        recommendations=[],
    )


def _ranks(assignments: list[ShardReader], batch_size: Optional[int],
           drop_last: bool) -> list[ShardRank]:
    """Each rank's samples (``None`` when a reader's are) and batches (``None`` without
    ``batch_size``): a worker yields ``ceil(samples / batch_size)`` batches, ``floor`` with
    ``drop_last``."""
    out = []
    for rank in sorted({a.rank for a in assignments}):
        mine = [a for a in assignments if a.rank == rank]
        if any(a.samples is None for a in mine):
            out.append(ShardRank(rank=rank, samples=None, batches=None))
            continue
        samples = [a.samples or 0.0 for a in mine]
        per = [s / batch_size for s in samples] if batch_size else []
        batches = (sum(math.floor(p) if drop_last else math.ceil(p) for p in per)
                   if batch_size else None)
        out.append(ShardRank(rank=rank, samples=sum(samples, 0.0), batches=batches))
    return out


def _empty_workers(assignments: list[ShardReader], shards: int, readers: int,
                   findings: list[Finding]) -> None:
    empty = [(a.rank, a.worker) for a in assignments if a.shards == 0]
    if not empty:
        return
    names = ", ".join(f"rank {r} worker {w}" for r, w in empty[:8])
    more = f" and {len(empty) - 8} more" if len(empty) > 8 else ""
    findings.append(Finding(
        FindingKind.EMPTY_WORKERS, "critical",
        f"{len(empty)} of {readers} (rank, worker) readers get no shard ({names}{more}): "
        f"{shards} shards for {readers} readers. Those workers yield nothing; webdataset's "
        f"WebDataset raises 'No samples found' for them unless empty_check=False",
        {"shards": shards, "readers": readers, "empty": [list(p) for p in empty]}))


def _imbalance(idle: Optional[float], per_worker: list[float], known: bool, shards: int,
               readers: int, findings: list[Finding]) -> None:
    if idle is None or idle < IMBALANCE_THRESHOLD or min(per_worker) == 0:
        return  # empty workers are reported on their own
    unit = "samples" if known else "shards"
    findings.append(Finding(
        FindingKind.SHARD_IMBALANCE, "warning",
        f"workers get {min(per_worker):,.0f} to {max(per_worker):,.0f} {unit}: about "
        f"{idle:.0%} of worker time at each epoch's end is idle while the busiest finishes",
        {"min_per_worker": min(per_worker), "max_per_worker": max(per_worker),
         "unit": unit, "idle_fraction": idle}))


def _unequal_ranks(ranks: list[ShardRank], batch_size: Optional[int],
                   findings: list[Finding]) -> None:
    key = "batches" if batch_size else "samples"
    maybe = [r.batches if batch_size else r.samples for r in ranks]
    counts = [c for c in maybe if c is not None]
    if len(ranks) < 2 or len(counts) < len(maybe) or len(set(counts)) == 1:
        return
    findings.append(Finding(
        FindingKind.UNEQUAL_RANK_BATCHES, "critical",
        f"ranks yield {min(counts):,.0f} to {max(counts):,.0f} {key} per epoch: under "
        f"DistributedDataParallel the ranks with more wait in a collective for the ones that "
        f"finished (a hang, or a timeout error)",
        {f"{key}_per_rank": counts}))


def _skew(stats: Sequence[ShardStat], findings: list[Finding]) -> None:
    sizes = [s.samples for s in stats if s.samples is not None]
    if len(sizes) < 2 or median(sizes) <= 0:
        return
    ratio = max(sizes) / median(sizes)
    if ratio < SKEW_THRESHOLD:
        return
    largest = max(stats, key=lambda s: s.samples or 0.0)
    findings.append(Finding(
        FindingKind.SHARD_SIZE_SKEW, "warning",
        f"the largest shard ({largest.url}) holds {ratio:.1f}x the median shard's samples "
        f"({max(sizes):,.0f} vs {median(sizes):,.0f}); its worker finishes last",
        {"largest_samples": max(sizes), "median_samples": median(sizes), "ratio": ratio}))


def _shuffle_buffer(stats: Sequence[ShardStat], buffer: Optional[int],
                    findings: list[Finding]) -> None:
    sizes = [s.samples for s in stats if s.samples is not None]
    if buffer is None or not sizes:
        return
    per_shard = median(sizes)
    if buffer >= per_shard:
        return
    findings.append(Finding(
        FindingKind.SMALL_SHUFFLE_BUFFER, "warning",
        f"shuffle buffer of {buffer:,} samples is smaller than a shard ({per_shard:,.0f} "
        f"samples): batches mix only neighbouring samples of one or two shards",
        {"shuffle_buffer": buffer, "samples_per_shard": per_shard}))
