"""Render any JSON value of a report as escaped HTML, formatting numbers by the unit in their key.

Used for report sections whose layout this renderer does not know in advance (stages, sharding,
stacks, device, and whatever later versions add) and for findings' evidence. Units come from the key
names, as the JSON contract (docs/architecture.md) prescribes: ``_s`` seconds, ``_bytes`` bytes,
``_bytes_per_s`` bytes/s, ``<noun>_per_s`` a rate of ``<noun>``, ``bytes_per_<noun>`` bytes per
``<noun>``, ``_fraction`` a 0-1 fraction, ``_percent`` 0-100 percent, ``_hz`` hertz; a trailing
``_low`` / ``_high`` (an interval's bounds) keeps the unit before it; ids, pids and line numbers are
shown as written.
Every string is passed through :func:`html.escape`.
"""

from __future__ import annotations

import html
import itertools
import math
from typing import Any, Optional

from pipecheck import units as fmt

MAX_ROWS = 200
"""Rows shown of one list, entries of one object and values of one list of scalars; longer
ones say how many were left out (the JSON has them all)."""

FRACTION_MAPS = frozenset({"main_wait", "stages"})
"""Keys whose value maps names to 0-1 shares (:class:`~pipecheck.records.StacksRecord`'s
``main_wait`` and ``stages``): their numbers are shown as percentages."""


def format_value(key: Optional[str], value: Any) -> str:
    """``value`` as plain (unescaped) text with the unit its ``key`` names: ``("wait_s", 0.05)``
    -> ``"50.0 ms"``, ``("stall_fraction", 0.4)`` -> ``"40.0%"``. ``None`` and non-finite floats
    are :data:`pipecheck.units.NOT_MEASURED`."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return fmt.NOT_MEASURED
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, (int, float)):
        name = key or ""
        if name.endswith(("_low", "_high")):  # an interval's bound: the unit of its figure
            return format_value(name.rsplit("_", 1)[0], value)
        if name == "bytes_per_s":
            return fmt.bytes_rate(value)
        if (name.startswith("bytes_per_") or "_bytes_per_" in name) and \
                not name.endswith("_per_s"):  # bytes_per_batch -> "1.00 MiB/batch"
            return f"{fmt.size(value)}/{name.rsplit('_per_', 1)[1]}"
        if name == "fraction" or name.endswith("_fraction"):
            return fmt.percent(value)
        if name == "percent" or name.endswith("_percent"):
            return fmt.percent_value(value)
        if name.endswith("_hz"):
            return f"{fmt.significant(value)} Hz"
        if name in ("line", "pid", "id") or name.endswith(("_line", "_pid", "_id")):
            return str(value)
        if name.endswith("_bytes_per_s"):
            return fmt.bytes_rate(value)
        if name.endswith("_bytes"):
            return fmt.size(value)
        if name.endswith("_per_s"):
            return fmt.rate(value, name[: -len("_per_s")].rsplit("_", 1)[-1] or "events")
        if name.endswith("_s"):
            return fmt.seconds(value)
        if isinstance(value, int):
            return f"{value:,}"
        return fmt.significant(value)
    return str(value)


def label(key: str) -> str:
    """A key as a column or row label, without the unit the value now shows: ``"busy_s"`` ->
    ``"busy"``, ``"rss_max_bytes"`` -> ``"rss max"``; ``fraction`` / ``percent`` / ``per s``
    stay (``"idle_s"`` and ``"idle_fraction"`` must not both read ``idle``)."""
    if key.endswith("_per_s") and not key.endswith("_bytes_per_s"):
        return key.replace("_", " ")  # "samples per s": the noun is the label
    for suffix in ("_bytes_per_s", "_bytes", "_hz", "_s"):
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)].replace("_", " ")
    return key.replace("_", " ")


def to_html(value: Any, key: Optional[str] = None) -> str:
    """Escaped HTML for ``value``: objects as a definition list, lists of objects as a table,
    other lists as comma-separated values, scalars formatted by ``key``'s unit."""
    if isinstance(value, dict):
        if not value:
            return '<span class="dim">none</span>'
        rows = "".join(
            f"<dt>{html.escape(label(str(k)))}</dt>"
            f"<dd>{to_html(v, 'fraction' if key in FRACTION_MAPS else str(k))}</dd>"
            for k, v in itertools.islice(value.items(), MAX_ROWS)
        )
        return f'<dl class="kv">{rows}</dl>{_more(len(value), "entries")}'
    if isinstance(value, (list, tuple)):
        if not value:
            return '<span class="dim">none</span>'
        if all(isinstance(item, dict) for item in value):
            return _table(list(value))
        shown = ", ".join(format_value(key, item) for item in value[:MAX_ROWS])
        return html.escape(shown) + _more(len(value), "values")
    return html.escape(format_value(key, value))


def _more(count: int, noun: str) -> str:
    """The line under a list cut at :data:`MAX_ROWS`, or ``""``."""
    if count <= MAX_ROWS:
        return ""
    return f'<p class="dim">... and {count - MAX_ROWS:,} more {noun} (see the JSON)</p>'



def _table(rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(k for row in rows[:MAX_ROWS] for k in row))[:MAX_ROWS]
    head = "".join(f"<th>{html.escape(label(str(c)))}</th>" for c in columns)
    body = []
    for row in rows[:MAX_ROWS]:
        cells = "".join(f"<td>{to_html(row.get(c), str(c))}</td>" for c in columns)
        body.append(f"<tr>{cells}</tr>")
    return (f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            f"{_more(len(rows), 'rows')}")
