"""Per-stage timing of webdataset pipelines and user-marked stages, in real DataLoader workers."""

from __future__ import annotations

import os
import time

import pytest
import webdataset as wds
from torch.utils.data import DataLoader

import pipecheck
from pipecheck.analysis.stages import stage_table, top_stage
from pipecheck.probes import stages as stage_probe
from pipecheck import _torch_compat
from pipecheck.probes.stages import read_stage_files, stage_name, totals
from pipecheck.probes.workers import InstrumentedCollate

SLOW_S = 0.015
"""Sleep per sample in the slow stage, in seconds: long enough that the stage stays over half of
the workers' stage time when the CPU-bound stages (tar parsing, decoding) run three times slower
on a machine with two busy processes beside the test (at 4 ms it fell under half there)."""


def slow_augment(sample):
    """The deliberately slow stage: SLOW_S seconds of sleep per sample."""
    time.sleep(SLOW_S)
    return sample


def drop_odd(sample):
    return int(sample["cls"]) % 2 == 0


def user_marked(sample):
    with pipecheck.stage("user_resize"):
        time.sleep(0.001)
        with pipecheck.stage("user_inner"):
            time.sleep(0.006)  # 6x the outer's own 1 ms: a wide margin on a loaded machine
    return sample


def _shards(tmp_path, count=4, samples=20):
    urls = []
    for index in range(count):
        path = tmp_path / f"s-{index}.tar"
        with wds.TarWriter(str(path)) as writer:
            for j in range(samples):
                writer.write({"__key__": f"k{index}_{j:04d}", "txt": "x" * 50, "cls": str(j)})
        urls.append(str(path))
    return urls


def _pipeline(urls):
    return (wds.WebDataset(urls, shardshuffle=False).select(drop_odd).decode()
            .map(slow_augment).to_tuple("txt", "cls"))


def _stage_timed(loader, folder):
    """``loader`` registered as wrap() registers it, carrying the stage folder to its workers
    in the collate function (the fetcher factory there times the worker's dataset)."""
    _torch_compat.register(loader, ("collate_fn",),
                           lambda name, value: InstrumentedCollate(value, None, None, folder),
                           always=True)
    return loader


def test_stage_names_are_the_ones_users_wrote(tmp_path):
    names = [stage_name(s) for s in _pipeline(_shards(tmp_path, 1)).pipeline]
    assert names[0] == "SimpleShardList"
    assert {"split_by_worker", "tar_file_expander", "select", "decode", "slow_augment",
            "to_tuple"} <= set(names)


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_the_slow_stage_comes_first_with_its_true_time(tmp_path, context):
    urls = _shards(tmp_path)
    folder = tmp_path / "stages"
    folder.mkdir()
    pipeline = _pipeline(urls)
    stages_before = list(pipeline.pipeline)
    loader = _stage_timed(DataLoader(pipeline, batch_size=None, num_workers=2,
                                     multiprocessing_context=context), str(folder))
    got = list(loader)
    expected = list(DataLoader(_pipeline(urls), batch_size=None, num_workers=2))
    assert sorted(got) == sorted(expected) and len(got) == 40  # identical samples
    # The user's pipeline object itself ran in the workers, unchanged and uncopied.
    assert loader.dataset is pipeline and pipeline.pipeline == stages_before
    rows = stage_table(read_stage_files(str(folder)))
    top = top_stage(rows)
    assert top.name == "slow_augment"
    true_s = len(got) * SLOW_S
    assert 0.8 * true_s <= top.exclusive_s <= 3 * true_s
    assert set(top.workers) == {"0", "1"}
    assert top.samples_in == top.samples_out == 40
    select = next(r for r in rows if r.name == "select")
    assert (select.samples_in, select.samples_out) == (80, 40)  # the filter shows
    assert sum(r.fraction for r in rows if r.where == "workers") == pytest.approx(1.0)
    opener = next(r for r in rows if r.name == "StreamingOpen")
    assert opener.bytes_read == sum(os.path.getsize(u) for u in urls)  # the source's bytes


def test_user_stages_are_exclusive_and_reach_the_report_from_workers(tmp_path, monkeypatch):
    urls = _shards(tmp_path, count=2, samples=10)
    folder = tmp_path / "stages"
    folder.mkdir()
    monkeypatch.setenv(stage_probe.STAGE_DIR_ENV, str(folder))
    dataset = wds.WebDataset(urls, shardshuffle=False).map(user_marked)
    list(DataLoader(dataset, batch_size=None, num_workers=2))
    rows = {r.name: r for r in stage_table(read_stage_files(str(folder)))}
    assert rows["user_resize"].samples_out == rows["user_inner"].samples_out == 20
    # The inner 6 ms sleep is not counted in the outer stage's 1 ms (were it counted, the
    # outer stage would hold more than the inner one, however slow sleeps get under load).
    assert rows["user_resize"].exclusive_s >= 0.8 * 20 * 0.001
    assert rows["user_inner"].exclusive_s >= 0.8 * 20 * 0.006
    assert rows["user_resize"].exclusive_s < rows["user_inner"].exclusive_s
    assert rows["user_inner"].samples_in is None


def test_user_stage_in_the_main_process_and_as_a_decorator():
    @pipecheck.stage("main_work")
    def work():
        time.sleep(0.002)

    for _ in range(5):
        work()
    here = totals(os.environ.get(stage_probe.STAGE_DIR_ENV))  # where stage() puts them
    rows = {r.name: r for r in stage_table([here.snapshot()])}
    assert rows["main_work"].where == "main" and rows["main_work"].samples_out >= 5
    with pytest.raises(TypeError, match="non-empty name"):
        pipecheck.stage("")


def test_wrap_reports_worker_and_main_process_stages(tmp_path):
    urls = _shards(tmp_path, count=2, samples=20)
    loader = wds.WebLoader(_pipeline(urls).batched(4), batch_size=None, num_workers=2)
    loader = loader.unbatched().batched(5)  # main-process stages
    with pipecheck.wrap(loader, host=False) as wrapped:
        batches = list(wrapped)
    assert sum(len(b[0]) for b in batches) == 20  # odd samples dropped by the select stage
    report = wrapped.report()
    rows = report.producer.stages
    worker_top = next(r for r in rows if r.where == "workers")
    assert worker_top.name == "slow_augment"
    assert worker_top.exclusive_s >= 0.8 * 20 * SLOW_S
    main_names = {r.name for r in rows if r.where == "main"}
    assert {"DataLoader", "unbatched", "batched"} <= main_names
    data = report.to_dict()
    assert data["producer"]["stages"][0]["name"] in {"slow_augment", "DataLoader"}
    kinds = {f.kind for f in report.diagnosis.findings}
    assert "dominant-stage" in kinds
    folder = wrapped._measurement._stages.folder
    assert os.environ.get(stage_probe.STAGE_DIR_ENV) != folder  # restored
    assert not os.path.exists(folder)


def test_a_stage_block_may_start_a_wrapped_run_inside_it():
    # wrap() points STAGE_DIR_ENV at its own folder while the block is open: leaving the block
    # must close the stage it entered, not fail on the run's (empty) stage stack.
    with pipecheck.stage("epoch_around_wrap"):
        wrapped = pipecheck.wrap(DataLoader(list(range(8)), batch_size=2), host=False)
        assert len(list(wrapped)) == 4
        time.sleep(0.002)
    wrapped.close()
    outer = totals(os.environ.get(stage_probe.STAGE_DIR_ENV))
    assert outer.items["user:epoch_around_wrap"] == 1
    assert outer.exclusive_ns["user:epoch_around_wrap"] >= 0.002 * 1e9 * 0.8
