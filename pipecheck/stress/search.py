"""Model-guided search for ``pipecheck stress``: measure a few configurations, predict the rest
with the what-if model (:class:`pipecheck.analysis.model.ThroughputModel`) and measure only the
ones predicted to beat the best measured so far, until the gain left is below the best trial's
noise (:func:`run_search`). The candidates, the calibration trials, the anchored predictions,
the stop threshold and the fallback without a model are described step by step in
docs/architecture.md ("The model-guided search"). The reported best is always a measured trial
(:meth:`pipecheck.stress.runner.Sweep.best`).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, cast

from pipecheck.analysis import analyze
from pipecheck.analysis.model import bounded_rate
from pipecheck.environment import torch_has_in_order
from pipecheck.kinds import FindingKind
from pipecheck.report_sections import SearchSummary
from pipecheck.stress.memory import skip_reason
from pipecheck.stress.noise import MIN_WORTHWHILE_GAIN, rate_noise_fraction
from pipecheck.stress.runner import Source, Sweep
from pipecheck.stress.settings import Step, sweep_configs, usable_cpus
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.tracker import ProgressCallback, Tracker
from pipecheck.stress.trial import TrialLimits, TrialResult

MAX_AUTO_WORKERS = 32
"""Most workers the automatic candidate list goes to, whatever the CPU count (pipecheck's
choice: beyond it worker start-up time and per-worker memory dominate on common hosts)."""

AUTO_PREFETCH_FACTORS = (2, 4)
"""``prefetch_factor`` values searched when none are given: torch's default and double it."""

CALIBRATION_LENGTH = 2
"""The ``num_workers=1`` calibration trial runs this many times the trial's batches and seconds:
the model's worker CPU comes from the host sampler (0.5 s ticks), which misses up to one tick of
each worker's CPU at the end of a short trial. pipecheck's choice
(docs/decisions.md#calibration_length)."""

def auto_workers(cpus: Optional[int] = None) -> list[int]:
    """``0 .. min(max(8, 4 x cpus), MAX_AUTO_WORKERS)``: latency-bound loaders gain well past
    the core count, CPU-bound ones stop at it (the model tells which)."""
    cpus = usable_cpus() if cpus is None else cpus
    return list(range(min(max(8, 4 * cpus), MAX_AUTO_WORKERS) + 1))


def candidate_configs(prefetch_factors: Optional[Sequence[int]] = None, *,
                      persistent_workers: bool = False, pin_memory: Optional[bool] = None,
                      in_orders: Optional[Sequence[Optional[bool]]] = None,
                      batch_sizes: Sequence[Optional[int]] = (None,),
                      cpus: Optional[int] = None,
                      torch_threads: Sequence[Optional[int]] = (None,)) -> list[LoaderSettings]:
    """The search space (also the ``--search grid`` space with automatic workers): every
    :func:`auto_workers` count with each prefetch factor (default
    :data:`AUTO_PREFETCH_FACTORS`), each ``in_order`` (default True and False when torch has
    it, else the loader's own), each batch size and each of the main process's thread counts
    (``torch_threads``); the first, ``num_workers=0``, is the baseline."""
    factors = list(AUTO_PREFETCH_FACTORS) if prefetch_factors is None else list(prefetch_factors)
    if in_orders is None:
        in_orders = [True, False] if torch_has_in_order() else [None]
    return sweep_configs(auto_workers(cpus), factors, persistent_workers=persistent_workers,
                         pin_memory=pin_memory, in_orders=in_orders, batch_sizes=batch_sizes,
                         torch_threads=torch_threads)


