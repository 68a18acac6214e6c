"""Module-level datasets for the cause tests (worker class, memory growth, hot stacks): spawn
workers import them by name. Costs are per sample, in seconds."""

from __future__ import annotations

import subprocess
import sys
import time

import torch
from torch.utils.data import Dataset


def burn_cpu_in_pipecheck_test_worker(cost_s: float) -> int:
    """Spin for ``cost_s`` seconds of this thread's CPU time (a distinctive name to find in
    py-spy's samples)."""
    end = time.thread_time() + cost_s
    spins = 0
    while time.thread_time() < end:
        spins += 1
    return spins


class BusyDataset(Dataset):
    """Each sample burns ``cost_s`` of CPU in :func:`burn_cpu_in_pipecheck_test_worker`."""

    def __init__(self, n: int, cost_s: float) -> None:
        self.n, self.cost_s = n, cost_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        burn_cpu_in_pipecheck_test_worker(self.cost_s)
        return torch.tensor([index])


_DECODER = ("import sys, time\n"
            "for line in sys.stdin:\n"
            "    end = time.thread_time() + float(line)\n"
            "    while time.thread_time() < end:\n"
            "        pass\n"
            "    print('ok', flush=True)\n")


class SubprocessDecodeDataset(BusyDataset):
    """Each sample burns ``cost_s`` of CPU in a long-lived child process the worker starts (a
    decoder run as a subprocess); the worker itself only waits for the answer. The child ends
    when the worker closes its stdin (the worker exits)."""

    def __getitem__(self, index: int) -> torch.Tensor:
        child = self.__dict__.get("_child")
        if child is None:
            child = self._child = subprocess.Popen(
                [sys.executable, "-c", _DECODER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True)
        child.stdin.write(f"{self.cost_s}\n")
        child.stdin.flush()
        child.stdout.readline()
        return torch.tensor([index])

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_child"}


class SleepyDataset(BusyDataset):
    """Each sample sleeps ``cost_s``: busy in wall time, idle on the CPU."""

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.cost_s)
        return torch.tensor([index])


class GrowingDataset(Dataset):
    """Each sample sleeps ``cost_s`` and keeps ``grow_bytes`` of fresh data in a per-process
    cache (a leak of exactly ``grow_bytes`` per item, written so the pages are resident)."""

    def __init__(self, n: int, cost_s: float, grow_bytes: int, objects: int = 0) -> None:
        self.n, self.cost_s, self.grow_bytes = n, cost_s, grow_bytes
        self.cache: list[bytes] = []
        # Python objects a real dataset might hold (file lists, annotations): named in the
        # finding as copy-on-read candidates.
        self.records = [{"id": i, "path": f"/data/{i}.jpg"} for i in range(objects)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.cost_s)
        if self.grow_bytes:
            self.cache.append(bytes([index % 251]) * self.grow_bytes)
        return torch.tensor([index])


class WarmingDataset(Dataset):
    """Each sample sleeps ``cost_s``; each process's first ``warm_items`` samples fill a cache
    of ``warm_bytes`` in all (written, so resident), then memory stays flat: a cache warmed at
    start-up, not a leak."""

    def __init__(self, n: int, cost_s: float, warm_bytes: int, warm_items: int) -> None:
        self.n, self.cost_s = n, cost_s
        self.warm_bytes, self.warm_items = warm_bytes, warm_items
        self.cache: list[bytes] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.cost_s)
        if len(self.cache) < self.warm_items:
            self.cache.append(bytes([index % 251]) * (self.warm_bytes // self.warm_items))
        return torch.tensor([index])


class DirectReadDataset(Dataset):
    """Each sample reads ``chunk_bytes`` of ``path`` with O_DIRECT (bypassing the page cache, so
    every read hits storage), into one page-aligned buffer per process."""

    def __init__(self, path: str, n: int, chunk_bytes: int, chunks: int) -> None:
        self.path, self.n, self.chunk_bytes, self.chunks = path, n, chunk_bytes, chunks
        self._buffer = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        import mmap
        import os

        if self._buffer is None:
            self._buffer = mmap.mmap(-1, self.chunk_bytes)  # O_DIRECT needs aligned memory
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
        try:
            got = os.preadv(fd, [self._buffer], (index % self.chunks) * self.chunk_bytes)
        finally:
            os.close(fd)
        return torch.tensor([got])


def burn_in_map_stage(sample):
    """A webdataset ``.map`` over ``(PIL image, class)`` samples that burns 10 ms of CPU per
    sample and returns ``((width, height), class)`` (collatable)."""
    burn_cpu_in_pipecheck_test_worker(0.01)
    image, label = sample
    return image.size, int(label)
