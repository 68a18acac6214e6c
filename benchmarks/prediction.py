"""The earlier three-pipeline prediction benchmark, now a subset of the calibration suite.

``calibration.py`` superseded it: the same method (from ``num_workers=0`` under
``pipecheck.wrap``, the recommendation applied, a grid of ``num_workers`` measured unwrapped,
medians of interleaved rounds, quiet and beside a CPU-burning neighbour in another session)
on eight classes of pipeline, with the interval's coverage and width, the step's ceiling and
a summary against issue 26's targets. This runs it on the three pipelines this benchmark had
(``jpeg``, ``fft``, ``latency``; the latency pipeline is now 2-6 ms of sleep per item, where
it was 2 ms), keeping its options; every other option passes through to ``calibration.py``:

    python benchmarks/prediction.py [--seconds 12] [--rounds 3] [--max-workers 4] [--only jpeg]
        [--quiet-only] [--neighbour session|group|child] [--pipelines jpeg,fft] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibration  # noqa: E402


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["jpeg", "fft", "latency"])
    parser.add_argument("--quiet-only", action="store_true")
    parser.add_argument("--pipelines", default="jpeg,fft,latency")
    parser.add_argument("--seconds", default="12")
    args, rest = parser.parse_known_args(argv)
    pipelines = args.only or args.pipelines
    conditions = "quiet" if args.quiet_only else "quiet,busy"
    return calibration.main(["--pipelines", pipelines, "--conditions", conditions,
                             "--seconds", args.seconds, *rest])


if __name__ == "__main__":
    sys.exit(main())
