"""``wrap(tune=True)``'s driver for one loader: decides whether the loader can be tuned, gives
torch's iterator builds the settings in trial (through pipecheck's iterator substitutes, never
by writing the user's loader), opens each epoch's :class:`~pipecheck.tune.switch.TuningIterator`
and turns itself off, with a note, on any failure: the loop then goes on with the iterator in
use, and later epochs are built with the user's own settings.

The user's loader object is never changed: its attributes read as the user set them at every
moment outside torch's own iterator build (:func:`pipecheck._torch_compat.register`), during
tuning and after. The one exception is torch's private cache of a ``persistent_workers=True``
loader's iterator (``_iterator``), which then holds an iterator tuning built
(:mod:`pipecheck.tune.persistent`). The kept settings apply to every later iterator this wrapper builds; the
report's ``tune`` section holds the line of code that pins them for the next run.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any, Callable, Iterator, Optional

from pipecheck._clock import Clock, monotonic
from pipecheck._torch_compat import IteratorSubstitutes, index_sampler_attribute, quiet_len
from pipecheck._torchdata_compat import answer_state_dict, live_iterator, resume_pending
from pipecheck.errors import one_line
from pipecheck.kinds import TuneStatus
from pipecheck.probes.batches import count_samples
from pipecheck.records import TuneSection
from pipecheck.loader_settings import LoaderSettings
from pipecheck.recommend.limits import MAX_WORKERS_PER_CPU
from pipecheck.tune.controller import (TuneController, TuneLimits, block_batches, pin_line,
                                       warmup_for)
from pipecheck.tune.checkpoint import (Checkpoints, EpochPosition, RecordingSampler,
                                       stateful_refusal)
from pipecheck.tune.guards import cpu_budget, memory_refusal, splits_by_worker, \
    worker_uss_bytes
from pipecheck.tune.persistent import KeptIterators
from pipecheck.tune.switch import (BoundedIndices, BoundedSampler, MatchedPasses,
                                   TuningIterator, boundable, passes_per_build, rng_state,
                                   switch_generator)

@contextlib.contextmanager
def _trial_worker_count_quiet() -> Iterator[None]:
    """Silence torch's "This DataLoader will create N worker processes" warning for a build
    with trial settings: the count is tuning's trial, not the user's choice (latency-bound
    trials go past the cores on purpose), and the user's own builds still warn."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create",
                                category=UserWarning)
        yield


TUNED_ATTRIBUTES = ("num_workers", "prefetch_factor", "pin_memory", "batch_sampler", "sampler",
                    "generator")
"""The loader attributes whose values torch's iterator builds read from the tuner: the
settings in trial, and (for an in-epoch switch only) the continued index sampler and the
private generator of the new workers' seeds (:func:`pipecheck.tune.switch.switch_generator`)."""

STATEFUL_NOTE = ("a StatefulDataLoader: its checkpoints are written for its own settings at the "
                 "batch the loop has, so they resume exactly without tuning; an epoch resumed "
                 "from a checkpoint runs with its own settings, and trials go on in the next")

PERSISTENT_NOTE = ("persistent_workers not tried: it acts at epoch starts, which an in-epoch "
                   "trial does not measure (the report's recommendations judge it)")


def _settings_of(loader: Any) -> LoaderSettings:
    workers = int(loader.num_workers)
    return LoaderSettings(num_workers=workers,
                        prefetch_factor=loader.prefetch_factor if workers > 0 else None,
                        persistent_workers=bool(loader.persistent_workers),
                        pin_memory=bool(loader.pin_memory))


