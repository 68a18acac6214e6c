"""Lightning: measure the train and validation dataloaders inside ``Trainer.fit``.

    from pipecheck.integrations.lightning import PipecheckCallback

    callback = PipecheckCallback("run.json")
    trainer = Trainer(callbacks=[callback], ...)
    trainer.fit(model, datamodule)
    print(callback.report)                  # the (first) train dataloader
    print(callback.validation_reports)      # one per validation dataloader

How it works, and why: docs/internals.md (``pipecheck/integrations/lightning.py``).
"""

from __future__ import annotations

import os
import pathlib
import warnings
from typing import Any, Optional

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the standalone package
    from pytorch_lightning.callbacks import Callback  # type: ignore[no-redef,assignment]

import pipecheck
from pipecheck._peek import holds
from pipecheck.integrations import callback_options
from pipecheck.distributed import DEFAULT_GATHER_TIMEOUT_S

TRAIN = "train"
VALIDATION = "val"
_HOOK = "_load_combined_loader_states"
"""The fit loop's step between building its CombinedLoader and creating the first iterator
(Lightning 2.x ``_FitLoop.setup_data``)."""

_VAL_HOOK = "setup_data"
"""The validation loop's step that builds (or keeps) its CombinedLoader, right before ``reset``
creates the run's iterator (Lightning 2.x ``_EvaluationLoop.run``)."""


def loader_path(path: pathlib.Path, index: int, role: str = TRAIN) -> pathlib.Path:
    """Where the report of dataloader ``index`` (0 = first) of ``role`` (``"train"`` or
    ``"val"``) goes: ``path`` itself for the first train dataloader, ``NAME.loader{index}.json``
    for the other train dataloaders, ``NAME.val.json`` / ``NAME.val.loader{index}.json`` for the
    validation ones."""
    stem = path.stem if role == TRAIN else f"{path.stem}.{role}"
    if index == 0:
        return path.with_name(f"{stem}{path.suffix}")
    return path.with_name(f"{stem}.loader{index}{path.suffix}")


def _end_epoch(combined: Any) -> None:
    """Hand Lightning exhausted iterators in place of the epoch's iterators over wrapped loaders
    (the mode iterator's ``iterators`` list): the epoch's measurement ends now, and a further
    ``next()`` still ends the epoch, as the loader's own iterator would."""
    mode_iterator: Any = getattr(combined, "_iterator", None)
    iterators = getattr(mode_iterator, "iterators", None)
    if isinstance(iterators, list):
        mode_iterator.iterators = [iter(()) for _ in iterators]


class _Role:
    """The wrapped dataloaders of one Lightning loop (train or validation)."""

    def __init__(self) -> None:
        self.wrapped: list[pipecheck.WrappedLoader] = []

    def wrap(self, combined: Any, wrap_options: dict[str, Any]) -> bool:
        """Wrap ``combined``'s loaders (those not wrapped yet); True when something changed and
        the epoch's iterator must be created again over the wrapped loaders."""
        loaders = list(combined.flattened)
        if all(isinstance(loader, pipecheck.WrappedLoader) for loader in loaders):
            return False
        for wrapped in self.wrapped:  # loaders re-created by reload_dataloaders_every_n_epochs
            if not any(wrapped is loader for loader in loaders):  # a kept one measures on
                wrapped.close()
        self.wrapped = [loader if isinstance(loader, pipecheck.WrappedLoader)
                        else pipecheck.wrap(loader, **wrap_options) for loader in loaders]
        combined.flattened = list(self.wrapped)
        return True

    def finish(self, gather: Optional[bool], timeout_s: float) -> list[pipecheck.Report]:
        reports = [wrapped.report(gather=gather, timeout_s=timeout_s) for wrapped in self.wrapped]
        for wrapped in self.wrapped:
            wrapped.close()
        self.wrapped = []
        return reports


