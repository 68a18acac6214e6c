"""The model's own error for predictions with workers from a ``num_workers=0`` run, measured on
the calibration suite's grid: how far the measured rates fall outside the interval the run's own
noise and the model's spans give, and the smallest band that holds 90% of them.

For every case of one or more ``calibration.py`` runs (``--json`` results with ``--records``),
the wrapped run's record is analysed by the pipecheck imported now. For each grid entry of 1 to
``max_workers`` workers it compares the unwrapped measured rate (the median of its rounds) with
``ThroughputModel.interval(..., model_error=False)``: inside, or below / above by the ratio
``measured / low`` or ``measured / high``. Cases whose figure pipecheck does not give are left
out: no model, or CPU-bound production from a starved intra-op pool (proposed with no
prediction, ``recommend.rules.starved_pool_workers``). Then, over bands ``(below, above)`` in
steps of 0.05 up to 0.5, the narrowest (``(1 + above) / (1 - below)``) that holds at least
``--coverage`` of the points (ties: the smaller ``below``), and how many each side misses,
beside what pipecheck's own band (``records.SERIAL_TO_WORKERS_ERROR``, which comes from this
table) holds: on a run it was not fitted to, that is the out-of-sample check.

    python benchmarks/model_error.py RESULTS.json:RECORDS_DIR [RESULTS.json:RECORDS_DIR ...]
        [--coverage 0.9]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from typing import Any, Optional

from pipecheck.analysis import analyze
from pipecheck.loader_settings import LoaderSettings
from pipecheck.recommend.limits import CPU_BOUND, producer_class
from pipecheck.records import SERIAL_TO_WORKERS_ERROR

STEP = 0.05
"""Band resolution: fractions of the interval's ends."""

LARGEST = 0.5
"""Widest fraction tried on either side."""


def points(results_path: str, records: str) -> list[dict[str, Any]]:
    """One dict per grid entry with workers, for every case with a figure: ``case``,
    ``workers``, ``measured``, ``low``, ``high``, ``point`` (samples/s)."""
    with open(results_path) as handle:
        results = json.load(handle)
    max_workers = results["arguments"]["max_workers"]
    found = []
    for row in results["rows"]:
        case = f"{row['pipeline']}-{row['condition']}"
        path = os.path.join(records, f"{case}.pickle")
        if not os.path.exists(path):
            continue
        with open(path, "rb") as handle:
            run = pickle.load(handle)
        model = analyze(run).model
        if model is None or model.samples_per_batch is None or model.measured.num_workers:
            continue
        if model.pool_starved and producer_class(model) == CPU_BOUND:
            continue  # proposed with no figure
        for workers in range(1, max_workers + 1):
            measured = row["grid"].get(f"nw={workers}")
            if measured is None:
                continue
            settings = LoaderSettings(num_workers=workers, prefetch_factor=2,
                                      persistent_workers=False)
            low, high = model.interval(settings, model_error=False)
            found.append({"case": case, "workers": workers, "measured": measured,
                          "low": low * model.samples_per_batch,
                          "high": high * model.samples_per_batch,
                          "point": model.predict(settings).batches_per_s
                          * model.samples_per_batch})
    return found


def held(found: list[dict[str, Any]], below: float, above: float) -> tuple[int, int, int]:
    """Points inside ``[low (1 - below), high (1 + above)]``, below it and above it."""
    under = sum(1 for p in found if p["measured"] < p["low"] * (1.0 - below))
    over = sum(1 for p in found if p["measured"] > p["high"] * (1.0 + above))
    return len(found) - under - over, under, over


def narrowest_band(found: list[dict[str, Any]], coverage: float
                   ) -> Optional[tuple[float, float]]:
    """The narrowest ``(below, above)`` on the :data:`STEP` grid holding ``coverage`` of the
    points, or ``None`` when none up to :data:`LARGEST` does."""
    steps = [i * STEP for i in range(int(round(LARGEST / STEP)) + 1)]
    best: Optional[tuple[float, float, float]] = None
    for below in steps:
        for above in steps:
            inside, _, _ = held(found, below, above)
            if inside < coverage * len(found):
                continue
            width = (1.0 + above) / (1.0 - below)
            if best is None or width < best[0] - 1e-12:
                best = (width, below, above)
    return None if best is None else (best[1], best[2])


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="RESULTS.json:RECORDS_DIR")
    parser.add_argument("--coverage", type=float, default=0.9,
                        help="share of the points the band must hold (default 0.9)")
    args = parser.parse_args(argv)
    found: list[dict[str, Any]] = []
    for pair in args.runs:
        results, _, records = pair.partition(":")
        if not records:
            parser.error(f"expected RESULTS.json:RECORDS_DIR, got {pair!r}")
        found.extend(points(results, records))
    if not found:
        print("no grid entry with workers in a case with a figure")
        return 1
    print(f"{'case':16} {'workers':>7} {'point':>8} {'interval (no model error)':>26} "
          f"{'measured':>9} {'where':>12}")
    for p in found:
        where = ("inside" if p["low"] <= p["measured"] <= p["high"]
                 else f"below x{p['measured'] / p['low']:.3f}" if p["measured"] < p["low"]
                 else f"above x{p['measured'] / p['high']:.3f}")
        print(f"{p['case']:16} {p['workers']:>7} {p['point']:>8,.0f} "
              f"{p['low']:>12,.0f}-{p['high']:<13,.0f} {p['measured']:>9,.0f} {where:>12}")
    inside, under, over = held(found, 0.0, 0.0)
    print(f"\n{len(found)} points; without a model error the interval holds {inside} "
          f"({under} below, {over} above)")
    inside, under, over = held(found, *SERIAL_TO_WORKERS_ERROR)
    print(f"pipecheck's band (records.SERIAL_TO_WORKERS_ERROR, -{SERIAL_TO_WORKERS_ERROR[0]:.0%}"
          f" / +{SERIAL_TO_WORKERS_ERROR[1]:.0%}): holds {inside} of {len(found)} "
          f"({under} below, {over} above)")
    band = narrowest_band(found, args.coverage)
    if band is None:
        print(f"no band up to {LARGEST:.0%} either side holds {args.coverage:.0%}")
        return 1
    inside, under, over = held(found, *band)
    print(f"narrowest band holding {args.coverage:.0%}: -{band[0]:.0%} / +{band[1]:.0%} "
          f"(x{(1 + band[1]) / (1 - band[0]):.2f} wider): holds {inside} of {len(found)} "
          f"({under} below, {over} above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
