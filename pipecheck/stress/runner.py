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

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

from torch.utils.data import DataLoader

from pipecheck.errors import BadInputError
from pipecheck.stress.settings import StepTime, TrialConfig
from pipecheck.stress.target import Factory, call_factory, load_factory, rebuild_loader
from pipecheck.stress.trial import TrialLimits, TrialResult, failed, measure

Source = Union[str, Factory, DataLoader]
ProgressCallback = Callable[[str, TrialConfig, int, int, Optional[TrialResult]], None]
"""``(event, config, done, total, result)``; ``event`` is ``start``, ``done`` or ``skipped``."""


@dataclass
class Sweep:
    """What a sweep produced: trials in run order, configurations skipped for lack of budget,
    and the stress section (:meth:`section`)."""

    trials: list[TrialResult] = field(default_factory=list)
    skipped: list[TrialConfig] = field(default_factory=list)
    predicted: dict[TrialConfig, dict[str, Optional[float]]] = field(default_factory=dict)
    """Model predictions made before measuring (measured configurations) or instead of it
    (:attr:`unmeasured`): ``samples_per_s``, ``batches_per_s``, ``stall_fraction``."""
    unmeasured: list[TrialConfig] = field(default_factory=list)
    """Candidates a model-guided search chose not to measure (listed with ``measured: false``)."""
    search: Optional[dict[str, Any]] = None
    """How a model-guided search ran (:mod:`pipecheck.stress.search`); ``None`` for a grid."""

    def best(self) -> Optional[TrialResult]:
        """The measured trial with the highest samples/s; ``None`` when none measured."""
        measured = [t for t in self.trials if t.ok]
        return max(measured, key=lambda t: t.samples_per_s) if measured else None

    def section(self) -> dict[str, Any]:
        """The Report's ``stress`` section: ``trials``, ``best``, ``recommended``, ``skipped``
        and ``search``.

        Every trial entry carries ``predicted_samples_per_s`` (the search model's figure before
        the trial ran; ``None`` for grid and calibration trials). Candidates the search did not
        measure follow the measured trials with ``measured: false`` and their predicted rates
        and stall in the rate fields. ``best`` is always a measured trial.

        ``recommended`` is the best configuration with ``expected`` throughput and stall and
        ``gain`` = best / baseline samples/s (the baseline is the first trial; ``None`` when it
        did not measure).
        """
        best = self.best()
        baseline = self.trials[0] if self.trials else None
        recommended = None
        if best is not None:
            base_rate = baseline.samples_per_s if baseline is not None and baseline.ok else None
            recommended = {
                "config": best.config.to_dict(),
                "expected": {"samples_per_s": best.samples_per_s,
                             "stall_fraction": best.stall_fraction},
                "baseline": baseline.config.to_dict() if baseline is not None else None,
                "baseline_samples_per_s": base_rate,
                "gain": best.samples_per_s / base_rate if base_rate else None,
            }
        trials = []
        for trial in self.trials:
            entry = trial.to_dict()
            entry["predicted_samples_per_s"] = self.predicted.get(trial.config, {}).get(
                "samples_per_s")
            trials.append(entry)
        for config in self.unmeasured:
            guess = self.predicted.get(config, {})
            trials.append({
                "config": config.to_dict(), "samples_per_s": guess.get("samples_per_s"),
                "batches_per_s": guess.get("batches_per_s"),
                "stall_fraction": guess.get("stall_fraction"), "measured": False,
                "predicted_samples_per_s": guess.get("samples_per_s"), "startup_s": None,
                "batches": 0, "wall_s": 0.0, "error": None})
        best_entry = None
        if best is not None:
            best_entry = best.to_dict()
            best_entry["predicted_samples_per_s"] = self.predicted.get(best.config, {}).get(
                "samples_per_s")
        return {
            "trials": trials,
            "best": best_entry,
            "recommended": recommended,
            "skipped": [c.to_dict() for c in self.skipped],
            "search": self.search,
        }


def validate(source: Source, config: TrialConfig, batch_size: Optional[int]) -> Source:
    """Check the target up front in this process: load it and call it once with ``config``
    (a DataLoader is returned unchanged). Returns the loaded factory for a string target.
    Raises :class:`BadInputError` naming the problem."""
    if isinstance(source, DataLoader):
        return source
    if isinstance(source, str):
        factory = load_factory(source)
        call_factory(factory, config, batch_size, name=source)
        return factory
    if callable(source):
        call_factory(source, config, batch_size, name=getattr(source, "__name__", "factory"))
        return source
    raise BadInputError(
        f"stress needs a DataLoader, a factory function or a TARGET string, got "
        f"{type(source).__name__}")


def run_sweep(source: Source, configs: Sequence[TrialConfig], limits: TrialLimits, *,
              step: Optional[StepTime], batch_size: Optional[int], budget_s: float,
              timeout_s: float, progress: Optional[ProgressCallback] = None) -> Sweep:
    """Run ``configs`` in order until ``budget_s`` seconds are spent (a started trial finishes;
    later ones are recorded as skipped). ``timeout_s`` is the per-trial silence limit. A string
    ``source`` runs each trial in a child process; other sources run here (module docstring)."""
    sweep = Sweep()
    started = time.perf_counter()
    total = len(configs)
    for index, config in enumerate(configs):
        if time.perf_counter() - started >= budget_s and index > 0:
            sweep.skipped.extend(configs[index:])
            if progress is not None:
                for skipped in configs[index:]:
                    progress("skipped", skipped, index, total, None)
            break
        if progress is not None:
            progress("start", config, index, total, None)
        result = run_trial(source, config, limits, step=step, batch_size=batch_size,
                           timeout_s=timeout_s)
        sweep.trials.append(result)
        if progress is not None:
            progress("done", config, index + 1, total, result)
    return sweep


def run_trial(source: Source, config: TrialConfig, limits: TrialLimits, *,
              step: Optional[StepTime], batch_size: Optional[int],
              timeout_s: float) -> TrialResult:
    """Measure one configuration: in a child process for a string ``source``, here otherwise
    (module docstring). Never raises for a failing target: the result carries the error."""
    from pipecheck.stress.isolate import run_isolated

    if isinstance(source, str):
        return run_isolated(source, config, limits, step=step, batch_size=batch_size,
                            timeout_s=timeout_s)
    return _run_here(source, config, limits, step, batch_size, timeout_s)


def _run_here(source: Union[Factory, DataLoader], config: TrialConfig, limits: TrialLimits,
              step: Optional[StepTime], batch_size: Optional[int],
              timeout_s: float) -> TrialResult:
    try:
        if isinstance(source, DataLoader):
            loader = rebuild_loader(source, config, timeout_s=timeout_s)
        else:
            built = call_factory(source, config, batch_size,
                                 name=getattr(source, "__name__", "factory"))
            loader = rebuild_loader(built, config, timeout_s=timeout_s)
    except BadInputError as err:
        return failed(config, str(err))
    return measure(loader, config, limits, step)
