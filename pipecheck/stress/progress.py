"""The live sweep display on stderr (rich): the running configuration with its batches/s so
far, trials done, time left; and the one-line notes on failed and skipped trials printed after
the report."""

from __future__ import annotations

import sys
from typing import Any, Optional

from rich.console import Console
from rich.progress import Progress, ProgressColumn, Task
from rich.text import Text

from pipecheck import units as fmt
from pipecheck.report_sections import StressSection
from pipecheck.stress.tracker import ProgressEvent


MAX_LISTED = 5
"""Most skipped configurations named in one line; beyond it only their count."""

BAR_WIDTH = 20
"""Widest progress bar, in columns; narrower when the terminal is (down to none)."""

MIN_BAR_WIDTH = 5
"""Narrowest bar drawn; with less room the line goes without one."""


def progress_line(width: int, done: int, planned: int, left_s: Optional[float],
                  description: str) -> Text:
    """The one-line display, at most ``width - 1`` columns (a line as wide as the terminal
    wraps in some): ``stress``, a bar of the trials done of those planned, ``done/planned``
    and the time left (``left_s`` seconds at most) always, shortened to ``done/planned
    TIME left`` when the terminal is too narrow for more; the bar as wide as the room allows;
    then the description, cut with an ellipsis to the room left."""
    room = max(width - 1, 1)
    count = f"{done}/{planned}"
    left = "" if left_s is None else f"at most {fmt.seconds(left_s)} left"
    line = Text("stress ", style="bold")
    if len(f"stress {count} {left}") > room:  # the bare minimum, nothing else
        line = Text(count, style="green")
        if left_s is not None:
            line.append(f" {fmt.seconds(left_s)} left", style="cyan")
        return line
    bar = min(BAR_WIDTH, room - len(f"stress {count} {left}") - 1 - 20)  # 20 columns kept
    if bar >= MIN_BAR_WIDTH:
        filled = round(bar * min(done, planned) / planned) if planned > 0 else 0
        line.append("\u2501" * filled, style="magenta")
        line.append("\u2501" * (bar - filled), style="grey23")
        line.append(" ")
    line.append(count, style="green")
    if left:
        line.append(f" {left}", style="cyan")
    if description and len(line) + 1 < room:
        line.append(f" {description}")
        line.truncate(room, overflow="ellipsis")
    return line


class _LineColumn(ProgressColumn):
    """The whole display as one column (:func:`progress_line`) sized to the console: rich's
    table of several columns squeezed them all, cutting the time left at 80 columns."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self._console = console

    def render(self, task: Task) -> Text:
        return progress_line(self._console.width, int(task.completed), int(task.total or 0),
                             task.fields.get("left_s"), task.description)


class SweepProgress:
    """A progress callback for :func:`pipecheck.stress` drawing a transient rich display on
    stderr: one line that fits the terminal (:func:`progress_line`) with the trials done of
    those planned (:attr:`ProgressEvent.planned`: as many as the budget holds), the time left
    at most (budget or planned trials, whichever is shorter) and the running configuration
    with its batches and batches/s so far. ``enabled=False`` draws nothing, and so does a
    console that is not a terminal (rich would write a blank line there when it stops). Use as
    a context manager so the display is always stopped."""

    def __init__(self, enabled: bool = True, console: Optional[Console] = None) -> None:
        self._progress: Optional[Progress] = None
        self._task: Optional[Any] = None
        console = console or Console(file=sys.stderr)
        if enabled and console.is_terminal:
            self._progress = Progress(_LineColumn(console), console=console, transient=True)

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
        if event.planned is not None and event.finished is not None:
            done, total = event.finished, event.planned
        else:
            done, total = event.done, event.total
        if self._task is None:
            self._task = self._progress.add_task("", total=total, left_s=None)
        self._progress.update(self._task, total=total, completed=done,
                              description=describe(event), left_s=event.time_left_s)

    @staticmethod
    def budget_note(section: Optional[StressSection], budget_s: float) -> Optional[str]:
        """A line when the budget held the baseline trial only (nothing to compare it with),
        with a hint to raise it; ``None`` otherwise."""
        skipped = section.budget_skipped_all_but_baseline() if section is not None else 0
        if not skipped:
            return None
        return (f"the budget of {budget_s:g} s held only the baseline trial: "
                f"{fmt.count(skipped, 'other configuration', 'other configurations')} not "
                f"tried; raise --budget (e.g. --budget {max(2 * budget_s, 60):g}) to compare "
                "configurations")

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
