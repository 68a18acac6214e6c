"""The "Stress sweep" section: the trials (one column per setting that varies, throughput,
stall, measured or predicted) and the sweep's choices: skipped configurations, how the search
ran, the best and recommended configurations, the gain over the baseline, the profiling trial,
the epoch-start check and the settings that change.

Input is the report's ``stress`` dict (``trials``, ``best``, ``recommended``, ``skipped``,
``search``; see :meth:`pipecheck.stress.runner.Sweep.section`). Missing or malformed entries are
skipped or shown as :data:`pipecheck.units.NOT_MEASURED`, never raise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from pipecheck import units as fmt
from pipecheck.render.model import Block, Chart, Note, Section, line, table
from pipecheck.render.phrases import config_text, number

if TYPE_CHECKING:
    from pipecheck.report import Report

PREDICTED_ROWS = 5
"""Unmeasured (predicted-only) configurations shown in the trial table, highest predicted
throughput first; the JSON report lists them all."""


def stress(report: "Report") -> Optional[Section]:
    """The section when the report has a stress sweep, else ``None``."""
    if not report.stress:
        return None
    return Section("stress", "Stress sweep", tuple(stress_blocks(report.stress)))


def stress_blocks(stress: dict[str, Any]) -> list[Block]:
    """The section's blocks for a ``stress`` dict."""
    trials = [t for t in stress.get("trials") or [] if isinstance(t, dict)]
    blocks: list[Block] = [Chart(
        "stress", "Throughput per configuration: filled markers were measured, hollow ones are "
        "the model's predictions (before a trial ran, or for candidates not measured).",
        "No trial measured or predicted a throughput.")]
    configs = [t["config"] for t in trials if isinstance(t.get("config"), dict)]
    varying = _varying_keys(configs)
    constant = {k: v for k, v in (configs[0] if configs else {}).items()
                if k not in varying and v is not None}
    if constant and len(trials) > 1:
        blocks.append(line(("every trial:", config_text(constant))))
    measured = [t for t in trials if t.get("measured")]
    # Unmeasured candidates the model gave no figure for (the budget ran out first) stay in
    # the JSON: a row of n/a would say nothing.
    predicted_only = sorted((t for t in trials if not t.get("measured")
                             and number(t.get("samples_per_s")) is not None),
                            key=lambda t: -(number(t.get("samples_per_s")) or 0.0))
    shown = measured + predicted_only[:PREDICTED_ROWS]
    if shown:
        blocks.append(_trial_table(shown, configs, varying))
        blocks.append(Note("rates over steady batches: each epoch's first batch (worker "
                           "start-up) left out", "dim"))
    hidden = len(predicted_only) - PREDICTED_ROWS
    if hidden > 0:
        blocks.append(Note(f"{hidden} more predicted, unmeasured configurations are listed in "
                           f"the JSON report", "dim"))
    for trial in trials:
        if trial.get("error"):
            error = " ".join(str(trial["error"]).split())
            blocks.append(line(("failed:", f"{config_text(trial.get('config'))}: {error}")))
    blocks += [line(pair) for pair in summary_facts(stress)]
    return blocks if len(blocks) > 1 else [Note("no trials recorded", "dim")]


def _trial_table(shown: list[dict[str, Any]], configs: list[dict[str, Any]],
                 varying: set[str]) -> Block:
    # The "predicted" column (the search model's samples/s before a measured trial ran)
    # appears only when some measured trial has one, so grid tables keep their shape.
    show_predicted = any(t.get("measured") and number(t.get("predicted_samples_per_s"))
                         is not None for t in shown)
    # One column per varying setting, in the config's own key order.
    columns = [k for k in (configs[0] if configs else {}) if k in varying]
    columns += sorted(varying - set(columns))
    if not columns:
        columns = ["config"]
    headers = ["samples/s", "batches/s", "stall", "source"]
    if show_predicted:
        headers.insert(1, "predicted samples/s")
    rows = []
    for trial in shown:
        config = trial.get("config")
        if columns == ["config"]:
            cells = [config_text(config)]
        else:
            config = config if isinstance(config, dict) else {}
            cells = ["-" if config.get(k) is None else fmt.setting_value(config.get(k))
                     for k in columns]
        # Units sit in the headers ("samples/s"), so rows stay one line on a narrow terminal.
        row = cells + [fmt.significant(number(trial.get("samples_per_s"))),
                       fmt.significant(number(trial.get("batches_per_s"))),
                       fmt.percent(number(trial.get("stall_fraction"))), _source(trial)]
        if show_predicted:
            predicted = number(trial.get("predicted_samples_per_s"))
            row.insert(len(cells) + 1, fmt.significant(predicted)
                       if trial.get("measured") and predicted is not None else "")
        rows.append(row)
    return table(columns + headers, rows, right=range(len(columns) + len(headers)))


def _source(trial: dict[str, Any]) -> str:
    if trial.get("error"):
        return "failed"
    return "measured" if trial.get("measured") else "predicted"


def _varying_keys(configs: list[dict[str, Any]]) -> set[str]:
    """Settings whose value differs between ``configs`` (a setting missing counts as None)."""
    keys = {k for c in configs for k in c}
    return {k for k in keys if len({repr(c.get(k)) for c in configs}) > 1}


