"""The live sweep display on stderr (rich): the running configuration with its batches/s so
far, trials done, time left; and the one-line notes on failed and skipped trials printed after
the report."""

from __future__ import annotations

import sys
from typing import Any, Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from pipecheck import units as fmt
from pipecheck.report_sections import StressSection
from pipecheck.stress.tracker import ProgressEvent


MAX_LISTED = 5
"""Most skipped configurations named in one line; beyond it only their count."""


class SweepProgress:
    """A progress callback for :func:`pipecheck.stress` drawing a transient rich display on
    stderr: trials done of the candidates, the running configuration with its batches and
    batches/s so far, and the time left at most (budget or remaining trials, whichever is
    shorter). ``enabled=False`` draws nothing. Use as a context manager so the display is
    always stopped."""

    def __init__(self, enabled: bool = True, console: Optional[Console] = None) -> None:
        self._progress: Optional[Progress] = None
        self._task: Optional[Any] = None
        if enabled:
            self._progress = Progress(
                TextColumn("stress"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.description}"), TextColumn("{task.fields[left]}"),
                console=console or Console(file=sys.stderr), transient=True)

    def __enter__(self) -> "SweepProgress":
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __call__(self, event: ProgressEvent) -> None:
        if self._progress is None:
            return
        if self._task is None:
            self._task = self._progress.add_task("", total=event.total, left="")
        self._progress.update(self._task, total=event.total, completed=event.done,
                              description=describe(event),
                              left=f"at most {fmt.seconds(event.time_left_s)} left")

    @staticmethod
    def problems(section: Optional[StressSection]) -> list[str]:
        """One line per failed trial (with its error) and per skip reason (with its
        configurations); none without a section."""
        if section is None:
            return []
        lines = []
        for trial in section.trials:
            if trial.error:
                lines.append(f"trial {_label(trial.config)} failed: {trial.error}")
        by_reason: dict[str, list[str]] = {}
        for entry in section.skipped:
            by_reason.setdefault(entry.reason, []).append(_label(entry.config))
        for reason, names in by_reason.items():
            listed = "; ".join(names) if len(names) <= MAX_LISTED else "listed in the JSON report"
            lines.append(f"{len(names)} configuration(s) skipped ({reason}): {listed}")
        return lines


def describe(event: ProgressEvent) -> str:
    """The display's text for ``event``, e.g. ``num_workers=2 ...: 120 batches, 41.3
    batches/s``."""
    label = event.config.label()
    if event.event == "start":
        return f"starting {label}"
    if event.event == "batch":
        return (f"{label}: {fmt.count(event.batches, 'batch', 'batches')}, "
                f"{fmt.batch_rate(event.batches_per_s)}")
    if event.event == "done":
        result = event.result
        if result is not None and result.ok:
            return f"{label}: {fmt.rate(result.samples_per_s, 'samples')}"
        return f"{label}: failed"
    return f"skipped {label}"


def _label(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())
