"""A trial's measured window: its batches cut into contiguous blocks, whose rates give the
trial's noise (:func:`pipecheck.analysis.choice.block_rate_noise`), and when it has measured
enough: once it has :data:`~pipecheck.analysis.choice.NOISE_BLOCKS` blocks and either its noise
is within :data:`~pipecheck.analysis.choice.MIN_WORTHWHILE_GAIN`, or its race with the best
trial so far is decided (the two rates differ by more than their noises together: ranking them
needs no more batches) or cannot be decided by it (its noise is already within the best
trial's: the doubt left is the other's), or, for the start (nothing to compare yet), its noise
is within :data:`MAX_TIE_TOLERANCE`; else at ``max_blocks`` blocks. A close race gets a longer
window, a clear one the minimum (``docs/tuning.md``).

Pure: fed loop times, it reads no clock.
"""

from __future__ import annotations

from typing import Optional

from pipecheck.analysis.choice import MIN_WORTHWHILE_GAIN, NOISE_BLOCKS, block_rate_noise
from pipecheck.records import TuneTrial
from pipecheck.loader_settings import LoaderSettings

MAX_TIE_TOLERANCE = 0.10
"""Most a trial may be measured slower than the fastest and still tie with it, however noisy
the windows: the trials ran in the same loop seconds apart, so a 10 % gap is more than the
run's drift between them (pipecheck's choice; ``pipecheck stress``'s longer trials rarely
measure so much noise)."""


class TrialWindow:
    """One trial's measured window: contiguous blocks of at least ``block_batches`` batches
    and ``block_s`` seconds of loop time, whose rates give the trial's noise (module
    docstring). O(1) per batch."""

    __slots__ = ("block_batches", "block_s", "batches", "samples", "seconds", "wait", "rates",
                 "cur_batches", "cur_s", "cur_samples", "cur_wait")

    def __init__(self, block_batches: int, block_s: float) -> None:
        self.block_batches = block_batches
        self.block_s = block_s
        self.batches = self.samples = 0
        self.seconds = self.wait = 0.0
        self.rates: list[float] = []
        self.cur_batches, self.cur_s, self.cur_samples, self.cur_wait = 0, 0.0, 0, 0.0

    def add(self, wait_s: float, loop_s: float, samples: int) -> None:
        self.batches += 1
        self.samples += samples
        self.seconds += loop_s
        self.wait += wait_s
        self.cur_batches += 1
        self.cur_s += loop_s
        self.cur_samples += samples
        self.cur_wait += wait_s
        if self.cur_batches >= self.block_batches and self.cur_s >= self.block_s \
                and self.cur_s > 0:
            self.rates.append(self.cur_batches / self.cur_s)
            self.cur_batches, self.cur_s, self.cur_samples, self.cur_wait = 0, 0.0, 0, 0.0

    def drop_partial_block(self) -> None:
        """Forget the block in progress (its batches leave the totals too); the whole blocks
        stay: each is one measurement of the same settings."""
        self.batches -= self.cur_batches
        self.samples -= self.cur_samples
        self.seconds -= self.cur_s
        self.wait -= self.cur_wait
        self.cur_batches, self.cur_s, self.cur_samples, self.cur_wait = 0, 0.0, 0, 0.0

    def noise(self) -> Optional[float]:
        return block_rate_noise(self.rates)

    def done(self, max_blocks: int, reference: Optional[TuneTrial]) -> bool:
        """Whether the window has measured enough (module docstring); ``reference``: the best
        other trial so far, ``None`` for the start."""
        if len(self.rates) < NOISE_BLOCKS:
            return False
        if len(self.rates) >= max_blocks:
            return True
        noise = self.noise()
        if noise is None:
            return False
        if noise <= MIN_WORTHWHILE_GAIN:
            return True
        if reference is None or not reference.samples_per_s:
            return noise <= MAX_TIE_TOLERANCE
        reference_noise = reference.noise_fraction or 0.0
        if noise <= reference_noise:
            return True  # the race's doubt is the reference's: more batches here cannot end it
        gap = abs(self.samples / self.seconds / reference.samples_per_s - 1.0)
        return gap > max(MIN_WORTHWHILE_GAIN, noise + reference_noise)

    def trial(self, settings: LoaderSettings, warmup: int) -> TuneTrial:
        rate = self.samples / self.seconds if self.seconds > 0 else None
        stall = self.wait / self.seconds if self.seconds > 0 else None
        return TuneTrial(settings=settings, batches=self.batches, samples=self.samples,
                         seconds=self.seconds, samples_per_s=rate,
                         stall_fraction=None if stall is None else min(1.0, max(0.0, stall)),
                         noise_fraction=self.noise(), warmup_batches=warmup)
