"""The offline driver: ``pipecheck.stress(...)`` and ``pipecheck stress TARGET`` run the loader
alone under several DataLoader settings and report which one delivers the most samples/s.

Modules: :mod:`~pipecheck.stress.settings` (configurations, step time), :mod:`.target` (find
the factory, build loaders), :mod:`.trial` (measure one configuration), :mod:`.isolate` (a trial
in a killable child process), :mod:`.runner` (the sweep and the stress section), :mod:`.search`
(the model-guided search).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from pipecheck.errors import BadInputError
from pipecheck.stress.runner import ProgressCallback, Source, Sweep, run_sweep, validate
from pipecheck.stress.search import candidate_configs, run_search
from pipecheck.stress.settings import StepTime, TrialConfig, parse_step_time, sweep_configs
from pipecheck.stress.trial import TrialLimits, TrialResult

__all__ = ["StepTime", "Sweep", "TrialConfig", "TrialLimits", "TrialResult", "stress"]


def stress(source: Source, *, workers: Union[Sequence[int], str, None] = None,
           prefetch_factors: Optional[Sequence[int]] = None, persistent_workers: bool = False,
           pin_memory: Optional[bool] = None, step_time_s: Any = None,
           batch_size: Optional[int] = None, budget_s: float = 60.0, timeout_s: float = 30.0,
           trial_batches: int = 50, trial_s: float = 10.0,
           progress: Optional[ProgressCallback] = None, search: str = "model") -> Any:
    """Sweep DataLoader settings over ``source`` and return a ``kind="stress"`` Report.

    Args:
        source: a TARGET string (``file.py:function`` / ``package.module:function``; trials run
            in killable child processes), a factory function taking DataLoader keywords and
            returning a DataLoader or Dataset, or a DataLoader (rebuilt per configuration from
            its public attributes). The last two run in this process: see
            :mod:`pipecheck.stress.runner` for what a timeout can stop there.
        workers: ``num_workers`` values (>= 0), run as a plain grid; ``None`` or ``"auto"``:
            the automatic candidates ``0 .. max(8, 4 x usable CPUs)`` (at most 32,
            :func:`pipecheck.stress.search.candidate_configs`), searched as ``search`` says.
        prefetch_factors: ``prefetch_factor`` values (>= 1) tried with each worker count > 0;
            default torch's 2 with an explicit worker list, 2 and 4 with automatic workers.
        persistent_workers: keep workers across epochs; each trial then runs 2 epochs.
        pin_memory: force ``pin_memory`` (``None`` keeps the target's choice).
        step_time_s: emulated step per batch in seconds: a number, ``(mean, jitter)``, a
            :class:`StepTime` or text such as ``"0.05+-0.01"``; ``None``: no step.
        batch_size: offered to the factory and used when it returns a Dataset.
        budget_s: seconds after which no new trial starts (> 0; remaining ones are skipped).
        timeout_s: a trial silent this many seconds (no batch) fails as timed out (> 0).
        trial_batches: batches per epoch per trial (>= 2; the first is warm-up).
        trial_s: wall-clock seconds per trial at most (> 0).
        progress: called as ``(event, config, done, total, result)`` during the sweep.
        search: with automatic workers, ``"model"`` (default) measures only what the what-if
            model predicts may beat the best measured (:mod:`pipecheck.stress.search`);
            ``"grid"`` measures every candidate. Ignored with an explicit worker list.

    Returns:
        a :class:`pipecheck.Report` whose ``stress`` section lists every trial, the best and the
        recommended configuration; its other sections come from the best trial's measurement.

    Raises:
        BadInputError: a bad target (missing file or function, the function raises or returns
            neither a DataLoader nor a Dataset), bad option values, or no trial measured
            anything (the message gives each trial's error).
    """
    from pipecheck.report import build_report

    if not budget_s > 0 or not timeout_s > 0 or not trial_s > 0:
        raise BadInputError("budget, timeout and trial seconds must be > 0")
    if trial_batches < 2:
        raise BadInputError(f"trial_batches must be at least 2, got {trial_batches}")
    if search not in ("model", "grid"):
        raise BadInputError(f"search must be 'model' or 'grid', got {search!r}")
    if isinstance(workers, str) and workers != "auto":
        raise BadInputError(f"workers must be a list of counts or 'auto', got {workers!r}")
    step = _step(step_time_s)
    auto = workers is None or workers == "auto"
    if auto:
        configs = candidate_configs(prefetch_factors, persistent_workers=persistent_workers,
                                    pin_memory=pin_memory)
    else:
        configs = sweep_configs(workers, prefetch_factors,  # type: ignore[arg-type]
                                persistent_workers=persistent_workers, pin_memory=pin_memory)
    checked = validate(source, configs[0], batch_size)
    limits = TrialLimits(batches=trial_batches, seconds=trial_s,
                         epochs=2 if persistent_workers else 1)
    run = run_search if auto and search == "model" else run_sweep
    sweep = run(source if isinstance(source, str) else checked, configs, limits,
                step=step, batch_size=batch_size, budget_s=budget_s, timeout_s=timeout_s,
                progress=progress)
    best = sweep.best()
    if best is None or best.record is None:
        reasons = "; ".join(f"{t.config.label()}: {t.error}" for t in sweep.trials)
        raise BadInputError(f"no trial measured anything ({reasons})")
    return build_report(best.record, stress=sweep.section())


def _step(value: Any) -> Optional[StepTime]:
    if value is None or isinstance(value, StepTime):
        return value
    if isinstance(value, str):
        return parse_step_time(value)
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return StepTime(float(value[0]), float(value[1]))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return StepTime(float(value))
    raise BadInputError(f"step_time_s must be seconds or (mean, jitter), got {value!r}")
