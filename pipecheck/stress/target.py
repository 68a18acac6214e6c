"""Stress targets: find the user's loader factory and build a DataLoader for one configuration.

A target is ``path/to/file.py:function`` or ``package.module:function``. The function takes
DataLoader keyword arguments (``num_workers``, ``prefetch_factor``, ``persistent_workers``,
``pin_memory``, ``batch_size``; it receives only those its signature names, all of them when it
takes ``**kwargs``) and returns a ``DataLoader`` or a ``Dataset``. A Dataset is wrapped in a
DataLoader with the trial's settings; a DataLoader whose settings differ from the trial's (the
function ignored a keyword) is rebuilt from its public attributes (:func:`rebuild_loader`).

Every problem with a target raises :class:`~pipecheck.errors.BadInputError` with one line
naming it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import os
import pathlib
import sys
from typing import Any, Callable, Iterator, Optional

from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

from pipecheck.loader_settings import TORCH_DEFAULT_PREFETCH_FACTOR
from pipecheck.errors import BadInputError, one_line
from pipecheck.loader_settings import LoaderSettings

Factory = Callable[..., Any]


def split_target(target: str) -> tuple[str, str]:
    """``"a/b.py:make"`` -> ``("a/b.py", "make")``; the last ``:`` separates (Windows drives
    keep theirs). Raises :class:`BadInputError` when there is no function name."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name or not name.replace(".", "_").isidentifier():
        raise BadInputError(
            f"target {target!r} must be file.py:function or package.module:function")
    return where, name


def is_file_target(where: str) -> bool:
    """A target names a file when it ends in ``.py`` or contains a path separator."""
    return where.endswith(".py") or os.sep in where or "/" in where


