"""Analysis: pure functions from a :class:`~pipecheck.records.RunRecord` to summaries, a
diagnosis and a what-if throughput model. No I/O, no clocks, no torch.

Modules: ``consumer`` (stall, throughput, demand), ``producer`` (per-worker rates, CPU,
capacity), ``model`` (what-if predictions for other settings), ``verdict`` (verdict and
findings), ``judgement`` (the stall judged, data goodput and the capacity estimate reconciled
with it: the one source of the verdict line, the capacity line and the recommendations), ``bound`` (what workers wait on: cpu-bound / io-bound / latency-bound), ``memory``
(worker memory growth, /dev/shm headroom), ``causes`` (the findings that explain a slow or
at-risk loader), ``stats`` and ``wording`` (helpers).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from pipecheck.analysis.consumer import summarize_consumer
from pipecheck.analysis.judgement import judge_capacity, judge_stall
from pipecheck.analysis.model import Prediction, ThroughputModel, build_model, data_gaps
from pipecheck.loader_settings import LoaderSettings
from pipecheck.analysis.producer import summarize_producer
from pipecheck.analysis.stages import pipeline_findings, stage_table
from pipecheck.analysis.verdict import (
    DEFAULT_COMPUTE_BOUND_STALL,
    DEFAULT_INPUT_BOUND_STALL,
    diagnose,
)
from pipecheck.records import ConsumerSummary, Diagnosis, ProducerSummary, RunRecord

__all__ = [
    "Analysis",
    "DEFAULT_COMPUTE_BOUND_STALL",
    "DEFAULT_INPUT_BOUND_STALL",
    "LoaderSettings",
    "Prediction",
    "ThroughputModel",
    "analyze",
]


@dataclass(frozen=True)
class Analysis:
    """Everything derived from one run. ``model`` is ``None`` when the measurements cannot
    support predictions (the diagnosis then carries an ``insufficient-data`` finding)."""

    consumer: ConsumerSummary
    producer: ProducerSummary
    diagnosis: Diagnosis
    model: Optional[ThroughputModel]


def analyze(
    run: RunRecord,
    *,
    input_bound_stall: float = DEFAULT_INPUT_BOUND_STALL,
    compute_bound_stall: float = DEFAULT_COMPUTE_BOUND_STALL,
) -> Analysis:
    """Summarize, diagnose and model ``run``.

    ``input_bound_stall`` / ``compute_bound_stall`` are steady stall fractions (0-1): at or above
    the first the verdict is ``input-bound``, at or below the second ``compute-bound``, between
    them ``balanced`` (defaults 0.10 and 0.03, pipecheck's choice; see
    :mod:`pipecheck.analysis.verdict`). Raises ``ValueError`` unless
    ``0 <= compute_bound_stall <= input_bound_stall <= 1``. A run with no batches gives the
    verdict ``no-data``, never an exception.
    """
    if not 0.0 <= compute_bound_stall <= input_bound_stall <= 1.0:
        raise ValueError(
            "thresholds must satisfy 0 <= compute_bound_stall <= input_bound_stall <= 1, got "
            f"compute_bound_stall={compute_bound_stall}, input_bound_stall={input_bound_stall}"
        )
    consumer = summarize_consumer(run.consumer)
    producer = summarize_producer(run, consumer)
    gaps = data_gaps(run, consumer, producer)
    diagnosis = diagnose(
        run,
        consumer,
        producer,
        gaps,
        input_bound_stall=input_bound_stall,
        compute_bound_stall=compute_bound_stall,
    )
    model = None if gaps else build_model(run, consumer, producer)
    producer = dataclasses.replace(producer, stages=stage_table(run.stages),
                                   head_of_line=run.head_of_line)
    findings = list(diagnosis.findings) + pipeline_findings(producer, consumer)
    # The same pure function diagnose() judged the verdict with, so the two cannot differ.
    verdict, stall, steady, wait_s = judge_stall(consumer, run, input_bound_stall,
                                                 compute_bound_stall)
    judgement = judge_capacity(verdict, stall, steady, wait_s, run, consumer, producer,
                               findings, input_bound_stall)
    diagnosis = dataclasses.replace(diagnosis, findings=findings, judgement=judgement)
    return Analysis(consumer=consumer, producer=producer, diagnosis=diagnosis, model=model)
