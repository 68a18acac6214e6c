"""The few-line integration: wrap an existing DataLoader, train as usual, read the report.

What it shows: a map-style ``Dataset`` (synthetic 64x64 RGB images made in-process, with a
per-sample crop, flip and normalize so each sample costs real CPU), a ``DataLoader`` with two
worker processes, and a small CNN trained for two epochs. The only pipecheck lines are
``pipecheck.wrap(loader)``, ``loader.report()`` and ``report.save(...)``; everything else is an
ordinary PyTorch loop. Runs in a few seconds on two CPU cores and downloads nothing.

Run it::

    python examples/wrap_dataloader.py [REPORT.json]

It prints the terminal summary (verdict first) and saves the JSON report to ``REPORT.json``
(default ``wrap_dataloader-report.json`` in the current folder); re-render it with
``pipecheck report REPORT.json``.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import pipecheck


class SyntheticImages(Dataset):
    """``count`` deterministic 72x72 images of 4 classes, cropped to 64x64 on access."""

    def __init__(self, count: int = 2048, classes: int = 4) -> None:
        self.count = count
        self.classes = classes

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(index)  # sample `index` is the same in any worker
        label = index % self.classes
        # The class sets which channel is brightest: learnable, but the image still needs work.
        image = rng.normal(100, 40, size=(72, 72, 3)).astype(np.float32)
        image[..., label % 3] += 40 * (1 + label // 3)
        top, left = rng.integers(0, 9, size=2)
        image = image[top:top + 64, left:left + 64]
        if rng.random() < 0.5:
            image = image[:, ::-1]
        image = (image - image.mean()) / (image.std() + 1e-6)
        return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))), label


def main() -> None:
    report_path = sys.argv[1] if len(sys.argv) > 1 else "wrap_dataloader-report.json"
    loader = DataLoader(SyntheticImages(), batch_size=64, shuffle=True, num_workers=2)
    loader = pipecheck.wrap(loader)  # <- the one line that adds measurement

    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 4),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(2):
        for images, labels in loader:  # same batches, same order as the unwrapped loader
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: last loss {loss.item():.3f}")

    report = loader.report()
    print(report)
    report.save(report_path)
    print(f"report saved to {report_path}")


if __name__ == "__main__":  # the guard matters: DataLoader workers may re-import this file
    main()
