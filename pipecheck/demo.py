"""The embedded demo behind ``pipecheck demo``: a real JPEG WebDataset feeding a small CNN.

:func:`run_demo` trains a four-layer CNN with SGD on the CPU for a fixed number of steps, fed by
a ``webdataset`` pipeline (shard shuffle, sample shuffle, PIL JPEG decode, random resized crop,
horizontal flip, colour jitter, normalize) through a ``torch.utils.data.DataLoader`` wrapped with
:func:`pipecheck.wrap`, and returns the wrapped loader's report.

The sizes are tuned for a 2-core machine. Measured there (idle, torch 2.13 CPU, defaults:
2048 images, 150 steps of 32): preparing a batch in the main process (JPEG decode plus
augmentation) takes about 47 ms and a training step about 35 ms, so with ``workers=0`` the loop
waits for data about 57 % of the time (about 400 samples/s) and the report says input-bound and
proposes worker processes; the whole run takes about 20 s, 5-6 s of it first-time shard
generation. With ``workers=2`` the stall drops to about 10 % and throughput rises to about
520 samples/s: less than overlap alone would give, because 2 cores are shared by the workers
and the step.
"""

from __future__ import annotations

import math
import os
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np
import torch
import webdataset as wds
from PIL import Image
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text
from torch import nn

from .demo_data import CLASS_NAMES, DemoArgumentError, ensure_shards

if TYPE_CHECKING:  # pipecheck.Report is imported lazily: the report layer is not needed to build
    from .report import Report

CROP_SIZE = 112
"""Side in pixels of the training crop; 112 keeps the step cheaper than the decode+augment."""

CHANNELS = (12, 24, 48, 96)
"""Output channels of the four stride-2 conv blocks (about 0.45 GFLOP forward per batch of 32
at 112x112, counted as 2 FLOP per multiply-add)."""

SHUFFLE_BUFFER = 256
"""Samples held by the in-stream shuffle (raw JPEG bytes, about 15 KB each: ~4 MB)."""

# ImageNet channel statistics on a 0-255 scale: the usual normalization constants.
_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32) * 255
_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32) * 255
_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)  # ITU-R BT.601 grey weights


class DemoAugment:
    """Training augmentation for one PIL image -> float32 tensor ``(3, crop, crop)``.

    Random resized crop (area 35-100 % of the image, aspect 3/4-4/3, as in torchvision's
    ``RandomResizedCrop`` but with a smaller lower bound so the shape stays visible), horizontal
    flip with probability 0.5, brightness/contrast/saturation jitter by factors in [0.6, 1.4],
    then per-channel normalization. Uses Python's ``random`` module, which the DataLoader seeds
    differently in every worker (numpy's global generator would repeat across forked workers).
    A module-level class, so it pickles into worker processes under any start method.
    """

    def __init__(self, crop: int = CROP_SIZE) -> None:
        if crop < 8:
            raise DemoArgumentError(f"crop must be >= 8 pixels, got {crop}")
        self.crop = crop

    def __call__(self, image: Image.Image) -> torch.Tensor:
        if image.mode != "RGB":
            image = image.convert("RGB")
        box = self._crop_box(*image.size)
        # PIL sets Image.BILINEAR as a module global in a loop over its enums: mypy cannot see it
        resized = image.resize((self.crop, self.crop),
                               Image.BILINEAR, box=box)  # type: ignore[attr-defined]
        array = np.asarray(resized, dtype=np.float32)
        if random.random() < 0.5:
            array = array[:, ::-1]
        array = array * random.uniform(0.6, 1.4)  # brightness
        grey = array @ _LUMA
        mean_grey = float(grey.mean())
        array = (array - mean_grey) * random.uniform(0.6, 1.4) + mean_grey  # contrast
        grey = grey[..., None]
        array = (array - grey) * random.uniform(0.6, 1.4) + grey  # saturation
        array = (np.clip(array, 0, 255) - _MEAN) / _STD
        return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))

    @staticmethod
    def _crop_box(width: int, height: int) -> tuple[int, int, int, int]:
        area = width * height * random.uniform(0.35, 1.0)
        aspect = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
        crop_w = min(width, max(1, round(math.sqrt(area * aspect))))
        crop_h = min(height, max(1, round(math.sqrt(area / aspect))))
        left = random.randint(0, width - crop_w)
        top = random.randint(0, height - crop_h)
        return left, top, left + crop_w, top + crop_h


