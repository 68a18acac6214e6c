"""pipecheck.wrap on webdataset pipelines over real tar shards of real JPEGs."""

from __future__ import annotations

import pytest
import webdataset as wds

import pipecheck
from pipecheck.demo_data import ensure_shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return ensure_shards(tmp_path_factory.mktemp("shards"), images=96, shards=4, size=64)


def decoded(urls):
    # no shard shuffle: both sides must see the same order
    return (wds.WebDataset(urls, shardshuffle=False, empty_check=False)
            .decode("pil").to_tuple("jpg", "cls").map_tuple(lambda im: im.size, int))


@pytest.mark.parametrize("workers", [0, 2])
def test_webloader_yields_identical_samples_and_times_workers(shards, workers):
    def make():
        return wds.WebLoader(decoded(shards), batch_size=8, num_workers=workers)

    def labels(loader):
        return sorted(int(c) for _, cls in loader for c in cls)

    plain = labels(make())
    wrapped = pipecheck.wrap(make())
    assert labels(wrapped) == plain and len(plain) == 96
    report = wrapped.report()
    assert report.consumer.samples == 96
    producers = report.producer.workers
    assert sum(w.batches for w in producers) == report.consumer.batches
    assert {w.id for w in producers} == ({-1} if workers == 0 else {0, 1})
    assert all(w.busy_s > 0 for w in producers)  # JPEG decode time landed in the probe
    wrapped.close()


def test_main_process_stages_after_the_dataloader_still_work(shards):
    loader = wds.WebLoader(decoded(shards), batch_size=None, num_workers=2).batched(12)
    wrapped = pipecheck.wrap(loader)
    batches = list(wrapped)
    assert sum(len(cls) for _, cls in batches) == 96
    assert wrapped.report().consumer.samples == 96
    wrapped.close()
