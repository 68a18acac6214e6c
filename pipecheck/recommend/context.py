"""What every recommendation rule reads (:class:`RuleContext`: the run, its analysis and its
what-if model), what a rule returns (:data:`Outcome`), and a prediction's expected figures with
their interval (:func:`expected_figures`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pipecheck.analysis import Analysis
from pipecheck.analysis.model import Prediction, ThroughputModel
from pipecheck.loader_settings import LoaderSettings
from pipecheck.records import (
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
              epochs: Optional[int] = None) -> Expected:
    """The expected figures of a prediction (its batches/s as predicted, bounded by the
    step's ceiling and the producer, :meth:`~pipecheck.analysis.model.ThroughputModel.bounds`),
    with its interval (:meth:`~pipecheck.analysis.model.ThroughputModel.interval`) and the
    ``uncertain`` flag (:func:`~pipecheck.records.interval_uncertain`) when ``model`` and
    ``settings`` are given and the run counted samples."""
    low = high = None
    if model is not None and settings is not None and model.samples_per_batch is not None:
        low_b, high_b = model.interval(settings, epochs=epochs)
        low, high = low_b * model.samples_per_batch, high_b * model.samples_per_batch
    return Expected(
        samples_per_s=prediction.samples_per_s,
        stall_fraction=prediction.stall_fraction,
        note=note,
        batches_per_s=prediction.batches_per_s,
        samples_per_s_low=low,
        samples_per_s_high=high,
        uncertain=interval_uncertain(low, high),
    )
