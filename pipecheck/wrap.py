"""The online driver: ``pipecheck.wrap(loader)`` inside the real training loop.

The wrapper is invisible: iterating it yields the loader's batches in the same order, an
exception from a batch passes through unchanged and the same iterator goes on with the epoch,
and everything else a user calls (``len()``, ``.dataset``, ``.sampler.set_epoch(...)``,
``state_dict()``, attribute writes, ``pickle`` / ``copy`` / ``torch.save``, ``isinstance`` and
the ``Sized`` protocol) reaches or answers for the user's loader itself
(:class:`WrappedLoader`). pipecheck never copies the loader, never makes an instance or a
subclass of the user's classes, and keeps nothing of theirs alive: what it measures lives in a
:class:`pipecheck.measurement.Measurement`, which holds records only. Behind it:

* the consumer probe times ``next()`` (wait) and the gaps between calls (compute);
* for a ``DataLoader`` (also the one inside a webdataset ``WebLoader``), the worker probe times
  fetch and collate inside each worker, through the fetcher torch builds there and the
  collate function torch hands it (:mod:`pipecheck.probes.workers`); the loader's attributes
  stay the user's;
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
import copyreg
import os
import weakref
from typing import Any, Callable, Iterator, Optional

from .autosave import AutoSave
from .distributed import DEFAULT_GATHER_TIMEOUT_S
from .errors import BadArgumentError
from .measurement import (  # noqa: F401  (the constants are documented here too)
    EARLY_PSS_INTERVAL_S,
    EARLY_PSS_WINDOW_S,
    FAST_BATCH_EPOCH_STRIDE,
    FAST_BATCH_S,
    FAST_BATCH_TIMED_EPOCH_SPACING,
    PSS_INTERVAL_S,
    Measurement,
    describe_loader,
    fixed_batches,
)
from .probes.stacks import DEFAULT_RATE_HZ, DEFAULT_WINDOW_S
from .records import RunRecord
from .tune.controller import TuneLimits


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


class WrappedLoader:
    """What :func:`wrap` returns; see the module docstring.

    Everything a user calls on it other than pipecheck's own names (:meth:`report`,
    :meth:`final_report`, :meth:`record`, :meth:`close`, ``.loader``) reaches the user's
    loader (``.loader``): attribute reads, writes and deletes (torch's own ``ValueError`` for
    ``batch_size`` after init included), ``state_dict()`` / ``load_state_dict()``,
    ``set_epoch``. The protocols follow the loader's class: ``len()``, ``__length_hint__``,
    indexing, ``in`` and truth exist exactly when the loader's class has them (so
    ``isinstance(wrapped, collections.abc.Sized)`` answers as for the loader), and
    ``wrapped.__class__`` is the loader's class, so ``isinstance(wrapped, DataLoader)`` and
    the other class checks frameworks make answer as for the loader (``type(wrapped)`` is
    still this class). ``pickle``, ``torch.save``, ``copy.copy`` and ``copy.deepcopy`` act on
    the loader: the copy or the unpickled object is the loader's (unmeasured), and a loader
    that cannot be pickled fails with its own exception.
    """

    __slots__ = ("loader", "_measurement", "__weakref__")

    def __init__(self, loader: Any, **options: Any) -> None:
        object.__setattr__(self, "loader", loader)
        measurement = Measurement(loader, **options)
        object.__setattr__(self, "_measurement", measurement)
        # The probes stop when the wrapper goes; what they measured stays with the
        # measurement (held by an exit-time save, if any), never with the loader.
        weakref.finalize(self, measurement.close)

    # -- the loop ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        return self._measurement.open_epoch(self.loader)

    def __enter__(self) -> "WrappedLoader":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self._measurement.mark_interrupted()  # Ctrl-C in the loop body
        self.close()

    # -- pipecheck's own names -----------------------------------------------------------------

    def record(self) -> RunRecord:
        """Everything measured so far, before analysis (:meth:`pipecheck.measurement
        .Measurement.record`). Ends the stack-sampling window if it is still open."""
        return self._measurement.record()

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
        return self._measurement.report(gather=gather, timeout_s=timeout_s)

    def final_report(self) -> Any:
        """A :class:`pipecheck.Report` for when the run is over: never a collective, but rank
        0 keeps the other ranks' summaries from its last gathering :meth:`report`."""
        return self._measurement.final_report()

    def close(self) -> None:
        """Stop the host sampler and the py-spy window and release the worker probe's shared
        memory; the loader is no longer instrumented. Iterating after close still works but
        measures only the consumer side. Idempotent."""
        self._measurement.close()

    # -- transparency --------------------------------------------------------------------------

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: F811 - answers class checks for the loader
        return type(object.__getattribute__(self, "loader"))

    def __getattr__(self, name: str) -> Any:
        # Only called for names the wrapper lacks: everything else is the loader's.
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        try:
            loader = object.__getattribute__(self, "loader")
        except AttributeError:  # not yet initialised
            raise AttributeError(name) from None
        return getattr(loader, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in WrappedLoader.__slots__:
            object.__setattr__(self, name, value)
        else:
            setattr(self.loader, name, value)  # raises as the loader raises

    def __delattr__(self, name: str) -> None:
        if name in WrappedLoader.__slots__:
            object.__delattr__(self, name)
        else:
            delattr(self.loader, name)

    def __dir__(self) -> list[str]:
        own = ["loader", "report", "final_report", "record", "close"]
        return sorted(set(dir(self.loader)) | set(own))

    def __repr__(self) -> str:
        return f"pipecheck.wrap({self.loader!r})"

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Pickled (pickle, torch.save) as the loader itself: what unpickles is the loader.
        loader = self.loader
        reducer = copyreg.dispatch_table.get(type(loader))
        if reducer is not None:
            return reducer(loader)
        return loader.__reduce_ex__(protocol)

    def __copy__(self) -> Any:
        return copy.copy(self.loader)

    def __deepcopy__(self, memo: dict) -> Any:
        return copy.deepcopy(self.loader, memo)


def _forward_len(self: Any) -> int:
    return len(self.loader)


def _forward_length_hint(self: Any) -> Any:
    return type(self.loader).__length_hint__(self.loader)


def _forward_getitem(self: Any, key: Any) -> Any:
    return self.loader[key]


def _forward_contains(self: Any, item: Any) -> bool:
    return item in self.loader


def _forward_bool(self: Any) -> bool:
    return bool(self.loader)


_PROTOCOLS: dict[str, Callable[..., Any]] = {
    "__len__": _forward_len, "__length_hint__": _forward_length_hint,
    "__getitem__": _forward_getitem, "__contains__": _forward_contains,
    "__bool__": _forward_bool}
"""The special methods a wrapper has exactly when the loader's class has them (Python looks
special methods up on the type, so ``__getattr__`` cannot forward them)."""

_wrapper_classes: dict[tuple[str, ...], type] = {}


def _has_special(cls: type, name: str) -> bool:
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name] is not None  # `__len__ = None` means "no len()"
    return False


