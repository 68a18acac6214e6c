"""Sentences and labels every format shares: the verdict line, the run's context line, the
capacity / demand phrase, a recommendation's effect, why there are no recommendations, and a
trial configuration as text. Plain, unescaped text with units (:mod:`pipecheck.units`); each
renderer makes it inert for its format."""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Any, Optional

from pipecheck import units as fmt
from pipecheck.effects import STEPS_PER_SAVING, ChangeEffect, capacity_words
from pipecheck.kinds import BALANCED, COMPUTE_BOUND, INPUT_BOUND, NO_DATA, FindingKind, Verdict
from pipecheck.records import (
    MODEL_ERROR_FRACTION,
    SERIAL_TO_WORKERS_ERROR,
    UNCERTAIN_WIDTH,
    UNSURE_POINT_ERROR,
    interval_uncertain,
)

if TYPE_CHECKING:
    from pipecheck.records import Recommendation
    from pipecheck.report_data import ReportData

CONTEXT_SETTINGS = ("num_workers", "prefetch_factor", "batch_size", "pin_memory",
                    "persistent_workers", "in_order")
"""Loader settings named in the context line (those not ``None``), in this order."""


BRIEF_SETTINGS = ("num_workers", "prefetch_factor", "batch_size")
"""Loader settings named in the short view's context line."""


def number(value: Any) -> Optional[float]:
    """A JSON number as a float; ``None`` for anything else (null, text, booleans)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


CONFIG_SETTINGS = 16
"""Settings of one configuration named (a DataLoader has about ten); the rest are counted."""


def config_text(config: Any) -> str:
    """A trial configuration as typed in Python, ``num_workers=2 prefetch_factor=4``; settings
    left unset (``None``) are left out; ``{}`` is ``the target's own settings``; beyond
    :data:`CONFIG_SETTINGS` settings, how many more."""
    if isinstance(config, dict):
        text = " ".join(f"{k}={fmt.setting_value(v)}" for k, v in
                        itertools.islice(config.items(), CONFIG_SETTINGS) if v is not None)
        if len(config) > CONFIG_SETTINGS:
            text += f" and {len(config) - CONFIG_SETTINGS:,} more settings"
        return text or "the target's own settings"
    return fmt.NOT_MEASURED if config is None else str(config)


def context_line(report: "ReportData", brief: bool = False) -> str:
    """What was measured and where: report kind (and rank), time, loader and its settings, the
    dataset type, CPUs, CUDA, Python, torch and the platform, joined by `` · ``. ``brief``
    (the short view): the report kind, the loader's type and settings, CPUs and CUDA."""
    env, loader = report.environment, report.loader
    settings = [f"{name}={fmt.setting_value(getattr(loader, name))}"
                for name in CONTEXT_SETTINGS if getattr(loader, name, None) is not None]
    cuda = "no CUDA" if not env.cuda else " ".join(filter(None, ("CUDA", env.cuda_device)))
    torch = f"torch {env.torch}" if env.torch else (
        "torch unknown" if report.kind == "attach" else "no torch")
    where = (f", rank {report.rank.rank} of {report.rank.world_size}"
             if report.rank is not None else "")
    if brief:
        settings = [f"{name}={fmt.setting_value(getattr(loader, name))}"
                    for name in BRIEF_SETTINGS if getattr(loader, name, None) is not None]
        return " · ".join([f"{report.kind} report{where}", " ".join([loader.type, *settings]),
                           f"{env.cpu_count} CPUs ({env.usable_cpus} usable), {cuda}"])
    parts = [f"{report.kind} report{where}, {report.created}", " ".join([loader.type, *settings])]
    if loader.dataset_type:
        parts.append(f"dataset {loader.dataset_type}")
    parts += [f"{env.cpu_count} CPUs ({env.usable_cpus} usable), {cuda}",
              f"Python {env.python}, {torch}"]
    if env.platform:
        parts.append(env.platform)
    return " · ".join(parts)


