"""The shard-assignment dry run: ``pipecheck.shards(urls, num_workers=...)`` and
``pipecheck shards URLS``. It reads shard headers, replays the real split for every (rank,
worker) (:mod:`pipecheck.probes.shards`) and judges it (:mod:`pipecheck.analysis.sharding`),
without loading a sample; the changes it calls for come from :mod:`pipecheck.recommend.sharding`."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from pipecheck.errors import BadInputError
from pipecheck.probes.shards import (
    DEFAULT_MAX_COUNTED,
    PipelineShards,
    ShardStat,
    Splitter,
    expand_urls,
    pipeline_shards,
    replay_split,
    shard_stats,
)

if TYPE_CHECKING:
    from pipecheck.records import ShardingSection

SCHEMA = "pipecheck.sharding/1"
"""Schema tag of the JSON ``pipecheck shards --json`` writes (the report's ``sharding``
section with this tag added)."""


def world_size_from_environment() -> tuple[int, str]:
    """``(world size, where it came from)``: an initialized torch.distributed process group,
    else the ``WORLD_SIZE`` variable torchrun sets, else 1 (a single process)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_world_size(), "torch.distributed"
    except ImportError:  # a torch build without distributed support
        pass
    text = os.environ.get("WORLD_SIZE")
    if text:
        try:
            return max(int(text), 1), "environment (WORLD_SIZE)"
        except ValueError:
            raise BadInputError(f"WORLD_SIZE must be an integer, got {text!r}") from None
    return 1, "single process"


def shards(urls: Union[str, Sequence[str]], *, num_workers: int, world_size: Optional[int] = None,
           batch_size: Optional[int] = None, drop_last: bool = False,
           shuffle_buffer: Optional[int] = None, resampled: bool = False,
           node_splitter: Optional[Splitter] = None, worker_splitter: Optional[Splitter] = None,
           max_counted: int = DEFAULT_MAX_COUNTED) -> "ShardingSection":
    """Dry-run the shard assignment of ``urls`` (one string or a list, brace notation allowed)
    and return the
    ``sharding`` section (:func:`pipecheck.analysis.sharding.analyze_sharding`).

    ``num_workers`` (>= 0) DataLoader workers per rank; ``world_size`` (>= 1) ranks, ``None``:
    :func:`world_size_from_environment`; ``batch_size`` (>= 1) samples per batch, for batches
    per rank; ``shuffle_buffer`` the ``shuffle(n)`` stage's size in samples; splitters default
    to webdataset's ``split_by_node`` / ``split_by_worker``; ``max_counted`` shards are counted
    from their tar headers, the rest estimated by size.

    Raises :class:`BadInputError` for bad values, a missing or unreadable local shard, or a
    splitter that raises.
    """
    from pipecheck.analysis.sharding import analyze_sharding

    if num_workers < 0:
        raise BadInputError(f"num_workers must be >= 0, got {num_workers}")
    if batch_size is not None and batch_size < 1:
        raise BadInputError(f"batch_size must be >= 1, got {batch_size}")
    if shuffle_buffer is not None and shuffle_buffer < 0:
        raise BadInputError(f"shuffle_buffer must be >= 0, got {shuffle_buffer}")
    source = "given"
    if world_size is None:
        world_size, source = world_size_from_environment()
    elif world_size < 1:
        raise BadInputError(f"world size must be >= 1, got {world_size}")
    expanded = expand_urls(urls)
    stats = shard_stats(expanded, max_counted)
    assignment = replay_split(expanded, world_size, num_workers, node_splitter, worker_splitter)
    return _advised(analyze_sharding(
        stats, assignment, world_size=world_size, num_workers=num_workers,
        batch_size=batch_size, drop_last=drop_last, shuffle_buffer=shuffle_buffer,
        resampled=resampled, world_size_source=source,
        splitters={"node": _name(node_splitter, "split_by_node"),
                   "worker": _name(worker_splitter, "split_by_worker")}), stats)


def _name(function: Optional[Splitter], default: str) -> str:
    if function is None:
        return default
    return getattr(function, "__qualname__", None) or type(function).__name__


