"""What one measured loader's probes hold, with nothing of the user's: :class:`Measurement`.

``pipecheck.wrap(loader)`` (:mod:`pipecheck.wrap`) and ``pipecheck run``'s hook
(:mod:`pipecheck.run_hook`) both measure a loader through a :class:`Measurement`. It is made
from the loader once, keeping only records of it (its settings, its shard setup, the names of
its classes), and is handed the loader again at each epoch's start (:meth:`Measurement
.open_epoch`); it never keeps a reference to the loader, its dataset, its iterators or any
other object of the user's. So a loader, its persistent workers and its dataset go when the
user drops them, whatever pipecheck still holds (a report saved at exit, :mod:`pipecheck
.autosave`, keeps a Measurement, never a loader).

How a DataLoader is timed inside without touching it (no copy, no instance or subclass of the
user's classes): the loader is registered (:func:`pipecheck._torch_compat.register`) so that
the iterators torch builds for it get pipecheck's collate function
(:class:`pipecheck.probes.worker_side.InstrumentedCollate`) and, with ``stacks=True``, a
``worker_init_fn`` that opts workers in to py-spy; the loader's own attributes stay the user's.
"""

from __future__ import annotations

import dataclasses
import datetime
import multiprocessing
import os
import weakref
from typing import Any, Callable, Iterator, Optional

from torch.utils.data import BatchSampler, DataLoader, default_collate

from . import _clock
from ._torch_compat import IteratorHookUnavailable, IteratorSubstitutes, quiet_len, register, \
    unregister
from .autosave import AutoSave
from .distributed import DEFAULT_GATHER_TIMEOUT_S, current_rank
from .environment import collect_environment
from .errors import one_line
from .probes.base import Probe
from .probes.batches import SampleCounter, TokenCounter
from .probes.consumer import ConsumerProbe, FixedBatches
from .probes.dataset_memory import largest_containers, shared_memory_record
from .probes.device import DeviceProbe, cuda_backend
from .probes.hol import HeadOfLineProbe
from .probes.host import HostProbe
from .probes.rank_shards import setup_rank_shards
from .probes.shards import pipeline_shards
from .probes.py_spy_setup import PtracerOptIn
from .probes.stacks import DEFAULT_RATE_HZ, DEFAULT_WINDOW_S, StackSampler
from .probes.stages import StageProbe
from .probes import workers as workers_probe
from .probes.workers import InstrumentedCollate, WorkerProbe, WorkerProbeUnsupported, scaled_to
from .records import LoaderConfig, RankInfo, RunRecord, ShardingSection
from .shards import count_sharding, dataset_shard_count, setup_sharding
from .tune.controller import TuneLimits
from .tune.tuner import TUNED_ATTRIBUTES, Tuner

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
"""For such fast batches, time one epoch in this many (always the first)..."""

FAST_BATCH_TIMED_EPOCH_SPACING = 256
"""... and only once this many batches were taken since the last timed epoch began: a timed
epoch's start builds a timed collate and fetcher, which epochs of one batch
(``next(iter(loader))`` in a loop) would otherwise pay one time in
:data:`FAST_BATCH_EPOCH_STRIDE`. pipecheck's choice
(docs/decisions.md#fast_batch_timed_epoch_spacing)."""


def inner_dataloader(loader: Any) -> Optional[DataLoader]:
    """The DataLoader that produces the batches: the loader itself, or the first stage of a
    webdataset ``DataPipeline`` / ``WebLoader`` (whose ``pipeline`` is a plain list). Judged by
    the object's type, not its ``__class__`` (a wrapped loader answers for its loader there)."""
    if issubclass(type(loader), DataLoader):
        return loader
    stages = getattr(loader, "pipeline", None)
    if isinstance(stages, list) and stages and issubclass(type(stages[0]), DataLoader):
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
    inner = inner_dataloader(loader)
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


