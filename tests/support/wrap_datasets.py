"""Module-level datasets for wrap tests (spawn and forkserver workers import them by name)."""

from __future__ import annotations

import math
import time

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info


class SquaresDataset(Dataset):
    """Map-style: item i is (tensor [i, i*i], i). Optional sleep per item (seconds)."""

    def __init__(self, n: int, sleep_s: float = 0.0) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return torch.tensor([float(i), float(i * i)]), i


class FailingDataset(SquaresDataset):
    """Raises ValueError on item ``bad``."""

    def __init__(self, n: int, bad: int) -> None:
        super().__init__(n)
        self.bad = bad

    def __getitem__(self, i: int):
        if i == self.bad:
            raise ValueError(f"corrupt sample {i}")
        return super().__getitem__(i)


class RangeStream(IterableDataset):
    """Iterable: yields 0..n-1, split across workers by contiguous ranges."""

    def __init__(self, n: int, sleep_s: float = 0.0) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __iter__(self):
        info = get_worker_info()
        start, end = 0, self.n
        if info is not None:
            per = math.ceil(self.n / info.num_workers)
            start = info.id * per
            end = min(start + per, self.n)
        for i in range(start, end):
            if self.sleep_s:
                time.sleep(self.sleep_s)
            yield torch.tensor([i])

    def __len__(self) -> int:
        return self.n


class EmptyDataset(Dataset):
    def __len__(self) -> int:
        return 0

    def __getitem__(self, i: int):
        raise IndexError(i)
