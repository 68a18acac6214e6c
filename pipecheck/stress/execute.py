"""One trial of a configuration: in a child process for a named target
(:mod:`pipecheck.stress.isolate`), in this process for a DataLoader or a factory function (see
:mod:`pipecheck.stress.runner`'s docstring for what a hung trial does in each case). Below both
the runner and the :class:`~pipecheck.stress.tracker.Tracker` that times it."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Union

from torch.utils.data import DataLoader

from pipecheck.errors import BadInputError
from pipecheck.stress.isolate import run_isolated
from pipecheck.stress.settings import Step
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.target import Factory, call_factory, rebuild_loader
from pipecheck.stress.trial import TrialLimits, TrialResult, failed, measure

Source = Union[str, Factory, DataLoader]
"""What a stress run measures: a ``file.py:function`` / ``module:function`` target, a factory
function, or a DataLoader."""

BATCH_EVENT_INTERVAL_S = 0.25
"""Least seconds between two ``batch`` progress events of one trial (a display refreshes about
this often; calling it per batch would cost fast loaders measurable time)."""


def run_trial(source: Source, config: LoaderSettings, limits: TrialLimits, *,
              step: Optional[Step], timeout_s: float,
              on_batches: Optional[Callable[[int], None]] = None) -> TrialResult:
    """Measure one configuration: in a child process for a string ``source``, here otherwise
    (:mod:`pipecheck.stress.runner` docstring). ``on_batches`` is called with the batches delivered so far, at most
    every :data:`BATCH_EVENT_INTERVAL_S` seconds. Never raises for a failing target: the
    result carries the error."""
    if isinstance(source, str):
        return run_isolated(source, config, limits, step=step, timeout_s=timeout_s,
                            on_batches=on_batches)
    return _run_here(source, config, limits, step, timeout_s, on_batches)


def _run_here(source: Union[Factory, DataLoader], config: LoaderSettings, limits: TrialLimits,
              step: Optional[Step], timeout_s: float,
              on_batches: Optional[Callable[[int], None]]) -> TrialResult:
    try:
        if isinstance(source, DataLoader):
            loader = rebuild_loader(source, config, timeout_s=timeout_s)
        else:
            built = call_factory(source, config, name=getattr(source, "__name__", "factory"))
            loader = rebuild_loader(built, config, timeout_s=timeout_s)
    except BadInputError as err:
        return failed(config, str(err))
    return measure(loader, config, limits, step, _throttled(on_batches))


def _throttled(on_batches: Optional[Callable[[int], None]]) -> Optional[Callable[[], None]]:
    """A per-batch callback that counts batches and passes the count on at most every
    :data:`BATCH_EVENT_INTERVAL_S` seconds."""
    if on_batches is None:
        return None
    state: dict[str, Any] = {"count": 0, "last": time.perf_counter()}

    def on_batch() -> None:
        state["count"] += 1
        now = time.perf_counter()
        if now - state["last"] >= BATCH_EVENT_INTERVAL_S:
            state["last"] = now
            on_batches(state["count"])

    return on_batch
