"""Fakes for the stress search's budget and progress tests: a settable clock, one real short
trial to copy, and a trial runner that only advances the clock."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from pipecheck.analysis.model import MIN_STEADY_BATCHES
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.trial import TrialLimits, TrialResult, measure
from stress_targets import sleepy_loader


class FakeClock:
    """A clock (seconds) that moves only when a test sets ``now``."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def short_trial() -> TrialResult:
    """A real trial with fewer steady batches than the model needs (a template to copy)."""
    result = measure(sleepy_loader(batch_size=4), LoaderSettings(0),
                     TrialLimits(batches=MIN_STEADY_BATCHES // 2))
    assert result.ok
    return result


def fake_runner(clock: FakeClock, template: TrialResult, overhead_s: float,
                started: Optional[list] = None) -> Any:
    """A trial runner that takes its time limit plus ``overhead_s`` on ``clock`` and measures
    ``100 + num_workers`` samples/s; each start ``(clock.now, config)`` goes to ``started``."""

    def run(source, config, limits, *, step, timeout_s, on_batches=None):
        if started is not None:
            started.append((clock.now, config))
        clock.now += limits.seconds + overhead_s
        return dataclasses.replace(template, config=config, wall_s=limits.seconds,
                                   samples_per_s=100.0 + config.num_workers)

    return run
