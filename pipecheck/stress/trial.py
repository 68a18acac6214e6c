"""One stress trial: run a loader alone through :func:`pipecheck.wrap` for a bounded number of
batches (or seconds), with an optional emulated step, and summarize it.

:func:`measure` runs in the current process. Run as ``python -m pipecheck.stress.trial
REQUEST.json`` it is the isolated child of :mod:`pipecheck.stress.isolate`: it loads the target,
appends one byte to the request's ``progress`` file at start, after building the loader and per
batch (the parent's watchdog), and writes a JSON result (never pickled torch objects).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional

from pipecheck.analysis.consumer import (cold_start_s, started_steady_s, steady_stall_fraction,
                                         summarize_consumer)
from pipecheck.errors import one_line
from pipecheck.records import RunRecord
from pipecheck.codec import from_jsonable, to_jsonable
from pipecheck.report_sections import TrialEntry
from pipecheck.stress.settings import Step, step_from_dict
from pipecheck.loader_settings import LoaderSettings
from pipecheck.stress.step import step_runner


@dataclass(frozen=True)
class TrialLimits:
    """How long one trial runs: for ``seconds`` of wall time (> 0), at most ``batches``
    batches in all (>= 2: each epoch's first is warm-up; ``None``: no batch limit).

    ``epochs`` ``None`` (default): epochs follow one another until the time or the batches are
    used up, so a loader whose epoch is shorter than the trial still delivers a trial's worth of
    batches (each new epoch restarts its workers, as in training; the restart is that epoch's
    first batch, left out of the rates). An integer: exactly that many epochs at most (2 to see
    ``persistent_workers`` pay off), each given an even share of the time (epoch ``k`` ends by
    ``(k + 1) / epochs`` of ``seconds``, so time an early epoch leaves carries over) and of
    ``batches``. ``stacks``: sample hot stacks with py-spy throughout (a profiling trial:
    sampling costs throughput, so such a trial is not compared). ``epoch_batches``: end a
    map-style loader's epochs after this many batches (>= 1) with a truncated sampler, so they
    finish as whole epochs do; iterable loaders are left as they are (``batches`` cuts their
    epochs)."""

    batches: Optional[int] = None
    seconds: float = 10.0
    epochs: Optional[int] = None
    stacks: bool = False
    epoch_batches: Optional[int] = None


@dataclass(frozen=True)
class TrialResult:
    """What one trial measured. ``samples_per_s`` and ``batches_per_s`` are steady rates: each
    epoch's first batch (worker start-up) is left out of the count and the time; they are what
    trials are compared on. ``run_samples_per_s`` / ``run_batches_per_s`` are the whole run's
    (every batch over the loop time, start-ups included: the wrapped run's ``consumer`` figures,
    lower by the start-up share). ``startup_s`` is the first epoch's first-batch latency in
    seconds. ``stall_fraction`` (0-1) is the steady data wait over loop time. Failed trials have
    ``error`` set and ``None`` rates. ``record`` (the wrap record, kind ``stress``) stays out of
    :meth:`to_dict`."""

    config: LoaderSettings
    samples_per_s: Optional[float]
    batches_per_s: Optional[float]
    stall_fraction: Optional[float]
    startup_s: Optional[float]
    batches: int
    wall_s: float
    error: Optional[str] = None
    record: Optional[RunRecord] = None
    run_samples_per_s: Optional[float] = None
    run_batches_per_s: Optional[float] = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.samples_per_s is not None

    def to_dict(self) -> dict[str, Any]:
        """The stress section's trial entry (the JSON contract's keys, docs/architecture.md,
        plus extras)."""
        return {"config": self.config.to_dict(), "samples_per_s": self.samples_per_s,
                "batches_per_s": self.batches_per_s, "stall_fraction": self.stall_fraction,
                "measured": True, "startup_s": self.startup_s, "batches": self.batches,
                "wall_s": self.wall_s, "error": self.error,
                "run_samples_per_s": self.run_samples_per_s,
                "run_batches_per_s": self.run_batches_per_s}

    def entry(self) -> TrialEntry:
        """The stress section's typed trial entry (the same keys as :meth:`to_dict`)."""
        return TrialEntry(config=self.config.to_dict(), samples_per_s=self.samples_per_s,
                          batches_per_s=self.batches_per_s, stall_fraction=self.stall_fraction,
                          measured=True, startup_s=self.startup_s, batches=self.batches,
                          wall_s=self.wall_s, error=self.error,
                          run_samples_per_s=self.run_samples_per_s,
                          run_batches_per_s=self.run_batches_per_s)


def failed(config: LoaderSettings, error: str, wall_s: float = 0.0) -> TrialResult:
    """A trial that measured nothing, with its reason (one line)."""
    return TrialResult(config, None, None, None, None, 0, wall_s, " ".join(error.split()))


def measure(loader: Any, config: LoaderSettings, limits: TrialLimits,
            step: Optional[Step] = None,
            on_batch: Optional[Callable[[], object]] = None) -> TrialResult:
    """Iterate ``loader`` (built with ``config``) through ``pipecheck.wrap`` within ``limits``,
    running ``step`` after each batch (:func:`pipecheck.stress.step.step_runner`), with this
    process on ``config.torch_num_threads`` torch intra-op threads when set (restored after).
    Exceptions from the loader or the step become a failed result whose error names the
    exception; ``KeyboardInterrupt`` propagates."""
    import torch

    before = torch.get_num_threads()
    if config.torch_num_threads is not None:
        torch.set_num_threads(config.torch_num_threads)
    try:
        return _measure(loader, config, limits, step, on_batch)
    finally:
        if config.torch_num_threads is not None:
            torch.set_num_threads(before)


