"""The online driver: ``pipecheck.wrap(loader)`` inside the real training loop.

The wrapper is a transparent proxy. Iterating it yields the loader's batches, in the same order,
with exceptions unchanged; ``len()``, re-iteration per epoch and attribute access (``.dataset``,
``.sampler.set_epoch(...)``, ``.batch_size``) pass through to the original loader. Behind it:

* the consumer probe times ``next()`` (wait) and the gaps between calls (compute);
* for a ``DataLoader`` (also the one inside a webdataset ``WebLoader``), the worker probe times
  fetch and collate inside each worker, on an instrumented clone of the loader: the user's
  loader object is never modified;
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

from torch.utils.data import BatchSampler, DataLoader
from torch.utils.data._utils.collate import default_collate

from . import _clock
from .environment import collect_environment
from .probes.batches import SampleCounter, TokenCounter
from .probes.consumer import ConsumerProbe, FixedBatches
from .probes.dataset_memory import largest_containers, shared_memory_record
from .probes.device import DeviceProbe, cuda_backend
from .probes.hol import HeadOfLineProbe, ObservedSource
from .probes.host import HostProbe
from .probes.rank_shards import rank_shards
from .probes.stacks import DEFAULT_RATE_HZ, DEFAULT_WINDOW_S, PtracerOptIn, StackSampler
from .probes.stages import StageProbe
from .probes.workers import WorkerProbe, WorkerProbeUnsupported
from .autosave import AutoSave
from .distributed import DEFAULT_GATHER_TIMEOUT_S, current_rank
from .records import LoaderConfig, RankInfo, RunRecord
from .shards import loader_sharding, n_shards_sharding


FAST_BATCH_S = 200e-6
"""Production time per batch under which the ``num_workers=0`` probe times only some epochs:
its measured cost is about 0.2 us a sample plus 1 us a batch (``benchmarks/
worker_probe_cost.py``), so 2 us is 1% of 200 us."""

PSS_INTERVAL_S = 5.0
"""Seconds between PSS reads of every process: one ``memory_full_info`` costs about 7 ms of
CPU on a torch worker (measured here), so reading 3 processes at 1 Hz took ~1% of a core; and
new workers are not read on first sight, which without persistent_workers cost 2 reads per worker
per epoch (half of the sampler's CPU in ``benchmarks/overhead.py``)."""

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
        return LoaderConfig(type=kind, batches_per_epoch=_sized(loader))
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
        batches_per_epoch=_sized(loader),
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
        samples = len(batch_sampler.sampler)
    except TypeError:
        return None
    size = batch_sampler.batch_size
    if batch_sampler.drop_last:
        samples = samples // size * size
    return FixedBatches(batch_size=size, samples_per_epoch=samples)


def _instrumented(loader: Any, probe: WorkerProbe, stages: Optional[StageProbe]) -> Any:
    """A copy of ``loader`` whose producing DataLoader carries the worker probe, its
    webdataset dataset's stages timed first (the worker probe's proxy must wrap the timed
    copy: it forwards attribute writes to what it wraps)."""
    inner = _inner_dataloader(loader)
    if stages is not None:
        inner = stages.instrument_dataloader(inner)
    inner = probe.instrument(inner)
    if isinstance(loader, DataLoader):
        return inner
    clone = copy.copy(loader)
    clone.pipeline = [inner] + list(loader.pipeline[1:])
    return clone


def _opt_in_to_tracing(source: Any, original: Any) -> Any:
    """``source`` with its producing DataLoader's workers opting in to being traced
    (:class:`~pipecheck.probes.stacks.PtracerOptIn` around ``worker_init_fn``). The user's
    ``original`` loader is never modified: when ``source`` is it, a copy is changed instead."""
    inner = _inner_dataloader(source)
    if inner is None or inner.num_workers == 0:
        return source
    if source is original:
        clone = copy.copy(inner)
        clone._iterator = None  # never share the original's persistent workers
        if isinstance(source, DataLoader):
            source = clone
        else:
            source = copy.copy(source)
            source.pipeline = [clone] + list(original.pipeline[1:])
        inner = clone
    inner.worker_init_fn = PtracerOptIn(inner.worker_init_fn)
    return source


def _stop(host: Optional[HostProbe], workers: Optional[WorkerProbe],
          stacks: Optional[StackSampler] = None, stages: Optional[StageProbe] = None) -> None:
    if stages is not None:
        stages.close()
    if stacks is not None:
        stacks.stop()
    if host is not None:
        host.stop()
    if workers is not None:
        workers.close()


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
    """What :func:`wrap` returns; see the module docstring. Not a DataLoader subclass:
    ``isinstance(wrapped, DataLoader)`` is False (use ``.loader`` for the original)."""

    def __init__(self, loader: Any, *, samples: Optional[SampleCounter],
                 tokens: Optional[TokenCounter], host: bool, workers: bool,
                 host_interval_s: float, clock: _clock.Clock, stacks: bool = False,
                 stacks_window_s: float = DEFAULT_WINDOW_S,
                 stacks_rate_hz: int = DEFAULT_RATE_HZ,
                 memory_interval_s: float = PSS_INTERVAL_S, device: bool = True,
                 save: Optional[str | os.PathLike[str]] = None) -> None:
        self.loader = loader
        self._clock = clock
        self._run_start = clock()
        self._created = datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds")
        self._config = describe_loader(loader)
        self._consumer = ConsumerProbe(run_start=self._run_start, clock=clock, samples=samples,
                                       tokens=tokens)
        inner = _inner_dataloader(loader)
        self._workers: Optional[WorkerProbe] = None
        self._source = loader
        self._probes_off: dict[str, str] = {}  # probe -> why it turned itself off
        self._stages = _start_probe(StageProbe, "stages", "stage timing", self._probes_off) \
            if workers else None
        self._hol = HeadOfLineProbe() if workers and (self._config.num_workers or 0) >= 2 \
            else None
        probe = _start_probe(lambda: WorkerProbe(inner.num_workers, run_start=self._run_start),
                             "workers", "worker timing", self._probes_off) \
            if workers and inner is not None else None
        if probe is not None:
            try:
                self._source = _instrumented(loader, probe, self._stages)
                self._workers = probe
            except WorkerProbeUnsupported:  # e.g. DataPipes: measure the consumer side only
                probe.close()
        self._stacks: Optional[StackSampler] = None
        if stacks:
            self._stacks = StackSampler(window_s=stacks_window_s, rate_hz=stacks_rate_hz)
            self._source = _opt_in_to_tracing(self._source, loader)
        if self._stages is not None and not isinstance(self._source, DataLoader) \
                and isinstance(getattr(self._source, "pipeline", None), list):
            self._source = self._stages.instrument_pipeline(self._source)
        backend = cuda_backend() if device else None
        self._device = DeviceProbe(backend) if backend is not None else None
        self._shared_memory = shared_memory_record()
        self._containers = largest_containers(inner.dataset) if inner is not None else []
        self._epochs = 0
        self._probed_epochs = 0
        self._host: Optional[HostProbe] = None
        if host:
            pids = self._workers.pid_to_worker if self._workers is not None else None
            self._host = HostProbe(run_start=self._run_start, interval_s=host_interval_s,
                                   pss_interval_s=max(memory_interval_s, host_interval_s),
                                   pss_on_first_sight=False,
                                   worker_ids=pids, clock=clock)
        self._finalizer = weakref.finalize(self, _stop, self._host, self._workers, self._stacks,
                                           self._stages)
        self._rank: Optional[RankInfo] = None
        self._sharding_cache: Optional[tuple[int, Optional[dict[str, Any]]]] = None
        self._current_rank()
        self._last_gathered: Any = None
        self._autosave = AutoSave(self, save) if save is not None else None

    def __iter__(self) -> Iterator[Any]:
        if self._host is not None:
            self._host.start()
        if self._stacks is not None:
            self._stacks.start()
        source = self._source
        if self._config.num_workers == 0 and self._workers is not None:
            if self._time_production_this_epoch():
                self._probed_epochs += 1
            else:
                source = self.loader  # same sampler and generator: the same batches
        self._epochs += 1
        self._current_rank()
        if self._hol is not None:
            source = ObservedSource(source, self._hol)
        if self._device is not None:
            return self._consumer.iterate(self._device.iterate(source), fixed_batches(self.loader))
        return self._consumer.iterate(source, fixed_batches(self.loader))

    def _time_production_this_epoch(self) -> bool:
        """With ``num_workers=0`` the probe runs inside ``next()`` in the main process, where
        its cost (about 2 us a batch of a few samples) is paid by the training loop itself. Time every epoch while batches
        take at least :data:`FAST_BATCH_S` to produce (probe cost < 1%); for faster batches, one
        epoch in :data:`FAST_BATCH_EPOCH_STRIDE`."""
        if self._epochs % FAST_BATCH_EPOCH_STRIDE == 0:
            return True
        assert self._workers is not None
        records = self._workers.snapshot()
        batches = sum(r.batches for r in records)
        if not batches:
            return True
        return sum(r.busy_s for r in records) / batches >= FAST_BATCH_S

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        # Only called for names the wrapper lacks: everything else is the loader's.
        if name.startswith("__") or name in ("loader", "_consumer"):
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __repr__(self) -> str:
        return f"pipecheck.wrap({self.loader!r})"

    def __enter__(self) -> "WrappedLoader":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self._consumer.mark_interrupted()  # Ctrl-C in the loop body
        self.close()

    def record(self) -> RunRecord:
        """Everything measured so far, before analysis. Ends the stack-sampling window if it is
        still open (py-spy writes its samples only when it stops)."""
        stacks = None
        if self._stacks is not None:
            self._stacks.stop()
            stacks = self._stacks.snapshot()
        host = self._host.snapshot() if self._host is not None else None
        workers = self._workers.snapshot() if self._workers is not None else []
        if self._workers is None:
            probe = "none"
        else:
            probe = "workers" if (self._config.num_workers or 0) > 0 else "main-process"
        return RunRecord(kind="wrap", created=self._created, environment=collect_environment(),
                         loader=self._config, consumer=self._consumer.snapshot(),
                         workers=workers, worker_probe=probe, host=host,
                         probed_epochs=self._probed_epochs if probe == "main-process" else None,
                         shared_memory=self._shared_memory,
                         dataset_containers=list(self._containers), stacks=stacks,
                         device=self._device.snapshot() if self._device is not None else None,
                         rank=self._current_rank(),
                         stages=self._stages.snapshots() if self._stages is not None else [],
                         head_of_line=self._hol.summary() if self._hol is not None else None,
                         sharding=self._sharding(), probes_off=dict(self._probes_off))

    def _sharding(self) -> Optional[dict[str, Any]]:
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

    def _exit_report(self) -> Any:
        """The report saved at exit (:mod:`pipecheck.autosave`): no gather, the other ranks
        may be gone, but the other ranks' summaries from the last gather are kept."""
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
    clock: _clock.Clock = _clock.monotonic,
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
        clock: monotonic seconds for the consumer probe; tests pass a fake clock (worker
            timestamps always come from ``time.perf_counter``).
        stacks: sample hot stacks of the main process and the workers with py-spy for
            ``stacks_window_s`` seconds (> 0) from the first ``iter()``; ``report()`` ends the
            window early. ``stacks_rate_hz`` (> 0): samples per second and process. When
            py-spy is missing or not permitted the report says why (finding
            ``stacks-unavailable``) and everything else is measured as usual.
        memory_interval_s: seconds (> 0) between USS/PSS reads of every process (about 5 ms of
            CPU per process per read; default :data:`PSS_INTERVAL_S`); the memory-growth test
            needs 9 or more reads, so shorten it for runs under a minute.
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
                         host_interval_s=host_interval_s, clock=clock, stacks=stacks,
                         stacks_window_s=stacks_window_s, stacks_rate_hz=stacks_rate_hz,
                         memory_interval_s=memory_interval_s,
                         device=device, save=save)
