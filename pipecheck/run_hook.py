"""The child side of ``pipecheck run``: measure every DataLoader an unmodified program iterates.

How it works, and why: docs/internals.md (``pipecheck/run_hook.py``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import threading
import weakref
from typing import Any, Optional, Sequence

from pipecheck.errors import one_line

RUN_DIR_ENV = "PIPECHECK_RUN_DIR"
"""Environment variable naming the folder each process writes its loaders' reports to."""

TUNE_ENV = "PIPECHECK_RUN_TUNE"
"""Set to ``1`` by ``pipecheck run --tune``: every measured DataLoader is tuned online with the
default :class:`pipecheck.tune.TuneLimits`, as ``wrap(loader, tune=True)``; ``name=value``
pairs set other limits (:func:`pipecheck.tune.controller.limits_from_text`)."""

MAX_LOADERS = 16
"""Most loader objects measured per process: each has its own samplers; a program that builds a
new DataLoader every epoch would otherwise start a sampler thread per epoch. pipecheck's
choice; later loaders run unmeasured (one line on stderr says so)."""

_TARGET_MODULE = "torch.utils.data.dataloader"

_state_lock = threading.Lock()
_measured: Any = None  # IdentityWeakMap: loader -> Measurement, made when torch is patched
_count = 0
_original_iter: Any = None


def _measured_iter(loader: Any) -> Any:
    """``DataLoader.__iter__`` while ``pipecheck run`` measures: the loader's epoch, timed."""
    measurement = _measured.get(loader)
    if measurement is None:
        measurement = _measure(loader)
        if measurement is None:
            return _original_iter(loader)
    return measurement.open_epoch(loader, _original_iter)


def _measure(loader: Any) -> Any:
    """Start measuring ``loader`` and arrange its report at exit; ``None`` when it is not
    measured (the cap, or any failure: the program must run on as it would)."""
    global _count
    with _state_lock:
        if _count >= MAX_LOADERS:
            if _count == MAX_LOADERS:
                _count += 1
                print(f"pipecheck run: more than {MAX_LOADERS} DataLoaders in this process; "
                      "the rest run unmeasured", file=sys.stderr)
            return None
        index = _count
        _count += 1
    try:
        from pipecheck.measurement import Measurement
        from pipecheck.run_files import claim_report_path

        weakref.ref(loader)  # TypeError before anything is armed: measured only when it can go
        path = claim_report_path(os.environ[RUN_DIR_ENV], index)  # unique even if a pid is reused
        tune = None
        if TUNE_ENV in os.environ:
            from pipecheck.tune.controller import limits_from_text

            tune = limits_from_text(os.environ[TUNE_ENV])
        measurement = Measurement(loader, samples=None, tokens=None, host=True, workers=True,
                                  host_interval_s=1.0, save=path, always_substitute=True,
                                  tune=tune)
        _measured.set(loader, measurement)
        # The loader's end is the measurement's: its probes stop, its records stay.
        weakref.finalize(loader, measurement.close)
    except Exception as err:
        print(f"pipecheck run: a {type(loader).__name__} is not measured: "
              f"{one_line(err)}", file=sys.stderr)
        return None
    return measurement


def patch(module: Any) -> None:
    """Replace ``module.DataLoader.__iter__`` (``module`` is ``torch.utils.data.dataloader``)
    by :func:`_measured_iter`. Idempotent."""
    global _original_iter, _measured
    loader_class = module.DataLoader
    if loader_class.__dict__.get("__iter__") is _measured_iter:
        return
    from pipecheck._identity import IdentityWeakMap

    _measured = IdentityWeakMap()
    _original_iter = loader_class.__iter__
    # The SIGTERM handler that saves every measured loader's report, installed now while this
    # is (usually) the main thread: a loader first iterated in another thread is saved too.
    from pipecheck.autosave import install

    install()
    _save_before_leaving_python()
    loader_class.__iter__ = _measured_iter


_LEAVING = ("_exit", "execv", "execve")
"""``os`` functions after which no exit hook runs: ``os._exit`` (forked children, programs that
skip interpreter shutdown) and the two ``exec`` calls every other ``os.exec*`` goes through."""


def _save_before_leaving_python() -> None:
    """Make :data:`_LEAVING` save every measured loader's report first (in the process that
    measured it; a forked child has nothing armed), then do what they do. Idempotent."""
    for name in _LEAVING:
        original = getattr(os, name, None)
        if original is None or getattr(original, "_pipecheck_saves_first", False):
            continue

        def saving_first(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            from pipecheck.autosave import save_all_before_leaving

            save_all_before_leaving()
            return _original(*args, **kwargs)

        saving_first._pipecheck_saves_first = True  # type: ignore[attr-defined]
        saving_first.__wrapped__ = original  # type: ignore[attr-defined]
        saving_first.__name__ = original.__name__
        saving_first.__doc__ = original.__doc__
        setattr(os, name, saving_first)


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader of the target module, then :func:`patch` on it."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        try:
            patch(module)
        except Exception as err:
            print(f"pipecheck run: DataLoaders are not measured: {one_line(err)}",
                  file=sys.stderr)


class _WaitForDataLoader(importlib.abc.MetaPathFinder):
    """A one-shot import hook: finds ``torch.utils.data.dataloader`` with the other finders
    and hands it a :class:`_PatchingLoader`."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]],
                  target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != _TARGET_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Measure every DataLoader this process iterates (docs/internals.md). Patches at
    once when torch is already imported, else when the program imports it."""
    if not os.path.isdir(os.environ.get(RUN_DIR_ENV, "")):
        raise RuntimeError(f"${RUN_DIR_ENV} is not a folder")
    module = sys.modules.get(_TARGET_MODULE)
    if module is not None:
        patch(module)
        return
    if not any(isinstance(finder, _WaitForDataLoader) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WaitForDataLoader())
