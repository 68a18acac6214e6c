"""Calibration suite: does pipecheck's recommendation deliver the samples/s it predicts, inside
the 90% interval it states, on a wide set of real pipelines, quiet and beside a busy neighbour?

Method. The process first frees one large block
(:func:`pipecheck.stress.allocator.settle_allocator`): glibc's mmap threshold then stands where
a training process's does, and no case's speed depends on the blocks the cases before it freed
(docs/model.md#allocator-state). Then for each pipeline and condition (a *case*), in one
process:

1. warm up: ``WARM_UP_S`` seconds of untimed training at ``num_workers=0`` (page cache,
   allocator, lazy modules), so no measurement meets a cold start;
2. wrapped: train from ``num_workers=0`` under ``pipecheck.wrap`` for ``--seconds`` and take
   the report's recommended settings (every recommendation whose setting the loop can apply:
   ``num_workers``, ``prefetch_factor``, ``persistent_workers``, ``pin_memory`` with CUDA, and
   a torch thread count, :data:`THREAD_SETTINGS`; others are listed as not applied), the
   samples/s predicted for them (the last recommendation's figure: they are cumulative), its
   90% interval and whether the report calls it ``uncertain``. With no recommendation the
   prediction is "no change": the report's own measured rate, no interval, not judged against
   the ceiling (it is a measurement); a recommendation without a figure is "no prediction",
   and a report that recommends nothing for want of evidence "abstained" (neither has an
   error or an interval: both are counted apart);
3. unwrapped, ``--rounds`` interleaved rounds (the configurations' order rotates each round, so
   a slow minute or a position in the round spreads over all of them) of: the recommended
   settings, and the grid ``num_workers`` 0..``--max-workers`` at torch's defaults
   (``prefetch_factor=2``, no persistent workers). The recommended settings are a grid entry
   when they only change ``num_workers`` within the grid; otherwise they are one more entry
   (so a changed ``prefetch_factor`` is measured beside the grid). Each figure is the median
   of its rounds.

4. with ``--settle``, where the report calls its figure uncertain or proposes a change with
   none, the measurement it names: ``pipecheck stress`` of the recommended settings with the
   pipeline's own step (:mod:`settle`, :mod:`calibration_targets`), in the same condition.
   Its measured samples/s is the *settled* figure, judged against the same achieved rate.

Every timed run, wrapped or not, is the same loop (:func:`pipelines.train_for`): 3 untimed
batches (worker start-up), then a fixed time (``--seconds``) of training, epochs repeating as
needed; samples/s is the samples stepped over the timed window. The same loop records the
mean step time, so each run also gives the step's ceiling (``BATCH_SIZE / mean step time``:
the rate with free data, under that run's contention). The *ceiling* of a case is the median
over the rounds of the recommended settings' runs.

Around each case (1 s before it and after it, this process idle) the cores other processes keep
busy are measured (``outside_cores`` in the JSON); the summary says when the quiet cases were
not quiet (:data:`OUTSIDE_NOTE_CORES`), as on a shared machine.

Per case it prints one row: pipeline, condition, recommended settings, predicted samples/s
[90% interval] (``?`` marks an interval the report called uncertain), achieved, the best of
the grid and the recommended settings (with its setting), achieved / best, error
``achieved / predicted - 1``, interval width ``high / low``, covered (achieved inside the
interval), the step ceiling and whether the prediction exceeds it by more than
:data:`CEILING_TOLERANCE` (the ceiling is itself measured). Then the summary, against issue
26's targets: the recommendation at least 0.9 of the best in every case; quiet |error| at most
15%, median at most 10%; no prediction above the ceiling; coverage at least 80%; median width
at most 1.6. Each prints "ok" or "MISSED by X". Two lines split the errors by what the
report stands behind: the quiet errors of the figures it does not call uncertain, and those of
the figures a user is left to bank on after following the report (the model's where it is sure,
the settled measurement where it named one), with the same 15% target. A last line gives the narrowest band centred
on the predicted points that holds 80% of the achieved rates (:func:`needed_width`): whether
the points are good enough for any interval to meet both interval targets. A case that raises
is reported as failed and the others run; Ctrl-C prints the summary of the cases done (and
writes ``--json``).

Conditions: ``quiet``, and ``busy``: one CPU-burning neighbour process (``while True: pass``,
tagged :data:`pipelines.NEIGHBOUR_TAG` for ``pgrep -f``) started for the whole case in a new
session with ``setsid`` (another job's process, another scheduling group: ``--neighbour``
``group`` keeps it in this session, ``child`` makes it a child of this process) and killed
with ``os.killpg`` on every path out (``try``/``finally``; Ctrl-C and SIGTERM included).

Pipelines (:data:`pipelines.PIPELINES`, all data generated locally from fixed seeds, batches
of 64, each class of limit a user meets): ``jpeg`` CPU-bound GIL-releasing PIL decode and
crop; ``text`` GIL-bound pure-Python tokenizing; ``latency`` 2-6 ms of sleep per item;
``ipc`` 64 x 3x224x224 uint8 batches (moving them is the cost); ``slowstep`` a near-free
loader before a 30 ms step; ``cpustep`` a conv net trained on the CPU (workers compete with
the step); ``torchops`` large torch ops per item on intra-op threads; ``wds`` an iterable
WebDataset over local tar shards split by worker; and ``fft`` (numpy FFT per item, the
earlier ``prediction.py`` case). ``--list`` describes them. Nothing in pipecheck is tuned to
these cases: the suite stands for pipelines it has never seen.

    python benchmarks/calibration.py [--pipelines jpeg,text,...] [--conditions quiet,busy]
        [--seconds 10] [--rounds 3] [--max-workers 4] [--json results.json] [--reports DIR]
        [--records DIR] [--neighbour session|group|child] [--settle] [--list]
    python benchmarks/calibration.py --replay results.json [--records DIR] [--json new.json]
    python benchmarks/calibration.py --merge quiet.json busy.json

``--merge`` prints one table and summary over the rows of several results files (a quiet-only
run and a busy-only run, for instance), measuring nothing.

Calibrating without measuring again: ``--records DIR`` saves each wrapped run's raw record
(pipecheck's ``RunRecord``, pickled), and ``--replay results.json`` derives every case's
recommendation, prediction and interval again from those records with the pipecheck imported
now, judged against the measurements in ``results.json``, in seconds. A changed
recommendation is judged only where that run measured its settings (the earlier
recommendation, or a plain grid entry); otherwise its achieved rate is "-". Records are
pickles: a later pipecheck reads them while its record classes keep the fields' names (new
fields need defaults). Tuning the interval on a replay and then checking it on a fresh run
(or on other pipelines) keeps the fit honest.

At the defaults (8 pipelines, both conditions, 10 s, 3 rounds, 0-4 workers) a case takes about
3.5 minutes and the run about 55 minutes (the estimate is printed first).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import platform
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import psutil
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipelines import (  # noqa: E402
    BATCH_SIZE, LOADER_KEYWORDS, PIPELINES, Neighbour, Pipeline, loader_with, train_for)

from settle import settle  # noqa: E402

import pipecheck  # noqa: E402
from pipecheck.report import build_report  # noqa: E402
from pipecheck.stress.allocator import settle_allocator  # noqa: E402

DEFAULT_PIPELINES = ("jpeg", "text", "latency", "ipc", "slowstep", "cpustep", "torchops", "wds")
"""The suite run by default: one pipeline per class of issue 26 (``fft`` runs on request)."""

WARM_UP_S = 2.0
"""Seconds of untimed training at ``num_workers=0`` before each case's measurements."""