def ended_line(report: "ReportData") -> Optional[str]:
    """``the run did not complete (status ...)...`` for an unfinished run, else ``None``."""
    consumer = report.consumer
    if consumer.status == "complete":
        return None
    detail = f": {consumer.error}" if consumer.error else ""
    return f"the run did not complete (status {consumer.status}{detail}); numbers cover what ran"


def verdict_line(report: "ReportData") -> str:
    """One sentence: the verdict in capitals, the stall behind it and the threshold it was judged
    against, e.g. ``INPUT-BOUND: the training loop waited for data 41.2% of the time
    (threshold 10%)``. Thresholds come from ``report.diagnosis.thresholds``."""
    diagnosis = report.diagnosis
    verdict = diagnosis.verdict
    label = verdict.upper()
    if verdict == NO_DATA:
        return f"{label}: no batches were measured, so there is no verdict"
    stall, steady = _verdict_stall(report)
    scope = " in steady state" if steady else ""
    if verdict == COMPUTE_BOUND:
        sentence = f"the training loop waited for data only {fmt.percent(stall)} of the time{scope}"
    else:
        sentence = f"the training loop waited for data {fmt.percent(stall)} of the time{scope}"
    judgement = diagnosis.judgement
    wait_s = judgement.wait_per_batch_s if judgement is not None else None
    if verdict == COMPUTE_BOUND and judgement is not None and wait_s is not None \
            and wait_s < judgement.min_wait_per_batch_s:
        # Compute-bound on the floor, not the stall: say so instead of "only 22%".
        sentence = (f"the training loop waited for data {fmt.percent(stall)} of the time{scope} "
                    f"but only {fmt.seconds(wait_s)} per batch, under the "
                    f"{fmt.seconds(judgement.min_wait_per_batch_s)} that can hold a step back")
        threshold = ""
    else:
        threshold = _threshold_phrase(verdict, diagnosis.thresholds)
    goodput = judgement.goodput_fraction if judgement is not None else (
        None if stall is None else 1.0 - stall)
    return f"{label}: {sentence}{threshold}; data goodput {fmt.percent(goodput)}"


def capacity_phrase(report: "ReportData") -> Optional[str]:
    """The capacity / demand figure in the words of its band
    (:func:`pipecheck.effects.capacity_words`, one table for every ratio), then, where the
    measured stall says otherwise, the stall's conclusion, which wins, e.g. ``1.79x: the loader
    keeps up with the step; yet the loop waited for data 36.1% of the time (measured stall,
    which wins): with num_workers=0 production and the step take turns``. ``None`` when
    capacity or demand was not measured. The conclusion comes from ``diagnosis.judgement``
    (it follows the measured stall, like the verdict); reports written before it existed get
    the ratio's words alone."""
    diagnosis = report.diagnosis
    judgement = diagnosis.judgement
    demand = report.consumer.demand_batches_per_s
    capacity = report.producer.capacity_batches_per_s
    ratio = judgement.capacity_demand_ratio if judgement is not None else (
        capacity / demand if demand and capacity is not None else None)
    if ratio is None:
        return None
    estimated = " estimated" if judgement is not None and judgement.capacity_note else ""
    text = f"{ratio:.2f}x{estimated}: {capacity_words(ratio)}"
    if judgement is None or judgement.loader_keeps_up is None:
        return text
    stall, _ = _verdict_stall(report)
    waited = f"the loop waited for data {fmt.percent(stall)} of the time"
    keeps_up_by_ratio = round(ratio, 2) >= 1.0
    if diagnosis.verdict in (INPUT_BOUND, BALANCED) and keeps_up_by_ratio:
        text += f"; yet {waited} (measured stall, which wins)"
        if report.loader.num_workers == 0 and report.producer.probe == "main-process":
            text += ": with num_workers=0 production and the step take turns"
    elif diagnosis.verdict == COMPUTE_BOUND and not keeps_up_by_ratio:
        text += (f"; yet the loop waited for data only {fmt.percent(stall)} of the time "
                 "(measured stall, which wins)")
    return text


