"""Per-stage timing of iterable pipelines: webdataset ``DataPipeline`` stages (in workers and in
the main process) and user-marked stages (``with pipecheck.stage("decode"): ...``).

Pipeline stages are pulled in a chain: stage ``i``'s ``next()`` runs inside stage ``i+1``'s.
Each stage's output iterator is wrapped by :class:`_TimedIterator`, which adds the wall time of
every ``next()`` to the stage's *inclusive* time and counts the items it yields; a stage's
exclusive time is its inclusive time minus its upstream's (:mod:`pipecheck.analysis.stages`).
Two ``perf_counter_ns`` reads per item per stage.

User stages (:func:`stage`) keep exclusive time directly: a stage entered inside another pauses
the outer one.

Every process keeps its totals in memory (:class:`StageTotals`). Workers write theirs to
``stages-PID.json`` in the probe's folder at most every :data:`FLUSH_INTERVAL_S` seconds, when
their pipeline ends and when the worker exits (``multiprocessing.util.Finalize``, which
DataLoader workers run on a clean shutdown); a killed worker loses at most its last interval.
The folder reaches user stages in workers through the :data:`STAGE_DIR_ENV` variable, which
fork, spawn and forkserver children inherit.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from typing import Any, Iterator, Optional

from pipecheck import _owned

STAGE_DIR_ENV = "PIPECHECK_STAGE_DIR"
"""Environment variable naming the folder where worker processes write their stage totals."""

FLUSH_INTERVAL_S = 0.5
"""Least seconds between two writes of a worker's totals (pipecheck's choice: a write costs
tens of microseconds, so at this interval the cost is negligible; a killed worker loses at most
this much)."""


class StageTotals:
    """One process's stage totals, in nanoseconds and item counts, keyed by stage key
    (``"pipeline:3:decode"`` for pipeline stage 3, ``"user:decode"`` for a user stage)."""

    def __init__(self, folder: Optional[str]) -> None:
        self.pid = os.getpid()
        self.folder = folder
        self.order: list[str] = []
        self.names: dict[str, str] = {}
        self.upstream: dict[str, Optional[str]] = {}
        self.inclusive_ns: dict[str, int] = {}
        self.exclusive_ns: dict[str, int] = {}
        self.items: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        self._last_flush = time.perf_counter()
        self._lock = threading.Lock()
        self._local = threading.local()
        if folder is not None:
            _register_exit_flush(self)

    def declare(self, key: str, name: str, upstream: Optional[str]) -> None:
        """Make ``key`` known (idempotent): its display ``name`` and the key of the stage that
        feeds it (``None`` for a source or a user stage)."""
        if key not in self.names:
            with self._lock:
                if key not in self.names:
                    self.order.append(key)
                    self.names[key] = name
                    self.upstream[key] = upstream
                    self.inclusive_ns[key] = self.exclusive_ns[key] = self.items[key] = 0
                    self.bytes[key] = 0

    def user_stack(self) -> list[list[Any]]:
        """This thread's open user stages: ``[key, resumed_ns, entered_ns]`` each."""
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def maybe_flush(self) -> None:
        """Write the totals if :data:`FLUSH_INTERVAL_S` passed since the last write."""
        if self.folder is not None and time.perf_counter() - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush()

    def snapshot(self) -> dict[str, Any]:
        """The totals as a JSON-ready dict (also the file format)."""
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        return {"pid": self.pid, "worker_id": None if info is None else info.id,
                "stages": [{"key": k, "name": self.names[k], "upstream": self.upstream[k],
                            "inclusive_ns": self.inclusive_ns[k],
                            "exclusive_ns": self.exclusive_ns[k], "items": self.items[k],
                            "bytes": self.bytes.get(k, 0)}
                           for k in list(self.order)]}

    def flush(self) -> None:
        """Write the totals to ``stages-PID.json`` atomically (no-op without a folder; an
        unwritable folder loses this write, never the pipeline)."""
        self._last_flush = time.perf_counter()
        if self.folder is None:
            return
        path = os.path.join(self.folder, f"stages-{self.pid}.json")
        try:
            fd, temp = tempfile.mkstemp(dir=self.folder, prefix=".stages-", suffix=".tmp")
        except OSError:
            return
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(self.snapshot(), handle)
            os.replace(temp, path)
        except OSError:  # a full disk: drop the half-written temp file, keep the last write
            try:
                os.unlink(temp)
            except OSError:
                pass


_TOTALS: dict[Optional[str], StageTotals] = {}