def load_factory(target: str) -> Factory:
    """Import the target's module (a file by path, or a module from ``sys.path`` plus the
    current directory) and return its function. Raises :class:`BadInputError` when the file or
    module is missing, its import raises, or the name is missing or not callable."""
    where, name = split_target(target)
    module = _import_file(where) if is_file_target(where) else _import_module(where)
    obj: Any = module
    for part in name.split("."):
        if not hasattr(obj, part):
            raise BadInputError(f"{where} has no function {name!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise BadInputError(f"{where}:{name} is a {type(obj).__name__}, not a function")
    return obj


def _import_file(where: str) -> Any:
    path = pathlib.Path(where).resolve()
    if not path.is_file():
        raise BadInputError(f"no such target file: {where}")
    # The file's folder goes on sys.path and the module is registered under its stem, so
    # DataLoader workers started with spawn / forkserver can unpickle classes defined there.
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = path.stem
    existing = sys.modules.get(name)
    if existing is not None:
        if pathlib.Path(getattr(existing, "__file__", "") or "").resolve() == path:
            return existing
        name = f"_pipecheck_target_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BadInputError(f"cannot import {where}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:
        del sys.modules[name]
        raise BadInputError(f"importing {where} failed: {one_line(err)}") from err
    return module


def _import_module(where: str) -> Any:
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as err:
        if err.name and where.startswith(err.name):
            raise BadInputError(f"no module named {where!r}") from err
        raise BadInputError(f"importing {where} failed: {one_line(err)}") from err
    except Exception as err:
        raise BadInputError(f"importing {where} failed: {one_line(err)}") from err


def call_factory(factory: Factory, config: LoaderSettings, name: str = "target") -> DataLoader:
    """Call ``factory`` with the keywords it accepts and return a DataLoader with ``config``'s
    settings. Raises :class:`BadInputError` when the call raises or returns neither a
    DataLoader nor a Dataset, or when its loader cannot take ``config``'s batch size."""
    offered = dict(config.to_kwargs())
    try:
        result = factory(**_accepted(factory, offered))
    except Exception as err:
        raise BadInputError(f"{name} raised {one_line(err)}") from err
    if isinstance(result, DataLoader):
        if _matches(result, config):
            return result
        return rebuild_loader(result, config)
    if _is_dataset(result):
        kwargs = dict(offered)
        kwargs.setdefault("batch_size", 1)
        return DataLoader(result, **kwargs)
    raise BadInputError(
        f"{name} returned a {type(result).__name__}, not a DataLoader or Dataset")


def _is_dataset(obj: Any) -> bool:
    """A torch Dataset, or a map-style object (``__getitem__`` and ``__len__``) that is not
    text or bytes."""
    if isinstance(obj, (Dataset, IterableDataset)):
        return True
    if isinstance(obj, (str, bytes, bytearray)):
        return False
    return hasattr(obj, "__getitem__") and hasattr(obj, "__len__")


def _accepted(factory: Factory, offered: dict[str, Any]) -> dict[str, Any]:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: offer nothing
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return offered
    names = {p.name for p in params
             if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    return {k: v for k, v in offered.items() if k in names}


def _matches(loader: DataLoader, config: LoaderSettings) -> bool:
    if loader.num_workers != config.num_workers:
        return False
    if config.num_workers > 0 and (loader.prefetch_factor != config.prefetch_factor
                                   or bool(loader.persistent_workers)
                                   != config.persistent_workers):
        return False
    if config.in_order is not None and getattr(loader, "in_order", True) != config.in_order:
        return False
    if config.batch_size is not None and loader.batch_size != config.batch_size:
        return False
    return config.pin_memory is None or bool(loader.pin_memory) == config.pin_memory


def given_config(source: Any) -> Optional[LoaderSettings]:
    """The settings the user already runs with, as the baseline to beat: a DataLoader's own
    (``num_workers``, ``prefetch_factor``, ``persistent_workers``), or the defaults a factory's
    signature gives ``num_workers`` / ``prefetch_factor`` / ``persistent_workers`` (``None``
    when it gives ``num_workers`` no default: then there is no given configuration)."""
    if isinstance(source, DataLoader):
        workers = source.num_workers
        return LoaderSettings(workers, source.prefetch_factor if workers else None,
                           bool(source.persistent_workers) if workers else False)
    try:
        params = inspect.signature(source).parameters
    except (TypeError, ValueError):
        return None
    workers = _default(params, "num_workers")
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
        return None
    if workers == 0:
        return LoaderSettings(0)
    factor = _default(params, "prefetch_factor") or TORCH_DEFAULT_PREFETCH_FACTOR
    return LoaderSettings(workers, factor, bool(_default(params, "persistent_workers")))


def _default(params: Any, name: str) -> Any:
    """The default of parameter ``name`` (``None`` when absent or without a default)."""
    param = params.get(name)
    return None if param is None or param.default is inspect.Parameter.empty else param.default


def rebuild_loader(loader: DataLoader, config: LoaderSettings,
                   timeout_s: Optional[float] = None,
                   epoch_batches: Optional[int] = None) -> DataLoader:
    """A new DataLoader over ``loader``'s dataset, sampler, batching, collate_fn,
    worker_init_fn, generator, pin_memory, timeout, multiprocessing context and ``in_order``,
    with ``config``'s settings instead. ``timeout_s`` (seconds, > 0) replaces a zero
    ``timeout`` when the new loader has workers (torch then raises on a batch slower than that).
    ``epoch_batches`` (>= 1, map-style datasets only) ends each epoch after that many batches:
    the sampler (or batch sampler) yields only its first indices. The original loader is not
    modified."""
    kwargs: dict[str, Any] = {
        "collate_fn": loader.collate_fn,
        "worker_init_fn": loader.worker_init_fn,
        "generator": loader.generator,
        "pin_memory": bool(loader.pin_memory),
        "timeout": loader.timeout,
        "multiprocessing_context": loader.multiprocessing_context,
    }
    if getattr(loader, "pin_memory_device", ""):
        kwargs["pin_memory_device"] = loader.pin_memory_device
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    if isinstance(loader.dataset, IterableDataset):
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_size is not None:
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last,
                      sampler=loader.sampler)
    elif loader.batch_sampler is not None:
        kwargs["batch_sampler"] = loader.batch_sampler
    else:  # automatic batching disabled: one sample per "batch"
        kwargs.update(batch_size=None, sampler=loader.sampler)
    if epoch_batches is not None and not isinstance(loader.dataset, IterableDataset):
        if "batch_sampler" in kwargs:
            kwargs["batch_sampler"] = FirstIndices(kwargs["batch_sampler"], epoch_batches)
        else:
            per_batch = config.batch_size or kwargs.get("batch_size") or 1
            kwargs["sampler"] = FirstIndices(kwargs["sampler"], epoch_batches * per_batch)
    if config.batch_size is not None and kwargs.get("batch_size") is None:
        raise BadInputError(
            "cannot set batch_size on this loader: it batches with its own batch_sampler or "
            "inside the dataset (batch_size=None); make the target take batch_size")
    kwargs.update(config.to_kwargs())
    if config.num_workers == 0:
        kwargs["multiprocessing_context"] = None
        kwargs["timeout"] = 0
    elif timeout_s is not None and not kwargs["timeout"]:
        kwargs["timeout"] = timeout_s
    return DataLoader(loader.dataset, **kwargs)


class FirstIndices(Sampler):
    """The first ``count`` items (indices, or index lists for a batch sampler) of ``sampler``,
    drawn afresh each epoch, so a shuffling sampler still shuffles."""

    def __init__(self, sampler: Any, count: int) -> None:
        self.sampler, self.count = sampler, count

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.sampler), self.count)

    def __len__(self) -> int:
        try:
            return min(len(self.sampler), self.count)
        except TypeError:  # a sampler without a length
            return self.count


