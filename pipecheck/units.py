"""Number formatting shared by analysis messages and every renderer: each function returns a
short string with its unit.

``None`` means "not measured" (see :mod:`pipecheck.records`) and always renders as
:data:`NOT_MEASURED`, never as a zero. Non-finite floats (NaN, inf) render as
:data:`NOT_MEASURED` too: pipecheck never reports them as measurements.
"""

from __future__ import annotations

import math
from typing import Any, Optional

NOT_MEASURED = "n/a"
"""What a renderer shows for a value that was not measured (``None``)."""

_KIB = 1024
_MIB = 1024**2
_GIB = 1024**3


def _missing(value: Optional[float]) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def significant(value: Optional[float], digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits below 1000 (``0.0123``, ``12.3``, ``123``) and
    a thousands-separated integer from 1000 up (``12,345``). No unit."""
    if _missing(value):
        return NOT_MEASURED
    assert value is not None  # _missing() is True for None
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(magnitude)))
    text = f"{value:.{decimals}f}"
    # Rounding can carry into a new digit (999.6 -> "1000"); keep the thousands separator then.
    return f"{float(text):,.0f}" if abs(float(text)) >= 1000 else text


def seconds(value_s: Optional[float]) -> str:
    """A duration in seconds: ``"850 µs"``, ``"12.3 ms"``, ``"1.20 s"``, ``"2 min 05 s"``,
    ``"1 h 02 min"``. Negative durations keep their sign."""
    if _missing(value_s):
        return NOT_MEASURED
    assert value_s is not None  # _missing() is True for None
    sign = "-" if value_s < 0 else ""
    v = abs(value_s)
    if v == 0:
        return "0 s"
    if v < 1e-3:
        return f"{sign}{significant(v * 1e6)} µs"
    if v < 1:
        return f"{sign}{significant(v * 1e3)} ms"
    if v < 60:
        return f"{sign}{v:.2f} s"
    if v < 3600:
        minutes, rest_s = divmod(round(v), 60)
        return f"{sign}{minutes} min {rest_s:02d} s"
    hours, rest_s = divmod(round(v), 3600)
    return f"{sign}{hours} h {rest_s // 60:02d} min"


def size(value_bytes: Optional[float]) -> str:
    """A size in bytes with binary units (1 KiB = 1024 B): ``"512 B"``, ``"12.3 KiB"``,
    ``"123 MiB"``, ``"1.23 GiB"``."""
    if _missing(value_bytes):
        return NOT_MEASURED
    assert value_bytes is not None  # _missing() is True for None
    v = abs(value_bytes)
    sign = "-" if value_bytes < 0 else ""
    if v < _KIB:
        return f"{sign}{v:.0f} B"
    if v < _MIB:
        return f"{sign}{significant(v / _KIB)} KiB"
    if v < _GIB:
        return f"{sign}{significant(v / _MIB)} MiB"
    return f"{sign}{significant(v / _GIB)} GiB"


def mib(value_bytes: Optional[int]) -> str:
    """A size in bytes as MiB with one decimal (``"812.4 MiB"``), for aligned table columns."""
    if _missing(value_bytes):
        return NOT_MEASURED
    assert value_bytes is not None  # _missing() is True for None
    return f"{value_bytes / _MIB:,.1f} MiB"


def percent(fraction: Optional[float], decimals: int = 1) -> str:
    """A 0-1 fraction as a percentage: ``0.412 -> "41.2%"``."""
    if _missing(fraction):
        return NOT_MEASURED
    assert fraction is not None  # _missing() is True for None
    return f"{fraction * 100:.{decimals}f}%"


def percent_value(value_percent: Optional[float], decimals: int = 1) -> str:
    """A value already in 0-100 percent (psutil's convention): ``41.2 -> "41.2%"``."""
    if _missing(value_percent):
        return NOT_MEASURED
    return f"{value_percent:.{decimals}f}%"


def rate(value_per_s: Optional[float], unit: str) -> str:
    """A rate with its unit per second: ``rate(12.34, "samples") -> "12.3 samples/s"``."""
    if _missing(value_per_s):
        return NOT_MEASURED
    return f"{significant(value_per_s)} {unit}/s"


def batch_rate(value_per_s: Optional[float]) -> str:
    """``rate(value, "batches")``: ``12.34 -> "12.3 batches/s"``."""
    return rate(value_per_s, "batches")


def bytes_rate(value_bytes_per_s: Optional[float]) -> str:
    """Storage throughput in decimal units per second, as disk and network tools print it:
    ``850 -> "850 B/s"``, ``3_780 -> "3.78 kB/s"``, ``1_500_000 -> "1.50 MB/s"``,
    ``1.2e9 -> "1.20 GB/s"``."""
    if _missing(value_bytes_per_s):
        return NOT_MEASURED
    assert value_bytes_per_s is not None  # _missing() is True for None
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if abs(value_bytes_per_s) >= scale:
            return f"{significant(value_bytes_per_s / scale)} {unit}"
    return f"{value_bytes_per_s:.0f} B/s"


def cores(value_cores: Optional[float]) -> str:
    """CPU usage in cores (1.0 = one fully busy core): ``1.8 -> "1.80 cores"``. psutil percents
    convert as ``percent / 100``; CPU seconds as ``cpu_s / wall_s``."""
    if _missing(value_cores):
        return NOT_MEASURED
    return f"{value_cores:.2f} cores"


def count(value: Optional[int], noun: str, plural: Optional[str] = None) -> str:
    """An integer count with its noun, ``plural`` (default ``noun + "s"``) unless it is 1:
    ``count(3, "batch", "batches") -> "3 batches"``."""
    if value is None:
        return NOT_MEASURED
    return f"{value:,} {noun if value == 1 else (plural or noun + 's')}"


def setting_value(value: object) -> str:
    """A DataLoader setting's value as a user would type it in Python: ``True``, ``4``, ``None``,
    ``'spawn'``."""
    return repr(value)


def duration_quantiles(q: Any) -> str:
    """A :class:`pipecheck.records.Quantiles` of durations in seconds as
    ``"mean 12.0 ms, p50 11.0 ms, p90 15.0 ms, p99 20.0 ms"``; ``None`` is not measured."""
    if q is None:
        return NOT_MEASURED
    return (f"mean {seconds(q.mean)}, p50 {seconds(q.p50)}, p90 {seconds(q.p90)}, "
            f"p99 {seconds(q.p99)}")
