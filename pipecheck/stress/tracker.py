"""Progress of a sweep or search: :class:`ProgressEvent` for live displays, and the
:class:`Tracker` that times trials against the global budget and sends the events."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from pipecheck.stress.execute import BATCH_EVENT_INTERVAL_S as BATCH_EVENT_INTERVAL_S  # re-export
from pipecheck.stress.execute import Source, run_trial
from pipecheck.stress.settings import StepTime, TrialConfig
from pipecheck.stress.trial import TrialLimits, TrialResult


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a sweep or search, for a live display.

    ``event``: ``start`` (a trial begins), ``batch`` (a running trial delivered ``batches``
    batches in ``trial_elapsed_s`` seconds; at most every :data:`BATCH_EVENT_INTERVAL_S`),
    ``done`` (``result`` holds the trial), ``skipped`` (the budget ran out before ``config``).
    ``done`` trials finished of at most ``total`` candidates; ``elapsed_s`` since the sweep
    began, ``budget_s`` its budget, ``mean_trial_s`` the mean finished trial's wall time
    (``None`` before the first), all in seconds.
    """

    event: str
    config: TrialConfig
    done: int
    total: int
    elapsed_s: float
    budget_s: float
    mean_trial_s: Optional[float] = None
    batches: int = 0
    trial_elapsed_s: float = 0.0
    result: Optional[TrialResult] = None

    @property
    def batches_per_s(self) -> Optional[float]:
        """The running trial's batches/s so far (warm-up included); ``None`` before a batch."""
        if self.batches <= 0 or self.trial_elapsed_s <= 0:
            return None
        return self.batches / self.trial_elapsed_s

    @property
    def time_left_s(self) -> float:
        """Seconds left at most: the budget left, or the candidates left times the mean trial
        time when that is shorter (a search usually stops earlier still)."""
        budget_left = max(self.budget_s - self.elapsed_s, 0.0)
        if self.mean_trial_s is None:
            return budget_left
        left = max(self.total - self.done, 0) * self.mean_trial_s - self.trial_elapsed_s
        return min(budget_left, max(left, 0.0))


ProgressCallback = Callable[[ProgressEvent], None]


class Tracker:
    """Times a sweep against its budget and sends :class:`ProgressEvent` to ``progress``."""

    def __init__(self, total: int, budget_s: float,
                 progress: Optional[ProgressCallback] = None) -> None:
        self.total = total
        self.budget_s = budget_s
        self.started = time.perf_counter()
        self._progress = progress
        self._trial_walls: list[float] = []

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def budget_spent(self) -> bool:
        return self.elapsed_s() >= self.budget_s

    def run(self, source: Source, config: TrialConfig, limits: TrialLimits, *,
            step: Optional[StepTime], timeout_s: float, done: int) -> TrialResult:
        """Run one trial with ``start``, ``batch`` and ``done`` events around it."""
        trial_started = time.perf_counter()
        self._send("start", config, done)

        def on_batches(count: int) -> None:
            self._send("batch", config, done, batches=count,
                       trial_elapsed_s=time.perf_counter() - trial_started)

        result = run_trial(source, config, limits, step=step, timeout_s=timeout_s,
                           on_batches=on_batches if self._progress is not None else None)
        self._trial_walls.append(time.perf_counter() - trial_started)
        self._send("done", config, done + 1, result=result)
        return result

    def skipped(self, configs: Sequence[TrialConfig], done: int) -> None:
        for config in configs:
            self._send("skipped", config, done)

    def _send(self, event: str, config: TrialConfig, done: int, **extra: Any) -> None:
        if self._progress is None:
            return
        walls = self._trial_walls
        self._progress(ProgressEvent(
            event, config, done, self.total, self.elapsed_s(), self.budget_s,
            sum(walls) / len(walls) if walls else None, **extra))