def build_dataset(urls: list[str], *, crop: int = CROP_SIZE,
                  shuffle_buffer: int = SHUFFLE_BUFFER) -> wds.WebDataset:
    """The demo's ``webdataset.WebDataset`` pipeline yielding ``(image_tensor, label)``.

    Shards are split per DataLoader worker by WebDataset's default ``split_by_worker`` (worker
    ``k`` of ``n`` reads shards ``k, k+n, ...``), then shuffled within each worker;
    ``nodesplitter=split_by_node`` keeps it correct under ``torch.distributed`` too.
    ``empty_check=False`` because a worker may legitimately own no shard in a distributed run.
    """
    dataset = wds.WebDataset(
        urls,
        shardshuffle=len(urls),  # a buffer as large as the shard list: a full shuffle
        nodesplitter=wds.split_by_node,
        workersplitter=wds.split_by_worker,
        empty_check=False,
    )
    return (
        dataset.shuffle(shuffle_buffer)
        .decode("pil")
        .map_dict(jpg=DemoAugment(crop))
        .to_tuple("jpg", "cls")
    )


def build_loader(urls: list[str], *, workers: int = 0, batch_size: int = 32,
                 crop: int = CROP_SIZE) -> torch.utils.data.DataLoader:
    """A ``torch.utils.data.DataLoader`` over :func:`build_dataset`, with torch's defaults for
    everything the report may recommend changing (``prefetch_factor``, ``persistent_workers``,
    ``pin_memory``).

    Raises:
        DemoArgumentError: (a ``ValueError``) ``workers`` negative or more than the number of
            shards (extra workers would get no shard and sit idle), or ``batch_size < 1``.
    """
    _check_loader_args(workers=workers, shards=len(urls), batch_size=batch_size)
    dataset = build_dataset(urls, crop=crop)
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=workers)


def _check_loader_args(*, workers: int, shards: int, batch_size: int) -> None:
    if workers < 0 or workers > shards:
        raise DemoArgumentError(
            f"workers must be between 0 and the number of shards ({shards}), got {workers}")
    if batch_size < 1:
        raise DemoArgumentError(f"batch_size must be >= 1, got {batch_size}")


def build_model(num_classes: int = len(CLASS_NAMES)) -> nn.Module:
    """Four stride-2 conv/BN/ReLU blocks (:data:`CHANNELS`), global average pool, linear head."""
    layers: list[nn.Module] = []
    in_channels = 3
    for out_channels in CHANNELS:
        layers += [
            nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        ]
        in_channels = out_channels
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, num_classes)]
    return nn.Sequential(*layers)


