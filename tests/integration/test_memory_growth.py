"""Worker memory growth (Theil-Sen slope of USS, Sen's interval) and /dev/shm headroom: on real
DataLoader workers and on numbers."""

from __future__ import annotations

import dataclasses
import math
import random
import time

import pytest
from torch.utils.data import DataLoader

import pipecheck
from cause_datasets import GrowingDataset, WarmingDataset
from fake_pipeline import FakeRun, simulate
from pipecheck.analysis import analyze
from pipecheck.analysis.memory import process_growth, shm_needed_bytes, theil_sen
from pipecheck.probes.host import HostProbe
from pipecheck.probes.dataset_memory import largest_containers, shared_memory_record
from pipecheck.records import MemorySample, SharedMemoryRecord

GROW_BYTES = 256 * 1024  # per item: each is its own mmap'd, fully written block
BATCH_SIZE = 4
CLEAN_RUNS = 10  # x 2 workers = up to 20 worker series tested per default run (20 runs: slow)


def _run(grow_bytes: int, samples: int, objects: int = 0):
    loader = DataLoader(GrowingDataset(samples, 0.01, grow_bytes, objects),
                        batch_size=BATCH_SIZE, num_workers=2)
    with pipecheck.wrap(loader, host_interval_s=0.1, memory_interval_s=0.1) as wrapped:
        for _ in wrapped:
            time.sleep(0.002)
        return wrapped.report()


def _findings(report, kind):
    return [f for f in report.diagnosis.findings if f.kind == kind]


@pytest.mark.slow
def test_a_dataset_that_grows_per_item_is_flagged_with_its_rate():
    report = _run(GROW_BYTES, 480, objects=5000)  # 2.4 s: >= 12 readings a worker when loaded
    found = _findings(report, "memory-growth")
    assert len(found) == 1, [(p.role, len(p.memory)) for p in report.host.processes]
    (finding,) = found
    true_per_batch = GROW_BYTES * BATCH_SIZE
    assert true_per_batch / 2 <= finding.evidence["bytes_per_batch"] <= true_per_batch * 2
    assert {w["id"] for w in finding.evidence["workers"]} == {0, 1}
    assert finding.evidence["time_to_exhaust_s"] > 0
    assert "dataset.records (list of 5,000 items" in finding.message  # copy-on-read candidate
    assert "per batch" in finding.message and "/s" in finding.message
    assert all(w.memory_growth_bytes_per_s > 0 for w in report.producer.workers)
    assert "memory-growth" in report.render(width=100) or "Worker memory grows" in report.render(
        width=100)


def _clean_runs(count):
    for _ in range(count):
        report = _run(0, 400)
        # The test ran (enough readings) on at least one worker of each run, and found nothing.
        # On a heavily loaded machine a worker can get too few readings even in this 2 s run;
        # that worker is then not tested, which is not a false positive either.
        assert any(w.memory_growth_bytes_per_s is not None for w in report.producer.workers)
        assert not _findings(report, "memory-growth")


@pytest.mark.slow
def test_a_clean_dataset_is_never_flagged():
    _clean_runs(CLEAN_RUNS)


@pytest.mark.slow
def test_a_clean_dataset_is_never_flagged_in_20_runs():
    _clean_runs(20)


# -- the statistics, on numbers ------------------------------------------------------------------


def test_theil_sen_recovers_a_slope_through_outliers():
    rng = random.Random(5)
    xs = [float(i) for i in range(30)]
    ys = [3.0 * x + rng.gauss(0, 1) for x in xs]
    ys[4] += 500  # outliers that would drag least squares
    ys[20] -= 800
    fit = theil_sen(xs, ys)
    assert fit.slope == pytest.approx(3.0, abs=0.2)
    assert fit.low < 3.0 < fit.high and fit.low > 2.5


def test_theil_sen_interval_contains_zero_for_noise():
    rng = random.Random(7)
    xs = [float(i) for i in range(20)]
    fit = theil_sen(xs, [rng.gauss(0, 1) for _ in xs])
    assert fit.low < 0 < fit.high


def test_theil_sen_edge_cases():
    assert theil_sen([1.0, 1.0], [2.0, 3.0]) is None
    fit = theil_sen([0.0, 1.0, 2.0], [0.0, 1.0, 2.0])
    assert fit.slope == 1.0 and math.isinf(fit.low)  # too few points for an interval
    with pytest.raises(ValueError):
        theil_sen([1.0], [1.0, 2.0])


def _series(values, step_s=1.0):
    return [MemorySample(at_s=i * step_s, rss_bytes=v, pss_bytes=v, uss_bytes=v)
            for i, v in enumerate(values)]