def loader_sharding(loader: Any, world_size: int = 1,
                    world_size_source: str = "single process") -> Optional["ShardingSection"]:
    """The ``sharding`` section of a webdataset ``loader`` (WebDataset / DataPipeline,
    WebLoader, or a DataLoader over one): its own shard list, splitters, workers and shuffle
    buffer, replayed for ``world_size`` ranks. ``None`` when it is not such a pipeline or the
    dry run fails (a missing local shard, a splitter that raises): the report then has no
    sharding section, and nothing else changes."""
    return setup_sharding(pipeline_shards(loader), world_size, world_size_source)


def setup_sharding(setup: Optional[PipelineShards], world_size: int = 1,
                   world_size_source: str = "single process") -> Optional["ShardingSection"]:
    """:func:`loader_sharding` from a loader's shard setup (:func:`pipeline_shards`, read once:
    the wrapper keeps that record, not the loader); ``None`` for no setup."""
    from pipecheck.analysis.sharding import analyze_sharding

    if setup is None:
        return None
    try:
        stats = shard_stats(setup.urls)
        assignment = replay_split(setup.urls, world_size, setup.num_workers,
                                  node_splitter=setup.split, worker_splitter=_unchanged)
    except BadInputError:
        return None
    return _advised(analyze_sharding(
        stats, assignment, world_size=world_size, num_workers=setup.num_workers,
        shuffle_buffer=setup.shuffle_buffer, resampled=setup.resampled,
        world_size_source=world_size_source, splitters={"chain": setup.splitter_names}), stats)


def _unchanged(urls: Any) -> Any:
    """The identity splitter: the loader's own chain already split by worker."""
    return urls


def n_shards_sharding(loader: Any, world_size: int = 1,
                      world_size_source: str = "single process") -> Optional["ShardingSection"]:
    """The ``sharding`` section for a DataLoader over a dataset exposing an integer
    ``n_shards`` (Hugging Face ``datasets.IterableDataset`` does; duck-typed, no import), split
    round-robin by rank then by worker as ``split_dataset_by_node`` and its DataLoader workers
    do: shard ``i`` goes to rank ``i % W``, then worker ``(i // W) % N``. Sample counts are not
    known, so findings count shards. ``None`` when there is no such dataset."""
    return count_sharding(dataset_shard_count(loader), world_size, world_size_source)


def dataset_shard_count(loader: Any) -> Optional[tuple[int, int]]:
    """``(n_shards, num_workers)`` of a DataLoader (or a ``WebLoader``'s first stage) whose
    dataset exposes a positive integer ``n_shards``; ``None`` otherwise."""
    from torch.utils.data import DataLoader

    inner = loader
    stages = getattr(loader, "pipeline", None)
    if isinstance(stages, list) and stages and isinstance(stages[0], DataLoader):
        inner = stages[0]
    if not isinstance(inner, DataLoader):
        return None
    count = getattr(inner.dataset, "n_shards", None)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return None
    return count, inner.num_workers


def count_sharding(shard_count: Optional[tuple[int, int]], world_size: int = 1,
                   world_size_source: str = "single process") -> Optional["ShardingSection"]:
    """:func:`n_shards_sharding` from :func:`dataset_shard_count`'s figures (read once: the
    wrapper keeps them, not the loader); ``None`` for none."""
    from pipecheck.analysis.sharding import analyze_sharding

    if shard_count is None:
        return None
    count, num_workers = shard_count
    workers = max(num_workers, 1)
    names = [f"shard {i}" for i in range(count)]
    assignment: dict[tuple[int, int], list[str]] = {
        (rank, worker): [] for rank in range(world_size) for worker in range(workers)}
    for index, name in enumerate(names):
        assignment[(index % world_size, (index // world_size) % workers)].append(name)
    stats = [ShardStat(name, None, None, False) for name in names]
    return _advised(analyze_sharding(
        stats, assignment,
        world_size=world_size, num_workers=num_workers,
        world_size_source=world_size_source,
        splitters={"chain": ["round-robin by rank", "round-robin by worker (n_shards)"]}), stats)


def _advised(section: "ShardingSection", stats: Sequence[ShardStat]) -> "ShardingSection":
    """``section`` with the changes its findings call for
    (:func:`pipecheck.recommend.sharding.sharding_recommendations`)."""
    from pipecheck.recommend.sharding import sharding_recommendations

    return dataclasses.replace(section, recommendations=sharding_recommendations(section, stats))