class _Substitutes:
    """What a registered DataLoader's iterators get instead of its attributes (the
    ``substitute`` of :func:`pipecheck._torch_compat.register`): ``collate_fn`` timed for the
    worker probe and carrying the stage probe's folder, ``worker_init_fn`` opting workers in to
    py-spy, and with ``tune=True`` the settings in trial (:data:`pipecheck.tune.tuner
    .TUNED_ATTRIBUTES`, from the :class:`~pipecheck.tune.tuner.Tuner`). Holds pipecheck's
    probes only, never the loader or its attributes."""

    __slots__ = ("workers", "stage_folder", "tuner")

    def __init__(self, workers: Optional[WorkerProbe], stage_folder: Optional[str],
                 tuner: Optional[Tuner] = None) -> None:
        self.workers, self.stage_folder, self.tuner = workers, stage_folder, tuner

    def __call__(self, name: str, value: Any) -> Any:
        if name in TUNED_ATTRIBUTES:
            return value if self.tuner is None else self.tuner.substitute(name, value)
        if name == "worker_init_fn":
            return PtracerOptIn(value)
        if self.workers is not None:
            return self.workers.collate(value, self.stage_folder)
        return InstrumentedCollate(value, None, None, self.stage_folder)


def _stop(probes: list[Probe]) -> None:
    """Stop every probe: one that raises does not keep the others from stopping, and nothing
    is raised."""
    for probe in probes:
        try:
            probe.stop()
        except Exception:  # do no harm: closing a measurement never fails the run
            pass


def _off_note(probe: Any, err: BaseException) -> str:
    return f"{probe.name} probe off: {one_line(err)}"


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


