"""How much py-spy's speedscope output weighs, and how long pipecheck takes to read it.

pipecheck reads py-spy's ``--format speedscope`` JSON (structured: no function name can forge a
stack), which keeps every sample instead of aggregating identical stacks as the ``raw`` text
format does; so its size grows with the window. For each duration, ``tests/support/
attach_target.py`` (latency-bound, ``--workers`` workers) is sampled by the
:class:`~pipecheck.probes.stacks.StackSampler` ``pipecheck attach`` uses (both py-spy processes,
the ``--idle`` one covering the workers, 50 Hz), and each output file's size, its samples and
the seconds pipecheck took to load and fold it (:func:`~pipecheck.probes.speedscope.
read_speedscope`) are printed, with the bytes per second of window.

Usage: ``python benchmarks/attach_output_size.py [--durations 10,60] [--workers 2]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "tests" / "support" / "attach_target.py"

from pipecheck.attach import ATTACH_RATE_HZ  # noqa: E402
from pipecheck.probes.speedscope import SampledStack  # noqa: E402
from pipecheck.probes.stacks import StackSampler  # noqa: E402


class MeasuredSampler(StackSampler):
    """The attach sampler, noting each output's size, samples and load time as it reads it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.outputs: dict[str, tuple[int, int, float]] = {}

    def _read(self, name: str) -> list[SampledStack]:
        path = os.path.join(self._dir or "", name)
        size = os.path.getsize(path) if os.path.exists(path) else 0
        started = time.perf_counter()
        stacks = super()._read(name)
        self.outputs[name] = (size, sum(s.samples for s in stacks),
                              time.perf_counter() - started)
        return stacks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--durations", default="10,60")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="attach-output.") as tmp:
        ready = Path(tmp) / "ready"
        target = subprocess.Popen([sys.executable, str(TARGET), "--workers", str(args.workers),
                                   "--record", str(Path(tmp) / "record.txt"), "--ready",
                                   str(ready)])
        try:
            while not ready.exists():
                if target.poll() is not None:
                    raise SystemExit("the target did not start")
                time.sleep(0.1)
            time.sleep(2.0)
            print(f"{args.workers} workers, {ATTACH_RATE_HZ} Hz")
            print(f"{'window s':>8} {'output':>12} {'bytes':>10} {'kB/s':>7} {'samples':>8} "
                  f"{'load s':>7}")
            for duration_s in (float(d) for d in args.durations.split(",")):
                sampler = MeasuredSampler(target.pid, window_s=duration_s,
                                          rate_hz=ATTACH_RATE_HZ, idle_subprocesses=True)
                sampler.start()
                time.sleep(duration_s)
                sampler.stop()
                if sampler.record().status != "ok":
                    raise SystemExit(f"sampling failed: {sampler.record().note}")
                for name, (size, samples, load_s) in sampler.outputs.items():
                    print(f"{duration_s:>8g} {name:>12} {size:>10} {size / duration_s / 1e3:>7.1f} "
                          f"{samples:>8} {load_s:>7.3f}", flush=True)
        finally:
            target.terminate()
            target.wait(timeout=60)


if __name__ == "__main__":
    main()