def summary_facts(stress: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, text)`` pairs: skipped configurations grouped by reason, how the search ran,
    the best and recommended configurations, the expected gain over the baseline, the
    profiling trial, the epoch-start check and the settings that change."""
    facts: list[tuple[str, str]] = []
    skipped: dict[str, list[str]] = {}
    for entry in stress.get("skipped") or []:
        if isinstance(entry, dict) and "config" in entry:
            reason, config = str(entry.get("reason") or "budget spent"), entry.get("config")
        else:  # older reports list bare configurations skipped for lack of budget
            reason, config = "budget spent", entry
        skipped.setdefault(reason, []).append(config_text(config))
    for reason, listed in skipped.items():
        text = "; ".join(listed) if len(listed) <= PREDICTED_ROWS else \
            f"{len(listed)} configurations (listed in the JSON report)"
        facts.append((f"skipped ({reason}):", text))
    search = stress.get("search")
    if isinstance(search, dict) and search:
        facts.append(("model-guided search:", f"measured {search.get('measured')} of "
                      f"{search.get('candidates')} configurations; stopped: "
                      f"{search.get('stop_reason')}"))
    for key in ("best", "recommended"):
        choice = stress.get(key)
        if isinstance(choice, dict) and choice:
            text = config_text(choice.get("config", choice))
            facts.append((f"{key}:", text + (tie_note(stress) if key == "recommended" else "")))
    recommended = stress["recommended"] if isinstance(stress.get("recommended"), dict) else {}
    gain = number(recommended.get("gain"))
    if gain is not None:
        expected = recommended["expected"] if isinstance(recommended.get("expected"),
                                                         dict) else {}
        base = fmt.rate(number(recommended.get("baseline_samples_per_s")), "samples")
        best = fmt.rate(number(expected.get("samples_per_s")), "samples")
        facts.append(("expected gain over the baseline:", f"{gain:.2f}x ({base} -> {best}, "
                      f"baseline {config_text(recommended.get('baseline'))})"))
    profile = stress.get("profile")
    if isinstance(profile, dict) and profile.get("status") in ("ok", "failed", "skipped"):
        facts.append(("profiling trial:",
                      "one extra trial of the best configuration sampled hot stacks (see Hot "
                      "stacks)" if profile["status"] == "ok"
                      else f"{profile['status']}: {profile.get('reason')}"))
    epoch = epoch_start_text(stress.get("epoch_start"))
    if epoch is not None:
        facts.append(("epoch start:", epoch))
    changes = recommended.get("changes")
    if isinstance(changes, dict) and changes:
        facts.append(("change:", ", ".join(
            f"{name} {fmt.setting_value(pair[0])} -> {fmt.setting_value(pair[1])}"
            for name, pair in changes.items() if isinstance(pair, list) and len(pair) == 2)))
        if (changes.get("in_order") or [None, None])[1] is False:
            facts.append(("note:", "in_order=False delivers batches as workers finish them, "
                                   "not in sampler order"))
    return facts


def epoch_start_text(entry: Any) -> Optional[str]:
    """One line for the stress section's ``epoch_start`` entry (restart with and without
    ``persistent_workers``, the saving per epoch and the verdict); ``None`` when absent."""
    if not isinstance(entry, dict) or not entry.get("status"):
        return None
    if entry["status"] != "ok":
        return f"{entry['status']}: {entry.get('reason')}"
    restart = entry["restart_s"] if isinstance(entry.get("restart_s"), dict) else {}
    saving = entry.get("saving_s")
    longer = (f"takes {fmt.seconds(saving)} longer" if isinstance(saving, (int, float))
              and saving > 0 else "takes no longer")
    text = (f"without persistent_workers each later epoch {longer}: its first batch waits "
            f"{fmt.seconds(restart.get('not_persistent'))} for new workers (vs "
            f"{fmt.seconds(restart.get('persistent'))}), plus the old ones' shutdown")
    if entry.get("fraction") is None:
        text += ("; the epoch's length is unknown (the loader has no len()), so weigh that "
                 "against your epoch")
    else:
        verdict = ("persistent_workers=True recommended" if entry.get("matters")
                   else "not worth changing")
        text += (f"; {fmt.percent(entry['fraction'])} of each epoch (a full one takes "
                 f"{fmt.seconds(entry.get('epoch_s'))} at the best rate): {verdict}")
    if entry.get("method") == "cut":
        text += (" (epochs cut mid-way: the shutdown is not counted and the persistent restart "
                 "drains prefetched batches, so the saving is a lower bound)")
    return text


def tie_note(stress: dict[str, Any]) -> str:
    """`` (within 3.0% of the best: ...)`` when the recommended configuration is a cheaper tie
    with the best rather than the best itself (:mod:`pipecheck.stress.choice`); else ``""``."""
    best = stress["best"] if isinstance(stress.get("best"), dict) else {}
    recommended = stress["recommended"] if isinstance(stress.get("recommended"),
                                                      dict) else {}
    tolerance = recommended.get("tolerance_fraction")
    if not isinstance(tolerance, (int, float)) or not best.get("config") \
            or _same_trial(best.get("config"), recommended.get("config")):
        return ""
    return (f" (within {fmt.percent(tolerance)} of the best, a tie: ties go to in-order "
            f"delivery, fewer workers, a smaller prefetch_factor)")


def _same_trial(best: Any, recommended: Any) -> bool:
    """Whether the recommended configuration is the best one, ``persistent_workers`` aside
    (the epoch-start check may add it)."""
    if not isinstance(best, dict) or not isinstance(recommended, dict):
        return False

    def settings(config: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in config.items() if k != "persistent_workers"}

    return settings(best) == settings(recommended)
