"""Synthetic but real demo data: a WebDataset of JPEG images of ten shape classes.

:func:`ensure_shards` writes ``demo-000000.tar`` ... into a cache folder once and reuses them.
Each sample has ``__key__`` (six-digit index), ``jpg`` (JPEG bytes, RGB) and ``cls`` (the class
index 0-9 as ASCII text). Every image is a smooth colour gradient with a few small distractor
blobs, one large shape whose kind is the label (so a CNN can learn it), and mild sensor-like
noise; it decodes and compresses like a photo (about 15 KB per 256x256 image at quality 85),
so decoding costs what it costs on real data.

Generation is deterministic: image ``i`` depends only on ``(seed, i)`` and ``size``, so a
missing shard can be rebuilt alone and comes back byte-identical.
"""

from __future__ import annotations

import io
import json
import math
import multiprocessing
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Union

import numpy as np
from PIL import Image, ImageDraw

from .errors import BadInputError

CLASS_NAMES = (
    "circle",
    "ring",
    "triangle",
    "square",
    "star",
    "plus",
    "bars",
    "ellipse",
    "crescent",
    "half-disk",
)
"""Label ``i`` means the large shape drawn in the image is ``CLASS_NAMES[i]``."""


class DemoArgumentError(BadInputError, ValueError):
    """A demo parameter is out of range. A ``ValueError`` for library callers; a
    :class:`~pipecheck.errors.BadInputError` so the CLI reports it in one line (exit code 2)."""


SHARD_PATTERN = "demo-{:06d}.tar"
MANIFEST_NAME = "demo-manifest.json"
_FORMAT_VERSION = 1  # bump when the image recipe changes, so old caches are rebuilt
_JPEG_QUALITY = 85  # a typical photo-dataset quality (ImageNet JPEGs sit around 75-95)
_NOISE_STD = 6.0  # grey levels; enough texture that JPEG sizes look like photos, not clip art

PathLike = Union[str, os.PathLike]


