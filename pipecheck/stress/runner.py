"""The sweep: run each configuration's trial within a global budget, pick the best, and build
the stress Report.

Trials of a named target (``file.py:function`` / ``module:function``) run isolated in child
processes (:mod:`pipecheck.stress.isolate`). Trials of an in-memory object (a DataLoader or a
factory function) run in this process: with workers, the rebuilt loader gets the per-trial
timeout as torch's own ``DataLoader(timeout=...)``, so a hung worker fails the trial; with
``num_workers=0`` nothing can interrupt a hung ``__getitem__`` in this process, so such a
trial blocks (use a named target when that matters).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from torch.utils.data import DataLoader

from pipecheck.analysis.consumer import epoch_count
from pipecheck.errors import BadInputError
from pipecheck.report_sections import (
    ExpectedRate,
    SearchSummary,
    SkippedConfig,
    StressChoice,
    StressSection,
    SweepTrial,
)
from pipecheck.stress.choice import cheapest_within_noise
from pipecheck.stress.execute import Source as Source  # re-exported: stress and search use it
from pipecheck.stress.execute import run_trial as run_trial  # re-exported for callers
from pipecheck.stress.settings import Step
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.target import call_factory, load_factory
from pipecheck.stress.tracker import ProgressCallback, Tracker
from pipecheck.stress.trial import TrialLimits, TrialResult

@dataclass
class Sweep:
    """What a sweep produced: trials in run order, configurations skipped (for lack of budget
    or memory, with the reason), and the stress section (:meth:`section`)."""

    trials: list[TrialResult] = field(default_factory=list)
    skipped: dict[LoaderSettings, str] = field(default_factory=dict)
    predicted: dict[LoaderSettings, dict[str, Optional[float]]] = field(default_factory=dict)
    """Model predictions made before measuring (measured configurations) or instead of it
    (:attr:`unmeasured`): ``samples_per_s``, ``batches_per_s``, ``stall_fraction``."""
    unmeasured: list[LoaderSettings] = field(default_factory=list)
    """Candidates a model-guided search chose not to measure (listed with ``measured: false``)."""
    search: Optional[SearchSummary] = None
    """How a model-guided search ran (:mod:`pipecheck.stress.search`); ``None`` for a grid."""

    def best(self) -> Optional[TrialResult]:
        """The measured trial with the highest samples/s; ``None`` when none measured."""
        measured = [t for t in self.trials if t.ok]
        return max(measured, key=lambda t: t.samples_per_s or 0.0) if measured else None

    def recommended(self) -> Optional[tuple[TrialResult, float]]:
        """The measured trial to recommend and the tie tolerance (a fraction, 0-1): the
        cheapest within the noise of :meth:`best` (:mod:`pipecheck.stress.choice`); ``None``
        when none measured."""
        best = self.best()
        return cheapest_within_noise(best, self.trials) if best is not None else None

    def section(self) -> StressSection:
        """The Report's ``stress`` section: ``trials``, ``best``, ``recommended``, ``skipped``
        and ``search`` (:class:`~pipecheck.report_sections.StressSection`).

        Every trial entry carries ``predicted_samples_per_s`` (the search model's figure before
        the trial ran; ``None`` for grid and calibration trials) and ``epochs`` (how many it
        ran: a trial runs for its time, so a short epoch is followed by more, each restarting
        its workers unless they persist; their first batches are left out of the rates).
        Candidates the search did not measure follow the measured trials with
        ``measured=False`` and their predicted rates and stall in the rate fields. ``best`` is
        always a measured trial.

        ``recommended`` is the cheapest measured configuration within the noise of the best
        (:mod:`pipecheck.stress.choice`; ``tolerance_fraction`` says how close counts as a
        tie) with its measured ``expected`` throughput and stall, ``gain`` = its samples/s
        over the baseline's (the baseline is the first trial: the given configuration when
        there is one; ``gain`` is ``None`` when it did not measure), and ``changes``: the
        settings that differ from the baseline's, ``{name: [from, to]}``.
        """
        best = self.best()
        baseline = self.trials[0] if self.trials else None
        recommended = None
        picked = self.recommended()
        if picked is not None:
            chosen, tolerance = picked
            assert chosen.samples_per_s is not None  # a measured trial (ok)
            base_rate = baseline.samples_per_s if baseline is not None and baseline.ok else None
            recommended = StressChoice(
                config=chosen.config.to_dict(),
                expected=ExpectedRate(samples_per_s=chosen.samples_per_s,
                                      stall_fraction=chosen.stall_fraction),
                baseline=baseline.config.to_dict() if baseline is not None else None,
                baseline_samples_per_s=base_rate,
                gain=chosen.samples_per_s / base_rate if base_rate else None,
                changes=_changes(baseline.config, chosen.config) if baseline else {},
                tolerance_fraction=tolerance,
            )
        trials = [self._entry(trial, epochs=_epochs(trial)) for trial in self.trials]
        for config in self.unmeasured:
            guess = self.predicted.get(config, {})
            trials.append(SweepTrial(
                config=config.to_dict(), samples_per_s=guess.get("samples_per_s"),
                batches_per_s=guess.get("batches_per_s"),
                stall_fraction=guess.get("stall_fraction"), measured=False,
                predicted_samples_per_s=guess.get("samples_per_s"), startup_s=None,
                batches=0, wall_s=0.0, error=None, epochs=0))
        return StressSection(
            trials=trials,
            best=self._entry(best, epochs=None) if best is not None else None,
            recommended=recommended,
            skipped=[SkippedConfig(config=c.to_dict(), reason=reason)
                     for c, reason in self.skipped.items()],
            search=self.search,
        )

    def _entry(self, trial: TrialResult, *, epochs: Optional[int]) -> SweepTrial:
        """``trial``'s entry with the search's prediction for it (``epochs`` ``None``: the
        ``best`` entry, which leaves it out)."""
        return SweepTrial(
            **vars(trial.entry()),
            predicted_samples_per_s=self.predicted.get(trial.config, {}).get("samples_per_s"),
            epochs=epochs)


def validate(source: Source, config: LoaderSettings) -> Source:
    """Check the target up front in this process: load it and call it once with ``config``
    (a DataLoader is returned unchanged). Returns the loaded factory for a string target.
    Raises :class:`BadInputError` naming the problem."""
    if isinstance(source, DataLoader):
        return source
    if isinstance(source, str):
        factory = load_factory(source)
        call_factory(factory, config, name=source)
        return factory
    if callable(source):
        call_factory(source, config, name=getattr(source, "__name__", "factory"))
        return source
    raise BadInputError(
        f"stress needs a DataLoader, a factory function or a TARGET string, got "
        f"{type(source).__name__}")


def run_sweep(source: Source, configs: Sequence[LoaderSettings], limits: TrialLimits, *,
              step: Optional[Step], budget_s: float,
              timeout_s: float, progress: Optional[ProgressCallback] = None,
              tracker: Optional[Tracker] = None) -> Sweep:
    """Run ``configs`` in order while each next trial is expected to end within ``budget_s``
    seconds (:meth:`Tracker.fits`; the first always runs; later ones are recorded as skipped,
    reason ``budget spent``); a configuration whose workers would not fit in the
    available memory (:mod:`pipecheck.stress.memory`) is skipped with the reason.
    ``timeout_s`` is the per-trial silence limit in seconds. A string ``source`` runs each
    trial in a child process; other sources run here (module docstring). ``tracker``: the stress
    run's own (its budget and reserve); ``None``: a new one with ``budget_s`` and ``progress``.
    """
    from pipecheck.stress.memory import skip_reason

    sweep = Sweep()
    tracker = tracker if tracker is not None else Tracker(len(configs), budget_s, progress)
    tracker.total = len(configs)
    for index, config in enumerate(configs):
        if index > 0 and not tracker.fits(limits):
            sweep.skipped.update((c, "budget spent") for c in configs[index:])
            tracker.skipped(configs[index:], len(sweep.trials))
            break
        reason = skip_reason(config, (t.record for t in sweep.trials))
        if reason is not None:
            sweep.skipped[config] = reason
            continue
        sweep.trials.append(tracker.run(source, config, limits, step=step, timeout_s=timeout_s,
                                        done=len(sweep.trials)))
    return sweep


def _epochs(trial: TrialResult) -> int:
    """Epochs a trial ran (each after the first restarted its workers unless they persist)."""
    return epoch_count(trial.record.consumer) if trial.record is not None else 0


def _changes(before: LoaderSettings, after: LoaderSettings) -> dict[str, list[Any]]:
    """Settings whose value differs, ``{name: [before, after]}`` in DataLoader keyword names."""
    old, new = before.to_dict(), after.to_dict()
    return {name: [old.get(name), new[name]] for name in new if old.get(name) != new[name]}
