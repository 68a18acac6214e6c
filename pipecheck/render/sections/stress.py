"""The "Stress sweep" section: the trials (one column per setting that varies, throughput,
stall, measured or predicted) and the sweep's choices: skipped configurations, how the search
ran, the best and recommended configurations, the gain over the baseline, the profiling trial,
the epoch-start check and the settings that change.

Input is the report's typed ``stress`` section (:class:`~pipecheck.report_sections.StressSection`,
:meth:`pipecheck.stress.runner.Sweep.section`); unmeasured values show as
:data:`pipecheck.units.NOT_MEASURED`.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Optional

from pipecheck import units as fmt
from pipecheck.render.model import Block, Chart, Note, Section, capped, line, more, table
from pipecheck.render.phrases import config_text
from pipecheck.report_sections import EpochStart, StressSection, StressStep, SweepTrial

if TYPE_CHECKING:
    from pipecheck.report_data import ReportData

PREDICTED_ROWS = 5
"""Unmeasured (predicted-only) configurations shown in the trial table, highest predicted
throughput first; the JSON report lists them all."""

MEASURED_ROWS = 200
"""Measured trials shown in the trial table, in run order (the largest default grid, 0 to 32
workers with two prefetch factors and both orders, measures 127)."""

FAILED_LINES = 20
"""Failed trials listed with their error, in run order."""

SKIP_REASONS = 20
"""Reasons for skipped configurations listed."""

SETTING_COLUMNS = 8
"""Most settings given a column of their own; beyond it (a hand-made report) one ``config``
column holds each trial's settings."""


def stress(report: "ReportData") -> Optional[Section]:
    """The section when the report has a stress sweep, else ``None``."""
    if report.stress is None:
        return None
    return Section("stress", "Stress sweep", tuple(stress_blocks(report.stress)))


def stress_blocks(stress: StressSection) -> list[Block]:
    """The section's blocks for a ``stress`` section."""
    trials = stress.trials
    blocks: list[Block] = [Chart(
        "stress", "Throughput per configuration: filled markers were measured, hollow ones are "
        "the model's predictions (before a trial ran, or for candidates not measured).",
        "No trial measured or predicted a throughput.")]
    configs = [t.config for t in trials]
    varying = _varying_keys(configs)
    constant = {k: v for k, v in (configs[0] if configs else {}).items()
                if k not in varying and v is not None}
    if constant and len(trials) > 1:
        blocks.append(line(("every trial:", config_text(constant))))
    measured, hidden_measured = capped([t for t in trials if t.measured], MEASURED_ROWS)
    # Unmeasured candidates the model gave no figure for (the budget ran out first) stay in
    # the JSON: a row of n/a would say nothing.
    predicted_only = sorted((t for t in trials if not t.measured
                             and t.samples_per_s is not None),
                            key=lambda t: -(t.samples_per_s or 0.0))
    shown = measured + predicted_only[:PREDICTED_ROWS]
    if shown:
        blocks.append(_trial_table(shown, configs, varying))
        blocks.append(Note("rates over steady batches: each epoch's first batch (worker "
                           "start-up) left out", "dim"))
    if hidden_measured:
        blocks.append(more(hidden_measured, "measured configurations"))
    hidden = len(predicted_only) - PREDICTED_ROWS
    if hidden > 0:
        blocks.append(Note(f"{hidden} more predicted, unmeasured configurations are listed in "
                           f"the JSON report", "dim"))
    failed, hidden_failed = capped([t for t in trials if t.error], FAILED_LINES)
    for trial in failed:
        blocks.append(line(("failed:", f"{config_text(trial.config)}: {trial.error}")))
    if hidden_failed:
        blocks.append(more(hidden_failed, "failed trials"))
    blocks += [line(pair) for pair in summary_facts(stress)]
    return blocks if len(blocks) > 1 else [Note("no trials recorded", "dim")]