def default_torch_threads(workers: int) -> int:
    """Intra-op threads for the training step: the usable cores the loader workers leave free,
    at least 1. ``workers=0`` gives torch's own default (one per usable core)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    return max(1, usable - workers)


def run_demo(
    *,
    data_dir: Optional[Union[str, Path]] = None,
    workers: int = 0,
    steps: int = 150,
    batch_size: int = 32,
    images: int = 2048,
    shards: int = 8,
    progress: bool = True,
    epochs_hint: Optional[int] = None,
    seed: int = 0,
    torch_threads: Optional[int] = None,
) -> "Report":
    """Train the demo CNN for ``steps`` steps through a wrapped loader and return its report.

    Args:
        data_dir: shard cache folder (``None``: ``$PIPECHECK_CACHE`` or
            ``~/.cache/pipecheck/demo``); shards are generated there on first use (6-15 s for
            2048 images on 2 cores).
        workers: DataLoader ``num_workers``, 0 to ``shards``.
        steps: training steps (batches), ``>= 1``. Passes over the data repeat until reached;
            each pass is a new ``iter()`` of the wrapped loader, i.e. a new epoch in the report.
        batch_size: samples per batch, ``>= 1``.
        images: samples in the dataset, ``>= shards``.
        shards: tar files the dataset is split into, ``>= 1``.
        progress: show a rich progress bar (steps, samples/s, loss) on stderr; nothing is
            printed when ``False``.
        epochs_hint: stop after this many passes over the data even if ``steps`` is not reached
            (``None``: as many passes as ``steps`` needs).
        seed: seeds data generation and model initialization (sample order still varies).
        torch_threads: ``torch.set_num_threads`` for the run, ``>= 1``; restored afterwards.
            ``None``: :func:`default_torch_threads` (cores left free by the workers).

    Why not torch's default thread count: with workers busy on every core, the step's
    intra-op threads get descheduled and each parallel region waits for the slowest. Measured
    on 2 cores (150 steps of 32, samples/s): workers=1 gave 339 with 2 threads vs 551 with 1;
    workers=2 gave 408 vs 463; workers=0 gave 434 with 2 threads (the default, kept).

    Returns:
        ``pipecheck.Report`` of the run (``kind == "wrap"``).

    Raises:
        DemoArgumentError: (a ``ValueError``) an argument is out of range.
        RuntimeError: a pass over the data produced no batch (empty or unreadable shards).
    """
    if steps < 1:
        raise DemoArgumentError(f"steps must be >= 1, got {steps}")
    if epochs_hint is not None and epochs_hint < 1:
        raise DemoArgumentError(f"epochs_hint must be >= 1 or None, got {epochs_hint}")
    if torch_threads is not None and torch_threads < 1:
        raise DemoArgumentError(f"torch_threads must be >= 1 or None, got {torch_threads}")
    _check_loader_args(workers=workers, shards=shards, batch_size=batch_size)  # before generating
    console = _stderr_console() if progress else None

    started = time.perf_counter()
    urls = ensure_shards(data_dir, images=images, shards=shards, seed=seed)
    if console is not None:
        ready_s = time.perf_counter() - started
        console.print(f"[dim]demo data: {len(urls)} shards, {images} JPEG images in "
                      f"{Path(urls[0]).parent} (ready in {ready_s:.1f} s)[/dim]")

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads or default_torch_threads(workers))
    try:
        return _train(urls, workers=workers, steps=steps, batch_size=batch_size,
                      epochs_hint=epochs_hint, seed=seed, console=console)
    finally:
        torch.set_num_threads(previous_threads)


def _train(urls: list[str], *, workers: int, steps: int, batch_size: int,
           epochs_hint: Optional[int], seed: int, console: Optional[Console]) -> "Report":
    import pipecheck  # late: pipecheck/__init__ may import this module's siblings

    torch.manual_seed(seed)
    # Wrapped first: a Ctrl-C from here on, model building included, still gives a report.
    loader = pipecheck.wrap(build_loader(urls, workers=workers, batch_size=batch_size))
    try:
        model = build_model()
        # lr 0.05 stayed at chance level in 300 steps; 0.01 makes steady progress.
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        model.train()
        with _Progress(console, steps, batch_size) as bar:
            done, passes = 0, 0
            while done < steps and (epochs_hint is None or passes < epochs_hint):
                batches_this_pass = 0
                for images, labels in loader:  # each for-loop is one epoch of the report
                    optimizer.zero_grad(set_to_none=True)
                    loss = nn.functional.cross_entropy(model(images), labels)
                    loss.backward()
                    optimizer.step()
                    done += 1
                    batches_this_pass += 1
                    bar.advance(loss.item())
                    if done >= steps:
                        break
                passes += 1
                if batches_this_pass == 0:
                    raise RuntimeError(f"a pass over the demo shards produced no batch: {urls}")
        return loader.report()
    except KeyboardInterrupt as interrupt:
        loader.__exit__(type(interrupt), interrupt, interrupt.__traceback__)  # status: interrupted
        raise DemoInterrupted(loader.report()) from interrupt  # keep what was measured
    finally:
        loader.close()  # stop the host sampler thread and free the worker probe's shared memory


# ---------------------------------------------------------------------------------------------
# progress display
# ---------------------------------------------------------------------------------------------


class DemoInterrupted(KeyboardInterrupt):
    """Ctrl-C during the demo's training loop; ``report`` holds the batches measured so far."""

    def __init__(self, report: "Report") -> None:
        super().__init__("demo interrupted")
        self.report = report


def _stderr_console() -> Console:
    return Console(stderr=True)


class _Progress:
    """A rich progress bar (steps, samples/s, loss), or nothing when ``console`` is None."""

    def __init__(self, console: Optional[Console], steps: int, batch_size: int) -> None:
        self._console = console
        self._steps = steps
        self._batch_size = batch_size
        self._progress: Optional[Progress] = None
        self._task: Optional[TaskID] = None

    def __enter__(self) -> "_Progress":
        if self._console is None:
            return self
        self._progress = Progress(
            TextColumn("[bold]training[/bold]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("steps"),
            _SamplesPerSecondColumn(self._batch_size),
            TextColumn("loss {task.fields[loss]}"),
            TimeElapsedColumn(),
            console=self._console,
        )
        self._progress.__enter__()
        self._task = self._progress.add_task("training", total=self._steps, loss="-")
        return self

    def advance(self, loss: float) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=1, loss=f"{loss:.3f}")

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)


class _SamplesPerSecondColumn(ProgressColumn):
    """Samples/s from rich's windowed step rate (``Task.speed``); a dash until computable."""

    def __init__(self, batch_size: int) -> None:
        super().__init__()
        self._batch_size = batch_size

    def render(self, task: Task) -> Text:
        if task.speed is None:
            return Text("     - samples/s")
        return Text(f"{task.speed * self._batch_size:6.0f} samples/s")
