"""Typed sections of a :class:`~pipecheck.report.Report` that only one driver writes: ``attach``
(``pipecheck attach PID``).

Frozen dataclasses of JSON-friendly fields like :mod:`pipecheck.records` (same unit conventions:
``_s`` seconds, ``_bytes`` bytes, ``_per_s`` per second, ``_fraction`` 0-1, ``None`` "not
measured"); the field names are the JSON keys, in the order they are written, so reports saved
when these sections were plain dicts load and write back the same text. Loaded and checked by
:func:`pipecheck.records.from_jsonable` (a wrongly typed value fails the load naming its path).
Nothing here measures or renders, and nothing imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pipecheck.kinds import WorkerBound


@dataclass(frozen=True)
class AttachWorker:
    """One DataLoader worker seen in torch's worker loop while attached
    (:func:`pipecheck.analysis.attach.analyze_attach`).

    ``samples``: its py-spy samples inside the worker loop; ``busy_fraction`` (0-1) the share
    of them fetching or collating, ``busy_interval`` that share's Wilson 95% interval
    ``[low, high]``. ``observed_s``: seconds psutil saw the process, ``busy_s`` the busy share
    of them; ``cpu_s`` its CPU seconds; ``cpu_fraction`` / ``runqueue_fraction`` CPU and
    run-queue seconds per busy second, ``storage_read_bytes_per_s`` storage bytes per busy
    second; ``bound`` their class (:func:`pipecheck.analysis.bound.classify`). Memory: peak
    RSS and USS in bytes, the USS slope in bytes per second (may be negative) and whether it is
    significant (:mod:`pipecheck.analysis.memory`). ``None``: not measured (psutil did not see
    the process, or too few readings)."""

    pid: int
    samples: int
    busy_fraction: Optional[float]
    busy_interval: Optional[list[float]]
    observed_s: Optional[float]
    busy_s: Optional[float]
    cpu_s: Optional[float]
    cpu_fraction: Optional[float]
    runqueue_fraction: Optional[float]
    storage_read_bytes_per_s: Optional[float]
    bound: Optional[WorkerBound]
    rss_max_bytes: Optional[int]
    uss_max_bytes: Optional[int]
    memory_growth_bytes_per_s: Optional[float]
    memory_growth_significant: Optional[bool]


@dataclass(frozen=True)
class AttachSection:
    """What ``pipecheck attach PID`` concluded from stack samples and psutil alone, the report's
    ``attach`` section (:func:`pipecheck.analysis.attach.analyze_attach`).

    ``status``: ``complete``, ``interrupted`` (Ctrl-C) or ``target-exited``; the window runs
    from ``window_start_unix_s`` to ``window_end_unix_s`` (``time.time()`` seconds),
    ``duration_s`` long, sampled at ``rate_hz``. ``stall_fraction`` (0-1): ``next_samples`` of
    the ``main_thread_samples`` were inside the DataLoader's ``__next__``; ``stall_interval``
    its ``[low, high]`` interval by ``interval_method``; both ``None`` without samples.
    ``dataloader_seen``: a sample was inside ``__next__`` or a worker loop. ``num_workers``:
    workers seen (``None`` when the sampler failed), ``workers`` each of them,
    ``workers_class`` the class holding most of their busy time. The main process's USS slope
    (bytes per second, may be negative) and whether it is significant. ``batches_per_s`` is
    always ``None`` (stack samples do not count batches); ``unknown`` lists, in words, what
    cannot be known without wrapping."""

    pid: int
    status: str
    window_start_unix_s: float
    window_end_unix_s: float
    duration_s: float
    rate_hz: int
    main_thread_samples: int
    next_samples: int
    stall_fraction: Optional[float]
    stall_interval: Optional[list[float]]
    interval_method: str
    dataloader_seen: bool
    num_workers: Optional[int]
    workers: list[AttachWorker]
    workers_class: Optional[WorkerBound]
    main_memory_growth_bytes_per_s: Optional[float]
    main_memory_growth_significant: Optional[bool]
    batches_per_s: Optional[float]
    unknown: list[str]
