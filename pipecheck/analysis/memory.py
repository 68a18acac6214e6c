"""Worker memory growth and shared-memory headroom: pure functions of the host sampler's per-process
memory series and the run's context.

How it works, and why: docs/internals.md (``pipecheck/analysis/memory.py``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional, Sequence, cast

from pipecheck.records import MemorySample, ProcessStats

WARMUP_FRACTION = 1.0 / 3.0
"""Share of a process's earliest memory readings left out of the growth test (warm-up)."""

MIN_READINGS = 5
"""Fewest readings (after warm-up) the test runs on: the exact 95% interval needs 5 (with 4,
all 6 pairs concordant happens by chance 1 time in 24, more than 2.5%); with 5 its lower bound
is the smallest of the 10 pairwise slopes, so growth then means USS rose between every pair of
readings."""

PERSIST_FRACTION = 0.5
"""Least ratio of the later half's slope to the whole slope for growth to count as ongoing
(pipecheck's choice: a steady leak gives about 1, a plateau reached inside the window about 0)."""

EXACT_MAX_POINTS = 30
"""Up to this many points Sen's interval takes its ranks from the exact null distribution of
Kendall's statistic (:func:`_exact_rank`); beyond, from its normal approximation with variance
``n(n-1)(2n+5)/18``. The approximation is too wide for a handful of points: with 5 it gives no
lower bound, while exactly, 5 readings each higher than the one before are significant at 95%
(the chance is 1/120 for each direction)."""

CONFIDENCE_Z = 1.96
"""Standard normal quantile of the slope's confidence interval (95% two-sided)."""

MIN_GROWTH_BYTES = 8 * 2**20
"""Least growth over the tested span that counts as material (8 MiB)."""

MIN_GROWTH_FRACTION = 0.05
"""Least growth over the tested span, as a share of the USS at its start, that counts."""

SHM_HEADROOM_FACTOR = 2.0
"""``/dev/shm`` must hold this many times ``prefetch_factor x num_workers x batch bytes``:
batches being received and pinned, and workers of the previous epoch still releasing theirs,
hold more than the prefetch queue alone (pipecheck's choice)."""


@dataclass(frozen=True)
class Slope:
    """A Theil-Sen slope with Sen's confidence interval, in y units per x unit."""

    slope: float
    low: float
    high: float
    points: int


@dataclass(frozen=True)
class Growth:
    """Memory growth of one process: USS slope in bytes/s with its 95% interval, over
    ``span_s`` seconds of ``readings`` readings starting at ``start_bytes``; ``significant``
    when the interval excludes 0, the growth is material and still going on (``late_bytes_per_s``,
    the slope of the later half of the readings; see the module docstring)."""

    pid: int
    slope_bytes_per_s: float
    low_bytes_per_s: float
    high_bytes_per_s: float
    readings: int
    span_s: float
    start_bytes: int
    significant: bool
    late_bytes_per_s: Optional[float] = None


def theil_sen(xs: Sequence[float], ys: Sequence[float], z: float = CONFIDENCE_Z) -> Optional[Slope]:
    """Theil-Sen slope of ``ys`` against ``xs`` with Sen's confidence interval at normal
    quantile ``z`` (exact ranks up to :data:`EXACT_MAX_POINTS` points with distinct x).
    ``None`` with fewer than 2 distinct x values. When the interval's ranks fall
    outside the pairwise slopes (few points), ``low`` is ``-inf`` / ``high`` ``+inf``. Raises
    ``ValueError`` when the sequences differ in length. O(n^2) in time and memory: callers keep
    n in the hundreds."""
    if len(xs) != len(ys):
        raise ValueError(f"xs and ys differ in length: {len(xs)} and {len(ys)}")
    slopes = sorted(
        (ys[j] - ys[i]) / (xs[j] - xs[i])
        for i in range(len(xs))
        for j in range(i + 1, len(xs))
        if xs[j] != xs[i]
    )
    if not slopes:
        return None
    count = len(slopes)
    middle = count // 2
    median = slopes[middle] if count % 2 else 0.5 * (slopes[middle - 1] + slopes[middle])
    n = len(xs)
    if n <= EXACT_MAX_POINTS and count == n * (n - 1) // 2:
        lower_rank = _exact_rank(n, 0.5 * math.erfc(z / math.sqrt(2.0)))
        upper_rank = count + 1 - lower_rank
    else:
        spread = z * math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
        lower_rank = math.floor((count - spread) / 2.0)  # 1-based rank M1
        upper_rank = math.ceil((count + spread) / 2.0) + 1  # 1-based rank M2 + 1
    low = slopes[lower_rank - 1] if lower_rank >= 1 else -math.inf
    high = slopes[upper_rank - 1] if upper_rank <= count else math.inf
    return Slope(slope=median, low=low, high=high, points=n)


