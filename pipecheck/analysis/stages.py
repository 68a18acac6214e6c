"""Where time goes inside the pipeline: exclusive time per stage from the per-process totals of
:mod:`pipecheck.probes.stages`.

For a pipeline stage, exclusive time = its inclusive time minus its upstream stage's inclusive
time in the same process (the upstream's ``next()`` runs inside its own), never below 0; items
in = the upstream's items out. A user stage (``pipecheck.stage``) is exclusive already. Stages
are summed over the processes that ran them (``workers`` or ``main``); ``fraction`` is a
stage's share of the exclusive time of all stages in the same place, so "62 % of worker time is
in decode" reads directly.
"""

from __future__ import annotations

from typing import Any, Optional

from pipecheck.kinds import FindingKind, StagePlace
from pipecheck.records import ConsumerSummary, Finding, ProducerSummary, StageRow


def stage_table(snapshots: list[dict[str, Any]]) -> list[StageRow]:
    """One :class:`~pipecheck.records.StageRow` per stage and place, largest exclusive time
    first; ``bytes_read`` is the size of the local shard files an opener stage opened (0 for
    other stages). ``snapshots`` are
    :meth:`pipecheck.probes.stages.StageTotals.snapshot` dicts; ``worker_id`` ``None`` marks
    the main process. ``samples_in`` is ``None`` for a source or user stage; ``workers`` maps
    worker id (``"main"`` for the main process) to that process's exclusive seconds. Empty
    when no stage ran."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for snapshot in snapshots:
        where: StagePlace = "main" if snapshot.get("worker_id") is None else "workers"
        process = "main" if where == "main" else str(snapshot["worker_id"])
        stages = {s["key"]: s for s in snapshot.get("stages", [])}
        for key, entry in stages.items():
            upstream = stages.get(entry.get("upstream") or "")
            if key.startswith("user:"):
                exclusive_ns = entry["exclusive_ns"]
            else:
                exclusive_ns = entry["inclusive_ns"] - (upstream["inclusive_ns"] if upstream else 0)
            row = rows.setdefault((where, key), {
                "name": entry["name"], "where": where, "exclusive_s": 0.0, "fraction": None,
                "samples_in": None if upstream is None else 0, "samples_out": 0,
                "bytes_read": 0, "workers": {}})
            seconds = max(exclusive_ns, 0) / 1e9
            row["exclusive_s"] += seconds
            row["workers"][process] = row["workers"].get(process, 0.0) + seconds
            row["samples_out"] += entry["items"]
            row["bytes_read"] += entry.get("bytes", 0)
            if upstream is not None:
                row["samples_in"] = (row["samples_in"] or 0) + upstream["items"]
    totals: dict[str, float] = {}
    for row in rows.values():
        totals[row["where"]] = totals.get(row["where"], 0.0) + row["exclusive_s"]
    for row in rows.values():
        total = totals[row["where"]]
        row["fraction"] = row["exclusive_s"] / total if total > 0 else None
    return [StageRow(**row) for row in sorted(rows.values(), key=lambda r: -r["exclusive_s"])]


def top_stage(rows: list[StageRow], where: StagePlace = "workers") -> Optional[StageRow]:
    """The stage with the most exclusive time in ``where`` (``workers`` or ``main``) of
    ``rows`` (largest first, as :func:`stage_table` gives them)."""
    return next((r for r in rows if r.where == where), None)


DOMINANT_STAGE_FRACTION = 0.5
"""Share of the workers' stage time (0-1) from which one stage is named as where the time goes
(pipecheck's choice: at half or more, speeding up that stage is the first lever)."""


def pipeline_findings(producer: ProducerSummary, consumer: ConsumerSummary
                      ) -> list[Finding]:
    """``dominant-stage`` (one worker stage holds :data:`DOMINANT_STAGE_FRACTION` or more of
    the stage time) and ``head-of-line-blocking`` (:mod:`pipecheck.analysis.hol`)."""
    from pipecheck.analysis.hol import head_of_line_finding

    findings = []
    top = top_stage(producer.stages, "workers") or top_stage(producer.stages, "main")
    if top is not None and top.fraction is not None \
            and top.fraction >= DOMINANT_STAGE_FRACTION:
        place = "worker" if top.where == "workers" else "main-process"
        per_item = top.exclusive_s / top.samples_out if top.samples_out else None
        findings.append(Finding(
            FindingKind.DOMINANT_STAGE, "info",
            f"{top.fraction:.0%} of {place} pipeline time is in the {top.name} stage "
            f"({top.exclusive_s:.2f} s exclusive"
            + (f", {per_item * 1e3:.2f} ms per item" if per_item is not None else "") + ")",
            {"stage": top.name, "where": top.where, "exclusive_s": top.exclusive_s,
             "fraction": top.fraction, "exclusive_s_per_item": per_item}))
    batch_s = {str(w.id): w.busy_s / w.batches for w in producer.workers if w.batches}
    hol = head_of_line_finding(producer.head_of_line, consumer.wait_s + consumer.compute_s,
                               batch_s)
    if hol is not None:
        findings.append(hol)
    return findings