def run_search(source: Source, candidates: Sequence[LoaderSettings], limits: TrialLimits, *,
               step: Optional[Step], budget_s: float, timeout_s: float,
               progress: Optional[ProgressCallback] = None,
               tracker: Optional[Tracker] = None) -> Sweep:
    """Search ``candidates`` (the first is the baseline) as the module docstring describes.

    Returns a :class:`Sweep` whose ``trials`` are the measured ones in run order,
    ``unmeasured`` the rest (with ``predicted`` figures when a model was available),
    ``skipped`` the unmeasured ones the budget or the memory guard stopped (with the reason),
    and ``search`` a summary: ``method``, ``candidates``, ``measured``, ``calibration``
    (configs), ``noise_fraction``, ``threshold_fraction``, ``verified`` (configs whose
    neighbours were measured because the model missed them), ``stop_reasons`` (every reason
    that shaped the search, in the order they arose: a grid-order fallback first, then what
    stopped it; none is ever replaced by a later one) and ``stop_reason`` (them joined by
    ``"; "``). Failed trials are kept and the search goes on. A trial starts only when
    ``tracker`` (the stress run's, with its budget and reserve; ``None``: a new one with
    ``budget_s`` and ``progress``) expects it to end within the budget.
    """
    candidates = list(candidates)
    sweep = Sweep()
    tracker = tracker if tracker is not None else Tracker(len(candidates), budget_s, progress)
    tracker.total = len(candidates)
    measured: set[LoaderSettings] = set()
    reasons: list[str] = []

    def note(reason: str) -> None:
        if reason not in reasons:
            reasons.append(reason)

    def out_of_budget(trial_limits: TrialLimits) -> bool:
        """Whether the budget cannot hold a trial with ``trial_limits`` (the first always
        runs); notes the reason once."""
        if not sweep.trials or tracker.fits(trial_limits):
            return False
        if not any(r.startswith("budget spent") for r in reasons):
            note(f"budget spent ({tracker.shortfall(trial_limits)})")
        return True

    def measure(config: LoaderSettings, trial_limits: TrialLimits = limits) -> bool:
        """Measure ``config`` (or skip it for memory); ``False`` when the budget cannot hold
        the trial (nothing is run)."""
        if out_of_budget(trial_limits):
            return False
        reason = skip_reason(config, (t.record for t in sweep.trials))
        if reason is not None:
            sweep.skipped[config] = reason
        else:
            sweep.trials.append(tracker.run(source, config, trial_limits, step=step,
                                            timeout_s=timeout_s, done=len(sweep.trials)))
        measured.add(config)
        return True

    calibration_limits = dataclasses.replace(
        limits, batches=None if limits.batches is None else limits.batches * CALIBRATION_LENGTH,
        seconds=limits.seconds * CALIBRATION_LENGTH)
    calibration = calibration_configs(candidates)
    for config in calibration:
        longer = config.num_workers == 1 and (not sweep.trials or tracker.fits(calibration_limits))
        if not measure(config, calibration_limits if longer else limits):
            break

    noise: Optional[float] = None
    threshold: Optional[float] = None
    verified: list[LoaderSettings] = []
    while True:
        remaining = [c for c in candidates if c not in measured]
        if not remaining:
            note("every candidate measured")
            break
        if out_of_budget(limits):
            for config in remaining:
                sweep.skipped[config] = "budget spent"
            tracker.skipped(remaining, len(sweep.trials))
            break
        predictable = _predict(sweep, remaining, calibration)
        unpredictable = [c for c in remaining if c not in predictable]
        if unpredictable:
            # No model for these (too few steady batches, or none of their batch size
            # measured): measure in grid order within the budget.
            if not any(r.startswith("no model") for r in reasons):
                note(_no_model_reason(sweep))
            measure(unpredictable[0])
            continue
        best = sweep.best()
        assert best is not None  # every remaining config was predicted from a measured trial
        assert best.samples_per_s is not None  # best() keeps measured (ok) trials
        noise = rate_noise_fraction(best.record)
        threshold = max(noise or 0.0, MIN_WORTHWHILE_GAIN)
        pick = max(remaining, key=lambda c: (sweep.predicted[c]["samples_per_s"],
                                             -c.num_workers, -(c.prefetch_factor or 0),
                                             c.in_order is not False))
        gain = cast(float, sweep.predicted[pick]["samples_per_s"]) / best.samples_per_s - 1.0
        if gain >= threshold:
            measure(pick)
            continue
        neighbours = _unverified_neighbours(sweep, best, remaining, threshold, verified)
        if neighbours:
            verified.append(best.config)
            for config in neighbours:
                if not measure(config):
                    break
            continue
        note(f"best predicted gain {gain:+.1%} ({pick.label()}) is below the "
             f"threshold {threshold:.1%}")
        break

    sweep.unmeasured = [c for c in candidates if c not in measured]
    sweep.search = SearchSummary(
        method="model",
        candidates=len(candidates),
        measured=len(sweep.trials),
        calibration=[c.to_dict() for c in calibration],
        noise_fraction=noise,
        threshold_fraction=threshold,
        verified=[c.to_dict() for c in verified],
        stop_reason="; ".join(reasons),
        stop_reasons=reasons,
    )
    return sweep


def _no_model_reason(sweep: Sweep) -> str:
    """Why the search fell back to grid order: the analysis's own gaps for the best trial
    (e.g. too few steady batches), else that no trial of a batch size measured."""
    best = sweep.best()
    gaps: list[str] = []
    if best is not None and best.record is not None:
        gaps = [str(gap) for finding in analyze(best.record).diagnosis.findings
                if finding.kind == FindingKind.INSUFFICIENT_DATA
                for gap in finding.evidence.get("gaps", [])]
    why = "; ".join(gaps) if gaps else "no trial of a batch size measured"
    return f"no model ({why}): measured in grid order"


def calibration_configs(candidates: Sequence[LoaderSettings]) -> list[LoaderSettings]:
    """The calibration trials: per batch size and main-process thread count (in candidate
    order), its first candidate (the baseline for the first) and its first ``num_workers=1``
    candidate."""
    chosen: list[LoaderSettings] = []
    for group in _by_group(candidates).values():
        chosen.append(group[0])
        one = next((c for c in group if c.num_workers == 1), None)
        if one is not None and one not in chosen:
            chosen.append(one)
    return chosen


Group = tuple[Optional[int], Optional[int]]
"""A batch size and a main-process thread count: configurations the model predicts from one
trial (a trial measures the step at its own thread count)."""


def _group_of(config: LoaderSettings) -> Group:
    return config.batch_size, config.torch_num_threads


