"""Datasets and loaders for tests/integration/test_wrap_transparency.py (importable by spawn workers)."""

from __future__ import annotations

import warnings

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info


class BadPairs(Dataset):
    """Pairs ``[2i, 2i+1]``; batch 1 (indices 2 and 3) raises ``ValueError``."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> int:
        if index in (2, 3):
            raise ValueError(f"bad sample {index}")
        return index


class LoudStream(IterableDataset):
    """An iterable dataset whose ``__iter__`` warns (or raises) when called, not on ``next()``."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def __iter__(self):
        warnings.warn("LoudStream iter() called", UserWarning, stacklevel=2)
        if self.fail:
            raise RuntimeError("cannot open the stream")
        return iter(range(4))


class NestedBatches(Dataset):
    """Samples of different lengths, collated into a nested tensor."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.arange(index + 1, dtype=torch.float32)


def nested_collate(samples: list) -> torch.Tensor:
    return torch.nested.nested_tensor(samples)


class Opaque:
    """A batch type the sample counter cannot read: ``shape`` and ``len()`` raise."""

    def __init__(self, value: int) -> None:
        self.value = value

    @property
    def shape(self):
        raise RuntimeError("no shape here")

    def __len__(self) -> int:
        raise RuntimeError("no len here")


def opaque_collate(samples: list) -> Opaque:
    return Opaque(sum(samples))


def none_collate(samples: list) -> None:
    return None


class Numbers(Dataset):
    def __init__(self, n: int = 12) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


class CheckingLoader(DataLoader):
    """Like litdata's StreamingDataLoader: checks the dataset's class in ``__iter__`` and calls
    a method only that class has."""

    def __iter__(self):
        if not isinstance(self.dataset, Numbers):
            raise TypeError(f"expected Numbers, got {type(self.dataset).__name__}")
        self.dataset.n  # noqa: B018 - the attribute must be readable through whatever we see
        yield from super().__iter__()


def record_worker_dataset_class(worker_id: int) -> None:
    """worker_init_fn: fails the worker unless its dataset is still a ``Numbers``."""
    dataset = get_worker_info().dataset
    if not isinstance(dataset, Numbers):
        raise TypeError(f"worker sees {type(dataset).__name__}, not Numbers")


class CountingLoader(DataLoader):
    """A minimal stateful loader, in the style of torchdata's StatefulDataLoader: counts the
    batches its iterator yields and resumes from a saved count."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.yielded = 0
        self.resume_from = 0

    def __iter__(self):
        skip, self.resume_from = self.resume_from, 0
        self.yielded = skip
        for index, batch in enumerate(super().__iter__()):
            if index < skip:
                continue
            self.yielded += 1
            yield batch

    def state_dict(self) -> dict:
        return {"yielded": self.yielded}

    def load_state_dict(self, state: dict) -> None:
        self.resume_from = state["yielded"]


class OwnIterLoader(DataLoader):
    """Builds its iterator without DataLoader._get_iterator: pipecheck cannot time inside."""

    def __iter__(self):
        for index in range(len(self.dataset)):
            yield self.collate_fn([self.dataset[index]])


@__import__("dataclasses").dataclass(frozen=True)
class FrozenNumbers(Dataset):
    """A frozen dataclass: its __setattr__ raises."""

    n: int = 8

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


class NoSubclasses(Numbers):
    """A class that refuses to be subclassed."""

    def __init_subclass__(cls, **kwargs):
        raise RuntimeError("final class")


class Slotted(Dataset):
    """No __dict__: pipecheck falls back to a forwarding proxy."""

    __slots__ = ("n",)

    def __init__(self, n: int = 8) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


class LongerThanItSays(IterableDataset):
    """Says it has 4 samples and yields 8: torch warns about it once ``len(loader)`` was
    called, and only then."""

    def __len__(self) -> int:
        return 4

    def __iter__(self):
        return iter(range(8))
