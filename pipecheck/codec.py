"""The report contract's JSON codec: dataclasses (:mod:`pipecheck.records`,
:mod:`pipecheck.report_sections`) to JSON-ready values and back, with the range checks a saved
report gets on load. Generic over frozen dataclasses and typing annotations; knows no record
type by name.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any, Union


def to_jsonable(obj: Any) -> Any:
    """Convert dataclasses (recursively), lists and dicts into JSON-ready Python values.

    A dataclass writes every field in field order, or, when it has a ``json_keys()`` method,
    the fields that returns in that order (an entry whose keys depend on its kind,
    :mod:`pipecheck.report_sections`)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        keys = getattr(obj, "json_keys", None)
        names = keys() if keys is not None else _field_names(type(obj))
        return {name: to_jsonable(getattr(obj, name)) for name in names}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    return obj


@functools.lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[str, ...]:
    """The field names of dataclass ``cls``, in order, computed once per class."""
    return tuple(f.name for f in dataclasses.fields(cls))


MAX_LIST_ITEMS = 1_000_000
"""Longest list :func:`from_jsonable` accepts: well above the bounded timelines pipecheck
writes (8192 consumer batches, 2048 host samples by default)."""


def from_jsonable(cls: Any, data: Any, where: str = "report", *, ranges: bool = False,
                  name: str = "") -> Any:
    """Build ``cls`` (a dataclass or a typing annotation) from JSON data.

    Unknown keys are ignored (newer writers may add keys); a missing required key raises
    ``KeyError`` naming its path, a wrongly typed value or a list longer than
    :data:`MAX_LIST_ITEMS` ``TypeError``; a dataclass's own check (``__post_init__``)
    ``ValueError``. With ``ranges`` (every report read from a file: :func:`pipecheck.load`),
    numbers are also range-checked by the name of the field (or ``dict`` key) holding them,
    ``ValueError`` naming the path otherwise: every number finite (``1e999`` parses as
    infinity) and an integer within :data:`MAX_INTEGER`; the unit conventions of the module
    docstring: ``*_fraction`` in 0-1, every other number >= 0 except :data:`SIGNED_FIELDS`
    and times ``at_s`` / ``*_at_s``; ``name`` is that field's name. ``Any``-typed values (a
    finding's evidence, a trial's ``config``) are then checked for finite numbers and
    integers within :data:`MAX_INTEGER` too, and nest at most :data:`MAX_ANY_DEPTH` levels.
    A dataclass with a ``json_upgrade(data)`` static method gets its object through it first
    (an older writer's shape turned into the current one). ``Any``-typed values (a finding's
    evidence, a stress trial's ``config``) are taken as they are; a
    ``Literal`` of strings (:mod:`pipecheck.kinds`) takes any string, listed or not.
    """
    planned = _PLANS.get(id(cls))
    kind, args = planned[1] if planned is not None and planned[0] is cls else _plan(cls)
    if kind == "any":
        if ranges:
            _check_any(data, where, 0)
        return data
    if kind == "optional":
        if data is None:
            if args[1]:
                return None
            raise TypeError(f"{where} must not be null")
        return from_jsonable(args[0], data, where, ranges=ranges, name=name)
    if kind == "dataclass":
        if not isinstance(data, dict):
            raise TypeError(f"{where} must be an object, got {type(data).__name__}")
        if args is not None:  # the class's json_upgrade: an older writer's shape
            data = args(data)
        kwargs = {}
        for field_name, hint, required in _fields(cls):
            if field_name in data:
                kwargs[field_name] = from_jsonable(hint, data[field_name],
                                                   f"{where}.{field_name}", ranges=ranges,
                                                   name=field_name)
            elif required:
                raise KeyError(f"{where}.{field_name}")
        return cls(**kwargs)  # type: ignore[operator]  # cls is a dataclass type
    if kind == "list":
        if not isinstance(data, list):
            raise TypeError(f"{where} must be a list, got {type(data).__name__}")
        if len(data) > MAX_LIST_ITEMS:
            raise TypeError(f"{where} has {len(data):,} items, more than the "
                            f"{MAX_LIST_ITEMS:,} allowed")
        return [from_jsonable(args, v, f"{where}[{i}]", ranges=ranges, name=name)
                for i, v in enumerate(data)]
    if kind == "dict":
        if not isinstance(data, dict):
            raise TypeError(f"{where} must be an object, got {type(data).__name__}")
        return {k: from_jsonable(args, v, f"{where}.{k}", ranges=ranges, name=str(k))
                for k, v in data.items()}
    if kind == "float":
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise TypeError(f"{where} must be a number, got {data!r}")
        if ranges:
            _check_number(data, name, where)
        return float(data)
    if kind == "int":
        if isinstance(data, bool) or not isinstance(data, int):
            raise TypeError(f"{where} must be an integer, got {data!r}")
        if ranges:
            _check_number(data, name, where)
        return data
    if kind == "bool":
        if not isinstance(data, bool):
            raise TypeError(f"{where} must be true or false, got {data!r}")
        return data
    if kind == "str":
        if not isinstance(data, str):
            raise TypeError(f"{where} must be a string, got {data!r}")
        return data
    return data


