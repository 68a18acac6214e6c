"""Progress of a sweep or search: :class:`ProgressEvent` for live displays, and the
:class:`Tracker` that times trials against the global budget and sends the events."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from pipecheck.stress.execute import BATCH_EVENT_INTERVAL_S as BATCH_EVENT_INTERVAL_S  # re-export
from pipecheck.stress.execute import Source, run_trial
from pipecheck.stress.settings import Step
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.trial import TrialLimits, TrialResult


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a sweep or search, for a live display.

    ``event``: ``start`` (a trial begins), ``batch`` (a running trial delivered ``batches``
    batches in ``trial_elapsed_s`` seconds; at most every :data:`BATCH_EVENT_INTERVAL_S`),
    ``done`` (``result`` holds the trial), ``skipped`` (the budget ran out before ``config``).
    ``done`` trials finished of at most ``total`` candidates; ``elapsed_s`` since the sweep
    began, ``budget_s`` its budget, ``mean_trial_s`` the mean finished trial's wall time
    (``None`` before the first), all in seconds. ``finished`` and ``planned`` count the whole
    run's trials, the sweep's and those after it (:meth:`Tracker.planned`): trials finished, and
    trials the run plans in all, the finished ones included, as many as the budget left is
    expected to hold (``None``: not known, and a display counts ``done`` of ``total``).
    """

    event: str
    config: LoaderSettings
    done: int
    total: int
    elapsed_s: float
    budget_s: float
    mean_trial_s: Optional[float] = None
    batches: int = 0
    trial_elapsed_s: float = 0.0
    result: Optional[TrialResult] = None
    finished: Optional[int] = None
    planned: Optional[int] = None

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
        if self.planned is not None and self.finished is not None:
            trials_left = max(self.planned - self.finished, 0)
        else:
            trials_left = max(self.total - self.done, 0)
        left = trials_left * self.mean_trial_s - self.trial_elapsed_s
        return min(budget_left, max(left, 0.0))


ProgressCallback = Callable[[ProgressEvent], None]


Reserve = Callable[["Tracker"], float]
"""Seconds of the budget to hold back for trials that run after the sweep, re-estimated from
the tracker's measured trials each time a trial asks whether it fits."""

TrialRunner = Callable[..., TrialResult]
""":func:`pipecheck.stress.execute.run_trial`'s signature (tests pass a fake)."""


