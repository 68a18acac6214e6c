"""How close ``pipecheck attach``'s stall estimate comes to the training script's own figure.

For each loader of ``tests/support/attach_target.py`` (an unmodified script that records
``time.time()`` before and after every ``next()``) and each worker count, the script is started,
left to reach its steady state, and ``pipecheck attach PID --duration D --json`` is run on it.
The script's own stall over pipecheck's window (``attach.window_start_unix_s`` to
``window_end_unix_s``: seconds inside ``next()`` over the window) is compared with pipecheck's
estimate (main-thread samples inside ``_BaseDataLoaderIter.__next__``) and its 95% Wilson
interval; the error is printed in percentage points, with whether the script's figure lies in
the interval.

Loaders: ``latency`` (each sample sleeps 10 ms), ``cpu`` (each sample burns 5 ms of CPU),
``io`` (each sample reads 64 KiB of a generated file, then burns 2.5 ms: mixed); batch 4, a
step burning 20 ms of CPU.

``--hostile-names``: the step and each sample's work run under function and file names holding
newlines, ``;`` and text shaped like py-spy's raw lines (``tests/support/hostile_names.py``);
the estimate must not move (pipecheck reads py-spy's speedscope JSON, not its text lines).

Usage: ``python benchmarks/attach_accuracy.py [--duration S] [--workers 0,2]
[--loaders latency,cpu,io] [--rounds R] [--hostile-names]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from attach_target import own_stall  # noqa: E402

TARGET = ROOT / "tests" / "support" / "attach_target.py"
ITEM_S = {"latency": 0.01, "cpu": 0.005, "io": 0.005}


def start(loader: str, workers: int, folder: Path,
          hostile: bool = False) -> tuple[subprocess.Popen, Path]:
    record, ready = folder / f"{loader}-{workers}.txt", folder / f"{loader}-{workers}.ready"
    ready.unlink(missing_ok=True)  # an earlier round's: wait for this target's own
    target = subprocess.Popen([sys.executable, str(TARGET), "--loader", loader, "--workers",
                               str(workers), "--item-s", str(ITEM_S[loader]), "--record",
                               str(record), "--ready", str(ready)]
                              + (["--hostile-names"] if hostile else []))
    deadline = time.monotonic() + 120
    while not ready.exists():
        if target.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the {loader} script with {workers} workers did not start")
        time.sleep(0.1)
    time.sleep(2.0)  # past start-up
    return target, record


def measure(loader: str, workers: int, duration_s: float, folder: Path,
            hostile: bool = False) -> dict:
    target, record = start(loader, workers, folder, hostile)
    out = folder / f"{loader}-{workers}.json"
    try:
        done = subprocess.run([sys.executable, "-m", "pipecheck", "attach", str(target.pid),
                               "--duration", str(duration_s), "--json", str(out), "--quiet"],
                              capture_output=True, text=True, cwd=ROOT)
    finally:
        target.terminate()
        target.wait(timeout=60)
    if done.returncode != 0:
        raise SystemExit(f"pipecheck attach failed: {done.stderr.strip()}")
    section = json.loads(out.read_text())["attach"]
    own = own_stall(str(record), section["window_start_unix_s"], section["window_end_unix_s"])
    return {"own": own, **section}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--loaders", default="latency,cpu,io")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--hostile-names", action="store_true")
    args = parser.parse_args()
    print(f"pipecheck attach --duration {args.duration:g}"
          f"{' (hostile function names)' if args.hostile_names else ''}; error = estimate - "
          "script's own, percentage points")
    print(f"{'loader':8} {'workers':>7} {'estimate':>9} {'95% interval':>15} {'own':>7} "
          f"{'error pp':>8} {'in CI':>5} {'samples':>7} {'class':>14}")
    errors = []
    with tempfile.TemporaryDirectory(prefix="attach-accuracy.") as tmp:
        for _ in range(args.rounds):
            for loader in args.loaders.split(","):
                for workers in (int(w) for w in args.workers.split(",")):
                    r = measure(loader, workers, args.duration, Path(tmp),
                                args.hostile_names)
                    low, high = r["stall_interval"]
                    error = (r["stall_fraction"] - r["own"]) * 100
                    errors.append(abs(error))
                    print(f"{loader:8} {workers:>7} {r['stall_fraction'] * 100:>8.1f}% "
                          f"{low * 100:>6.1f}-{high * 100:>5.1f}% {r['own'] * 100:>6.1f}% "
                          f"{error:>+8.1f} {'yes' if low <= r['own'] <= high else 'no':>5} "
                          f"{r['main_thread_samples']:>7} {r['workers_class'] or '-':>14}",
                          flush=True)
    print(f"max |error| {max(errors):.1f} pp, mean |error| {sum(errors) / len(errors):.1f} pp "
          f"over {len(errors)} runs")


if __name__ == "__main__":
    main()
