"""Real input pipelines, training steps, a timing loop and a CPU-burning neighbour, shared by the
accuracy benchmarks (``calibration.py``, and through it ``prediction.py``; ``step_threads.py``,
``worker_cost.py``, ``intra_op_cost.py``, ``waiting_workers.py``).

Every pipeline's data is generated locally (nothing is downloaded), from fixed seeds, so two
runs see the same bytes. Each :class:`Pipeline` names its class (what limits it), builds its
dataset and its training step, and says which loader keywords apply (an iterable dataset takes
no ``shuffle``). Batches are :data:`BATCH_SIZE` samples of ``(input, label)``.

Nothing here depends on pipecheck: it is the user's side of the loop.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import random
import re
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, IterableDataset

BATCH_SIZE = 64
EPOCH_SAMPLES = 4096
"""Samples per epoch of every map-style pipeline (64 batches): epochs repeat inside a timed
run, so worker start-up at each epoch's start (non-persistent workers) is part of the rate."""


# --- datasets -------------------------------------------------------------------------------


class JpegFolder(Dataset):
    """JPEG files decoded with PIL, randomly cropped and resized to ``CROP`` x ``CROP``, then
    made a tensor and normalized with torch ops, as torchvision's ``RandomResizedCrop``,
    ``ToTensor`` and ``Normalize`` do (torch's intra-op threads take part at this size)."""

    MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    CROP = 224

    def __init__(self, folder: str) -> None:
        self.paths = sorted(os.path.join(folder, n) for n in os.listdir(folder))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        with Image.open(self.paths[index]) as image:
            image = image.convert("RGB")
            width, height = image.size
            side = random.randint(width // 2, width)
            left, top = random.randint(0, width - side), random.randint(0, height - side)
            image = image.resize((self.CROP, self.CROP), Image.BILINEAR,
                                 box=(left, top, left + side, top + side))
            pixels = torch.from_numpy(np.array(image, dtype=np.uint8))
        tensor = pixels.permute(2, 0, 1).contiguous().float().div(255)  # ToTensor
        return tensor.sub(self.MEAN).div(self.STD), index % 10  # Normalize


class FftDataset(Dataset):
    """A 2-D FFT of a 128 x 128 array per item (numpy, CPU-bound)."""

    def __init__(self, n: int = EPOCH_SAMPLES) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(index)
        spectrum = np.fft.fft2(rng.standard_normal((128, 128)))
        return torch.from_numpy(np.abs(spectrum[:8, :8]).astype(np.float32).ravel()), index % 10


class LatencyDataset(Dataset):
    """``delay_s`` of sleep per item (storage or network latency); with ``jitter_s`` the delay
    is drawn per item, uniformly from ``delay_s`` to ``delay_s + jitter_s`` (seeded by the
    index: the same item always waits as long)."""

    def __init__(self, n: int = EPOCH_SAMPLES, delay_s: float = 0.002,
                 jitter_s: float = 0.0) -> None:
        self.n, self.delay_s, self.jitter_s = n, delay_s, jitter_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        delay = self.delay_s
        if self.jitter_s:
            delay += random.Random(index).random() * self.jitter_s
        time.sleep(delay)
        return torch.full((64,), float(index)), index % 10


_WORD = re.compile(r"[a-z]+|[0-9]+|[^\sa-z0-9]")


class TextDataset(Dataset):
    """Pure-Python text processing per item, holding the GIL throughout: lower-case, split into
    words, break each word into the longest known sub-words (a greedy WordPiece-style tokenizer
    over a dict), map to ids and pad to ``LENGTH``. The text is generated here from a seeded
    word list (about 200 words a line)."""

    LENGTH = 256

    def __init__(self, n: int = EPOCH_SAMPLES, words_per_line: int = 200) -> None:
        rng = random.Random(0)
        letters = "etaoinshrdlucmfwypvbgkjqxz"
        stems = ["".join(rng.choice(letters[:12 + i % 14]) for _ in range(rng.randint(2, 9)))
                 for i in range(3000)]
        self.lines = [" ".join(rng.choice(stems).capitalize() if rng.random() < 0.1
                               else rng.choice(stems) + rng.choice(["", "", "s", "ing", "ed"])
                               for _ in range(words_per_line)) + "."
                      for _ in range(n)]
        pieces = sorted({s[:k] for s in stems for k in range(1, len(s) + 1)})
        self.vocab = {p: i + 1 for i, p in enumerate(pieces[:20000])}
        self.longest = max(len(p) for p in self.vocab)

    def __len__(self) -> int:
        return len(self.lines)

    def _pieces(self, word: str) -> Iterator[int]:
        start = 0
        while start < len(word):
            for end in range(min(len(word), start + self.longest), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                token = self.vocab.get(piece) or self.vocab.get(word[start:end])
                if token is not None:
                    yield token
                    start = end
                    break
            else:
                yield 0  # unknown character
                start += 1

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        ids: list[int] = []
        for word in _WORD.findall(self.lines[index].lower()):
            ids.extend(self._pieces(word))
        ids = (ids + [0] * self.LENGTH)[:self.LENGTH]
        return torch.tensor(ids, dtype=torch.float32).div_(len(self.vocab)), index % 10


class LargeImageDataset(Dataset):
    """Cheap-to-make large samples: a 3 x 224 x 224 uint8 image filled from a small pattern
    (64 x 3 x 224 x 224 uint8 = 9.6 MB a batch), so a worker's cost is moving the batch
    through shared memory to the main process, not making it."""

    def __init__(self, n: int = EPOCH_SAMPLES) -> None:
        self.n = n
        self.base = torch.randint(0, 256, (3, 224, 224), dtype=torch.uint8,
                                  generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.base.roll(index % 224, dims=2), index % 10


class SmallVectors(Dataset):
    """A near-free loader: a 64-float vector per item."""

    def __init__(self, n: int = EPOCH_SAMPLES) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.full((64,), float(index % 97)), index % 10


class SmallImages(Dataset):
    """A 3 x 64 x 64 float image per item with light per-item work (noise and a flip), for a
    training step that is itself heavy."""

    def __init__(self, n: int = EPOCH_SAMPLES) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        image = torch.rand((3, 64, 64), generator=generator)
        if index % 2:
            image = image.flip(2)
        return image.sub_(0.5).mul_(2.0), index % 10


class TensorOpsDataset(Dataset):
    """Large torch ops per item, which run on torch's intra-op threads in the process that
    calls them (all of them at ``num_workers=0``, one in a worker): a 320 x 320 matrix product,
    a 5 x 5 blur by convolution of a 1 x 3 x 256 x 256 image, and pooling to 3 x 16 x 16."""

    def __init__(self, n: int = EPOCH_SAMPLES) -> None:
        self.n = n
        self.kernel = torch.full((3, 1, 5, 5), 1 / 25)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        matrix = torch.randn((320, 320), generator=generator)
        mixed = torch.tanh(matrix @ matrix.T / 20)
        image = mixed[:256, :256].expand(1, 3, 256, 256).contiguous()
        blurred = torch.nn.functional.conv2d(image, self.kernel, padding=2, groups=3)
        return torch.nn.functional.adaptive_avg_pool2d(blurred, 16)[0], index % 10


def _decode_sample(sample: dict[str, Any]) -> tuple[torch.Tensor, int]:
    """A WebDataset sample (``jpg`` bytes, ``cls`` bytes) decoded with PIL, randomly cropped to
    96 x 96 and made a normalized tensor."""
    with Image.open(io.BytesIO(sample["jpg"])) as image:
        image = image.convert("RGB")
        width, height = image.size
        left, top = random.randint(0, width - 96), random.randint(0, height - 96)
        pixels = np.array(image.crop((left, top, left + 96, top + 96)), dtype=np.uint8)
    tensor = torch.from_numpy(pixels).permute(2, 0, 1).float().div(255).sub(0.5)
    return tensor, int(sample["cls"])


def _remote_read(sample: dict[str, Any], delay_s: float, jitter_s: float) -> dict[str, Any]:
    """Wait ``delay_s`` to ``delay_s + jitter_s`` (seeded by the sample's key), as a pipeline
    that fetches each sample's image by URL does; the sample is returned unchanged."""
    jitter = random.Random(sample.get("__key__")).random() * jitter_s if jitter_s else 0.0
    time.sleep(delay_s + jitter)
    return sample


def webdataset_pipeline(folder: str, read_delay_s: float = 0.0,
                        read_jitter_s: float = 0.0) -> IterableDataset:
    """An iterable WebDataset over the tar shards in ``folder``: shards split among workers
    (``split_by_worker``, so any worker count reads each shard once per epoch), each sample
    first waiting ``read_delay_s`` to ``read_delay_s + read_jitter_s`` when given
    (:func:`_remote_read`), then decoded by :func:`_decode_sample`."""
    import functools

    import webdataset as wds

    urls = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".tar"))
    pipeline = wds.WebDataset(urls, shardshuffle=False, workersplitter=wds.split_by_worker,
                              empty_check=False)
    if read_delay_s or read_jitter_s:
        pipeline = pipeline.map(functools.partial(_remote_read, delay_s=read_delay_s,
                                                  jitter_s=read_jitter_s))
    return pipeline.map(_decode_sample)


# --- data made here -------------------------------------------------------------------------


def _photo(rng: np.random.Generator, side: int) -> bytes:
    """A photo-like JPEG of ``side`` x ``side``: a smooth colour field (8 x 8 noise scaled up)
    with fine grain, quality 85."""
    coarse = Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8))
    smooth = np.asarray(coarse.resize((side, side), Image.BICUBIC), dtype=np.int16)
    grain = rng.integers(-12, 12, (side, side, 3), dtype=np.int16)
    pixels = np.clip(smooth + grain, 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=85)
    return buffer.getvalue()


