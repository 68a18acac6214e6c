"""How much CPU the main process's other threads use beside the calling one at
``num_workers=0``: the evidence behind ``pipecheck.analysis.model.POOL_EVIDENCE_MIN_CORES``.

An intra-op pool is told active from ratios (process CPU over the calling thread's, in the
sampled waits and steps). On a loader that sleeps and a near-free step those ratios rest on a
few microseconds of other threads (pipecheck's sampler, the garbage collector) landing in a
short window, and can pass :data:`pipecheck.analysis.producer.INTRA_OP_INFLATION_MIN` by
chance. This wraps each pipeline named at ``num_workers=0`` for ``--seconds``, ``--runs``
times, and prints per run: the other threads' cores over the sampled loop
(:func:`pipecheck.analysis.model.pool_extra_cores`), the two ratios, and whether those cores
are evidence enough for the ratios to count (``POOL_EVIDENCE_MIN_CORES``). ``sleepy`` is
``tests/support/stress_targets.py``'s ``sleepy_loader`` (4-sample batches, 10 ms of sleep a
sample) with no step; the others are ``benchmarks/pipelines.py``'s. Figures: docs/model.md#pool-evidence.

    python benchmarks/pool_evidence.py [--pipelines sleepy,latency,torchops,jpeg]
        [--seconds 2] [--runs 5] [--busy]

``--busy`` runs two CPU-burning neighbours (:class:`pipelines.Neighbour`) beside it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import ExitStack

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "support"))
from pipelines import PIPELINES, Neighbour, loader_with  # noqa: E402
from stress_targets import sleepy_loader  # noqa: E402

import pipecheck  # noqa: E402
from pipecheck.analysis.model import (  # noqa: E402
    POOL_EVIDENCE_MIN_CORES, pool_extra_cores, step_pool_inflation)


class NoStep:
    def step(self, batch) -> None:
        pass


def measure(name: str, data: str, seconds: float) -> str:
    """One wrapped run of ``name`` at ``num_workers=0``: a line of its figures."""
    if name == "sleepy":
        loader, model = sleepy_loader(), NoStep()
    else:
        pipeline = PIPELINES[name]
        folder = os.path.join(data, name)
        if pipeline.prepare is not None and not os.path.isdir(folder):
            os.makedirs(folder)
            pipeline.prepare(folder)
        loader = loader_with(pipeline.dataset(folder), {"num_workers": 0}, pipeline.iterable)
        model = pipeline.model()
    wrapped = pipecheck.wrap(loader)
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for batch in wrapped:
            model.step(batch)
            if time.monotonic() - start >= seconds:
                break
    run = wrapped.record()
    wrapped.close()
    extra = pool_extra_cores(run.consumer)
    evidence = "-" if extra is None else ("yes" if extra >= POOL_EVIDENCE_MIN_CORES else "no")
    extra_text = "-" if extra is None else f"{extra:.4f}"
    return (f"{name:9} other threads {extra_text:>7} cores  production ratio "
            f"{run.consumer.sampled_wait_cpu_s / (run.consumer.sampled_wait_thread_cpu_s or 1):.2f}"
            f"  step ratio {step_pool_inflation(run.consumer):.2f}  evidence {evidence}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", default="sleepy,latency,torchops,jpeg")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--busy", action="store_true", help="two CPU-burning neighbours")
    args = parser.parse_args()
    names = args.pipelines.split(",")
    for name in names:
        if name != "sleepy" and name not in PIPELINES:
            parser.error(f"--pipelines: unknown pipeline {name!r}")
    print(f"threshold {POOL_EVIDENCE_MIN_CORES} cores; torch {torch.__version__}, "
          f"{torch.get_num_threads()} intra-op threads, {'busy' if args.busy else 'quiet'}")
    with tempfile.TemporaryDirectory() as data, ExitStack() as stack:
        if args.busy:
            for _ in range(2):
                stack.enter_context(Neighbour("session"))
        for name in names:
            for _ in range(args.runs):
                print(measure(name, data, args.seconds), flush=True)


if __name__ == "__main__":
    main()