def _trial_table(shown: list[SweepTrial], configs: list[dict[str, Any]],
                 varying: set[str]) -> Block:
    # The "predicted" column (the search model's samples/s before a measured trial ran)
    # appears only when some measured trial has one, so grid tables keep their shape.
    show_predicted = any(t.measured and t.predicted_samples_per_s is not None for t in shown)
    # One column per varying setting, in the config's own key order.
    columns = [k for k in (configs[0] if configs else {}) if k in varying]
    columns += sorted(varying - set(columns))
    if not columns or len(columns) > SETTING_COLUMNS:
        columns = ["config"]
    headers = ["samples/s", "batches/s", "stall", "source"]
    if show_predicted:
        headers.insert(1, "predicted samples/s")
    rows = []
    for trial in shown:
        config = trial.config
        if columns == ["config"]:
            cells = [config_text(config)]
        else:
            cells = ["-" if config.get(k) is None else fmt.setting_value(config.get(k))
                     for k in columns]
        # Units sit in the headers ("samples/s"), so rows stay one line on a narrow terminal.
        row = cells + [fmt.significant(trial.samples_per_s),
                       fmt.significant(trial.batches_per_s),
                       fmt.percent(trial.stall_fraction), _source(trial)]
        if show_predicted:
            predicted = trial.predicted_samples_per_s
            row.insert(len(cells) + 1, fmt.significant(predicted)
                       if trial.measured and predicted is not None else "")
        rows.append(row)
    return table(columns + headers, rows, right=range(len(columns) + len(headers)))


def _source(trial: SweepTrial) -> str:
    if trial.error:
        return "failed"
    return "measured" if trial.measured else "predicted"


def _varying_keys(configs: list[dict[str, Any]]) -> set[str]:
    """Settings whose value differs between ``configs`` (a setting missing counts as None);
    every setting when there are more than :data:`SETTING_COLUMNS` times 4 (a hand-made
    report: comparing each would cost settings x trials)."""
    keys: set[str] = set()
    for config in configs:
        keys.update(config)
        if len(keys) > 4 * SETTING_COLUMNS:
            return keys
    return {k for k in keys if len({repr(c.get(k)) for c in configs}) > 1}


def summary_facts(stress: StressSection) -> list[tuple[str, str]]:
    """``(label, text)`` pairs: skipped configurations grouped by reason, how the search ran,
    the best and recommended configurations, the expected gain over the baseline, the
    profiling trial, the epoch-start check and the settings that change."""
    facts: list[tuple[str, str]] = []
    skipped: dict[str, list[Any]] = {}
    for entry in stress.skipped:
        skipped.setdefault(entry.reason or "budget spent", []).append(entry.config)
    reasons, hidden = capped(list(skipped.items()), SKIP_REASONS)
    for reason, listed in reasons:
        text = "; ".join(map(config_text, listed)) if len(listed) <= PREDICTED_ROWS else \
            f"{len(listed)} configurations (listed in the JSON report)"
        facts.append((f"skipped ({reason}):", text))
    if hidden:
        facts.append(("skipped:", f"for {hidden:,} more reasons (see the JSON)"))
    step = step_text(stress.step)
    if step is not None:
        facts.append(("training step:", step))
    search = stress.search
    if search is not None:
        facts.append(("model-guided search:", f"measured {search.measured} of "
                      f"{search.candidates} configurations; stopped: "
                      f"{search.stop_reason}"))
    if stress.best is not None:
        facts.append(("best:", config_text(stress.best.config)))
    recommended = stress.recommended
    if recommended is not None:
        facts.append(("recommended:", config_text(recommended.config) + tie_note(stress)))
    gain = recommended.gain if recommended is not None else None
    if recommended is not None and gain is not None:
        base = fmt.rate(recommended.baseline_samples_per_s, "samples")
        best = fmt.rate(recommended.expected.samples_per_s, "samples")
        facts.append(("expected gain over the baseline:", f"{gain:.2f}x ({base} -> {best}, "
                      f"baseline {config_text(recommended.baseline)})"))
    profile = stress.profile
    if profile is not None and profile.status in ("ok", "failed", "skipped"):
        facts.append(("profiling trial:",
                      "one extra trial of the best configuration sampled hot stacks (see Hot "
                      "stacks)" if profile.status == "ok"
                      else f"{profile.status}: {profile.reason}"))
    epoch = epoch_start_text(stress.epoch_start)
    if epoch is not None:
        facts.append(("epoch start:", epoch))
    changes = recommended.changes if recommended is not None else {}
    if changes:
        listed = [f"{name} {fmt.setting_value(pair[0])} -> {fmt.setting_value(pair[1])}"
                  for name, pair in itertools.islice(changes.items(), SETTING_COLUMNS)
                  if isinstance(pair, list) and len(pair) == 2]
        if len(changes) > SETTING_COLUMNS:
            listed.append(f"and {len(changes) - SETTING_COLUMNS:,} more (see the JSON)")
        facts.append(("change:", ", ".join(listed)))
        if (changes.get("in_order") or [None, None])[1] is False:
            facts.append(("note:", "in_order=False delivers batches as workers finish them, "
                                   "not in sampler order"))
    return facts


