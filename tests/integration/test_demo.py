"""The embedded demo: shard generation (pipecheck.demo_data) and the wrapped training run
(pipecheck.demo), on small sizes so the whole file runs in seconds."""

from __future__ import annotations

import collections
import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import webdataset as wds
from PIL import Image

import pipecheck
from pipecheck import demo, demo_data
from pipecheck.errors import BadInputError

SMALL = dict(images=40, shards=4, size=64, seed=3)


def file_state(paths: list[str]) -> dict[str, tuple[int, int, int]]:
    """(inode, size, mtime in ns) per path: changes whenever a file is rewritten or renamed in."""
    return {p: (os.stat(p).st_ino, os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths}


@pytest.fixture(scope="module")
def small_shards(tmp_path_factory) -> list[str]:
    return demo_data.ensure_shards(tmp_path_factory.mktemp("shards"), **SMALL)


# ---------------------------------------------------------------------------------------------
# ensure_shards
# ---------------------------------------------------------------------------------------------


def test_shards_are_named_in_order_and_absolute(small_shards):
    assert [Path(p).name for p in small_shards] == [f"demo-{i:06d}.tar" for i in range(4)]
    assert all(Path(p).is_absolute() and Path(p).is_file() for p in small_shards)


def test_every_sample_is_a_real_jpeg_with_a_label_in_range(small_shards):
    raw = list(wds.WebDataset(small_shards, shardshuffle=False, empty_check=False))
    assert sorted(s["__key__"] for s in raw) == [f"{i:06d}" for i in range(SMALL["images"])]
    for sample in raw:
        assert sample["jpg"][:3] == b"\xff\xd8\xff"  # JPEG start-of-image marker
        image = Image.open(io.BytesIO(sample["jpg"]))
        assert image.format == "JPEG"
        assert image.mode == "RGB" and image.size == (SMALL["size"], SMALL["size"])
        image.load()  # a full decode: raises on a corrupt stream
        assert int(sample["cls"]) == int(sample["__key__"]) % len(demo_data.CLASS_NAMES)

    decoded = list(wds.WebDataset(small_shards, shardshuffle=False, empty_check=False)
                   .decode("pil").to_tuple("jpg", "cls"))
    assert len(decoded) == SMALL["images"]
    for image, label in decoded:
        assert isinstance(image, Image.Image) and image.size == (SMALL["size"], SMALL["size"])
        assert isinstance(label, int) and 0 <= label < len(demo_data.CLASS_NAMES)


def test_images_are_not_noise_and_compress_like_photos():
    jpeg, _ = demo_data.make_image(5)
    pixels = np.asarray(Image.open(io.BytesIO(jpeg)), dtype=np.float32)
    neighbour_diff = np.abs(np.diff(pixels, axis=1)).mean()
    assert neighbour_diff < 15, "neighbouring pixels should be close (smooth content)"
    assert 5_000 < len(jpeg) < 30_000, "a 256x256 image should be a photo-like 5-30 KB"


def test_generation_is_deterministic():
    assert demo_data.make_image(11, size=64, seed=1) == demo_data.make_image(11, size=64, seed=1)
    assert demo_data.make_image(11, size=64, seed=1) != demo_data.make_image(11, size=64, seed=2)


def test_shards_hold_contiguous_balanced_ranges():
    ranges = [demo_data.shard_range(i, images=10, shards=4) for i in range(4)]
    assert [list(r) for r in ranges] == [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]


def test_second_call_rewrites_nothing(tmp_path):
    paths = demo_data.ensure_shards(tmp_path, **SMALL)
    before = file_state(paths + [str(tmp_path / demo_data.MANIFEST_NAME)])
    assert demo_data.ensure_shards(tmp_path, **SMALL) == paths
    assert file_state(paths + [str(tmp_path / demo_data.MANIFEST_NAME)]) == before


def test_truncated_or_missing_shard_is_rebuilt_alone(tmp_path):
    paths = demo_data.ensure_shards(tmp_path, **SMALL)
    original = Path(paths[1]).read_bytes()
    with open(paths[1], "r+b") as shard:
        shard.truncate(len(original) // 2)
    Path(paths[2]).unlink()
    (tmp_path / "demo-000002.tar.x1y2.tmp").write_bytes(b"left by a killed writer")
    untouched = file_state([paths[0], paths[3]])

    assert demo_data.ensure_shards(tmp_path, **SMALL) == paths
    assert Path(paths[1]).read_bytes() == original
    assert Path(paths[2]).is_file()
    assert file_state([paths[0], paths[3]]) == untouched
    assert not list(tmp_path.glob("*.tmp")), "temporary files must be cleaned up"


def test_changed_parameters_rebuild_and_remove_stale_shards(tmp_path):
    demo_data.ensure_shards(tmp_path, **SMALL)
    paths = demo_data.ensure_shards(tmp_path, images=10, shards=2, size=64, seed=3)
    names = sorted(p.name for p in tmp_path.glob("demo-*.tar"))
    assert names == ["demo-000000.tar", "demo-000001.tar"]
    keys = [s["__key__"] for s in wds.WebDataset(paths, shardshuffle=False, empty_check=False)]
    assert len(keys) == 10


def test_default_folder_follows_pipecheck_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PIPECHECK_CACHE", str(tmp_path / "cache"))
    assert demo_data.default_data_dir() == tmp_path / "cache"
    monkeypatch.delenv("PIPECHECK_CACHE")
    assert demo_data.default_data_dir() == Path.home() / ".cache" / "pipecheck" / "demo"


@pytest.mark.parametrize("kwargs", [dict(images=3, shards=4), dict(shards=0), dict(size=16)])
def test_bad_parameters_are_value_and_input_errors(tmp_path, kwargs):
    with pytest.raises(ValueError) as caught:
        demo_data.ensure_shards(tmp_path, **kwargs)
    assert isinstance(caught.value, BadInputError)  # the CLI turns it into exit code 2
    assert not list(tmp_path.glob("demo-*.tar"))


# ---------------------------------------------------------------------------------------------
# the pipeline and the model
# ---------------------------------------------------------------------------------------------


def test_augment_gives_normalized_chw_float_tensors():
    image = Image.open(io.BytesIO(demo_data.make_image(0)[0]))
    out = demo.DemoAugment(48)(image)
    assert out.shape == (3, 48, 48) and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    assert -3.0 < out.mean().item() < 3.0  # normalized around 0, not 0-255


@pytest.mark.parametrize("workers", [0, 2])
def test_each_epoch_reads_every_sample_once(small_shards, workers):
    """With 2 workers over 4 shards each worker must read distinct shards: the epoch then has
    exactly the dataset's samples and labels, not twice as many."""
    loader = demo.build_loader(small_shards, workers=workers, batch_size=8, crop=32)
    labels = collections.Counter()
    for images, batch_labels in loader:
        assert images.shape[1:] == (3, 32, 32)
        labels.update(batch_labels.tolist())
    expected = collections.Counter(i % len(demo_data.CLASS_NAMES) for i in range(SMALL["images"]))
    assert labels == expected


def test_more_workers_than_shards_is_refused(small_shards):
    with pytest.raises(ValueError, match="number of shards"):
        demo.build_loader(small_shards, workers=len(small_shards) + 1)


def test_model_maps_a_batch_to_class_logits():
    logits = demo.build_model()(torch.zeros(2, 3, demo.CROP_SIZE, demo.CROP_SIZE))
    assert logits.shape == (2, len(demo_data.CLASS_NAMES))


# ---------------------------------------------------------------------------------------------
# run_demo
# ---------------------------------------------------------------------------------------------

RUN = dict(images=64, shards=4, batch_size=8, progress=False)  # 8 batches per epoch


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("demo-run")


def test_run_demo_returns_a_report_with_one_batch_per_step(run_dir, capfd):
    report = demo.run_demo(data_dir=run_dir, workers=0, steps=20, **RUN)
    assert isinstance(report, pipecheck.Report)
    assert report.kind == "wrap"
    assert report.consumer.batches == 20
    assert report.consumer.samples == 20 * 8
    assert report.consumer.epochs == 3  # 8 + 8 + 4 batches: re-iteration starts new epochs
    assert report.loader.num_workers == 0 and report.loader.batch_size == 8
    assert report.diagnosis.verdict in ("input-bound", "compute-bound", "balanced")
    out, err = capfd.readouterr()
    assert out == "" and err == "", "progress=False must print nothing"


def test_run_demo_with_workers_measures_them(run_dir):
    report = demo.run_demo(data_dir=run_dir, workers=2, steps=10, **RUN)
    assert report.consumer.batches == 10
    assert report.loader.num_workers == 2
    assert {w.id for w in report.producer.workers} == {0, 1}


@pytest.mark.slow
def test_epochs_hint_caps_the_passes(run_dir):
    report = demo.run_demo(data_dir=run_dir, workers=0, steps=100, epochs_hint=1, **RUN)
    assert report.consumer.batches == 8
    assert report.consumer.epochs == 1


def test_ctrl_c_before_the_first_step_still_gives_a_report(run_dir, monkeypatch):
    def interrupted_while_building():
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "build_model", interrupted_while_building)
    with pytest.raises(demo.DemoInterrupted) as caught:
        demo.run_demo(data_dir=run_dir, workers=0, steps=5, **RUN)
    report = caught.value.report
    assert report.consumer.batches == 0 and report.consumer.status == "interrupted"
    assert report.diagnosis.verdict == "no-data"


def test_progress_goes_to_stderr(run_dir, capfd):
    demo.run_demo(data_dir=run_dir, workers=0, steps=3, **{**RUN, "progress": True})
    out, err = capfd.readouterr()
    assert out == ""
    assert "demo data: 4 shards" in err and "3/3" in err


def test_torch_threads_are_set_for_the_run_and_restored(run_dir, monkeypatch):
    seen = []
    real_train = demo._train

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real_train(*args, **kwargs)

    monkeypatch.setattr(demo, "_train", spy)
    before = torch.get_num_threads()
    demo.run_demo(data_dir=run_dir, workers=0, steps=2, torch_threads=1, **RUN)
    assert seen == [1]
    assert torch.get_num_threads() == before


def test_default_threads_are_the_cores_workers_leave_free(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert [demo.default_torch_threads(w) for w in (0, 1, 3, 4, 8)] == [4, 3, 1, 1, 1]


@pytest.mark.parametrize("kwargs", [dict(steps=0), dict(workers=5), dict(workers=-1),
                                    dict(batch_size=0), dict(epochs_hint=0),
                                    dict(torch_threads=0)])
def test_run_demo_rejects_bad_arguments_before_generating(tmp_path, kwargs):
    with pytest.raises(ValueError):
        demo.run_demo(data_dir=tmp_path, **{**RUN, "steps": 5, **kwargs})
    assert not list(tmp_path.glob("demo-*.tar"))
