"""The online driver: ``pipecheck.wrap(loader)`` inside the real training loop.

The wrapper is invisible: iterating it yields the loader's batches in the same order, an
exception from a batch passes through unchanged and the same iterator goes on with the epoch,
and everything else a user calls (``len()``, ``.dataset``, ``.sampler.set_epoch(...)``,
``state_dict()``, attribute writes) reaches the loader that yields the batches
(:class:`WrappedLoader`). Behind it:

* the consumer probe times ``next()`` (wait) and the gaps between calls (compute);
* for a ``DataLoader`` (also the one inside a webdataset ``WebLoader``), the worker probe times
  fetch and collate inside each worker: the iterated loader is a private copy of the user's,
  whose iterators get a timed twin of the dataset and a timed ``collate_fn``
  (:func:`_iterated_loader`); the user's loader object is never modified;
* the host probe samples CPU, memory and IO of the main process and its workers with psutil;
* with ``stacks=True``, py-spy samples the hot stacks of the main process and the workers for a
  bounded window (workers opt in to being traced from a ``worker_init_fn`` wrapper);
* with CUDA available, the device probe times GPU idle around ``next()`` with CUDA events;
* at start, ``/dev/shm``'s free space and the dataset's largest Python containers are noted
  (for the ``shm-headroom`` and ``memory-growth`` findings).

``report()`` works at any moment: mid-epoch, after a worker raised, after Ctrl-C.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import multiprocessing
import os
import weakref
from typing import Any, Callable, Iterator, Optional

from torch.utils.data import BatchSampler, DataLoader, default_collate

from . import _clock
from .environment import collect_environment
from .probes.base import Probe
from .probes.batches import SampleCounter, TokenCounter
from .probes.consumer import ConsumerProbe, FixedBatches
from .probes.dataset_memory import largest_containers, shared_memory_record
from .probes.device import DeviceProbe, cuda_backend
from .probes.hol import HeadOfLineProbe
from .probes.host import HostProbe
from .probes.rank_shards import rank_shards
from .probes.stacks import DEFAULT_RATE_HZ, DEFAULT_WINDOW_S, PtracerOptIn, StackSampler
from ._torch_compat import IteratorHookUnavailable, private_copy, quiet_len, \
    register_in_place, substitute_while_iterating, substitutes_of
from .probes.stages import StageProbe
from .probes import workers as workers_probe
from .probes.workers import WorkerProbe, WorkerProbeUnsupported, scaled_to
from .autosave import AutoSave
from .distributed import DEFAULT_GATHER_TIMEOUT_S, current_rank
from .records import LoaderConfig, RankInfo, RunRecord, ShardingSection
from .shards import loader_sharding, n_shards_sharding


FAST_BATCH_S = workers_probe.FAST_BATCH_S
"""Production time per batch under which the ``num_workers=0`` probe times only some epochs
(and, inside those, one batch in :data:`pipecheck.probes.workers.MAIN_SAMPLE_EVERY`)."""

PSS_INTERVAL_S = 5.0
"""Seconds between PSS reads of every process: one ``memory_full_info`` costs about 7 ms of
CPU on a torch worker (measured here), so reading 3 processes at 1 Hz took ~1% of a core; and
new workers are not read on first sight, which without persistent_workers cost 2 reads per worker
per epoch (half of the sampler's CPU in ``benchmarks/overhead.py``)."""

EARLY_PSS_INTERVAL_S = 2.0
"""Seconds between PSS/USS reads during the first :data:`EARLY_PSS_WINDOW_S` of a run, so the
memory-growth test (7 readings: 5 after its warm-up third) can judge a run from about 15 s.
One read cost 1.0 ms of CPU on a 218 MiB torch process and 3.0 ms on a 1 GiB one (``python
benchmarks/memory.py uss-cost``): 3 such processes every 2 s take under 0.5% of a core."""

EARLY_PSS_WINDOW_S = 30.0
"""Seconds from the first ``iter()`` during which USS is read every :data:`EARLY_PSS_INTERVAL_S`
(then every ``memory_interval_s``)."""

FAST_BATCH_EPOCH_STRIDE = 8
"""For such fast batches, time one epoch in this many (always the first)."""


def _describe_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_iterable(loader: Any) -> None:
    if isinstance(loader, (str, bytes, bytearray)):
        raise TypeError(
            f"pipecheck.wrap() needs a DataLoader or an iterable of batches; got a "
            f"{type(loader).__name__} ({_describe_value(loader)})")
    if not (hasattr(loader, "__iter__") or hasattr(loader, "__getitem__")):
        raise TypeError(
            f"pipecheck.wrap() needs a DataLoader or an iterable of batches; got "
            f"{type(loader).__name__} ({_describe_value(loader)}), which is not iterable")


def _inner_dataloader(loader: Any) -> Optional[DataLoader]:
    """The DataLoader that produces the batches: the loader itself, or the first stage of a
    webdataset ``DataPipeline`` / ``WebLoader`` (whose ``pipeline`` is a plain list)."""
    if isinstance(loader, DataLoader):
        return loader
    stages = getattr(loader, "pipeline", None)
    if isinstance(stages, list) and stages and isinstance(stages[0], DataLoader):
        return stages[0]
    return None


def _start_method(loader: DataLoader) -> Optional[str]:
    if loader.num_workers == 0:
        return None
    context = loader.multiprocessing_context
    if context is not None:
        return context.get_start_method() if hasattr(context, "get_start_method") else str(context)
    # torch uses the default context; don't fix it by asking get_context().
    method = multiprocessing.get_start_method(allow_none=True)
    return method or multiprocessing.get_all_start_methods()[0]


def _sized(obj: Any) -> Optional[int]:
    try:
        return len(obj)
    except Exception:  # unsized datasets raise TypeError, some raise others
        return None


def describe_loader(loader: Any) -> LoaderConfig:
    """The settings of ``loader`` as a :class:`~pipecheck.records.LoaderConfig`."""
    kind = f"{type(loader).__module__}.{type(loader).__qualname__}"
    inner = _inner_dataloader(loader)
    if inner is None:
        return LoaderConfig(type=kind, batches_per_epoch=quiet_len(loader))
    dataset = inner.dataset
    return LoaderConfig(
        type=kind,
        num_workers=inner.num_workers,
        prefetch_factor=inner.prefetch_factor if inner.num_workers > 0 else None,
        batch_size=inner.batch_size,
        pin_memory=bool(inner.pin_memory),
        persistent_workers=bool(inner.persistent_workers),
        in_order=getattr(inner, "in_order", None),
        drop_last=bool(inner.drop_last),
        multiprocessing_context=_start_method(inner),
        dataset_type=f"{type(dataset).__module__}.{type(dataset).__qualname__}",
        dataset_len=_sized(dataset),
        batches_per_epoch=quiet_len(loader),
    )


def fixed_batches(loader: Any) -> Optional[FixedBatches]:
    """Batch sizes of ``loader``'s next epoch when they follow from its settings alone: a
    DataLoader whose ``batch_sampler`` is torch's own ``BatchSampler`` over a sized sampler and
    whose ``collate_fn`` is ``default_collate`` (which keeps one sample per index). ``None``
    otherwise: then every batch is counted from its structure."""
    if type(loader) is not DataLoader or loader.collate_fn is not default_collate:
        return None
    batch_sampler = loader.batch_sampler
    if type(batch_sampler) is not BatchSampler:
        return None
    try:
        samples = len(batch_sampler.sampler)  # type: ignore[arg-type]  # unsized: TypeError
    except TypeError:
        return None
    size = batch_sampler.batch_size
    if batch_sampler.drop_last:
        samples = samples // size * size
    return FixedBatches(batch_size=size, samples_per_epoch=samples)


def _iterated_loader(loader: Any, probe: Optional[WorkerProbe], stages: Optional[StageProbe],
                     stacks: bool, in_place: bool = False) -> Any:
    """The loader the wrapper iterates, and forwards every attribute and method to.

    For a DataLoader (also the first stage of a webdataset ``WebLoader``) that is a private copy
    of the user's (:func:`pipecheck._torch_compat.private_copy`) whose iterators are built with
    pipecheck's timed dataset (webdataset stages timed first), timed ``collate_fn`` and, for
    stack sampling, a ``worker_init_fn`` that opts workers in to being traced. Its attributes
    read as the user's, and its state (``state_dict()``, persistent workers, samples yielded) is
    that of the batches the user gets. The user's own loader object is never modified, except
    ``in_place`` (``pipecheck run``, where the program holds its DataLoader itself): then the
    substitutes are registered for the user's DataLoader
    (:func:`pipecheck._torch_compat.register_in_place`) and it is returned as it is. Raises
    :class:`WorkerProbeUnsupported` / :class:`IteratorHookUnavailable` when the DataLoader
    cannot be timed inside (the caller then measures without the worker probe).
    """
    inner = _inner_dataloader(loader)
    if inner is None:
        if stages is not None and isinstance(getattr(loader, "pipeline", None), list):
            return stages.instrument_pipeline(loader)
        return loader
    values: dict[str, Any] = {}
    dataset = inner.dataset
    if probe is not None:
        probe.check_supported(inner)
    if stages is not None:
        dataset = stages.timed_dataset(dataset)
    if probe is not None:
        dataset = probe.timed_dataset(dataset)
        values["collate_fn"] = probe.timed_collate(inner.collate_fn)
    if dataset is not inner.dataset:
        values["dataset"] = dataset
    if stacks and inner.num_workers > 0:
        values["worker_init_fn"] = PtracerOptIn(inner.worker_init_fn)
    if values and in_place:
        register_in_place(inner, values)
        return loader
    if values:
        clone = private_copy(inner)
        substitute_while_iterating(clone, values)
        inner = clone
    if isinstance(loader, DataLoader):
        return inner
    outer = copy.copy(loader)
    outer.pipeline = [inner] + list(loader.pipeline[1:])
    if stages is not None:
        outer = stages.instrument_pipeline(outer)
    return outer


def _stop(probes: list[Probe]) -> None:
    """Stop every probe (the wrapper's finalizer): one that raises does not keep the others
    from stopping, and nothing is raised."""
    for probe in probes:
        try:
            probe.stop()
        except Exception:  # do no harm: closing a wrapper never fails the run
            pass


def _off_note(probe: Any, err: BaseException) -> str:
    return f"{probe.name} probe off: {type(err).__name__}: {err}"


def _start_probe(make: Callable[[], Any], name: str, what: str, off: dict[str, str]) -> Any:
    """``make()``, or ``None`` when it fails with ``OSError`` (``/dev/shm`` too full for its
    shared file, ...): the run goes on without that probe and ``off[name]`` says why, starting
    with ``"<what> off: "``."""
    try:
        return make()
    except OSError as err:
        reason = err.strerror or str(err)
        off[name] = reason if reason.startswith(f"{what} off") else f"{what} off: {reason}"
        return None


class WrappedLoader:
    """What :func:`wrap` returns; see the module docstring.

    Everything a user calls on it other than pipecheck's own methods (:meth:`report`,
    :meth:`final_report`, :meth:`record`, :meth:`close`, ``.loader``) reaches the loader that
    yields the batches: attribute reads and writes (torch's own ``ValueError`` for
    ``batch_size`` after init included), ``state_dict()`` / ``load_state_dict()``, ``set_epoch``, ``len()``. That loader
    is a private copy of the user's one when workers are timed (see
    :func:`_iterated_loader`), else the user's one itself. ``isinstance(wrapped, DataLoader)``
    is False: ``.loader`` is the user's original object.
    """

    __slots__ = ("loader", "_target", "_clock", "_run_start", "_created", "_config", "_consumer",
                 "_workers", "_probes_off", "_substitutes", "_stages", "_hol", "_stacks",
                 "_device", "_shared_memory", "_containers", "_epochs", "_probed_epochs",
                 "_host", "_finalizer", "_rank", "_sharding_cache", "_last_gathered",
                 "_autosave", "_open_target", "_observers", "_probed_ids", "__weakref__")
    _rank: Optional[RankInfo]
    _sharding_cache: Optional[tuple[int, Optional[ShardingSection]]]

    def __init__(self, loader: Any, *, samples: Optional[SampleCounter],
                 tokens: Optional[TokenCounter], host: bool, workers: bool,
                 host_interval_s: float, clock: _clock.Clock = _clock.monotonic,
                 stacks: bool = False,
                 stacks_window_s: float = DEFAULT_WINDOW_S,
                 stacks_rate_hz: int = DEFAULT_RATE_HZ,
                 memory_interval_s: float = PSS_INTERVAL_S, device: bool = True,
                 save: Optional[str | os.PathLike[str]] = None,
                 open_target: Optional[Callable[[Any], Iterator[Any]]] = None) -> None:
        # open_target: how an epoch's iterator is made from the iterated loader (default
        # iter()); `pipecheck run` instruments loaders in place and passes torch's own
        # __iter__, since DataLoader.__iter__ is then pipecheck's.
        own = object.__setattr__  # __setattr__ below forwards to the loader
        own(self, "loader", loader)
        own(self, "_open_target", open_target or iter)
        own(self, "_clock", clock)
        own(self, "_run_start", clock())
        own(self, "_created", datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"))
        own(self, "_config", describe_loader(loader))
        own(self, "_consumer", ConsumerProbe(run_start=self._run_start, clock=clock,
                                             samples=samples, tokens=tokens))
        inner = _inner_dataloader(loader)
        own(self, "_probes_off", {})  # probe -> why it turned itself off
        own(self, "_stages", _start_probe(StageProbe, "stages", "stage timing", self._probes_off)
            if workers else None)
        own(self, "_hol", HeadOfLineProbe() if workers and (self._config.num_workers or 0) >= 2
            else None)
        own(self, "_stacks", StackSampler(window_s=stacks_window_s, rate_hz=stacks_rate_hz)
            if stacks else None)
        probe = _start_probe(lambda: WorkerProbe(inner.num_workers, run_start=self._run_start),
                             "workers", "worker timing", self._probes_off) \
            if workers and inner is not None else None
        own(self, "_workers", probe)
        in_place = open_target is not None
        try:
            target = _iterated_loader(loader, probe, self._stages, stacks, in_place)
        except (WorkerProbeUnsupported, IteratorHookUnavailable) as err:
            # Measure from the consumer side only, and say why in the report.
            if probe is not None:
                probe.close()
            own(self, "_workers", None)
            self._probes_off["workers"] = f"worker timing off: {err}"
            try:
                target = _iterated_loader(loader, None, self._stages, stacks, in_place)
            except IteratorHookUnavailable:
                target = loader
        own(self, "_target", target)
        own(self, "_substitutes", substitutes_of(_inner_dataloader(target), in_place))
        backend = cuda_backend() if device else None
        own(self, "_device", DeviceProbe(backend) if backend is not None else None)
        own(self, "_shared_memory", shared_memory_record())
        own(self, "_containers", largest_containers(inner.dataset) if inner is not None else [])
        own(self, "_epochs", 0)
        own(self, "_probed_epochs", 0)
        own(self, "_probed_ids", set())  # consumer epoch indices the main process timed
        own(self, "_host", None)
        if host:
            pids = self._workers.pid_to_worker if self._workers is not None else None
            own(self, "_host", HostProbe(run_start=self._run_start, interval_s=host_interval_s,
                                         pss_interval_s=max(memory_interval_s, host_interval_s),
                                         early_pss_interval_s=max(
                                             min(memory_interval_s, EARLY_PSS_INTERVAL_S),
                                             host_interval_s),
                                         early_pss_window_s=EARLY_PSS_WINDOW_S,
                                         pss_on_first_sight=False,
                                         worker_ids=pids, clock=clock))
        own(self, "_observers", [p for p in (self._hol, self._device) if p is not None])
        # Stopped in this order: stage folder, py-spy window, host sampler, worker file.
        own(self, "_finalizer", weakref.finalize(self, _stop, self._probes()))
        own(self, "_rank", None)
        own(self, "_sharding_cache", None)
        self._current_rank()
        own(self, "_last_gathered", None)
        own(self, "_autosave", AutoSave(self, save) if save is not None else None)

    def _probes(self) -> list[Probe]:
        """The probes on now other than the consumer probe, in stopping order."""
        return [p for p in (self._stages, self._stacks, self._host, self._workers, self._hol,
                            self._device) if p is not None]

    def _turn_off(self, probe: Any, err: BaseException) -> None:
        """``probe`` raised: it is off for the rest of the run (stopped, not called again)
        and ``RunRecord.probes_off`` says why. Never raises."""
        try:
            self._probes_off.setdefault(probe.name, _off_note(probe, err))
            for slot in ("_stages", "_stacks", "_host", "_workers", "_hol", "_device"):
                if getattr(self, slot) is probe:
                    object.__setattr__(self, slot, None)
            if probe in self._observers:
                self._observers.remove(probe)
            probe.stop()
        except Exception:
            pass

    def __iter__(self) -> Iterator[Any]:
        for probe in self._probes():
            try:
                probe.start()
            except Exception as err:
                self._turn_off(probe, err)
        if self._config.num_workers == 0 and self._workers is not None:
            timed = self._time_production_this_epoch()
            self._workers.pause(not timed)
            if timed:
                object.__setattr__(self, "_probed_epochs", self._probed_epochs + 1)
                self._probed_ids.add(self._epochs)
        object.__setattr__(self, "_epochs", self._epochs + 1)
        self._current_rank()
        # One iterator between the loop and the loader: the consumer probe's, which calls the
        # head-of-line and device probes around each next() (probes/base.BatchObserver).
        return self._consumer.open_epoch(lambda: self._open_target(self._target),
                                         fixed_batches(self.loader), tuple(self._observers),
                                         self._turn_off, self._between_batches())

    def _between_batches(self) -> Optional[Callable[[Any], None]]:
        """Main-process sampling of fast batches (``num_workers=0``), driven by the consumer
        probe's iterator: :meth:`pipecheck.probes.workers.WorkerProbe.between_batches`."""
        if self._config.num_workers == 0 and self._workers is not None:
            return self._workers.between_batches
        return None

    def _time_production_this_epoch(self) -> bool:
        """With ``num_workers=0`` the probe runs inside ``next()`` in the main process, where
        its cost (about 2 us a batch of a few samples) is paid by the training loop itself. Time every epoch while batches
        take at least :data:`FAST_BATCH_S` to produce (probe cost < 1%); for faster batches, one
        epoch in :data:`FAST_BATCH_EPOCH_STRIDE`."""
        if self._epochs % FAST_BATCH_EPOCH_STRIDE == 0:
            return True
        assert self._workers is not None
        records = self._workers.record()
        batches = sum(r.batches for r in records)
        if not batches:
            return True
        return sum(r.busy_s for r in records) / batches >= FAST_BATCH_S

    def __len__(self) -> int:
        return len(self._target)

    def __getattr__(self, name: str) -> Any:
        # Only called for names the wrapper lacks: everything else is the iterated loader's.
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        try:
            target = object.__getattribute__(self, "_target")
        except AttributeError:  # not yet initialised
            raise AttributeError(name) from None
        return getattr(target, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in WrappedLoader.__slots__:
            object.__setattr__(self, name, value)
        else:
            setattr(self._target, name, value)  # raises as the loader raises

    def __delattr__(self, name: str) -> None:
        if name in WrappedLoader.__slots__:
            object.__delattr__(self, name)
        else:
            delattr(self._target, name)

    def __repr__(self) -> str:
        return f"pipecheck.wrap({self.loader!r})"

    def __enter__(self) -> "WrappedLoader":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self._consumer.mark_interrupted()  # Ctrl-C in the loop body
        self.close()

    def record(self) -> RunRecord:
        """Everything measured so far, before analysis: every probe's ``record()``, in one
        loop; a probe that raises is turned off with a note in ``probes_off`` and its part is
        left empty. Ends the stack-sampling window if it is still open (py-spy writes its
        samples only when it stops)."""
        if self._stacks is not None:
            try:
                self._stacks.stop()
            except Exception as err:
                self._turn_off(self._stacks, err)
        records: dict[str, Any] = {}
        for each in self._probes():
            try:
                records[each.name] = each.record()
            except Exception as err:
                self._turn_off(each, err)
        consumer = self._consumer.record()
        workers = records.get("workers", [])
        probes_off = dict(self._probes_off)
        if self._workers is None:
            probe = "none"
            workers = []
        elif self._substitutes is not None and self._substitutes.calls == 0 \
                and consumer.batches > 0:
            probe, workers = "none", []
            probes_off["workers"] = (
                f"worker timing off: {type(_inner_dataloader(self.loader)).__qualname__} does "
                "not build its iterators through torch's DataLoader._get_iterator(), so "
                "pipecheck cannot time inside its workers")
        else:
            probe = "workers" if (self._config.num_workers or 0) > 0 else "main-process"
        if probe == "main-process":
            total = sum(e.batches for e in consumer.epochs if e.epoch in self._probed_ids)
            first = self._workers.first_batch() if self._workers is not None else None
            workers = [scaled_to(w, total, first) for w in workers]
        return RunRecord(kind="wrap", created=self._created, environment=collect_environment(),
                         loader=self._config, consumer=consumer,
                         workers=workers, worker_probe=probe, host=records.get("host"),
                         probed_epochs=self._probed_epochs if probe == "main-process" else None,
                         shared_memory=self._shared_memory,
                         dataset_containers=list(self._containers),
                         stacks=records.get("stacks"), device=records.get("device"),
                         rank=self._current_rank(), stages=records.get("stages", []),
                         head_of_line=records.get("head_of_line"),
                         sharding=self._sharding(), probes_off=probes_off)

    def _sharding(self) -> Optional[ShardingSection]:
        """The shard-assignment dry run of a webdataset loader, or of a dataset exposing
        ``n_shards``, for the current world size (:func:`pipecheck.shards.loader_sharding`,
        :func:`pipecheck.shards.n_shards_sharding`), computed once per world size."""
        rank = self._current_rank()
        world_size = rank.world_size if rank is not None else 1
        if self._sharding_cache is None or self._sharding_cache[0] != world_size:
            source = "torch.distributed" if rank is not None else "single process"
            section = (loader_sharding(self.loader, world_size, source)
                       or n_shards_sharding(self.loader, world_size, source))
            self._sharding_cache = (world_size, section)
        return self._sharding_cache[1]

    def _current_rank(self) -> Optional[RankInfo]:
        """This process's rank now, else the last one seen: a report taken after
        ``destroy_process_group()`` (the exit-time save) still belongs to its rank. The rank's
        shard assignment (webdataset pipelines) is replayed once per rank seen."""
        rank = current_rank()
        if rank is not None and (self._rank is None or (self._rank.rank, self._rank.world_size)
                                 != (rank.rank, rank.world_size)):
            shards = rank_shards(self.loader, rank.rank, rank.world_size)
            self._rank = dataclasses.replace(rank, shards=shards)
        return self._rank

    def report(self, *, gather: Optional[bool] = None,
               timeout_s: float = DEFAULT_GATHER_TIMEOUT_S) -> Any:
        """A :class:`pipecheck.Report` of everything measured so far (safe at any time).

        Under an initialized torch.distributed process group with 2+ ranks, ``gather`` (default:
        True there) makes this a collective: every rank must call it; rank 0's report then
        holds every rank side by side and the straggler (``report.ranks``), the others get
        their own report. ``timeout_s`` (> 0, seconds) bounds rank 0's wait for the others
        (fixed when the first gather creates the gloo subgroup); a rank that does not answer
        in time is listed as missing, never raised (:mod:`pipecheck.distributed`). Pass
        ``gather=False`` when only some ranks call ``report()``.
        """
        from .report import build_report

        report = build_report(self.record())
        if gather is False or report.rank is None or report.rank.world_size < 2:
            return report
        from .distributed import gather_report

        merged = gather_report(report, timeout_s)
        if merged.ranks is not None:
            self._last_gathered = merged
        return merged

    def final_report(self) -> Any:
        """A :class:`pipecheck.Report` for when the run is over (the exit-time and SIGTERM
        saves of :mod:`pipecheck.autosave` write it): never a collective, as the other ranks
        may be gone, but rank 0 keeps the other ranks' summaries from its last gathering
        :meth:`report`. Safe at any time; raises only what :meth:`report` raises."""
        report = self.report(gather=False)
        if self._last_gathered is None or report.rank is None:
            return report
        from .distributed import reuse_gathered

        return reuse_gathered(report, self._last_gathered)

    def _release_files(self) -> None:
        """Delete the probes' files in ``/dev/shm`` and the temp dir now, taking no lock: the
        SIGTERM save calls it right before the process terminates (:mod:`pipecheck.autosave`)."""
        for probe, remove in ((self._workers, "remove_file"), (self._stages, "remove_folder"),
                              (self._stacks, "remove_files")):
            if probe is not None:
                getattr(probe, remove)()

    def close(self) -> None:
        """Stop the host sampler and release the worker probe's shared memory. Iterating after
        close still works but measures only the consumer side. Idempotent."""
        self._finalizer()


def wrap(
    loader: Any,
    *,
    samples: Optional[Callable[[Any], int]] = None,
    tokens: Optional[Callable[[Any], int]] = None,
    host: bool = True,
    workers: bool = True,
    host_interval_s: float = 1.0,
    stacks: bool = False,
    stacks_window_s: float = DEFAULT_WINDOW_S,
    stacks_rate_hz: int = DEFAULT_RATE_HZ,
    memory_interval_s: float = PSS_INTERVAL_S,
    device: bool = True,
    save: Optional[str | os.PathLike[str]] = None,
) -> WrappedLoader:
    """Measure ``loader`` inside the real training loop.

    Args:
        loader: a ``torch.utils.data.DataLoader``, a webdataset ``WebLoader`` / ``DataPipeline``,
            or any iterable of batches (generators are single-pass, as without pipecheck).
        samples: ``batch -> int`` samples per batch; default: read from the batch's structure.
        tokens: ``batch -> int`` tokens per batch, for tokens/s; default: counted when batches
            are mappings with ``input_ids`` (``attention_mask.sum()`` when present).
        host: sample CPU / memory / IO with psutil every ``host_interval_s`` seconds (> 0).
        workers: time fetch and collate inside DataLoader workers, the stages of a webdataset
            pipeline (in the workers and in the main process) and ``pipecheck.stage`` blocks
            (:mod:`pipecheck.probes.stages`), and, with 2 or more workers delivering in order,
            head-of-line blocking (:mod:`pipecheck.probes.hol`).
        stacks: sample hot stacks of the main process and the workers with py-spy for
            ``stacks_window_s`` seconds (> 0) from the first ``iter()``; ``report()`` ends the
            window early. ``stacks_rate_hz`` (> 0): samples per second and process. When
            py-spy is missing or not permitted the report says why (finding
            ``stacks-unavailable``) and everything else is measured as usual.
        memory_interval_s: seconds (> 0) between USS/PSS reads of every process (1-3 ms of CPU
            per process per read; default :data:`PSS_INTERVAL_S`); during the first
            :data:`EARLY_PSS_WINDOW_S` seconds they are read every :data:`EARLY_PSS_INTERVAL_S`
            (or ``memory_interval_s`` when shorter), so the memory-growth test, which needs 7
            readings of a worker (5 after its warm-up third), can judge a run from about 15 s.
        device: when CUDA is available, time GPU idle around ``next()`` with CUDA events.
        save: a JSON path the report is also written to when the process exits (normally, by
            an exception, or on SIGTERM as torchrun sends to the surviving ranks when one rank
            dies); under torch.distributed each rank writes ``NAME.rank{N}.json``
            (:mod:`pipecheck.autosave`). Default: not saved automatically.

    Returns:
        a :class:`WrappedLoader` to iterate instead of ``loader``; call ``.report()`` for the
        diagnosis and ``.close()`` (or use it as a context manager) to stop sampling.

    Raises:
        TypeError: ``loader`` is not iterable (the message names what was given).
        ValueError: ``host_interval_s``, ``memory_interval_s``, ``stacks_window_s`` or
            ``stacks_rate_hz`` is not positive, or ``save`` cannot be written (missing or
            read-only folder, a directory), checked now rather than at exit.
    """
    _check_iterable(loader)
    for name, value in (("host_interval_s", host_interval_s),
                        ("memory_interval_s", memory_interval_s),
                        ("stacks_window_s", stacks_window_s)):
        if not value > 0:
            raise ValueError(f"{name} must be > 0 seconds, got {value!r}")
    if not stacks_rate_hz > 0:
        raise ValueError(f"stacks_rate_hz must be > 0 samples/s, got {stacks_rate_hz!r}")
    if save is not None:
        AutoSave.check_path(save)  # now, not at exit when the run is over
    return WrappedLoader(loader, samples=samples, tokens=tokens, host=host, workers=workers,
                         host_interval_s=host_interval_s, stacks=stacks,
                         stacks_window_s=stacks_window_s, stacks_rate_hz=stacks_rate_hz,
                         memory_interval_s=memory_interval_s,
                         device=device, save=save)
