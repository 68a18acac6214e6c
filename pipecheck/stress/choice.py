"""Which measured configuration to recommend: the cheapest one whose throughput is within the
noise of the fastest measured.

Trials a few percent apart are a tie on this evidence (and the fastest of many noisy trials is
biased upwards), while the settings are not free: ``in_order=False`` gives up the sampler's
batch order, every worker is a process with its own memory, every prefetched batch is held in
memory. So among the measured trials with the fastest one's batch size and ``pin_memory`` whose
samples/s is at least ``fastest x (1 - tolerance)``, the recommendation is the first by: in
order (``in_order`` not False), fewest workers, smallest ``prefetch_factor``, then faster.
``tolerance = max(the fastest trial's measured noise, MIN_WORTHWHILE_GAIN)``, the search's own
stop threshold (:mod:`pipecheck.stress.noise`). The rule itself is
:func:`pipecheck.analysis.choice.cheapest_within`, which the online tuner (``wrap(tune=True)``)
shares.
"""

from __future__ import annotations

from typing import Sequence

from pipecheck.analysis.choice import cheapest_within, tolerance
from pipecheck.stress.noise import rate_noise_fraction
from pipecheck.stress.trial import TrialResult


def cheapest_within_noise(best: TrialResult,
                          trials: Sequence[TrialResult]) -> tuple[TrialResult, float]:
    """``(chosen, tolerance)``: the trial to recommend (``best`` itself when nothing cheaper
    ties with it) and the tolerance used (a fraction, 0-1). ``best`` must be a measured trial
    of ``trials``."""
    assert best.samples_per_s is not None
    within = tolerance(rate_noise_fraction(best.record))
    same = [t for t in trials if t.ok and t.config.batch_size == best.config.batch_size
            and t.config.pin_memory == best.config.pin_memory]
    chosen = cheapest_within(
        best.samples_per_s, same, rate=lambda t: t.samples_per_s or 0.0,
        cost=lambda t: (t.config.in_order is False, t.config.num_workers,
                        t.config.prefetch_factor or 0),
        within=within)
    return chosen, within
