"""What online tuning may never exceed or change: the CPU budget of the process, the memory
new workers would take, and ``num_workers`` of an iterable dataset that does not split its
data by worker (more workers would then repeat every sample).

Read-only: each function reads ``/proc``, ``/sys/fs/cgroup`` or psutil and returns a figure or
a reason; nothing here changes the process or the loader.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Optional

MEMORY_SHARE = 0.5
"""Share of the memory available now that new workers may be expected to take (pipecheck's
choice, as ``pipecheck stress``'s :data:`pipecheck.stress.memory.SAFE_FRACTION`: the rest is
headroom for the training step, torch's ``/dev/shm`` queues and the page cache)."""


def _affinity() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def cgroup_cpu_quota(proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup"
                     ) -> Optional[float]:
    """CPUs the process's cgroup may use (quota / period: cgroup v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), or ``None`` without a quota or when it
    cannot be read (not Linux, no permission, a cgroup namespace hiding it). The cgroup's
    ancestors are checked too: the smallest quota on the path counts."""
    try:
        with open(f"{proc_root}/self/cgroup", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # v2 unified
            quotas += _v2_quotas(cgroup_root, path)
        elif "cpu" in controllers.split(","):
            quotas += _v1_quota(cgroup_root, controllers, path)
    return min(quotas) if quotas else None


def _v2_quotas(root: str, path: str) -> list[float]:
    found = []
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        folder = os.path.join(root, *parts[:depth])
        try:
            with open(os.path.join(folder, "cpu.max"), encoding="ascii") as handle:
                quota, period = (handle.read().split() + ["", ""])[:2]
        except OSError:
            continue
        if quota != "max" and quota and period:
            try:
                found.append(int(quota) / int(period))
            except (ValueError, ZeroDivisionError):
                pass
    return found


def _v1_quota(root: str, controllers: str, path: str) -> list[float]:
    for name in (controllers, "cpu", "cpu,cpuacct"):
        folder = os.path.join(root, name, *[p for p in path.split("/") if p])
        try:
            with open(os.path.join(folder, "cpu.cfs_quota_us"), encoding="ascii") as handle:
                quota = int(handle.read().strip())
            with open(os.path.join(folder, "cpu.cfs_period_us"), encoding="ascii") as handle:
                period = int(handle.read().strip())
        except (OSError, ValueError):
            continue
        return [quota / period] if quota > 0 and period > 0 else []
    return []


def cpu_budget() -> int:
    """CPUs this process may use, >= 1: its affinity mask, capped by its cgroup's CPU quota
    (rounded down, at least 1). Online tuning runs at most
    :data:`pipecheck.recommend.limits.MAX_WORKERS_PER_CPU` workers per such CPU."""
    quota = cgroup_cpu_quota()
    cpus = _affinity()
    if quota is not None:
        cpus = min(cpus, max(1, math.floor(quota)))
    return cpus


def worker_uss_bytes() -> Optional[int]:
    """Mean USS (bytes) of this process's live child processes (the DataLoader workers of
    the iterator in use, and any other child), or ``None`` without children or psutil's
    figures. Costs one ``memory_full_info`` per child (1-7 ms each): read at a switch only."""
    try:
        import psutil

        sizes = []
        for child in psutil.Process().children():
            try:
                sizes.append(child.memory_full_info().uss)
            except (psutil.Error, AttributeError):
                continue
        return int(sum(sizes) / len(sizes)) if sizes else None
    except Exception:
        return None


def memory_refusal(num_workers: int, per_worker: Optional[int],
                   available: Optional[Callable[[], int]] = None) -> Optional[str]:
    """Why ``num_workers`` workers of ``per_worker`` bytes (USS) each do not fit in
    :data:`MEMORY_SHARE` of the available memory (``available()`` bytes, default psutil's
    ``virtual_memory().available``), or ``None`` when they fit or nothing is measured."""
    if per_worker is None or num_workers <= 0:
        return None
    try:
        if available is None:
            import psutil

            free = int(psutil.virtual_memory().available)
        else:
            free = available()
    except Exception:
        return None
    need = num_workers * per_worker
    if need > MEMORY_SHARE * free:
        return (f"num_workers={num_workers} not tried: {num_workers} x "
                f"{per_worker / 2**20:.0f} MiB measured per worker is more than "
                f"{MEMORY_SHARE:.0%} of the {free / 2**20:.0f} MiB available")
    return None


def _code_names(function: Any, depth: int = 2) -> set[str]:
    code = getattr(function, "__code__", None)
    if code is None:
        return set()
    names = set(code.co_names)
    todo = [(c, 1) for c in code.co_consts if hasattr(c, "co_names")]
    while todo:
        each, level = todo.pop()
        names |= set(each.co_names)
        if level < depth:
            todo += [(c, level + 1) for c in each.co_consts if hasattr(c, "co_names")]
    return names


def splits_by_worker(dataset: Any, loader: Any = None) -> tuple[bool, str]:
    """``(True, how)`` when an iterable ``dataset`` evidently splits its data by DataLoader
    worker: a Hugging Face dataset with ``n_shards``, a webdataset pipeline with a worker
    splitter (``split_by_worker``), or an ``__iter__`` that names
    ``torch.utils.data.get_worker_info`` (in its own code or a function nested in it);
    ``(False, why not)`` otherwise. Conservative: a split made elsewhere (a helper it calls)
    is not seen, and ``num_workers`` is then left alone."""
    if isinstance(getattr(dataset, "n_shards", None), int):
        return True, "the dataset has n_shards (Hugging Face splits its shards by worker)"
    if loader is not None:
        try:
            from pipecheck.probes.shards import pipeline_shards

            setup = pipeline_shards(loader)
        except Exception:
            setup = None
        if setup is not None and any("worker" in name for name in setup.splitter_names):
            return True, "the webdataset pipeline splits its shards by worker"
    names = _code_names(getattr(type(dataset), "__iter__", None))
    if "get_worker_info" in names:
        return True, "the dataset's __iter__ calls get_worker_info()"
    return False, (f"{type(dataset).__qualname__} shows no split by worker (no "
                   "get_worker_info() in its __iter__, no n_shards, no webdataset worker "
                   "splitter): more workers could repeat its samples, so num_workers is left "
                   "as set")
