"""The ratio estimator that scales the main process's sampled production time to every batch."""

from __future__ import annotations

import pytest

from pipecheck.probes.workers import FirstBatch, scaled_to
from pipecheck.records import WorkerRecord


def _record(batches: int, fetch_s: float, collate_s: float, samples: int) -> WorkerRecord:
    return WorkerRecord(id=-1, pid=1, pids=[1], batches=batches, samples=samples,
                        fetch_s=fetch_s, collate_s=collate_s, busy_s=fetch_s + collate_s,
                        first_at_s=0.0, last_at_s=1.0)


def test_the_first_batch_counts_once_and_the_sampled_rest_is_scaled():
    # 100 timed batches: a 0.3 s first (lazy initialisation), then 99 of 20 + 5 us.
    record = _record(100, 0.3 + 99 * 20e-6, 99 * 5e-6, 100)
    scaled = scaled_to(record, 10_000, FirstBatch(0.3, 0.0, 1))
    assert scaled.batches == 10_000 and scaled.timed_batches == 100
    assert scaled.fetch_s == pytest.approx(0.3 + 9_999 * 20e-6)
    assert scaled.collate_s == pytest.approx(9_999 * 5e-6)
    assert scaled.busy_s == pytest.approx(scaled.fetch_s + scaled.collate_s)
    assert scaled.samples == 10_000
    # Scaled with the rest, the first batch alone would count 100 times.
    uniform = scaled_to(record, 10_000)
    assert uniform.busy_s > 30 * 0.9


def test_nothing_to_scale_when_every_batch_was_timed_or_none_was():
    record = _record(50, 0.01, 0.001, 50)
    assert scaled_to(record, 50, FirstBatch(0.001, 0.0, 1)) is record
    empty = _record(0, 0.0, 0.0, 0)
    assert scaled_to(empty, 10, None) is empty


def test_a_single_timed_batch_scales_uniformly():
    record = _record(1, 0.002, 0.0, 4)
    scaled = scaled_to(record, 10, FirstBatch(0.002, 0.0, 4))
    assert scaled.busy_s == pytest.approx(0.02) and scaled.samples == 40
