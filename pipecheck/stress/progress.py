"""The live sweep display on stderr (rich): current configuration, trials done and left; and
the one-line notes on failed and skipped trials printed after the report."""

from __future__ import annotations

import sys
from typing import Any, Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pipecheck.stress.settings import TrialConfig
from pipecheck.stress.trial import TrialResult


class SweepProgress:
    """A progress callback for :func:`pipecheck.stress` (``(event, config, done, total,
    result)``) drawing a transient rich bar on stderr. ``enabled=False`` draws nothing. Use as a
    context manager so the display is always stopped."""

    def __init__(self, enabled: bool = True) -> None:
        self._progress: Optional[Progress] = None
        self._task: Optional[Any] = None
        if enabled:
            self._progress = Progress(
                TextColumn("stress"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.description}"), TimeElapsedColumn(),
                console=Console(file=sys.stderr), transient=True)

    def __enter__(self) -> "SweepProgress":
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __call__(self, event: str, config: TrialConfig, done: int, total: int,
                 result: Optional[TrialResult]) -> None:
        if self._progress is None:
            return
        if self._task is None:
            self._task = self._progress.add_task("", total=total)
        if event == "start":
            text = f"running {config.label()}"
        elif event == "done":
            text = f"{config.label()}: {'ok' if result is not None and result.ok else 'failed'}"
        else:
            text = "budget spent"
        self._progress.update(self._task, completed=done, description=text)

    @staticmethod
    def problems(section: dict[str, Any]) -> list[str]:
        """One line per failed trial (with its error) and one for the skipped configurations."""
        lines = []
        for trial in section.get("trials") or []:
            if trial.get("error"):
                lines.append(f"trial {_label(trial['config'])} failed: {trial['error']}")
        skipped = section.get("skipped") or []
        if skipped:
            names = "; ".join(_label(c) for c in skipped)
            lines.append(f"budget spent, {len(skipped)} configuration(s) skipped: {names}")
        return lines


def _label(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())
