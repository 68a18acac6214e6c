"""What one stress trial runs with: the loader settings (:class:`LoaderSettings`), the emulated
training step (:class:`StepTime`, or the user's own: :class:`StepFunction`) and the sweep's list of configurations (:func:`sweep_configs`).

Pure values and parsing; nothing here starts a loader.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence, Union

from pipecheck.loader_settings import TORCH_DEFAULT_PREFETCH_FACTOR
from pipecheck.loader_settings import LoaderSettings
from pipecheck.errors import BadInputError

DEFAULT_TRIAL_S = 3.0
"""Seconds one stress trial runs by default (``--trial-seconds``). pipecheck's choice: the
what-if model needs 20 steady batches (:data:`pipecheck.analysis.model.MIN_STEADY_BATCHES`)
and the host sampler's 0.5 s ticks need a few seconds to see the workers' CPU, while a 60 s
budget should still hold the calibration pair, a few searched trials, the epoch-start pair and
the profiling trial."""


@dataclass(frozen=True)
class StepTime:
    """An emulated training step: ``mean_s`` seconds per batch, plus uniform jitter in
    ``[-jitter_s, +jitter_s]`` (never below 0), of which the share ``cpu_share`` (0-1) is spent
    busy on the CPU and the rest asleep (:mod:`pipecheck.stress.step`). Seconds finite,
    ``0 <= jitter_s <= mean_s``, ``0 <= cpu_share <= 1``; raises :class:`BadInputError`
    otherwise."""

    mean_s: float
    jitter_s: float = 0.0
    cpu_share: float = 0.0

    def __post_init__(self) -> None:
        if not (0 <= self.mean_s < float("inf") and 0 <= self.jitter_s <= self.mean_s):
            raise BadInputError(
                f"step time needs a finite mean and 0 <= jitter <= mean seconds, got "
                f"{self.mean_s}+-{self.jitter_s}")
        if not 0 <= self.cpu_share <= 1:
            raise BadInputError(
                f"step CPU share must be between 0 and 1, got {self.cpu_share!r}")

    def sampler(self, seed: int = 0) -> "Any":
        """A function returning successive step durations in seconds (seeded, reproducible)."""
        rng = random.Random(seed)
        mean_s, jitter_s = self.mean_s, self.jitter_s
        return lambda: max(0.0, mean_s + rng.uniform(-jitter_s, jitter_s)) if jitter_s else mean_s

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "emulated", "mean_s": self.mean_s, "jitter_s": self.jitter_s,
                "cpu_share": self.cpu_share}


@dataclass(frozen=True)
class StepFunction:
    """The user's own training step, called with each batch: ``target`` names it as
    ``file.py:function`` or ``package.module:function`` (loaded in each trial's process), or,
    for a source that runs in this process, ``function`` is the callable itself."""

    target: str
    function: Optional[Any] = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "function", "target": self.target}


Step = Union[StepTime, StepFunction]
"""What a trial runs after each batch (:mod:`pipecheck.stress.step`)."""


def step_from_dict(data: Optional[dict[str, Any]]) -> Optional[Step]:
    """The inverse of ``to_dict`` of either step (``None`` for none)."""
    if not data:
        return None
    fields_ = {k: v for k, v in data.items() if k != "kind"}
    return StepFunction(**fields_) if data.get("kind") == "function" else StepTime(**fields_)


def parse_step_time(text: str) -> StepTime:
    """Parse ``"0.05"`` or ``"0.05+-0.01"`` (seconds). Raises :class:`BadInputError` otherwise."""
    mean_text, _, jitter_text = text.partition("+-")
    try:
        mean_s = float(mean_text)
        jitter_s = float(jitter_text) if jitter_text else 0.0
    except ValueError:
        raise BadInputError(
            f"step time must look like 0.05 or 0.05+-0.01 (seconds), got {text!r}") from None
    return StepTime(mean_s, jitter_s)


def parse_int_list(text: str, option: str, minimum: int) -> list[int]:
    """Parse ``"0,2,4"`` into integers >= ``minimum``, duplicates dropped, order kept.
    Raises :class:`BadInputError` naming ``option`` on anything else."""
    values: list[int] = []
    for part in text.split(","):
        try:
            value = int(part.strip())
        except ValueError:
            raise BadInputError(
                f"{option} takes integers separated by commas, got {text!r}") from None
        if value < minimum:
            raise BadInputError(f"{option} values must be at least {minimum}, got {value}")
        if value not in values:
            values.append(value)
    return values


def parse_bool_list(text: str, option: str) -> list[bool]:
    """Parse ``"true,false"`` (also ``1/0``, ``yes/no``), duplicates dropped, order kept.
    Raises :class:`BadInputError` naming ``option`` on anything else."""
    values: list[bool] = []
    for part in text.split(","):
        value = _BOOLEANS.get(part.strip().lower())
        if value is None:
            raise BadInputError(f"{option} takes true or false separated by commas, got {text!r}")
        if value not in values:
            values.append(value)
    return values


_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def parse_config(text: str, option: str) -> LoaderSettings:
    """Parse ``"num_workers=4,prefetch_factor=2,persistent_workers=true"`` into a
    :class:`LoaderSettings` (``num_workers`` required). Raises :class:`BadInputError` naming
    ``option`` and the bad part."""
    fields: dict[str, Any] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or name not in _CONFIG_FIELDS:
            raise BadInputError(f"{option}: {part.strip()!r} is not one of "
                                f"{', '.join(_CONFIG_FIELDS)}=VALUE")
        if _CONFIG_FIELDS[name] is bool:
            flag = _BOOLEANS.get(value.lower())
            if flag is None:
                raise BadInputError(f"{option}: {name} must be true or false, got {value!r}")
            fields[name] = flag
        else:
            try:
                fields[name] = int(value)
            except ValueError:
                raise BadInputError(f"{option}: {name} must be an integer, got {value!r}") from None
    if "num_workers" not in fields:
        raise BadInputError(f"{option} needs num_workers=N")
    return LoaderSettings(**fields)


_CONFIG_FIELDS = {"num_workers": int, "prefetch_factor": int, "persistent_workers": bool,
                  "pin_memory": bool, "in_order": bool, "batch_size": int,
                  "torch_num_threads": int}


def usable_cpus() -> int:
    """CPUs this process may run on (affinity mask when the platform has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_workers(cpus: Optional[int] = None) -> list[int]:
    """``0, 1, ..., cpus`` and one above (latency-bound pipelines gain past the core count)."""
    cpus = usable_cpus() if cpus is None else cpus
    return list(range(cpus + 2))


def sweep_configs(workers: Optional[Sequence[int]] = None,
                  prefetch_factors: Optional[Sequence[int]] = None, *,
                  persistent_workers: bool = False,
                  pin_memory: Optional[bool] = None,
                  in_orders: Sequence[Optional[bool]] = (None,),
                  batch_sizes: Sequence[Optional[int]] = (None,),
                  torch_threads: Sequence[Optional[int]] = (None,)) -> list[LoaderSettings]:
    """Every combination, in the order given (the first is the baseline), batch size outermost,
    the main process's torch intra-op threads (``torch_threads``, ``None``: its own) innermost.

    ``prefetch_factor`` only varies with workers and ``in_order`` only with 2 or more (one
    worker delivers in order anyway); ``num_workers=0`` appears once per batch size. ``None``
    lists take :func:`default_workers` and torch's default prefetch factor. Raises
    :class:`BadInputError` on an empty list, a negative worker count, a prefetch factor < 1 or
    a batch size < 1 or a thread count < 1.
    """
    workers = default_workers() if workers is None else list(workers)
    factors = [TORCH_DEFAULT_PREFETCH_FACTOR] if prefetch_factors is None else list(prefetch_factors)
    if not workers:
        raise BadInputError("the worker list is empty")
    if not factors:
        raise BadInputError("the prefetch factor list is empty")
    if any(w < 0 for w in workers):
        raise BadInputError(f"num_workers must be >= 0, got {workers}")
    if any(p < 1 for p in factors):
        raise BadInputError(f"prefetch_factor must be >= 1, got {factors}")
    if not in_orders or not batch_sizes:
        raise BadInputError("the in_order and batch size lists must not be empty")
    if any(b is not None and b < 1 for b in batch_sizes):
        raise BadInputError(f"batch_size must be >= 1, got {list(batch_sizes)}")
    if not torch_threads or any(t is not None and t < 1 for t in torch_threads):
        raise BadInputError(f"torch_num_threads must be >= 1, got {list(torch_threads)}")
    configs: list[LoaderSettings] = []
    for size in _unique(batch_sizes):
        for count in _unique(workers):
            for factor in (factors if count > 0 else [None]):
                for order in (_unique(in_orders) if count > 1 else [in_orders[0]]):
                    configs.extend(
                        LoaderSettings(count, factor, persistent_workers and count > 0,
                                       pin_memory, order, size, threads)
                        for threads in _unique(torch_threads))
    return configs


def _unique(values: Iterable[Any]) -> list[Any]:
    seen: list[Any] = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen
