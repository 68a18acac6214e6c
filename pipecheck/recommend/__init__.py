"""Recommendations: an ordered list of pure rules from an analysis to DataLoader setting changes.

The package: :mod:`~pipecheck.recommend.limits` (pipecheck's thresholds, not torch's, and the
model readings they apply to), :mod:`~pipecheck.recommend.context` (what a rule reads and
returns), :mod:`~pipecheck.recommend.words` (the reasons' prose),
:mod:`~pipecheck.recommend.rules` (:data:`~pipecheck.recommend.rules.RULES`, in order), and here
the pipeline (:func:`recommend`) that runs them and adds each change's effects.

Rules run in order (``num_workers`` up or down, ``prefetch_factor``, ``persistent_workers``,
``pin_memory``) and are cumulative: each rule's expected figures assume the changes proposed
before it are applied. ``current`` is always the measured loader's value. Expected figures come
from the what-if model (:mod:`pipecheck.analysis.model`), which holds every one, cumulative
ones included, to the step's own ceiling and the producer's capacity for the settings proposed
(:meth:`~pipecheck.analysis.model.ThroughputModel.bounds`); a rule that the model cannot back with
a gain proposes nothing, and no proposal is kept whose expected samples/s is below the
measured rate or below the proposal before it (the model can be biased low on a run: a change
shown slower than what it replaces would contradict its own reason). Every kept proposal states
its effect in samples/s, batches/s, tokens/s (when counted) and wall time saved per 10,000
steps and per epoch (:func:`with_effects`). With no model (too little data, a generic
iterable) the list is empty and the diagnosis carries an ``insufficient-data`` finding saying
why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from pipecheck.analysis import Analysis
from pipecheck.effects import STEPS_PER_SAVING, saved_s, saved_s_per_step
from pipecheck.kinds import FindingKind
from pipecheck.recommend.context import RuleContext
from pipecheck.recommend.limits import slower
from pipecheck.recommend.rules import RULES
from pipecheck.records import ConsumerSummary, Recommendation, RunRecord


def recommend(run: RunRecord, analysis: Analysis) -> list[Recommendation]:
    """Ordered setting changes for ``run`` given its ``analysis`` (from
    :func:`pipecheck.analysis.analyze`): the model's rules (none when ``analysis.model`` is
    ``None``), then ``in_order`` for head-of-line blocking and the sharding changes of a
    WebDataset loader (:func:`pipeline_recommendations`). Each proposes a value different from
    the current one, with expected samples/s and stall (``None`` where it cannot be predicted)
    and a reason quoting measured numbers."""
    if analysis.model is None:
        return pipeline_recommendations(run, analysis)
    context = RuleContext(run=run, analysis=analysis, model=analysis.model)
    settings = analysis.model.measured
    recommendations = []
    floor = analysis.consumer.samples_per_s
    for rule in RULES:
        outcome = rule.propose(context, settings)
        if outcome is None:
            continue
        recommendation, proposed = outcome
        expected = recommendation.expected.samples_per_s
        if slower(expected, floor):
            continue  # never propose a change expected to be slower than what it replaces
        recommendations.append(recommendation)
        if rule.ends_chain:
            break
        settings = proposed
        floor = floor if expected is None else expected
    pipeline = [r for r in pipeline_recommendations(run, analysis)
                if not slower(r.expected.samples_per_s, analysis.consumer.samples_per_s)]
    return [with_effects(r, analysis.consumer, run.loader.batches_per_epoch)
            for r in recommendations + pipeline]


def with_effects(
    recommendation: Recommendation,
    measured: ConsumerSummary,
    batches_per_epoch: Optional[int],
) -> Recommendation:
    """``recommendation`` with its effect in every unit (:class:`~pipecheck.records.Expected`):
    expected batches/s and tokens/s scaled from the measured run by the expected samples/s
    ratio, the gains over the measured rates, and the wall time saved per
    :data:`STEPS_PER_SAVING` steps and per epoch (``batches_per_epoch``, the loader's
    ``len()``; ``None`` when unknown). Figures that cannot be derived (no expected samples/s,
    nothing measured) stay ``None``; a figure already set is kept."""
    expected = recommendation.expected
    if expected.samples_per_s is None or not measured.samples_per_s:
        return recommendation
    scale = expected.samples_per_s / measured.samples_per_s
    batches_per_s = expected.batches_per_s
    if batches_per_s is None and measured.batches_per_s:
        batches_per_s = measured.batches_per_s * scale
    tokens_per_s = expected.tokens_per_s
    if tokens_per_s is None and measured.tokens_per_s is not None:
        tokens_per_s = measured.tokens_per_s * scale
    saved_per_step_s = saved_s_per_step(measured.batches_per_s, batches_per_s)
    filled = replace(
        expected,
        batches_per_s=batches_per_s,
        tokens_per_s=tokens_per_s,
        gain_samples_per_s=_first(expected.gain_samples_per_s,
                                  expected.samples_per_s - measured.samples_per_s),
        gain_tokens_per_s=_first(expected.gain_tokens_per_s,
                                 None if tokens_per_s is None or measured.tokens_per_s is None
                                 else tokens_per_s - measured.tokens_per_s),
        saved_s_per_10k_steps=_first(expected.saved_s_per_10k_steps,
                                     saved_s(saved_per_step_s, STEPS_PER_SAVING)),
        saved_s_per_epoch=_first(expected.saved_s_per_epoch,
                                 saved_s(saved_per_step_s, batches_per_epoch)),
    )
    return replace(recommendation, expected=filled)


def _first(kept: Optional[float], derived: Optional[float]) -> Optional[float]:
    return kept if kept is not None else derived


def pipeline_recommendations(run: RunRecord, analysis: Analysis) -> list[Recommendation]:
    """``in_order=False`` for a ``head-of-line-blocking`` finding
    (:func:`pipecheck.recommend.head_of_line.in_order_recommendation`) and the sharding section's
    ``num_shards`` / ``resampled`` / ``shuffle_buffer`` changes."""
    from pipecheck.recommend.head_of_line import in_order_recommendation
    from pipecheck.environment import torch_has_in_order

    found: list[Recommendation] = []
    consumer = analysis.consumer
    for finding in analysis.diagnosis.findings:
        if finding.kind == FindingKind.HEAD_OF_LINE_BLOCKING:
            rec = in_order_recommendation(finding, wait_s=consumer.wait_s,
                                          compute_s=consumer.compute_s,
                                          samples=consumer.samples,
                                          torch_has_in_order=torch_has_in_order())
            if rec is not None:
                found.append(rec)
    if run.sharding is not None:
        found.extend(run.sharding.recommendations)
    return found