UNCERTAIN_WORDS = (f"uncertain: its 90% interval is over {UNCERTAIN_WIDTH:g}x wide; a short "
                   "'pipecheck stress' run, or wrap(tune=True) in the run, measures it")
"""What an expected rate says instead of its interval when that is too wide to bound anything
(:data:`~pipecheck.records.UNCERTAIN_WIDTH`)."""


def expected_rate_text(rec: "Recommendation") -> str:
    """The expected samples/s with its 90% interval beside it when the report gives one, e.g.
    ``1,200 samples/s (1,050-1,330)``, or with :data:`UNCERTAIN_WORDS` instead of an interval
    wider than :data:`~pipecheck.records.UNCERTAIN_WIDTH`; an interval narrow enough to print
    whose point the report still calls uncertain is followed by the report's reason
    (``Expected.uncertain_reason``: ``(1,050-1,330; uncertain: a worker's CPU ...)``)."""
    expected = rec.expected
    text = fmt.rate(expected.samples_per_s, "samples")
    low, high = expected.samples_per_s_low, expected.samples_per_s_high
    if expected.samples_per_s is not None and low is not None and high is not None:
        too_wide = interval_uncertain(low, high)
        uncertain = expected.uncertain if expected.uncertain is not None else too_wide
        reason = expected.uncertain_reason
        if too_wide:
            text += f" ({UNCERTAIN_WORDS})"
        elif uncertain and reason:
            text += f" ({low:,.0f}-{high:,.0f}; uncertain: {reason})"
        else:
            text += f" ({low:,.0f}-{high:,.0f})"
    return text


def interval_tag(rec: "Recommendation") -> str:
    """The short view's note on an expected rate: `` (to 1,200 samples/s, 90%: 1,050-1,330)``,
    or `` (uncertain: ...)`` (:data:`UNCERTAIN_WORDS`, first clause) where the interval is too
    wide to bound anything, or the interval with ``; uncertain: the worker's CPU is not pinned
    down`` where the report gives a reason (the full view prints it); ``""`` without a
    prediction or an interval."""
    expected = rec.expected
    low, high = expected.samples_per_s_low, expected.samples_per_s_high
    if expected.samples_per_s is None or low is None or high is None:
        return ""
    if interval_uncertain(low, high):
        return f" ({UNCERTAIN_WORDS.split(';')[0]})"
    tag = f" (to {fmt.rate(expected.samples_per_s, 'samples')}, 90%: {low:,.0f}-{high:,.0f}"
    if expected.uncertain and expected.uncertain_reason:
        return tag + "; uncertain: the worker's CPU is not pinned down)"
    return tag + ")"


def _signed_rate(value: float, unit: str) -> str:
    return f"{'+' if value >= 0 else ''}{fmt.rate(value, unit)}"


def _savings(per_epoch: Optional[float], per_10k_steps: Optional[float]) -> Optional[str]:
    """``1.20 s per epoch, 2 min 0 s per 10,000 steps`` (the parts known); ``None`` when
    neither is."""
    parts = []
    if per_epoch is not None:
        parts.append(f"{fmt.seconds(abs(per_epoch))} per epoch")
    if per_10k_steps is not None:
        parts.append(f"{fmt.seconds(abs(per_10k_steps))} per {STEPS_PER_SAVING:,} steps")
    return ", ".join(parts) if parts else None


SAME_RATE_FRACTION = 0.005
"""A change whose expected samples/s is within 0.5% of the measured rate keeps the same
throughput (its effect says so rather than ``+0 samples/s``)."""


