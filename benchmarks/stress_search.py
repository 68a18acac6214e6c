"""Model-guided stress search vs the full grid, on four synthetic pipelines.

For each pipeline (a module-level factory below) it runs ``pipecheck.stress`` twice with the same
trial length and the same automatic candidates (``num_workers`` 0 .. max(8, 4 x CPUs),
``prefetch_factor`` 2 and 4, ``in_order`` True and False with 2+ workers where torch has it;
``--in-order-only`` keeps torch's default order): ``search="grid"`` (every candidate) and
``search="model"``. It
prints the grid's best samples/s, the search's best (and their ratio), the wall time each spent
measuring (and the ratio), the number of trials, and the model's prediction error on the
search's best (fastest measured) configuration (``|predicted / measured - 1|``, the prediction
made before that trial ran; ``n/a`` when it is a calibration trial, which has none). The
report's recommendation may be a cheaper tie with it (``pipecheck.stress.choice``).

Targets (issue 3, item 3): search best within 5 % of grid best; search time <= 40 % of grid
time; prediction error on the search's best <= 15 %. When the two picks differ, both are
re-measured ``--recheck`` times alternately: a single trial's rate varies by several percent on
a shared machine, so the one-shot ratio alone cannot tell a worse pick from noise.

Trials run in this process (factories, not TARGET strings) so the benchmark measures the search,
not interpreter start-up. Every pipeline emulates a 5 ms training step per batch.

    python benchmarks/stress_search.py [--batches 80] [--trial-seconds 3] [--only NAME]
                                       [--in-order-only]
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from torch.utils.data import DataLoader, Dataset

import pipecheck

BATCH_SIZE = 8
SAMPLES = 4000
STEP_S = 0.005
PER_SAMPLE_S = 0.0025


def _busy(seconds: float) -> None:
    """Spin for ``seconds`` of this thread's CPU time: a fixed amount of work. (A wall-clock
    deadline would let a worker descheduled mid-sample finish with less work done, rewarding
    more workers than cores.)"""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Latency(Dataset):
    """Each sample sleeps ``PER_SAMPLE_S`` (no CPU): scales with workers past the core count."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(PER_SAMPLE_S)
        return torch.tensor([index])


class CpuBound(Dataset):
    """Each sample spins the CPU for ``PER_SAMPLE_S``: scales only up to the usable CPUs."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> torch.Tensor:
        _busy(PER_SAMPLE_S)
        return torch.tensor([index])


class HeavyTail(Dataset):
    """Latency with a heavy tail: most samples sleep 1 ms, 3 % sleep 40 ms (seeded per index)."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> torch.Tensor:
        slow = random.Random(index).random() < 0.03
        time.sleep(0.040 if slow else 0.001)
        return torch.tensor([index])


