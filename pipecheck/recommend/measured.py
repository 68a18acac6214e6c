"""A stress report's recommendations: the measured recommended configuration's changes, one per
setting, instead of the what-if model's proposals from the best trial alone.

Each change from the baseline (``recommended.changes`` of the stress section) becomes a
:class:`~pipecheck.records.Recommendation` whose expected figures are the recommended
configuration's measured samples/s and stall (all changes together). Its reason quotes the
measured comparison that isolates that setting where the sweep has one: a measured trial equal
to the recommended configuration except for that setting. ``persistent_workers`` quotes the
epoch-start measurement (measured by :mod:`pipecheck.stress.epoch_start`).

The model's proposals from the best trial's record are kept only for settings the sweep did not
search (sharding changes, ``pin_memory`` and ``torch_num_threads`` when they were not
measured): for the searched ones the measurements have already answered, and a proposal beyond
the searched range would contradict a measured recommendation with a prediction.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from pipecheck.loader_settings import TORCH_DEFAULT_PREFETCH_FACTOR
from pipecheck.kinds import FindingKind
from pipecheck.records import Diagnosis, Expected, Finding, Recommendation
from pipecheck.report_sections import EpochStart, StressChoice, StressSection, SweepTrial
from pipecheck.units import percent, rate, seconds, setting_value

SEARCHED = ("num_workers", "prefetch_factor", "persistent_workers", "in_order", "batch_size")
"""Settings every stress run decides by measurement (``pin_memory`` too when a trial pinned,
``torch_num_threads`` when trials set it: ``stress --torch-threads``)."""


def stress_recommendations(section: StressSection,
                           proposals: Sequence[Recommendation]) -> list[Recommendation]:
    """The stress report's recommendations: one per change of ``section.recommended``
    (in the order of ``changes``), then the ``proposals`` (the model's, from the best trial's
    record) for settings the sweep did not search."""
    trials = [t for t in section.trials if t.measured and not t.error]
    searched = set(SEARCHED)
    if any(t.config.get("pin_memory") is True for t in trials):
        searched.add("pin_memory")
    if any(t.config.get("torch_num_threads") is not None for t in trials):
        searched.add("torch_num_threads")
    measured = _measured_changes(section, trials)
    return measured + [p for p in proposals if p.setting not in searched]


def stress_diagnosis(diagnosis: Diagnosis,
                     epoch_start: Optional[EpochStart] = None) -> Diagnosis:
    """``diagnosis`` with its ``insufficient-data`` finding restated for a stress report.

    That finding says why the what-if model made no proposal ("No recommendations: ..."); in a
    stress report the recommendations come from the sweep's measurements
    (:func:`stress_recommendations`) and the model only proposes the settings the sweep did not
    search, so the finding says that instead, and whether there are recommendations is told
    by the stress section alone.

    Where the sweep measured epoch start (``epoch_start``, status ``ok``) and found it not
    worth changing, a ``slow-first-batch`` warning is restated as information saying so: the
    report does not warn of what its own measurement cleared."""
    findings = [_restated(f) if f.kind == FindingKind.INSUFFICIENT_DATA else f
                for f in diagnosis.findings]
    if epoch_start is not None and epoch_start.status == "ok" and epoch_start.matters is False:
        findings = [_cleared_first_batch(f, epoch_start)
                    if f.kind == FindingKind.SLOW_FIRST_BATCH else f for f in findings]
    return dataclasses.replace(diagnosis, findings=findings)


def _cleared_first_batch(finding: Finding, epoch_start: EpochStart) -> Finding:
    share = ("" if epoch_start.fraction is None
             else f" (persistent_workers would save {percent(epoch_start.fraction)} of each "
                  "epoch)")
    return dataclasses.replace(finding, severity="info", message=(
        f"{finding.message.rstrip('.')}. The sweep measured the epoch start: not worth "
        f"changing{share}."))


def _restated(finding: Finding) -> Finding:
    gaps = "; ".join(str(g) for g in finding.evidence.get("gaps") or [])
    return dataclasses.replace(finding, message=(
        f"The what-if model could not be built from the recommended trial ({gaps}), so it "
        "proposes nothing for the settings the sweep did not search; the recommendations are "
        "the sweep's measurements."))


def _measured_changes(section: StressSection,
                      trials: list[SweepTrial]) -> list[Recommendation]:
    recommended = section.recommended
    if recommended is None or not recommended.changes:
        return []
    changes = recommended.changes
    config = recommended.config
    rate_s, stall = recommended.expected.samples_per_s, recommended.expected.stall_fraction
    # torch's default prefetch_factor is implied by going from 0 workers to some
    listed = [(setting, before, after) for setting, (before, after) in changes.items()
              if not (setting == "prefetch_factor" and before is None
                      and after == TORCH_DEFAULT_PREFETCH_FACTOR)]
    together = ("measured with every change listed, together" if len(listed) > 1
                else "measured")
    found = []
    for setting, before, after in listed:
        if setting == "persistent_workers":
            reason, note = _epoch_reason(section.epoch_start)
        else:
            reason, note = _rate_reason(setting, before, config, rate_s, trials, recommended), None
        found.append(Recommendation(
            setting=setting, current=before, proposed=after,
            expected=Expected(samples_per_s=rate_s, stall_fraction=stall,
                              note=f"{together}; {note}" if note else together),
            reason=reason))
    return found


def _rate_reason(setting: str, before: Any, config: dict[str, Any], rate_s: Optional[float],
                 trials: list[SweepTrial], recommended: StressChoice) -> str:
    """Why ``setting`` changes: the measured trial without this one change, else the baseline."""
    without = _without(trials, config, setting)
    if without is not None:
        value = without.config.get(setting)
        ratio = rate_s / without.samples_per_s if rate_s and without.samples_per_s else None
        worth = f", {ratio:.2f}x" if ratio is not None else ""
        other = rate(without.samples_per_s, "samples")
        return (f"Measured: {rate(rate_s, 'samples')} with {setting}="
                f"{setting_value(config.get(setting))} against {other} with {setting}="
                f"{setting_value(value)} and every other setting the same{worth}.")
    base = recommended.baseline_samples_per_s
    gain = recommended.gain
    detail = f" ({gain:.2f}x)" if isinstance(gain, (int, float)) else ""
    return (f"Measured as part of the recommended configuration: {rate(rate_s, 'samples')} "
            f"against {rate(base, 'samples')} for the baseline{detail}; no trial measured it "
            f"with only {setting} left at {setting_value(before)}.")


def _without(trials: list[SweepTrial], config: dict[str, Any],
             setting: str) -> Optional[SweepTrial]:
    """The best measured trial whose configuration equals ``config`` except for ``setting``
    (``persistent_workers`` ignored: trials differ in it only through the epoch-start pair;
    ``prefetch_factor`` too where one side has no workers, since it has none there)."""
    ignored = {setting, "persistent_workers"}

    def key(other: dict[str, Any]) -> dict[str, Any]:
        skip = ignored | ({"prefetch_factor"} if setting == "num_workers" else set())
        return {k: v for k, v in other.items() if k not in skip}

    def comparable(other: dict[str, Any]) -> bool:
        if key(other) != key(config):
            return False
        if setting != "num_workers" or 0 in (other.get("num_workers"), config.get("num_workers")):
            return True
        return other.get("prefetch_factor") == config.get("prefetch_factor")

    matches = [t for t in trials if comparable(t.config)
               and t.config.get(setting) != config.get(setting)
               and t.samples_per_s]
    return max(matches, key=lambda t: t.samples_per_s or 0.0) if matches else None


def _epoch_reason(entry: Optional[EpochStart]) -> tuple[str, Optional[str]]:
    """Reason and note for ``persistent_workers`` from the epoch-start entry."""
    restart = entry.restart_s if entry is not None else None
    saving = entry.saving_s if entry is not None else None
    reason = (f"Measured on shortened epochs: without persistent workers each later epoch takes "
              f"{seconds(saving)} longer (its first batch waits "
              f"{seconds(restart.not_persistent if restart else None)} for new workers against "
              f"{seconds(restart.persistent if restart else None)}, plus the old workers' "
              f"shutdown), {percent(entry.fraction if entry else None)} of a "
              f"{seconds(entry.epoch_s if entry else None)} epoch.")
    return reason, f"saves {seconds(saving)} per epoch after the first"
