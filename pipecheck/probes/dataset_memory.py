"""What the dataset object and the host's shared memory look like at the start of a run: the inputs
of the copy-on-read advice and the ``/dev/shm`` headroom check (measurement only, no opinions).

Copy-on-read (pytorch/pytorch#13246): a forked worker shares its parent's pages until it writes
to them, and merely reading a Python object writes its reference count, so a dataset holding
millions of Python objects in lists or dicts is copied into every worker page by page. Naming
the largest such containers tells the user what to convert to numpy arrays or Arrow buffers.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import types
from typing import Any, Optional

from pipecheck._peek import code_names, instance_attributes
from pipecheck.records import ContainerStats, SharedMemoryRecord

SHM_PATH = "/dev/shm"
"""Where DataLoader workers' tensors live on Linux (torch's ``file_descriptor`` sharing strategy
creates its segments there)."""

MIN_CONTAINER_ITEMS = 1000
"""Containers with fewer items are not worth naming (their copies cost under a few pages)."""

SAMPLED_ITEMS = 100
"""Items of each container measured with ``sys.getsizeof`` to estimate its size."""

MAX_ATTRIBUTES = 200
"""Attributes inspected in all (the dataset's, then one level into the objects it holds)."""

_CONTAINERS = (list, tuple, dict, set, frozenset)
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.MethodType, str, bytes)


def shared_memory_record(path: str = SHM_PATH) -> Optional[SharedMemoryRecord]:
    """Total and free bytes of ``path``'s file system; ``None`` where it does not exist."""
    if not os.path.isdir(path):
        return None
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    return SharedMemoryRecord(path=path, total_bytes=usage.total, free_bytes=usage.free)


def largest_containers(dataset: Any, top: int = 3) -> list[ContainerStats]:
    """The ``top`` largest Python containers (lists, tuples, dicts, sets of at least
    :data:`MIN_CONTAINER_ITEMS` items) among ``dataset``'s attributes and its attributes'
    attributes, largest first, named ``dataset.<path>``. Sizes are estimates (see
    :class:`~pipecheck.records.ContainerStats`). Never raises: an object that cannot be
    inspected gives an empty list."""
    found: list[ContainerStats] = []
    try:
        for name, value in _attributes(dataset, "dataset"):
            if isinstance(value, _CONTAINERS) and len(value) >= MIN_CONTAINER_ITEMS:
                found.append(ContainerStats(name=name, type=type(value).__name__,
                                            items=len(value), approx_bytes=_approx_bytes(value)))
    except Exception:  # a dataset's __getattr__ or __len__ may do anything
        return []
    found.sort(key=lambda c: c.approx_bytes, reverse=True)
    return found[:top]


def _attributes(root: Any, prefix: str) -> list[tuple[str, Any]]:
    """``(path, value)`` for ``root``'s instance attributes and, for non-container objects among
    them, their own attributes; at most :data:`MAX_ATTRIBUTES`. Read without materializing any
    ``__dict__`` (which would slow the dataset's own attribute loads: :mod:`pipecheck._peek`)."""
    out: list[tuple[str, Any]] = []
    names = code_names(type(root))  # `self.inner.paths = ...` in root's code names `paths`
    for name, value in instance_attributes(root):
        if len(out) >= MAX_ATTRIBUTES:
            break
        out.append((f"{prefix}.{name}", value))
        if not isinstance(value, _CONTAINERS + _OPAQUE):
            for inner, inner_value in instance_attributes(value, names):
                if len(out) >= MAX_ATTRIBUTES:
                    break
                out.append((f"{prefix}.{name}.{inner}", inner_value))
    return out


def _approx_bytes(container: Any) -> int:
    """``getsizeof(container)`` plus its item count times the mean ``getsizeof`` of its first
    :data:`SAMPLED_ITEMS` items (keys and values for dicts), one level deep."""
    if isinstance(container, dict):
        sample = list(itertools.islice(container.items(), SAMPLED_ITEMS))
        per_item = [sys.getsizeof(k) + sys.getsizeof(v) for k, v in sample]
    else:
        sample = list(itertools.islice(iter(container), SAMPLED_ITEMS))
        per_item = [sys.getsizeof(v) for v in sample]
    mean_item = sum(per_item) / len(per_item) if per_item else 0.0
    return int(sys.getsizeof(container) + mean_item * len(container))