def effect_line(rec: "Recommendation", effect: ChangeEffect) -> str:
    """A recommendation's effect in one line, each figure labelled: ``+154 samples/s this
    change; saves 4.70 s per epoch, 7 min 50 s per 10,000 steps``; a chain's later change adds
    ``, +194 samples/s with the changes above`` (its own figures are its share: the shares of
    a chain add up to its last total, :func:`pipecheck.effects.change_effects`); a stress
    report's figures are ``measured, every change together``. Savings per epoch and per 10,000 steps
    come from the same seconds saved per step. Without a prediction: ``effect not predicted``
    and why."""
    if rec.expected.samples_per_s is None:
        return rec.expected.note or "effect not predicted"
    if effect.scope == "together":
        gain, epoch, steps = (effect.total_gain_samples_per_s, effect.total_saved_s_per_epoch,
                              effect.total_saved_s_per_10k_steps)
        label = " measured, every change together"
    else:
        gain, epoch, steps = (effect.change_gain_samples_per_s, effect.change_saved_s_per_epoch,
                              effect.change_saved_s_per_10k_steps)
        label = " this change" if effect.scope == "chain" else ""
    rate = rec.expected.samples_per_s
    if effect.total_gain_samples_per_s is not None and \
            abs(effect.total_gain_samples_per_s) < SAME_RATE_FRACTION * rate:
        return "the same throughput"  # e.g. fewer workers: what it frees is in the reason
    parts = []
    if gain is not None:
        text = f"{_signed_rate(gain, 'samples')}{label}"
        if effect.after_others and effect.total_gain_samples_per_s is not None:
            text += (f", {_signed_rate(effect.total_gain_samples_per_s, 'samples')} with the "
                     "changes above")
        parts.append(text)
    saved = _savings(epoch, steps)
    if saved is not None:
        slower = (steps if steps is not None else epoch or 0.0) < 0
        parts.append(f"{'costs' if slower else 'saves'} {saved}")
    return "; ".join(parts) if parts else f"{fmt.rate(rec.expected.samples_per_s, 'samples')}"


def effect_text(rec: "Recommendation", effect: ChangeEffect) -> str:
    """The full effect (verbose, markdown, HTML): :func:`effect_line`, then tokens/s when
    counted and, for a chain's later change, the savings of every change up to it."""
    text = effect_line(rec, effect)
    expected = rec.expected
    if expected.samples_per_s is None:
        return text
    if expected.gain_tokens_per_s is not None:
        text += f" ({_signed_rate(expected.gain_tokens_per_s, 'tokens')} in all)"
    if effect.after_others:
        saved = _savings(effect.total_saved_s_per_epoch, effect.total_saved_s_per_10k_steps)
        if saved is not None:
            text += f" (together with the changes above: {saved} saved)"
    return text


SHORT_CHARS = 190
"""Longest short text (a finding's or a reason's first sentence) in the short view, in
characters: two lines of a 100-column terminal."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z'(])")


def first_sentence(text: str, limit: int = SHORT_CHARS) -> tuple[str, bool]:
    """The first sentence of ``text`` and whether anything was left out. A first sentence
    over ``limit`` characters is cut at its last ``;``, ``:`` or ``,`` outside brackets in its
    second half before the limit (else between words) and ends in ``...``."""
    parts = _SENTENCE_END.split(text.strip(), maxsplit=1)
    first = parts[0]
    cut = len(parts) > 1
    if len(first) > limit:
        stop = _last_clause_end(first[:limit])
        if stop <= limit // 2:  # no clause ends late enough: cut between words
            stop = first[:limit + 1].rfind(" ")
        first = (first[:stop] if stop > 0 else first[:limit]).rstrip() + " ..."
        cut = True
    return first, cut


def _last_clause_end(text: str) -> int:
    """Index of the last ``;``, ``:`` or ``,`` before a blank in ``text`` outside brackets;
    -1 when none."""
    depth, found = 0, -1
    for i, char in enumerate(text):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth = max(0, depth - 1)
        elif char in ";:," and depth == 0 and text[i + 1:i + 2] == " ":
            found = i
    return found


def recommendations_caption(report: "ReportData") -> str:
    """How to read the recommendations' figures: measured together (stress) or cumulative."""
    if report.kind == "stress":
        return ("Measured by the stress sweep: each figure is the recommended configuration's, "
                "every change together.")
    caption = ("Cumulative: each expected figure assumes the changes above it; each effect "
               "gives this change's own share, and the shares add up.")
    if any(r.expected.samples_per_s_low is not None for r in report.recommendations):
        below, above = SERIAL_TO_WORKERS_ERROR
        caption += (" In brackets: the 90% interval from this run's own noise (other processes'"
                    " load, batch-to-batch variation), widened by the model's own error"
                    f" (-{below:.0%} to +{above:.0%} from a num_workers=0 run, as measured on"
                    f" the calibration suite; +-{MODEL_ERROR_FRACTION:.0%} from one with"
                    " workers);"
                    f" \"uncertain\" where it is over {UNCERTAIN_WIDTH:g}x wide and bounds"
                    " nothing")
        if any(r.expected.uncertain_reason for r in report.recommendations):
            caption += (f", or where what the run cannot tell moves the point by over"
                        f" {UNSURE_POINT_ERROR:.0%} (the reason follows the interval)")
        caption += "."
    return caption