START_UP_S = 1.5
"""Rough seconds a timed run spends beyond ``--seconds`` (loader start, warm-up batches): for
the wall-time estimate only."""

CEILING_TOLERANCE = 0.05
"""A prediction counts as above the step's ceiling when it exceeds the measured ceiling by more
than this fraction: the ceiling is measured too (its rounds differ by a few percent)."""

THREAD_SETTINGS = ("torch_num_threads", "num_threads", "torch.set_num_threads",
                   "intra_op_threads")
"""Recommendation settings taken as the main process's torch intra-op thread count: applied
with ``torch.set_num_threads`` around the timed run (and restored)."""

WORKER_THREAD_SETTINGS = ("OMP_NUM_THREADS", "worker_threads", "worker_num_threads")
"""Recommendation settings taken as the workers' thread count: applied in each worker by a
``worker_init_fn`` calling ``torch.set_num_threads``."""

TARGETS = {"best_ratio": 0.9, "quiet_max_error": 0.15, "quiet_median_error": 0.10,
           "above_ceiling": 0, "coverage": 0.80, "median_width": 1.6}
"""Issue 26's "done when" figures."""

OUTSIDE_SAMPLE_S = 1.0
"""Seconds over which the other processes' CPU is sampled before and after each case."""

OUTSIDE_NOTE_CORES = 0.3
"""Cores kept busy by other processes around a quiet case (measured before and after it) from
which the summary says the quiet cases were not quiet."""

ABSTAINING_FINDINGS = ("insufficient-data",)
"""Findings with which a report that recommends nothing abstains (too little evidence to
advise) rather than says "no change helps": such a case has no prediction."""

SHORT = {"num_workers": "nw", "prefetch_factor": "pf", "persistent_workers": "persist",
         "pin_memory": "pin"}


# --- reading a report ---------------------------------------------------------------------


@dataclass
class Prediction:
    """What a report recommends and predicts. ``settings``: the applied settings (always with
    ``num_workers``); ``not_applied``: recommended settings this loop cannot apply;
    ``samples_per_s``: the predicted rate (``None``: the report gives no point);
    ``low``/``high``: its 90% interval; ``uncertain``: the report's flag; ``source``:
    ``recommendation``, ``no prediction``, ``no change`` (the measured rate stands) or
    ``abstained`` (:func:`prediction_of`)."""

    settings: dict[str, Any]
    samples_per_s: Optional[float]
    low: Optional[float] = None
    high: Optional[float] = None
    uncertain: Optional[bool] = None
    source: str = "recommendation"
    not_applied: dict[str, Any] = field(default_factory=dict)
    recommendations: list[dict[str, Any]] = field(default_factory=list)


