"""How measured loader settings are judged: the noise of a measured rate, the smallest gain worth
acting on, and the cheapest settings within the noise of the fastest. Shared by the offline
search (:mod:`pipecheck.stress.noise`, :mod:`pipecheck.stress.choice`) and the online tuner
(:mod:`pipecheck.tune.controller`): they differ in where trials run, not in how they are judged.

Pure functions of numbers; nothing here imports torch or runs a loader.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, TypeVar

NOISE_BLOCKS = 4
"""Contiguous blocks a trial's steady batches are cut into to estimate its rate's noise
(pipecheck's choice: enough for a spread, each block still several batches at 20+ batches)."""

MIN_WORTHWHILE_GAIN = 0.03
"""Smallest gain (fraction, 0-1) worth acting on even when the measured noise is lower
(pipecheck's choice: below 3 % the model's own error, not the loader, decides the ranking)."""

T = TypeVar("T")


def block_rate_noise(rates: Sequence[float]) -> Optional[float]:
    """Relative noise (fraction >= 0) of a rate measured as ``rates``, the rates (any unit
    per second, each > 0) of contiguous blocks of one trial: 2 x the standard error of the
    mean block rate over that mean (about a 95 % interval; blocks rather than single batches
    because prefetching makes neighbouring batch times correlated). ``None`` with fewer than
    2 blocks or a mean of 0."""
    n = len(rates)
    if n < 2:
        return None
    mean = sum(rates) / n
    if mean <= 0:
        return None
    std = math.sqrt(sum((r - mean) ** 2 for r in rates) / (n - 1))
    return 2.0 * std / math.sqrt(n) / mean


def loop_noise(loops: Sequence[float], blocks: int = NOISE_BLOCKS) -> Optional[float]:
    """:func:`block_rate_noise` of ``loops`` (seconds per batch, wait + step, in order) cut
    into ``blocks`` contiguous blocks of equal size. ``None`` with fewer than ``2 x blocks``
    loop times, ``blocks < 2``, or a block that took no time."""
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
    return block_rate_noise(rates)


def tolerance(noise: Optional[float]) -> float:
    """The fraction (0-1) within which two measured rates are a tie: the fastest trial's
    measured ``noise``, at least :data:`MIN_WORTHWHILE_GAIN`."""
    return max(noise or 0.0, MIN_WORTHWHILE_GAIN)


def cheapest_within(best_rate: float, candidates: Sequence[T], rate: Callable[[T], float],
                    cost: Callable[[T], tuple], within: float) -> T:
    """The cheapest of ``candidates`` (by ``cost``, a sort key: smaller is cheaper; ties go to
    the faster) whose ``rate`` is at least ``best_rate x (1 - within)``. ``within`` is a
    fraction (0-1), normally :func:`tolerance` of the fastest trial's noise; ``best_rate``
    (> 0) the fastest measured rate, whose trial must be among ``candidates``.

    Raises:
        ValueError: no candidate reaches the floor (``best_rate`` is not one of theirs).
    """
    floor = best_rate * (1.0 - within)
    ties = [c for c in candidates if rate(c) >= floor]
    if not ties:
        raise ValueError(f"no candidate reaches {floor:.6g} (best rate {best_rate:.6g})")
    return min(ties, key=lambda c: (cost(c), -rate(c)))
