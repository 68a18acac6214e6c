"""The online trial schedule and choice of ``wrap(tune=True)``: which settings to try next, how
long each trial's window runs, when to stop, and which measured settings to keep.

Pure: it is fed one observation per batch (``wait_s``, ``loop_s``, samples) and the clock it is
given, and answers with the settings to switch to; it starts no loader and imports no torch, so
its logic is tested with a fake clock.

The schedule (:meth:`TuneController.next_settings`): the start is measured in place, then
``num_workers`` climbs by doubling (or halves, from a user's surplus workers), then
:data:`PREFETCH_FACTORS`, then ``pin_memory`` with CUDA; the cheapest measured settings within
the noise of the fastest are kept (:func:`pipecheck.analysis.choice.cheapest_within`, the rule
``pipecheck stress`` recommends by). Each window is a :class:`pipecheck.tune.window.TrialWindow`
of blocks of at least :func:`block_batches` batches; the budget, the warm-ups and the watch for
a sustained drop once settled (:class:`pipecheck.tune.watch.RateWatch`) are described in
docs/architecture.md ("Data flow of a tuned run", "The schedule"), with their rationale and
measurements in docs/tuning.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from pipecheck.analysis.choice import (MIN_WORTHWHILE_GAIN, NOISE_BLOCKS, cheapest_within,
                                       tolerance)
from pipecheck.errors import BadArgumentError
from pipecheck.records import TuneTrial
from pipecheck.loader_settings import LoaderSettings
from pipecheck.tune.watch import RateWatch, kept_trial
from pipecheck.tune.window import MAX_TIE_TOLERANCE, TrialWindow

MIN_TRIAL_BATCHES = 4
"""Fewest batches in a trial's window: :data:`NOISE_BLOCKS` blocks of one batch, and of at
least ``num_workers`` batches with workers (:func:`block_batches`: workers deliver in turn, so
a block holds a batch of every worker); the seconds (:data:`MIN_TRIAL_S`) bind first for any
fast loader. Blocks of 8 batches at every setting made the start's window of a loader at
3 s a batch (JPEG decode at ``num_workers=0`` beside a busy neighbour) longer than the whole
budget: it kept the start, 10x slower than 2 workers (``docs/tuning.md``). pipecheck's
choice."""

MIN_TRIAL_S = 2.0
"""Fewest seconds of loop time in a trial's window: blocks of 0.5 s, several times the
scheduler's time slice and a batch-wide hiccup (a page-cache miss, a neighbour's burst), so a
fast loader's trial is not decided by a few milliseconds. pipecheck's choice, as ``pipecheck
stress``'s default trial of 3 s (:data:`pipecheck.stress.settings.DEFAULT_TRIAL_S`) is."""

MAX_TRIAL_BLOCKS = 2 * NOISE_BLOCKS
"""Most blocks a window takes while its race is undecided: a noisy loader is measured twice as
long, then judged with the noise it has (the tie tolerance grows with it, to
:data:`MAX_TIE_TOLERANCE`). pipecheck's choice (docs/decisions.md#max_trial_blocks)."""

BUDGET_S = 60.0
"""Loop time (seconds) from the first trial after which no new trial starts (issue 27)."""

BUDGET_FRACTION = 0.10
"""Share of an epoch's batches (when its length is known) after which no new trial starts
(issue 27): a short run still spends most of its time on the kept settings."""

MIN_BUDGET_WINDOWS = 4
"""The budget's share of an epoch ends tuning only once this many trials (the start and three
others) have been measured: in a short epoch, or one whose start runs slowly (a noisy start's
window runs longer), 10% of its batches would end tuning before a second setting is measured;
the trials then go on, into the next epochs where there are, within ``budget_s``.
pipecheck's choice."""

