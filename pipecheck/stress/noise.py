"""How noisy a trial's measured rate is, and the smallest gain worth acting on: shared by the
search's stop rule (:mod:`pipecheck.stress.search`) and the choice among near-ties
(:mod:`pipecheck.stress.choice`). The estimate is described in the search module's docstring;
the arithmetic is :mod:`pipecheck.analysis.choice`'s, which the online tuner shares."""

from __future__ import annotations

from typing import Optional

from pipecheck.analysis.choice import MIN_WORTHWHILE_GAIN, NOISE_BLOCKS, loop_noise
from pipecheck.records import RunRecord

__all__ = ["MIN_WORTHWHILE_GAIN", "NOISE_BLOCKS", "rate_noise_fraction"]


def rate_noise_fraction(record: Optional[RunRecord], blocks: int = NOISE_BLOCKS
                        ) -> Optional[float]:
    """Relative noise (fraction >= 0) of a trial's steady batches/s: 2 x the standard error of
    the mean of per-block rates over their mean (:mod:`pipecheck.stress.search` docstring). ``None`` when the record
    holds fewer than ``2 x blocks`` steady timed batches or a block took no time."""
    if record is None:
        return None
    firsts: dict[int, int] = {}
    for timing in record.consumer.timeline:
        firsts.setdefault(timing.epoch, timing.index)
    loops = [t.wait_s + t.compute_s for t in record.consumer.timeline
             if t.compute_s is not None and t.index != firsts[t.epoch]]
    return loop_noise(loops, blocks)
