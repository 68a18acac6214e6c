"""Targets for ``pipecheck stress`` tests (``tests/stress_targets.py:NAME``).

Each function takes DataLoader keyword arguments, as a stress target does. Datasets are
module-level so DataLoader workers can unpickle them.
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

SAMPLE_SLEEP_S = 0.01
"""Seconds each sample of :class:`SleepPerSample` sleeps: latency-bound, so workers overlap."""


class SleepPerSample(Dataset):
    """``n`` samples; each sleeps ``sleep_s`` seconds (no CPU), or forever with ``hang``, or
    raises ``RuntimeError`` inside a DataLoader worker with ``crash_in_worker``."""

    def __init__(self, n: int = 400, sleep_s: float = SAMPLE_SLEEP_S, hang: bool = False,
                 crash_in_worker: bool = False) -> None:
        self.n, self.sleep_s, self.hang, self.crash_in_worker = n, sleep_s, hang, crash_in_worker

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.crash_in_worker and torch.utils.data.get_worker_info() is not None:
            raise RuntimeError(f"sample {index} is corrupt")
        while self.hang:
            time.sleep(1.0)
        time.sleep(self.sleep_s)
        return torch.tensor([index])


class NeverYields(IterableDataset):
    """An iterable that blocks forever before its first sample."""

    def __iter__(self):
        while True:
            time.sleep(1.0)
        yield  # pragma: no cover - never reached


def sleepy_loader(num_workers=0, prefetch_factor=None, persistent_workers=False, batch_size=4):
    """A DataLoader over :class:`SleepPerSample` with the given settings."""
    return DataLoader(SleepPerSample(), batch_size=batch_size, num_workers=num_workers,
                      prefetch_factor=prefetch_factor, persistent_workers=persistent_workers)


WORKER_START_S = 0.4
"""Seconds :func:`slow_worker_init` sleeps in each new worker process: an expensive start."""


def slow_worker_init(worker_id: int) -> None:
    """A worker_init_fn as costly as opening a big index or a database connection."""
    time.sleep(WORKER_START_S)


def slow_start_loader(num_workers=0, prefetch_factor=None, persistent_workers=False):
    """200 quick samples (50 batches) whose workers take :data:`WORKER_START_S` to start: epoch
    start is a large share of each epoch."""
    return DataLoader(SleepPerSample(200, 0.001), batch_size=4, num_workers=num_workers,
                      prefetch_factor=prefetch_factor, persistent_workers=persistent_workers,
                      worker_init_fn=slow_worker_init)


def long_epoch_loader(num_workers=0, prefetch_factor=None, persistent_workers=False):
    """The same workers over 100,000 samples (25,000 batches): epoch start is negligible."""
    return DataLoader(SleepPerSample(100_000, 0.001), batch_size=4, num_workers=num_workers,
                      prefetch_factor=prefetch_factor, persistent_workers=persistent_workers,
                      worker_init_fn=slow_worker_init)


class EndlessStream(IterableDataset):
    """An endless stream of 1 ms samples, no length (each worker yields the same stream)."""

    def __iter__(self):
        index = 0
        while True:
            time.sleep(0.001)
            yield torch.tensor([index])
            index += 1


def slow_start_stream(num_workers=0, prefetch_factor=None, persistent_workers=False):
    """:class:`EndlessStream` behind workers that take :data:`WORKER_START_S` to start."""
    return DataLoader(EndlessStream(), batch_size=4, num_workers=num_workers,
                      prefetch_factor=prefetch_factor, persistent_workers=persistent_workers,
                      worker_init_fn=slow_worker_init)


def sleepy_dataset():
    """The dataset alone (pipecheck wraps it in a DataLoader)."""
    return SleepPerSample()


def hangs_with_one_worker(num_workers=0, **kwargs):
    """Hangs (never delivers a batch) when ``num_workers == 1``; fine otherwise."""
    return DataLoader(SleepPerSample(hang=num_workers == 1), batch_size=4,
                      num_workers=num_workers, **kwargs)


def never_yields(num_workers=0, **kwargs):
    """An IterableDataset loader that never yields, with any settings."""
    return DataLoader(NeverYields(), batch_size=None, num_workers=num_workers, **kwargs)


def crashes_in_workers(num_workers=0, **kwargs):
    """Its dataset raises inside workers: fine with ``num_workers=0``, fails otherwise."""
    return DataLoader(SleepPerSample(crash_in_worker=True), batch_size=4,
                      num_workers=num_workers, **kwargs)


def raises(**kwargs):
    """A target whose construction fails."""
    raise OSError("shard list /data/shards-*.tar matched nothing")


def returns_text(**kwargs):
    """A target returning something that is neither a DataLoader nor a Dataset."""
    return "not a loader"


NOT_A_FUNCTION = 42


STEP_LOG_ENV = "PIPECHECK_TEST_STEP_LOG"
"""Environment variable naming the file :func:`logging_step` appends to."""


def logging_step(batch) -> None:
    """A user training step for ``--step``: appends its process id, the batch's first value
    and torch's intra-op thread count to the file named by :data:`STEP_LOG_ENV`, so a test can
    see it ran in the trial's process, on the trial's threads."""
    import os

    import torch

    with open(os.environ[STEP_LOG_ENV], "a", encoding="utf-8") as handle:
        handle.write(f"{os.getpid()} {int(batch.flatten()[0])} {torch.get_num_threads()}\n")
