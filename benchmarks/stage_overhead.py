"""Cost of per-stage timing on the demo's real pipeline (JPEG decode, crop, flip, normalize).

The demo's WebDataset pipeline (``pipecheck.demo.build_dataset`` over its 2048 JPEG shards) is
iterated in this process, plain and with every stage timed (``probes.stages.time_pipeline_stages``: the
pipeline object registered, not copied),
alternately, ``--rounds`` times each over the same shards; the figure is the ratio of the
fastest rounds (noise on a shared machine only adds time), plus the median of per-pair ratios.
Stage timing is measured alone here: the worker and consumer probes have their own benchmarks
(``overhead.py``, ``worker_probe_cost.py``). In-process, so no worker start-up is in the figure.

Target (issue "Where time goes inside the pipeline"): <= 2 %.

    python benchmarks/stage_overhead.py [--rounds 7] [--images 512]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from pipecheck.demo import build_dataset
from pipecheck.demo_data import default_data_dir, ensure_shards
from pipecheck.probes.stages import time_pipeline_stages


def _epoch_s(dataset) -> tuple[float, int]:
    started = time.perf_counter()
    count = sum(1 for _ in dataset)
    return time.perf_counter() - started, count


def _identity(src):
    yield from src


def per_stage_cost_us(items: int = 200_000, stages: int = 8) -> float:
    """Microseconds the timing adds per item and stage: ``stages`` pass-through generator
    stages over ``items`` integers, timed vs plain (best of 5 each)."""
    from webdataset import DataPipeline

    plain = DataPipeline(lambda: iter(range(items)), *([_identity] * stages))
    timed = DataPipeline(lambda: iter(range(items)), *([_identity] * stages))
    time_pipeline_stages(timed, tempfile.mkdtemp(prefix="pipecheck-stage-bench-"), "cost")
    best = {}
    for name, pipeline in (("plain", plain), ("timed", timed)):
        best[name] = min(_epoch_s(pipeline)[0] for _ in range(5))
    return (best["timed"] - best["plain"]) / items / (stages + 1) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--images", type=int, default=512, help="images per round")
    args = parser.parse_args()
    urls = ensure_shards(default_data_dir())
    plain, timed = build_dataset(urls), build_dataset(urls)
    for pipeline in (plain, timed):
        pipeline.pipeline.append(lambda src: (x for _, x in zip(range(args.images), src)))
    time_pipeline_stages(timed, tempfile.mkdtemp(prefix="pipecheck-stage-bench-"), "bench")
    _epoch_s(plain), _epoch_s(timed)  # warm the page cache and imports
    plain_s, timed_s, ratios = [], [], []
    for round_ in range(args.rounds):
        order = [(plain, plain_s), (timed, timed_s)]
        if round_ % 2:
            order.reverse()
        for dataset, times in order:
            seconds, count = _epoch_s(dataset)
            times.append(seconds)
        ratios.append(timed_s[-1] / plain_s[-1])
    per_image_us = min(plain_s) / count * 1e6
    print(f"demo pipeline, {count} images per round, {args.rounds} rounds each, "
          f"{len(timed.pipeline)} stages timed")
    print(f"plain: best {min(plain_s):.3f} s ({per_image_us:.0f} us/image); "
          f"timed: best {min(timed_s):.3f} s")
    print(f"stage timing overhead: {min(timed_s) / min(plain_s) - 1:+.2%} (best of each), "
          f"{statistics.median(ratios) - 1:+.2%} (median of pairs)")
    cost_us = per_stage_cost_us()
    print(f"timing cost: {cost_us:.3f} us per item per stage (pass-through stages); on this "
          f"pipeline that is {cost_us * len(timed.pipeline) / per_image_us:.3%} of an image's "
          f"time")


if __name__ == "__main__":
    main()