def why_no_recommendations(report: "ReportData") -> str:
    """The sentence shown instead of recommendations when there are none: the baseline was the
    fastest (stress), too little data, compute-bound, a contradicted capacity estimate, no
    capacity measured, or no change predicted to help."""
    consumer, diagnosis = report.consumer, report.diagnosis
    recommended = (report.stress.recommended
                   if report.kind == "stress" and report.stress is not None else None)
    if recommended is not None and report.stress is not None and (
            report.stress.budget_skipped_all_but_baseline()):
        return ("No recommendations: the budget held only the baseline "
                f"({config_text(recommended.baseline)}, "
                f"{fmt.rate(recommended.expected.samples_per_s, 'samples')}); no other "
                "configuration was tried. Raise --budget to compare configurations.")
    if recommended is not None:
        return ("No recommendations: the baseline was the fastest configuration measured "
                f"({config_text(recommended.baseline)}, "
                f"{fmt.rate(recommended.expected.samples_per_s, 'samples')}).")
    if report.kind == "attach":
        return ("No recommendations: attached without wrapping, the effect of a change cannot "
                "be predicted (no batch or per-worker times); `pipecheck run -- python "
                "train.py` measures them.")
    if diagnosis.verdict == NO_DATA or consumer.batches == 0:
        measured = fmt.count(consumer.batches, "batch", "batches")
        return f"No recommendations: insufficient data ({measured} measured); run more steps."
    if any(finding.kind == FindingKind.INSUFFICIENT_DATA for finding in diagnosis.findings):
        return (
            "No recommendations: the measurements are insufficient to predict the effect of a "
            "change (see Findings)."
        )
    if diagnosis.verdict == COMPUTE_BOUND:
        return (
            "No recommendations: the loop is compute-bound, so no loader change is predicted "
            "to help."
        )
    judgement = diagnosis.judgement
    if diagnosis.verdict == INPUT_BOUND and judgement is not None and judgement.capacity_note:
        return (
            "No recommendations: the measured stall says the loop is input-bound, but the "
            "what-if model is built on the capacity estimate "
            f"({judgement.capacity_demand_ratio:.2f}x the demand) that the stall contradicts "
            "(see Producer vs consumer), so it predicts no gain from any loader change; "
            "`pipecheck stress` measures the alternatives instead of predicting them."
        )
    if report.producer.capacity_batches_per_s is None:
        return (
            "No recommendations: producer capacity was not measured, so the effect of a change "
            "cannot be predicted."
        )
    contended = next((f for f in diagnosis.findings if f.kind == FindingKind.CONTENDED_HOST), None)
    if diagnosis.verdict == INPUT_BOUND and contended is not None:
        others = number(contended.evidence.get("other_processes_cpus"))
        cpus = contended.evidence.get("cpu_count")
        used = "" if others is None else f" (other processes used {others:.1f} of {cpus} CPUs)"
        return (
            "No recommendations: no change is predicted to help on the cores left to this "
            f"run{used}; with the host this busy, 'pipecheck stress FILE.py:make_loader "
            "--workers 0,1,2' (a function that builds your DataLoader) measures the "
            "alternatives instead of predicting them."
        )
    return "No recommendations: no change is predicted to help."


