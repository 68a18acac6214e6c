"""A stress target: a factory that takes DataLoader keywords and returns a DataLoader, for
``pipecheck stress`` to test the loader alone before a long run.

What it shows: a map-style dataset that reads JPEG samples straight out of tar shards through a
byte-offset index (a common layout for large image sets: few big files, random access), decodes
them with PIL and crops them; and the factory ``make_loader`` whose keyword defaults are the
settings you run today, so stress measures them first as the baseline to beat. The shards are
the demo's synthetic JPEGs, generated once into ``$PIPECHECK_CACHE/stress-example`` (default
``~/.cache/pipecheck/demo/stress-example``); nothing is downloaded.

From the shell (each configuration runs in its own child process)::

    pipecheck stress examples/stress_target.py:make_loader --step-time 0.02

or run this file, which calls ``pipecheck.stress`` from Python and prints the report::

    python examples/stress_target.py [--budget 60]
"""

from __future__ import annotations

import argparse
import io
import random
import tarfile
from typing import Optional

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

import pipecheck
from pipecheck.demo_data import default_data_dir, ensure_shards

CROP = 96


class TarJpegs(Dataset):
    """``(image, label)`` samples read by offset from tar shards: ``image`` a float tensor
    ``(3, CROP, CROP)`` in [0, 1], ``label`` an int. The index (shard, offset, size per JPEG)
    is built once in the main process; each worker opens its own file handles lazily."""

    def __init__(self, shards: list[str]) -> None:
        self.index: list[tuple[str, int, int, int]] = []
        for shard in shards:
            with tarfile.open(shard) as tar:
                members = tar.getmembers()
                labels = {m.name[:-4]: int(tar.extractfile(m).read())
                          for m in members if m.name.endswith(".cls")}
            self.index += [(shard, m.offset_data, m.size, labels[m.name[:-4]])
                           for m in members if m.name.endswith(".jpg")]
        self._files: dict[str, io.BufferedReader] = {}

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        shard, offset, size, label = self.index[i]
        handle = self._files.get(shard)
        if handle is None:
            handle = self._files[shard] = open(shard, "rb")
        handle.seek(offset)
        image = Image.open(io.BytesIO(handle.read(size))).convert("RGB")
        side = int(min(image.size) * random.uniform(0.6, 1.0))
        left = random.randint(0, image.size[0] - side)
        top = random.randint(0, image.size[1] - side)
        image = image.resize((CROP, CROP), box=(left, top, left + side, top + side))
        array = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
        return torch.from_numpy(np.ascontiguousarray(array)), label

    def __getstate__(self) -> dict:
        # Open file handles do not pickle (spawn workers); each worker opens its own.
        return {**self.__dict__, "_files": {}}


def make_loader(num_workers: int = 0, prefetch_factor: Optional[int] = None,
                persistent_workers: bool = False, batch_size: int = 32) -> DataLoader:
    """The loader as the training script builds it; stress passes other settings in."""
    # 2048 images, 64 batches an epoch: enough for the README's command to feed the model
    # (20 steady batches a trial at least) and for an epoch to outlast a worker restart.
    shards = ensure_shards(default_data_dir() / "stress-example", images=2048, shards=4,
                           size=128)
    return DataLoader(TarJpegs(shards), batch_size=batch_size, shuffle=True,
                      num_workers=num_workers, prefetch_factor=prefetch_factor,
                      persistent_workers=persistent_workers)


def main() -> None:
    parser = argparse.ArgumentParser(description="pipecheck.stress on make_loader")
    parser.add_argument("--budget", type=float, default=60.0,
                        help="seconds the whole stress run may take")
    args = parser.parse_args()
    report = pipecheck.stress(make_loader, step_time_s=0.02, budget_s=args.budget)
    print(report)


if __name__ == "__main__":  # the guard matters: DataLoader workers may re-import this file
    main()
