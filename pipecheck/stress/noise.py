"""How noisy a trial's measured rate is, and the smallest gain worth acting on: shared by the
search's stop rule (:mod:`pipecheck.stress.search`) and the choice among near-ties
(:mod:`pipecheck.stress.choice`). The estimate is described in the search module's docstring."""

from __future__ import annotations

import math
from typing import Optional

from pipecheck.records import RunRecord

NOISE_BLOCKS = 4
"""Contiguous blocks a trial's steady batches are cut into to estimate its rate's noise
(pipecheck's choice: enough for a spread, each block still several batches at 20+ batches)."""

MIN_WORTHWHILE_GAIN = 0.03
"""Smallest predicted gain (fraction, 0-1) worth a trial even when the measured noise is lower
(pipecheck's choice: below 3 % the model's own error, not the loader, decides the ranking)."""


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
    if blocks < 2 or len(loops) < 2 * blocks:
        return None
    size = len(loops) // blocks
    rates = []
    for b in range(blocks):
        chunk = loops[b * size:(b + 1) * size]
        total = sum(chunk)
        if total <= 0:
            return None
        rates.append(len(chunk) / total)
    mean = sum(rates) / blocks
    std = math.sqrt(sum((r - mean) ** 2 for r in rates) / (blocks - 1))
    return 2.0 * std / math.sqrt(blocks) / mean
