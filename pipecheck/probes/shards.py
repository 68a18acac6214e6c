"""Shard facts for the shard-assignment dry run: which shards exist, how many samples each holds,
and which (rank, worker) each one goes to under the real splitter functions.

Measurement only (no opinions; :mod:`pipecheck.analysis.sharding` judges):

* :func:`expand_urls` expands brace notation (``data-{000..099}.tar``) as webdataset does
  (the ``braceexpand`` package webdataset itself uses);
* :func:`count_samples` reads a local tar's headers (not its data) and counts samples the way
  webdataset groups files: consecutive members sharing the key ``base_plus_ext`` gives (the
  path up to the first dot of the file name), metadata members (``__*__``) left out;
* :func:`shard_stats` counts up to ``max_counted`` shards spread over the list and estimates the
  rest from their size at the counted shards' samples per byte;
* :func:`replay_split` runs the node and worker splitters for every (rank, worker) with
  webdataset's own environment override (``RANK``/``WORLD_SIZE``/``WORKER``/``NUM_WORKERS``,
  read by ``webdataset.utils.pytorch_worker_info``), so webdataset's ``split_by_node`` /
  ``split_by_worker`` and user splitters built on them split exactly as in training.
"""

from __future__ import annotations

import contextlib
import os
import re
import tarfile
from dataclasses import dataclass
from itertools import islice
from typing import Callable, Iterable, Iterator, Optional, Sequence, Union

from pipecheck.errors import BadInputError, one_line

Splitter = Callable[[Iterable[str]], Iterable[str]]
"""A webdataset-style splitter: takes the shard URLs, yields this rank's (or worker's) share."""

DEFAULT_MAX_COUNTED = 16
"""Shards whose samples are counted by reading tar headers; others are estimated by size
(pipecheck's choice: header reads cost one seek per member, so counting thousands of remote
or large shards would dominate a dry run)."""

_WORKER_ENV = ("RANK", "WORLD_SIZE", "WORKER", "NUM_WORKERS")


@dataclass(frozen=True)
class ShardStat:
    """One shard: ``samples`` counted (``counted=True``) or estimated from ``size_bytes``
    (``None`` when neither was possible, e.g. a remote URL)."""

    url: str
    size_bytes: Optional[int]
    samples: Optional[float]
    counted: bool


MAX_SHARD_URLS = 1_000_000
"""Most shard URLs :func:`expand_urls` yields: far above real datasets (LAION-5B is about
230,000 shards), and it stops ``{0..999999999999}`` from filling memory."""

_INT_RANGE = re.compile(r"\{(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?\}")
"""An integer range in brace notation, ``{000..099}`` or ``{0..100..2}`` (braceexpand's)."""


def expand_urls(urls: Union[str, Sequence[str]]) -> list[str]:
    """Every URL (one string or a list) with its brace notation expanded, in order. Raises
    :class:`BadInputError` when there is none, when braces are unbalanced, or when they expand
    to more than :data:`MAX_SHARD_URLS`."""
    import braceexpand

    if isinstance(urls, str):
        urls = [urls]
    expanded: list[str] = []
    for url in urls:
        for low, high, step in _INT_RANGE.findall(url):  # braceexpand lists each range whole
            if abs(int(high) - int(low)) // max(int(step or 1), 1) >= MAX_SHARD_URLS:
                raise BadInputError(f"shard URLs expand to more than {MAX_SHARD_URLS:,} shards")
        try:
            expanded += islice(braceexpand.braceexpand(url), MAX_SHARD_URLS + 1 - len(expanded))
        except braceexpand.UnbalancedBracesError:  # type: ignore[attr-defined]  # not in its __all__
            raise BadInputError(f"unbalanced braces in shard URL {url!r}") from None
        if len(expanded) > MAX_SHARD_URLS:
            raise BadInputError(f"shard URLs expand to more than {MAX_SHARD_URLS:,} shards")
    if not expanded:
        raise BadInputError("no shard URLs given")
    return expanded


def local_path(url: str) -> Optional[str]:
    """The file path of a local shard (``file:`` prefix accepted); ``None`` for other
    schemes (``pipe:``, ``http://``, ``s3://``, ...)."""
    if url.startswith("file:"):
        url = url[len("file:"):]
    if "://" in url or url.startswith("pipe:"):
        return None
    return url


def count_samples(path: str) -> int:
    """Samples in the tar at ``path``, grouped as webdataset groups them (module docstring).
    Raises :class:`BadInputError` when the file is missing or not a tar archive."""
    previous: Optional[str] = None
    samples = 0
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                if not member.isreg():
                    continue
                key = _sample_key(member.name)
                if key is not None and key != previous:
                    samples += 1
                    previous = key
    except FileNotFoundError:
        raise BadInputError(f"no such shard: {path}") from None
    except (tarfile.TarError, EOFError, OSError) as err:
        raise BadInputError(f"cannot read shard {path}: {err}") from None
    return samples


def _sample_key(name: str) -> Optional[str]:
    from webdataset.tariterators import base_plus_ext

    base = os.path.basename(name)
    if base.startswith("__") and base.endswith("__"):
        return None  # webdataset metadata member, not part of a sample
    key, _ = base_plus_ext(name)
    return key


