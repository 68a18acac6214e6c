"""Lightning: measure the train dataloader inside ``Trainer.fit``.

    from pipecheck.integrations.lightning import PipecheckCallback

    callback = PipecheckCallback("run.json")
    trainer = Trainer(callbacks=[callback], ...)
    trainer.fit(model, datamodule)
    print(callback.report)

How: Lightning builds the train dataloader(s) in ``FitLoop.setup_data`` (after it may have
re-created them with a ``DistributedSampler``) and holds them in a ``CombinedLoader``. At
``on_train_epoch_start``, after that setup and before the epoch's first batch, the callback
replaces each DataLoader in ``CombinedLoader.flattened`` with ``pipecheck.wrap(loader)``
(Lightning's own way to swap them) and, where Lightning will not create the epoch's iterator
again itself, re-creates it so the wrapped loaders are the ones iterated. Loaders re-created by
``reload_dataloaders_every_n_epochs`` are wrapped again, and the report covers the latest one.
Reaching ``fit_loop._combined_loader`` / ``_data_fetcher`` uses Lightning internals (read from
Lightning 2.x); when they are missing the callback warns once and measures nothing, never
breaking training.

At ``on_train_end`` the report is built (under torch.distributed a collective: every rank's
``on_train_end`` takes part and rank 0's report shows every rank, see
:mod:`pipecheck.distributed`), kept in ``callback.report`` and saved to ``path`` (``NAME.rank{N}
.json`` under torch.distributed); with several train dataloaders the others are saved as
``NAME.loader{i}.json``. ``on_exception`` saves what was measured without gathering.
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
from pipecheck.integrations import callback_options
from pipecheck.distributed import DEFAULT_GATHER_TIMEOUT_S


def loader_path(path: pathlib.Path, index: int) -> pathlib.Path:
    """Where the report of train dataloader ``index`` (0 = first) goes: ``path`` itself for the
    first, ``NAME.loader{index}.json`` for the others."""
    if index == 0:
        return path
    return path.with_name(f"{path.stem}.loader{index}{path.suffix}")


class PipecheckCallback(Callback):
    """Measure the train dataloader(s) with :func:`pipecheck.wrap` and save the report at the
    end of ``Trainer.fit``; see the module docstring.

    Args:
        path: JSON file the report is written to at the end of training (per rank under
            torch.distributed); ``None``: not saved, only kept in :attr:`report`.
        gather_timeout_s: seconds (> 0) rank 0 waits for the other ranks' summaries.
        **wrap_options: passed to :func:`pipecheck.wrap` (``host_interval_s``, ``stacks``,
            ``tokens``, ...).

    Attributes:
        report: the :class:`pipecheck.Report` of the first train dataloader once training
            ended (``None`` before); ``reports``: one per train dataloader.
    """

    def __init__(self, path: Optional[str | os.PathLike[str]] = "pipecheck.json", *,
                 gather_timeout_s: float = DEFAULT_GATHER_TIMEOUT_S,
                 **wrap_options: Any) -> None:
        self.path, self.gather_timeout_s = callback_options(path, gather_timeout_s)
        self.wrap_options = wrap_options
        self.report: Optional[pipecheck.Report] = None
        self.reports: list[pipecheck.Report] = []
        self._wrapped: list[pipecheck.WrappedLoader] = []
        self._warned = False

    # -- wrapping ------------------------------------------------------------------------------

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        fit_loop = trainer.fit_loop
        combined = getattr(fit_loop, "_combined_loader", None)
        fetcher = getattr(fit_loop, "_data_fetcher", None)
        if combined is None or fetcher is None or not hasattr(combined, "flattened"):
            self._warn("this Lightning version keeps its train dataloaders elsewhere")
            return
        loaders = list(combined.flattened)
        if all(isinstance(loader, pipecheck.WrappedLoader) for loader in loaders):
            return
        for wrapped in self._wrapped:  # loaders re-created by reload_dataloaders_every_n_epochs
            if not any(wrapped is loader for loader in loaders):  # a kept one measures on
                wrapped.close()
        self._wrapped = [loader if isinstance(loader, pipecheck.WrappedLoader)
                         else pipecheck.wrap(loader, **self.wrap_options) for loader in loaders]
        combined.flattened = list(self._wrapped)
        # Lightning created this epoch's iterator in setup_data; it creates it again itself
        # only after the first epoch of a run that is not resuming (TrainingEpochLoop
        # .on_run_start). Otherwise create it here, over the wrapped loaders.
        epoch_loop = fit_loop.epoch_loop
        if not (trainer.current_epoch > 0 and not fit_loop.is_resuming
                and not epoch_loop.restarting):
            iter(fetcher)

    # -- reporting -----------------------------------------------------------------------------

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish(gather=None)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._finish(gather=False)

    def _finish(self, gather: Optional[bool]) -> None:
        if not self._wrapped:
            return
        self.reports = [wrapped.report(gather=gather, timeout_s=self.gather_timeout_s)
                        for wrapped in self._wrapped]
        self.report = self.reports[0]
        for wrapped in self._wrapped:
            wrapped.close()
        # Finished once: an exception raised after on_train_end (another callback's) must not
        # overwrite the gathered report with an ungathered one.
        self._wrapped = []
        if self.path is not None:
            for index, report in enumerate(self.reports):
                report.save(loader_path(self.path, index))

    def _warn(self, why: str) -> None:
        if not self._warned:
            warnings.warn(f"pipecheck: not measuring the train dataloader: {why}", stacklevel=2)
            self._warned = True
