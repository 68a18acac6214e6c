"""After tuning settles: whether the kept settings' rate has dropped for a sustained window
(a neighbour took the CPUs, the storage slowed), which starts a new round of trials.

Pure, as the controller: fed one observation per batch, O(1) each; it starts nothing.
"""

from __future__ import annotations

from typing import Callable, Optional

from pipecheck.analysis.choice import NOISE_BLOCKS
from pipecheck.records import TuneTrial
from pipecheck.loader_settings import LoaderSettings
from pipecheck.tune.window import TrialWindow

RETUNE_DROP = 0.20
"""How far below the kept settings' measured rate (fraction, 0-1) a window must fall, even
raised by its own noise and against the low end of that rate's, for tuning to start again
(issue 27: "re-tune when the settled rate drops by more than 20% for a sustained window")."""

SUSTAINED_WINDOWS = 2
"""Consecutive watch windows (each as long as the longest trial window, ``max_blocks``
blocks) that must all have dropped: one slow window is a hiccup (an epoch's start, a
checkpoint, a page-cache miss), two in a row a change of conditions. pipecheck's choice."""


class RateWatch:
    """Windows of the kept settings' batches, one after another, each of ``blocks`` blocks
    (>= :data:`~pipecheck.analysis.choice.NOISE_BLOCKS`) and compared with ``reference``, the
    kept settings' trial.

    ``make_window`` builds each window (:class:`~pipecheck.tune.window.TrialWindow`); ``warmup`` batches are left out first (the switch to
    the kept settings, an epoch's start)."""

    __slots__ = ("reference", "window", "make_window", "warmup_left", "blocks", "dropped")

    def __init__(self, reference: TuneTrial, make_window: Callable[[], TrialWindow],
                 warmup: int, blocks: int = NOISE_BLOCKS) -> None:
        self.reference = reference
        self.make_window = make_window
        self.window = make_window()
        self.warmup_left = max(0, warmup)
        self.blocks = max(NOISE_BLOCKS, blocks)
        self.dropped = 0  # consecutive windows that dropped

    def add(self, wait_s: float, loop_s: float, samples: int) -> Optional[TuneTrial]:
        """One batch at the kept settings. Returns the latest window's trial once
        :data:`SUSTAINED_WINDOWS` windows in a row have dropped (module docstring), else
        ``None``; each ended window is replaced by the next."""
        if self.warmup_left > 0:
            self.warmup_left -= 1
            return None
        window = self.window
        window.add(wait_s, loop_s, samples)
        if len(window.rates) < self.blocks or window.seconds <= 0:
            return None
        rate = window.samples / window.seconds
        noise = window.noise() or 0.0
        reference = (self.reference.samples_per_s or 0.0) * (
            1.0 - (self.reference.noise_fraction or 0.0))
        self.window = self.make_window()
        if rate * (1.0 + noise) >= (1.0 - RETUNE_DROP) * reference:
            self.dropped = 0
            self._refresh(window, noise)
            return None
        self.dropped += 1
        return window.trial(self.reference.settings, 0) \
            if self.dropped >= SUSTAINED_WINDOWS else None

    def _refresh(self, window: TrialWindow, noise: float) -> None:
        """A kept trial too noisy to resolve a :data:`RETUNE_DROP` (its low end is under
        ``1 - RETUNE_DROP`` of its rate: a short window of a fast, bursty loader) is replaced by
        a watch window of the same settings that did not drop and is less noisy, until one
        can resolve it: a drop is judged against what the settings do when settled, not
        against the tuning window's doubt. Once the reference resolves a drop it stays, so a
        slow drift cannot lower it step by step."""
        if (self.reference.noise_fraction or 0.0) >= RETUNE_DROP \
                and noise < (self.reference.noise_fraction or 0.0):
            self.reference = window.trial(self.reference.settings, 0)

    def restart(self, warmup: int) -> None:
        """A new epoch's iterator: the block in progress is dropped and ``warmup`` batches
        left out."""
        self.window.drop_partial_block()
        self.warmup_left += max(0, warmup)

    def drop_line(self, trial: TuneTrial) -> str:
        """The note a re-tune leaves: the kept settings, the rates and the drop."""
        before = self.reference.samples_per_s or 0.0
        after = trial.samples_per_s or 0.0
        return (f"re-tuned: {self.reference.settings.short_label()} fell from {before:,.0f} to "
                f"{after:,.0f} samples/s ({1 - after / before:.0%} lower) over "
                f"{trial.batches:,} batches" if before > 0 else "re-tuned")


def kept_trial(trials: list[TuneTrial], kept: LoaderSettings) -> Optional[TuneTrial]:
    """The latest measured trial of ``kept`` in ``trials``, or ``None``."""
    for trial in reversed(trials):
        if trial.settings == kept and trial.samples_per_s:
            return trial
    return None