HARD_BUDGET_FACTOR = 2.0
"""A trial in progress when the budget ends runs on to its minimum window (a trial cut short
measures nothing, and the start would be kept blind), but never past this many times the
budget: then it ends with what it has (kept when it holds 2 blocks or more). pipecheck's
choice."""

FIRST_WORKERS = 2
"""Workers of the first step up from ``num_workers=0``: one worker only overlaps loading with
the step, which two also do, while two can also overlap one batch's loading with another's
(pipecheck's choice; the choice among near-ties still prefers fewer workers measured)."""

RUN_WARMUP_BATCHES = 3
"""Batches at the start of the run left out of the start's window: a loop's first steps run
slowly (lazy initialization, the allocator's first growth, autotuning), as ``pipecheck stress``'s
and the benchmarks' timed windows leave out their first 3 batches. pipecheck's choice
(docs/decisions.md#run_warmup_batches)."""

PREFETCH_FACTORS = (2, 4)
"""``prefetch_factor`` values tried with workers: torch's default and double it, as ``pipecheck
stress`` searches (:data:`pipecheck.stress.search.AUTO_PREFETCH_FACTORS`)."""


@dataclass(frozen=True)
class TuneLimits:
    """How long trials run and how much of the run tuning may take (``wrap(tune=...)``).

    ``min_batches`` (>= 2) and ``min_seconds`` (>= 0) the least a window holds;
    ``max_blocks`` (>= ``NOISE_BLOCKS``) the most blocks it takes while noisy; ``budget_s``
    (> 0, loop seconds) and ``budget_fraction`` (0-1 of an epoch's batches) when trials stop;
    ``warmup_batches`` batches after a switch left out of the window (``None``: one round of
    the new workers' first batches, ``num_workers + 1``: :func:`warmup_for`).

    Raises:
        BadArgumentError: a value out of its range (a ``ValueError``).
    """

    min_batches: int = MIN_TRIAL_BATCHES
    min_seconds: float = MIN_TRIAL_S
    max_blocks: int = MAX_TRIAL_BLOCKS
    budget_s: float = BUDGET_S
    budget_fraction: float = BUDGET_FRACTION
    warmup_batches: Optional[int] = None

    def __post_init__(self) -> None:
        if self.min_batches < 2:
            raise BadArgumentError(f"min_batches must be >= 2, got {self.min_batches!r}")
        if not self.min_seconds >= 0:
            raise BadArgumentError(f"min_seconds must be >= 0, got {self.min_seconds!r}")
        if self.max_blocks < NOISE_BLOCKS:
            raise BadArgumentError(f"max_blocks must be >= {NOISE_BLOCKS}, got {self.max_blocks!r}")
        if not self.budget_s > 0:
            raise BadArgumentError(f"budget_s must be > 0, got {self.budget_s!r}")
        if not 0 < self.budget_fraction <= 1:
            raise BadArgumentError(
                f"budget_fraction must be in (0, 1], got {self.budget_fraction!r}")
        if self.warmup_batches is not None and self.warmup_batches < 0:
            raise BadArgumentError(f"warmup_batches must be >= 0, got {self.warmup_batches!r}")


def limits_from_text(text: str) -> TuneLimits:
    """:class:`TuneLimits` from ``pipecheck run --tune``'s environment value: ``1`` (or empty)
    for the defaults, else ``name=value`` pairs separated by commas (``min_batches=8,
    min_seconds=0.5``; for experiments and tests).

    Raises:
        ValueError: an unknown name, a value that is not a number, or one out of range.
    """
    text = text.strip()
    if text in ("", "1"):
        return TuneLimits()
    fields = {f.name: f.type for f in dataclasses.fields(TuneLimits)}
    values: dict[str, object] = {}
    for pair in text.split(","):
        name, _, value = pair.partition("=")
        name = name.strip()
        if name not in fields:
            raise BadArgumentError(f"unknown tune limit {name!r} (known: {', '.join(fields)})")
        number = float(value)
        values[name] = int(number) if name in ("min_batches", "max_blocks",
                                                 "warmup_batches") else number
    return TuneLimits(**values)  # type: ignore[arg-type]


