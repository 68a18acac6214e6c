"""Hugging Face ``Trainer``: measure the train dataloader with a ``TrainerCallback``.

    from pipecheck.integrations.transformers import PipecheckCallback

    trainer = Trainer(model=model, args=args, train_dataset=dataset,
                      callbacks=[PipecheckCallback("run.json")])
    trainer.train()

How it works, and why: docs/internals.md (``pipecheck/integrations/transformers.py``).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Optional

from torch.utils.data import DataLoader
from transformers import TrainerCallback

import pipecheck
from pipecheck._peek import own_value
from pipecheck.autosave import AutoSave
from pipecheck.integrations import callback_options
from pipecheck.distributed import DEFAULT_GATHER_TIMEOUT_S


class PipecheckCallback(TrainerCallback):
    """Measure the Trainer's train dataloader and save the report when training ends; see
    the module docstring.

    Args:
        path: JSON file the report is written to (per rank under torch.distributed);
            ``None``: not saved, only kept in :attr:`report`.
        gather_timeout_s: seconds (> 0) rank 0 waits for the other ranks' summaries.
        **wrap_options: passed to :func:`pipecheck.wrap` (``host_interval_s``, ``tokens``,
            ``tune=True`` for online tuning of the train dataloader: :mod:`pipecheck.tune`...).

    Attributes:
        report: the :class:`pipecheck.Report` once training ended, else ``None``.
    """

    def __init__(self, path: Optional[str | os.PathLike[str]] = "pipecheck.json", *,
                 gather_timeout_s: float = DEFAULT_GATHER_TIMEOUT_S,
                 **wrap_options: Any) -> None:
        self.path, self.gather_timeout_s = callback_options(path, gather_timeout_s)
        self.wrap_options = wrap_options
        self.report: Optional[pipecheck.Report] = None
        self._loader: Any = None
        self._wrapped: Optional[pipecheck.WrappedLoader] = None
        self._guard: Optional[AutoSave] = None

    def on_train_begin(self, args: Any, state: Any, control: Any,
                       train_dataloader: Any = None, **kwargs: Any) -> None:
        if train_dataloader is None or self._wrapped is not None:
            return
        base = own_value(train_dataloader, "base_dataloader")
        if not isinstance(base, DataLoader):
            warnings.warn("pipecheck: not measuring the train dataloader: it is a "
                          f"{type(train_dataloader).__name__} without accelerate's "
                          "base_dataloader", stacklevel=2)
            return
        self._wrapped = pipecheck.wrap(base, **self.wrap_options)
        self._loader = train_dataloader
        train_dataloader.base_dataloader = self._wrapped
        if self.path is not None:
            self._guard = AutoSave(self._wrapped._measurement, self.path)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._wrapped is None:
            return
        if self._guard is not None:
            self._guard.cancel()
            self._guard = None
        self._loader.base_dataloader = self._wrapped.loader
        self.report = self._wrapped.report(timeout_s=self.gather_timeout_s)
        self._wrapped.close()
        self._wrapped = None
        if self.path is not None:
            self.report.save(self.path)
