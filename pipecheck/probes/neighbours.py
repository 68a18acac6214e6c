"""Other processes' CPU, split by whether they share this run's CPU scheduling group.

How it works, and why: docs/internals.md (``pipecheck/probes/neighbours.py``).
"""

from __future__ import annotations

import time
from typing import NamedTuple, Optional

import psutil

GroupKey = tuple[str, Optional[str]]
"""A scheduling group: (effective ``cpu`` cgroup path, autogroup name or ``None``)."""

MIN_SCAN_INTERVAL_S = 5.0
"""Least seconds between two scans of the process table (pipecheck's choice: the host
sampler's memory cadence; other processes' load changes on that scale)."""

MAX_COST_FRACTION = 0.005
"""Largest share of one core the scans may take (0.5%): a scan that took ``c`` seconds of CPU
waits at least ``c / MAX_COST_FRACTION`` before the next (2,000 processes at ~15 us each: 30 ms,
so one scan every 6 s)."""

_GONE = (psutil.NoSuchProcess, psutil.AccessDenied)


def scheduling_group(pid: int, proc_root: str = "/proc",
                     cgroup_root: str = "/sys/fs/cgroup") -> Optional[GroupKey]:
    """The scheduling group of process ``pid`` (docs/internals.md), or ``None`` when its
    ``cgroup`` file cannot be read (gone, not Linux, no permission). ``proc_root`` and
    ``cgroup_root`` are where procfs and the cgroup v2 hierarchy are mounted."""
    try:
        with open(f"{proc_root}/{pid}/cgroup", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    v1_cpu: Optional[str] = None
    unified: Optional[str] = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            unified = path
        elif "cpu" in controllers.split(","):
            v1_cpu = path
    if v1_cpu is not None:
        path = v1_cpu
    elif unified is not None:
        path = _effective_v2_cpu_cgroup(unified, cgroup_root)
    else:
        return None
    autogroup = None
    if path == "/" and _autogroup_enabled(proc_root):
        autogroup = _autogroup(pid, proc_root)
    return path, autogroup


def _effective_v2_cpu_cgroup(path: str, cgroup_root: str) -> str:
    """The deepest ancestor of ``path`` (itself included) with the ``cpu`` controller; ``path``
    itself when the hierarchy is not readable there (a cgroup namespace: taken as is)."""
    candidate = path.rstrip("/") or "/"
    while candidate != "/":
        try:
            with open(f"{cgroup_root}{candidate}/cgroup.controllers", encoding="ascii") as handle:
                if "cpu" in handle.read().split():
                    return candidate
        except OSError:
            return path
        candidate = candidate.rsplit("/", 1)[0] or "/"
    return "/"


def _autogroup_enabled(proc_root: str) -> bool:
    try:
        with open(f"{proc_root}/sys/kernel/sched_autogroup_enabled", encoding="ascii") as handle:
            return handle.read().strip() == "1"
    except OSError:
        return False


def _autogroup(pid: int, proc_root: str) -> Optional[str]:
    try:
        with open(f"{proc_root}/{pid}/autogroup", encoding="ascii") as handle:
            fields = handle.read().split()
    except OSError:
        return None
    return fields[0] if fields else None


class NeighbourTotals(NamedTuple):
    """What the scans saw: ``window_s``, the real seconds from the first scan to the latest;
    ``others_cpu_s``, the CPU seconds processes outside the run used in it;
    ``same_group_cpu_s``, the part of those used by processes in the run's group."""

    window_s: float
    others_cpu_s: float
    same_group_cpu_s: float
    other_groups_cpu_s: tuple[float, ...] = ()
    """CPU seconds of each other group seen (largest first, at most :data:`MAX_GROUPS`);
    processes whose group could not be read are in none of them."""


MAX_GROUPS = 32
"""Other groups whose CPU is kept one by one (the largest); the rest are small enough that
they keep their cores under any fair split, as unattributed load does."""


class NeighbourScan:
    """Other processes' CPU seconds: in total, in the group of process ``pid``, and per other
    group.

    Call :meth:`maybe_scan` from the host sampler's tick with the pids of the run's own
    processes; it scans when :meth:`due`. ``totals`` (:class:`NeighbourTotals`) is replaced as a
    whole after each scan, so another thread may read it at any time. ``group`` is ``None``
    (and nothing is ever counted) when the run's own group cannot be read. :meth:`maybe_scan`
    is called from one thread only.
    """

    def __init__(self, pid: int, *, proc_root: str = "/proc",
                 cgroup_root: str = "/sys/fs/cgroup") -> None:
        self._proc_root = proc_root
        self._cgroup_root = cgroup_root
        self.group = scheduling_group(pid, proc_root, cgroup_root)
        self.totals = NeighbourTotals(0.0, 0.0, 0.0)
        self._cpu: dict[tuple[int, float], float] = {}
        self._groups: dict[tuple[int, float], Optional[GroupKey]] = {}
        self._group_cpu_s: dict[GroupKey, float] = {}
        self._last_at: Optional[float] = None
        self._next_at = 0.0

    def due(self, now_s: float) -> bool:
        """Whether a scan is due at ``now_s`` (``time.perf_counter`` seconds)."""
        return self.group is not None and now_s >= self._next_at

    def maybe_scan(self, now_s: float, own_pids: set[int]) -> None:
        """Scan the process table if :meth:`due`, leaving out ``own_pids`` (this run's main
        process, workers and their children)."""
        if not self.due(now_s):
            return
        cost_start = time.thread_time()
        readings = self._read(own_pids)
        if self._last_at is not None:
            self._add_window(readings, now_s - self._last_at)
        self._cpu = readings
        self._groups = {key: group for key, group in self._groups.items() if key in readings}
        self._last_at = now_s
        cost_s = time.thread_time() - cost_start
        self._next_at = now_s + max(MIN_SCAN_INTERVAL_S, cost_s / MAX_COST_FRACTION)

    def _read(self, own_pids: set[int]) -> dict[tuple[int, float], float]:
        readings: dict[tuple[int, float], float] = {}
        for proc in psutil.process_iter():
            if proc.pid in own_pids:
                continue
            try:
                times = proc.cpu_times()
                key = (proc.pid, proc.create_time())
            except _GONE:
                continue
            readings[key] = times.user + times.system
        return readings

    def _add_window(self, readings: dict[tuple[int, float], float], window_s: float) -> None:
        others_s = same_s = 0.0
        for key, cpu_s in readings.items():
            before = self._cpu.get(key)
            # A process first seen now was born since the last scan: all its CPU is new.
            used_s = cpu_s - before if before is not None else cpu_s
            if used_s <= 0:
                continue
            others_s += used_s
            group = self._group_of(key)
            if group is None:
                continue
            if group == self.group:
                same_s += used_s
            else:
                self._group_cpu_s[group] = self._group_cpu_s.get(group, 0.0) + used_s
        if len(self._group_cpu_s) > 4 * MAX_GROUPS:  # many short-lived groups: keep the largest
            kept = sorted(self._group_cpu_s.items(), key=lambda item: -item[1])[:MAX_GROUPS]
            self._group_cpu_s = dict(kept)
        total = self.totals
        largest = sorted(self._group_cpu_s.values(), reverse=True)[:MAX_GROUPS]
        self.totals = NeighbourTotals(total.window_s + window_s, total.others_cpu_s + others_s,
                                      total.same_group_cpu_s + same_s, tuple(largest))

    def _group_of(self, key: tuple[int, float]) -> Optional[GroupKey]:
        if key not in self._groups:
            self._groups[key] = scheduling_group(key[0], self._proc_root, self._cgroup_root)
        return self._groups[key]