def totals(folder: Optional[str]) -> StageTotals:
    """This process's :class:`StageTotals` for ``folder`` (a new one after a fork)."""
    current = _TOTALS.get(folder)
    if current is None or current.pid != os.getpid():
        current = _TOTALS[folder] = StageTotals(folder)
    return current


def _register_exit_flush(stage_totals: StageTotals) -> None:
    import multiprocessing.util

    if multiprocessing.parent_process() is not None:  # a worker: flush when it exits
        multiprocessing.util.Finalize(None, stage_totals.flush, exitpriority=10)


# -- pipeline stages -----------------------------------------------------------------------


def stage_name(stage: Any) -> str:
    """A name a user recognises for a webdataset pipeline stage: a function's name; for
    ``map(f)`` the name of ``f``; for ``map_dict(jpg=f)`` ``map_dict(jpg=f)``; for decode
    ``decode``; for other filters their own name
    without webdataset's leading underscore (``shuffle``, ``batched``, ``to_tuple``); for
    objects their class name (``SimpleShardList``)."""
    function = getattr(stage, "f", None)
    if callable(function) and hasattr(stage, "args"):  # webdataset FilterFunction
        name = getattr(function, "__name__", "filter").lstrip("_")
        args = getattr(stage, "args", ())
        keywords = getattr(stage, "kw", None) or {}
        if name == "map_dict" and keywords:  # map_dict(jpg=augment, ...): name the functions
            parts = [f"{key}={_callable_name(value)}" for key, value in keywords.items()
                     if key != "handler" and callable(value)]
            if parts:
                return f"map_dict({', '.join(parts)})"
        if name in ("map", "map_dict", "map_tuple") and args:
            target = args[0]
            if type(target).__name__ == "Decoder":
                return "decode"
            inner = getattr(target, "__name__", None)
            if inner and inner != "<lambda>":
                return inner
        return name
    name = getattr(stage, "__name__", None)
    if name and name != "<lambda>":
        return name
    return type(stage).__name__


def _callable_name(function: Any) -> str:
    """A function's name, or an instance's class name (a callable object such as an augment)."""
    name = getattr(function, "__name__", None)
    return name if name and name != "<lambda>" else type(function).__name__


class _TimedIterator:
    """Times each ``next()`` of ``inner`` as stage ``key``'s inclusive time."""

    __slots__ = ("inner", "key", "totals")

    def __init__(self, inner: Iterator[Any], key: str, stage_totals: StageTotals) -> None:
        self.inner = inner
        self.key = key
        self.totals = stage_totals

    def __iter__(self) -> "_TimedIterator":
        return self

    def __next__(self) -> Any:
        totals_ = self.totals
        started = time.perf_counter_ns()
        try:
            item = next(self.inner)
        except StopIteration:
            totals_.inclusive_ns[self.key] += time.perf_counter_ns() - started
            totals_.flush()
            raise
        totals_.inclusive_ns[self.key] += time.perf_counter_ns() - started
        totals_.items[self.key] += 1
        totals_.maybe_flush()
        return item


OPENER_STAGES = ("StreamingOpen", "url_opener", "cached_url_opener", "FileCache")
"""webdataset stages that open shard streams: the shard files they open are counted as the
pipeline's bytes read (their sizes; a shard read only in part still counts whole)."""


class _OpeningIterator(_TimedIterator):
    """A timed opener stage that also adds each opened local shard's size to its bytes."""

    __slots__ = ()

    def __next__(self) -> Any:
        item = _TimedIterator.__next__(self)
        if isinstance(item, dict):
            path = item.get("local_path") or item.get("url")
            if isinstance(path, str) and "://" not in path and not path.startswith("pipe:"):
                try:
                    self.totals.bytes[self.key] += os.path.getsize(path.removeprefix("file:"))
                except OSError:
                    pass
        return item


_pipelines: Any = None  # IdentityWeakMap: pipeline object -> (folder, prefix), made on first use
_original_iterator1: Any = None


def _timed_iterator1(self: Any) -> Any:
    """webdataset's ``DataPipeline.iterator1`` while pipecheck times pipelines: a registered
    pipeline's stages are chained exactly as webdataset chains them (its own ``invoke``), each
    stage's output timed; any other pipeline runs webdataset's own method."""
    entry = _pipelines.get(self) if _pipelines is not None else None
    if entry is None:
        return _original_iterator1(self)
    folder, prefix = entry
    stage_totals = totals(folder)
    source: Any = None
    upstream: Optional[str] = None
    for index, stage in enumerate(self.pipeline):
        name = stage_name(stage)
        key = f"{prefix}:{index}:{name}"
        stage_totals.declare(key, name, upstream)
        source = self.invoke(stage) if index == 0 else self.invoke(stage, source)
        kind = _OpeningIterator if name in OPENER_STAGES else _TimedIterator
        source = kind(iter(source), key, stage_totals)
        upstream = key
    return source


