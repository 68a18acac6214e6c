"""What every recommendation rule reads (:class:`RuleContext`: the run, its analysis and its
what-if model), what a rule returns (:data:`Outcome`), and a prediction's expected figures with
their interval (:func:`expected_figures`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pipecheck.analysis import Analysis
from pipecheck.analysis.consumer import stress_command
from pipecheck.analysis.model import Prediction, ThroughputModel
from pipecheck.loader_settings import LoaderSettings
from pipecheck.records import (
    ConsumerRecord,
    Expected,
    Recommendation,
    RunRecord,
    interval_uncertain,
)


@dataclass(frozen=True)
class RuleContext:
    run: RunRecord
    analysis: Analysis
    model: ThroughputModel

    @property
    def compute_bound_stall(self) -> float:
        return self.analysis.diagnosis.thresholds["compute_bound_stall_fraction"]

    @property
    def measured_stall(self) -> Optional[float]:
        consumer = self.analysis.consumer
        steady = consumer.steady_stall_fraction
        return steady if steady is not None else consumer.stall_fraction


Outcome = Optional[tuple[Recommendation, LoaderSettings]]
"""A rule's proposal and the settings after applying it, or ``None`` when it proposes nothing."""


def expected_figures(prediction: Prediction, note: Optional[str] = None,
                     model: Optional[ThroughputModel] = None,
                     settings: Optional[LoaderSettings] = None,
                     epochs: Optional[int] = None, *,
                     consumer: Optional[ConsumerRecord] = None) -> Expected:
    """The expected figures of a prediction (its batches/s as predicted, bounded by the
    step's ceiling and the producer, :meth:`~pipecheck.analysis.model.ThroughputModel.bounds`),
    with its interval (:meth:`~pipecheck.analysis.model.ThroughputModel.interval`) and the
    ``uncertain`` flag when ``model`` and ``settings`` are given and the run counted samples:
    set where the interval is too wide (:func:`~pipecheck.records.interval_uncertain`) or
    where the worker CPU the run cannot pin down alone moves the point too far
    (:func:`unsure_reason`, with ``consumer`` naming the measurement that settles it)."""
    low = high = None
    uncertain = reason = None
    if model is not None and settings is not None and model.samples_per_batch is not None:
        low_b, high_b = model.interval(settings, epochs=epochs)
        low, high = low_b * model.samples_per_batch, high_b * model.samples_per_batch
        uncertain = interval_uncertain(low, high)
        reason = unsure_reason(model, settings, consumer)
        uncertain = uncertain or reason is not None
    return Expected(
        samples_per_s=prediction.samples_per_s,
        stall_fraction=prediction.stall_fraction,
        note=note,
        batches_per_s=prediction.batches_per_s,
        samples_per_s_low=low,
        samples_per_s_high=high,
        uncertain=uncertain,
        uncertain_reason=reason,
    )


def unsure_reason(model: ThroughputModel, settings: LoaderSettings,
                  consumer: Optional[ConsumerRecord] = None) -> Optional[str]:
    """Why the prediction for ``settings`` cannot be sure, or ``None``: where a worker's CPU per
    batch is known only to lie in a range (a serial run's intra-op pool,
    :attr:`~pipecheck.analysis.model.ThroughputModel.worker_cpu_range_s`) wide enough to move
    the point by more than :data:`~pipecheck.records.UNSURE_POINT_ERROR`
    (:attr:`~pipecheck.analysis.model.WorkerCpuSpread.unsure`). The sentence gives the range in
    ms, the rates at its ends in samples/s, and the measurement that settles it (a
    ``pipecheck stress`` run of the worker counts with a step like the run's, or
    ``wrap(tune=True)``)."""
    spread = model.worker_cpu_spread(settings)
    if spread is None or not spread.unsure or model.samples_per_batch is None:
        return None
    per_batch = model.samples_per_batch
    measure = (stress_command(consumer, f"0,{settings.num_workers}") if consumer is not None
               else "a short 'pipecheck stress' run")
    return (f"a worker's CPU per batch lies between {spread.low_cpu_s * 1e3:,.3g} and "
            f"{spread.high_cpu_s * 1e3:,.3g} ms, since the num_workers=0 run cannot tell its "
            "torch intra-op pool's work from its spin-waits, which puts the rate anywhere "
            f"from {spread.slow_batches_per_s * per_batch:,.0f} to "
            f"{spread.fast_batches_per_s * per_batch:,.0f} samples/s; {measure} or "
            "wrap(tune=True) measures it")
