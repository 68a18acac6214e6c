"""The offline driver: ``pipecheck.stress(...)`` and ``pipecheck stress TARGET`` run the loader
alone under several DataLoader settings and report which one delivers the most samples/s.

Modules: :mod:`~pipecheck.stress.settings` (configurations, step time), :mod:`.target` (find
the factory, build loaders), :mod:`.trial` (measure one configuration), :mod:`.isolate` (a trial
in a killable child process), :mod:`.runner` (the sweep and the stress section), :mod:`.search`
(the model-guided search).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from pipecheck.environment import torch_has_in_order
from pipecheck.errors import BadArgumentError, BadInputError
from pipecheck.report_sections import (
    EpochStart,
    ProfileOutcome,
    StressHeadline,
    StressSection,
    StressStep,
)
from pipecheck.stress.epoch_start import apply as apply_epoch_start
from pipecheck.stress.epoch_start import measure_epoch_start
from pipecheck.stress.epoch_start import trial_limits as epoch_trial_limits
from pipecheck.stress.isolate import check_target
from pipecheck.recommend.measured import stress_diagnosis, stress_recommendations
from pipecheck.stress.runner import Source, Sweep, run_sweep, validate
from pipecheck.stress.search import candidate_configs, run_search
from pipecheck.stress.settings import (
    DEFAULT_TRIAL_S,
    Step,
    StepFunction,
    StepTime,
    parse_step_time,
    sweep_configs,
)
from pipecheck.loader_settings import LoaderSettings, TORCH_DEFAULT_PREFETCH_FACTOR
from pipecheck.stress.target import given_config, is_file_target, split_target
from pipecheck.stress.tracker import ProgressCallback, ProgressEvent, Tracker
from pipecheck.stress.trial import TrialLimits, TrialResult

__all__ = ["ProgressEvent", "StepTime", "Sweep", "LoaderSettings", "TrialLimits", "TrialResult",
           "stress"]


def stress(source: Source, *, num_workers: Union[Sequence[int], str, None] = None,
           prefetch_factors: Optional[Sequence[int]] = None,
           persistent_workers: Optional[bool] = None,
           pin_memory: Optional[bool] = None, in_order: Optional[Sequence[bool]] = None,
           step_time_s: Any = None, step_cpu_share: float = 0.0,
           step: Union[str, Callable[[Any], Any], None] = None, batch_size: Union[int, Sequence[int], None] = None,
           baseline: Union[LoaderSettings, Mapping[str, Any], None] = None,
           budget_s: float = 60.0, timeout_s: float = 30.0,
           trial_batches: Optional[int] = None, trial_s: float = DEFAULT_TRIAL_S,
           progress: Optional[ProgressCallback] = None,
           search: str = "model", stacks: Optional[bool] = None,
           torch_threads: Optional[Sequence[int]] = None) -> Any:
    """Sweep DataLoader settings over ``source`` and return a ``kind="stress"`` Report.

    Args:
        source: a TARGET string (``file.py:function`` / ``package.module:function``; it is
            imported and called only in killable child processes: once up front to check it,
            under ``timeout_s`` (:func:`pipecheck.stress.isolate.check_target`), then once per
            trial), a factory function taking DataLoader keywords and
            returning a DataLoader or Dataset, or a DataLoader (rebuilt per configuration from
            its public attributes). The last two run in this process: see
            :mod:`pipecheck.stress.runner` for what a timeout can stop there.
        num_workers: ``num_workers`` values (>= 0), run as a plain grid; ``None`` or ``"auto"``:
            the automatic candidates ``0 .. max(8, 4 x usable CPUs)`` (at most 32,
            :func:`pipecheck.stress.search.candidate_configs`), searched as ``search`` says.
        prefetch_factors: ``prefetch_factor`` values (>= 1) tried with each worker count > 0;
            default torch's 2 with an explicit worker list, 2 and 4 with automatic workers.
        persistent_workers: ``True``: every trial keeps its workers and runs 2 epochs;
            ``False``: never; ``None`` (default): trials do not, and after the sweep the
            recommended configuration's epoch restart is measured both ways
            (:mod:`pipecheck.stress.epoch_start`); ``persistent_workers=True`` joins the
            recommendation when epoch start matters (section entry ``epoch_start``).
        pin_memory: force ``pin_memory`` (``None`` keeps the target's choice and, with CUDA,
            measures the best configuration once more with ``pin_memory=True``).
        in_order: ``in_order`` values tried with 2+ workers (torch >= 2.6); ``None``: True and
            False with automatic workers where torch has it, the target's own otherwise.
            ``in_order=False`` gives up the sampler's batch order (reproducibility).
        step_time_s: emulated step per batch in seconds: a number, ``(mean, jitter)``, a
            :class:`StepTime` or text such as ``"0.05+-0.01"``; ``None``: no step.
        step_cpu_share: the share (0-1) of each emulated step spent busy on the CPU, the rest
            asleep (:mod:`pipecheck.stress.step`): a CPU training step competes with the
            workers for cores, a GPU step mostly waits. A wrapped run's report measures it
            (the step's calling thread on the CPU). Default 0: a sleeping step.
        step: the user's own training step instead of an emulated one, called with each batch:
            ``"file.py:function"`` / ``"package.module:function"`` (with a TARGET string
            ``source``, loaded in each trial's process), or a callable (only with a source that
            runs in this process). Not with ``step_time_s``.
        batch_size: samples per batch, or several to compare (each one is searched; rates are
            compared in samples/s; the step time stays per batch); ``None`` keeps the target's.
        baseline: the configuration to beat (``LoaderSettings`` or a dict of its fields), measured
            first; ``None``: with automatic workers the given one (a DataLoader's own
            settings, or the defaults of the factory's ``num_workers`` / ``prefetch_factor`` /
            ``persistent_workers`` parameters), else ``num_workers=0``; with an explicit
            worker list its first configuration.
        budget_s: seconds the whole run may take (> 0), every trial included: a trial starts
            only when it is expected to end within the budget (its time limit plus the largest
            overhead measured so far, :class:`pipecheck.stress.tracker.Tracker`), and while
            the sweep runs the time of the trials after it (the ``pin_memory`` re-measure, the
            epoch-start pair, the profiling trial) is held back. Sweep candidates the budget
            cannot hold are skipped (``budget spent``); a trial after the sweep that does not
            fit in what is left is skipped with the seconds it needed. The baseline always runs.
        timeout_s: a trial silent this many seconds (no batch) fails as timed out (> 0).
        trial_batches: batches per trial at most, across epochs (>= 2; ``None``, the default:
            trials run for ``trial_s`` whatever the batch count).
        trial_s: wall-clock seconds each trial runs (> 0); epochs follow one another within it
            (:class:`TrialLimits`), so a short epoch still gives a trial's worth of batches.
        progress: called with a :class:`pipecheck.stress.tracker.ProgressEvent` as trials
            start, deliver batches and finish.
        search: with automatic workers, ``"model"`` (default) measures only what the what-if
            model predicts may beat the best measured (:mod:`pipecheck.stress.search`);
            ``"grid"`` measures every candidate. Ignored with an explicit worker list.
        torch_threads: the main process's torch intra-op thread counts (>= 1) tried with
            every configuration (``torch.set_num_threads`` in the trial's process around the
            trial, then restored); ``None``: the process's own. It matters with your own CPU
            step (``step``): the emulated step is a Python loop that runs no intra-op threads.
        stacks: after the sweep, run one profiling trial of the recommended configuration with
            py-spy (:mod:`pipecheck.probes.stacks`) and put its hot stacks in the report; it is
            not compared (sampling costs throughput). ``None``: when py-spy is installed and
            permitted (else the stress section's ``profile`` says why not).

    Returns:
        a :class:`pipecheck.Report` whose ``stress`` section lists every trial, the best
        (fastest measured) and the recommended configuration (the cheapest within the noise
        of the best, :mod:`pipecheck.stress.choice`, with its gain over the baseline); its
        recommendations are that configuration's changes with their measured figures
        (:mod:`pipecheck.recommend.measured`); its other sections come from the
        recommended trial's measurement.

    Raises:
        BadInputError: a bad target (missing file or function, the function raises or returns
            neither a DataLoader nor a Dataset; for a TARGET string also: its import or call
            hangs past ``timeout_s``, or its process dies), bad option values, or no trial measured
            anything (the message gives each trial's error).
    """
    started = time.perf_counter()  # the budget covers validating the target too
    if not budget_s > 0 or not timeout_s > 0 or not trial_s > 0:
        raise BadArgumentError("budget, timeout and trial seconds must be > 0")
    if trial_batches is not None and trial_batches < 2:
        raise BadArgumentError(f"trial_batches must be at least 2, got {trial_batches}")
    if search not in ("model", "grid"):
        raise BadArgumentError(f"search must be 'model' or 'grid', got {search!r}")
    if isinstance(num_workers, str) and num_workers != "auto":
        raise BadArgumentError(
            f"num_workers must be a list of counts or 'auto', got {num_workers!r}")
    if in_order is not None and not torch_has_in_order():
        raise BadInputError("this torch's DataLoader has no in_order (added in torch 2.6)")
    trial_step = _trial_step(step_time_s, step_cpu_share, step, isinstance(source, str))
    sizes: list[Optional[int]] = ([batch_size] if batch_size is None or isinstance(batch_size, int)
                                  else list(batch_size))
    auto = num_workers is None or num_workers == "auto"
    threads: list[Optional[int]] = [None] if torch_threads is None else list(torch_threads)
    if auto:
        configs = candidate_configs(prefetch_factors, persistent_workers=bool(persistent_workers),
                                    pin_memory=pin_memory, in_orders=in_order,
                                    batch_sizes=sizes, torch_threads=threads)
    else:
        configs = sweep_configs(num_workers, prefetch_factors,  # type: ignore[arg-type]
                                persistent_workers=bool(persistent_workers),
                                pin_memory=pin_memory, in_orders=in_order or [None],
                                batch_sizes=sizes, torch_threads=threads)
    # The given configuration joins automatic candidates; an explicit list is taken as asked.
    derive = auto or baseline is not None
    if isinstance(source, str):  # the user's code runs in a child, never in this process
        wanted = baseline.to_dict() if isinstance(baseline, LoaderSettings) else baseline
        first = check_target(source, configs[0], baseline=None if wanted is None else
                             dict(wanted), derive_baseline=derive, timeout_s=timeout_s)
        checked: Source = source
    else:
        checked = validate(source, configs[0])
        first = _baseline(baseline, checked, configs[0]) if derive else None
        if first is not None:
            validate(checked, first)
    if first is not None:
        configs = [first] + [c for c in configs if c != first]
    limits = TrialLimits(batches=trial_batches, seconds=trial_s,
                         epochs=2 if persistent_workers else None)
    run = run_search if auto and search == "model" else run_sweep
    runnable = source if isinstance(source, str) else checked
    unprofiled = ("stacks=False" if stacks is False
                  else stacks_unavailable() if stacks is None else None)
    with_workers = any(c.num_workers > 0 for c in configs)
    later = _LaterTrials(pin=pin_memory is None and with_workers and cuda_available(),
                         epoch=persistent_workers is None and with_workers,
                         profile=unprofiled is None, limits=limits)
    tracker = Tracker(len(configs), budget_s, progress, reserve=later.reserve, started=started)
    tracker.later_trials = later.count()
    sweep = run(runnable, configs, limits, step=trial_step, budget_s=budget_s, timeout_s=timeout_s,
                tracker=tracker)
    best = sweep.best()
    if best is None or best.record is None:
        reasons = "; ".join(f"{t.config.label()}: {t.error}" for t in sweep.trials)
        raise BadInputError(f"no trial measured anything ({reasons})")
    # What follows the sweep concerns the configuration the user is told to run; each trial
    # runs only when the budget left holds it (the sweep kept that time in reserve).
    chosen = _recommended(sweep)
    pin = later.pin and _pinnable(best.config)
    epoch = later.epoch and chosen.config.num_workers > 0
    short = epoch_trial_limits(chosen, limits)
    extra = _ExtraTrials(runnable, trial_step, timeout_s,
                         tracker.follow_on(int(pin) + 2 * int(epoch) + int(later.profile),
                                           progress))
    if pin:
        pinned = dataclasses.replace(best.config, pin_memory=True)
        if extra.fits(limits):
            sweep.trials.append(extra(pinned, limits))
            chosen = _recommended(sweep)
        else:
            sweep.skipped[pinned] = extra.shortfall(limits)
    section = sweep.section()
    if persistent_workers is None:
        if epoch and not extra.fits(short, short):
            epoch_start = EpochStart(status="skipped", reason=extra.shortfall(short, short))
        else:
            epoch_start = measure_epoch_start(chosen, limits, extra)
        section = dataclasses.replace(
            section, epoch_start=epoch_start,
            recommended=apply_epoch_start(section.recommended, epoch_start))
    if unprofiled is None and not extra.fits(limits):
        unprofiled = extra.shortfall(limits)
    record, profile = _profile(unprofiled, stacks, extra, chosen, limits)
    section = dataclasses.replace(section, profile=profile, headline=headline(chosen),
                                  step=_described(trial_step))
    return stress_report(record, section)


def headline(chosen: TrialResult) -> StressHeadline:
    """The stress section's ``headline``: the sweep trial whose record gives the report's
    ``consumer``, ``producer`` and ``host`` sections (the recommended configuration's, never the
    profiling trial), with its steady rates (each epoch's first batch left out: the figures the
    sweep compares, ``steady_samples_per_s`` / ``steady_batches_per_s``) and its whole-run
    rates (worker start-up included: the report's ``consumer`` figures, ``run_samples_per_s``
    / ``run_batches_per_s``), all per second."""
    return StressHeadline(config=chosen.config.to_dict(), source="sweep",
                          steady_samples_per_s=chosen.samples_per_s,
                          steady_batches_per_s=chosen.batches_per_s,
                          run_samples_per_s=chosen.run_samples_per_s,
                          run_batches_per_s=chosen.run_batches_per_s)


def stress_report(record: Any, section: StressSection) -> Any:
    """The stress Report from the recommended trial's ``record`` (a ``RunRecord``) and the
    stress ``section``: the measured recommendation replaces the model's proposals for the
    searched settings, and the diagnosis's ``insufficient-data`` finding is restated to match
    (:mod:`pipecheck.recommend.measured`), so the report's recommendations and what it
    says about them come from the one stress section."""
    from pipecheck.report import build_report

    report = build_report(record, stress=section)
    return dataclasses.replace(
        report, recommendations=stress_recommendations(section, report.recommendations),
        diagnosis=stress_diagnosis(report.diagnosis, section.epoch_start))


class _LaterTrials:
    """The trials that may follow the sweep (the ``pin_memory`` re-measure, the epoch-start
    pair, the profiling trial) and the seconds of the budget to hold back for them while the
    sweep runs (:meth:`reserve`, a :class:`~pipecheck.stress.tracker.Reserve`): each one's
    time limit plus the largest overhead measured so far, the epoch-start pair's limit
    estimated from the fastest measured trial (:func:`pipecheck.stress.epoch_start.trial_limits`)."""

    def __init__(self, *, pin: bool, epoch: bool, profile: bool, limits: TrialLimits) -> None:
        self.pin, self.epoch, self.profile, self._limits = pin, epoch, profile, limits

    def count(self) -> int:
        """How many trials may follow the sweep (those :meth:`reserve` holds time for)."""
        return int(self.pin) + int(self.profile) + 2 * int(self.epoch)

    def reserve(self, tracker: Tracker) -> float:
        measured = [r for r in tracker.results if r.ok]
        best = max(measured, key=lambda r: r.samples_per_s or 0.0) if measured else None
        held = (int(self.pin) + int(self.profile)) * tracker.expected_wall_s(self._limits)
        if self.epoch:
            held += 2 * tracker.expected_wall_s(epoch_trial_limits(best, self._limits))
        return held


class _ExtraTrials:
    """Runs the trials after the sweep (the ``pin_memory`` re-measure, the epoch-start pair, the
    profiling trial) on ``tracker`` (a follow-on of the sweep's: the same clock, budget and
    live progress events)."""

    def __init__(self, source: Source, step: Optional[Step], timeout_s: float,
                 tracker: Tracker) -> None:
        self._tracker = tracker
        self._source, self._step, self._timeout_s = source, step, timeout_s
        self._done = 0

    def fits(self, *limits: TrialLimits) -> bool:
        """Whether trials with these limits are expected to end within the budget left."""
        return self._tracker.fits(*limits)

    def shortfall(self, *limits: TrialLimits) -> str:
        """Why they do not fit (:meth:`Tracker.shortfall`)."""
        return self._tracker.shortfall(*limits)

    def __call__(self, config: LoaderSettings, limits: TrialLimits) -> TrialResult:
        result = self._tracker.run(self._source, config, limits, step=self._step,
                                   timeout_s=self._timeout_s, done=self._done)
        self._done += 1
        return result


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (``pin_memory`` only matters then)."""
    import torch

    return bool(torch.cuda.is_available())


def _recommended(sweep: Sweep) -> TrialResult:
    """The measured trial the sweep recommends (it measured at least one)."""
    picked = sweep.recommended()
    assert picked is not None
    return picked[0]


def _pinnable(config: LoaderSettings) -> bool:
    """Whether the best configuration is worth measuring again with ``pin_memory=True``
    (page-locked batches make the host-to-device copy asynchronous; torch's pin_memory
    documentation): it has workers and does not pin yet. The model does not predict pinning,
    so that trial is measured and joins the sweep's trials."""
    return config.num_workers > 0 and config.pin_memory is not True


def _profile(unprofiled: Optional[str], stacks: Optional[bool], run: _ExtraTrials,
             chosen: TrialResult, limits: TrialLimits) -> tuple[Any, ProfileOutcome]:
    """The recommended trial's record with hot stacks from a profiling trial of its
    configuration, and the stress section's ``profile`` entry (``status`` ``ok``, ``failed``,
    ``skipped`` or ``off``, with ``reason``). ``unprofiled``: why no profiling trial runs
    (``None``: it runs)."""
    if unprofiled is not None:
        status = "off" if stacks is False else "skipped"
        return chosen.record, ProfileOutcome(status=status, reason=unprofiled)
    profiled = run(chosen.config, dataclasses.replace(limits, stacks=True))
    if profiled.record is None or profiled.record.stacks is None:
        return chosen.record, ProfileOutcome(
            status="failed", config=chosen.config.to_dict(),
            reason=profiled.error or "the profiling trial took no stacks")
    assert chosen.record is not None  # a measured trial keeps its record (trial.summarize)
    record = dataclasses.replace(chosen.record, stacks=profiled.record.stacks)
    return record, ProfileOutcome(status="ok", config=chosen.config.to_dict(),
                                  samples_per_s=profiled.samples_per_s, reason=None)


def stacks_unavailable() -> Optional[str]:
    """Why py-spy cannot sample here (one line with how to enable it); ``None`` when it can."""
    from pipecheck.probes.py_spy_setup import (find_py_spy, has_cap_sys_ptrace, ptrace_scope,
                                               unavailable_reason)

    return unavailable_reason(find_py_spy(), ptrace_scope(), has_cap_sys_ptrace())


def _baseline(given: Union[LoaderSettings, Mapping[str, Any], None], source: Source,
              first: LoaderSettings) -> Optional[LoaderSettings]:
    """The baseline to measure first, aligned with the candidates' batch size, ``pin_memory``
    and ``in_order`` where it leaves them open; ``None`` to keep ``first``."""
    if given is None:
        config = given_config(source)
    elif isinstance(given, LoaderSettings):
        config = given
    else:
        try:
            config = LoaderSettings(**given)
        except TypeError as err:
            raise BadArgumentError(f"bad baseline {dict(given)!r}: {err}") from None
    if config is None:
        return None
    if config.num_workers < 0 or (config.num_workers > 0 and (config.prefetch_factor or 1) < 1):
        raise BadArgumentError(f"bad baseline: {config.label()}")
    if config.num_workers > 0 and config.prefetch_factor is None:
        config = dataclasses.replace(config, prefetch_factor=TORCH_DEFAULT_PREFETCH_FACTOR)
    fill = {name: getattr(first, name) for name in ("pin_memory", "in_order", "batch_size")
            if getattr(config, name) is None}
    return dataclasses.replace(config, **fill)


def _step_time(value: Any, cpu_share: float) -> Optional[StepTime]:
    if value is None:
        if cpu_share:
            raise BadArgumentError("a step CPU share needs a step time (--step-time)")
        return None
    if isinstance(value, StepTime):
        return value if not cpu_share else dataclasses.replace(value, cpu_share=cpu_share)
    if isinstance(value, str):
        return dataclasses.replace(parse_step_time(value), cpu_share=cpu_share)
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return StepTime(float(value[0]), float(value[1]), cpu_share)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return StepTime(float(value), 0.0, cpu_share)
    raise BadArgumentError(f"step_time_s must be seconds or (mean, jitter), got {value!r}")


def _trial_step(time_s: Any, cpu_share: float, function: Any, isolated: bool) -> Optional[Step]:
    """The step every trial runs, from :func:`stress`'s ``step_time_s``, ``step_cpu_share``
    and ``step``. Raises :class:`BadInputError` for both a time and a function, a callable with
    a TARGET string, or a step file that does not exist."""
    if function is None:
        return _step_time(time_s, cpu_share)
    if time_s is not None or cpu_share:
        raise BadArgumentError("give the step as a time (--step-time) or as your function "
                            "(--step), not both")
    if callable(function):
        if isolated:
            raise BadArgumentError("with a TARGET string the step must be 'file.py:function' too "
                                "(it runs in each trial's process)")
        name = getattr(function, "__qualname__", type(function).__qualname__)
        return StepFunction(f"{getattr(function, '__module__', '?')}:{name}", function)
    if not isinstance(function, str):
        raise BadArgumentError(f"step must be 'file.py:function' or a callable, got {function!r}")
    where, _ = split_target(function)
    if is_file_target(where) and not os.path.isfile(where):
        raise BadInputError(f"step file not found: {where}")
    return StepFunction(function)


def _described(step: Optional[Step]) -> StressStep:
    """The stress section's ``step`` entry for ``step``."""
    if isinstance(step, StepFunction):
        return StressStep(kind="function", function=step.target)
    if step is None or step.mean_s <= 0:
        return StressStep(kind="none")
    return StressStep(kind="emulated", mean_s=step.mean_s, jitter_s=step.jitter_s,
                      cpu_share=step.cpu_share)