_PLANS: dict[int, tuple[Any, tuple[str, Any]]] = {}
""":func:`_plan` by the annotation's ``id`` (the annotation kept beside it, so the id stays
its own): hashing a ``Literal`` annotation walks its values, and took a quarter of the time
to load a report of 100,000 findings through an ``lru_cache``."""


def _plan(cls: Any) -> tuple[str, Any]:
    """How :func:`from_jsonable` converts to ``cls``: a kind and its arguments, worked out once
    per annotation (``typing.get_origin`` per value was a large share of loading time) and
    kept in :data:`_PLANS`."""
    plan = _make_plan(cls)
    _PLANS[id(cls)] = (cls, plan)
    return plan


def _make_plan(cls: Any) -> tuple[str, Any]:
    origin = typing.get_origin(cls)
    if cls is Any:
        return "any", None
    if origin in (Union, types.UnionType):
        args = typing.get_args(cls)
        inner = [a for a in args if a is not type(None)]
        return "optional", (inner[0], type(None) in args)
    if origin is typing.Literal and all(isinstance(a, str) for a in typing.get_args(cls)):
        # A Literal of strings (pipecheck.kinds) loads as any string: a newer writer's value
        # (a new finding kind, say) must not fail the load.
        return "str", None
    if dataclasses.is_dataclass(cls):
        return "dataclass", getattr(cls, "json_upgrade", None)
    if origin is list:
        return "list", typing.get_args(cls)[0]
    if origin is dict:
        return "dict", typing.get_args(cls)[1]
    for simple in (float, int, bool, str):
        if cls is simple:
            return simple.__name__, None
    return "any", None


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """``(name, resolved type, required)`` per field of dataclass ``cls``, computed once per
    class (``typing.get_type_hints`` is slow: calling it per record made loading a report of
    80,000 timeline records take half a minute)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name],
                  f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                 for f in dataclasses.fields(cls))


SIGNED_FIELDS = frozenset({"worker_id", "id", "memory_growth_bytes_per_s",
                           "main_memory_growth_bytes_per_s", "saving_s"})
"""Numeric fields that may be negative: worker ids (-1 is the main process with
``num_workers=0``), the memory growth slopes (memory can shrink) and the stress epoch-start
``saving_s`` (persistent workers may be slower)."""


PER_SECOND_FRACTIONS = frozenset({"cpu_fraction", "runqueue_fraction", "noise_fraction",
                                  "threshold_fraction", "tolerance_fraction",
                                  "old_noise_fraction", "new_noise_fraction"})
"""``*_fraction`` fields that are not shares of a whole, so only >= 0: seconds per busy second
(a worker whose dataset runs several threads, NumPy, OpenCV, torch ops, uses more than one CPU
second per busy second) and the relative spreads of a rate (the stress search's noise and
the thresholds derived from it; a comparison's noise of each run and of both)."""


MAX_INTEGER = 2**63 - 1
"""Largest magnitude of an integer in a report read from a file: counts, bytes, pids and ids
all fit a signed 64-bit integer; a larger one (JSON has no limit) would overflow converting to
a float (``OverflowError``) where it is shown or computed with."""

MAX_ANY_DEPTH = 32
"""Deepest nesting of a free-form (``Any``-typed) value read from a file: pipecheck writes
evidence and configurations one or two levels deep; each level costs a stack frame in every
renderer that walks it."""


def _check_number(value: float, name: str, where: str) -> None:
    """Raise ``ValueError`` naming ``where`` when ``value``, held by field (or key) ``name``, is
    out of range (see :func:`from_jsonable`)."""
    _check_finite(value, where)
    if name.endswith("_fraction") and name not in PER_SECOND_FRACTIONS and not 0 <= value <= 1:
        raise ValueError(f"{where} must be a 0-1 fraction, got {value!r}")
    if value < 0 and name not in SIGNED_FIELDS and not (name == "at_s"
                                                         or name.endswith("_at_s")):
        raise ValueError(f"{where} must not be negative, got {value!r}")


def _check_finite(value: float, where: str) -> None:
    """Raise ``ValueError`` naming ``where`` for infinity, NaN, or an integer beyond
    :data:`MAX_INTEGER`."""
    if isinstance(value, int):
        if not -MAX_INTEGER <= value <= MAX_INTEGER:
            raise ValueError(f"{where} must be an integer of at most 2**63 - 1 in magnitude, "
                             f"got a {value.bit_length()}-bit one")
    elif not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")


def _check_any(value: Any, where: str, depth: int) -> None:
    """Check a free-form JSON value: finite numbers, bounded integers, at most
    :data:`MAX_ANY_DEPTH` levels (``ValueError`` naming the path)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        _check_finite(value, where)
        return
    if depth >= MAX_ANY_DEPTH:
        raise ValueError(f"{where} is nested more than {MAX_ANY_DEPTH} levels deep")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_any(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_any(item, f"{where}[{i}]", depth + 1)