def applicable(setting: str) -> bool:
    return (setting in LOADER_KEYWORDS or setting in THREAD_SETTINGS
            or setting in WORKER_THREAD_SETTINGS)


def prediction_of(report: Any) -> Prediction:
    """The recommended settings of ``report`` and the figures predicted for them: the figure of
    the last applicable recommendation (they are cumulative). When that one gives none (the
    report proposes a change it cannot predict; ``pin_memory``, which leaves the CPU side as it
    is, excepted) the source is ``no prediction``; with no applicable recommendation it is
    ``no change`` and the report's measured rate stands for the prediction, or ``abstained``
    (no prediction) when the report says why it cannot advise (:data:`ABSTAINING_FINDINGS`)."""
    settings: dict[str, Any] = {"num_workers": 0}
    not_applied: dict[str, Any] = {}
    found: Optional[dict[str, Any]] = None
    changed = False
    listed = []
    for rec in report.recommendations:
        expected = rec.expected
        listed.append({"setting": rec.setting, "current": rec.current, "proposed": rec.proposed,
                       "samples_per_s": expected.samples_per_s,
                       "low": getattr(expected, "samples_per_s_low", None),
                       "high": getattr(expected, "samples_per_s_high", None),
                       "uncertain": getattr(expected, "uncertain", None),
                       "note": expected.note, "reason": rec.reason})
        if not applicable(rec.setting):
            not_applied[rec.setting] = rec.proposed
            continue
        settings[rec.setting] = rec.proposed
        changed = True
        if expected.samples_per_s is not None or listed[-1]["low"] is not None:
            found = listed[-1]
        elif rec.setting != "pin_memory":
            found = None  # the settings measured include a change nothing was predicted for
    if not changed:
        if any(str(getattr(f.kind, "value", f.kind)) in ABSTAINING_FINDINGS
               for f in report.diagnosis.findings):
            return Prediction(settings, None, source="abstained", not_applied=not_applied,
                              recommendations=listed)
        return Prediction(settings, report.consumer.samples_per_s, source="no change",
                          not_applied=not_applied, recommendations=listed)
    if found is None:
        return Prediction(settings, None, source="no prediction", not_applied=not_applied,
                          recommendations=listed)
    return Prediction(settings, found["samples_per_s"], found["low"], found["high"],
                      found["uncertain"], not_applied=not_applied, recommendations=listed)


def label_of(settings: dict[str, Any]) -> str:
    """``nw=2 pf=4`` style: the settings in short."""
    parts = []
    for key, value in settings.items():
        if key in THREAD_SETTINGS:
            parts.append(f"threads={value}")
        elif key in WORKER_THREAD_SETTINGS:
            parts.append(f"wthreads={value}")
        elif isinstance(value, bool):
            if value:
                parts.append(SHORT.get(key, key))
        else:
            parts.append(f"{SHORT.get(key, key)}={value}")
    return " ".join(parts)


def grid_entry(settings: dict[str, Any], max_workers: int) -> Optional[int]:
    """The grid's ``num_workers`` the settings equal (torch's defaults otherwise), or
    ``None``."""
    workers = settings.get("num_workers", 0)
    plain = all(key == "num_workers" or (key == "prefetch_factor" and value in (None, 2))
                or (key in ("persistent_workers", "pin_memory") and not value)
                for key, value in settings.items())
    return workers if plain and isinstance(workers, int) and workers <= max_workers else None


# --- measuring ----------------------------------------------------------------------------


def _worker_threads(count: int) -> Any:
    def init(_: int) -> None:
        torch.set_num_threads(count)
    return init


def timed(pipeline: Pipeline, dataset: Any, settings: dict[str, Any], seconds: float) -> Any:
    """One unwrapped timed run with ``settings`` applied (:func:`pipelines.train_for`)."""
    loader = loader_with(dataset, settings, pipeline.iterable)
    for key in WORKER_THREAD_SETTINGS:
        if key in settings and loader.num_workers:
            loader.worker_init_fn = _worker_threads(int(settings[key]))
    threads = next((int(settings[k]) for k in THREAD_SETTINGS if k in settings), None)
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return train_for(loader, seconds, pipeline.model())
    finally:
        torch.set_num_threads(before)
        del loader


def run_record(wrapped: Any) -> Any:
    """The raw record a wrapped loader's report is built from (pipecheck's ``RunRecord``, for
    ``--records`` / ``--replay``), or ``None`` where this pipecheck keeps it elsewhere."""
    try:
        return object.__getattribute__(wrapped, "_measurement").record()
    except AttributeError:
        return None


def outside_cores(seconds: float = OUTSIDE_SAMPLE_S) -> float:
    """Cores the machine's other processes kept busy over ``seconds`` (this process is idle
    then: between cases, no workers, the neighbour not yet started or already stopped)."""
    return psutil.cpu_percent(interval=seconds) / 100 * (psutil.cpu_count() or 1)


