"""The DataLoader settings pipecheck varies, as one type: :class:`LoaderSettings`, used by the
what-if model (:mod:`pipecheck.analysis.model`), the recommendation rules, ``pipecheck stress``'s
trials and online tuning's trials (the report's ``tune`` section), and torch's defaults for
them.

Plain data: no torch import, so reading a saved report needs no torch (torch's defaults are
therefore kept here rather than in :mod:`pipecheck._torch_compat`, which imports torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

TORCH_DEFAULT_PREFETCH_FACTOR = 2
"""``DataLoader``'s ``prefetch_factor`` when it is not given and ``num_workers > 0`` (torch
>= 2.0; ``torch/utils/data/dataloader.py``)."""

_REQUIRED = ("num_workers", "prefetch_factor", "persistent_workers")
_OPTIONAL = ("pin_memory", "in_order", "batch_size")
_PROCESS = ("torch_num_threads",)
"""Settings of the training process rather than the ``DataLoader``: never keyword arguments."""


@dataclass(frozen=True)
class LoaderSettings:
    """DataLoader settings, with torch's keyword names.

    ``num_workers`` (>= 0); ``prefetch_factor`` batches loaded ahead per worker (>= 1), or
    ``None``: torch's default (:data:`TORCH_DEFAULT_PREFETCH_FACTOR`) with workers, and the
    only value torch takes without them; ``persistent_workers`` keeps workers between epochs.
    ``pin_memory``, ``in_order`` and ``batch_size`` (samples per batch, >= 1) ``None``: the
    loader's own choice is kept (a new loader gets torch's defaults: ``pin_memory=False``,
    ``in_order=True``). ``in_order=False`` (torch >= 2.6) delivers batches as workers finish
    them, not in sampler order.

    ``torch_num_threads`` (>= 1): the main process's torch intra-op threads
    (``torch.set_num_threads`` before the loop), ``None``: as the process had them. Not a
    ``DataLoader`` keyword (:meth:`to_kwargs` leaves it out); workers are unaffected (torch
    runs each on one intra-op thread, ``torch/utils/data/_utils/worker.py``).

    Two settings are equal when every field is; :meth:`model_view` gives the fields the
    what-if model varies, in one form, so that its settings compare by what they do.
    """

    num_workers: int
    prefetch_factor: Optional[int] = None
    persistent_workers: bool = False
    pin_memory: Optional[bool] = None
    in_order: Optional[bool] = None
    batch_size: Optional[int] = None
    torch_num_threads: Optional[int] = None

    def effective_prefetch_factor(self) -> int:
        """The prefetch factor the DataLoader would use (0 with no workers)."""
        if self.num_workers == 0:
            return 0
        return self.prefetch_factor or TORCH_DEFAULT_PREFETCH_FACTOR

    @property
    def delivers_in_order(self) -> bool:
        """Whether batches come in sampler order (torch's default, ``in_order`` not
        ``False``)."""
        return self.in_order is not False

    def model_view(self) -> "LoaderSettings":
        """The settings the what-if model varies (``num_workers``, ``prefetch_factor``,
        ``persistent_workers``, whether batches come in order, as ``in_order=True`` or
        ``False``, and ``torch_num_threads``), the others left to the loader."""
        return LoaderSettings(self.num_workers, self.prefetch_factor, self.persistent_workers,
                              in_order=self.delivers_in_order,
                              torch_num_threads=self.torch_num_threads)

    def to_kwargs(self) -> dict[str, Any]:
        """The settings as ``DataLoader`` keyword arguments: ``prefetch_factor`` and
        ``persistent_workers`` only with workers (torch refuses them without), ``pin_memory``,
        ``in_order`` and ``batch_size`` only when set."""
        kwargs: dict[str, Any] = {"num_workers": self.num_workers}
        if self.num_workers > 0:
            kwargs["prefetch_factor"] = self.prefetch_factor
            kwargs["persistent_workers"] = self.persistent_workers
        for name in _OPTIONAL:
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        return kwargs

    def json_keys(self) -> tuple[str, ...]:
        """The keys the report's JSON writes (:func:`pipecheck.codec.to_jsonable`): the first
        three always, the optional ones (and ``torch_num_threads``) when set."""
        return _REQUIRED + tuple(name for name in _OPTIONAL + _PROCESS
                                 if getattr(self, name) is not None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings (:meth:`json_keys`)."""
        return {name: getattr(self, name) for name in self.json_keys()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LoaderSettings":
        """Inverse of :meth:`to_dict`. Raises ``TypeError`` on an unknown or missing key."""
        return cls(**data)

    def label(self) -> str:
        """Every field that is set, as ``name=value`` (``num_workers=2 prefetch_factor=4
        persistent_workers=False``): what a ``pipecheck stress`` trial ran with."""
        return " ".join(f"{k}={v}" for k, v in self.to_dict().items())

    def short_label(self) -> str:
        """The keyword arguments as a ``DataLoader`` call would give them
        (``num_workers=2 prefetch_factor=4``): ``prefetch_factor`` only with workers,
        ``persistent_workers`` and ``pin_memory`` only when true (``torch_num_threads`` is not
        a keyword: :meth:`label` names it)."""
        parts = [f"num_workers={self.num_workers}"]
        if self.num_workers > 0:
            parts.append(f"prefetch_factor={self.prefetch_factor}")
            if self.persistent_workers:
                parts.append("persistent_workers=True")
        if self.pin_memory:
            parts.append("pin_memory=True")
        return " ".join(parts)