def make_jpegs(folder: str, count: int = EPOCH_SAMPLES, side: int = 256) -> None:
    """``count`` photo-like JPEGs of ``side`` x ``side`` (about 20 KB each) in ``folder``."""
    rng = np.random.default_rng(0)
    for i in range(count):
        with open(os.path.join(folder, f"{i:05d}.jpg"), "wb") as handle:
            handle.write(_photo(rng, side))


def make_shards(folder: str, count: int = EPOCH_SAMPLES, shards: int = 12,
                side: int = 128) -> None:
    """``count`` samples (a ``side`` x ``side`` photo-like JPEG and a class) written as
    ``shards`` tar files in WebDataset's layout (``KEY.jpg``, ``KEY.cls``), with
    :mod:`tarfile`. 12 shards divide evenly among 1, 2, 3, 4, 6 or 12 readers."""
    rng = np.random.default_rng(1)
    per = -(-count // shards)
    for s in range(shards):
        with tarfile.open(os.path.join(folder, f"shard-{s:04d}.tar"), "w") as tar:
            for i in range(s * per, min(count, (s + 1) * per)):
                for ext, data in (("jpg", _photo(rng, side)), ("cls", str(i % 10).encode())):
                    info = tarfile.TarInfo(f"{i:06d}.{ext}")
                    info.size, info.mtime = len(data), 0
                    tar.addfile(info, io.BytesIO(data))


# --- training steps -------------------------------------------------------------------------


class Model:
    """A small MLP trained with SGD: the step the loop runs per batch. Images are pooled to
    3 x 16 x 16 first (a small stem; uint8 images are subsampled, so their cost stays in moving
    them); ``sleep_s`` adds that much sleep to every step (a step
    waiting on something else: an accelerator, a remote service)."""

    def __init__(self, sleep_s: float = 0.0) -> None:
        torch.manual_seed(0)
        self.sleep_s = sleep_s
        self.net = torch.nn.Sequential(torch.nn.LazyLinear(256), torch.nn.ReLU(),
                                       torch.nn.Linear(256, 10))
        self.optimizer: Optional[torch.optim.Optimizer] = None

    def step(self, batch: Any) -> None:
        inputs, labels = batch
        if inputs.dtype == torch.uint8:  # raw images: every 14th pixel, 16 x 16 of 224 x 224
            inputs = inputs[:, :, ::14, ::14].float().div_(255)
        if inputs.dim() == 4:
            inputs = torch.nn.functional.adaptive_avg_pool2d(inputs, 16)
        logits = self.net(inputs.flatten(1))
        if self.optimizer is None:
            self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.01)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if self.sleep_s:
            time.sleep(self.sleep_s)