def time_pipeline_stages(pipeline: Any, folder: str, prefix: str) -> bool:
    """Time the stages of ``pipeline`` (a webdataset ``DataPipeline``: ``WebDataset``,
    ``WebLoader``, ...) in this process whenever it is iterated, into ``folder``'s totals, keys
    ``PREFIX:INDEX:NAME``. The pipeline object is not changed or copied: it is registered by
    identity, weakly, and webdataset's ``DataPipeline.iterator1`` (which chains the stages at
    each epoch's start) is replaced once per process by :func:`_timed_iterator1`. False (and
    nothing done) for anything else, or where webdataset is missing or differs."""
    global _pipelines, _original_iterator1
    if not isinstance(getattr(pipeline, "pipeline", None), list):
        return False
    try:
        from webdataset.pipeline import DataPipeline
    except ImportError:
        return False
    if not isinstance(pipeline, DataPipeline) or not callable(
            getattr(DataPipeline, "iterator1", None)) or not callable(
            getattr(DataPipeline, "invoke", None)):
        return False
    if _pipelines is None:
        from pipecheck._identity import IdentityWeakMap

        _pipelines = IdentityWeakMap()
    try:
        _pipelines.set(pipeline, (folder, prefix))
    except TypeError:  # not weakly referenceable
        return False
    if _original_iterator1 is None:
        _original_iterator1 = DataPipeline.__dict__["iterator1"]
        type.__setattr__(DataPipeline, "iterator1", _timed_iterator1)
    return True


def untime_pipeline_stages(pipeline: Any) -> None:
    """Stop timing ``pipeline``'s stages (idempotent)."""
    if _pipelines is not None:
        _pipelines.pop(pipeline)


# -- user stages ---------------------------------------------------------------------------


class stage:  # noqa: N801 - used like a function: ``with pipecheck.stage("decode"):``
    """Time a block or function as pipeline stage ``name``, in the main process or a worker.

    ``with pipecheck.stage("decode"): ...`` or ``@pipecheck.stage("decode")`` on a function.
    Time is exclusive: a stage entered inside another pauses the outer one. Each entry counts
    as one item in and out. Totals reach the report when the code runs under
    ``pipecheck.wrap`` (workers write them to the folder in :data:`STAGE_DIR_ENV`); elsewhere
    they are kept in memory and cost two clock reads per entry. Not for generators (a
    decorated generator function is timed only while it creates the generator).
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"pipecheck.stage() needs a non-empty name, got {name!r}")
        self.name = name
        self.key = f"user:{name}"

    def __enter__(self) -> "stage":
        stage_totals = totals(os.environ.get(STAGE_DIR_ENV))
        stage_totals.declare(self.key, self.name, None)
        now = time.perf_counter_ns()
        stack = stage_totals.user_stack()
        if stack:  # pause the enclosing stage
            outer = stack[-1]
            stage_totals.exclusive_ns[outer[0]] += now - outer[1]
        stack.append([self.key, now, now])
        return self

    def __exit__(self, *exc: Any) -> None:
        now = time.perf_counter_ns()
        stage_totals = _entered_totals(self.key)
        if stage_totals is None:  # entered under a wrap() run that has closed since: dropped
            return
        stack = stage_totals.user_stack()
        key, resumed, entered = stack.pop()
        stage_totals.exclusive_ns[key] += now - resumed
        stage_totals.inclusive_ns[key] += now - entered
        stage_totals.items[key] += 1
        if stack:
            stack[-1][1] = now  # the enclosing stage resumes
        stage_totals.maybe_flush()

    def __call__(self, function: Any) -> Any:
        import functools

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with stage(self.name):
                return function(*args, **kwargs)

        return timed


def _entered_totals(key: str) -> Optional[StageTotals]:
    """The totals holding this thread's open user stage ``key``: those of the folder named in
    :data:`STAGE_DIR_ENV` now, or, when a ``pipecheck.wrap`` run started or closed inside the
    block (the variable changed), the ones it was entered under; ``None`` when those are gone
    (their run closed)."""
    current = totals(os.environ.get(STAGE_DIR_ENV))
    stack = current.user_stack()
    if stack and stack[-1][0] == key:
        return current
    for candidate in list(_TOTALS.values()):
        if candidate.pid == os.getpid():
            stack = candidate.user_stack()
            if stack and stack[-1][0] == key:
                return candidate
    return None


def read_stage_files(folder: str) -> list[dict[str, Any]]:
    """Every worker's last written totals in ``folder`` (unreadable files skipped)."""
    snapshots = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    for name in names:
        if not (name.startswith("stages-") and name.endswith(".json")):
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                snapshots.append(json.load(handle))
        except (OSError, ValueError):
            continue
    return snapshots


