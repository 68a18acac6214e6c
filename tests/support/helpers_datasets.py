"""Module-level datasets and functions for tests that start real DataLoader workers.

spawn and forkserver workers unpickle these by module name, so they must live in an importable
module rather than inside a test function.
"""

from __future__ import annotations

import math
import time

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info
from torch.utils.data._utils.collate import default_collate


class SleepDataset(Dataset):
    """``n`` samples; each ``__getitem__`` sleeps ``sleep_s`` seconds, returns a tensor."""

    def __init__(self, n: int, sleep_s: float) -> None:
        self.n = n
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return torch.tensor([index], dtype=torch.int64)


def require_exact_dataset_class(worker_id: int) -> None:
    """worker_init_fn: fails the worker unless its dataset is exactly a ``SleepDataset`` (not
    a subclass or a proxy of one)."""
    dataset = get_worker_info().dataset
    if type(dataset) is not SleepDataset:
        raise TypeError(f"worker sees {type(dataset)!r}, not exactly SleepDataset")


class IndexDataset(Dataset):
    """``n`` samples, each its index as a tensor; no waiting at all."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index], dtype=torch.int64)


class NoisyDataset(Dataset):
    """Samples drawn with the worker's torch RNG, so worker seeding shows in the batches."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict:
        return {"index": index, "noise": torch.rand(3), "label": index % 5}


class GetitemsDataset(NoisyDataset):
    """Also offers ``__getitems__``: torch then fetches a whole batch with one call."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.getitems_calls = 0

    def __getitems__(self, indices: list) -> list:
        self.getitems_calls += 1
        return [self[i] for i in indices]


class UnsizedDataset(Dataset):
    """A map-style dataset without ``__len__`` (used with an explicit sampler)."""

    def __getitem__(self, index: int) -> int:
        return index * 2


class ShardedRange(IterableDataset):
    """Yields ``start..end-1``, each worker taking its own contiguous share."""

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end

    def __iter__(self):
        info = get_worker_info()
        start, end = self.start, self.end
        if info is not None:
            per_worker = int(math.ceil((end - start) / info.num_workers))
            start = start + info.id * per_worker
            end = min(start + per_worker, self.end)
        return iter(range(start, end))


class PlainRange(IterableDataset):
    """Yields ``start..end-1``; sharded only if ``worker_init_fn`` changes ``start``/``end``."""

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end

    def __iter__(self):
        return iter(range(self.start, self.end))


def shard_plain_range(worker_id: int) -> None:
    """torch's documented ``worker_init_fn`` example: shard by setting attributes on
    ``get_worker_info().dataset`` (which, under the probe, is the proxy)."""
    info = get_worker_info()
    dataset = info.dataset
    overall_start, overall_end = dataset.start, dataset.end
    per_worker = int(math.ceil((overall_end - overall_start) / info.num_workers))
    dataset.start = overall_start + worker_id * per_worker
    dataset.end = min(dataset.start + per_worker, overall_end)


class SlowEndRange(IterableDataset):
    """Yields ``range(n)`` then sleeps ``end_sleep_s`` before raising StopIteration."""

    def __init__(self, n: int, end_sleep_s: float) -> None:
        self.n = n
        self.end_sleep_s = end_sleep_s

    def __iter__(self):
        yield from range(self.n)
        time.sleep(self.end_sleep_s)


class FailingDataset(Dataset):
    """Raises ``ValueError`` for index ``bad_index``; other samples are their index."""

    def __init__(self, n: int, bad_index: int) -> None:
        self.n = n
        self.bad_index = bad_index

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        if index == self.bad_index:
            raise ValueError(f"sample {index} is corrupt")
        return index


class HangingDataset(Dataset):
    """Sample ``hang_index`` sleeps ``hang_s`` (long enough to kill the worker meanwhile)."""

    def __init__(self, n: int, hang_index: int, hang_s: float) -> None:
        self.n = n
        self.hang_index = hang_index
        self.hang_s = hang_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        if index == self.hang_index:
            time.sleep(self.hang_s)
        return index


class SlowCollate:
    """A collate_fn that sleeps ``sleep_s`` per batch before ``default_collate``."""

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s

    def __call__(self, batch):
        time.sleep(self.sleep_s)
        return default_collate(batch)
