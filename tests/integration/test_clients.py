"""pipecheck.wrap with the real third-party loader libraries users train with: Hugging Face
``datasets`` (map-style and iterable), MosaicML ``streaming``, ``litdata``, torchdata's
``StatefulDataLoader`` and ``webdataset``. Every data set is generated here, in a temporary
directory (MDS shards with ``MDSWriter``, litdata chunks with ``litdata.optimize``, Arrow tables
with ``Dataset.from_dict``, tar shards with ``webdataset.TarWriter``); nothing is downloaded.

For each library, with 0 and 2 workers where it has workers:

* the batches through the wrapper equal the unwrapped batches exactly;
* checkpoint / resume (libraries with ``state_dict``): 3 batches through the wrapped loader,
  ``wrapped.state_dict()``, a fresh loader + wrap with ``load_state_dict``, the rest of the
  epoch; the resumed batches equal those of the same done unwrapped;
* the library's own ``isinstance`` checks on ``loader.dataset`` hold;
* the report counts every batch, with the worker probe on (or off with a note saying why).

Marked ``clients`` and installed with ``pip install -e ".[clients]"``; each library's tests skip
(with the reason) where it is missing or does not import.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import importlib
import io
import pickle
import tarfile
from typing import Any, Callable, Iterable

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import pipecheck

pytestmark = pytest.mark.clients

WORKERS = [0, pytest.param(2, marks=pytest.mark.slow)]
"""Worker counts; 2 workers take 20-110 s a test on a loaded 2-core machine (marked slow:
``pytest -m clients`` runs them, the default run leaves them out)."""
SAMPLES = 64
BATCH = 4
RESUME_AFTER = 3
"""Batches taken before ``state_dict()`` in the checkpoint / resume tests."""


def _library(name: str) -> Any:
    """Import ``name`` or skip with the reason (missing, or failing to import here: e.g.
    mosaicml-streaming imports torchvision, whose PyPI build needs a CUDA torch)."""
    try:
        return importlib.import_module(name)
    except Exception as err:  # ImportError, or the RuntimeError of a broken dependency
        pytest.skip(f"{name} unavailable: {type(err).__name__}: {err}".splitlines()[0])


def _plain(value: Any) -> Any:
    """A batch as nested Python lists / dicts, for exact comparison."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _take(loader: Iterable[Any], count: int | None = None) -> list[Any]:
    """The first ``count`` batches of one epoch (all when ``None``), as plain values."""
    out = []
    for batch in loader:
        out.append(_plain(batch))
        if count is not None and len(out) == count:
            break
    return out


def _wrap(loader: Any) -> pipecheck.WrappedLoader:
    return pipecheck.wrap(loader, host_interval_s=0.2, device=False)


def _check_report(wrapped: pipecheck.WrappedLoader, batches: int, samples: int) -> None:
    """The report counts ``batches`` batches and ``samples`` samples, and the worker probe
    either timed every batch or is off with the reason written in the report."""
    report = wrapped.report()
    assert report.consumer.batches == batches
    assert report.consumer.samples == samples
    producer = report.producer
    if producer.probe != "none":
        assert sum(w.batches for w in producer.workers) == batches
    else:
        assert (producer.capacity_basis or "").startswith("not measured:"), \
            "worker probe off without a note"


def _resume(make: Callable[[], Any], wrap: bool) -> tuple[list[Any], list[Any], dict]:
    """3 batches, ``state_dict()``, a fresh loader loading it, then the rest of the epoch;
    returns (first batches, resumed batches, the state). Every loader is closed and collected
    before the next one is made (MosaicML keeps one live dataset per directory)."""
    loader = make()
    source = _wrap(loader) if wrap else loader
    first = []
    iterator = iter(source)
    for _ in range(RESUME_AFTER):
        first.append(_plain(next(iterator)))
    state = source.state_dict()
    del iterator
    if wrap:
        source.close()
    del loader, source
    gc.collect()
    resumed_loader = make()
    resumed = _wrap(resumed_loader) if wrap else resumed_loader
    resumed.load_state_dict(state)
    rest = _take(resumed)
    if wrap:
        resumed.close()
    del resumed, resumed_loader
    gc.collect()
    return first, rest, state


# -- torchdata StatefulDataLoader ------------------------------------------------------------


