"""The shard-assignment dry run (``pipecheck shards``) on real tar shards, checked against what a
real WebDataset pipeline in real DataLoader workers reads."""

from __future__ import annotations

import json
import pathlib
import tarfile

import pytest
import webdataset as wds
import torch.utils.data as torch_data
from torch.utils.data import DataLoader, get_worker_info

from pipecheck.cli import main
from pipecheck.errors import BadInputError
from pipecheck.probes.shards import count_samples, replay_split, shard_stats
from pipecheck.shards import SCHEMA, shards


def _write_shards(folder: pathlib.Path, sizes: list[int]) -> list[str]:
    """One tar per entry of ``sizes``, each with that many samples (a .txt and a .cls file)."""
    urls = []
    for index, samples in enumerate(sizes):
        path = folder / f"part-{index:03d}.tar"
        with wds.TarWriter(str(path)) as writer:
            for j in range(samples):
                writer.write({"__key__": f"s{index}_{j:05d}", "txt": f"sample {j}" * 10,
                              "cls": str(j % 7)})
        urls.append(str(path))
    return urls


def _kinds(section) -> set[str]:
    return {f.kind for f in section.findings}


def test_counts_samples_the_way_webdataset_groups_files(tmp_path):
    (url,) = _write_shards(tmp_path, [37])
    assert count_samples(url) == 37 == sum(1 for _ in wds.WebDataset(url, shardshuffle=False))
    bad = tmp_path / "not-a-tar.tar"
    bad.write_text("hello")
    with pytest.raises(BadInputError, match="cannot read shard"):
        count_samples(str(bad))
    with pytest.raises(BadInputError, match="no such shard"):
        shard_stats([str(tmp_path / "missing.tar")])


def test_uncounted_shards_are_estimated_from_their_size(tmp_path):
    urls = _write_shards(tmp_path, [20, 20, 20, 20])
    stats = shard_stats(urls, max_counted=2)
    assert sum(s.counted for s in stats) == 2
    for stat in stats:
        assert stat.samples == pytest.approx(20, rel=0.1)


def test_fewer_shards_than_workers_leaves_workers_empty(tmp_path):
    urls = _write_shards(tmp_path, [10, 10, 10])
    section = shards(urls, num_workers=4, world_size=1)
    assert "empty-workers" in _kinds(section)
    empty = next(f for f in section.findings if f.kind == "empty-workers")
    assert empty.severity == "critical" and empty.evidence["empty"] == [[0, 3]]
    (rec,) = [r for r in section.recommendations if r.setting == "num_shards"]
    assert (rec.current, rec.proposed) == (3, 4)


def test_shards_not_divisible_by_workers_give_an_epoch_end_tail(tmp_path):
    urls = _write_shards(tmp_path, [10] * 5)
    section = shards(urls, num_workers=2, world_size=1)
    # Worker 0 reads 3 shards, worker 1 two: 1 - 25/30 of worker time idles at epoch end.
    assert section.idle_fraction_at_epoch_end == pytest.approx(1 / 6)
    assert "shard-imbalance" in _kinds(section)
    (rec,) = [r for r in section.recommendations if r.setting == "num_shards"]
    assert rec.proposed == 6
    assert "empty-workers" not in _kinds(shards(urls, num_workers=5, world_size=1))
    assert shards(urls, num_workers=5, world_size=1).findings == []


def test_skewed_shard_sizes_are_flagged(tmp_path):
    urls = _write_shards(tmp_path, [10, 10, 60, 10])
    section = shards(urls, num_workers=2, world_size=1)
    skew = next(f for f in section.findings if f.kind == "shard-size-skew")
    assert skew.evidence["ratio"] == pytest.approx(6.0)
    assert "part-002.tar" in skew.message


def test_two_ranks_from_the_environment_get_unequal_batches(tmp_path, monkeypatch):
    urls = _write_shards(tmp_path, [16] * 5)
    monkeypatch.setenv("WORLD_SIZE", "2")
    section = shards(urls, num_workers=2, batch_size=8)
    assert section.world_size == 2 and section.world_size_source == "environment (WORLD_SIZE)"
    readers = {(a.rank, a.worker): a.shards for a in section.assignments}
    # split_by_node: rank 0 gets shards 0, 2, 4 and rank 1 gets 1, 3; then split_by_worker.
    assert readers == {(0, 0): 2, (0, 1): 1, (1, 0): 1, (1, 1): 1}
    assert [r.batches for r in section.ranks] == [6, 4]
    assert "unequal-rank-batches" in _kinds(section)
    assert any(r.setting == "resampled" and r.proposed is True
               for r in section.recommendations)
    assert "unequal-rank-batches" not in _kinds(shards(urls, num_workers=2, batch_size=8,
                                                       resampled=True))


def test_with_epoch_is_proposed_from_a_worker_that_reads_something(tmp_path):
    urls = _write_shards(tmp_path, [16] * 3)
    # rank 0: shards 0, 2 (one per worker); rank 1: shard 1 only, so its worker 1 is empty
    section = shards(urls, num_workers=2, world_size=2, batch_size=8)
    assert {"empty-workers", "unequal-rank-batches"} <= _kinds(section)
    (resampled,) = [r for r in section.recommendations if r.setting == "resampled"]
    assert ".with_epoch(16)" in resampled.expected.note