# -- verdict helpers -----------------------------------------------------------------------------


def _verdict_stall(report: "ReportData") -> tuple[Optional[float], bool]:
    """The stall fraction the verdict was judged on: the verdict finding's evidence when it names
    one (so the line agrees with the verdict), else the steady-state stall (the verdict's basis,
    see README), else the whole-run stall. Second item: whether it is the steady-state stall."""
    for finding in report.diagnosis.findings:
        if finding.kind != report.diagnosis.verdict:
            continue
        for key, steady in (("steady_stall_fraction", True), ("stall_fraction", False)):
            value = finding.evidence.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value), steady
    if report.consumer.steady_stall_fraction is not None:
        return report.consumer.steady_stall_fraction, True
    return report.consumer.stall_fraction, False


def _threshold_phrase(verdict: Verdict, thresholds: dict[str, float]) -> str:
    """`` (threshold 10%)`` for the key naming this verdict, else all thresholds, else nothing."""
    if not thresholds:
        return ""
    wanted = verdict.replace("-", "_")
    own = [value for key, value in thresholds.items() if wanted in key.replace("-", "_")]
    if len(own) == 1:
        return f" (threshold {_short_percent(own[0])})"
    listed = ", ".join(f"{_threshold_name(k)} {_short_percent(v)}" for k, v in thresholds.items())
    return f" (thresholds: {listed})"