def _by_group(configs: Sequence[LoaderSettings]) -> dict[Group, list[LoaderSettings]]:
    groups: dict[Group, list[LoaderSettings]] = {}
    for config in configs:
        groups.setdefault(_group_of(config), []).append(config)
    return groups


def _predict(sweep: Sweep, remaining: Sequence[LoaderSettings],
             calibration: Sequence[LoaderSettings]) -> set[LoaderSettings]:
    """Fill ``sweep.predicted`` for ``remaining`` from the best measured trial of each batch
    size and thread count (:data:`Group`); returns the configurations that could be predicted.

    Predictions are anchored to that trial (``measured x model(c) / model(its config)``),
    then held to the model's hard bounds for ``c``
    (:meth:`~pipecheck.analysis.model.ThroughputModel.bounds`: the step's own ceiling and the
    producer's capacity), like every model prediction. The
    per-worker rate is the larger of the trial's own and the 1-worker calibration trial's: a
    trial with more CPU-bound workers than cores measures each worker slowed by the others,
    and would under-predict fewer workers."""
    predicted: set[LoaderSettings] = set()
    for key, group in _by_group(remaining).items():
        ok = [t for t in sweep.trials if t.ok and _group_of(t.config) == key]
        if not ok:
            continue
        best = max(ok, key=lambda t: t.samples_per_s or 0.0)
        assert best.samples_per_s is not None and best.batches_per_s is not None  # ok: measured
        model = analyze(best.record).model if best.record is not None else None
        if model is None:
            continue
        single = next((t for t in ok if t.config.num_workers == 1 and t.config in calibration
                       and t.record is not None), None)
        if single is not None and single.record is not None:
            single_model = analyze(single.record).model
            if single_model is not None and (single_model.per_worker_batches_per_s
                                             > model.per_worker_batches_per_s):
                model = dataclasses.replace(
                    model, per_worker_batches_per_s=single_model.per_worker_batches_per_s)
        # The trial ran at the group's thread count: "as measured" for the model.
        reference = model.predict(_as_measured(best.config)).steady_batches_per_s
        scale = best.batches_per_s / reference
        per_batch = best.samples_per_s / best.batches_per_s
        fastest = fastest_worker_batches_per_s(ok)
        for config in group:
            settings = _as_measured(config)
            guess = model.predict(settings)
            # Anchoring scales the model by its miss on the best trial; the result is held to
            # the same hard bounds as every prediction (the step's ceiling, the producer), and
            # to the workers' fastest measured pace.
            bound = model.bounds(settings).batches_per_s
            if fastest is not None and settings.num_workers > 0:
                bound = min(bound, settings.num_workers * fastest)
            rate = bounded_rate(guess.steady_batches_per_s * scale, bound)
            sweep.predicted[config] = {"samples_per_s": rate * per_batch,
                                       "batches_per_s": rate,
                                       "stall_fraction": guess.steady_stall_fraction}
            predicted.add(config)
    return predicted


def fastest_worker_batches_per_s(trials: Sequence[TrialResult]) -> Optional[float]:
    """The fastest per-worker rate (batches per busy second of a worker) any of ``trials``
    with workers measured; ``None`` when none did. ``N`` workers never produce more than ``N``
    times it: a worker's pace comes from its own work, and fewer workers beside it only give
    it back cores it was sharing. A model built from a trial with many workers whose CPU the
    host sampler did not catch assumes them CPU-bound (``analysis.producer``) and so predicts
    fewer workers each far faster: a sleeping loader's 8-worker trial predicted 1 worker at
    613 samples/s where the 1-worker trial had measured 93 (docs/model.md#search-bound)."""
    rates = []
    for trial in trials:
        if trial.config.num_workers == 0 or trial.record is None:
            continue
        model = analyze(trial.record).model
        if model is not None and model.measured.num_workers > 0:
            rates.append(model.per_worker_batches_per_s)
    return max(rates) if rates else None


def _as_measured(config: LoaderSettings) -> LoaderSettings:
    """``config``'s model view with its thread count taken as the trial's own."""
    return dataclasses.replace(config.model_view(), torch_num_threads=None)


def _unverified_neighbours(sweep: Sweep, best: TrialResult, remaining: Sequence[LoaderSettings],
                           threshold: float, verified: Sequence[LoaderSettings]
                           ) -> list[LoaderSettings]:
    """When the model missed the best trial by more than ``threshold`` (its prediction made
    before the trial ran), its ranking near that trial is not to be trusted: the unmeasured
    candidates one worker either side (other settings equal) are returned for measuring, once
    per best trial. Empty otherwise."""
    if best.config in verified:
        return []
    predicted = sweep.predicted.get(best.config, {}).get("samples_per_s")
    assert best.samples_per_s is not None  # best: the sweep's best measured trial
    if predicted is None or abs(best.samples_per_s / predicted - 1.0) <= threshold:
        return []
    return [c for c in remaining
            if abs(c.num_workers - best.config.num_workers) == 1 and c.num_workers > 0
            and dataclasses.replace(c, num_workers=best.config.num_workers) == best.config]