def _measure(loader: Any, config: LoaderSettings, limits: TrialLimits,
             step: Optional[Step], on_batch: Optional[Callable[[], object]]) -> TrialResult:
    from pipecheck.wrap import wrap

    started = time.perf_counter()
    if limits.epoch_batches is not None:
        loader = shorten_epochs(loader, config, limits.epoch_batches)
    run_step = step_runner(step)
    wrapped = wrap(loader, stacks=limits.stacks, stacks_window_s=limits.seconds)
    error: Optional[str] = None
    try:
        delivered, epoch = 0, 0
        while limits.epochs is None or epoch < limits.epochs:
            share = 1.0 if limits.epochs is None else (epoch + 1) / limits.epochs
            ends_s, cap = limits.seconds * share, _batch_cap(limits, share)
            before = delivered
            for batch in wrapped:
                delivered += 1
                if on_batch is not None:
                    on_batch()
                if run_step is not None:
                    run_step(batch)
                del batch  # not held through the next fetch
                if delivered >= cap or time.perf_counter() - started >= ends_s:
                    break
            epoch += 1
            out_of_time = time.perf_counter() - started >= limits.seconds
            used_up = limits.epochs is None and delivered >= cap
            if delivered == before or used_up or out_of_time:
                break  # an empty epoch would repeat forever
    except Exception as err:
        error = one_line(err)
    finally:
        wrapped.close()
    record = dataclasses.replace(wrapped.record(), kind="stress")
    return summarize(config, record, time.perf_counter() - started, error)


def _batch_cap(limits: TrialLimits, share: float) -> float:
    """Batches the trial may have delivered by the end of the current epoch (``share``: the
    fraction of the trial's limits that epoch ends at); infinite without a batch limit."""
    if limits.batches is None:
        return float("inf")
    return round(limits.batches * share)


def shorten_epochs(loader: Any, config: LoaderSettings, batches: int) -> Any:
    """``loader`` rebuilt so each epoch ends after ``batches`` batches, when it is a map-style
    DataLoader; anything else is returned unchanged."""
    from torch.utils.data import DataLoader, IterableDataset

    from pipecheck.stress.target import rebuild_loader

    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return loader
    return rebuild_loader(loader, config, epoch_batches=batches)


def summarize(config: LoaderSettings, record: RunRecord, wall_s: float,
              error: Optional[str] = None) -> TrialResult:
    """Rates over the steady batches of ``record``: each epoch's first batch is left out of
    both the count and the time (``wall_s - first_batch_s`` per epoch); samples are taken at the
    run's mean batch size. ``None`` rates when no steady batch was seen."""
    consumer = record.consumer
    steady_batches, steady_s = started_steady_s(consumer)
    rate = steady_batches / steady_s if steady_batches and steady_s > 0 else None
    per_batch = consumer.samples / consumer.batches if consumer.batches else None
    if rate is None and error is None:
        error = (f"too few batches to measure: {consumer.batches} delivered "
                 f"(at least 2 per epoch needed)")
    whole = summarize_consumer(consumer)
    return TrialResult(
        config=config,
        samples_per_s=rate * per_batch if rate is not None and per_batch is not None else None,
        batches_per_s=rate,
        stall_fraction=steady_stall_fraction(consumer) if rate is not None else None,
        startup_s=cold_start_s(consumer, persistent_workers=True),  # the first started one
        batches=consumer.batches,
        wall_s=wall_s,
        error=error,
        record=record,
        run_samples_per_s=whole.samples_per_s if rate is not None else None,
        run_batches_per_s=whole.batches_per_s if rate is not None else None,
    )


def result_to_json(result: TrialResult) -> dict[str, Any]:
    """``result`` as JSON-ready values, its record included (for the parent to rebuild)."""
    data = result.to_dict()
    data["record"] = to_jsonable(result.record) if result.record is not None else None
    return data


def result_from_json(data: dict[str, Any]) -> TrialResult:
    """Inverse of :func:`result_to_json`; raises ``KeyError`` / ``TypeError`` on bad data."""
    record = data.get("record")
    return TrialResult(
        config=LoaderSettings.from_dict(data["config"]),
        samples_per_s=data["samples_per_s"], batches_per_s=data["batches_per_s"],
        stall_fraction=data["stall_fraction"], startup_s=data["startup_s"],
        batches=data["batches"], wall_s=data["wall_s"], error=data["error"],
        run_samples_per_s=data.get("run_samples_per_s"),
        run_batches_per_s=data.get("run_batches_per_s"),
        record=from_jsonable(RunRecord, record, "record") if record is not None else None)


def _child(request_path: str) -> int:
    """Child entry point; see the module docstring. Returns the process exit code."""
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    folder = os.path.dirname(request_path)
    progress = open(os.path.join(folder, "progress"), "ab", buffering=0)
    progress.write(b"s")
    for entry in reversed(request["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    from pipecheck.stress.allocator import settle_allocator
    from pipecheck.stress.target import call_factory, load_factory

    settle_allocator()  # before the loader: its workers fork with a training process's heap
    config = LoaderSettings.from_dict(request["config"])
    started = time.perf_counter()
    try:
        loader = call_factory(load_factory(request["target"]), config, name=request["target"])
        progress.write(b"l")
        step = step_from_dict(request["step"])
        result = measure(loader, config, TrialLimits(**request["limits"]), step,
                         on_batch=lambda: progress.write(b"b"))
    except Exception as err:
        traceback.print_exc()
        result = failed(config, one_line(err), time.perf_counter() - started)
    temp = os.path.join(folder, "result.json.tmp")
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump(result_to_json(result), handle)
    os.replace(temp, os.path.join(folder, "result.json"))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