class PipecheckCallback(Callback):
    """Measure the train and validation dataloader(s) with :func:`pipecheck.wrap` and save the
    reports at the end of ``Trainer.fit``; see the module docstring.

    Args:
        path: JSON file the first train dataloader's report is written to at the end of training
            (per rank under torch.distributed), the others beside it (:func:`loader_path`);
            ``None``: not saved, only kept in :attr:`reports` / :attr:`validation_reports`.
        gather_timeout_s: seconds (> 0) rank 0 waits for the other ranks' summaries.
        validation: also measure the validation dataloaders run during ``fit`` (default True).
        **wrap_options: passed to :func:`pipecheck.wrap` (``host_interval_s``, ``stacks``,
            ``tokens``, ``tune=True`` for online tuning of the train dataloaders:
            :mod:`pipecheck.tune`; validation dataloaders are never tuned, ...).

    Attributes:
        report: the :class:`pipecheck.Report` of the first train dataloader once training
            ended (``None`` before); ``reports``: one per train dataloader;
            ``validation_reports``: one per validation dataloader (empty when validation did
            not run).
    """

    def __init__(self, path: Optional[str | os.PathLike[str]] = "pipecheck.json", *,
                 gather_timeout_s: float = DEFAULT_GATHER_TIMEOUT_S, validation: bool = True,
                 **wrap_options: Any) -> None:
        self.path, self.gather_timeout_s = callback_options(path, gather_timeout_s)
        self.validation = validation
        self.wrap_options = wrap_options
        # Validation loaders are measured, never tuned: their epochs are short and their
        # settings do not pace training.
        self.validation_options = {k: v for k, v in wrap_options.items() if k != "tune"}
        self.report: Optional[pipecheck.Report] = None
        self.reports: list[pipecheck.Report] = []
        self.validation_reports: list[pipecheck.Report] = []
        self._train = _Role()
        self._validation = _Role()
        self._warned = False

    # -- wrapping ------------------------------------------------------------------------------

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._hook_train_setup(trainer.fit_loop)
            if self.validation:
                self._hook_validation_setup(trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        # The instance attributes shadowed the classes' methods; deleting them restores
        # Lightning's.
        if holds(trainer.fit_loop, _HOOK):
            delattr(trainer.fit_loop, _HOOK)
        val_loop = self._val_loop(trainer)
        if val_loop is not None and holds(val_loop, _VAL_HOOK):
            delattr(val_loop, _VAL_HOOK)

    @staticmethod
    def _val_loop(trainer: Any) -> Any:
        return getattr(getattr(trainer.fit_loop, "epoch_loop", None), "val_loop", None)

    def _hook_validation_setup(self, trainer: Any) -> None:
        """Wrap the validation loaders right after the validation loop's ``setup_data``,
        before its ``reset`` creates the run's iterator (docs/internals.md); nothing
        when this Lightning has no such step (the epoch-start hook then wraps them)."""
        val_loop = self._val_loop(trainer)
        original = getattr(val_loop, _VAL_HOOK, None)
        if not callable(original) or holds(val_loop, _VAL_HOOK):
            return

        def setup_then_wrap() -> None:
            original()
            if trainer.sanity_checking or trainer.state.fn != "fit" or val_loop.restarting:
                return
            combined = getattr(val_loop, "_combined_loader", None)
            if combined is not None and hasattr(combined, "flattened"):
                self._validation.wrap(combined, self.validation_options)

        setattr(val_loop, _VAL_HOOK, setup_then_wrap)

    def _hook_train_setup(self, fit_loop: Any) -> None:
        """Wrap the train loaders inside ``setup_data``, before Lightning loads their states
        and creates the first iterator (docs/internals.md); nothing when this Lightning
        has no such step (the epoch-start hook then wraps them)."""
        original = getattr(fit_loop, _HOOK, None)
        if not callable(original) or holds(fit_loop, _HOOK):
            return

        def wrap_then_load_states() -> None:
            combined = getattr(fit_loop, "_combined_loader", None)
            if combined is not None and hasattr(combined, "flattened"):
                self._train.wrap(combined, self.wrap_options)
            original()

        setattr(fit_loop, _HOOK, wrap_then_load_states)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        fit_loop = trainer.fit_loop
        combined = getattr(fit_loop, "_combined_loader", None)
        fetcher = getattr(fit_loop, "_data_fetcher", None)
        if combined is None or fetcher is None or not hasattr(combined, "flattened"):
            self._warn("this Lightning version keeps its train dataloaders elsewhere")
            return
        if not self._train.wrap(combined, self.wrap_options):
            return
        # Lightning created this epoch's iterator in setup_data; it creates it again itself
        # only after the first epoch of a run that is not resuming (TrainingEpochLoop
        # .on_run_start). Otherwise create it here, over the wrapped loaders.
        epoch_loop = fit_loop.epoch_loop
        if not (trainer.current_epoch > 0 and not fit_loop.is_resuming
                and not epoch_loop.restarting):
            iter(fetcher)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._train.wrapped:
            _end_epoch(getattr(trainer.fit_loop, "_combined_loader", None))

    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if not self.validation or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        val_loop: Any = getattr(getattr(trainer.fit_loop, "epoch_loop", None), "val_loop", None)
        combined = getattr(val_loop, "_combined_loader", None)
        fetcher = getattr(val_loop, "_data_fetcher", None)
        if combined is None or fetcher is None or not hasattr(combined, "flattened"):
            self._warn("this Lightning version keeps its validation dataloaders elsewhere")
            return
        if val_loop.restarting:  # resumed mid-validation: measured from the next run on
            return
        if self._validation.wrap(combined, self.validation_options):
            # Only without the setup_data hook: _EvaluationLoop.reset created this run's
            # iterator over the unwrapped loaders.
            iter(fetcher)

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._validation.wrapped and not trainer.sanity_checking:
            val_loop = getattr(trainer.fit_loop.epoch_loop, "val_loop", None)
            _end_epoch(getattr(val_loop, "_combined_loader", None))

    # -- reporting -----------------------------------------------------------------------------

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish(gather=None)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._finish(gather=False)

    def _finish(self, gather: Optional[bool]) -> None:
        if not self._train.wrapped and not self._validation.wrapped:
            return
        # Finished once: an exception raised after on_train_end (another callback's) must not
        # overwrite the gathered reports with ungathered ones. Train first, on every rank alike.
        self.reports = self._train.finish(gather, self.gather_timeout_s)
        self.validation_reports = self._validation.finish(gather, self.gather_timeout_s)
        self.report = self.reports[0] if self.reports else None
        if self.path is not None:
            for role, reports in ((TRAIN, self.reports), (VALIDATION, self.validation_reports)):
                for index, report in enumerate(reports):
                    report.save(loader_path(self.path, index, role))

    def _warn(self, why: str) -> None:
        if not self._warned:
            warnings.warn(f"pipecheck: not measuring the dataloaders: {why}", stacklevel=2)
            self._warned = True