def _threshold_name(key: str) -> str:
    for suffix in ("_stall_fraction", "_fraction"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
    return key.replace("_", " ")


def _short_percent(fraction: float) -> str:
    """``0.1 -> "10%"``, ``0.125 -> "12.5%"``: thresholds are round numbers, print them so."""
    as_percent = fraction * 100
    decimals = 0 if abs(as_percent - round(as_percent)) < 1e-9 else 1
    return f"{as_percent:.{decimals}f}%"


# -- a report compared with an earlier one (records.Comparison) ---------------------------------

FIGURE_LABELS = {"samples_per_s": "throughput", "tokens_per_s": "tokens",
                 "batches_per_s": "batches", "steady_step_s": "steady step",
                 "wait_per_batch_s": "data wait per batch", "stall_fraction": "data stall",
                 "goodput_fraction": "data goodput"}
"""A compared figure's label, by its name (:class:`pipecheck.records.ComparedFigure`)."""


def figure_value(name: str, value: Optional[float]) -> str:
    """A compared figure's value with its unit, by the figure's name."""
    if name.endswith("_fraction"):
        return fmt.percent(value)
    if name.endswith("_s") and not name.endswith("_per_s"):
        return fmt.seconds(value)
    unit = name[:-len("_per_s")] if name.endswith("_per_s") else ""
    return fmt.rate(value, unit) if unit else fmt.significant(value)


def figure_change(name: str, old: Optional[float], new: Optional[float]) -> str:
    """The change from ``old`` to ``new``: percentage points for a fraction (``-8.0 points``),
    else percent (``-20.3%``); ``n/a`` when either is missing or a relative change is
    undefined."""
    if old is None or new is None:
        return fmt.NOT_MEASURED
    if name.endswith("_fraction"):
        return f"{(new - old) * 100:+.1f} points"
    if old <= 0:
        return fmt.NOT_MEASURED
    return f"{(new / old - 1) * 100:+.1f}%"


def _figure(comparison: Any, name: str) -> Any:
    return next((f for f in comparison.figures if f.name == name), None)


def comparison_line(comparison: Any) -> str:
    """One sentence on a :class:`pipecheck.records.Comparison`: whether throughput rose or fell
    and by how much, the samples/s (and tokens/s) behind it, whether that is beyond the runs'
    own noise or cannot be told, and, where throughput fell while the data stall fell too, that
    the stall fell because the step slowed. Judged by samples/s alone, never by the stall."""
    if comparison.status != "compared":
        return (f"not compared with the earlier report {comparison.old_path}: "
                f"{comparison.note or 'no reason recorded'}")
    rates = _figure(comparison, "samples_per_s")
    old, new = (rates.old, rates.new) if rates is not None else (None, None)
    if comparison.verdict == "unknown" or old is None or new is None:
        which = "the earlier report" if old is None else "this report"
        return (f"THROUGHPUT CANNOT BE COMPARED with {comparison.old_path}: {which} measured "
                "no samples/s")
    numbers = f"{fmt.rate(old, 'samples')} -> {fmt.rate(new, 'samples')}"
    tokens = _figure(comparison, "tokens_per_s")
    if tokens is not None:
        numbers += f", {fmt.rate(tokens.old, 'tokens')} -> {fmt.rate(tokens.new, 'tokens')}"
    change = figure_change("samples_per_s", old, new)
    noise = comparison.noise_fraction
    if comparison.verdict == "no-measurable-change":
        if old == new:
            head = f"NO MEASURABLE CHANGE in throughput: {fmt.rate(new, 'samples')} in both runs"
        else:
            head = f"NO MEASURABLE CHANGE in throughput: {numbers} ({change})"
        if noise is not None:
            head += f", within the runs' own noise (+-{fmt.percent(noise)})"
        return head
    word = "ROSE" if comparison.verdict == "rose" else "FELL"
    size = fmt.percent(abs(new / old - 1)) if old > 0 else fmt.NOT_MEASURED
    head = f"THROUGHPUT {word} {size}: {numbers}"
    if comparison.beyond_noise:
        head += f", beyond the runs' own noise (+-{fmt.percent(noise)})"
    else:
        head += (", whether beyond the runs' own noise cannot be told (a run with fewer "
                 "than 20 steady batches in its timeline)")
    stall, step = _figure(comparison, "stall_fraction"), _figure(comparison, "steady_step_s")
    if word == "FELL" and stall is not None and stall.old is not None \
            and stall.new is not None and stall.new < stall.old:
        head += (f"; the data stall fell ({fmt.percent(stall.old)} -> "
                 f"{fmt.percent(stall.new)})")
        if step is not None and step.old is not None and step.new is not None \
                and step.new > step.old:
            head += (f" only because the step slowed ({fmt.seconds(step.old)} -> "
                     f"{fmt.seconds(step.new)} per batch)")
        head += ": not a gain"
    return head


MACHINE_NOTE = "the comparison may not hold"
DATA_NOTE = "perhaps not the same script or data; compare with care"


CHANGED_NAMED = 8
"""Differences named in one caveat (pipecheck finds at most a dozen); the rest are counted."""


def changed_text(changes: Any) -> str:
    """``cpu_count 16 -> 2, torch '2.5.0' -> '2.6.0'`` from :class:`pipecheck.records
    .ChangedValue` entries; beyond :data:`CHANGED_NAMED`, how many more."""
    text = ", ".join(f"{c.name} {fmt.setting_value(c.old)} -> {fmt.setting_value(c.new)}"
                     for c in itertools.islice(changes, CHANGED_NAMED))
    if len(changes) > CHANGED_NAMED:
        text += f" and {len(changes) - CHANGED_NAMED:,} more"
    return text


def comparison_notes(comparison: Any) -> list[str]:
    """The caveats of a comparison, one sentence each: the runs were on different machines or
    software; they differ in data, script or batch size; the report kinds differ."""
    notes = []
    if comparison.machine:
        notes.append(f"the runs were on different machines or software "
                     f"({changed_text(comparison.machine)}): {MACHINE_NOTE}")
    batch = next((c for c in comparison.settings if c.name == "batch_size"), None)
    data = list(comparison.data) + ([batch] if batch is not None else [])
    if data:
        notes.append(f"the runs differ in what they read ({changed_text(data)}): {DATA_NOTE}")
    return notes
