"""Injectable monotonic clock.

Every timestamp pipecheck takes comes from :data:`monotonic`, seconds as a float from
``time.perf_counter``. On Linux that reads ``CLOCK_MONOTONIC``, which is system-wide, so
timestamps taken in DataLoader worker processes and in the main process share one time base.
Tests pass a :class:`FakeClock` wherever a function accepts ``clock=``.
"""

from __future__ import annotations

import time
from typing import Callable

Clock = Callable[[], float]
"""A zero-argument callable returning monotonic seconds (float)."""

monotonic: Clock = time.perf_counter


class FakeClock:
    """A manually advanced clock for deterministic tests.

    ``clock()`` returns the current time in seconds; ``advance(dt)`` moves it forward by
    ``dt`` seconds (``dt >= 0``, else ``ValueError``).
    """

    def __init__(self, start: float = 0.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, dt: float) -> None:
        if dt < 0:
            raise ValueError(f"FakeClock cannot go backwards (dt={dt})")
        self.now += dt
