"""Make every ``torch.utils.data.DataLoader`` built in this process come back through
``pipecheck.wrap``: the wrapping half of ``benchmarks/torch_dataloader_acceptance.py``.

:func:`install` replaces ``torch.utils.data.DataLoader`` with :class:`DataLoader`, a subclass of
torch's class whose ``__new__`` builds torch's loader with the caller's arguments and returns
``pipecheck.wrap(loader, **options)``. Because the returned wrapper is not an instance of the
shim's type, Python does not call ``__init__`` again. Choices, each for a way test code touches
the name:

* ``from torch.utils.data import DataLoader`` binds when the test module is imported, so the
  patch must be in place before that: the harness imports this module from a ``sitecustomize``
  (which also covers the test file's ``spawn`` children and its ``python -c`` subprocesses).
* A class, not a factory function, so that test code can subclass it (a subclass's instance is
  built and initialised, then wrapped) and subscript it (``DataLoader[List[Tensor]]``).
* ``isinstance`` / ``issubclass`` against the shim answer as they would against torch's class,
  so a wrapper passes ``isinstance(x, DataLoader)`` exactly when a user's wrapped loader would.
* ``inspect.signature`` of the shim is torch's (pipecheck reads it to detect ``in_order``).
* Only the package attribute is replaced, not ``torch.utils.data.dataloader.DataLoader``:
  pickle finds classes by module and name, so replacing the defining module's attribute would
  make every real DataLoader unpicklable by reference. Code importing the class from
  ``torch.utils.data.dataloader`` gets torch's class, unwrapped.
* A DataLoader built by code in a ``pipecheck`` module is returned unwrapped (no wrapper in a
  wrapper), whether that module bound torch's class before the patch or the shim after it.

``PIPECHECK_ACCEPTANCE_WRAP_OPTIONS`` (JSON object, optional) gives keyword arguments for
``pipecheck.wrap``, e.g. ``{"host": false}``.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from typing import Any, TypeVar

import torch.utils.data

import pipecheck

OPTIONS_ENV = "PIPECHECK_ACCEPTANCE_WRAP_OPTIONS"

_TORCH_DATALOADER = torch.utils.data.DataLoader
_T_co = TypeVar("_T_co", covariant=True)


def _wrap_options() -> dict[str, Any]:
    text = os.environ.get(OPTIONS_ENV, "")
    options = json.loads(text) if text else {}
    if not isinstance(options, dict):
        raise ValueError(f"{OPTIONS_ENV} must be a JSON object, got {text!r}")
    return options


def _called_from_pipecheck() -> bool:
    # Frame 1 is DataLoader.__new__; type.__call__ adds no Python frame, so 2 is the code that
    # called DataLoader(...).
    caller = sys._getframe(2)
    name = caller.f_globals.get("__name__", "")
    return name == "pipecheck" or name.startswith("pipecheck.")


class _DelegatingMeta(type(_TORCH_DATALOADER)):  # type: ignore[misc]
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _TORCH_DATALOADER)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _TORCH_DATALOADER)


class DataLoader(_TORCH_DATALOADER[_T_co], metaclass=_DelegatingMeta):
    """Stands in for ``torch.utils.data.DataLoader``: construction returns a
    ``pipecheck.WrappedLoader`` around torch's loader (or around an instance of a subclass)."""

    __signature__ = inspect.signature(_TORCH_DATALOADER)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:  # copy / unpickling: DataLoader() needs a dataset otherwise
            return super().__new__(cls)
        if _called_from_pipecheck():
            if cls is DataLoader:
                return _TORCH_DATALOADER(*args, **kwargs)
            return super().__new__(cls)  # a subclass: Python runs __init__ as usual
        if cls is DataLoader:
            loader = _TORCH_DATALOADER(*args, **kwargs)
        else:
            loader = super().__new__(cls)
            loader.__init__(*args, **kwargs)
        return pipecheck.wrap(loader, **_OPTIONS)


_OPTIONS: dict[str, Any] = {}


def install() -> None:
    """Replace ``torch.utils.data.DataLoader`` by :class:`DataLoader` in this process.
    Raises ``ValueError`` when ``PIPECHECK_ACCEPTANCE_WRAP_OPTIONS`` is not a JSON object."""
    _OPTIONS.update(_wrap_options())
    torch.utils.data.DataLoader = DataLoader