def _stateful(loader: Any) -> bool:
    return callable(getattr(loader, "state_dict", None)) \
        and callable(getattr(loader, "load_state_dict", None))


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def skip_reason(loader: Any, inner: Any) -> Optional[str]:
    """Why ``loader`` cannot be tuned online (one line), or ``None``. ``inner``: the DataLoader
    producing its batches (:func:`pipecheck.measurement.inner_dataloader`)."""
    from torch.utils.data import IterableDataset

    if inner is None or inner is not loader:
        return (f"{type(loader).__qualname__} is not a torch DataLoader: tune=True tunes a "
                "DataLoader iterated directly")
    if _stateful(loader):
        if loader.persistent_workers and loader.num_workers > 0:
            return ("persistent_workers=True on a stateful loader: its checkpoints describe "
                    "the iterator it keeps, which tuning would replace")
        refusal = stateful_refusal(loader)
        if refusal is not None:
            return refusal
    if getattr(loader, "in_order", True) is False:
        return "in_order=False: batches come in completion order, which a trial would change"
    try:
        from torch.utils.data.datapipes.datapipe import IterDataPipe, MapDataPipe

        if isinstance(loader.dataset, (IterDataPipe, MapDataPipe)):
            return "a DataPipe dataset: torch shards it per worker at iterator build"
    except ImportError:  # pragma: no cover - torch without datapipes
        pass
    if isinstance(loader.dataset, IterableDataset):
        splits, why = splits_by_worker(loader.dataset, loader)
        if not splits and loader.num_workers == 0:
            return f"nothing to try: {why}; prefetch_factor needs workers"
    return None