def wrapper_class(loader: Any) -> type:
    """The :class:`WrappedLoader` class for ``loader``: with exactly the special methods of
    :data:`_PROTOCOLS` that the loader's class has (one class per combination, pipecheck's
    own: never a subclass of the user's)."""
    present = tuple(name for name in _PROTOCOLS if _has_special(type(loader), name))
    cls = _wrapper_classes.get(present)
    if cls is None:
        namespace: dict[str, Any] = {name: _PROTOCOLS[name] for name in present}
        namespace.update({"__slots__": (), "__module__": WrappedLoader.__module__,
                          "__qualname__": WrappedLoader.__qualname__,
                          "__doc__": WrappedLoader.__doc__})
        cls = _wrapper_classes[present] = type("WrappedLoader", (WrappedLoader,), namespace)
    return cls


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
    tune: "bool | TuneLimits" = False,
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
        tune: try loader settings in the live run and keep the best measured
            (:mod:`pipecheck.tune`; default ``False``: nothing ever changes the loader's
            settings). ``True`` uses the default :class:`pipecheck.tune.TuneLimits` (trial
            windows of at least 32 batches and 2 s; no trial starts after 60 s of loop time or
            the first 10% of the epoch's batches, and the one in progress ends at its
            minimum window); a ``TuneLimits`` sets them. Tried:
            ``num_workers`` (never past the process's CPU budget, nor the memory measured
            workers would take), ``prefetch_factor``, and ``pin_memory`` with CUDA. A
            map-style DataLoader switches inside the epoch, and the loop gets exactly the
            samples, in the order, it gets untuned (this epoch and later ones: the sampler's
            RNG is left as untuned); an iterable dataset switches at epoch starts, and its
            ``num_workers`` changes only when it visibly splits its data by worker. The new
            workers' seeds differ from untuned ones (as with any other ``num_workers``):
            random augmentations made in workers differ. The user's loader object is never
            changed: the settings reach torch's iterator builds through pipecheck's
            substitutes. Worker and head-of-line timing are off while tuning (they are sized
            for the loader's own ``num_workers``). The report's ``tune`` section lists the
            trials, the kept settings and the line that pins them; a failure turns tuning off
            with a note, and later epochs use the loader's own settings.

    Returns:
        a :class:`WrappedLoader` to iterate instead of ``loader``; call ``.report()`` for the
        diagnosis and ``.close()`` (or use it as a context manager) to stop sampling.

    Raises:
        TypeError: ``loader`` is not iterable (the message names what was given).
        pipecheck.errors.BadArgumentError (a ``ValueError``): ``host_interval_s``,
            ``memory_interval_s``, ``stacks_window_s`` or
            ``stacks_rate_hz`` is not positive, or ``save`` cannot be written (missing or
            read-only folder, a directory), checked now rather than at exit.
        TypeError: ``tune`` is neither a bool nor a :class:`pipecheck.tune.TuneLimits`.
    """
    _check_iterable(loader)
    for name, value in (("host_interval_s", host_interval_s),
                        ("memory_interval_s", memory_interval_s),
                        ("stacks_window_s", stacks_window_s)):
        if not value > 0:
            raise BadArgumentError(f"{name} must be > 0 seconds, got {value!r}")
    if not stacks_rate_hz > 0:
        raise BadArgumentError(f"stacks_rate_hz must be > 0 samples/s, got {stacks_rate_hz!r}")
    if save is not None:
        AutoSave.check_path(save)  # now, not at exit when the run is over
    if isinstance(tune, TuneLimits):
        limits: Optional[TuneLimits] = tune
    elif tune is True or tune is False:
        limits = TuneLimits() if tune else None
    else:
        raise TypeError(f"tune must be True, False or a pipecheck.tune.TuneLimits, got "
                        f"{_describe_value(tune)}")
    return wrapper_class(loader)(loader, samples=samples, tokens=tokens, host=host,
                                 workers=workers, host_interval_s=host_interval_s,
                                 stacks=stacks, stacks_window_s=stacks_window_s,
                                 stacks_rate_hz=stacks_rate_hz,
                                 memory_interval_s=memory_interval_s, device=device, save=save,
                                 tune=limits)