def step_text(step: Optional[StressStep]) -> Optional[str]:
    """One line for the stress section's ``step`` entry (what each trial ran after every
    batch); ``None`` when absent (reports before it)."""
    if step is None:
        return None
    if step.kind == "function":
        return f"your function {step.function}"
    if step.kind != "emulated" or not step.mean_s:
        return "none: the loader alone, each batch taken as soon as it is delivered"
    jitter = f" +- {fmt.seconds(step.jitter_s)}" if step.jitter_s else ""
    share = step.cpu_share or 0.0
    how = ("asleep (a GPU step's wait)" if share <= 0 else "busy on the CPU" if share >= 1
           else f"{fmt.percent(share)} busy on the CPU, the rest asleep")
    return f"emulated, {fmt.seconds(step.mean_s)}{jitter}, {how}"


def epoch_start_text(entry: Optional[EpochStart]) -> Optional[str]:
    """One line for the stress section's ``epoch_start`` entry (restart with and without
    ``persistent_workers``, the saving per epoch and the verdict); ``None`` when absent."""
    if entry is None or not entry.status:
        return None
    if entry.status != "ok":
        return f"{entry.status}: {entry.reason}"
    restart = entry.restart_s
    saving = entry.saving_s
    longer = (f"takes {fmt.seconds(saving)} longer" if isinstance(saving, (int, float))
              and saving > 0 else "takes no longer")
    text = (f"without persistent_workers each later epoch {longer}: its first batch waits "
            f"{fmt.seconds(restart.not_persistent if restart else None)} for new workers (vs "
            f"{fmt.seconds(restart.persistent if restart else None)}), plus the old ones' "
            "shutdown")
    if entry.fraction is None:
        text += ("; the epoch's length is unknown (the loader has no len()), so weigh that "
                 "against your epoch")
    else:
        verdict = ("persistent_workers=True recommended" if entry.matters
                   else "not worth changing")
        text += (f"; {fmt.percent(entry.fraction)} of each epoch (a full one takes "
                 f"{fmt.seconds(entry.epoch_s)} at the best rate): {verdict}")
    if entry.method == "cut":
        text += (" (epochs cut mid-way: the shutdown is not counted and the persistent restart "
                 "drains prefetched batches, so the saving is a lower bound)")
    return text


def tie_note(stress: StressSection) -> str:
    """`` (within 3.0% of the best: ...)`` when the recommended configuration is a cheaper tie
    with the best rather than the best itself (:mod:`pipecheck.stress.choice`); else ``""``."""
    best, recommended = stress.best, stress.recommended
    tolerance = recommended.tolerance_fraction if recommended is not None else None
    if recommended is None or tolerance is None or best is None or not best.config \
            or _same_trial(best.config, recommended.config):
        return ""
    return (f" (within {fmt.percent(tolerance)} of the best, a tie: ties go to in-order "
            f"delivery, fewer workers, a smaller prefetch_factor)")


def _same_trial(best: dict[str, Any], recommended: dict[str, Any]) -> bool:
    """Whether the recommended configuration is the best one, ``persistent_workers`` aside
    (the epoch-start check may add it)."""

    def settings(config: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in config.items() if k != "persistent_workers"}

    return settings(best) == settings(recommended)