class Images(Dataset):
    """Cheap samples (a 3x64x64 tensor); the work is in :func:`heavy_collate`."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((3, 64, 64), float(index % 251))


def heavy_collate(samples: list) -> torch.Tensor:
    """Stack, then normalize and augment with real tensor work plus ~10 ms of CPU per batch."""
    batch = torch.stack(samples)
    batch = (batch - batch.mean()) / (batch.std() + 1e-6)
    _busy(0.010)
    return torch.flip(batch, dims=[3])


def _loader(dataset: Dataset, collate_fn=None, **kwargs) -> DataLoader:
    return DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=False, collate_fn=collate_fn,
                      **kwargs)


def latency_bound(**kwargs) -> DataLoader:
    return _loader(Latency(), **kwargs)


def cpu_bound(**kwargs) -> DataLoader:
    return _loader(CpuBound(), **kwargs)


def heavy_tailed(**kwargs) -> DataLoader:
    return _loader(HeavyTail(), **kwargs)


def collate_heavy(**kwargs) -> DataLoader:
    return _loader(Images(), collate_fn=heavy_collate, **kwargs)


PIPELINES = {"latency-bound": latency_bound, "cpu-bound": cpu_bound,
             "heavy-tailed": heavy_tailed, "collate-heavy": collate_heavy}


def _run(factory, search: str, batches: int, seconds: float, in_order):
    started = time.perf_counter()
    report = pipecheck.stress(factory, search=search, step_time_s=STEP_S, trial_batches=batches,
                              trial_s=seconds, budget_s=900.0, timeout_s=30.0,
                              in_order=in_order, stacks=False,
                              # the epoch-start pair is the same for both; leave it out of
                              # the search-vs-grid comparison
                              persistent_workers=False)
    return report.to_dict()["stress"], time.perf_counter() - started


def _recheck(factory, configs: list[dict], rounds: int, batches: int, seconds: float
             ) -> list[float]:
    """Mean samples/s of each config over ``rounds`` alternating re-measurements."""
    totals = [0.0] * len(configs)
    for round_ in range(rounds):
        order = list(range(len(configs)))
        if round_ % 2:
            order.reverse()
        for index in order:
            config = configs[index]
            report = pipecheck.stress(
                factory, num_workers=[config["num_workers"]],
                prefetch_factors=[config["prefetch_factor"]] if config.get("prefetch_factor")
                else None,
                in_order=[config["in_order"]] if config.get("in_order") is not None else None,
                step_time_s=STEP_S, trial_batches=batches, trial_s=seconds, stacks=False,
                persistent_workers=False)
            totals[index] += report.stress.best.samples_per_s / rounds
    return totals


def _label(config: dict) -> str:
    text = f"w={config['num_workers']},pf={config.get('prefetch_factor')}"
    return text + (",ooo" if config.get("in_order") is False else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=80)
    parser.add_argument("--trial-seconds", type=float, default=3.0)
    parser.add_argument("--only", choices=sorted(PIPELINES))
    parser.add_argument("--in-order-only", action="store_true",
                        help="search in_order=True only (torch's default delivery order)")
    parser.add_argument("--recheck", type=int, default=3, metavar="N",
                        help="when the two picks differ, re-measure both N times alternately "
                        "(0: off) to tell a worse pick from noise")
    args = parser.parse_args()
    in_order = [True] if args.in_order_only else None
    names = [args.only] if args.only else list(PIPELINES)
    print(f"{'pipeline':14} {'grid best':>22} {'search best':>22} {'ratio':>6} "
          f"{'grid s':>7} {'search s':>8} {'time':>5} {'trials':>6} {'pred err':>8}")
    for name in names:
        grid, grid_s = _run(PIPELINES[name], "grid", args.batches, args.trial_seconds, in_order)
        found, search_s = _run(PIPELINES[name], "model", args.batches, args.trial_seconds,
                               in_order)
        g, s = grid["best"], found["best"]
        predicted = s.get("predicted_samples_per_s")
        error = "n/a" if predicted is None else f"{abs(predicted / s['samples_per_s'] - 1):.1%}"
        measured = sum(1 for t in found["trials"] if t["measured"])
        print(f"{name:14} {g['samples_per_s']:7.0f} {_label(g['config']):>14} "
              f"{s['samples_per_s']:7.0f} {_label(s['config']):>14} "
              f"{s['samples_per_s'] / g['samples_per_s']:6.2f} {grid_s:7.1f} {search_s:8.1f} "
              f"{search_s / grid_s:5.0%} {measured:>2}/{len(grid['trials']):<3} {error:>8}")
        print(f"{'':14} search stop: {found['search']['stop_reason']}")
        if args.recheck and g["config"] != s["config"]:
            grid_again, search_again = _recheck(PIPELINES[name], [g["config"], s["config"]],
                                                args.recheck, args.batches, args.trial_seconds)
            print(f"{'':14} re-measured {args.recheck}x alternately: grid's pick "
                  f"{grid_again:.0f}, search's pick {search_again:.0f} samples/s "
                  f"(ratio {search_again / grid_again:.2f})")


if __name__ == "__main__":
    main()
