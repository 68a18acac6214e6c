"""The offline driver: ``pipecheck.stress(...)`` and ``pipecheck stress TARGET`` run the loader
alone under several DataLoader settings and report which one delivers the most samples/s.

Modules: :mod:`~pipecheck.stress.settings` (configurations, step time), :mod:`.target` (find
the factory, build loaders), :mod:`.trial` (measure one configuration), :mod:`.isolate` (a trial
in a killable child process), :mod:`.runner` (the sweep and the stress section), :mod:`.search`
(the model-guided search).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence, Union

from pipecheck.environment import torch_has_in_order
from pipecheck.errors import BadInputError
from pipecheck.stress.runner import Source, Sweep, run_sweep, validate
from pipecheck.stress.search import candidate_configs, run_search
from pipecheck.stress.settings import (
    TORCH_DEFAULT_PREFETCH_FACTOR,
    StepTime,
    TrialConfig,
    parse_step_time,
    sweep_configs,
)
from pipecheck.stress.target import given_config
from pipecheck.stress.tracker import ProgressCallback, ProgressEvent
from pipecheck.stress.trial import TrialLimits, TrialResult

__all__ = ["ProgressEvent", "StepTime", "Sweep", "TrialConfig", "TrialLimits", "TrialResult",
           "stress"]


def stress(source: Source, *, workers: Union[Sequence[int], str, None] = None,
           prefetch_factors: Optional[Sequence[int]] = None, persistent_workers: bool = False,
           pin_memory: Optional[bool] = None, in_order: Optional[Sequence[bool]] = None,
           step_time_s: Any = None, batch_size: Union[int, Sequence[int], None] = None,
           baseline: Union[TrialConfig, Mapping[str, Any], None] = None,
           budget_s: float = 60.0, timeout_s: float = 30.0, trial_batches: int = 50,
           trial_s: float = 10.0, progress: Optional[ProgressCallback] = None,
           search: str = "model", stacks: Optional[bool] = None) -> Any:
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
        pin_memory: force ``pin_memory`` (``None`` keeps the target's choice and, with CUDA,
            measures the best configuration once more with ``pin_memory=True``).
        in_order: ``in_order`` values tried with 2+ workers (torch >= 2.6); ``None``: True and
            False with automatic workers where torch has it, the target's own otherwise.
            ``in_order=False`` gives up the sampler's batch order (reproducibility).
        step_time_s: emulated step per batch in seconds: a number, ``(mean, jitter)``, a
            :class:`StepTime` or text such as ``"0.05+-0.01"``; ``None``: no step.
        batch_size: samples per batch, or several to compare (each one is searched; rates are
            compared in samples/s; the step time stays per batch); ``None`` keeps the target's.
        baseline: the configuration to beat (``TrialConfig`` or a dict of its fields), measured
            first; ``None``: with automatic workers the given one (a DataLoader's own
            settings, or the defaults of the factory's ``num_workers`` / ``prefetch_factor`` /
            ``persistent_workers`` parameters), else ``num_workers=0``; with an explicit
            worker list its first configuration.
        budget_s: seconds after which no new sweep trial starts (> 0; remaining ones are
            skipped). The ``pin_memory`` re-measure and the profiling trial (``stacks``) run
            after the sweep all the same, one trial each.
        timeout_s: a trial silent this many seconds (no batch) fails as timed out (> 0).
        trial_batches: batches per epoch per trial (>= 2; the first is warm-up).
        trial_s: wall-clock seconds per trial at most (> 0).
        progress: called with a :class:`pipecheck.stress.tracker.ProgressEvent` as trials
            start, deliver batches and finish.
        search: with automatic workers, ``"model"`` (default) measures only what the what-if
            model predicts may beat the best measured (:mod:`pipecheck.stress.search`);
            ``"grid"`` measures every candidate. Ignored with an explicit worker list.
        stacks: after the sweep, run one profiling trial of the best configuration with py-spy
            (:mod:`pipecheck.probes.stacks`) and put its hot stacks in the report; it is not
            compared (sampling costs throughput). ``None``: when py-spy is installed and
            permitted (else the stress section's ``profile`` says why not).

    Returns:
        a :class:`pipecheck.Report` whose ``stress`` section lists every trial, the best and the
        recommended configuration (with its gain over the baseline); its other sections come
        from the best trial's measurement.

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
    if in_order is not None and not torch_has_in_order():
        raise BadInputError("this torch's DataLoader has no in_order (added in torch 2.6)")
    step = _step(step_time_s)
    sizes: list[Optional[int]] = ([batch_size] if batch_size is None or isinstance(batch_size, int)
                                  else list(batch_size))
    auto = workers is None or workers == "auto"
    if auto:
        configs = candidate_configs(prefetch_factors, persistent_workers=persistent_workers,
                                    pin_memory=pin_memory, in_orders=in_order,
                                    batch_sizes=sizes)
    else:
        configs = sweep_configs(workers, prefetch_factors,  # type: ignore[arg-type]
                                persistent_workers=persistent_workers, pin_memory=pin_memory,
                                in_orders=in_order or [None], batch_sizes=sizes)
    checked = validate(source, configs[0])
    # The given configuration joins automatic candidates; an explicit list is taken as asked.
    first = _baseline(baseline, checked, configs[0]) if auto or baseline is not None else None
    if first is not None:
        configs = [first] + [c for c in configs if c != first]
        validate(checked, first)
    limits = TrialLimits(batches=trial_batches, seconds=trial_s,
                         epochs=2 if persistent_workers else 1)
    run = run_search if auto and search == "model" else run_sweep
    runnable = source if isinstance(source, str) else checked
    sweep = run(runnable, configs, limits, step=step, budget_s=budget_s, timeout_s=timeout_s,
                progress=progress)
    if pin_memory is None and cuda_available():
        _check_pin_memory(sweep, runnable, limits, step, timeout_s)
    best = sweep.best()
    if best is None or best.record is None:
        reasons = "; ".join(f"{t.config.label()}: {t.error}" for t in sweep.trials)
        raise BadInputError(f"no trial measured anything ({reasons})")
    section = sweep.section()
    record, section["profile"] = _profile(stacks, runnable, best, limits, step, timeout_s)
    return build_report(record, stress=section)


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (``pin_memory`` only matters then)."""
    import torch

    return bool(torch.cuda.is_available())


