"""The stress section of a report as formatted rows and facts, shared by the HTML and markdown
renderers (the terminal renderer keeps its own rich layout).

Input is the report's ``stress`` dict (``trials``, ``best``, ``recommended``, ``skipped``,
``search``; see :meth:`pipecheck.stress.runner.Sweep.section`). Values come back as plain,
unescaped text with units; the caller escapes them for its format. Missing or malformed entries
are skipped or shown as :data:`pipecheck.units.NOT_MEASURED`, never raise.
"""

from __future__ import annotations

from typing import Any, Optional

from pipecheck import units as fmt
from pipecheck.render.generic import format_value

TRIAL_HEADERS = ["config", "samples/s", "predicted before measuring", "batches/s", "stall",
                 "source", "error"]
"""Column headers of :func:`trial_rows`."""


def config_text(config: Any) -> str:
    """``{"num_workers": 2, "pin_memory": True}`` -> ``"num_workers=2 pin_memory=True"``."""
    if isinstance(config, dict):
        return " ".join(f"{k}={fmt.setting_value(v)}" for k, v in config.items())
    return fmt.NOT_MEASURED if config is None else str(config)


def trial_rows(stress: dict[str, Any]) -> list[list[str]]:
    """One row per trial, columns as :data:`TRIAL_HEADERS`. "predicted before measuring" is
    filled only for measured trials the search predicted; unmeasured candidates show their
    predicted figures in the rate columns, with source ``predicted``."""
    rows = []
    for trial in stress.get("trials") or []:
        if not isinstance(trial, dict):
            continue
        measured = bool(trial.get("measured"))
        predicted = trial.get("predicted_samples_per_s") if measured else None
        source = "failed" if trial.get("error") else ("measured" if measured else "predicted")
        rows.append([
            config_text(trial.get("config")),
            format_value("samples_per_s", trial.get("samples_per_s")),
            format_value("samples_per_s", predicted) if predicted is not None else "",
            format_value("batches_per_s", trial.get("batches_per_s")),
            format_value("stall_fraction", trial.get("stall_fraction")),
            source,
            " ".join(str(trial.get("error") or "").split()),
        ])
    return rows


def trial_table(stress: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """:data:`TRIAL_HEADERS` and :func:`trial_rows` without the columns that are empty in every
    row (no prediction in a grid sweep, no error when nothing failed)."""
    rows = trial_rows(stress)
    keep = [i for i, _ in enumerate(TRIAL_HEADERS) if i == 0 or any(row[i] for row in rows)]
    return [TRIAL_HEADERS[i] for i in keep], [[row[i] for i in keep] for row in rows]


def summary_facts(stress: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, text)`` pairs: skipped configurations grouped by reason, how the search ran,
    the best and recommended configurations, the expected gain over the baseline and the
    settings that change."""
    facts: list[tuple[str, str]] = []
    skipped: dict[str, list[str]] = {}
    for entry in stress.get("skipped") or []:
        if isinstance(entry, dict) and "config" in entry:
            reason, config = str(entry.get("reason") or "budget spent"), entry.get("config")
        else:  # older reports list bare configurations skipped for lack of budget
            reason, config = "budget spent", entry
        skipped.setdefault(reason, []).append(config_text(config))
    for reason, configs in skipped.items():
        facts.append((f"skipped ({reason}):", "; ".join(configs)))
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
    gain = recommended.get("gain")
    if isinstance(gain, (int, float)) and not isinstance(gain, bool):
        expected = recommended["expected"] if isinstance(recommended.get("expected"),
                                                         dict) else {}
        detail = ""
        if "baseline_samples_per_s" in recommended:
            base = format_value("samples_per_s", recommended.get("baseline_samples_per_s"))
            best = format_value("samples_per_s", expected.get("samples_per_s"))
            detail = f" ({base} -> {best}, baseline {config_text(recommended.get('baseline'))})"
        facts.append(("expected gain over the baseline:", f"{gain:.2f}x{detail}"))
    epoch = epoch_start_text(stress.get("epoch_start"))
    if epoch is not None:
        facts.append(("epoch start:", epoch))
    changes = recommended.get("changes")
    if isinstance(changes, dict) and changes:
        facts.append(("change:", ", ".join(
            f"{name} {fmt.setting_value(pair[0])} -> {fmt.setting_value(pair[1])}"
            for name, pair in changes.items() if isinstance(pair, list) and len(pair) == 2)))
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