class ConvModel:
    """A small conv net trained with SGD on the CPU (3 x 64 x 64 inputs): real CPU training
    work on torch's intra-op threads, so every worker competes with the step for cores."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        nn = torch.nn
        self.net = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
            nn.Flatten(), nn.Linear(512, 10))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)

    def step(self, batch: Any) -> None:
        inputs, labels = batch
        loss = torch.nn.functional.cross_entropy(self.net(inputs), labels)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()


# --- the pipelines --------------------------------------------------------------------------


@dataclass
class Pipeline:
    """One pipeline: ``name``, the ``kind`` of limit it stands for, a short ``description``,
    ``dataset(data)`` (``data``: the folder :attr:`prepare` filled, or ``None``), ``model()``
    (a fresh training step: ``.step(batch)``), and ``prepare(folder)`` that writes its files,
    if any. ``iterable``: the dataset is an ``IterableDataset`` (no ``shuffle``)."""

    name: str
    kind: str
    description: str
    dataset: Callable[[Optional[str]], Any]
    model: Callable[[], Any] = Model
    prepare: Optional[Callable[[str], None]] = None
    iterable: bool = False
    tags: list[str] = field(default_factory=list)


PIPELINES: dict[str, Pipeline] = {p.name: p for p in [
    Pipeline("jpeg", "CPU, GIL-releasing decode",
             "PIL decode of 256x256 JPEG files, random resized crop to 224, ToTensor and "
             "Normalize with torch ops; MLP step",
             lambda folder: JpegFolder(folder), prepare=make_jpegs),
    Pipeline("text", "GIL-bound pure Python",
             "pure-Python lower-casing, regex split and greedy sub-word tokenizing of a "
             "200-word line, padded to 256 ids; MLP step",
             lambda _: TextDataset()),
    Pipeline("latency", "latency-bound",
             "2-6 ms of sleep per item (remote reads), tiny tensors; MLP step",
             lambda _: LatencyDataset(delay_s=0.002, jitter_s=0.004)),
    Pipeline("ipc", "IPC-heavy large batches",
             "64 x 3x224x224 uint8 a batch (9.6 MB), near-free to make; MLP step on pooled "
             "images",
             lambda _: LargeImageDataset()),
    Pipeline("slowstep", "cheap loader, slow step",
             "a near-free loader in front of a step that sleeps 30 ms (its ceiling binds: "
             "about 2,100 samples/s)",
             lambda _: SmallVectors(), model=lambda: Model(sleep_s=0.030)),
    Pipeline("cpustep", "CPU-heavy step",
             "3x64x64 images with light per-item work; a conv net trained on the CPU (the "
             "step's intra-op threads compete with workers)",
             lambda _: SmallImages(), model=ConvModel),
    Pipeline("torchops", "torch-op transforms, intra-op threads",
             "a 320x320 matmul, a 5x5 conv blur of 256x256 and pooling per item, on the "
             "calling process's intra-op threads; MLP step",
             lambda _: TensorOpsDataset()),
    Pipeline("wds", "iterable WebDataset",
             "WebDataset over 12 local tar shards (128x128 JPEG + class), split by worker, "
             "PIL decode and 96x96 crop per sample; MLP step",
             lambda folder: webdataset_pipeline(folder), prepare=make_shards, iterable=True),
    Pipeline("fft", "CPU, numpy",
             "a 2-D FFT of a 128x128 array per item (numpy); MLP step",
             lambda _: FftDataset()),
]}


# --- the loop -------------------------------------------------------------------------------


LOADER_KEYWORDS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")
"""The recommended settings a loader takes as DataLoader keywords."""


def loader_with(dataset: Any, settings: dict[str, Any], iterable: bool = False) -> DataLoader:
    """A DataLoader over ``dataset`` with batches of :data:`BATCH_SIZE` and the
    :data:`LOADER_KEYWORDS` in ``settings`` (others are ignored); shuffled unless
    ``iterable``. ``pin_memory`` only applies with CUDA."""
    workers = settings.get("num_workers", 0) or 0
    kwargs: dict[str, Any] = {"num_workers": workers, "batch_size": BATCH_SIZE}
    if not iterable:
        kwargs["shuffle"] = True
    if workers:
        kwargs["prefetch_factor"] = settings.get("prefetch_factor") or 2
        kwargs["persistent_workers"] = bool(settings.get("persistent_workers"))
    if settings.get("pin_memory") and torch.cuda.is_available():
        kwargs["pin_memory"] = True
    return DataLoader(dataset, **kwargs)


@dataclass
class Timed:
    """A timed run: ``samples_per_s`` over the measured window, and ``step_s`` the mean wall
    time of the steady steps in it (``None`` with no step measured)."""

    samples_per_s: float
    step_s: Optional[float]
    batches: int


def train_for(loader: Any, seconds: float, model: Any, warmup_batches: int = 3,
              whole_epochs: bool = False) -> Timed:
    """Train on ``loader`` (epochs repeat as needed) for ``seconds`` after ``warmup_batches``
    untimed batches (worker start-up, first allocations); returns the samples/s over the timed
    window and the mean step time in it. The same loop serves wrapped and plain loaders.

    ``whole_epochs``: the window is whole epochs instead, from the end of the epoch the warm-up
    ends in to the end of the first epoch that ends ``seconds`` or more later. Each epoch start
    (worker start-up, pipeline fill) and each epoch's tail (shards unevenly split over workers)
    then weighs in the rate as often as in a long run; a window of a few epochs' length that
    starts and ends mid-epoch counts them by the accident of its phase."""
    samples = batches = 0
    step_total = 0.0
    started: Optional[float] = None
    seen = 0
    while True:
        for batch in loader:
            step_start = time.perf_counter()
            model.step(batch)
            step_end = time.perf_counter()
            seen += 1
            if seen == warmup_batches and not whole_epochs:
                started = step_end
                continue
            if started is not None:
                samples += len(batch[1])
                batches += 1
                step_total += step_end - step_start
                if not whole_epochs and step_end - started >= seconds:
                    return Timed(samples / (step_end - started),
                                 step_total / batches if batches else None, batches)
        if whole_epochs and seen >= warmup_batches:
            now = time.perf_counter()
            if started is None:
                started = now
            elif batches and now - started >= seconds:
                return Timed(samples / (now - started), step_total / batches, batches)


# --- the neighbour --------------------------------------------------------------------------


NEIGHBOUR_TAG = "pipecheck-benchmark-neighbour"
"""An argument every neighbour process carries (ignored by it), so ``pgrep -f`` finds one."""


def burn() -> None:
    while True:
        pass


class Neighbour:
    """One CPU-burning process beside the training, placed as ``where`` says:

    * ``session``: a new session (``setsid``), outside this process tree (another login's or
      job's process; under autogroups, or in another container, it is another CPU scheduling
      group);
    * ``group``: this session, outside this process tree (a job started from the same shell:
      the same scheduling group, sharing cores thread for thread);
    * ``child``: a child of the training process (a process the training script started).

    Outside the tree it is started through a shell that exits at once (so it is reparented),
    as the leader's only other member of a new process group; :meth:`stop` kills that group
    with ``os.killpg``. Use it as a context manager, in ``try``/``finally``: it is stopped on
    every path out, Ctrl-C included. Its command line carries :data:`NEIGHBOUR_TAG`.
    """

    def __init__(self, where: str = "session") -> None:
        self.where = where
        self.pid: Optional[int] = None
        self.pgid: Optional[int] = None
        self.child: Optional[multiprocessing.process.BaseProcess] = None

    def start(self) -> "Neighbour":
        if self.where == "child":
            self.child = multiprocessing.get_context("fork").Process(target=burn, daemon=True)
            self.child.start()
            return self
        command = (f"'{sys.executable}' -c 'while True: pass' {NEIGHBOUR_TAG} "
                   f">/dev/null 2>&1 </dev/null & echo $!")
        # start_new_session: setsid() in the shell (session) or setpgid() (group): either way
        # the shell leads a new process group its background burner joins, so killpg reaches
        # the burner after the shell has exited.
        shell = subprocess.Popen(["sh", "-c", command], stdout=subprocess.PIPE, text=True,
                                 start_new_session=self.where == "session",
                                 process_group=None if self.where == "session" else 0)
        out, _ = shell.communicate()
        self.pgid, self.pid = shell.pid, int(out.strip())
        return self

    def stop(self) -> None:
        if self.child is not None:
            self.child.kill()
            self.child.join()
            self.child = None
        if self.pgid is not None:
            for kill, target in ((os.killpg, self.pgid), (os.kill, self.pid)):
                try:
                    kill(target, signal.SIGKILL)
                except (ProcessLookupError, PermissionError, TypeError):
                    pass
            self.pgid = self.pid = None

    def __enter__(self) -> "Neighbour":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