def default_data_dir() -> Path:
    """Where the demo shards live when no folder is given: ``$PIPECHECK_CACHE`` if set, else
    ``~/.cache/pipecheck/demo``."""
    env = os.environ.get("PIPECHECK_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pipecheck" / "demo"


def ensure_shards(
    data_dir: Optional[PathLike] = None,
    *,
    images: int = 2048,
    shards: int = 8,
    size: int = 256,
    seed: int = 0,
) -> list[str]:
    """Make sure the demo WebDataset exists in ``data_dir`` and return its shard paths.

    Args:
        data_dir: folder for the shards (created if missing); ``None`` uses
            :func:`default_data_dir`.
        images: total number of samples, ``>= shards`` (each shard gets ``images // shards`` or
            one more, in index order).
        shards: number of tar files, ``>= 1``.
        size: image side in pixels, ``>= 32`` (smaller images cannot hold the shapes legibly).
        seed: generation seed; the same ``(seed, size, images, shards)`` gives the same bytes.

    Returns:
        Absolute paths of the shards as strings, in order (``demo-000000.tar`` first).

    Idempotent: a manifest (``demo-manifest.json``) records the parameters and each shard's size
    in bytes. Nothing is written when they match what is on disk. A shard that is missing or
    whose size differs (truncated) is regenerated alone; different parameters regenerate all and
    delete stale ``demo-*.tar`` files. Each shard is written to a temporary file and renamed, so
    a crash never leaves a half-written shard under its final name; the manifest is written
    last. Concurrent callers on one folder are serialized with a file lock where ``fcntl``
    exists. Generation uses up to two processes (about 5 s per 1000 images on two cores).

    Raises:
        DemoArgumentError: (a ``ValueError``) a parameter is out of range.
        OSError: the folder cannot be created or written.
    """
    if shards < 1:
        raise DemoArgumentError(f"shards must be >= 1, got {shards}")
    if images < shards:
        raise DemoArgumentError(
            f"images ({images}) must be >= shards ({shards}) so no shard is empty")
    if size < 32:
        raise DemoArgumentError(f"size must be >= 32 pixels, got {size}")

    folder = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    if folder.exists() and not folder.is_dir():
        raise BadInputError(f"demo data folder {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BadInputError(f"cannot create the demo data folder {folder}: "
                            f"{err.strerror or err}") from err
    folder = folder.resolve()
    params = {"format": _FORMAT_VERSION, "images": images, "shards": shards, "size": size,
              "seed": seed}
    paths = [folder / SHARD_PATTERN.format(i) for i in range(shards)]

    with _locked(folder):
        manifest = _read_manifest(folder)
        if manifest is not None and manifest.get("params") == params:
            recorded = manifest.get("shard_bytes", [])
            todo = [i for i, p in enumerate(paths) if not _intact(p, recorded, i)]
        else:
            todo = list(range(shards))
        if todo:
            _remove_stale(folder, keep=set(paths))
            (folder / MANIFEST_NAME).unlink(missing_ok=True)  # never valid while shards change
            _write_shards(folder, todo, params)
            manifest = {"params": params, "shard_bytes": [p.stat().st_size for p in paths]}
            _atomic_write_text(folder / MANIFEST_NAME, json.dumps(manifest, indent=1))
    return [str(p) for p in paths]


def shard_range(shard: int, *, images: int, shards: int) -> range:
    """Indices of the images stored in shard ``shard`` (contiguous, sizes differ by at most 1)."""
    return range(shard * images // shards, (shard + 1) * images // shards)


def make_image(index: int, *, size: int = 256, seed: int = 0) -> tuple[bytes, int]:
    """Draw image ``index`` and return ``(jpeg_bytes, label)``; label is ``index % 10``.

    Deterministic in ``(index, size, seed)``. Costs about 5 ms for a 256x256 image.
    """
    rng = np.random.default_rng([seed, index])
    label = index % len(CLASS_NAMES)  # balanced classes; the loader shuffles the order
    image = Image.fromarray(_gradient(rng, size))
    draw = ImageDraw.Draw(image)
    for _ in range(3):  # small distractors, so the label is not "the only blob"
        x, y = rng.uniform(0, size, 2)
        r = rng.uniform(0.02, 0.07) * size
        draw.ellipse([x - r, y - r, x + r, y + r], fill=_colour(rng))
    # The shape stays near the centre and large, so a random resized crop still shows most of it.
    cx, cy = rng.uniform(0.38, 0.62, 2) * size
    radius = rng.uniform(0.22, 0.32) * size
    rotation = float(rng.uniform(0, 2 * math.pi))
    image.paste(_colour(rng), mask=_shape_mask(label, size, cx, cy, radius, rotation))
    noise = rng.normal(0.0, _NOISE_STD, (size, size, 3)).astype(np.float32)
    noisy = np.asarray(image, dtype=np.float32) + noise
    image = Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=_JPEG_QUALITY)
    return buffer.getvalue(), label


# ---------------------------------------------------------------------------------------------
# drawing
# ---------------------------------------------------------------------------------------------


def _colour(rng: np.random.Generator) -> tuple[int, int, int]:
    return tuple(int(v) for v in rng.integers(0, 256, 3))  # type: ignore[return-value]


def _gradient(rng: np.random.Generator, size: int) -> np.ndarray:
    """A bilinear blend of four random corner colours: smooth, like sky or a wall."""
    corners = rng.uniform(0, 255, size=(2, 2, 3)).astype(np.float32)
    t = np.linspace(0.0, 1.0, size, dtype=np.float32)[:, None]
    top = corners[0, 0] * (1 - t) + corners[0, 1] * t  # (size, 3) along x
    bottom = corners[1, 0] * (1 - t) + corners[1, 1] * t
    rows = t[:, :, None]  # (size, 1, 1) along y
    return (top[None] * (1 - rows) + bottom[None] * rows).astype(np.uint8)


Points = list[tuple[float, float]]


def _polygon(cx: float, cy: float, radii: list[float], rotation: float) -> Points:
    """Vertices at equal angles around ``(cx, cy)``, vertex ``k`` at distance ``radii[k]``."""
    angles = [rotation + 2 * math.pi * k / len(radii) for k in range(len(radii))]
    return [(cx + r * math.cos(a), cy + r * math.sin(a)) for r, a in zip(radii, angles)]


def _rotated(points: Points, cx: float, cy: float, angle: float) -> Points:
    c, s = math.cos(angle), math.sin(angle)
    return [(cx + (x - cx) * c - (y - cy) * s, cy + (x - cx) * s + (y - cy) * c) for x, y in points]


def _shape_mask(label: int, size: int, cx: float, cy: float, r: float,
                rotation: float) -> Image.Image:
    """An 8-bit mask (255 inside) of shape ``CLASS_NAMES[label]`` centred at ``(cx, cy)``
    with outer radius ``r`` pixels, turned by ``rotation`` radians."""
    mask = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(mask)
    name = CLASS_NAMES[label]
    box = [cx - r, cy - r, cx + r, cy + r]
    if name == "circle":
        draw.ellipse(box, fill=255)
    elif name == "ring":
        draw.ellipse(box, outline=255, width=max(2, int(r * 0.3)))
    elif name == "triangle":
        draw.polygon(_polygon(cx, cy, [r] * 3, rotation), fill=255)
    elif name == "square":
        draw.polygon(_polygon(cx, cy, [r] * 4, rotation), fill=255)
    elif name == "star":
        draw.polygon(_polygon(cx, cy, [r, r * 0.4] * 5, rotation), fill=255)
    elif name == "plus":
        arm = r * 0.28
        across = [(cx - r, cy - arm), (cx + r, cy - arm), (cx + r, cy + arm), (cx - r, cy + arm)]
        upright = [(cx - arm, cy - r), (cx + arm, cy - r), (cx + arm, cy + r), (cx - arm, cy + r)]
        for bar in (across, upright):
            draw.polygon(_rotated(bar, cx, cy, rotation), fill=255)
    elif name == "bars":  # three parallel bars with gaps between them
        half = r * 0.18
        for y in (cy - r * 0.6, cy, cy + r * 0.6):
            bar = [(cx - r, y - half), (cx + r, y - half), (cx + r, y + half), (cx - r, y + half)]
            draw.polygon(_rotated(bar, cx, cy, rotation), fill=255)
    elif name == "ellipse":  # elongated, 2.5:1
        angles = np.linspace(0, 2 * math.pi, 48, endpoint=False)
        outline = [(cx + r * math.cos(a), cy + 0.4 * r * math.sin(a)) for a in angles]
        draw.polygon(_rotated(outline, cx, cy, rotation), fill=255)
    elif name == "crescent":  # a disk with an offset disk bitten out
        draw.ellipse(box, fill=255)
        bx, by = _rotated([(cx + 0.45 * r, cy)], cx, cy, rotation)[0]
        draw.ellipse([bx - 0.85 * r, by - 0.85 * r, bx + 0.85 * r, by + 0.85 * r], fill=0)
    elif name == "half-disk":
        draw.pieslice(box, start=math.degrees(rotation), end=math.degrees(rotation) + 180, fill=255)
    else:  # pragma: no cover - CLASS_NAMES and this function change together
        raise AssertionError(name)
    return mask


# ---------------------------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------------------------


def _write_shard(task: tuple[str, int, dict]) -> str:
    """Pool task: write one shard to a temp file in its folder, then rename it into place."""
    import webdataset as wds

    folder, shard, params = task
    final = Path(folder) / SHARD_PATTERN.format(shard)
    fd, tmp = tempfile.mkstemp(prefix=final.name + ".", suffix=".tmp", dir=folder)
    try:
        # A fixed member mtime makes a rebuilt shard byte-identical (reproducible tar files).
        with os.fdopen(fd, "wb") as stream, wds.TarWriter(stream, mtime=0) as writer:
            for index in shard_range(shard, images=params["images"], shards=params["shards"]):
                jpeg, label = make_image(index, size=params["size"], seed=params["seed"])
                writer.write({"__key__": f"{index:06d}", "jpg": jpeg, "cls": label})
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return str(final)


def _write_shards(folder: Path, todo: list[int], params: dict) -> None:
    tasks = [(str(folder), i, params) for i in todo]
    processes = min(2, len(tasks), os.cpu_count() or 1)  # the machines we target have 2+ cores
    if processes <= 1 or multiprocessing.current_process().daemon:  # daemons may not fork
        for task in tasks:
            _write_shard(task)
        return
    with multiprocessing.get_context().Pool(processes) as pool:
        pool.map(_write_shard, tasks, chunksize=1)


def _intact(path: Path, recorded: list, index: int) -> bool:
    try:
        return index < len(recorded) and path.stat().st_size == recorded[index]
    except FileNotFoundError:
        return False


def _read_manifest(folder: Path) -> Optional[dict]:
    try:
        data = json.loads((folder / MANIFEST_NAME).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _remove_stale(folder: Path, keep: set[Path]) -> None:
    """Delete shards not in ``keep`` and temp files a killed writer left (the lock is held, so
    no writer is running)."""
    for old in [*folder.glob("demo-*.tar"), *folder.glob("demo-*.tar.*.tmp")]:
        if old not in keep:
            old.unlink(missing_ok=True)


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as stream:
            stream.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder/.lock`` (no-op where ``fcntl`` is missing)."""
    try:
        import fcntl
    except ImportError:  # Windows: callers rarely race on one cache folder there
        yield
        return
    with open(folder / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