def _check_pin_memory(sweep: Sweep, source: Source, limits: TrialLimits,
                      step: Optional[StepTime], timeout_s: float) -> None:
    """With CUDA, measure the best configuration again with ``pin_memory=True`` (page-locked
    batches make the host-to-device copy asynchronous; torch's pin_memory documentation) and
    add that trial to ``sweep``; the model does not predict pinning, so it is measured.
    Nothing happens when the best already pins or has no workers."""
    from pipecheck.stress.runner import run_trial

    best = sweep.best()
    if best is None or best.config.pin_memory is True or best.config.num_workers == 0:
        return
    pinned = dataclasses.replace(best.config, pin_memory=True)
    sweep.trials.append(run_trial(source, pinned, limits, step=step, timeout_s=timeout_s))


def _profile(stacks: Optional[bool], source: Source, best: TrialResult, limits: TrialLimits,
             step: Optional[StepTime], timeout_s: float) -> tuple[Any, dict[str, Any]]:
    """The best trial's record with hot stacks from a profiling trial of its configuration, and
    the stress section's ``profile`` entry (``status`` ``ok``, ``failed``, ``skipped`` or
    ``off``, with ``reason``)."""
    from pipecheck.stress.runner import run_trial

    if stacks is False:
        return best.record, {"status": "off", "reason": "stacks=False"}
    if stacks is None:
        reason = stacks_unavailable()
        if reason is not None:
            return best.record, {"status": "skipped", "reason": reason}
    profiled = run_trial(source, best.config, dataclasses.replace(limits, stacks=True),
                         step=step, timeout_s=timeout_s)
    if profiled.record is None or profiled.record.stacks is None:
        return best.record, {"status": "failed", "config": best.config.to_dict(),
                             "reason": profiled.error or "the profiling trial took no stacks"}
    record = dataclasses.replace(best.record, stacks=profiled.record.stacks)
    return record, {"status": "ok", "config": best.config.to_dict(),
                    "samples_per_s": profiled.samples_per_s, "reason": None}


def stacks_unavailable() -> Optional[str]:
    """Why py-spy cannot sample here (one line with how to enable it); ``None`` when it can."""
    import shutil

    from pipecheck.probes.stacks import has_cap_sys_ptrace, ptrace_scope, unavailable_reason

    return unavailable_reason(shutil.which("py-spy"), ptrace_scope(), has_cap_sys_ptrace())


def _baseline(given: Union[TrialConfig, Mapping[str, Any], None], source: Source,
              first: TrialConfig) -> Optional[TrialConfig]:
    """The baseline to measure first, aligned with the candidates' batch size, ``pin_memory``
    and ``in_order`` where it leaves them open; ``None`` to keep ``first``."""
    if given is None:
        config = given_config(source)
    elif isinstance(given, TrialConfig):
        config = given
    else:
        try:
            config = TrialConfig(**given)
        except TypeError as err:
            raise BadInputError(f"bad baseline {dict(given)!r}: {err}") from None
    if config is None:
        return None
    if config.num_workers < 0 or (config.num_workers > 0 and (config.prefetch_factor or 1) < 1):
        raise BadInputError(f"bad baseline: {config.label()}")
    if config.num_workers > 0 and config.prefetch_factor is None:
        config = dataclasses.replace(config, prefetch_factor=TORCH_DEFAULT_PREFETCH_FACTOR)
    fill = {name: getattr(first, name) for name in ("pin_memory", "in_order", "batch_size")
            if getattr(config, name) is None}
    return dataclasses.replace(config, **fill)


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
