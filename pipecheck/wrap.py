"""The online driver: ``pipecheck.wrap(loader)`` inside the real training loop.

The wrapper is a transparent proxy. Iterating it yields the loader's batches, in the same order,
with exceptions unchanged; ``len()``, re-iteration per epoch and attribute access (``.dataset``,
``.sampler.set_epoch(...)``, ``.batch_size``) pass through to the original loader. Behind it:

* the consumer probe times ``next()`` (wait) and the gaps between calls (compute);
* for a ``DataLoader`` (also the one inside a webdataset ``WebLoader``), the worker probe times
  fetch and collate inside each worker, on an instrumented clone of the loader: the user's
  loader object is never modified;
* the host probe samples CPU, memory and IO of the main process and its workers with psutil.

``report()`` works at any moment: mid-epoch, after a worker raised, after Ctrl-C.
"""

from __future__ import annotations

import copy
import datetime
import multiprocessing
import weakref
from typing import Any, Callable, Iterator, Optional

from torch.utils.data import BatchSampler, DataLoader
from torch.utils.data._utils.collate import default_collate

from . import _clock
from .environment import collect_environment
from .probes.batches import SampleCounter, TokenCounter
from .probes.consumer import ConsumerProbe, FixedBatches
from .probes.host import HostProbe
from .probes.workers import WorkerProbe, WorkerProbeUnsupported
from .records import LoaderConfig, RunRecord


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


def _instrumented(loader: Any, probe: WorkerProbe) -> Any:
    """A copy of ``loader`` whose producing DataLoader carries the worker probe."""
    if isinstance(loader, DataLoader):
        return probe.instrument(loader)
    clone = copy.copy(loader)
    clone.pipeline = [probe.instrument(loader.pipeline[0])] + list(loader.pipeline[1:])
    return clone


def _stop(host: Optional[HostProbe], workers: Optional[WorkerProbe]) -> None:
    if host is not None:
        host.stop()
    if workers is not None:
        workers.close()


class WrappedLoader:
    """What :func:`wrap` returns; see the module docstring. Not a DataLoader subclass:
    ``isinstance(wrapped, DataLoader)`` is False (use ``.loader`` for the original)."""

    def __init__(self, loader: Any, *, samples: Optional[SampleCounter],
                 tokens: Optional[TokenCounter], host: bool, workers: bool,
                 host_interval_s: float, clock: _clock.Clock) -> None:
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
        if workers and inner is not None:
            probe = WorkerProbe(inner.num_workers, run_start=self._run_start)
            try:
                self._source = _instrumented(loader, probe)
                self._workers = probe
            except WorkerProbeUnsupported:  # e.g. DataPipes: measure the consumer side only
                probe.close()
        self._epochs = 0
        self._probed_epochs = 0
        self._host: Optional[HostProbe] = None
        if host:
            pids = self._workers.pid_to_worker if self._workers is not None else None
            self._host = HostProbe(run_start=self._run_start, interval_s=host_interval_s,
                                   pss_interval_s=max(PSS_INTERVAL_S, host_interval_s),
                                   pss_on_first_sight=False,
                                   worker_ids=pids, clock=clock)
        self._finalizer = weakref.finalize(self, _stop, self._host, self._workers)

    def __iter__(self) -> Iterator[Any]:
        if self._host is not None:
            self._host.start()
        source = self._source
        if self._config.num_workers == 0 and self._workers is not None:
            if self._time_production_this_epoch():
                self._probed_epochs += 1
            else:
                source = self.loader  # same sampler and generator: the same batches
        self._epochs += 1
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
        """Everything measured so far, before analysis."""
        host = self._host.snapshot() if self._host is not None else None
        workers = self._workers.snapshot() if self._workers is not None else []
        if self._workers is None:
            probe = "none"
        else:
            probe = "workers" if (self._config.num_workers or 0) > 0 else "main-process"
        return RunRecord(kind="wrap", created=self._created, environment=collect_environment(),
                         loader=self._config, consumer=self._consumer.snapshot(),
                         workers=workers, worker_probe=probe, host=host,
                         probed_epochs=self._probed_epochs if probe == "main-process" else None)

    def report(self) -> Any:
        """A :class:`pipecheck.Report` of everything measured so far (safe at any time)."""
        from .report import build_report

        return build_report(self.record())

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
) -> WrappedLoader:
    """Measure ``loader`` inside the real training loop.

    Args:
        loader: a ``torch.utils.data.DataLoader``, a webdataset ``WebLoader`` / ``DataPipeline``,
            or any iterable of batches (generators are single-pass, as without pipecheck).
        samples: ``batch -> int`` samples per batch; default: read from the batch's structure.
        tokens: ``batch -> int`` tokens per batch, for tokens/s; default: counted when batches
            are mappings with ``input_ids`` (``attention_mask.sum()`` when present).
        host: sample CPU / memory / IO with psutil every ``host_interval_s`` seconds (> 0).
        workers: time fetch and collate inside DataLoader workers.
        clock: monotonic seconds for the consumer probe; tests pass a fake clock (worker
            timestamps always come from ``time.perf_counter``).

    Returns:
        a :class:`WrappedLoader` to iterate instead of ``loader``; call ``.report()`` for the
        diagnosis and ``.close()`` (or use it as a context manager) to stop sampling.

    Raises:
        TypeError: ``loader`` is not iterable (the message names what was given).
        ValueError: ``host_interval_s`` is not positive.
    """
    _check_iterable(loader)
    if not host_interval_s > 0:
        raise ValueError(f"host_interval_s must be > 0 seconds, got {host_interval_s!r}")
    return WrappedLoader(loader, samples=samples, tokens=tokens, host=host, workers=workers,
                         host_interval_s=host_interval_s, clock=clock)