def run_case(pipeline: Pipeline, data: Optional[str], condition: str,
             args: argparse.Namespace) -> dict[str, Any]:
    """One case, measured as the module docstring says; its row."""
    dataset = pipeline.dataset(data)
    outside_before = outside_cores()
    neighbour = Neighbour(args.neighbour) if condition == "busy" else None
    try:
        if neighbour is not None:
            neighbour.start()
        train_for(loader_with(dataset, {"num_workers": 0}, pipeline.iterable), WARM_UP_S,
                  pipeline.model())
        wrapped = pipecheck.wrap(loader_with(dataset, {"num_workers": 0}, pipeline.iterable))
        try:
            baseline = train_for(wrapped, args.seconds, pipeline.model())
            record = run_record(wrapped)
            report = build_report(record) if record is not None else wrapped.report()
        finally:
            wrapped.close()
        record_file = None
        if args.records and record is not None:
            os.makedirs(args.records, exist_ok=True)
            record_file = os.path.join(args.records, f"{pipeline.name}-{condition}.pickle")
            with open(record_file, "wb") as handle:
                pickle.dump(record, handle)
        if args.reports:
            os.makedirs(args.reports, exist_ok=True)
            report.save(os.path.join(args.reports, f"{pipeline.name}-{condition}.json"))
        predicted = prediction_of(report)
        configs: dict[str, dict[str, Any]] = {
            f"nw={n}": {"num_workers": n} for n in range(args.max_workers + 1)}
        entry = grid_entry(predicted.settings, args.max_workers)
        recommended = f"nw={entry}" if entry is not None else "recommended"
        configs.setdefault(recommended, predicted.settings)
        keys = list(configs)
        rates: dict[str, list[float]] = {key: [] for key in keys}
        ceilings: dict[str, list[float]] = {key: [] for key in keys}
        for r in range(args.rounds):
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                result = timed(pipeline, dataset, configs[key], args.seconds)
                rates[key].append(result.samples_per_s)
                if result.step_s:
                    ceilings[key].append(BATCH_SIZE / result.step_s)
        settled = (settled_figure(pipeline, data, predicted, args.seconds)
                   if args.settle and needs_settling(predicted) else None)
    finally:
        if neighbour is not None:
            neighbour.stop()
    outside_after = outside_cores()
    medians = {key: statistics.median(values) for key, values in rates.items()}
    best_key = max(medians, key=medians.__getitem__)
    return make_row(
        pipeline=pipeline.name, condition=condition, prediction=predicted,
        recommended_label=label_of(predicted.settings), achieved=medians[recommended],
        best=medians[best_key],
        best_label=label_of(configs[best_key]) if best_key == "recommended" else best_key,
        ceiling=(statistics.median(ceilings[recommended]) if ceilings[recommended] else None),
        extra={"grid": {key: medians[key] for key in keys},
               "rounds": rates,
               "ceilings": {key: statistics.median(v) for key, v in ceilings.items() if v},
               "baseline_samples_per_s": baseline.samples_per_s,
               "baseline_ceiling": (BATCH_SIZE / baseline.step_s if baseline.step_s else None),
               "verdict": report.diagnosis.verdict,
               "report_samples_per_s": report.consumer.samples_per_s,
               "report_demand_samples_per_s": (
                   report.consumer.demand_batches_per_s * BATCH_SIZE
                   if report.consumer.demand_batches_per_s else None),
               "kind": pipeline.kind, "record_file": record_file,
               "settled": settled,
               "settled_error": (medians[recommended] / settled["samples_per_s"] - 1
                                 if settled and settled["samples_per_s"] else None),
               "outside_cores": [outside_before, outside_after]})


def needs_settling(prediction: Prediction) -> bool:
    """Whether the report names a measurement for its figure: a recommendation it calls
    uncertain, or one it proposes without a figure."""
    return (prediction.source == "no prediction"
            or (prediction.source == "recommendation" and bool(prediction.uncertain)))


def settled_figure(pipeline: Pipeline, data: Optional[str], prediction: Prediction,
                   seconds: float) -> dict[str, Any]:
    """The stress measurement of the recommended settings (:func:`settle.settle`)."""
    threads = next((int(prediction.settings[k]) for k in THREAD_SETTINGS
                    if k in prediction.settings), None)
    return settle(pipeline.name, data, prediction.settings, threads, seconds)


# --- rows and the summary (pure) ----------------------------------------------------------


