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
