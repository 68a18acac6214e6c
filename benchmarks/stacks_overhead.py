"""What hot-stack sampling (``pipecheck.wrap(..., stacks=True)``) costs a training loop.

A CPU-bound pipeline (1 worker burning 10 ms of CPU per sample, batch 4, a 20 ms step that
burns the main thread's CPU) runs wrapped without and with py-spy at several sampling rates.
Runs alternate so load drifts hit every configuration; per configuration the median samples/s
over the rounds, its change against no sampling, and py-spy's own CPU seconds per wall second
are printed. On 2 cores py-spy competes with the step and the worker for the CPUs, so this is
the worst case for its overhead.

Usage: ``python benchmarks/stacks_overhead.py [--rounds R] [--samples N] [--rates 20,50,100]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import pipecheck  # noqa: E402
from pipecheck.probes import py_spy_setup  # noqa: E402

SAMPLE_CPU_S = 0.01
STEP_CPU_S = 0.02


def burn(cost_s: float) -> None:
    end = time.thread_time() + cost_s
    while time.thread_time() < end:
        pass


class BurnDataset(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        burn(SAMPLE_CPU_S)
        return torch.tensor([index])


def one_run(samples: int, rate_hz: int) -> tuple[float, float]:
    """(samples/s, py-spy CPU seconds per wall second) of one wrapped run; rate 0: no py-spy."""
    loader = DataLoader(BurnDataset(samples), batch_size=4, num_workers=1)
    options = {}
    if rate_hz:
        options = {"stacks": True, "stacks_window_s": 600.0, "stacks_rate_hz": rate_hz}
    with pipecheck.wrap(loader, **options) as wrapped:
        for _ in wrapped:
            burn(STEP_CPU_S)
        report = wrapped.report()
    overhead = 0.0
    if rate_hz and report.stacks is not None and report.stacks.overhead_cpu_s is not None:
        overhead = report.stacks.overhead_cpu_s / report.stacks.window_s
    return report.consumer.samples_per_s, overhead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=240)
    parser.add_argument("--rates", default="20,50,100")
    args = parser.parse_args()
    if py_spy_setup.find_py_spy() is None:
        sys.exit("py-spy is not installed")
    rates = [0] + [int(r) for r in args.rates.split(",")]
    results: dict[int, list[tuple[float, float]]] = {rate: [] for rate in rates}
    for _ in range(args.rounds):
        for rate in rates:
            results[rate].append(one_run(args.samples, rate))
    base = statistics.median(r[0] for r in results[0])
    print(f"{args.rounds} rounds x {args.samples} samples, 1 CPU-bound worker, "
          f"{STEP_CPU_S * 1e3:.0f} ms CPU step")
    print(f"{'py-spy rate':>12} {'samples/s':>10} {'change':>8} {'py-spy CPU':>11}")
    for rate in rates:
        rate_s = statistics.median(r[0] for r in results[rate])
        cpu = statistics.median(r[1] for r in results[rate])
        label = "off" if rate == 0 else f"{rate} Hz"
        print(f"{label:>12} {rate_s:>10.1f} {100 * (rate_s / base - 1):>+7.1f}% "
              f"{100 * cpu:>9.1f}% of a core")


if __name__ == "__main__":
    main()
