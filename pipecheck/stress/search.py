"""Model-guided search for ``pipecheck stress``: measure a few configurations, predict the rest
with the what-if model (:class:`pipecheck.analysis.model.ThroughputModel`) and measure only the
ones predicted to beat the best measured so far.

The procedure (:func:`run_search`):

1. candidates: :func:`candidate_configs` (``num_workers`` 0 .. ``max(8, 4 x usable CPUs)``,
   at most :data:`MAX_AUTO_WORKERS`; ``prefetch_factor`` 2 and 4 unless given);
2. calibrate: measure the baseline (the first candidate, ``num_workers=0``) and
   ``num_workers=1`` (calibration trials carry no prediction), the latter
   :data:`CALIBRATION_LENGTH` times the trial limits (the first model is fit from it);
3. fit the model from the best measured trial's wrap record (:func:`pipecheck.analysis.analyze`)
   and predict every unmeasured candidate. Predictions are anchored to that measurement:
   ``predicted = measured_best x model(candidate) / model(best's own config)`` (steady
   batches/s), so a bias the model shares across settings cancels;
4. stop when the highest predicted gain over the best measured samples/s is below the
   threshold (below), or when ``budget_s`` is spent; otherwise measure that candidate (ties go
   to fewer workers, then the smaller prefetch factor), record its prediction, and go to 3.

Stop threshold: ``max(noise, MIN_WORTHWHILE_GAIN)`` where ``noise`` is the best trial's
measured run-to-run variation, estimated within the trial: its steady batches are cut into
:data:`NOISE_BLOCKS` contiguous blocks, each block's batches/s computed, and ``noise =
2 x standard error of the mean block rate / mean`` (about a 95 % interval on the trial's rate;
blocks rather than single batches because prefetching makes neighbouring batch times
correlated). When the model cannot be built (e.g. fewer than 20 steady batches per trial,
:data:`pipecheck.analysis.model.MIN_STEADY_BATCHES`), the search measures the remaining
candidates in grid order within the budget, and says so in its ``stop_reason``.

Trials must be long enough for the host sampler to see the workers' CPU (about 1 s or more);
without it the model assumes CPU-bound work and caps scaling at the usable CPUs.

The reported best is always a measured trial (:meth:`pipecheck.stress.runner.Sweep.best`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Optional, Sequence

from pipecheck.records import RunRecord
from pipecheck.stress.runner import ProgressCallback, Source, Sweep, run_trial
from pipecheck.stress.settings import StepTime, TrialConfig, sweep_configs, usable_cpus
from pipecheck.stress.trial import TrialLimits, TrialResult

MAX_AUTO_WORKERS = 32
"""Most workers the automatic candidate list goes to, whatever the CPU count (pipecheck's
choice: beyond it worker start-up time and per-worker memory dominate on common hosts)."""

AUTO_PREFETCH_FACTORS = (2, 4)
"""``prefetch_factor`` values searched when none are given: torch's default and double it."""

NOISE_BLOCKS = 4
"""Contiguous blocks a trial's steady batches are cut into to estimate its rate's noise
(pipecheck's choice: enough for a spread, each block still several batches at 20+ batches)."""

CALIBRATION_LENGTH = 2
"""The ``num_workers=1`` calibration trial runs this many times the trial's batches and seconds. The model's worker
CPU comes from the host sampler (0.5 s ticks), which misses up to one tick of each worker's CPU
at the end: on a 1-2 s trial that undercounts CPU-bound work by a third or more (measured on the
benchmark's CPU-bound pipeline: worker CPU fraction 0.57 at 80 batches, 0.86 at 160), and the
model then over-predicts scaling. pipecheck's choice, from that measurement."""

MIN_WORTHWHILE_GAIN = 0.03
"""Smallest predicted gain (fraction, 0-1) worth a trial even when the measured noise is lower
(pipecheck's choice: below 3 % the model's own error, not the loader, decides the ranking)."""


def auto_workers(cpus: Optional[int] = None) -> list[int]:
    """``0 .. min(max(8, 4 x cpus), MAX_AUTO_WORKERS)``: latency-bound loaders gain well past
    the core count, CPU-bound ones stop at it (the model tells which)."""
    cpus = usable_cpus() if cpus is None else cpus
    return list(range(min(max(8, 4 * cpus), MAX_AUTO_WORKERS) + 1))


def candidate_configs(prefetch_factors: Optional[Sequence[int]] = None, *,
                      persistent_workers: bool = False, pin_memory: Optional[bool] = None,
                      cpus: Optional[int] = None) -> list[TrialConfig]:
    """The search space (also the ``--search grid`` space with automatic workers): every
    :func:`auto_workers` count with each prefetch factor (default
    :data:`AUTO_PREFETCH_FACTORS`); the first, ``num_workers=0``, is the baseline."""
    factors = list(AUTO_PREFETCH_FACTORS) if prefetch_factors is None else list(prefetch_factors)
    return sweep_configs(auto_workers(cpus), factors, persistent_workers=persistent_workers,
                         pin_memory=pin_memory)


