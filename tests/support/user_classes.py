"""Datasets and loaders as users write them, with class hooks that would notice pipecheck's
objects: ``__del__``, ``__init_subclass__`` and metaclass registries, ``__slots__``,
``__getattr__``, instance counters (for tests/integration/test_user_classes.py; importable by
spawn workers)."""

from __future__ import annotations

import os

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

CREATED: dict[str, int] = {}
"""Instances made of each class below, by class name (counted in ``__new__``, which every way of
making an instance passes: a constructor call, ``copy``, ``pickle``)."""

DELETED: dict[str, int] = {}
"""``__del__`` calls by class name."""

SUBCLASS_REGISTRY: list[type] = []
"""Every subclass of :class:`Registered` ever defined (its ``__init_subclass__``)."""

META_REGISTRY: list[type] = []
"""Every class made by :class:`RegisteringMeta`."""


class Counted:
    """Counts its instances per class and its ``__del__`` calls."""

    def __new__(cls, *args, **kwargs):
        CREATED[cls.__name__] = CREATED.get(cls.__name__, 0) + 1
        return super().__new__(cls)

    def __del__(self):
        DELETED[type(self).__name__] = DELETED.get(type(self).__name__, 0) + 1


class ClosingDataset(Counted, Dataset):
    """Reads byte ``i`` of a file it keeps open; ``__del__`` closes the file (as datasets over
    an HDF5 file, an LMDB environment or a Hugging Face arrow table do)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file = open(path, "rb")  # noqa: SIM115 - closed in __del__, the point of the test
        self.n = os.path.getsize(path)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        # pread, not seek + read: forked workers share the open file's offset, so two workers
        # seeking at once would read each other's position (an EOF read, IndexError).
        return os.pread(self.file.fileno(), 1, index)[0]

    def __del__(self) -> None:
        super().__del__()
        self.file.close()

    def __getstate__(self) -> dict:  # spawn workers get a copy that opens the file itself
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])


class Registered(Counted, Dataset):
    """A base whose subclasses register themselves (``__init_subclass__``), as plugin systems
    and config frameworks do."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        SUBCLASS_REGISTRY.append(cls)


class Squares(Registered):
    def __init__(self, n: int = 16) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index * index])


class RegisteringMeta(type):
    """A metaclass registry (every class it makes is recorded)."""

    def __init__(cls, name, bases, namespace, **kwargs) -> None:
        super().__init__(name, bases, namespace, **kwargs)
        META_REGISTRY.append(cls)
        type.__setattr__(cls, "_frozen", True)

    def __setattr__(cls, name, value) -> None:
        if cls.__dict__.get("_frozen"):
            raise AttributeError(f"{cls.__name__} is frozen: cannot set {name}")
        type.__setattr__(cls, name, value)


class MetaDataset(Counted, Dataset, metaclass=RegisteringMeta):
    def __init__(self, n: int = 16) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


class SlottedDataset(Dataset):
    """Slots all the way down from torch's ``Dataset``: no ``__dict__`` of its own to share."""

    __slots__ = ("n", "scale")

    def __init__(self, n: int = 16) -> None:
        self.n = n
        self.scale = 3

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index * self.scale


class ForwardingDataset(Dataset):
    """Forwards unknown attributes to the list it holds (``__getattr__``), which recurses on an
    instance whose ``items`` was never set."""

    def __init__(self, items: list) -> None:
        self.items = items

    def __getattr__(self, name: str):
        return getattr(self.items, name)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        return self.items[index]


class ReleasingLoader(Counted, DataLoader):
    """A DataLoader subclass whose ``__del__`` releases something the user shares with it."""

    released: list[str] = []

    def __del__(self) -> None:
        super().__del__()
        ReleasingLoader.released.append("released")


def require_user_class(worker_id: int) -> None:
    """worker_init_fn: fails the worker unless its dataset's class is one of this module's
    (never pipecheck's)."""
    dataset = get_worker_info().dataset
    if type(dataset).__module__ != __name__:
        raise TypeError(f"worker sees {type(dataset)!r}")


class Vocabulary:
    """A plain object a dataset holds (pipecheck's copy-on-read check looks one level in)."""

    def __init__(self, size: int) -> None:
        self.tokens = [f"t{i}" for i in range(size)]
        self.index = {token: i for i, token in enumerate(self.tokens)}


class TokenTable(Dataset):
    """Pure Python in ``__getitem__``: attribute loads on ``self`` are its hot path, fast while
    its attributes stay inline (CPython 3.11+) and slower once ``__dict__`` is materialized."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.vocab = Vocabulary(2000)
        self.lines = [f"t{i} t{i + 1} t{i + 2}" for i in range(n)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([self.vocab.index[t] for t in self.lines[index].split()])
