"""Small numeric helpers shared by the analysis modules: ratios that refuse to divide by zero
and duration quantiles. Pure functions; ``None`` in, or nothing to compute, gives ``None`` out."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Optional

import numpy as np

from pipecheck.records import Quantiles


def ratio(numerator: Optional[float], denominator: Optional[float]) -> Optional[float]:
    """``numerator / denominator``, or ``None`` when either is ``None`` or the denominator is
    not positive (a rate over zero time is not measured, not infinite)."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def mean(values: Iterable[float]) -> Optional[float]:
    """Arithmetic mean, ``None`` for an empty sequence."""
    items = list(values)
    if not items:
        return None
    return float(sum(items) / len(items))


def quantiles(values: Iterable[float]) -> Optional[Quantiles]:
    """Mean, p50, p90 and p99 of durations in seconds (numpy's linear interpolation between
    order statistics); ``None`` for an empty sequence."""
    items = np.asarray(list(values), dtype=float)
    if items.size == 0:
        return None
    p50, p90, p99 = np.percentile(items, [50, 90, 99])
    return Quantiles(mean=float(items.mean()), p50=float(p50), p90=float(p90), p99=float(p99))


BATCH_MEANS_BLOCKS = 10
"""Contiguous blocks the batch-means method splits a run's per-batch times into."""

T_95_9_DF = 1.833
"""Student's t 0.95 quantile with 9 degrees of freedom (``BATCH_MEANS_BLOCKS - 1``): the
two-sided 90% interval (standard tables, e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2)."""


def batch_means_spread(values: Iterable[float]) -> Optional[float]:
    """Relative half-width (0 or more) of a 90% prediction interval for the mean of one more
    block, by the batch-means method (Schmeiser, "Batch size effects in the analysis of
    simulation output", Operations Research 30(3), 1982): ``values`` (per-batch times, in run
    order) are cut into :data:`BATCH_MEANS_BLOCKS` contiguous blocks, whose means are close to
    independent when a block is much longer than the correlation between neighbouring batches
    (slow drifts such as a neighbour's load stay in the spread); the half-width is
    ``t(0.95, 9) x sd(block means) x sqrt(1 + 1/10)`` (the prediction interval for one new
    observation of a normal sample) over the mean of the block means. ``None`` with fewer than
    two values per block or a zero mean."""
    items = np.asarray(list(values), dtype=float)
    if items.size < 2 * BATCH_MEANS_BLOCKS:
        return None
    blocks = np.array([b.mean() for b in np.array_split(items, BATCH_MEANS_BLOCKS)])
    centre = float(blocks.mean())
    if centre <= 0:
        return None
    spread = float(blocks.std(ddof=1))
    return T_95_9_DF * spread * float(np.sqrt(1.0 + 1.0 / BATCH_MEANS_BLOCKS)) / centre


WILSON_Z_95 = 1.959963984540054
"""The standard normal quantile for a two-sided 95% interval."""


def wilson_interval(successes: int, trials: int, z: float = WILSON_Z_95
                    ) -> Optional[tuple[float, float]]:
    """The Wilson score interval ``(low, high)`` (0-1) for a binomial proportion with
    ``successes`` out of ``trials`` (E. B. Wilson, "Probable inference, the law of succession,
    and statistical inference", JASA 22 (1927) 209-212); ``z`` is the normal quantile (default:
    95% two-sided). Unlike the normal approximation it stays inside 0-1 and is usable near 0
    and 1 with few trials. ``None`` with no trials; ``ValueError`` when ``successes`` is
    outside ``0..trials``."""
    if trials <= 0:
        return None
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must lie in 0..{trials}, got {successes}")
    p = successes / trials
    denominator = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)
