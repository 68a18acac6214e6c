"""A report compared with an earlier report of the same script: figures only.

:func:`compare_reports` puts two reports' throughput, steady step, data wait, stall and goodput
side by side, says whether throughput (samples/s) rose or fell and whether that change is
beyond the two runs' own noise, and lists the loader settings, machine facts and data facts
that differ. It never judges by the stall: a stall that fell because the step slowed is not a
gain, and the verdict follows samples/s alone. The words are the renderers'
(:mod:`pipecheck.render.phrases`); this module only computes. Pure functions of the reports'
records: no I/O, no clocks, no torch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

from pipecheck.analysis.stats import batch_means_spread, ratio
from pipecheck.kinds import COMPARED, FELL, NO_MEASURABLE_CHANGE, NOT_COMPARED, ROSE, \
    UNKNOWN_CHANGE, ComparisonVerdict
from pipecheck.records import ChangedValue, ComparedFigure, Comparison

if TYPE_CHECKING:
    from pipecheck.report_data import ReportData

SETTING_KEYS = ("num_workers", "prefetch_factor", "batch_size", "pin_memory",
                "persistent_workers", "in_order", "drop_last", "multiprocessing_context")
"""The loader settings (``LoaderConfig`` fields, torch's keyword names) a comparison lists
when they changed; torch's intra-op threads (``environment.intra_op_threads``) join them."""

MACHINE_KEYS = ("cpu_count", "usable_cpus", "torch", "python", "platform", "cuda",
                "cuda_device", "total_memory_bytes")
"""``Environment`` fields that, when they differ, mean the runs were on different machines or
software: the comparison may not hold."""

DATA_KEYS = ("type", "dataset_type", "dataset_len", "batches_per_epoch")
"""``LoaderConfig`` fields that, when they differ, mean the runs perhaps read other data or
ran another script (reported with ``type`` named ``loader_type``)."""

MIN_STEADY_BATCHES = 20
"""Fewest steady batches (each epoch's first left out) a run's timeline needs for its noise
to be told: two per batch-means block (:data:`pipecheck.analysis.stats.BATCH_MEANS_BLOCKS`)."""


def compare_reports(old: "ReportData", new: "ReportData", old_path: str) -> Comparison:
    """``new`` compared with the earlier ``old`` (read from ``old_path``, kept as given).

    The verdict follows samples/s (``consumer.samples_per_s``) alone: ``unknown`` when either
    report has none; ``no-measurable-change`` when the two are equal or their relative
    difference ``|new / old - 1|`` is within the runs' combined noise
    (``sqrt(old_noise^2 + new_noise^2)``, each :func:`run_noise_fraction`); else ``rose`` or
    ``fell``, with ``beyond_noise`` ``True``, or ``None`` when either run's noise cannot be
    told. Raises nothing for any two reports :func:`pipecheck.load` accepts."""
    old_rate, new_rate = old.consumer.samples_per_s, new.consumer.samples_per_s
    rate_ratio = ratio(new_rate, old_rate)
    old_noise, new_noise = run_noise_fraction(old), run_noise_fraction(new)
    noise = (math.hypot(old_noise, new_noise)
             if old_noise is not None and new_noise is not None else None)
    verdict: ComparisonVerdict
    beyond: Optional[bool] = None
    if rate_ratio is None or new_rate is None:
        verdict = UNKNOWN_CHANGE
    elif rate_ratio == 1.0:
        verdict, beyond = NO_MEASURABLE_CHANGE, (False if noise is not None else None)
    elif noise is not None and abs(rate_ratio - 1.0) <= noise:
        verdict, beyond = NO_MEASURABLE_CHANGE, False
    else:
        verdict = ROSE if rate_ratio > 1.0 else FELL
        beyond = True if noise is not None else None
    return Comparison(
        old_path=old_path, status=COMPARED, old_created=old.created, verdict=verdict,
        samples_per_s_ratio=rate_ratio, old_noise_fraction=old_noise,
        new_noise_fraction=new_noise, noise_fraction=noise, beyond_noise=beyond,
        figures=_figures(old, new), settings=changed_settings(old, new),
        machine=_changed(old.environment, new.environment, MACHINE_KEYS),
        data=changed_data(old, new))


def not_compared(old_path: str, note: str) -> Comparison:
    """The comparison that could not be made with the report at ``old_path``; ``note`` says
    why, in one line."""
    return Comparison(old_path=old_path, status=NOT_COMPARED, note=note)


def other_loader(old: "ReportData", new: "ReportData") -> Optional[str]:
    """Why ``old`` is not an earlier report of ``new``'s script and loader, in words, or
    ``None`` when it may be: a merged multi-rank report (``ranks``), or another loader type or
    dataset type. What ``wrap(save=PATH)`` and ``pipecheck run --json PATH`` check before
    keeping a comparison with the report they replace."""
    if old.ranks is not None or new.ranks is not None:
        return "a merged multi-rank report"
    for name in ("type", "dataset_type"):
        before, after = getattr(old.loader, name), getattr(new.loader, name)
        if before != after:
            label = "loader" if name == "type" else "dataset"
            return f"another {label} ({before} before, {after} now)"
    return None


def run_noise_fraction(report: "ReportData") -> Optional[float]:
    """The run's own noise: the relative half-width (0 or more) of the 90% interval of its loop
    time per batch (wait + step), by batch means over the timeline's steady batches (each
    epoch's first batch, with its worker start-up, left out;
    :func:`pipecheck.analysis.stats.batch_means_spread`, the spread the what-if model's
    intervals use). Without :data:`MIN_STEADY_BATCHES` such batches, a stress report gives its
    search's measured noise (``stress.search.noise_fraction``); otherwise ``None``: it cannot be
    told."""
    seen: set[int] = set()
    loops = []
    for batch in report.timeline.batches:
        if batch.epoch not in seen:
            seen.add(batch.epoch)
            continue
        if batch.compute_s is not None:
            loops.append(batch.wait_s + batch.compute_s)
    if len(loops) >= MIN_STEADY_BATCHES:
        spread = batch_means_spread(loops)
        if spread is not None:
            return spread
    search = report.stress.search if report.stress is not None else None
    noise = getattr(search, "noise_fraction", None)
    return float(noise) if isinstance(noise, (int, float)) else None


def changed_settings(old: "ReportData", new: "ReportData") -> list[ChangedValue]:
    """The loader settings (:data:`SETTING_KEYS`) and torch's intra-op threads that differ
    between the two reports, in that order."""
    changes = _changed(old.loader, new.loader, SETTING_KEYS)
    threads = (old.environment.intra_op_threads, new.environment.intra_op_threads)
    if threads[0] != threads[1]:
        changes.append(ChangedValue("intra_op_threads", threads[0], threads[1]))
    return changes


def changed_data(old: "ReportData", new: "ReportData") -> list[ChangedValue]:
    """The report kind and the data facts (:data:`DATA_KEYS`) that differ; the loader's type is
    named ``loader_type``."""
    changes = []
    if old.kind != new.kind:
        changes.append(ChangedValue("kind", old.kind, new.kind))
    for change in _changed(old.loader, new.loader, DATA_KEYS):
        name = "loader_type" if change.name == "type" else change.name
        changes.append(ChangedValue(name, change.old, change.new))
    return changes


def steady_step_s(report: "ReportData") -> Optional[float]:
    """Seconds per steady step: ``1 / consumer.demand_batches_per_s`` (the run's first step
    left out), ``None`` when not measured."""
    return ratio(1.0, report.consumer.demand_batches_per_s)


def stall_fraction(report: "ReportData") -> Optional[float]:
    """The stall the report's verdict was judged on (0-1): ``diagnosis.judgement``'s, else the
    steady stall, else the whole run's."""
    judgement = report.diagnosis.judgement
    if judgement is not None and judgement.stall_fraction is not None:
        return judgement.stall_fraction
    consumer = report.consumer
    if consumer.steady_stall_fraction is not None:
        return consumer.steady_stall_fraction
    return consumer.stall_fraction


def wait_per_batch_s(report: "ReportData") -> Optional[float]:
    """Mean data wait per batch in seconds, over the batches the stall was judged on."""
    judgement = report.diagnosis.judgement
    if judgement is not None and judgement.wait_per_batch_s is not None:
        return judgement.wait_per_batch_s
    return ratio(report.consumer.wait_s, report.consumer.batches)


def _figures(old: "ReportData", new: "ReportData") -> list[ComparedFigure]:
    old_stall, new_stall = stall_fraction(old), stall_fraction(new)
    pairs: list[tuple[str, Optional[float], Optional[float]]] = [
        ("samples_per_s", old.consumer.samples_per_s, new.consumer.samples_per_s)]
    if old.consumer.tokens_per_s is not None and new.consumer.tokens_per_s is not None:
        pairs.append(("tokens_per_s", old.consumer.tokens_per_s, new.consumer.tokens_per_s))
    pairs += [
        ("batches_per_s", old.consumer.batches_per_s, new.consumer.batches_per_s),
        ("steady_step_s", steady_step_s(old), steady_step_s(new)),
        ("wait_per_batch_s", wait_per_batch_s(old), wait_per_batch_s(new)),
        ("stall_fraction", old_stall, new_stall),
        ("goodput_fraction", _goodput(old, old_stall), _goodput(new, new_stall)),
    ]
    return [ComparedFigure(name, before, after, ratio(after, before))
            for name, before, after in pairs]


def _goodput(report: "ReportData", stall: Optional[float]) -> Optional[float]:
    judgement = report.diagnosis.judgement
    if judgement is not None and judgement.goodput_fraction is not None:
        return judgement.goodput_fraction
    return None if stall is None else 1.0 - stall


def _changed(old: Any, new: Any, keys: tuple[str, ...]) -> list[ChangedValue]:
    return [ChangedValue(key, getattr(old, key, None), getattr(new, key, None))
            for key in keys if getattr(old, key, None) != getattr(new, key, None)]
