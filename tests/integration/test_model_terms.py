"""The what-if model's terms built from real runs: a real DataLoader at ``num_workers=0``, so
the figures the model takes (the batch's bytes, the pool's threads) are what the probes
measured, not a simulation's."""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import pipecheck
from pipecheck.analysis import analyze
from pipecheck.analysis.model import SHM_WORKER_FIXED_S, SHM_WORKER_S_PER_BYTE

IMAGES = 64 * 40
SIDE = 96


def _serial_record(images: torch.Tensor):
    loader = DataLoader(TensorDataset(images, torch.arange(len(images))), batch_size=64)
    wrapped = pipecheck.wrap(loader)
    try:
        for _ in range(2):
            for _ in wrapped:
                time.sleep(0.002)
        return wrapped.record()
    finally:
        wrapped.close()


def test_a_serial_run_of_large_batches_charges_a_worker_the_shared_memory_hand_over():
    # 64 x 3x96x96 uint8 images a batch (1.77 MB) and their int64 indices: a worker would
    # collate them into fresh /dev/shm storage, which this run never did.
    record = _serial_record(torch.zeros((IMAGES, 3, SIDE, SIDE), dtype=torch.uint8))
    expected_bytes = 64 * 3 * SIDE * SIDE + 64 * 8
    assert record.consumer.batch_bytes == expected_bytes
    model = analyze(record).model
    if model is None:
        pytest.skip("too few steady batches for a model on this host")
    extra = SHM_WORKER_FIXED_S + SHM_WORKER_S_PER_BYTE * expected_bytes
    assert model.worker_cpu_per_batch_s >= extra
    assert 1.0 / model.per_worker_batches_per_s >= extra
    assert any("through shared memory" in words for words in model.assumptions)