class Measurement:
    """The probes of one measured loader and the records made of it (see the module
    docstring). Made by :class:`pipecheck.wrap.WrappedLoader` and :mod:`pipecheck.run_hook`.

    ``loader`` is read here and at each :meth:`open_epoch`, never kept. ``always_substitute``:
    the loader's iterators are built with pipecheck's substitutes whenever they are built
    (``pipecheck run``, and a ``WebLoader``'s inner DataLoader, which webdataset iterates
    lazily); otherwise only the one build each :meth:`open_epoch` arms (``wrap``: the user's own
    ``iter(loader)`` beside the wrapper stays unmeasured). ``tune``: the limits of online
    tuning (:mod:`pipecheck.tune`), ``None`` for none. Other arguments as :func:`pipecheck.wrap`.
    """

    def __init__(self, loader: Any, *, samples: Optional[SampleCounter],
                 tokens: Optional[TokenCounter], host: bool, workers: bool,
                 host_interval_s: float, clock: _clock.Clock = _clock.monotonic,
                 stacks: bool = False,
                 stacks_window_s: float = DEFAULT_WINDOW_S,
                 stacks_rate_hz: int = DEFAULT_RATE_HZ,
                 memory_interval_s: float = PSS_INTERVAL_S, device: bool = True,
                 save: Optional[str | os.PathLike[str]] = None,
                 always_substitute: bool = False,
                 tune: Optional[TuneLimits] = None) -> None:
        self._clock = clock
        self._run_start = clock()
        self._created = datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds")
        self._config = describe_loader(loader)
        self._consumer = ConsumerProbe(run_start=self._run_start, clock=clock, samples=samples,
                                       tokens=tokens)
        inner = inner_dataloader(loader)
        self._inner_type = type(inner).__qualname__ if inner is not None else None
        self._probes_off: dict[str, str] = {}  # probe -> why it turned itself off
        self._tuner: Optional[Tuner] = None
        if tune is not None:
            self._tuner = Tuner(loader, inner, tune, clock=clock)
            if self._tuner.tuning:
                # The worker and head-of-line probes are sized and judged for the loader's own
                # num_workers, which trials change.
                if workers and inner is not None:
                    self._probes_off["workers"] = (
                        "worker timing off: wrap(tune=True) changes num_workers during the run")
        timed_workers = workers and (self._tuner is None or not self._tuner.tuning)
        self._stages: Optional[StageProbe] = _start_probe(
            StageProbe, "stages", "stage timing", self._probes_off) if workers else None
        self._hol: Optional[HeadOfLineProbe] = HeadOfLineProbe() \
            if timed_workers and (self._config.num_workers or 0) >= 2 else None
        self._stacks: Optional[StackSampler] = StackSampler(
            window_s=stacks_window_s, rate_hz=stacks_rate_hz) if stacks else None
        self._workers: Optional[WorkerProbe] = None
        if timed_workers and inner is not None:
            try:
                self._workers = _start_probe(
                    lambda: WorkerProbe(inner.num_workers, run_start=self._run_start),
                    "workers", "worker timing", self._probes_off)
            except IteratorHookUnavailable as err:
                self._probes_off["workers"] = f"worker timing off: {err}"
        self._substitutes: Optional[IteratorSubstitutes] = None
        self._registered: Optional[weakref.ref] = None  # the DataLoader registered, weakly
        self._instrument(loader, inner, stacks, always_substitute)
        backend = cuda_backend() if device else None
        self._device: Optional[DeviceProbe] = DeviceProbe(backend) \
            if backend is not None else None
        self._shared_memory = shared_memory_record()
        self._containers = largest_containers(inner.dataset) if inner is not None else []
        self._epochs = 0
        self._started = False  # the probes' start(), at the first open_epoch()
        self._probed_epochs = 0  # epochs whose production the main process timed
        self._timed_epoch_at = 0  # batches taken when the last timed epoch began
        self._host: Optional[HostProbe] = None
        if host:
            pids = self._workers.pid_to_worker if self._workers is not None else None
            self._host = HostProbe(run_start=self._run_start, interval_s=host_interval_s,
                                   pss_interval_s=max(memory_interval_s, host_interval_s),
                                   early_pss_interval_s=max(
                                       min(memory_interval_s, EARLY_PSS_INTERVAL_S),
                                       host_interval_s),
                                   early_pss_window_s=EARLY_PSS_WINDOW_S,
                                   pss_on_first_sight=False, worker_ids=pids, clock=clock)
        self._observers: list[Any] = [p for p in (self._hol, self._device) if p is not None]
        # The shard setup as records (URLs, splitter functions), read now: never the loader.
        self._shard_setup = pipeline_shards(loader)
        self._shard_count = dataset_shard_count(loader)
        self._rank: Optional[RankInfo] = None
        self._sharding_cache: Optional[tuple[int, Optional[ShardingSection]]] = None
        self._current_rank()
        self._last_gathered: Any = None
        # Stopped in this order: stage folder, py-spy window, host sampler, worker memory.
        self._closer = weakref.finalize(self, _stop, self._probes())
        self._autosave = AutoSave(self, save) if save is not None else None

    # -- construction ----------------------------------------------------------------------------

    def _instrument(self, loader: Any, inner: Optional[DataLoader], stacks: bool,
                    always: bool) -> None:
        """Register ``inner`` (the DataLoader producing the batches) so that its iterators are
        built with pipecheck's collate and ``worker_init_fn``, and time a webdataset pipeline's
        main-process stages. A loader that cannot be timed inside turns the worker probe off
        with the reason."""
        if inner is not None:
            if self._workers is not None:
                try:
                    self._workers.check_supported(inner)
                except WorkerProbeUnsupported as err:
                    self._worker_probe_off(f"worker timing off: {err}")
            names: tuple[str, ...] = ()
            if self._workers is not None or self._stages is not None:
                names += ("collate_fn",)
            if stacks and inner.num_workers > 0:
                names += ("worker_init_fn",)
            tuner = self._tuner if self._tuner is not None and self._tuner.tuning else None
            if tuner is not None:
                names += TUNED_ATTRIBUTES
            if names:
                folder = self._stages.folder if self._stages is not None else None
                try:
                    self._substitutes = register(inner, names,
                                                 _Substitutes(self._workers, folder, tuner),
                                                 always=always or inner is not loader)
                    self._registered = weakref.ref(inner)
                    if tuner is not None:
                        tuner.attach(self._substitutes)
                except IteratorHookUnavailable as err:
                    self._worker_probe_off(f"worker timing off: {err}")
                    if tuner is not None:
                        tuner.turn_off(err)
        if inner is not loader and self._stages is not None:
            self._stages.time_main_pipeline(loader)

    def _worker_probe_off(self, note: str) -> None:
        if self._workers is not None:
            self._workers.close()
            self._workers = None
            self._probes_off["workers"] = note

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
                    setattr(self, slot, None)
            if probe in self._observers:
                self._observers.remove(probe)
            probe.stop()
        except Exception:
            pass

    # -- each epoch --------------------------------------------------------------------------

    def open_epoch(self, loader: Any,
                   open_target: Callable[[Any], Iterator[Any]] = iter) -> Iterator[Any]:
        """One measured epoch over ``loader`` (the loader this measurement was made from):
        starts the probes the first time, then returns the consumer probe's iterator over
        ``open_target(loader)`` (``iter`` by default; ``pipecheck run`` passes torch's own
        ``DataLoader.__iter__``). Raises what ``open_target`` raises (worker start-up, a
        dataset's ``__iter__``), as unwrapped."""
        if not self._started:  # once: every probe's start() is idempotent, and costs a call
            self._started = True
            for probe in self._probes():
                try:
                    probe.start()
                except Exception as err:
                    self._turn_off(probe, err)
        timed = paused = False
        if self._config.num_workers == 0 and self._workers is not None:
            timed = self._time_production_this_epoch()
            paused = not timed
            self._workers.pause(paused)
            if timed:
                self._probed_epochs += 1
                self._timed_epoch_at = self._consumer.batches_taken()
        self._epochs += 1
        self._current_rank()
        # A paused epoch's iterator is torch's own, built as unwrapped: nothing of pipecheck
        # runs inside it (an epoch of one tiny batch pays only the consumer probe).
        if self._substitutes is not None and not paused:
            self._substitutes.arm()  # this epoch's iterator, when torch builds it
        # One iterator between the loop and the loader: the consumer probe's, which calls the
        # head-of-line and device probes around each next() (probes/base.BatchObserver).
        # Flagged: the consumer keeps the timed epochs' batch total (O(1), folded epochs too),
        # to which record() scales the sampled production.
        tuner = self._tuner
        if tuner is not None and tuner.opens_epochs:
            def opened() -> Iterator[Any]:  # with the settings in trial, or those kept
                return tuner.open_epoch(loader, open_target)
        else:
            def opened() -> Iterator[Any]:
                return open_target(loader)
        return self._consumer.open_epoch(opened, fixed_batches(loader),
                                         tuple(self._observers), self._turn_off,
                                         self._between_batches(timed), flagged=timed)

    def _between_batches(self, timed: bool) -> Optional[Callable[[Any], None]]:
        """Main-process sampling of fast batches (``num_workers=0``) in an epoch whose
        production is ``timed``, driven by the consumer probe's iterator:
        :meth:`pipecheck.probes.workers.WorkerProbe.between_batches`."""
        if timed and self._workers is not None:
            return self._workers.between_batches
        return None

    def _time_production_this_epoch(self) -> bool:
        """With ``num_workers=0`` the probe runs inside ``next()`` in the main process, where
        its cost (about 2 us a batch of a few samples) is paid by the training loop itself.
        Time every epoch while batches take at least :data:`FAST_BATCH_S` to produce (probe
        cost < 1%); for faster batches, one epoch in :data:`FAST_BATCH_EPOCH_STRIDE`, at least
        :data:`FAST_BATCH_TIMED_EPOCH_SPACING` batches after the last timed one began. O(1):
        reads this process's running totals, not the shared memory."""
        assert self._workers is not None
        mean = self._workers.main_mean_batch_s()
        if mean is None or mean >= FAST_BATCH_S:
            return True
        return (self._epochs % FAST_BATCH_EPOCH_STRIDE == 0
                and self._consumer.batches_taken() - self._timed_epoch_at
                >= FAST_BATCH_TIMED_EPOCH_SPACING)

    # -- reading -------------------------------------------------------------------------------

    def mark_interrupted(self) -> None:
        """Ctrl-C reached the loop body (outside ``next()``)."""
        self._consumer.mark_interrupted()

    def mark_ended(self, status: str, exc: Optional[BaseException] = None) -> None:
        """How the run ended, as the exit-time and SIGTERM saves learn it
        (:meth:`pipecheck.probes.consumer.ConsumerProbe.mark_ended`)."""
        self._consumer.mark_ended(status, exc)

    def mark_continued(self) -> None:
        """SIGTERM arrived and the program went on (its own handler returned, or it ignores
        SIGTERM): the run is not over (:mod:`pipecheck.autosave`)."""
        self._consumer.mark_continued()

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
                f"worker timing off: {self._inner_type} does not build its iterators through "
                "torch's DataLoader._get_iterator(), so pipecheck cannot time inside its "
                "workers")
        else:
            probe = "workers" if (self._config.num_workers or 0) > 0 else "main-process"
        if probe == "main-process":
            total = consumer.flagged_batches
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
                         sharding=self._sharding(), probes_off=probes_off,
                         tune=self._tuner.section() if self._tuner is not None else None)

    def _sharding(self) -> Optional[ShardingSection]:
        """The shard-assignment dry run of a webdataset loader, or of a dataset exposing
        ``n_shards``, for the current world size (:func:`pipecheck.shards.setup_sharding`,
        :func:`pipecheck.shards.count_sharding` on the setup read at construction), computed
        once per world size."""
        rank = self._current_rank()
        world_size = rank.world_size if rank is not None else 1
        if self._sharding_cache is None or self._sharding_cache[0] != world_size:
            source = "torch.distributed" if rank is not None else "single process"
            section = (setup_sharding(self._shard_setup, world_size, source)
                       or count_sharding(self._shard_count, world_size, source))
            self._sharding_cache = (world_size, section)
        return self._sharding_cache[1]

    def _current_rank(self) -> Optional[RankInfo]:
        """This process's rank now, else the last one seen: a report taken after
        ``destroy_process_group()`` (the exit-time save) still belongs to its rank. The rank's
        shard assignment (webdataset pipelines) is replayed once per rank seen."""
        rank = current_rank()
        if rank is not None and (self._rank is None or (self._rank.rank, self._rank.world_size)
                                 != (rank.rank, rank.world_size)):
            shards = setup_rank_shards(self._shard_setup, rank.rank, rank.world_size)
            self._rank = dataclasses.replace(rank, shards=shards)
        return self._rank

    def report(self, *, gather: Optional[bool] = None,
               timeout_s: float = DEFAULT_GATHER_TIMEOUT_S) -> Any:
        """A :class:`pipecheck.Report` of everything measured so far (safe at any time); see
        :meth:`pipecheck.wrap.WrappedLoader.report`."""
        from .report import build_report

        report = build_report(self.record())
        if self._autosave is not None:  # wrap(save=PATH): against the report PATH held
            report = self._autosave.compared(report)
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

    # -- the end -------------------------------------------------------------------------------

    def release_files(self) -> None:
        """Delete the probes' files now, taking no lock: the SIGTERM save calls it right
        before the process terminates (:mod:`pipecheck.autosave`)."""
        for probe, remove in ((self._workers, "remove_file"), (self._stages, "remove_folder"),
                              (self._stacks, "remove_files")):
            if probe is not None:
                getattr(probe, remove)()

    def close(self) -> None:
        """Stop the probes (the host sampler, the py-spy window) and release their memory and
        files, keeping what they measured; the loader is no longer instrumented. Iterating
        after close still works but measures only the consumer side. Idempotent."""
        registered = self._registered() if self._registered is not None else None
        if registered is not None and self._tuner is not None:
            self._tuner.release(registered)
        if registered is not None and self._substitutes is not None:
            unregister(registered, self._substitutes)
        self._registered = None
        self._closer()