def test_warm_up_and_one_step_are_not_growth():
    mib = 2**20
    warm_up = [50 * mib, 80 * mib, 95 * mib] + [100 * mib] * 9
    step = [100 * mib] * 6 + [104 * mib] * 6  # one 4 MiB allocation midway: not material
    assert not process_growth(1, _series(warm_up)).significant
    assert not process_growth(1, _series(step)).significant
    leak = [100 * mib + i * 2 * mib for i in range(12)]
    growth = process_growth(1, _series(leak))
    assert growth.significant and growth.slope_bytes_per_s == pytest.approx(2 * mib)
    assert process_growth(1, _series(leak[:8])).readings == 6  # the first 2 of 8 are warm-up
    assert process_growth(1, _series(leak[:7])).significant  # 5 after warm-up: enough
    assert process_growth(1, _series(leak[:6])) is None  # 4 readings after warm-up: too few


def test_five_rising_readings_are_significant_exactly_and_one_fall_is_not():
    # Exactly, 5 readings each above the last happen by chance 1 time in 120 per direction
    # (inside 2.5%): the interval's lower end is the smallest pairwise slope. The normal
    # approximation gave no lower bound at all with 5 points.
    xs = [0.0, 2.0, 4.0, 6.0, 8.0]
    ys = [0.0, 2.5, 4.9, 7.6, 10.0]
    fit = theil_sen(xs, ys)
    pairwise = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(5) for j in range(i + 1, 5)]
    assert fit.low == min(pairwise) and fit.high == max(pairwise)
    assert fit.low > 0
    assert theil_sen(xs, [0.0, 2.5, 2.4, 7.6, 10.0]).low < 0  # one reading lower than before
    assert math.isinf(theil_sen(xs[:4], [0.0, 1.0, 2.0, 3.0]).low)  # 4 points: 1 in 24, too likely


def test_memory_that_rose_and_levelled_off_inside_the_window_is_not_growth():
    mib = 2**20
    # Read every 2 s: a cache filled over the first 14 s, flat (+-0.2 MiB) afterwards; the
    # warm-up third (4 readings) leaves half of the rise inside the tested readings.
    values = [10, 20, 30, 40, 52, 64, 76, 80, 80.3, 80.1, 80.4, 80.2]
    growth = process_growth(1, _series([int(v * mib) for v in values], step_s=2.0))
    # Rising in every pair and material, so without the persistence test it would be flagged;
    # its later half is flat.
    assert growth.low_bytes_per_s > 0 and growth.slope_bytes_per_s * growth.span_s > 8 * mib
    assert growth.late_bytes_per_s < 0.5 * growth.slope_bytes_per_s
    assert not growth.significant
    steady = [10 + 6 * i for i in range(12)]  # the same rise, kept up: a leak
    assert process_growth(1, _series([int(v * mib) for v in steady], step_s=2.0)).significant


@pytest.mark.slow
def test_host_probe_reads_memory_faster_in_its_early_window():
    probe = HostProbe(run_start=time.monotonic(), interval_s=0.05, pss_interval_s=1.0,
                      early_pss_interval_s=0.1, early_pss_window_s=1.5)
    probe.start()
    time.sleep(4.0)
    probe.stop()
    (main,) = [p for p in probe.record().processes if p.role == "main"]
    times = [m.at_s - main.memory[0].at_s for m in main.memory]
    early = [t for t in times if t < 1.5]
    late = [t for t in times if t >= 1.6]
    # Nominally 15 readings in the early 1.5 s and 1 a second after it. Ticks slip on a loaded
    # machine, so the test asks only for the cadence's shape: never closer than the interval,
    # and clearly faster early than late.
    assert all(b - a >= 0.09 for a, b in zip(early, early[1:]))
    assert all(b - a >= 0.9 for a, b in zip(late, late[1:]))
    assert 1 <= len(late) <= 3
    assert len(early) / 1.5 > 2 * len(late) / 2.4


def _flagged_within(dataset, seconds: float):
    """Seconds from iter() until report() would first flag memory growth (checked every second
    with the wrapper's default memory cadence), or None if not within ``seconds``."""
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=2,
                        multiprocessing_context="fork")
    with pipecheck.wrap(loader) as wrapped:
        start, next_check, checks = time.perf_counter(), 1.0, 0
        for _ in wrapped:
            now = time.perf_counter() - start
            if now >= seconds:
                break
            if now >= next_check:
                next_check += 1.0
                checks += 1
                run = wrapped.record()
                if any(f.kind == "memory-growth" for f in analyze(run).diagnosis.findings):
                    return now, run
        assert checks >= seconds - 2  # the loop ran the whole time
        return None, wrapped.record()