@functools.lru_cache(maxsize=64)
def _exact_rank(n: int, tail: float) -> int:
    """The 1-based rank ``r`` of the lower bound of the distribution-free interval
    ``[S(r), S(N + 1 - r)]`` over the ``N = n(n-1)/2`` ordered pairwise slopes, each end missed
    with probability at most ``tail``; 0 when even ``[S(1), S(N)]`` misses more often.

    The true slope lies below ``S(r)`` exactly when at least ``N - r + 1`` pairs of the
    residuals ``y - slope x`` are concordant, i.e. at most ``r - 1`` are discordant; with no
    ties the discordant-pair count is distributed as the inversions of a uniformly random
    permutation of ``n`` (Kendall's null distribution; M. Hollander and D. A. Wolfe,
    "Nonparametric Statistical Methods", 2nd ed., 1999, section 9.3). So ``r - 1`` is the
    largest ``d`` with ``P(inversions <= d) <= tail``."""
    counts = [1]  # permutations of the first k items by inversion count (Mahonian numbers)
    for k in range(2, n + 1):
        widened = [0] * (len(counts) + k - 1)
        for inversions, ways in enumerate(counts):
            for extra in range(k):
                widened[inversions + extra] += ways
        counts = widened
    total = math.factorial(n)
    cumulative = 0
    rank = 0
    for inversions, ways in enumerate(counts):
        cumulative += ways
        if cumulative / total > tail:
            break
        rank = inversions + 1
    return rank


def process_growth(pid: int, series: Sequence[MemorySample]) -> Optional[Growth]:
    """The growth test on one process's memory readings; ``None`` with too few USS readings."""
    readings = [s for s in series if s.uss_bytes is not None]
    tested = readings[math.floor(len(readings) * WARMUP_FRACTION):]
    if len(tested) < MIN_READINGS:
        return None
    fit = theil_sen([s.at_s for s in tested], [float(cast(int, s.uss_bytes)) for s in tested])
    if fit is None:
        return None
    span_s = tested[-1].at_s - tested[0].at_s
    start = tested[0].uss_bytes
    assert start is not None  # readings keeps only samples with uss_bytes
    grown = fit.slope * span_s
    material = grown >= MIN_GROWTH_BYTES and grown >= MIN_GROWTH_FRACTION * start
    late_points = tested[len(tested) // 2:]
    late = theil_sen([s.at_s for s in late_points],
                     [float(cast(int, s.uss_bytes)) for s in late_points])
    ongoing = late is not None and late.slope >= PERSIST_FRACTION * fit.slope
    return Growth(
        pid=pid,
        slope_bytes_per_s=fit.slope,
        low_bytes_per_s=fit.low,
        high_bytes_per_s=fit.high,
        readings=len(tested),
        span_s=span_s,
        start_bytes=start,
        significant=fit.low > 0 and material and ongoing,
        late_bytes_per_s=None if late is None else late.slope,
    )


def worker_growth(processes: Sequence[ProcessStats]) -> Optional[Growth]:
    """Growth of one worker id: the test on the process that served it longest (most memory
    readings); without persistent workers each epoch's process starts afresh."""
    candidates = [p for p in processes if p.memory]
    if not candidates:
        return None
    longest = max(candidates, key=lambda p: len(p.memory))
    return process_growth(longest.pid, longest.memory)


def shm_needed_bytes(
    batch_bytes: Optional[int], num_workers: Optional[int], prefetch_factor: Optional[int]
) -> Optional[int]:
    """Bytes of shared memory the prefetch queue holds at once, ``prefetch_factor x num_workers
    x batch bytes``; ``None`` without workers or a measured batch size."""
    if not batch_bytes or not num_workers or not prefetch_factor:
        return None
    return prefetch_factor * num_workers * batch_bytes
