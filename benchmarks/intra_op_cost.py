"""What a DataLoader worker pays per sample, against what the main process shows at
``num_workers=0`` with torch's default intra-op threads.

A worker runs one intra-op thread (torch sets it in ``_worker_loop``); the main process runs
``torch.get_num_threads()`` of them, and a transform made of small torch ops then spends CPU on
the pool's fork, join and spin-waits as well as on its work. pipecheck sees, per sample at
``num_workers=0``, the process's CPU (all threads) and the calling thread's own CPU
(:mod:`pipecheck.probes.consumer`); this prints both beside the one-thread cost (what a worker
pays) and the figure pipecheck's model takes for a worker: the calling thread's CPU where the
process used :data:`~pipecheck.analysis.producer.INTRA_OP_INFLATION_MIN` times more
(:func:`pipecheck.analysis.producer.intra_op_inflation`), else the process's. Quiet and with a
busy neighbour in this session (one CPU-burning process started here, outside this process
tree).

    python benchmarks/intra_op_cost.py [--samples 300]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipelines import FftDataset, JpegFolder, make_jpegs  # noqa: E402

from pipecheck.analysis.producer import INTRA_OP_INFLATION_MIN  # noqa: E402


def to_tensor_normalize() -> Callable[[int], object]:
    pixels = (np.random.default_rng(0).random((224, 224, 3)) * 255).astype(np.uint8)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def sample(_: int) -> object:
        tensor = torch.from_numpy(pixels).permute(2, 0, 1).float().div(255)
        return tensor.sub(mean).div(std)
    return sample


def measure(sample: Callable[[int], object], n: int, threads: int) -> tuple[float, float]:
    """(process CPU, calling thread's CPU) per sample in ms at ``threads`` intra-op threads."""
    torch.set_num_threads(threads)
    for i in range(min(n, 50)):
        sample(i)
    process, thread = time.process_time(), time.thread_time()
    for i in range(n):
        sample(i)
    return ((time.process_time() - process) / n * 1e3, (time.thread_time() - thread) / n * 1e3)


def neighbour() -> int:
    shell = subprocess.run(
        ["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True)
    return int(shell.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    default_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="pipecheck-bench-jpeg-") as folder:
        make_jpegs(folder, 256)
        jpeg, fft = JpegFolder(folder), FftDataset()
        transforms = {"to_tensor+normalize 224": to_tensor_normalize(),
                      "jpeg decode+crop 224": lambda i: jpeg[i % len(jpeg)],
                      "fft 128 (numpy)": lambda i: fft[i]}
        print(f"intra-op threads by default: {default_threads}; ms of CPU per sample")
        for condition in ("quiet", "busy"):
            burner = neighbour() if condition == "busy" else None
            try:
                time.sleep(0.5)
                for name, sample in transforms.items():
                    process, thread = measure(sample, args.samples, default_threads)
                    one, _ = measure(sample, args.samples, 1)
                    inflated = (default_threads > 1
                                and process >= INTRA_OP_INFLATION_MIN * thread)
                    estimate = thread if inflated else process
                    print(f"{condition:5} {name:26} main process {process:6.3f}, calling "
                          f"thread {thread:6.3f} (x{process / thread:.2f}); one thread (a "
                          f"worker) {one:6.3f}; pipecheck takes {estimate:6.3f} "
                          f"({estimate / one - 1:+.0%}){', inflated' if inflated else ''}")
            finally:
                if burner is not None:
                    os.kill(burner, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