@pytest.mark.slow
def test_a_leak_of_128_kib_per_batch_is_flagged_within_20_s_at_the_default_cadence():
    # 4 samples of 25 ms per batch: about 10 batches/s per worker, 1.25 MiB/s leaked each.
    dataset = GrowingDataset(10_000, 0.025, 128 * 1024 // BATCH_SIZE)
    at_s, run = _flagged_within(dataset, 20.0)
    assert at_s is not None, [(p.role, [m.uss_bytes for m in p.memory])
                              for p in run.host.processes]


@pytest.mark.slow
def test_a_cache_warmed_at_start_up_is_not_flagged_in_20_s():
    # 48 MiB per worker over its first 200 samples (about 5 s), then flat.
    dataset = WarmingDataset(10_000, 0.025, 48 * 2**20, 200)
    at_s, run = _flagged_within(dataset, 20.0)
    assert at_s is None, at_s
    workers = [p for p in run.host.processes if p.role == "worker"]
    assert workers and all(len(p.memory) >= 7 for p in workers)  # the test did run on them


# -- /dev/shm headroom ---------------------------------------------------------------------------


def test_shm_headroom_is_flagged_when_the_prefetch_queue_does_not_fit():
    run = simulate(FakeRun(num_workers=4, prefetch_factor=2))
    batch = 64 * 2**20
    run = dataclasses.replace(
        run, consumer=dataclasses.replace(run.consumer, batch_bytes=batch),
        shared_memory=SharedMemoryRecord(path="/dev/shm", total_bytes=64 * 2**20,
                                         free_bytes=60 * 2**20))
    (finding,) = [f for f in analyze(run).diagnosis.findings if f.kind == "shm-headroom"]
    assert finding.severity == "critical"
    assert finding.evidence["needed_bytes"] == 2 * 4 * batch == shm_needed_bytes(batch, 4, 2)
    assert "--shm-size" in finding.message and "512 MiB" in finding.message
    roomy = dataclasses.replace(run, shared_memory=SharedMemoryRecord(
        path="/dev/shm", total_bytes=8 * 2**30, free_bytes=8 * 2**30))
    assert not [f for f in analyze(roomy).diagnosis.findings if f.kind == "shm-headroom"]


def test_wrap_notes_shm_and_batch_bytes():
    report_run = None
    loader = DataLoader(GrowingDataset(16, 0.0, 0), batch_size=4, num_workers=0)
    with pipecheck.wrap(loader) as wrapped:
        for _ in wrapped:
            pass
        report_run = wrapped.record()
    assert report_run.consumer.batch_bytes == 4 * 8  # four int64 indices
    expected = shared_memory_record()
    assert report_run.shared_memory.path == expected.path == "/dev/shm"
    assert report_run.shared_memory.total_bytes == expected.total_bytes


def test_largest_containers_names_python_containers():
    class Holder:
        def __init__(self):
            self.small = list(range(10))
            self.labels = {i: str(i) for i in range(3000)}
            self.inner = type("Inner", (), {})()
            self.inner.paths = [f"/x/{i}" for i in range(20000)]

    found = largest_containers(Holder())
    assert [c.name for c in found] == ["dataset.inner.paths", "dataset.labels"]
    assert found[0].items == 20000 and found[0].approx_bytes > 20000 * 50
    assert largest_containers(object()) == []


def test_recommendations_keep_the_prefetch_queue_inside_dev_shm():
    from pipecheck.recommend import recommend

    spec = FakeRun(num_workers=1, production_s=0.1, step_s=0.02, worker_cpu_fraction=0.05)
    run = simulate(spec)
    unlimited = {r.setting: r for r in recommend(run, analyze(run))}["num_workers"]
    batch = 16 * 2**20
    small_shm = dataclasses.replace(
        run, consumer=dataclasses.replace(run.consumer, batch_bytes=batch),
        shared_memory=SharedMemoryRecord(path="/dev/shm", total_bytes=256 * 2**20,
                                         free_bytes=256 * 2**20))
    capped = {r.setting: r for r in recommend(small_shm, analyze(small_shm))}["num_workers"]
    # 256 MiB / (2 x 16 MiB) = 8 batches in flight = 4 workers at prefetch_factor 2.
    assert unlimited.proposed > 4 == capped.proposed
    assert "/dev/shm holds 8 batches" in capped.reason
