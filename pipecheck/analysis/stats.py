"""Small numeric helpers shared by the analysis modules: ratios that refuse to divide by zero
and duration quantiles. Pure functions; ``None`` in, or nothing to compute, gives ``None`` out."""

from __future__ import annotations

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
