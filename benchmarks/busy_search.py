"""The model-guided stress search on a busy host, in trials too short for a scan of the other
processes (``probes/neighbours.py`` scans at most every 5 s): the case of
:attr:`pipecheck.analysis.contention.HostLoad.unscanned`.

A latency-bound loader (``tests/support/stress_targets.py``'s ``sleepy_loader``: 4-sample
batches, 10 ms of sleep a sample, about 25 batches/s a worker and no CPU) is searched with
``pipecheck.stress`` (1.5 s trials of 40 batches, as ``tests/integration/test_stress_search.py``
runs it) beside ``--neighbours`` CPU-burning processes (:class:`pipelines.Neighbour`, placed as
``--where`` says), ``--runs`` times. Per run it prints the best configuration's workers, and
each measured trial's workers, samples/s and the search's prediction made before it ran
(``None`` for calibration trials).

    python benchmarks/busy_search.py [--runs 2] [--neighbours 2] [--where group]
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "support"))
from pipelines import Neighbour  # noqa: E402
from stress_targets import sleepy_loader  # noqa: E402

import pipecheck  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--neighbours", type=int, default=2)
    parser.add_argument("--where", choices=("session", "group", "child"), default="group")
    args = parser.parse_args()
    with ExitStack() as stack:
        for _ in range(args.neighbours):
            stack.enter_context(Neighbour(args.where))
        for _ in range(args.runs):
            section = pipecheck.stress(sleepy_loader(batch_size=4), trial_batches=40,
                                       trial_s=1.5).stress
            measured = [(t.config["num_workers"], round(t.samples_per_s or 0),
                         None if t.predicted_samples_per_s is None
                         else round(t.predicted_samples_per_s))
                        for t in section.trials if t.measured]
            best = section.best.config["num_workers"] if section.best is not None else None
            print(f"best num_workers={best}; measured (workers, samples/s, predicted): "
                  f"{measured}", flush=True)


if __name__ == "__main__":
    main()
