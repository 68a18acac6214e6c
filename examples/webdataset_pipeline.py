"""A WebDataset pipeline read through ``wds.WebLoader``, measured with ``pipecheck.wrap``.

What it shows: tar shards of real JPEG images (generated into a temporary folder with
``pipecheck.demo_data.ensure_shards``, nothing downloaded), a ``webdataset.WebDataset`` pipeline
written the way its docs recommend (shard shuffle, shard split per node and per worker, sample
shuffle, PIL decode, augmentation, batching inside the workers) and a ``wds.WebLoader`` with two
workers and ``batch_size=None`` (batches are already built in the pipeline). pipecheck sees
through the ``WebLoader`` to the ``DataLoader`` inside it, so worker timings are measured too.

Four shards for two workers: each worker reads two distinct shards per epoch. Runs in a few
seconds on two CPU cores::

    python examples/webdataset_pipeline.py
"""

from __future__ import annotations

import random
import tempfile

import numpy as np
import torch
import webdataset as wds
from PIL import Image
from torch import nn

import pipecheck
from pipecheck.demo_data import ensure_shards

CROP = 64
BATCH_SIZE = 16


def augment(image: Image.Image) -> torch.Tensor:
    """A decoded image -> float tensor ``(3, CROP, CROP)`` in [-1, 1]: random square crop of
    60-100 % of the side, resized to ``CROP``, random flip. Module-level so workers can pickle
    it."""
    side = int(image.size[0] * random.uniform(0.6, 1.0))
    left = random.randint(0, image.size[0] - side)
    top = random.randint(0, image.size[1] - side)
    cropped = image.resize((CROP, CROP), box=(left, top, left + side, top + side))
    array = np.asarray(cropped, dtype=np.float32)
    if random.random() < 0.5:
        array = array[:, ::-1]
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)) / 127.5 - 1.0)


def make_loader(urls: list[str]) -> wds.WebLoader:
    dataset = (
        wds.WebDataset(urls, shardshuffle=len(urls), nodesplitter=wds.split_by_node,
                       workersplitter=wds.split_by_worker)
        .shuffle(100)
        .decode("pil")
        .map_dict(jpg=augment)
        .to_tuple("jpg", "cls")
        .batched(BATCH_SIZE, partial=True)
    )
    return wds.WebLoader(dataset, batch_size=None, num_workers=2)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="pipecheck-wds-") as folder:
        urls = ensure_shards(folder, images=512, shards=4, size=128)
        loader = pipecheck.wrap(make_loader(urls))

        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        for epoch in range(2):
            batches = 0
            for images, labels in loader:
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(images), labels)
                loss.backward()
                optimizer.step()
                batches += 1
            print(f"epoch {epoch}: {batches} batches, last loss {loss.item():.3f}")
        print(loader.report())


if __name__ == "__main__":  # the guard matters: DataLoader workers may re-import this file
    main()
