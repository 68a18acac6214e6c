"""Which WebDataset shards this rank's DataLoader workers read, for the per-rank comparison.

A webdataset pipeline (``WebDataset(urls, ...)`` or ``DataPipeline(SimpleShardList(urls),
split_by_node, split_by_worker, ...)``) starts with a shard list stage holding the URLs,
followed by the splitter functions that pick each rank's and worker's share. The stages from
the shard list up to the first stage that is not a plain function are replayed for this rank
and each of its workers under webdataset's own environment override (as
:func:`pipecheck.probes.shards.replay_split` does for every rank), so the split is the one
training uses, without reading a shard.

Measurement only; ``None`` whenever the loader is not such a pipeline (resampled shards, no
URL list, a splitter that raises): then the report has no shard column, nothing fails.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Optional


def rank_shards(loader: Any, rank: int, world_size: int) -> Optional[list[list[str]]]:
    """The shard URLs each DataLoader worker of rank ``rank`` (0 to ``world_size - 1``) reads,
    one list per worker (one list with ``num_workers=0``); ``None`` when ``loader`` is not a
    webdataset pipeline over a fixed URL list (see the module docstring)."""
    from pipecheck.probes.shards import pipeline_shards

    return setup_rank_shards(pipeline_shards(loader), rank, world_size)


def setup_rank_shards(setup: Any, rank: int, world_size: int) -> Optional[list[list[str]]]:
    """:func:`rank_shards` from a loader's shard setup
    (:func:`pipecheck.probes.shards.pipeline_shards`, read once: the wrapper keeps that record,
    not the loader); ``None`` for no setup."""
    from pipecheck.probes.shards import _as_worker

    if setup is None or setup.resampled:
        return None
    urls, split = setup.urls, setup.split
    workers = max(setup.num_workers, 1)
    shards = []
    for worker in range(workers):  # this rank only: the others replay their own share
        with _as_worker(rank, world_size, worker, workers):
            try:
                shards.append(list(islice(split(iter(urls)), len(urls) + 1)))
            except Exception:  # e.g. webdataset's single_node_only under several ranks
                return None
    return shards