class Tuner:
    """Online tuning of one DataLoader (module docstring). ``loader`` is read here and at each
    :meth:`open_epoch`, never kept (an epoch's :class:`TuningIterator` holds it weakly).

    ``status``: ``skipped`` (with ``reason``) when :func:`skip_reason` refuses the loader or
    ``skip`` is given (pipecheck could not register the loader's iterator builds), else
    ``tuning``, then ``settled``, or ``off`` after a failure (``reason`` names it).
    """

    def __init__(self, loader: Any, inner: Any, limits: TuneLimits, *,
                 clock: Clock = monotonic, skip: Optional[str] = None,
                 cuda: Optional[bool] = None) -> None:
        from torch.utils.data import IterableDataset

        self._clock = clock
        self._owner_pid = os.getpid()
        self._substitutes: Optional[IteratorSubstitutes] = None
        self._building: Optional[tuple[LoaderSettings, str, Any, Any]] = None
        self._switches = 0  # in-epoch switches built so far (each seeds its own workers)
        self._epochs = 0
        # An epoch build of a map-style loader reads its index sampler through
        # _epoch_sampler(): bounded, pass-matched, recorded (each only where needed).
        self._epoch_attribute: Optional[str] = None
        self._epoch_bound = False
        self._matched: Optional[MatchedPasses] = None
        # A stateful loader's checkpoints (tune/checkpoint.py): the epoch build's recording
        # index sampler, and whether this build resumes a checkpoint (the loader's settings).
        self._checkpoints: Optional[Checkpoints] = None
        self._recording: Optional[RecordingSampler] = None
        self._resuming = False
        # persistent_workers=True: the iterator the loader resets each epoch (tune/persistent.py),
        # and, while torch builds one where the untuned loader would reset its own, the private
        # generator that build draws its workers' base seed from
        self._kept: Optional[KeptIterators] = None
        self._rebuild_generator: Any = None
        self._rebuild_passes: Optional[int] = None
        self.reason: Optional[str] = skip or skip_reason(loader, inner)
        self.status: TuneStatus = "skipped" if self.reason else "tuning"
        self.controller: Optional[TuneController] = None
        self.start: Optional[LoaderSettings] = None
        if self.reason:
            return
        self.start = _settings_of(loader)
        self._map_style = not isinstance(loader.dataset, IterableDataset)
        if loader.persistent_workers and loader.num_workers > 0:
            self._kept = KeptIterators()
        notes = [PERSISTENT_NOTE]
        if _stateful(loader):
            self._checkpoints = Checkpoints(self.start.num_workers)
            answer_state_dict(loader, self._checkpoint)
            notes.append(STATEFUL_NOTE)
        change_workers = True
        if not self._map_style:
            change_workers, why = splits_by_worker(loader.dataset, loader)
            if not change_workers:
                notes.append(f"only prefetch_factor tried: {why}")
        # Workers past the cores pay only when they wait (I/O, latency); the climb stops at the
        # first doubling that gains nothing, so CPU-bound work stops at the cores.
        budget = MAX_WORKERS_PER_CPU * cpu_budget()
        self.controller = TuneController(
            self.start, limits, max_workers=budget, change_workers=change_workers,
            cuda=_cuda() if cuda is None else cuda,
            epoch_batches=quiet_len(loader) if self._map_style else None, notes=notes)

    # -- wiring --------------------------------------------------------------------------------

    def attach(self, substitutes: IteratorSubstitutes) -> None:
        """The registration through which the loader's iterators are built (armed before an
        in-epoch build)."""
        self._substitutes = substitutes

    @property
    def opens_epochs(self) -> bool:
        """Whether each epoch must be opened through :meth:`open_epoch`: while trials run or
        the kept settings apply, and for a ``persistent_workers=True`` loader after tuning
        turned off too (its kept iterator may hold trial settings: the epoch then gets the
        loader's own, :mod:`pipecheck.tune.persistent`)."""
        return self.status in ("tuning", "settled") or (
            self.status == "off" and self._kept is not None)

    def release(self, loader: Any) -> None:
        """The wrapper closed: a persistent loader's kept iterator with tuned settings stops
        (:meth:`KeptIterators.release`). Never raises."""
        if self._kept is None or self.start is None or os.getpid() != self._owner_pid:
            return
        try:
            own = getattr(loader, index_sampler_attribute(loader), None)
            self._kept.release(loader, self.start, own)
        except Exception:
            pass  # the loader then goes on with the iterator it keeps

    @property
    def tuning(self) -> bool:
        """Whether trials are still running."""
        return self.status == "tuning"

    @property
    def observing(self) -> bool:
        """Whether batches are fed to the controller: while trials run, and once settled while
        the kept settings are watched for a drop (a re-tune)."""
        return self.tuning or (self.status == "settled" and self.controller is not None
                               and self.controller.watching)

    def _in_effect(self) -> Optional[LoaderSettings]:
        if self.controller is None or self.status in ("off", "skipped") \
                or os.getpid() != self._owner_pid:
            return None
        return self.controller.current

    def substitute(self, name: str, value: Any) -> Any:
        """The value a torch iterator build reads for the loader's attribute ``name`` (one of
        :data:`TUNED_ATTRIBUTES`) whose own value is ``value``."""
        if self._resuming:
            return value
        building = self._building
        if building is not None:
            settings, attribute, sampler, generator = building
            if name == attribute:
                return sampler
            if name == "generator":
                return generator
        else:
            if name == self._epoch_attribute and value is not None:
                return self._epoch_sampler(value)
            if name == "generator" and self._rebuild_generator is not None:
                return self._rebuild_generator
            settings = self._in_effect()  # type: ignore[assignment]
        if settings is None or name in ("batch_sampler", "sampler", "generator"):
            return value
        if name == "num_workers":
            return settings.num_workers
        if name == "prefetch_factor":
            return settings.prefetch_factor
        if name == "pin_memory":  # None: the loader's own
            return value if settings.pin_memory is None else settings.pin_memory
        return value

    def _epoch_sampler(self, sampler: Any) -> Any:
        """What an epoch's build reads as the loader's index sampler ``sampler``, so that the
        loop gets the untuned order and the sampler's generator the untuned draws: recorded
        for a stateful loader's checkpoints (:class:`RecordingSampler`); iterated as often as
        the start's build would (:class:`MatchedPasses`) when the settings in effect have
        workers and the start's none, or the reverse; bounded (:class:`BoundedSampler`) when
        the epoch may run with settings other than the start's."""
        self._recording = self._matched = None  # a rebuild after a failed one starts anew
        position = self._checkpoints.position if self._checkpoints is not None else None
        if position is not None:
            sampler = self._recording = RecordingSampler(sampler, position)
        settings = self._in_effect()
        if settings is None and self._rebuild_passes is not None:
            settings = self.start  # tuning is off: a persistent loader rebuilt with its own
        if settings is not None and self.start is not None:
            passes = self._rebuild_passes or passes_per_build(self.start.num_workers)
            if passes_per_build(settings.num_workers) != passes:
                sampler = self._matched = MatchedPasses(sampler, passes)
        return BoundedSampler(sampler) if self._epoch_bound else sampler

    # -- epochs --------------------------------------------------------------------------------

    def open_epoch(self, loader: Any, open_target: Callable[[Any], Iterator[Any]]
                   ) -> Iterator[Any]:
        """This epoch's iterator over ``loader``: ``open_target(loader)`` built with the
        settings in effect, behind a :class:`TuningIterator` while trials run. When the build
        with trial settings fails, tuning turns off and the epoch is built again with the
        user's settings (the RNG state put back first), so only the user's own failures reach
        the loop."""
        settings = self._in_effect()
        # Settings other than the start's may run this epoch (trials, or the kept ones): its
        # shuffling sampler is bounded, so that its last step comes when the start's would.
        bounded = self._map_style and settings is not None and (
            self.observing or settings != self.start)
        attribute = index_sampler_attribute(loader)
        checkpoints = self._checkpoints
        if checkpoints is not None:
            if resume_pending(loader):
                return self._open_resumed(loader, open_target)
            checkpoints.position = EpochPosition()
        if self._map_style:
            self._epoch_attribute = attribute
            self._epoch_bound = bounded and boundable(getattr(loader, attribute, None))
        reset_sampler = self._prepare_kept(loader, settings, attribute)
        try:
            iterator = self._open_with(loader, open_target, settings)
            if reset_sampler is not None:
                self._opened_kept(loader, reset_sampler)
        finally:
            self._epoch_attribute, self._epoch_bound = None, False
            self._rebuild_generator = self._rebuild_passes = None
        matched, self._matched = self._matched, None
        if matched is not None:
            matched.complete()
        recorder = None
        if checkpoints is not None:
            recording, self._recording = self._recording, None
            live = live_iterator(loader)
            if recording is None or recording.indices is None or live is None \
                    or checkpoints.position is None:
                # Built without pipecheck's substitutes (torchdata reuses the iterator a
                # state_dict() before the epoch made): it answers its own checkpoints, and
                # this epoch runs untuned.
                checkpoints.position = None
                if self._substitutes is not None:
                    self._substitutes.disarm()
                return iterator
            checkpoints.position.opened(live)
            recorder = recording.indices
        if self.observing and os.getpid() == self._owner_pid:
            if self._epochs:
                assert self.controller is not None
                self.controller.new_epoch()
            self._epochs += 1
            return TuningIterator(self, iterator, loader if self._map_style else None,
                                  self._clock, start=self.start, recorder=recorder)
        if recorder is not None or isinstance(getattr(iterator, "_sampler_iter", None),
                                              BoundedIndices):
            return TuningIterator(self, iterator, None, self._clock, observing=False,
                                  start=self.start, recorder=recorder)
        return iterator

    def _prepare_kept(self, loader: Any, settings: Optional[LoaderSettings],
                      attribute: str) -> Any:
        """A persistent loader's epoch with ``settings`` in effect (``None``: the loader's
        own): the iterator torch resets has them (:meth:`KeptIterators.prepare`); where torch
        must build one instead, the build draws as the untuned reset would: from a private
        generator, over one pass of the sampler. Returns the index sampler a kept iterator
        resets over this epoch (the loader's own, bounded as the epoch is), or ``None`` for a
        loader without persistent workers. A failure turns tuning off (the loader then
        builds or resets as torch does)."""
        kept, start = self._kept, self.start
        if kept is None or start is None or os.getpid() != self._owner_pid:
            return None  # (a forked child's copy of the loader builds as torch would)
        try:
            own = getattr(loader, attribute, None)
            reset_sampler = BoundedSampler(own) if self._epoch_bound else own
            if kept.prepare(loader, settings or start, start, reset_sampler):
                self._rebuild_generator = switch_generator(getattr(loader, "generator", None),
                                                           self._switches)
                self._switches += 1
                self._rebuild_passes = 1
            return reset_sampler
        except Exception as err:
            self.turn_off(err)
            return None

    def _opened_kept(self, loader: Any, reset_sampler: Any) -> None:
        """After a persistent loader's ``iter()``: the kept iterator and its settings noted,
        one built now resetting over ``reset_sampler``. Never raises."""
        try:
            assert self._kept is not None and self.start is not None
            self._kept.opened(loader, self._in_effect() or self.start, reset_sampler)
        except Exception as err:
            self.turn_off(err)

    def _open_resumed(self, loader: Any, open_target: Callable[[Any], Iterator[Any]]
                      ) -> Iterator[Any]:
        """The epoch a stateful loader resumes from its checkpoint, which holds the loader's own
        settings (:meth:`_checkpoint`): built with them, not observed, and its checkpoints the
        loader's own."""
        assert self._checkpoints is not None
        self._checkpoints.position = None
        self._resuming = True
        try:
            return open_target(loader)
        finally:
            self._resuming = False

    def _checkpoint(self, loader: Any) -> Optional[dict]:
        """``loader.state_dict()`` while this tuner runs its epochs (tune/checkpoint.py), or
        ``None`` for the loader's own answer. Never raises: a failure turns tuning off."""
        try:
            return self._checkpoints.answer(loader) if self._checkpoints is not None else None
        except Exception as err:
            self.turn_off(err)
            return None

    def _open_with(self, loader: Any, open_target: Callable[[Any], Iterator[Any]],
                   settings: Optional[LoaderSettings]) -> Iterator[Any]:
        """``open_target(loader)`` with ``settings`` in effect (see :meth:`open_epoch`)."""
        if settings is None or settings == self.start:
            iterator = open_target(loader)
        else:
            restore = rng_state(getattr(loader, "generator", None))
            try:
                with _trial_worker_count_quiet():
                    iterator = open_target(loader)
            except Exception as err:
                restore()  # the failed build's draws undone: the retry draws as untuned
                self.turn_off(err)
                if self._substitutes is not None:
                    self._substitutes.arm()
                iterator = open_target(loader)
        return iterator

    def observe(self, wait_s: float, loop_s: float, batch: Any) -> Optional[LoaderSettings]:
        """One batch (see :meth:`pipecheck.tune.controller.TuneController.observe`); the
        settings to switch to, memory guard applied, or ``None``."""
        controller = self.controller
        if controller is None or not self.observing:
            return None
        try:
            samples = count_samples(batch)
        except Exception:
            samples = 1
        settings = controller.observe(wait_s, loop_s, samples)
        while settings is not None and not controller.settled:
            refusal = self._memory_refusal(settings)
            if refusal is None:
                break
            settings = controller.refuse(settings, refusal)
        self.status = "settled" if controller.settled else "tuning"
        return settings

    def _memory_refusal(self, settings: LoaderSettings) -> Optional[str]:
        current = self.controller.trials[-1].settings if self.controller and \
            self.controller.trials else self.start
        if current is None or settings.num_workers <= current.num_workers:
            return None
        return memory_refusal(settings.num_workers, worker_uss_bytes())

    def batches_needed(self, settings: LoaderSettings) -> int:
        """Batches an epoch must still hold for an in-epoch switch to ``settings`` to be
        worth it: its warm-up and, while trials run, one block of its window (a window may
        span epochs, so the rest of it is measured in the next; deferring instead would run
        the rest of this epoch on settings already measured)."""
        assert self.controller is not None
        limits = self.controller.limits
        return warmup_for(settings, limits) + (block_batches(limits, settings) if self.tuning
                                               else 1)

    def defer(self) -> None:
        """The switch waits for the next epoch's build (this epoch is too short, or the
        dataset is iterable)."""

    def build(self, loader: Any, settings: LoaderSettings, attribute: str, sampler: Any) -> Any:
        """A new iterator for ``loader`` with ``settings``, its ``attribute`` (the index
        sampler) read as ``sampler``, built by the loader's own ``_get_iterator`` through
        pipecheck's substitutes (with ``persistent_workers``, its workers outlive the epoch:
        :mod:`pipecheck.tune.persistent` keeps it for the next epoch or stops them)."""
        substitutes = self._substitutes
        if substitutes is None:
            raise RuntimeError("the loader's iterator builds are not registered")
        generator = switch_generator(getattr(loader, "generator", None), self._switches)
        self._switches += 1
        self._building = (settings, attribute, sampler, generator)
        try:
            substitutes.arm()
            with _trial_worker_count_quiet():
                iterator = loader._get_iterator()
        finally:
            self._building = None
        if self._kept is not None:
            self._kept.switched_to(iterator, settings)
        return iterator

    def epoch_ended(self, loader: Any, iterator: Any) -> None:
        """A map-style epoch's last ``iterator`` handed out its last batch: with persistent
        workers, one an in-epoch switch built becomes the loader's kept iterator
        (:meth:`KeptIterators.epoch_ended`). Never raises: a failure turns tuning off."""
        self._tell_kept("epoch_ended", loader, iterator)

    def retired(self, loader: Any, iterator: Any) -> None:
        """An in-epoch switch's old ``iterator`` handed out its last batch: with persistent
        workers, they stop now (:meth:`KeptIterators.retire`). Never raises: a failure turns
        tuning off."""
        self._tell_kept("retire", loader, iterator)

    def _tell_kept(self, method: str, loader: Any, iterator: Any) -> None:
        if self._kept is None or loader is None:
            return
        try:
            getattr(self._kept, method)(loader, iterator)
        except Exception as err:
            self.turn_off(err)

    def switched(self, outstanding: int) -> None:
        """An in-epoch switch happened; the old iterator still holds ``outstanding`` batches,
        which the new settings' window leaves out."""
        if self.controller is not None:
            self.controller.extend_warmup(outstanding)

    def turn_off(self, err: BaseException) -> None:
        """Tuning failed: off for the rest of the run, with the reason. Never raises."""
        try:
            self.status = "off"
            self.reason = f"tuning off: {one_line(err, limit=480)}"
        except Exception:
            pass

    # -- the report ----------------------------------------------------------------------------

    def section(self) -> TuneSection:
        """The report's ``tune`` section now."""
        controller = self.controller
        if controller is None:
            return TuneSection(status=self.status, reason=self.reason)
        chosen = controller.chosen
        reason = self.reason or controller.settle_reason()
        if reason is None and not controller.settled and len(controller.trials) >= 2:
            # The report was taken (or the run ended) mid-tuning: what the trials say so far.
            best = controller.choose()
            reason = (f"trials were still running; the best measured so far is "
                      f"{best.short_label()} (pin it with {pin_line(best)})")
        return TuneSection(
            status=self.status, reason=reason,
            start=self.start, chosen=chosen,
            trials=list(controller.trials), speedup=controller.speedup(),
            tuning_s=controller.tuning_s(), cost_s=controller.cost_s(),
            tuning_batches=controller.tuning_batches(), retunes=controller.retunes,
            pin_line=pin_line(chosen) if chosen is not None else None,
            notes=list(controller.notes))