def shard_stats(urls: Sequence[str], max_counted: int = DEFAULT_MAX_COUNTED) -> list[ShardStat]:
    """Sizes and sample counts of ``urls`` (module docstring). ``max_counted >= 1``. Raises
    :class:`BadInputError` on a missing local shard or one that is not a tar."""
    if max_counted < 1:
        raise BadInputError(f"max_counted must be at least 1, got {max_counted}")
    paths = [local_path(u) for u in urls]
    sizes: list[Optional[int]] = []
    for url, path in zip(urls, paths):
        if path is None:
            sizes.append(None)
            continue
        try:
            sizes.append(os.path.getsize(path))
        except OSError:
            raise BadInputError(f"no such shard: {url}") from None
    local = [i for i, p in enumerate(paths) if p is not None]
    step = max(1, len(local) / max_counted)
    chosen = {local[int(k * step)] for k in range(min(max_counted, len(local)))}
    counts = {i: count_samples(paths[i]) for i in sorted(chosen)}  # type: ignore[arg-type]
    counted_bytes = sum(sizes[i] or 0 for i in counts)
    per_byte = sum(counts.values()) / counted_bytes if counted_bytes else None
    stats = []
    for i, url in enumerate(urls):
        if i in counts:
            stats.append(ShardStat(url, sizes[i], float(counts[i]), True))
        elif (size := sizes[i]) is not None and per_byte is not None:
            stats.append(ShardStat(url, size, size * per_byte, False))
        else:
            stats.append(ShardStat(url, sizes[i], None, False))
    return stats


@contextlib.contextmanager
def _as_worker(rank: int, world_size: int, worker: int, num_workers: int) -> Iterator[None]:
    """Set webdataset's rank / worker environment override, restoring the old values after."""
    saved = {name: os.environ.get(name) for name in _WORKER_ENV}
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), WORKER=str(worker),
                      NUM_WORKERS=str(num_workers))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def replay_split(urls: Sequence[str], world_size: int, num_workers: int,
                 node_splitter: Optional[Splitter] = None,
                 worker_splitter: Optional[Splitter] = None
                 ) -> dict[tuple[int, int], list[str]]:
    """The shards each ``(rank, worker)`` reads: ``worker_splitter(node_splitter(urls))`` run
    under that rank and worker (module docstring). ``None`` splitters are webdataset's
    ``split_by_node`` / ``split_by_worker``; ``num_workers=0`` (loading in the main process) is
    one worker, id 0. Not thread-safe: it sets process environment variables while it runs.
    Raises :class:`BadInputError` for ``world_size < 1`` or ``num_workers < 0``, or when a
    splitter raises (its error named)."""
    from webdataset.shardlists import split_by_node, split_by_worker

    if world_size < 1 or num_workers < 0:
        raise BadInputError(f"world size must be >= 1 and workers >= 0, got {world_size} and "
                            f"{num_workers}")
    node_splitter = node_splitter or split_by_node
    worker_splitter = worker_splitter or split_by_worker
    workers = max(num_workers, 1)
    assignment = {}
    for rank in range(world_size):
        for worker in range(workers):
            with _as_worker(rank, world_size, worker, workers):
                try:
                    assignment[(rank, worker)] = list(
                        islice(worker_splitter(node_splitter(iter(urls))), len(urls) + 1))
                except Exception as err:
                    raise BadInputError(
                        f"the shard splitter raised {one_line(err)}") from None
    return assignment


# -- the shard setup of a webdataset loader ------------------------------------------------

_SAMPLE_LEVEL = ("tar_file_expander", "group_by_keys", "tarfile_to_samples", "tarfile_samples")
"""Stage names after which a pipeline works on samples rather than shard URLs."""


@dataclass(frozen=True)
class PipelineShards:
    """What a webdataset loader's stages say about its shards: the URL list, the leading
    splitter functions (``split`` chains them), ``num_workers`` of its DataLoader (0 without
    one), the sample-level ``shuffle`` buffer (``None``: no shuffle stage) and whether shards
    are resampled."""

    urls: list[str]
    split: Splitter
    splitter_names: list[str]
    num_workers: int
    shuffle_buffer: Optional[int]
    resampled: bool


def webdataset_stages(loader: object) -> tuple[Optional[list], int]:
    """The webdataset stage list behind ``loader`` (a ``DataPipeline`` / ``WebDataset``, a
    ``WebLoader``, or a DataLoader over one) and its DataLoader's ``num_workers``."""
    from torch.utils.data import DataLoader

    stages = getattr(loader, "pipeline", None)
    if isinstance(stages, list) and stages and isinstance(stages[0], DataLoader):
        loader = stages[0]  # a WebLoader: its first stage is the DataLoader
    if isinstance(loader, DataLoader):
        stages, workers = getattr(loader.dataset, "pipeline", None), loader.num_workers
    else:
        workers = 0
    return (stages if isinstance(stages, list) else None), workers


def pipeline_shards(loader: object) -> Optional[PipelineShards]:
    """The shard setup of ``loader`` (see :class:`PipelineShards`); ``None`` when it is not a
    webdataset pipeline starting from a list of URLs. The splitters are the plain functions
    right after the shard list (``split_by_node``, ``split_by_worker``, ``single_node_only``,
    or the user's), replayed as they are."""
    import inspect

    from pipecheck.probes.stages import stage_name

    stages, workers = webdataset_stages(loader)
    if not stages:
        return None
    urls = getattr(stages[0], "urls", None)
    if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
        return None
    splitters = []
    for stage in stages[1:]:
        if not inspect.isfunction(stage):
            break
        splitters.append(stage)
    buffer = None
    samples_seen = False
    for stage in stages:
        name = stage_name(stage)
        samples_seen = samples_seen or name in _SAMPLE_LEVEL
        args = getattr(stage, "args", ())
        if samples_seen and name == "shuffle" and args and isinstance(args[0], int):
            buffer = args[0]
            break

    def split(src: Iterable[str]) -> Iterable[str]:
        for splitter in splitters:
            src = splitter(src)
        return src

    return PipelineShards(list(urls), split, [stage_name(f) for f in splitters], workers, buffer,
                          "Resampled" in type(stages[0]).__name__)