def make_row(pipeline: str, condition: str, prediction: Prediction, recommended_label: str,
             achieved: Optional[float], best: float, best_label: str,
             ceiling: Optional[float], extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """A case's row: the measured figures and those derived from them (error, width, covered,
    above the ceiling). ``achieved`` is ``None`` only in a replay whose recommendation was not
    measured (:func:`replay`): then nothing is judged against it."""
    point, low, high = prediction.samples_per_s, prediction.low, prediction.high
    if achieved is None:
        point_error = covered = best_ratio = None
    else:
        point_error = achieved / point - 1 if point else None
        covered = (low <= achieved <= high) if low is not None and high is not None else None
        best_ratio = achieved / best if best else None
    row: dict[str, Any] = {
        "pipeline": pipeline, "condition": condition, "recommended": recommended_label,
        "source": prediction.source, "predicted": point, "low": low, "high": high,
        "uncertain": prediction.uncertain, "achieved": achieved, "best": best,
        "best_setting": best_label, "best_ratio": best_ratio, "error": point_error,
        "width": high / low if low and high else None, "covered": covered,
        "ceiling": ceiling,
        # "no change" predicts nothing: its figure is the wrapped run's own measured rate.
        "above_ceiling": (point > ceiling * (1 + CEILING_TOLERANCE)
                          if point is not None and ceiling and prediction.source != "no change"
                          else None),
        "not_applied": prediction.not_applied,
        "recommendations": prediction.recommendations,
    }
    row.update(extra or {})
    return row


def _verdict(value: Optional[float], target: float, upper: bool, unit: str) -> str:
    """"ok" or "MISSED by X" for ``value`` against ``target`` (``upper``: at most)."""
    if value is None:
        return "n/a"
    missed = value - target if upper else target - value
    if missed <= 1e-12:
        return "ok"
    if unit == "%":
        return f"MISSED by {missed * 100:.0f} pp"
    if unit == "cases":
        return f"MISSED by {missed:.0f} case{'s' if missed != 1 else ''}"
    return f"MISSED by {missed:.2f}"


def needed_width(rows: Sequence[dict[str, Any]], coverage: float = TARGETS["coverage"]
                 ) -> Optional[float]:
    """The width (``high / low``) of the narrowest band centred (in ratio) on each predicted
    point that would hold the achieved rate in ``coverage`` of the predicted cases: ``exp(2 q)``
    with ``q`` the nearest-rank ``coverage`` quantile of ``|ln(achieved / predicted)|``. At most
    :data:`TARGETS` ``median_width`` means the points are good enough for an interval that meets
    both interval targets; above it, no interval around these points can. ``None`` with no
    predicted case."""
    logs = sorted(abs(math.log(r["achieved"] / r["predicted"])) for r in rows
                  if r["source"] == "recommendation" and r["predicted"] and r["achieved"])
    if not logs:
        return None
    return math.exp(2 * logs[max(0, math.ceil(coverage * len(logs)) - 1)])


def banked_error(row: dict[str, Any]) -> Optional[float]:
    """The error of the figure a user is left to bank on after following the report: the
    settled measurement's (``--settle``) where the report named one, else the model's where
    the report stands behind it (not uncertain); ``None`` otherwise."""
    if row.get("settled_error") is not None:
        return float(row["settled_error"])
    if row["error"] is not None and not row["uncertain"]:
        return float(row["error"])
    return None


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The suite's figures against :data:`TARGETS`, each with its "ok" / "MISSED by X"."""
    ratios = [r["best_ratio"] for r in rows if r["best_ratio"] is not None]
    short = sum(1 for x in ratios if x < TARGETS["best_ratio"])
    quiet = [abs(r["error"]) for r in rows if r["condition"] == "quiet" and r["error"] is not None]
    quiet_sure = [abs(r["error"]) for r in rows if r["condition"] == "quiet"
                  and r["error"] is not None and not r["uncertain"]]
    banked = [abs(e) for e in map(banked_error, rows) if e is not None]
    quiet_banked = [abs(e) for r in rows if r["condition"] == "quiet"
                    for e in [banked_error(r)] if e is not None]
    all_errors = [abs(r["error"]) for r in rows if r["error"] is not None]
    judged = [r for r in rows if r["above_ceiling"] is not None]
    above = sum(1 for r in judged if r["above_ceiling"])
    with_interval = [r for r in rows if r["covered"] is not None]
    covered = sum(1 for r in with_interval if r["covered"])
    widths = [r["width"] for r in rows if r["width"] is not None]

    def median(values: list[float]) -> Optional[float]:
        return statistics.median(values) if values else None

    summary = {
        "cases": len(rows),
        "best_ratio_ok": len(ratios) - short, "best_ratio_cases": len(ratios),
        "worst_best_ratio": min(ratios) if ratios else None,
        "quiet_median_error": median(quiet), "quiet_max_error": max(quiet) if quiet else None,
        "quiet_predictions": len(quiet),
        "median_error": median(all_errors), "max_error": max(all_errors) if all_errors else None,
        "quiet_sure_max_error": max(quiet_sure) if quiet_sure else None,
        "quiet_sure_predictions": len(quiet_sure),
        "settled": sum(1 for r in rows if r.get("settled_error") is not None),
        "quiet_banked_median_error": median(quiet_banked),
        "quiet_banked_max_error": max(quiet_banked) if quiet_banked else None,
        "quiet_banked": len(quiet_banked),
        "banked_max_error": max(banked) if banked else None, "banked": len(banked),
        "above_ceiling": above, "ceiling_judged": len(judged),
        "coverage": covered / len(with_interval) if with_interval else None,
        "covered": covered, "with_interval": len(with_interval),
        "without_interval": len(rows) - len(with_interval),
        "uncertain": sum(1 for r in rows if r["uncertain"]),
        "sources": {source: sum(1 for r in rows if r["source"] == source)
                    for source in ("recommendation", "no change", "no prediction", "abstained")},
        "median_width": median(widths),
        "needed_width": needed_width(rows),
    }
    summary["verdicts"] = {
        "best_ratio": _verdict(short, 0, True, "cases") if ratios else "n/a",
        "quiet_median_error": _verdict(summary["quiet_median_error"],
                                       TARGETS["quiet_median_error"], True, "%"),
        "quiet_max_error": _verdict(summary["quiet_max_error"], TARGETS["quiet_max_error"],
                                    True, "%"),
        "quiet_banked_max_error": _verdict(summary["quiet_banked_max_error"],
                                           TARGETS["quiet_max_error"], True, "%"),
        "above_ceiling": (_verdict(above, TARGETS["above_ceiling"], True, "cases")
                          if judged else "n/a"),
        "coverage": _verdict(summary["coverage"], TARGETS["coverage"], False, "%"),
        "median_width": _verdict(summary["median_width"], TARGETS["median_width"], True, ""),
    }
    return summary


# --- printing -----------------------------------------------------------------------------


def _rate(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _pct(value: Optional[float], signed: bool = True) -> str:
    return "-" if value is None else (f"{value:+.0%}" if signed else f"{value:.0%}")


HEADER = (f"{'pipeline':9} {'cond':5} {'recommended':18} {'predicted [90% interval]':28} "
          f"{'achieved':>8} {'best (setting)':>20} {'ach/best':>8} {'error':>7} {'width':>6} "
          f"{'covered':>7} {'ceiling':>8} {'>ceil':>5}")


def format_row(row: dict[str, Any]) -> str:
    if row["low"] is not None and row["high"] is not None:
        interval = f" [{row['low']:,.0f}-{row['high']:,.0f}]{'?' if row['uncertain'] else ''}"
    else:
        interval = " (no change)" if row["source"] == "no change" else ""
    recommended = row["recommended"] + (" +" + ",".join(row["not_applied"])
                                        if row["not_applied"] else "")
    predicted = (row["source"] if row["source"] in ("no prediction", "abstained")
                 else _rate(row["predicted"]))
    covered = {None: "-", True: "yes", False: "NO"}[row["covered"]]
    above = {None: "-", True: "YES", False: "no"}[row["above_ceiling"]]
    width = "-" if row["width"] is None else f"{row['width']:.2f}"
    ratio = "-" if row["best_ratio"] is None else f"{row['best_ratio']:.2f}"
    best = f"{_rate(row['best'])} ({row['best_setting']})"
    return (f"{row['pipeline']:9} {row['condition']:5} {recommended:18} "
            f"{predicted + interval:28} {_rate(row['achieved']):>8} "
            f"{best:>20} {ratio:>8} {_pct(row['error']):>7} {width:>6} {covered:>7} "
            f"{_rate(row['ceiling']):>8} {above:>5}{_settled_text(row)}")


def _settled_text(row: dict[str, Any]) -> str:
    """`` settled 1,234 (-3%)``: the named stress measurement's figure and its error."""
    settled = row.get("settled")
    if not settled:
        return ""
    if settled.get("samples_per_s") is None:
        return f"  settled: failed ({settled.get('error')})"
    return f"  settled {_rate(settled['samples_per_s'])} ({_pct(row.get('settled_error'))})"


def format_summary(summary: dict[str, Any]) -> list[str]:
    v = summary["verdicts"]
    worst = summary["worst_best_ratio"]
    width = summary["median_width"]
    needed = summary["needed_width"]
    return [
        f"recommendation >= 0.9 of best: {summary['best_ratio_ok']}/"
        f"{summary['best_ratio_cases']} cases (worst "
        f"{'-' if worst is None else f'{worst:.2f}'}; target every case): {v['best_ratio']}",
        f"quiet median |error|: {_pct(summary['quiet_median_error'], False)} over "
        f"{summary['quiet_predictions']} predictions (target <= 10%): {v['quiet_median_error']}",
        f"quiet max |error|: {_pct(summary['quiet_max_error'], False)} (target <= 15%): "
        f"{v['quiet_max_error']}",
        f"quiet max |error| where the report is sure (not uncertain): "
        f"{_pct(summary['quiet_sure_max_error'], False)} over "
        f"{summary['quiet_sure_predictions']} predictions",
        f"the figures to bank on (the model's where sure, the named stress measurement where "
        f"uncertain or unpredicted; {summary['settled']} measured): quiet median "
        f"{_pct(summary['quiet_banked_median_error'], False)}, max "
        f"{_pct(summary['quiet_banked_max_error'], False)} over {summary['quiet_banked']} "
        f"(target <= 15%): {v['quiet_banked_max_error']}; all conditions max "
        f"{_pct(summary['banked_max_error'], False)} over {summary['banked']}",
        f"cases: {summary['sources']['recommendation']} predicted recommendations, "
        f"{summary['sources']['no change']} no change (the measured rate stands), "
        f"{summary['sources']['no prediction']} recommendations without a prediction, "
        f"{summary['sources']['abstained']} abstained (too little evidence)",
        f"all conditions: median |error| {_pct(summary['median_error'], False)}, max "
        f"{_pct(summary['max_error'], False)}",
        f"predictions above the step's ceiling (by > {CEILING_TOLERANCE:.0%}): "
        f"{summary['above_ceiling']} of {summary['ceiling_judged']} (target 0): "
        f"{v['above_ceiling']}",
        f"interval coverage: {summary['covered']}/{summary['with_interval']} = "
        f"{_pct(summary['coverage'], False)} ({summary['without_interval']} cases without an "
        f"interval, {summary['uncertain']} marked uncertain; target >= 80%): {v['coverage']}",
        f"median interval width (high/low): "
        f"{'-' if width is None else f'{width:.2f}'} "
        f"(target <= 1.6): {v['median_width']}",
        f"narrowest band around the predicted points holding 80% of them: "
        f"{'-' if needed is None else f'{needed:.2f}'} wide (at most 1.6: the points allow an "
        f"interval meeting both interval targets)",
    ]


# --- replay (for calibrating the model without measuring again) ----------------------------


def replay(path: str, records: Optional[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of the results file ``path`` (``--json``) with each case's prediction derived
    again, by the pipecheck imported now, from the run record its wrapped run saved
    (``--records``; ``records`` overrides the folder). The measured figures stay: the achieved
    rate is the earlier recommendation's when the settings are the same, the grid entry's
    when the new settings are a plain worker count the grid measured, else unknown (the row
    is listed, and nothing is judged against it). Returns the rows and the cases skipped
    (no record)."""
    with open(path) as handle:
        results = json.load(handle)
    max_workers = results["arguments"]["max_workers"]
    rows, skipped = [], []
    for old in results["rows"]:
        name = f"{old['pipeline']}-{old['condition']}.pickle"
        file = os.path.join(records, name) if records else old.get("record_file")
        if not file or not os.path.exists(file):
            skipped.append(f"{old['pipeline']} {old['condition']}")
            continue
        with open(file, "rb") as handle:
            predicted = prediction_of(build_report(pickle.load(handle)))
        label = label_of(predicted.settings)
        entry = grid_entry(predicted.settings, max_workers)
        key = f"nw={entry}" if entry is not None else None
        if label == old["recommended"]:
            achieved, ceiling = old["achieved"], old["ceiling"]
        elif key is not None and key in old["grid"]:
            achieved, ceiling = old["grid"][key], old.get("ceilings", {}).get(key)
        else:
            achieved, ceiling = None, None
        extra = {k: v for k, v in old.items() if k not in ("recommendations",)}
        extra["replayed_from"] = {"recommended": old["recommended"],
                                  "predicted": old["predicted"], "low": old["low"],
                                  "high": old["high"]}
        row = make_row(old["pipeline"], old["condition"], predicted, label, achieved,
                       old["best"], old["best_setting"], ceiling)
        extra.update(row)
        rows.append(extra)
    return rows, skipped


# --- main ---------------------------------------------------------------------------------


def estimate_s(cases: int, args: argparse.Namespace) -> float:
    """Rough wall time: per case the warm-up, the wrapped run and every round's runs (the grid
    and possibly one more configuration)."""
    per_run = args.seconds + START_UP_S
    configs = args.max_workers + 1.5  # the recommended settings are off-grid about half the time
    return cases * (WARM_UP_S + 2 * OUTSIDE_SAMPLE_S + per_run
                    + args.rounds * configs * per_run)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", default=",".join(DEFAULT_PIPELINES),
                        help=f"comma-separated, of: {', '.join(PIPELINES)} (default: "
                        f"{','.join(DEFAULT_PIPELINES)})")
    parser.add_argument("--conditions", default="quiet,busy",
                        help="comma-separated, of quiet, busy (default both)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="seconds of each timed run after its warm-up batches (default 10)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds; each figure is their median (default 3)")
    parser.add_argument("--max-workers", type=int, default=4,
                        help="the grid's num_workers run 0 to this (default 4)")
    parser.add_argument("--neighbour", choices=["session", "group", "child"], default="session",
                        help="where the busy condition's CPU burner runs (default: a new "
                        "session, setsid)")
    parser.add_argument("--json", metavar="PATH", help="write the table and summary as JSON")
    parser.add_argument("--reports", metavar="DIR",
                        help="save each wrapped run's report as DIR/PIPELINE-CONDITION.json")
    parser.add_argument("--records", metavar="DIR",
                        help="save each wrapped run's record (a pickle of pipecheck's RunRecord) "
                        "as DIR/PIPELINE-CONDITION.pickle, for --replay")
    parser.add_argument("--replay", metavar="RESULTS",
                        help="measure nothing: derive every case's prediction again from the "
                        "records a run with --json RESULTS --records DIR saved, with the "
                        "pipecheck imported now, and judge it against that run's measurements")
    parser.add_argument("--merge", metavar="RESULTS", nargs="+",
                        help="print the table and summary of these results files' rows "
                        "together (e.g. a quiet-only run and a busy-only run), measuring "
                        "nothing")
    parser.add_argument("--settle", action="store_true",
                        help="where a report calls its figure uncertain or gives none, run the "
                        "pipecheck stress measurement it names (the recommended settings with "
                        "the pipeline's own step) and judge that figure too")
    parser.add_argument("--list", action="store_true", help="list the pipelines and exit")
    args = parser.parse_args(argv)
    if args.merge:
        rows = []
        for path in args.merge:
            with open(path) as handle:
                rows.extend(json.load(handle)["rows"])
        print(HEADER)
        for row in rows:
            print(format_row(row))
        print(f"\nsummary (merged from {', '.join(args.merge)}, {len(rows)} cases):")
        for line in format_summary(summarize(rows)):
            print("  " + line)
        return 0
    if args.replay:
        rows, skipped = replay(args.replay, args.records)
        print(HEADER)
        for row in rows:
            print(format_row(row))
        summary = summarize(rows)
        print(f"\nsummary (replayed from {args.replay}, {len(rows)} cases"
              f"{f'; no record for {len(skipped)}' if skipped else ''}):")
        for line in format_summary(summary):
            print("  " + line)
        if args.json:
            write_json(args.json, args, rows, summary)
            print(f"wrote {args.json}")
        return 0
    if args.list:
        for p in PIPELINES.values():
            extra = "" if p.name in DEFAULT_PIPELINES else " (not in the default suite)"
            print(f"{p.name:9} {p.kind}{extra}: {p.description}")
        return 0
    names = [n for n in args.pipelines.split(",") if n]
    conditions = [c for c in args.conditions.split(",") if c]
    unknown = [n for n in names if n not in PIPELINES] + [
        c for c in conditions if c not in ("quiet", "busy")]
    if unknown or not names or not conditions or args.rounds < 1 or args.max_workers < 0:
        parser.error(f"unknown or empty: {', '.join(unknown) or 'pipelines/conditions/rounds'}")
    cases = len(names) * len(conditions)
    print(f"{cases} cases, about {estimate_s(cases, args) / 60:.0f} minutes; "
          f"{os.cpu_count()} CPUs, torch {torch.__version__} with "
          f"{torch.get_num_threads()} intra-op threads", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)
    # Every case (and every worker it forks) starts from a training process's allocator state,
    # not from whatever large blocks the cases before it happened to free.
    settle_allocator()
    started = time.time()
    rows: list[dict[str, Any]] = []
    failed: list[dict[str, str]] = []
    interrupted = False
    with tempfile.TemporaryDirectory(prefix="pipecheck-calibration-") as root:
        data: dict[str, Optional[str]] = {}
        for name in names:
            pipeline = PIPELINES[name]
            data[name] = None
            if pipeline.prepare is not None:
                data[name] = os.path.join(root, name)
                os.makedirs(data[name])
                pipeline.prepare(data[name])
        os.sync()  # the files' writeback would otherwise run during the first measurement
        print(HEADER, flush=True)
        try:
            for condition in conditions:
                for name in names:
                    try:
                        row = run_case(PIPELINES[name], data[name], condition, args)
                    except Exception as error:  # one broken case must not lose the others
                        failed.append({"pipeline": name, "condition": condition,
                                       "error": f"{type(error).__name__}: {error}"})
                        print(f"{name:9} {condition:5} FAILED: {failed[-1]['error']}",
                              flush=True)
                        continue
                    rows.append(row)
                    print(format_row(row), flush=True)
        except KeyboardInterrupt:
            interrupted = True
            print("interrupted: the summary covers the cases done", flush=True)
    summary = summarize(rows)
    summary["failed"] = failed
    summary["interrupted"] = interrupted
    print(f"\nsummary ({len(rows)} cases, {(time.time() - started) / 60:.1f} minutes"
          f"{f', {len(failed)} failed' if failed else ''}"
          f"{', interrupted' if interrupted else ''}):")
    for line in format_summary(summary):
        print("  " + line)
    outside = [max(r["outside_cores"]) for r in rows if r["condition"] == "quiet"]
    if outside and max(outside) >= OUTSIDE_NOTE_CORES:
        print(f"  note: other processes kept up to {max(outside):.1f} cores busy around the "
              f"quiet cases (of {psutil.cpu_count()}): they were not quiet")
    if args.json:
        write_json(args.json, args, rows, summary)
        print(f"wrote {args.json}")
    return 130 if interrupted else (1 if failed else 0)


def write_json(path: str, args: argparse.Namespace, rows: list[dict[str, Any]],
               summary: dict[str, Any]) -> None:
    """The whole table and summary, with the command and environment, for committing and
    comparing runs."""
    with open(path, "w") as handle:
        json.dump({"command": sys.argv, "arguments": vars(args),
                   "environment": {"cpus": os.cpu_count(), "torch": torch.__version__,
                                   "threads": torch.get_num_threads(),
                                   "python": platform.python_version(),
                                   "pipecheck": getattr(pipecheck, "__version__", None),
                                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                   "targets": TARGETS, "rows": rows, "summary": summary},
                  handle, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
