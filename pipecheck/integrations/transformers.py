"""Hugging Face ``Trainer``: measure the train dataloader with a ``TrainerCallback``.

    from pipecheck.integrations.transformers import PipecheckCallback

    trainer = Trainer(model=model, args=args, train_dataset=dataset,
                      callbacks=[PipecheckCallback("run.json")])
    trainer.train()

How: the Trainer hands callbacks its prepared train dataloader but keeps iterating its own
reference, so the callback cannot swap in a wrapped loader. That prepared loader is accelerate's
``DataLoaderShard``, an adapter that iterates the real ``torch.utils.data.DataLoader`` it holds
as ``base_dataloader``; at ``on_train_begin`` the callback replaces that attribute with
``pipecheck.wrap(base_dataloader)`` (and puts the original back at ``on_train_end``), so every
epoch's batches pass through the wrapper, unchanged and in the same order: data wait vs step
time, stall, samples/s (tokens/s from ``input_ids`` / ``attention_mask``), per-worker fetch and
collate, host CPU / memory / IO, as with ``wrap`` in a bare loop. The adapter reads one batch
ahead, so each wait is measured one step early; totals are unaffected. A loader without a
``base_dataloader`` DataLoader (not prepared by accelerate) is not measured: the callback warns
once and training goes on.

At ``on_train_end`` the report is built (under torch.distributed a collective, every rank takes
part; rank 0's report shows every rank), kept in ``callback.report`` and saved to ``path``
(``NAME.rank{N}.json`` under torch.distributed). ``TrainerCallback`` has no exception hook, so
from ``on_train_begin`` until then an exit-time save (:mod:`pipecheck.autosave`) stands guard:
when ``train()`` raises or the process gets SIGTERM, what was measured is still written to
``path`` (without gathering the other ranks).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Optional

from torch.utils.data import DataLoader
from transformers import TrainerCallback

import pipecheck
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
        base = vars(train_dataloader).get("base_dataloader")
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