def warmup_for(settings: LoaderSettings, limits: TuneLimits) -> int:
    """Batches after a switch to ``settings`` left out of the trial's window: ``num_workers +
    1`` unless ``limits`` sets it. New workers start together, so their first batches arrive
    together after one fetch time (the first batch's wait); from the next round on they
    deliver at their steady rate, whatever ``prefetch_factor`` (a producer-bound loop never
    fills the queue; a consumer-bound one never waits after the first batch). Leaving out the
    whole prefetch depth (``num_workers x prefetch_factor``) cost 17-33 batches a switch at
    8 workers, a quarter of a 64-batch epoch, for no change in the measured rate."""
    if limits.warmup_batches is not None:
        return limits.warmup_batches
    return settings.num_workers + 1


def block_batches(limits: TuneLimits, settings: LoaderSettings) -> int:
    """Fewest batches in a block of a window of ``settings``: ``min_batches / NOISE_BLOCKS``
    (rounded up), and at least ``num_workers`` (a batch of every worker)."""
    return max(math.ceil(limits.min_batches / NOISE_BLOCKS), settings.num_workers)


def new_window(limits: TuneLimits, settings: LoaderSettings) -> TrialWindow:
    """An empty trial window of ``settings`` with the blocks ``limits`` set (module
    docstring)."""
    return TrialWindow(block_batches(limits, settings), limits.min_seconds / NOISE_BLOCKS)


def pin_line(settings: LoaderSettings) -> str:
    """The one line of code that pins ``settings``, e.g.
    ``DataLoader(..., num_workers=2, prefetch_factor=4)``."""
    return f"DataLoader(..., {settings.short_label().replace(' ', ', ')})"


