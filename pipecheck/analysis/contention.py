"""CPU contention: how many cores a run's processes actually got, who else wanted them, and the
share of a core each runnable thread would get under other settings.

How it works, and why: docs/internals.md (``pipecheck/analysis/contention.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from pipecheck.analysis.stats import ratio
from pipecheck.records import HostRecord, RunRecord

OTHERS_PERCENTILES = (10.0, 90.0)
"""Percentiles of the other processes' per-tick CPU that bound a prediction's interval: the
load seen in 80% of the host sampler's ticks (pipecheck's choice)."""


@dataclass(frozen=True)
class HostLoad:
    """The CPU contention a run measured. ``usable_cpus``: cores this process may use;
    ``others_cpus``: cores' worth processes outside this run's tree and group used on them (mean, and
    ``others_low`` / ``others_high`` at :data:`OTHERS_PERCENTILES` of the host ticks);
    ``share``: the fraction of a core a runnable thread of this run got (0-1];
    ``step_cores``: main-process CPU per wall second of step (cores, > 1 with intra-op
    threads), or ``None`` when not sampled."""

    usable_cpus: float
    others_cpus: float
    others_low: float
    others_high: float
    share: float
    step_cores: Optional[float]
    own_cpus: float = 0.0
    """Cores' worth this run's main process and workers used on average."""
    children_cpus: float = 0.0
    """Cores' worth this run's other child processes (not workers) used on average."""
    same_group_cpus: float = 0.0
    """Cores' worth processes outside this run but in its scheduling group used on average
    (on its usable cores); not part of ``others_cpus``."""
    other_groups: tuple[float, ...] = ()
    """Cores' worth each other scheduling group seen used (part of ``others_cpus``; the rest
    of ``others_cpus`` was not attributed to a group)."""
    unscanned: bool = False
    """No scan of the other processes covered the run (the run was shorter than
    :data:`pipecheck.probes.neighbours.MIN_SCAN_INTERVAL_S`, or the scans were off): none of
    ``others_cpus`` could be attributed to a group."""

    def cores_left(self, others_cpus: Optional[float] = None) -> float:
        """Cores this run's group gets when it wants all it can: the usable CPUs less the load
        not attributed to a group, split max-min fairly with the other groups seen (each
        wanting what it used); ``others_cpus`` scales the other processes' load (default the
        measured mean). Never below what the group used (it demonstrably got those), nor, where
        no scan of the other processes covered the run (:attr:`unscanned`: too short for one,
        so nothing tells whose load it was), below ``share``: whenever one of the run's threads
        was runnable it got that much of a core, while taking the load as immovable would leave
        a run that sleeps most of the time only the cores no one used (a latency-bound loader
        beside two busy processes: 0.05 cores, and 1 worker predicted at 16.7 batches/s where it
        measured 23). Never below a hundredth of a core."""
        used = self.others_cpus if others_cpus is None else others_cpus
        scale = used / self.others_cpus if self.others_cpus > 0 else 0.0
        groups = [g * scale for g in self.other_groups]
        capacity = self.usable_cpus - max(used - sum(groups), 0.0)
        if groups and capacity > 0:
            # This run's group wants every core: its fair level is what it gets.
            left = fair_shares([(1.0, g) for g in groups] + [(1.0, capacity)], capacity)[-1]
            left *= capacity
        else:
            left = capacity - sum(groups)
        floor = min(self.share, self.usable_cpus) if self.unscanned else 0.0
        return max(left, self.own_cpus + self.children_cpus + self.same_group_cpus, floor,
                   0.01)

    def group_runnable(self) -> float:
        """Runnable threads in this run's group besides its step and workers (its non-worker
        children and other processes in the group): the cores they used over the share every
        runnable thread of the group got."""
        return (self.children_cpus + self.same_group_cpus) / self.share

    def step_threads(self) -> float:
        """Threads the step keeps runnable on average: its cores over the share it got, at
        most the usable cores (torch's intra-op pool is sized to them); one when not sampled.
        A step that waits on a GPU keeps well under one thread runnable."""
        cores = 1.0 if self.step_cores is None else self.step_cores
        return min(cores / self.share, max(self.usable_cpus, 1.0))


def fair_shares(groups: list[tuple[float, float]], cpus: float) -> list[float]:
    """Max-min fair allocation of ``cpus`` cores (water-filling, the fairness CFS approximates:
    a thread that wants less than the fair level keeps all it wants, the others split the
    rest evenly). ``groups``: ``(threads, cores each wants)``, both >= 0, threads may be
    fractional. Returns, per group, the fraction (0-1] of its want it gets (1 for a group that
    wants nothing). ``ValueError`` for ``cpus <= 0`` or a negative figure."""
    if cpus <= 0:
        raise ValueError(f"cpus must be > 0, got {cpus}")
    if any(count < 0 or want < 0 for count, want in groups):
        raise ValueError(f"thread counts and wants must be >= 0, got {groups}")
    if sum(count * want for count, want in groups) <= cpus:
        return [1.0] * len(groups)
    # Raise the level through the wants in increasing order until the cores are used up.
    left, level = cpus, 0.0
    pending = sorted((want, count) for count, want in groups if count > 0 and want > 0)
    while pending:
        threads = sum(count for _, count in pending)
        want, count = pending[0]
        if (want - level) * threads >= left:
            level += left / threads
            break
        left -= (want - level) * threads
        level = want
        pending.pop(0)
    return [1.0 if want <= level or want == 0 else level / want for _, want in groups]


def measured_on_usable_cpus(run: RunRecord) -> bool:
    """Whether the host sampler measured the busy share of the CPUs this process may use (its
    affinity is a subset of the machine's), rather than of the whole machine only."""
    host = _usable(run.host)
    return host is not None and host.usable_cpu_percent_mean is not None


def other_processes_cpus(run: RunRecord) -> Optional[float]:
    """CPUs (cores' worth, >= 0) that processes other than this run's used on average while the
    host sampler ran: the busy share of the CPUs measured (the ones this process may use when
    its affinity is a subset, :func:`measured_on_usable_cpus`; else all ``cpu_count``) less
    this run's main process and workers. ``None`` when not measured."""
    host = _usable(run.host)
    if host is None or host.system_cpu_percent_mean is None or not host.duration_s > 0:
        return None
    ours_s = (host.main_cpu_s or 0.0) + (host.workers_cpu_s or 0.0)
    if host.usable_cpu_percent_mean is not None:
        busy = host.usable_cpu_percent_mean / 100.0 * run.environment.usable_cpus
    else:
        busy = host.system_cpu_percent_mean / 100.0 * run.environment.cpu_count
    return max(busy - ours_s / host.duration_s, 0.0)


def others_per_tick(run: RunRecord) -> list[float]:
    """Other processes' cores' worth at each host tick (the tick's busy CPU, of the usable CPUs
    where measured, less this run's main process and workers), >= 0; empty when the sampler
    kept no timeline."""
    host = _usable(run.host)
    if host is None:
        return []
    children = children_cpus(run) or 0.0
    ticks = []
    for s in host.timeline:
        if s.usable_cpu_percent is not None:
            busy = s.usable_cpu_percent / 100.0 * run.environment.usable_cpus
        else:
            busy = s.system_cpu_percent / 100.0 * run.environment.cpu_count
        ticks.append(max(busy - (s.main_cpu_percent + s.workers_cpu_percent) / 100.0
                         - children, 0.0))
    return ticks


def same_group_fraction(run: RunRecord) -> float:
    """The fraction (0-1) of other processes' CPU that processes in this run's scheduling group
    used, as the scans of other processes saw it (:attr:`HostRecord.others_same_group_cpu_s`
    over :attr:`HostRecord.others_cpu_s`); 0 when not scanned (then every other process counts
    as another group's: they keep their cores, the cautious side)."""
    host = _usable(run.host)
    if host is None or host.others_same_group_cpu_s is None or not host.others_cpu_s:
        return 0.0
    return min(max(host.others_same_group_cpu_s / host.others_cpu_s, 0.0), 1.0)


def children_cpus(run: RunRecord) -> Optional[float]:
    """Cores' worth this run's child processes outside the workers' trees used on average
    (role ``child`` without a worker id); ``None`` without host data."""
    host = _usable(run.host)
    if host is None or not host.duration_s > 0:
        return None
    return sum(p.cpu_s for p in host.processes
               if p.role == "child" and p.worker_id is None) / host.duration_s


def measured_share(run: RunRecord) -> Optional[float]:
    """Fraction of a core this run's runnable threads got: CPU seconds over CPU plus run-queue
    seconds, over the processes whose run-queue wait was measured; ``None`` without any."""
    host = _usable(run.host)
    if host is None:
        return None
    measured = [p for p in host.processes if p.runqueue_s is not None]
    running_s = sum(p.cpu_s for p in measured)
    waiting_s = sum(p.runqueue_s or 0.0 for p in measured)
    return ratio(running_s, running_s + waiting_s)


def host_load(run: RunRecord, step_cores: Optional[float]) -> HostLoad:
    """The :class:`HostLoad` of ``run``; with no host data, a quiet host (no other load, a
    full core per thread). ``step_cores``: main-process CPU per wall second of step."""
    usable = float(run.environment.usable_cpus)
    # Measured on our own CPUs, or spread over the whole machine: then only the part on our
    # cores competes (taken in proportion).
    on_ours = (1.0 if measured_on_usable_cpus(run)
               else usable / max(run.environment.cpu_count, 1))
    children = children_cpus(run) or 0.0
    # other_processes_cpus() counts this run's non-worker children too: they are in its group.
    mean = max((other_processes_cpus(run) or 0.0) - children, 0.0) * on_ours
    host = _usable(run.host)
    own = 0.0
    if host is not None and host.duration_s > 0:
        own = ((host.main_cpu_s or 0.0) + (host.workers_cpu_s or 0.0)) / host.duration_s
    # Other processes in this run's group compete per thread, as its own children do.
    in_group = same_group_fraction(run)
    same_group = mean * in_group
    seen_groups = _other_groups(run, mean)
    mean -= same_group
    ticks = others_per_tick(run)
    if ticks:
        low, high = (float(v) * on_ours * (1.0 - in_group)
                     for v in np.percentile(ticks, OTHERS_PERCENTILES))
    else:
        low = high = mean
    share = measured_share(run)
    return HostLoad(
        usable_cpus=usable,
        others_cpus=mean,
        others_low=min(low, mean),
        others_high=max(high, mean),
        share=1.0 if share is None or share <= 0 else min(share, 1.0),
        step_cores=step_cores,
        own_cpus=own,
        children_cpus=children,
        same_group_cpus=same_group,
        other_groups=seen_groups,
        unscanned=host is not None and not host.others_scanned_s,
    )


def _other_groups(run: RunRecord, others: float) -> tuple[float, ...]:
    """Cores each other group seen used, on this run's usable cores: its share of the scanned
    CPU times ``others`` (the other processes' mean load on them, all groups)."""
    host = _usable(run.host)
    if host is None or not host.others_groups_cpu_s or not host.others_cpu_s:
        return ()
    return tuple(others * g / host.others_cpu_s for g in host.others_groups_cpu_s)


def _usable(host: Optional[HostRecord]) -> Optional[HostRecord]:
    return host if host is not None and host.status == "ok" else None