class Tracker:
    """Times a stress run against its budget and sends :class:`ProgressEvent` to ``progress``.

    ``budget_s`` bounds every trial the run starts: a trial starts only when :meth:`fits` says
    it is expected to end within the budget with :attr:`reserve` still held back. The expected
    wall time of a trial is its time limit plus the largest overhead measured so far (child
    process start, imports, the target's factory, worker shutdown: a trial's wall time beyond
    its own measured time or its limit, whichever is less). ``clock`` (seconds, monotonic) and
    ``runner`` (:func:`~pipecheck.stress.execute.run_trial`) are replaceable for tests;
    ``started``: the clock reading the budget counts from (default: now).
    """

    def __init__(self, total: int, budget_s: float,
                 progress: Optional[ProgressCallback] = None, *,
                 reserve: Optional[Reserve] = None,
                 clock: Callable[[], float] = time.perf_counter,
                 runner: TrialRunner = run_trial, started: Optional[float] = None) -> None:
        self.total = total
        self.budget_s = budget_s
        self.reserve: Reserve = reserve if reserve is not None else (lambda tracker: 0.0)
        self.results: list[TrialResult] = []
        """Every trial this tracker (and its :meth:`follow_on` trackers) ran, in order."""
        self._clock, self._runner = clock, runner
        self.started = clock() if started is None else started
        self._progress = progress
        self._trial_walls: list[float] = []
        self._overheads: list[float] = []
        self.later_trials = 0
        """Trials planned after this tracker's own (the follow-on trials the reserve holds time
        for), counted in :meth:`planned`."""
        self._offset = 0  # trials finished before this tracker's first (a follow-on's)
        self._limits: Optional[TrialLimits] = None  # the last trial's
        self._planned: Optional[int] = None
        # Before a trial has measured the overhead, plans take it as the time the run took
        # before this tracker (checking a TARGET starts the same child process a trial does).
        self._prior_overhead_s = max(clock() - self.started, 0.0)

    def follow_on(self, total: int, progress: Optional[ProgressCallback] = None) -> "Tracker":
        """A tracker for ``total`` further trials on the same clock and budget (the trials after
        the sweep), sharing the measured overheads and results; it holds nothing in reserve."""
        other = Tracker(total, self.budget_s, progress, clock=self._clock, runner=self._runner)
        other.started, other.results, other._overheads = self.started, self.results, self._overheads
        other._trial_walls = self._trial_walls
        other._offset = len(self.results)
        return other

    def elapsed_s(self) -> float:
        return self._clock() - self.started

    def budget_spent(self) -> bool:
        return self.elapsed_s() >= self.budget_s

    def overhead_s(self) -> float:
        """The largest wall time a finished trial took beyond its measuring time (seconds); 0
        before the first."""
        return max(self._overheads, default=0.0)

    def expected_wall_s(self, limits: TrialLimits) -> float:
        """Seconds a trial with ``limits`` is expected to take at most, start to result."""
        return limits.seconds + self.overhead_s()

    def fits(self, *limits: TrialLimits) -> bool:
        """Whether trials with these ``limits``, started now one after the other, are expected
        to end within the budget, the :attr:`reserve` still held back."""
        needed = sum(self.expected_wall_s(one) for one in limits)
        return self.elapsed_s() + needed + self.reserve(self) <= self.budget_s

    def shortfall(self, *limits: TrialLimits) -> str:
        """Why :meth:`fits` said no, in words with the seconds it weighed."""
        needed = sum(self.expected_wall_s(one) for one in limits)
        held = self.reserve(self)
        left = max(self.budget_s - self.elapsed_s(), 0.0)
        kept = f" with {held:.1f} s held for the trials after the sweep" if held > 0 else ""
        return (f"budget: about {needed:.1f} s needed, {left:.1f} s of the {self.budget_s:g} s "
                f"left{kept}")

    def planned(self, done: int, running: bool = False) -> int:
        """Trials the run plans in all (:attr:`ProgressEvent.planned`), with ``done`` of this
        tracker's finished and one more ``running``: those finished, the running one, as many
        of the candidates left as the budget left is expected to hold at the last trial's
        expected wall time with the :attr:`reserve` held back (before any trial ended, the
        overhead is taken as the time the run spent before this tracker: checking the target),
        and :attr:`later_trials`."""
        left = max(self.total - done - int(running), 0)
        if self._limits is not None and left:
            per_trial = self.expected_wall_s(self._limits)
            if not self._overheads:
                per_trial += self._prior_overhead_s
            room = self.budget_s - self.elapsed_s() - self.reserve(self)
            if running:
                room -= per_trial
            if per_trial > 0:
                left = min(left, max(int(room // per_trial), 0))
        return self._offset + done + int(running) + left + self.later_trials

    def run(self, source: Source, config: LoaderSettings, limits: TrialLimits, *,
            step: Optional[Step], timeout_s: float, done: int) -> TrialResult:
        """Run one trial with ``start``, ``batch`` and ``done`` events around it."""
        trial_started = self._clock()
        self._limits = limits
        self._planned = self.planned(done, running=True)
        self._send("start", config, done)

        def on_batches(count: int) -> None:
            self._send("batch", config, done, batches=count,
                       trial_elapsed_s=self._clock() - trial_started)

        result = self._runner(source, config, limits, step=step, timeout_s=timeout_s,
                              on_batches=on_batches if self._progress is not None else None)
        wall_s = self._clock() - trial_started
        self._trial_walls.append(wall_s)
        self._overheads.append(max(wall_s - min(limits.seconds, result.wall_s), 0.0))
        self.results.append(result)
        self._planned = self.planned(done + 1)
        self._send("done", config, done + 1, result=result)
        return result

    def skipped(self, configs: Sequence[LoaderSettings], done: int) -> None:
        """Send ``skipped`` for ``configs``: the budget holds none of them (the run's planned
        trials are then those finished and the later ones)."""
        self._planned = self._offset + done + self.later_trials
        for config in configs:
            self._send("skipped", config, done)

    def _send(self, event: str, config: LoaderSettings, done: int, **extra: Any) -> None:
        if self._progress is None:
            return
        walls = self._trial_walls
        planned = self._planned if self._planned is not None else self.planned(done)
        self._progress(ProgressEvent(
            event, config, done, self.total, self.elapsed_s(), self.budget_s,
            sum(walls) / len(walls) if walls else None, finished=self._offset + done,
            planned=max(planned, self._offset + done), **extra))
