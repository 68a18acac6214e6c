"""Module-level datasets for the online tuning tests (spawn workers import them by name)."""

from __future__ import annotations

import os
import time

import torch
from torch.utils.data import Dataset, IterableDataset, Sampler


class PidSquares(Dataset):
    """Map-style: item i is ``(i, pid of the process that loaded it)``; ``sleep_s`` per item."""

    def __init__(self, n: int, sleep_s: float = 0.0) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return torch.tensor(i), os.getpid()


class NoSplitStream(IterableDataset):
    """Iterable that does NOT split by worker: every worker yields 0..n-1 (more workers would
    repeat every sample); yields ``(i, pid)``."""

    def __init__(self, n: int, sleep_s: float = 0.0) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __iter__(self):
        for i in range(self.n):
            if self.sleep_s:
                time.sleep(self.sleep_s)
            yield torch.tensor(i), os.getpid()


class FlakyPidSquares(PidSquares):
    """:class:`PidSquares` whose item ``bad`` raises ``ValueError`` (in whichever process)."""

    def __init__(self, n: int, bad: int, sleep_s: float = 0.0) -> None:
        super().__init__(n, sleep_s)
        self.bad = bad

    def __getitem__(self, i: int):
        if i == self.bad:
            raise ValueError(f"bad sample {i}")
        return super().__getitem__(i)


class SlowingSquares(PidSquares):
    """:class:`PidSquares` whose items take ``slow_s`` instead once the file ``flag`` exists
    (in whichever process: a neighbour arriving mid-run)."""

    def __init__(self, n: int, sleep_s: float, slow_s: float, flag: str) -> None:
        super().__init__(n, sleep_s)
        self.slow_s, self.flag = slow_s, flag

    def __getitem__(self, i: int):
        if os.path.exists(self.flag):
            time.sleep(self.slow_s)
            return torch.tensor(i), os.getpid()
        return super().__getitem__(i)


class EagerShuffle(Sampler):
    """A shuffling sampler whose ``iter()`` draws its permutation at once (as many users'
    samplers, and torchdata's, do), from its own seeded generator."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.generator = n, torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter(torch.randperm(self.n, generator=self.generator).tolist())

