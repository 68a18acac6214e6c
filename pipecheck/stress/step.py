"""The training step a stress trial runs after each batch: none, an emulated one
(:class:`~pipecheck.stress.settings.StepTime`: a sleep, or a measured share of it busy on the
CPU), or the user's own function (:class:`~pipecheck.stress.settings.StepFunction`).

A real step competes with the loader for what it uses: a sleeping step (a GPU step, waiting on
its kernels) leaves the cores to the workers, while a CPU step takes its share of them, so more
workers can make it slower. The emulated busy part spends its CPU in ``hashlib`` over a 64 KiB
buffer, which releases the GIL for inputs of 2 KiB and more (CPython's
``HASHLIB_GIL_MINSIZE``), as torch's ops do: the main process's other threads (pin-memory,
pipecheck's samplers) run beside it as beside a real step. The busy share is that of the
calling thread (:func:`pipecheck.analysis.consumer.step_on_cpu_fraction`); a step's intra-op
threads are not emulated: ``--step FILE:fn`` runs the real thing.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Callable, Optional

from pipecheck.stress.settings import Step, StepFunction

_BUSY_CHUNK = bytes(64 * 1024)
"""Hashed per turn of the busy loop (about 40-100 us of CPU with sha1): fine enough to end
within a few percent of a 1 ms busy share, large enough to release the GIL."""


def busy_for(seconds: float) -> None:
    """Spend ``seconds`` (wall, >= 0) on the CPU of the calling thread, the GIL released."""
    deadline = time.perf_counter() + seconds
    digest = hashlib.sha1()
    while time.perf_counter() < deadline:
        digest.update(_BUSY_CHUNK)


def step_runner(step: Optional[Step]) -> Optional[Callable[[Any], None]]:
    """The per-batch callable for ``step``: ``None`` for no step (or a zero emulated one).
    Loads a :class:`StepFunction`'s function now (in the trial's process).

    Raises:
        BadInputError: a :class:`StepFunction` whose file, module or function is missing, or
            whose import raises (:func:`pipecheck.stress.target.load_factory`).
    """
    if step is None:
        return None
    if isinstance(step, StepFunction):
        if step.function is not None:
            return step.function
        from pipecheck.stress.target import load_factory

        return load_factory(step.target)  # type: ignore[arg-type]
    if step.mean_s <= 0:
        return None
    durations, share = step.sampler(), step.cpu_share
    if share <= 0:
        return lambda _batch: time.sleep(durations())

    def emulated(_batch: Any) -> None:
        seconds = durations()
        busy_for(seconds * share)
        if share < 1:
            time.sleep(seconds * (1 - share))

    return emulated