def test_small_shuffle_buffer_is_measured_against_samples_per_shard(tmp_path):
    urls = _write_shards(tmp_path, [40, 40])
    section = shards(urls, num_workers=2, world_size=1, shuffle_buffer=10)
    (rec,) = [r for r in section.recommendations if r.setting == "shuffle_buffer"]
    assert (rec.current, rec.proposed) == (10, 40)
    assert "small-shuffle-buffer" not in _kinds(
        shards(urls, num_workers=2, world_size=1, shuffle_buffer=100))


def _record_worker(sample):
    return get_worker_info().id, sample["__url__"]


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_the_replayed_split_is_what_real_workers_read(tmp_path, context):
    urls = _write_shards(tmp_path, [6, 9, 4, 7, 5])
    dataset = wds.WebDataset(urls, shardshuffle=False, nodesplitter=wds.split_by_node,
                             workersplitter=wds.split_by_worker).map(_record_worker)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context=context)
    seen: dict[int, set[str]] = {}
    counts: dict[int, int] = {}
    for worker, url in loader:
        seen.setdefault(worker, set()).add(url)
        counts[worker] = counts.get(worker, 0) + 1
    predicted = replay_split(urls, world_size=1, num_workers=2)
    assert {w: set(u) for (_, w), u in predicted.items()} == seen
    section = shards(urls, num_workers=2, world_size=1)
    assert {a.worker: a.samples for a in section.assignments} == counts


def test_a_users_splitter_is_replayed(tmp_path):
    urls = _write_shards(tmp_path, [5] * 4)
    splitters = tmp_path / "splitters.py"
    splitters.write_text(
        "import webdataset as wds\n"
        "def first_worker_gets_all(src):\n"
        "    _, _, worker, _ = wds.utils.pytorch_worker_info()\n"
        "    yield from (src if worker == 0 else [])\n")
    out = tmp_path / "sharding.json"
    code = main(["shards", *urls, "--workers", "2", "--world-size", "1", "--quiet",
                 "--worker-splitter", f"{splitters}:first_worker_gets_all", "--json", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["schema"] == SCHEMA
    assert data["splitters"]["worker"] == "first_worker_gets_all"
    assert {f["kind"] for f in data["findings"]} == {"empty-workers"}


def test_cli_prints_the_assignment_and_bad_input_is_one_line(tmp_path, capsys):
    urls = _write_shards(tmp_path, [10, 10, 10])
    pattern = str(tmp_path / "part-{000..002}.tar")
    assert main(["shards", pattern, "--workers", "4", "--world-size", "1", "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert "3 shards, 30 samples; world size 1 (given), 4 workers per rank" in out
    assert "critical: empty-workers" in out and "1. num_shards: 3 -> 4" in out
    assert main(["shards", str(tmp_path / "nope-{0..1}.tar"), "--workers", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such shard" in err[0]
    broken = tmp_path / "broken.tar"
    broken.write_bytes(b"\0" * 10)
    with tarfile.open(urls[0]) as archive:
        assert archive.getnames()  # the good shards are real tars
    assert main(["shards", str(broken), "--workers", "1", "--world-size", "1"]) == 2
    assert "cannot read shard" in capsys.readouterr().err


def test_wrap_reports_the_sharding_of_a_webdataset_loader(tmp_path):
    import pipecheck

    urls = _write_shards(tmp_path, [8, 8, 8])
    dataset = wds.WebDataset(urls, shardshuffle=False, workersplitter=wds.split_by_worker,
                             empty_check=False).shuffle(4)
    loader = DataLoader(dataset, batch_size=None, num_workers=2)
    with pipecheck.wrap(loader, host=False) as wrapped:
        count = sum(1 for _ in wrapped)
    assert count == 24
    report = wrapped.report()
    section = report.sharding
    assert section.world_size == 1 and section.num_workers == 2
    assert section.splitters["chain"] == ["single_node_only", "split_by_worker"]
    assert {(a.worker, a.shards) for a in section.assignments} == {(0, 2), (1, 1)}
    assert "shard-imbalance" in _kinds(section) and "small-shuffle-buffer" in _kinds(section)
    settings = {r.setting for r in report.recommendations}
    assert {"num_shards", "shuffle_buffer"} <= settings
    assert report.to_dict()["sharding"]["shards"] == 3
    assert pipecheck.wrap(DataLoader(list(range(4)))).report().sharding is None


class ShardedStream(torch_data.IterableDataset):
    """Duck-types a Hugging Face iterable dataset: ``n_shards`` shards of 4 items, split
    round-robin across DataLoader workers as HF does."""

    def __init__(self, n_shards: int) -> None:
        self.n_shards = n_shards

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for shard in range(worker, self.n_shards, workers):
            yield from (shard * 4 + i for i in range(4))


def test_datasets_with_n_shards_get_the_same_checks():
    import pipecheck

    with pipecheck.wrap(DataLoader(ShardedStream(3), batch_size=None, num_workers=4),
                        host=False) as wrapped:
        assert sum(1 for _ in wrapped) == 12
    section = wrapped.report().sharding
    assert section.shards == 3 and section.samples_total is None
    assert _kinds(section) == {"empty-workers"}
    uneven = pipecheck.wrap(DataLoader(ShardedStream(5), batch_size=None, num_workers=2))
    section = uneven.report().sharding
    assert "shard-imbalance" in _kinds(section)
    assert section.idle_fraction_at_epoch_end == pytest.approx(1 / 6)
    uneven.close()