# -- the probe wrap() drives -----------------------------------------------------------------


FOLDER_PREFIX = "pipecheck-stages."


def _stage_folder() -> tuple[int, str]:
    """A fresh folder for worker totals in the temp dir (not ``/dev/shm``, which is the
    DataLoader's room for its queues and shared tensors; a worker writes its few hundred bytes
    at most every :data:`FLUSH_INTERVAL_S`), owned by this process (:mod:`pipecheck._owned`;
    folders of killed runs are swept first): its descriptor and path."""
    base = tempfile.gettempdir()
    _owned.sweep(base, FOLDER_PREFIX)
    return _owned.create_folder(base, FOLDER_PREFIX)


class StageProbe:
    """Per-stage timing for one :func:`pipecheck.wrap` run: times the webdataset stages of a
    DataLoader's ``DataPipeline`` dataset (in its workers, registered there by the fetcher
    factory: :func:`pipecheck.probes.worker_side.register_stage_dataset`), a ``WebLoader``'s
    main-process stages (:meth:`time_main_pipeline`), and every :class:`stage` block, in
    workers and in the main process.

    While open, :data:`STAGE_DIR_ENV` names its folder (the previous value comes back on
    :meth:`close`). Never modifies or copies the user's objects. The folder belongs to the
    process that made the probe: a forked child closing its copy leaves it alone.
    """

    def __init__(self) -> None:
        self._folder_fd: Optional[int]
        self._folder_fd, self.folder = _stage_folder()
        self._owner = os.getpid()
        self._saved_env = os.environ.get(STAGE_DIR_ENV)
        os.environ[STAGE_DIR_ENV] = self.folder
        self._final: Optional[list[dict[str, Any]]] = None
        self._timed: list[Any] = []  # weak references to the pipelines time_main_pipeline took

    def time_main_pipeline(self, pipeline: Any) -> bool:
        """Time the stages of ``pipeline`` (a ``WebLoader`` / ``DataPipeline`` run in this
        process) while the probe is open; False when it is not a webdataset pipeline."""
        import weakref

        if not time_pipeline_stages(pipeline, self.folder, "main"):
            return False
        self._timed.append(weakref.ref(pipeline))
        return True

    name = "stages"

    def start(self) -> None:
        """Nothing to start: the folder exists from construction."""

    def stop(self) -> None:
        """:meth:`close`."""
        self.close()

    def record(self) -> list[dict[str, Any]]:
        """Every process's totals so far: the workers' files and this process's own."""
        if self._final is not None:
            return list(self._final)
        found = [s for s in read_stage_files(self.folder) if s.get("pid") != os.getpid()]
        own = totals(self.folder)
        if own.order:
            found.append(own.snapshot())
        return found

    def close(self) -> None:
        """Keep the final totals, restore the environment variable and remove the folder (in
        the process that made the probe only)."""
        if self._final is not None or os.getpid() != self._owner:
            return
        self._final = self.record()
        for ref in self._timed:
            pipeline = ref()
            if pipeline is not None:
                untime_pipeline_stages(pipeline)
        self._timed = []
        _TOTALS.pop(self.folder, None)  # this run's in-memory totals, kept in _final now
        # Runs may close out of order: only undo our own setting, and never point back at a
        # folder an earlier run has removed.
        if os.environ.get(STAGE_DIR_ENV) == self.folder:
            if self._saved_env is not None and os.path.isdir(self._saved_env):
                os.environ[STAGE_DIR_ENV] = self._saved_env
            else:
                os.environ.pop(STAGE_DIR_ENV, None)
        self.remove_folder()

    def remove_folder(self) -> None:
        """Delete the folder now (idempotent; takes no lock, for a SIGTERM that ends the
        process: :mod:`pipecheck.autosave`; only in the process that made it). Workers' later
        writes fail silently."""
        if os.getpid() != self._owner:
            return
        fd, self._folder_fd = self._folder_fd, None
        _owned.remove(fd, self.folder)