def rate_noise_fraction(record: Optional[RunRecord], blocks: int = NOISE_BLOCKS
                        ) -> Optional[float]:
    """Relative noise (fraction >= 0) of a trial's steady batches/s: 2 x the standard error of
    the mean of per-block rates over their mean (module docstring). ``None`` when the record
    holds fewer than ``2 x blocks`` steady timed batches or a block took no time."""
    if record is None:
        return None
    firsts = {}
    for timing in record.consumer.timeline:
        firsts.setdefault(timing.epoch, timing.index)
    loops = [t.wait_s + t.compute_s for t in record.consumer.timeline
             if t.compute_s is not None and t.index != firsts[t.epoch]]
    if blocks < 2 or len(loops) < 2 * blocks:
        return None
    size = len(loops) // blocks
    rates = []
    for b in range(blocks):
        chunk = loops[b * size:(b + 1) * size]
        total = sum(chunk)
        if total <= 0:
            return None
        rates.append(len(chunk) / total)
    mean = sum(rates) / blocks
    std = math.sqrt(sum((r - mean) ** 2 for r in rates) / (blocks - 1))
    return 2.0 * std / math.sqrt(blocks) / mean


def run_search(source: Source, candidates: Sequence[TrialConfig], limits: TrialLimits, *,
               step: Optional[StepTime], batch_size: Optional[int], budget_s: float,
               timeout_s: float, progress: Optional[ProgressCallback] = None) -> Sweep:
    """Search ``candidates`` (the first is the baseline) as the module docstring describes.

    Returns a :class:`Sweep` whose ``trials`` are the measured ones in run order,
    ``unmeasured`` the rest (with ``predicted`` figures when a model was available),
    ``skipped`` the unmeasured ones when the budget ended the search, and ``search`` a summary:
    ``method``, ``candidates``, ``measured``, ``calibration`` (configs), ``noise_fraction``,
    ``threshold_fraction``, ``stop_reason``. Failed trials are kept and the search goes on.
    """
    from pipecheck.analysis import analyze
    from pipecheck.analysis.model import LoaderSettings

    candidates = list(candidates)
    sweep = Sweep()
    started = time.perf_counter()
    total = len(candidates)
    measured: set[TrialConfig] = set()

    def measure(config: TrialConfig, trial_limits: TrialLimits = limits) -> TrialResult:
        if progress is not None:
            progress("start", config, len(sweep.trials), total, None)
        result = run_trial(source, config, trial_limits, step=step, batch_size=batch_size,
                           timeout_s=timeout_s)
        sweep.trials.append(result)
        measured.add(config)
        if progress is not None:
            progress("done", config, len(sweep.trials), total, result)
        return result

    def budget_spent() -> bool:
        return time.perf_counter() - started >= budget_s

    baseline = candidates[0]
    one_worker = next((c for c in candidates if c.num_workers == 1), None)
    calibration_limits = dataclasses.replace(
        limits, batches=limits.batches * CALIBRATION_LENGTH,
        seconds=limits.seconds * CALIBRATION_LENGTH)
    calibration = [baseline] + ([one_worker] if one_worker is not None else [])
    for index, config in enumerate(calibration):
        if index > 0 and budget_spent():
            break
        measure(config, calibration_limits if config.num_workers == 1 else limits)

    noise: Optional[float] = None
    threshold: Optional[float] = None
    stop_reason = "every candidate measured"
    while True:
        remaining = [c for c in candidates if c not in measured]
        if not remaining:
            stop_reason = "every candidate measured"
            break
        if budget_spent():
            stop_reason = "budget spent"
            sweep.skipped.extend(remaining)
            break
        best = sweep.best()
        model = analyze(best.record).model if best is not None and best.record is not None \
            else None
        if model is None:
            # No model: measure in grid order (the plain sweep) within the budget.
            stop_reason = "no model (too few steady batches or no measured trial): grid order"
            measure(remaining[0])
            continue
        settings = lambda c: LoaderSettings(c.num_workers, c.prefetch_factor,  # noqa: E731
                                            c.persistent_workers)
        reference = model.predict(settings(best.config)).steady_batches_per_s
        scale = best.batches_per_s / reference
        per_batch = best.samples_per_s / best.batches_per_s
        for config in remaining:
            guess = model.predict(settings(config))
            rate = guess.steady_batches_per_s * scale
            sweep.predicted[config] = {"samples_per_s": rate * per_batch,
                                       "batches_per_s": rate,
                                       "stall_fraction": guess.steady_stall_fraction}
        noise = rate_noise_fraction(best.record)
        threshold = max(noise or 0.0, MIN_WORTHWHILE_GAIN)
        pick = max(remaining, key=lambda c: (sweep.predicted[c]["samples_per_s"],
                                             -c.num_workers, -(c.prefetch_factor or 0)))
        gain = sweep.predicted[pick]["samples_per_s"] / best.samples_per_s - 1.0
        if gain < threshold:
            stop_reason = (f"best predicted gain {gain:+.1%} ({pick.label()}) is below the "
                           f"threshold {threshold:.1%}")
            break
        measure(pick)

    sweep.unmeasured = [c for c in candidates if c not in measured]
    sweep.search = {
        "method": "model",
        "candidates": total,
        "measured": len(sweep.trials),
        "calibration": [c.to_dict() for c in calibration],
        "noise_fraction": noise,
        "threshold_fraction": threshold,
        "stop_reason": stop_reason,
    }
    return sweep

