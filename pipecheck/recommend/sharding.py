"""The sharding changes of a WebDataset (or ``n_shards``) loader, from the findings of its shard
assignment (:func:`pipecheck.analysis.sharding.analyze_sharding`): ``num_shards`` for empty or
idle readers, ``resampled=True`` with ``with_epoch`` for ranks of unequal length, and a
``shuffle_buffer`` a shard long.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Optional, Sequence

from pipecheck import units as fmt
from pipecheck.kinds import FindingKind
from pipecheck.probes.shards import ShardStat
from pipecheck.records import Expected, Finding, Recommendation, ShardingSection


def sharding_recommendations(section: ShardingSection, stats: Sequence[ShardStat]
                             ) -> list[Recommendation]:
    """The changes ``section``'s findings call for, in the order the findings are made;
    ``stats`` are the shards the section was judged from (their tar bytes size the shuffle
    buffer's memory note). Findings of other kinds propose nothing."""
    found: list[Recommendation] = []
    readers = len(section.assignments)
    empty = _finding(section, FindingKind.EMPTY_WORKERS)
    imbalance = _finding(section, FindingKind.SHARD_IMBALANCE)
    if empty is not None:
        found.append(_shard_count(section.shards, readers, "every reader must get a shard"))
    elif imbalance is not None and section.shards % readers:
        idle = imbalance.evidence["idle_fraction"]
        found.append(_shard_count(section.shards, readers,
                                  f"cuts the epoch-end idle share from {idle:.0%}"))
    unequal = _finding(section, FindingKind.UNEQUAL_RANK_BATCHES)
    if unequal is not None:
        found.append(_resampled(section, unequal))
    small = _finding(section, FindingKind.SMALL_SHUFFLE_BUFFER)
    if small is not None:
        found.append(_shuffle_buffer(small, stats))
    return found


def _finding(section: ShardingSection, kind: str) -> Optional[Finding]:
    return next((f for f in section.findings if f.kind == kind), None)


def _shard_count(shards: int, readers: int, why: str) -> Recommendation:
    """Re-shard into the nearest multiple of the readers at or above the current count."""
    proposed = max(readers, math.ceil(shards / readers) * readers)
    per = proposed // readers
    return Recommendation(
        "num_shards", shards, proposed,
        Expected(None, None, note=f"each of {readers} readers gets {per} shard"
                                  f"{'s' if per > 1 else ''} (about 0% idle with equal-size "
                                  f"shards)"),
        f"{shards} shards do not divide among {readers} readers (ranks x workers); a multiple "
        f"of {readers} {why}")


def _resampled(section: ShardingSection, unequal: Finding) -> Recommendation:
    key = "batches" if "batches_per_rank" in unequal.evidence else "samples"
    # The smallest non-empty reader's share: an empty worker (reported on its own) would
    # otherwise propose with_epoch(0).
    per_reader = min((a.samples for a in section.assignments if a.samples), default=0.0)
    return Recommendation(
        "resampled", False, True,
        Expected(None, None, note=f"every rank yields the same {key}: set the epoch with "
                                  f".with_epoch({int(per_reader):,}) samples per worker"),
        "resampled=True draws shards with replacement, and with_epoch fixes each worker's "
        "epoch length, so every rank runs the same number of steps")


def _shuffle_buffer(small: Finding, stats: Sequence[ShardStat]) -> Recommendation:
    buffer = small.evidence["shuffle_buffer"]
    per_shard = small.evidence["samples_per_shard"]
    sample_bytes = [s.size_bytes / s.samples for s in stats if s.size_bytes and s.samples]
    memory = (f"; holds about {fmt.size(int(per_shard * median(sample_bytes)))} per worker "
              f"at the shards' {fmt.size(int(median(sample_bytes)))} per sample (tar bytes)"
              if sample_bytes else "")
    return Recommendation(
        "shuffle_buffer", buffer, int(math.ceil(per_shard)),
        Expected(None, None, note=f"the buffer spans a whole shard{memory}"),
        "a buffer at least a shard long mixes samples across the shards a worker reads")
