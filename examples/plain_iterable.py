"""Any iterable of batches (no DataLoader at all) wrapped directly: consumer-side measures.

What it shows: ``pipecheck.wrap`` accepts a plain Python iterable, here a small class whose
``__iter__`` is a generator that simulates a remote batch service (a fixed network latency per
batch, then CPU work to decode it). With no DataLoader there are no workers to instrument, so
the report is built from what the training loop sees: data wait vs step time, stall fraction,
throughput and the host's CPU; producer-side figures show as not measured.

A re-iterable object gives one epoch per ``for`` loop, like a DataLoader. A bare generator
(``pipecheck.wrap(gen())``) works as well but, as without pipecheck, is single-pass.
Runs in a few seconds::

    python examples/plain_iterable.py
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

import pipecheck

LATENCY_S = 0.010  # a same-region network round trip per batch, order of magnitude


class RemoteBatchStream:
    """``batches`` batches of ``batch_size`` feature vectors, each after ``LATENCY_S`` of
    waiting plus a parse of the raw payload (dequantize + normalize)."""

    def __init__(self, batches: int = 40, batch_size: int = 64, features: int = 256) -> None:
        self.batches = batches
        self.batch_size = batch_size
        self.features = features

    def __iter__(self):
        rng = np.random.default_rng()
        for _ in range(self.batches):
            time.sleep(LATENCY_S)  # waiting on the network: no CPU used
            payload = rng.integers(0, 256, size=(self.batch_size, self.features), dtype=np.uint8)
            features = payload.astype(np.float32) / 255.0
            mean, std = features.mean(axis=1, keepdims=True), features.std(axis=1, keepdims=True)
            features = (features - mean) / (std + 1e-6)
            labels = (payload[:, 0] > 127).astype(np.int64)  # learnable: the first raw byte
            yield torch.from_numpy(features), torch.from_numpy(labels)


def main() -> None:
    stream = pipecheck.wrap(RemoteBatchStream())
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        for features, labels in stream:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(features), labels)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: last loss {loss.item():.3f}")
    print(stream.report())


if __name__ == "__main__":
    main()
