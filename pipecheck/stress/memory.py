"""Memory guard for ``pipecheck stress``: skip a configuration whose workers would not fit in
the memory available now, judging from what measured trials' processes used.

Estimate for ``N`` workers: ``main + N x per_worker`` bytes, where ``main`` is the largest
main-process RSS and ``per_worker`` the largest per-worker figure seen across measured trials:
its PSS (proportional set size: pages shared with the parent counted fractionally, the fair
share a fork child adds) when the host sampler read one, else its RSS (an upper bound, since a
forked worker shares most pages with the main process). A prefetched batch lives in the
producing worker until it is sent, so it is already inside the worker's figure.

The configuration is skipped when the estimate exceeds :data:`SAFE_FRACTION` of the memory the
system reports available (``psutil.virtual_memory().available``) at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import psutil

from pipecheck.kinds import MAIN, WORKER
from pipecheck.records import RunRecord
from pipecheck.loader_settings import LoaderSettings
from pipecheck.units import size

SAFE_FRACTION = 0.8
"""Share of the available memory a trial may be expected to use (pipecheck's choice: the rest
covers page cache the loader needs, estimate error and other processes' growth meanwhile)."""


@dataclass(frozen=True)
class MemoryFootprint:
    """Measured memory per process, in bytes: ``main`` the main process's RSS, ``per_worker``
    one worker's PSS (``basis="pss"``) or RSS (``basis="rss"``, an upper bound)."""

    main_bytes: int
    per_worker_bytes: int
    basis: str

    def estimate_bytes(self, num_workers: int) -> int:
        """Bytes a loader with ``num_workers`` workers is expected to hold."""
        return self.main_bytes + num_workers * self.per_worker_bytes


def footprint(records: Iterable[Optional[RunRecord]]) -> Optional[MemoryFootprint]:
    """The largest main and per-worker memory across ``records`` (``None`` entries ignored);
    ``None`` when no record's host sampler saw a worker."""
    main = 0
    pss: list[int] = []
    rss: list[int] = []
    for record in records:
        if record is None or record.host is None:
            continue
        for process in record.host.processes:
            if process.role == MAIN:
                main = max(main, process.rss_max_bytes)
            elif process.role == WORKER:
                rss.append(process.rss_max_bytes)
                if process.pss_max_bytes is not None:
                    pss.append(process.pss_max_bytes)
    if pss:
        return MemoryFootprint(main, max(pss), "pss")
    if rss:
        return MemoryFootprint(main, max(rss), "rss")
    return None


def available_bytes() -> int:
    """Memory the system can give new processes now, in bytes (psutil's ``available``)."""
    return int(psutil.virtual_memory().available)


def skip_reason(config: LoaderSettings, measured: Iterable[Optional[RunRecord]],
                available: Optional[Callable[[], int]] = None) -> Optional[str]:
    """Why ``config`` should not run for lack of memory, in one line; ``None`` when it fits,
    has no workers, or nothing measured yet says how much a worker takes. ``available``
    returns the available bytes (default :func:`available_bytes`)."""
    if config.num_workers == 0:
        return None
    seen = footprint(measured)
    if seen is None:
        return None
    need = seen.estimate_bytes(config.num_workers)
    free = (available or available_bytes)()
    if need <= SAFE_FRACTION * free:
        return None
    return (f"memory: needs about {size(need)} ({config.num_workers} workers x "
            f"{size(seen.per_worker_bytes)} {seen.basis.upper()} + main {size(seen.main_bytes)}), "
            f"more than {SAFE_FRACTION:.0%} of the {size(free)} available")