class _Squares(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": torch.tensor(index), "y": torch.tensor(index * index)}


def _yielded(state: dict) -> int:
    """Batches yielded according to a StatefulDataLoader state (single- or multi-process)."""
    if "_snapshot" in state:
        return state["_snapshot"]["_main_snapshot"]["_sampler_iter_yielded"]
    return state["_num_yielded"]


def _stateful(workers: int) -> Any:
    stateful = _library("torchdata.stateful_dataloader")
    generator = torch.Generator().manual_seed(7)
    return stateful.StatefulDataLoader(_Squares(), batch_size=BATCH, shuffle=True,
                                       num_workers=workers, generator=generator)


@pytest.mark.parametrize("workers", WORKERS)
def test_torchdata_stateful_batches_equal(workers):
    plain = _take(_stateful(workers))
    wrapped = _wrap(_stateful(workers))
    assert _take(wrapped) == plain
    _check_report(wrapped, SAMPLES // BATCH, SAMPLES)
    wrapped.close()


@pytest.mark.parametrize("workers", WORKERS)
def test_torchdata_stateful_checkpoint_resume(workers):
    first, rest, state = _resume(lambda: _stateful(workers), wrap=False)
    w_first, w_rest, w_state = _resume(lambda: _stateful(workers), wrap=True)
    assert w_first == first
    # the state is that of the batches the user got (3 batches), not of an idle copy
    assert _yielded(w_state) == _yielded(state) == RESUME_AFTER
    assert w_rest == rest and len(rest) == SAMPLES // BATCH - RESUME_AFTER


# -- MosaicML streaming ----------------------------------------------------------------------


@pytest.fixture
def mds_dir(tmp_path):
    streaming = _library("streaming")
    out = tmp_path / "mds"
    with streaming.MDSWriter(out=str(out), columns={"x": "int", "y": "int"},
                             size_limit=256) as writer:  # several shards
        for index in range(SAMPLES):
            writer.write({"x": index, "y": index * index})
    return out


def _mosaic(directory, workers: int) -> Any:
    streaming = _library("streaming")
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    dataset = streaming.StreamingDataset(local=str(directory), batch_size=BATCH, shuffle=True,
                                         shuffle_seed=7)
    return streaming.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers)


@pytest.mark.parametrize("workers", WORKERS)
def test_mosaic_streaming_batches_equal(mds_dir, workers):
    streaming = _library("streaming")
    loader = _mosaic(mds_dir, workers)
    plain = _take(loader)
    del loader
    gc.collect()
    loader = _mosaic(mds_dir, workers)
    wrapped = _wrap(loader)
    assert isinstance(wrapped.dataset, streaming.StreamingDataset)
    assert _take(wrapped) == plain and len(plain) == SAMPLES // BATCH
    _check_report(wrapped, SAMPLES // BATCH, SAMPLES)
    wrapped.close()


@pytest.mark.parametrize("workers", WORKERS)
def test_mosaic_streaming_checkpoint_resume(mds_dir, workers):
    first, rest, state = _resume(lambda: _mosaic(mds_dir, workers), wrap=False)
    w_first, w_rest, w_state = _resume(lambda: _mosaic(mds_dir, workers), wrap=True)
    assert w_first == first
    assert w_state["sample_in_epoch"] == state["sample_in_epoch"] == RESUME_AFTER * BATCH
    assert w_rest == rest and len(rest) == SAMPLES // BATCH - RESUME_AFTER


# -- litdata ---------------------------------------------------------------------------------


def _litdata_sample(index: int) -> dict[str, Any]:
    return {"x": index, "y": index * index}


@pytest.fixture
def litdata_dir(tmp_path):
    litdata = _library("litdata")
    out = tmp_path / "litdata"
    with contextlib.redirect_stdout(io.StringIO()):  # optimize() prints its progress
        litdata.optimize(fn=_litdata_sample, inputs=list(range(SAMPLES)), output_dir=str(out),
                         chunk_size=8, num_workers=1, verbose=False)
    return out


def _litdata(directory, workers: int) -> Any:
    litdata = _library("litdata")
    dataset = litdata.StreamingDataset(str(directory), shuffle=True, seed=7)
    return litdata.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers)


@pytest.mark.parametrize("workers", WORKERS)
def test_litdata_batches_equal(litdata_dir, workers):
    litdata = _library("litdata")
    plain = _take(_litdata(litdata_dir, workers))
    wrapped = _wrap(_litdata(litdata_dir, workers))
    # StreamingDataLoader.__iter__ checks isinstance(self.dataset, StreamingDataset)
    assert isinstance(wrapped.dataset, litdata.StreamingDataset)
    assert _take(wrapped) == plain and len(plain) == SAMPLES // BATCH
    _check_report(wrapped, SAMPLES // BATCH, SAMPLES)
    wrapped.close()


@pytest.mark.parametrize("workers", WORKERS)
def test_litdata_checkpoint_resume(litdata_dir, workers):
    first, rest, state = _resume(lambda: _litdata(litdata_dir, workers), wrap=False)
    w_first, w_rest, w_state = _resume(lambda: _litdata(litdata_dir, workers), wrap=True)
    assert w_first == first
    assert w_state["num_samples_yielded"] == state["num_samples_yielded"]
    assert w_rest == rest and len(rest) == SAMPLES // BATCH - RESUME_AFTER


# -- Hugging Face datasets -------------------------------------------------------------------


def _hf_table() -> Any:
    datasets = _library("datasets")
    return datasets.Dataset.from_dict(
        {"x": list(range(SAMPLES)), "y": [i * i for i in range(SAMPLES)]}).with_format("torch")


@pytest.mark.parametrize("workers", WORKERS)
def test_hf_datasets_map_style_batches_equal(workers):
    datasets = _library("datasets")
    table = _hf_table()

    def make() -> DataLoader:
        return DataLoader(table, batch_size=BATCH, shuffle=True, num_workers=workers,
                          generator=torch.Generator().manual_seed(7))

    plain = _take(make())
    wrapped = _wrap(make())
    assert isinstance(wrapped.dataset, datasets.Dataset)
    assert _take(wrapped) == plain and len(plain) == SAMPLES // BATCH
    _check_report(wrapped, SAMPLES // BATCH, SAMPLES)
    wrapped.close()


@pytest.mark.parametrize("workers", WORKERS)
def test_hf_dataset_survives_loaders_wrapped_dropped_and_rebuilt_each_epoch(tmp_path, workers):
    """``datasets.Dataset`` defines ``__del__`` (it deletes its table and indices): a loader
    over it wrapped, iterated and dropped every epoch, as a validation loader is, must leave
    the dataset whole (pipecheck makes no object that shares its state)."""
    datasets = _library("datasets")
    table = _hf_table()
    expected = []
    for epoch in range(3):
        generator = torch.Generator().manual_seed(epoch)
        expected.append(_take(DataLoader(table, batch_size=BATCH, shuffle=True,
                                         num_workers=workers, generator=generator)))
    for epoch in range(3):
        generator = torch.Generator().manual_seed(epoch)
        wrapped = _wrap(DataLoader(table, batch_size=BATCH, shuffle=True, num_workers=workers,
                                   generator=generator))
        assert _take(wrapped) == expected[epoch]
        wrapped.report()
        del wrapped
        gc.collect()
    # Every use of the dataset works after the wrappers went.
    assert len(table) == SAMPLES and int(table[3]["y"]) == 9
    assert _take(DataLoader(table, batch_size=BATCH)) == _take(DataLoader(_hf_table(),
                                                                          batch_size=BATCH))
    copied = pickle.loads(pickle.dumps(table))
    assert isinstance(copied, datasets.Dataset) and len(copy.deepcopy(table)) == SAMPLES
    torch.save(table, tmp_path / "table.pt")
    assert len(torch.load(tmp_path / "table.pt", weights_only=False)) == SAMPLES


@pytest.mark.parametrize("workers", WORKERS)
def test_hf_datasets_iterable_batches_equal(workers):
    datasets = _library("datasets")
    iterable = _hf_table().to_iterable_dataset(num_shards=4)

    def make() -> DataLoader:
        return DataLoader(iterable, batch_size=BATCH, num_workers=workers)

    plain = _take(make())
    wrapped = _wrap(make())
    # DataLoader splits the shards over workers only for a datasets.IterableDataset
    assert isinstance(wrapped.dataset, datasets.IterableDataset)
    assert _take(wrapped) == plain
    assert sorted(x for batch in plain for x in batch["x"]) == list(range(SAMPLES))
    _check_report(wrapped, len(plain), SAMPLES)
    wrapped.close()


@pytest.mark.parametrize("workers", WORKERS)
def test_hf_datasets_iterable_checkpoint_resume(workers):
    """A datasets.IterableDataset in torchdata's StatefulDataLoader: the loader's state holds
    the dataset's own ``state_dict`` (shard and offset)."""
    _library("datasets")
    stateful = _library("torchdata.stateful_dataloader")

    def make() -> Any:  # a fresh dataset each time: load_state_dict() sets the dataset's state
        return stateful.StatefulDataLoader(_hf_table().to_iterable_dataset(num_shards=4),
                                           batch_size=BATCH, num_workers=workers)

    first, rest, _ = _resume(make, wrap=False)
    w_first, w_rest, _ = _resume(make, wrap=True)
    assert w_first == first and w_rest == rest
    seen = [x for batch in first + rest for x in batch["x"]]
    assert sorted(seen) == list(range(SAMPLES))


# -- webdataset ------------------------------------------------------------------------------


@pytest.fixture
def tar_shards(tmp_path):
    paths = []
    for shard in range(4):
        path = tmp_path / f"shard-{shard}.tar"
        with tarfile.open(path, "w") as tar:
            for index in range(shard * SAMPLES // 4, (shard + 1) * SAMPLES // 4):
                data = str(index).encode()
                info = tarfile.TarInfo(f"{index:06d}.cls")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("workers", WORKERS)
def test_webdataset_batches_equal(tar_shards, workers):
    wds = _library("webdataset")

    def make() -> Any:
        dataset = (wds.WebDataset(tar_shards, shardshuffle=False, empty_check=False)
                   .decode().to_tuple("cls").batched(BATCH))
        return wds.WebLoader(dataset, batch_size=None, num_workers=workers)

    plain = _take(make())
    wrapped = _wrap(make())
    assert _take(wrapped) == plain
    assert sorted(x for batch in plain for x in batch[0]) == list(range(SAMPLES))
    _check_report(wrapped, len(plain), SAMPLES)
    wrapped.close()
