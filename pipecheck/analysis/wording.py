"""Number formatting for finding messages and recommendation reasons (plain text, units
spelled out). Analysis-side only; renderers have their own formatting."""

from __future__ import annotations


def percent(fraction: float) -> str:
    """A 0-1 fraction as a percentage with one decimal: ``0.342 -> "34.2%"``."""
    return f"{fraction * 100:.1f}%"


def seconds(value_s: float) -> str:
    """A duration: ``"1.80 s"`` from one second up, else milliseconds ``"45.0 ms"``."""
    if value_s >= 1.0:
        return f"{value_s:.2f} s"
    return f"{value_s * 1e3:.1f} ms"


def rate(value_per_s: float, unit: str = "batches") -> str:
    """A rate with three significant figures or more: ``"12.3 batches/s"``."""
    if value_per_s >= 100:
        return f"{value_per_s:.0f} {unit}/s"
    if value_per_s >= 10:
        return f"{value_per_s:.1f} {unit}/s"
    return f"{value_per_s:.2f} {unit}/s"


def mebibytes(value_bytes: float) -> str:
    """Bytes as whole MiB: ``"212 MiB"``."""
    return f"{value_bytes / 2**20:.0f} MiB"


def count(number: int, noun: str, plural: str = "") -> str:
    """``count(1, "worker") -> "1 worker"``, ``count(3, "worker") -> "3 workers"``; ``plural``
    replaces the default ``noun + "s"``."""
    return f"{number} {noun}" if number == 1 else f"{number} {plural or noun + 's'}"