class TuneController:
    """The trial schedule and choice (module docstring) for one loader.

    ``start``: the user's settings; ``max_workers``: the most workers a trial may use (the
    guards' CPU and memory budget, >= 0); ``change_workers``: whether ``num_workers`` may
    change at all (an iterable dataset that does not split by worker: never); ``cuda``: try
    ``pin_memory``; ``epoch_batches``: batches per epoch when known (the budget's fraction);
    ``clock`` is only read for :attr:`tuning_s` bookkeeping by the caller's loop times, not
    for decisions (every decision follows the loop times fed in).

    Use: :meth:`observe` after each batch; it returns the settings to switch to when a window
    ends (``None`` otherwise); :attr:`status` is ``"tuning"`` until :meth:`observe` returns
    the kept settings and :attr:`settled` turns true. :meth:`restart_window` when the current
    settings' iterator was rebuilt (a new epoch) before the window ended.
    """

    def __init__(self, start: LoaderSettings, limits: TuneLimits, *, max_workers: int,
                 change_workers: bool, cuda: bool, epoch_batches: Optional[int] = None,
                 notes: Optional[list[str]] = None) -> None:
        self.start = start
        self.limits = limits
        self.max_workers = max(0, max_workers)
        self.change_workers = change_workers
        self.cuda = cuda
        self.epoch_batches = epoch_batches
        self.notes: list[str] = list(notes or [])
        self.trials: list[TuneTrial] = []
        self.current = start
        self.chosen: Optional[LoaderSettings] = None
        self.settled = False
        self._tried: set[LoaderSettings] = set()
        self._climbing = change_workers
        self._tie_climbed = False  # the climb went on past a tie once this round
        self._window = new_window(limits, start)
        # the start's window leaves out the epoch's first batches (worker start-up) and the
        # loop's own first steps
        self._warmup = self._warmup_left = (
            warmup_for(start, limits) if limits.warmup_batches is not None
            else max(warmup_for(start, limits), RUN_WARMUP_BATCHES))
        self._spent_s = 0.0
        self._spent_batches = 0
        self._settled_at_s: Optional[float] = None
        self._settled_at_batches: Optional[int] = None
        # rounds: the first trial's index and start settings of each; a re-tune adds one
        self.retunes = 0
        self._rounds: list[tuple[int, LoaderSettings]] = [(0, start)]
        self._round_switch: list[list[float]] = [[0.0, 0.0]]  # warm-ups' loop s, samples
        self._budget_from = (0.0, 0)  # loop seconds and batches spent when the round began
        self._epoch = 0
        self._retuned_epoch: Optional[int] = None
        self._watch: Optional[RateWatch] = None

    # -- per batch -----------------------------------------------------------------------------

    def observe(self, wait_s: float, loop_s: float, samples: int) -> Optional[LoaderSettings]:
        """One batch under the current settings: its wait in ``next()`` and its loop time
        (seconds since the previous batch was handed over, >= 0) and its samples. Returns the
        settings to switch to at this batch boundary, or ``None``."""
        if self.settled:
            return self._watch_batch(wait_s, loop_s, samples)
        self._spent_s += loop_s
        self._spent_batches += 1
        if self._warmup_left > 0:
            self._warmup_left -= 1
            if self.current != self.round_start:  # the start's own warm-up costs nothing
                self._round_switch[-1][0] += loop_s
                self._round_switch[-1][1] += samples
            return None
        window = self._window
        window.add(wait_s, loop_s, samples)
        over = self._over_budget()
        ready = len(window.rates) >= NOISE_BLOCKS  # the best is looked up only from then on
        done = ((ready and window.done(self.limits.max_blocks, self._best()))
                or (over and ready)  # its minimum, then stop
                or self._over_budget(HARD_BUDGET_FACTOR))
        if not done:
            return None
        if window.batches >= 2 and window.seconds > 0 and len(window.rates) >= 2:
            self.trials.append(window.trial(self.current, self._warmup))
        self._tried.add(self.current)
        following = None if over else self.next_settings()
        if following is None:
            return self._settle()
        return self._switch_to(following)

    def extend_warmup(self, batches: int) -> None:
        """Leave ``batches`` more out of the current window (the old iterator's outstanding
        batches, delivered before the new settings' first)."""
        self._warmup_left += max(0, batches)
        self._warmup += max(0, batches)

    def refuse(self, settings: LoaderSettings, note: str) -> Optional[LoaderSettings]:
        """``settings`` (just returned by :meth:`observe`) cannot be tried (a guard, ``note``
        says which): no trial with as many workers is made, and the next settings to switch to
        (or the kept ones, when the schedule is done and they are not in use) are returned."""
        self.notes.append(note)
        self._tried.add(settings)
        if settings.num_workers > 0:
            self.max_workers = min(self.max_workers, settings.num_workers - 1)
        previous = self.trials[-1].settings if self.trials else self.round_start
        self.current = previous
        following = self.next_settings()
        if following is None:
            return self._settle()
        return self._switch_to(following)

    def new_epoch(self) -> None:
        """A new epoch's iterator was built (any but the run's first): the window in progress
        (a trial's, or the watch's once settled) drops its partial block and leaves out the new
        iterator's warm-up."""
        self._epoch += 1
        if not self.settled:
            self.restart_window()
        elif self._watch is not None:
            self._watch.restart(warmup_for(self.current, self.limits))

    @property
    def watching(self) -> bool:
        """Whether the settled settings are watched for a drop (they were measured)."""
        return self.settled and self._watch is not None

    def _watch_batch(self, wait_s: float, loop_s: float, samples: int
                     ) -> Optional[LoaderSettings]:
        watch = self._watch
        if watch is None or self._retuned_epoch == self._epoch:
            return None
        dropped = watch.add(wait_s, loop_s, samples)
        return None if dropped is None else self._retune(watch, dropped)

    def _retune(self, watch: RateWatch, dropped: TuneTrial) -> Optional[LoaderSettings]:
        """A new round from the kept settings, whose dropped window is its start's trial."""
        self.notes.append(watch.drop_line(dropped))
        self.retunes += 1
        self._retuned_epoch = self._epoch
        self._rounds.append((len(self.trials), self.current))
        self._round_switch.append([0.0, 0.0])
        self.trials.append(dropped)
        self._tried = {self.current}
        self._climbing = self.change_workers
        self._tie_climbed = False
        self.settled = False
        self.chosen = None
        self._settled_at_s = self._settled_at_batches = None
        self._budget_from = (self._spent_s, self._spent_batches)
        self._watch = None
        following = self.next_settings()
        if following is None:
            return self._settle()
        return self._switch_to(following)

    @property
    def round_start(self) -> LoaderSettings:
        """The settings this round started from: the user's, or after a re-tune the settings
        kept before it."""
        return self._rounds[-1][1]

    def _round_trials(self) -> list[TuneTrial]:
        return self.trials[self._rounds[-1][0]:]

    def restart_window(self) -> None:
        """The current settings' iterator was rebuilt (a new epoch): the block in progress is
        dropped and the new iterator's warm-up left out; the window's whole blocks are kept,
        so a window longer than an epoch (a noisy loop takes up to ``max_blocks`` blocks)
        still ends."""
        if self.settled:
            return
        self._window.drop_partial_block()
        self._warmup_left += warmup_for(self.current, self.limits)
        self._warmup += warmup_for(self.current, self.limits)

    def _switch_to(self, settings: LoaderSettings) -> LoaderSettings:
        self.current = settings
        self._window = new_window(self.limits, settings)
        self._warmup = self._warmup_left = warmup_for(settings, self.limits)
        return settings

    def _settle(self) -> Optional[LoaderSettings]:
        """Keep :meth:`choose`'s settings; returns them when they must be switched to (``None``
        when they are in use already)."""
        chosen = self.choose()
        changed = chosen != self.current
        self.chosen = chosen
        self.settled = True
        self._settled_at_s = self._spent_s
        self._settled_at_batches = self._spent_batches
        self.current = chosen
        reference = kept_trial(self._round_trials(), chosen)
        self._watch = None if reference is None else RateWatch(
            reference, lambda: new_window(self.limits, chosen),
            warmup_for(chosen, self.limits) if changed else 0, blocks=self.limits.max_blocks)
        return chosen if changed else None

    def _over_budget(self, factor: float = 1.0) -> bool:
        spent_s, spent_batches = (self._spent_s - self._budget_from[0],
                                  self._spent_batches - self._budget_from[1])
        if spent_s >= factor * self.limits.budget_s:
            return True
        if not self.epoch_batches or len(self.trials) - self._rounds[-1][0] < MIN_BUDGET_WINDOWS:
            return False
        return spent_batches >= factor * self.limits.budget_fraction * self.epoch_batches

    # -- the schedule --------------------------------------------------------------------------

    def _rate(self, settings: LoaderSettings, trials: Optional[list[TuneTrial]] = None
              ) -> Optional[float]:
        rates = [t.samples_per_s for t in (self._round_trials() if trials is None else trials)
                 if t.settings == settings and t.samples_per_s is not None]
        return max(rates) if rates else None

    def _best(self) -> Optional[TuneTrial]:
        measured = [t for t in self._round_trials() if t.samples_per_s]
        return max(measured, key=lambda t: t.samples_per_s or 0.0) if measured else None

    def next_settings(self) -> Optional[LoaderSettings]:
        """The next settings to try after the trials so far, or ``None`` when the schedule is
        done (module docstring)."""
        best = self._best()
        if best is None:
            return None
        within = self.tie_tolerance(best)
        if self._loop_bound(best):
            self._climbing = False
        if self._climbing:
            step_from = self._climb_from(best, within)
            if step_from is not None:
                count = min(FIRST_WORKERS if step_from.num_workers == 0
                            else 2 * step_from.num_workers, self.max_workers)
                factor = step_from.prefetch_factor or PREFETCH_FACTORS[0]
                candidate = dataclasses.replace(step_from, num_workers=count,
                                                prefetch_factor=factor if count else None)
                if count > step_from.num_workers and count <= self.max_workers \
                        and candidate not in self._tried:
                    return candidate
            self._climbing = False
        fewer = self._fewer_workers()
        if fewer is not None:
            return fewer
        between = self._between_workers(best)
        if between is not None:
            return between
        kept = self.choose()  # later trials vary the settings that would be kept
        if kept.num_workers > 0 and not self._loop_bound(best):
            for factor in PREFETCH_FACTORS:
                candidate = dataclasses.replace(kept, prefetch_factor=factor)
                if candidate not in self._tried:
                    return candidate
        if self.cuda and not kept.pin_memory:
            candidate = dataclasses.replace(kept, pin_memory=True)
            if candidate not in self._tried:
                return candidate
        return None

    def _fewer_workers(self) -> Optional[LoaderSettings]:
        """The descent: when no count above the start's was kept (the climb gained nothing,
        or the start already has the most workers allowed), half the kept count, as long as
        each half ties with the fastest (the kept settings then move down to it)."""
        if not self.change_workers:
            return None
        kept = self.choose()
        if not 0 < kept.num_workers <= self.round_start.num_workers:
            return None
        lower = kept.num_workers // 2
        candidate = dataclasses.replace(
            kept, num_workers=lower,
            prefetch_factor=(kept.prefetch_factor or PREFETCH_FACTORS[0]) if lower else None)
        return None if candidate in self._tried else candidate

    def _between_workers(self, best: TuneTrial) -> Optional[LoaderSettings]:
        """Once the climb and the descent are done with ``num_workers=0`` kept: 1 worker,
        when the next count measured above 0 is 2 or more and the fastest trial's loop still
        waits a worthwhile share. The climb starts at :data:`FIRST_WORKERS`, so without this 1
        worker is never tried: the GIL-bound ``text`` pipeline beside a busy process measured 1
        worker best, 0 next and 2 below both (``docs/tuning.md``). The doubling's own gaps
        (2 to 4, 4 to 8) are left: a count between is seldom far from both."""
        if not self.change_workers or self._loop_bound(best):
            return None
        kept = self.choose()
        measured = {t.settings.num_workers for t in self._round_trials() if t.samples_per_s}
        if kept.num_workers != 0 or not any(n >= 2 for n in measured) \
                or any(s.num_workers == 1 for s in self._tried):
            return None
        return dataclasses.replace(kept, num_workers=1, prefetch_factor=PREFETCH_FACTORS[0])

    @staticmethod
    def _loop_bound(best: TuneTrial) -> bool:
        """Whether ``best``'s loop waits so little that no loader setting can gain
        :data:`~pipecheck.analysis.choice.MIN_WORTHWHILE_GAIN`: removing its whole wait would
        speed it by ``stall / (1 - stall)``."""
        stall = best.stall_fraction
        if stall is None or stall >= 1.0:
            return False
        return stall / (1.0 - stall) < MIN_WORTHWHILE_GAIN

    def _climb_from(self, best: TuneTrial, within: float) -> Optional[LoaderSettings]:
        """The settings the climb doubles next, or ``None`` when it stops: the latest trial
        when it beat every other by more than ``within``; or once a round, when it tied with
        the best (within ``within`` either way) while its loop still waited for a worthwhile
        share of its time, since a noisy tie with a producer still behind does not show that
        more workers cannot help (the GIL-bound ``text`` pipeline measured 2 workers level
        with 0 at 13 % noise, and 4 were the grid's best: ``docs/tuning.md``)."""
        latest = self._round_trials()[-1]
        if latest is best and self._beat_others(best, within):
            return latest.settings
        if self._tie_climbed or latest.samples_per_s is None or self._loop_bound(latest):
            return None
        if latest.samples_per_s >= (best.samples_per_s or 0.0) * (1.0 - within):
            self._tie_climbed = True
            return latest.settings
        return None

    def _beat_others(self, best: TuneTrial, within: float) -> bool:
        others = [t.samples_per_s for t in self._round_trials()[:-1] if t.samples_per_s]
        return not others or (best.samples_per_s or 0.0) > max(others) * (1.0 + within)

    def choose(self) -> LoaderSettings:
        """The settings to keep: the cheapest measured within the noise of the fastest
        (fewest workers, smallest ``prefetch_factor``, ``pin_memory`` off); the start when
        nothing was measured."""
        best = self._best()
        if best is None or best.samples_per_s is None:
            return self.round_start
        measured = [t for t in self._round_trials() if t.samples_per_s]
        chosen = cheapest_within(
            best.samples_per_s, measured, rate=lambda t: t.samples_per_s or 0.0,
            cost=lambda t: (t.settings.num_workers, t.settings.prefetch_factor or 0,
                            bool(t.settings.pin_memory)),
            within=self.tie_tolerance(best))
        return chosen.settings

    @staticmethod
    def tie_tolerance(best: TuneTrial) -> float:
        """The fraction (0-1) within which a measured trial ties with ``best``: its noise
        (:func:`pipecheck.analysis.choice.tolerance`), at most :data:`MAX_TIE_TOLERANCE`."""
        return min(tolerance(best.noise_fraction), MAX_TIE_TOLERANCE)

    # -- figures -------------------------------------------------------------------------------

    @property
    def status(self) -> str:
        """``settled`` once the kept settings are chosen, else ``tuning``."""
        return "settled" if self.settled else "tuning"

    def settle_reason(self) -> Optional[str]:
        """One line when the trials ended with fewer than two settings measured (nothing
        compared), else ``None``."""
        if not self.settled or len({t.settings for t in self._round_trials()}) >= 2:
            return None
        return (f"the budget ({self.limits.budget_s:g} s of loop time or "
                f"{self.limits.budget_fraction:.0%} of the epoch's batches) ended before two "
                "settings were measured: the start was kept")

    def speedup(self) -> Optional[float]:
        """The kept settings' measured samples/s over the round's start's (the user's
        settings; after a re-tune, the settings kept before it, measured in the new
        conditions); ``None`` unless both were measured."""
        start = self._rate(self.round_start)
        chosen = self._rate(self.chosen) if self.chosen is not None else None
        if not start or chosen is None:
            return None
        return chosen / start

    def tuning_s(self) -> float:
        """Loop seconds spent tuning, all rounds (to now while tuning)."""
        return self._settled_at_s if self._settled_at_s is not None else self._spent_s

    def tuning_batches(self) -> int:
        """Batches spent tuning, all rounds (to now while tuning)."""
        return (self._settled_at_batches if self._settled_at_batches is not None
                else self._spent_batches)

    def cost_s(self) -> Optional[float]:
        """What the trials slower than their round's start cost, seconds >= 0 (``None``
        without the first start measured): see :class:`pipecheck.records.TuneSection`. The
        warm-ups after each switch are counted against that rate too."""
        lost = 0.0
        for index, (first, start_settings) in enumerate(self._rounds):
            following = self._rounds[index + 1][0] if index + 1 < len(self._rounds) else None
            trials = self.trials[first:following]
            start = self._rate(start_settings, trials)
            if not start:
                if index == 0:
                    return None
                continue
            lost += sum(max(0.0, t.seconds - t.samples / start) for t in trials)
            switch_s, switch_samples = self._round_switch[index]
            lost += max(0.0, switch_s - switch_samples / start)
        return round(lost, 6)  # the start's own window gives float noise, not a cost
