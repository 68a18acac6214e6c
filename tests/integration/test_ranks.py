"""Per-rank files, merging and the straggler analysis, without a process group (the torchrun
tests in test_distributed.py cover the real thing end to end)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pipecheck.analysis.ranks import STRAGGLER_MIN_FRACTION, analyze_ranks, rank_summary
from pipecheck.cli import main
from pipecheck.distributed import GatherFailed, gather_summaries, rank_path
from pipecheck.errors import BadInputError
from pipecheck.merge import merge_reports
from pipecheck.records import RankInfo
from pipecheck.render.sections.ranks import rank_table
from pipecheck.report import Report, load
from report_factory import replace_consumer, sample_report


def _rank_report(rank: int, world: int = 2, wait_s: float = 0.5, batches: int = 100) -> Report:
    report = replace_consumer(sample_report(), wait_s=wait_s, batches=batches,
                              compute_s=7.0, stall_fraction=wait_s / (wait_s + 7.0))
    return dataclasses.replace(report, rank=RankInfo(rank=rank, world_size=world,
                                                     hostname=f"node{rank}"))


@pytest.mark.parametrize("given, rank, expected", [
    ("run.json", 1, "run.rank1.json"),
    ("out/run.json", 0, "out/run.rank0.json"),
    ("run", 3, "run.rank3"),
    ("run.rank2.json", 2, "run.rank2.json"),
    ("a.b.json", 1, "a.b.rank1.json"),
])
def test_rank_path(given, rank, expected):
    assert str(rank_path(given, rank)) == expected


def test_rank_path_rejects_negative_ranks():
    with pytest.raises(ValueError, match="rank must be >= 0"):
        rank_path("run.json", -1)


def test_a_rank_report_saves_to_its_rank_file_and_round_trips(tmp_path):
    report = _rank_report(1)
    written = report.save(tmp_path / "run.json")
    assert written == tmp_path / "run.rank1.json"
    assert not (tmp_path / "run.json").exists()
    assert load(written).rank == report.rank
    assert report.save(tmp_path / "exact.json", per_rank=False) == tmp_path / "exact.json"


def test_loading_the_plain_name_of_a_rank_run_points_at_the_rank_files(tmp_path):
    _rank_report(0).save(tmp_path / "run.json")
    _rank_report(1).save(tmp_path / "run.json")
    with pytest.raises(BadInputError, match=r"run.rank0.json, run.rank1.json\): pipecheck "
                       r"report .*run.rank\*.json merges them"):
        load(tmp_path / "run.json")


def test_reports_without_rank_keys_still_load(tmp_path):
    data = sample_report().to_dict()
    del data["rank"], data["ranks"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    report = load(tmp_path / "old.json")
    assert report.rank is None and report.ranks is None
    assert sample_report().save(tmp_path / "plain.json") == tmp_path / "plain.json"


def test_the_rank_with_most_wait_per_step_is_the_straggler():
    summaries = [rank_summary(r.rank, r.consumer, "balanced")
                 for r in (_rank_report(0, 3, 0.2), _rank_report(1, 3, 3.0),
                           _rank_report(2, 3, 0.3))]
    ranks, findings = analyze_ranks(summaries, 3)
    assert ranks.straggler == 1 and ranks.missing == []
    assert ranks.samples_per_s == sum(s.samples_per_s for s in summaries)
    (finding,) = findings
    assert finding.kind == "straggler-rank" and finding.evidence["rank"] == 1
    # excess over the others' median (0.2 and 0.3 s over 100 steps: 2.5 ms a step)
    assert finding.evidence["excess_wait_s"] == pytest.approx(3.0 - 0.25)
    assert finding.evidence["threshold_fraction"] == STRAGGLER_MIN_FRACTION
    assert "Rank 1 is the straggler" in finding.message


def test_even_ranks_give_no_straggler_finding():
    summaries = [rank_summary(r.rank, r.consumer, "balanced")
                 for r in (_rank_report(0, 2, 0.50), _rank_report(1, 2, 0.52))]
    ranks, findings = analyze_ranks(summaries, 2)
    assert ranks.straggler == 1  # the worst rank is still named in the table
    assert findings == []  # 0.2 ms more per step is far under the threshold


def test_missing_ranks_are_listed_with_a_finding():
    ranks, findings = analyze_ranks(
        [rank_summary(_rank_report(0, 4).rank, _rank_report(0, 4).consumer, "balanced")], 4)
    assert ranks.missing == [1, 2, 3] and ranks.straggler is None
    assert [f.kind for f in findings] == ["ranks-missing"]


def test_merge_takes_the_stragglers_report_and_adds_the_finding():
    merged = merge_reports([("a", _rank_report(0, wait_s=0.2)), ("b", _rank_report(1,
                                                                                   wait_s=4.0))])
    assert merged.rank.rank == 1
    assert merged.ranks.straggler == 1
    assert [r.source for r in merged.ranks.ranks] == ["a", "b"]
    assert merged.diagnosis.findings[0].kind == "straggler-rank"


def test_merge_fills_a_missing_file_from_rank_0s_gathered_table():
    rank0 = _rank_report(0, wait_s=0.2)
    gathered = merge_reports([("a", rank0), ("b", _rank_report(1, wait_s=4.0))]).ranks
    merged = merge_reports([("a", dataclasses.replace(rank0, ranks=gathered))])  # b is lost
    assert [r.rank for r in merged.ranks.ranks] == [0, 1]
    assert merged.ranks.ranks[1].source == "b" and merged.ranks.missing == []
    assert merged.ranks.straggler == 1 and merged.rank.rank == 0  # the only full report


@pytest.mark.parametrize("reports, message", [
    ([("a", _rank_report(0)), ("b", sample_report())], "b was not recorded under"),
    ([("a", _rank_report(0)), ("b", _rank_report(0))], "both hold rank 0"),
    ([("a", _rank_report(0)), ("b", _rank_report(1, world=4))], "not the same run"),
])
def test_merge_refuses_files_of_different_runs(reports, message):
    with pytest.raises(BadInputError, match=message):
        merge_reports(reports)


def test_cli_merges_rank_files_and_renders_the_ranks_table(tmp_path, capsys):
    paths = [str(_rank_report(r, wait_s=w).save(tmp_path / "run.json"))
             for r, w in ((0, 0.2), (1, 4.0))]
    assert main(["report", *paths, "--width", "120", "--json", str(tmp_path / "m.json")]) == 0
    out = capsys.readouterr().out
    assert "Ranks" in out and "◀ straggler" in out and "rank 1 of 2" in out
    assert "Rank 1 is the straggler" in out
    assert load(tmp_path / "m.json").ranks.straggler == 1
    assert main(["report", *paths, "--markdown"]) == 0
    markdown = capsys.readouterr().out
    assert "### Ranks" in markdown and "| 1 | node1 |" in markdown
    assert "◀ straggler |" in markdown and "samples/s/s" not in markdown


def test_cli_refuses_mixing_rank_and_plain_files(tmp_path, capsys):
    a = _rank_report(0).save(tmp_path / "run.json")
    b = sample_report().save(tmp_path / "plain.json")
    assert main(["report", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be merged" in err


def test_gather_without_a_process_group_fails_cleanly():
    summary = rank_summary(_rank_report(0).rank, _rank_report(0).consumer, "balanced")
    with pytest.raises(GatherFailed, match="no torch.distributed process group"):
        gather_summaries(summary, 1.0)


# -- which shards each rank reads ------------------------------------------------------------------


def _shards(folder, count: int) -> list[str]:
    wds = pytest.importorskip("webdataset")
    urls = []
    for index in range(count):
        path = folder / f"part-{index:03d}.tar"
        with wds.TarWriter(str(path)) as writer:
            writer.write({"__key__": f"s{index}", "txt": "sample"})
        urls.append(str(path))
    return urls


def test_rank_shards_replays_the_pipelines_own_splitters(tmp_path):
    import webdataset as wds
    from torch.utils.data import DataLoader

    from pipecheck.probes.rank_shards import rank_shards

    urls = _shards(tmp_path, 8)
    dataset = wds.WebDataset(urls, shardshuffle=False, nodesplitter=wds.split_by_node)
    # webdataset's split_by_node takes every world_size-th shard, split_by_worker every
    # num_workers-th of those
    assert rank_shards(DataLoader(dataset, num_workers=2), 1, 2) == [urls[1::2][0::2],
                                                                    urls[1::2][1::2]]
    pipeline = wds.DataPipeline(wds.SimpleShardList(urls), wds.split_by_node,
                                wds.tarfile_to_samples())
    assert rank_shards(pipeline, 0, 4) == [urls[0::4]]
    assert rank_shards(wds.WebLoader(dataset, num_workers=0), 1, 2) == [urls[1::2]]
    # not a fixed shard list: nothing to say, nothing raised
    assert rank_shards(DataLoader(list(range(4))), 0, 2) is None
    assert rank_shards(wds.WebDataset(urls, resampled=True, shardshuffle=False), 0, 2) is None
    single = wds.WebDataset(urls, shardshuffle=False)  # single_node_only refuses 2 ranks
    assert rank_shards(single, 0, 2) is None


def test_a_wrapped_webdataset_records_its_ranks_shards(tmp_path, monkeypatch):
    import webdataset as wds
    from torch.utils.data import DataLoader

    import pipecheck.measurement

    urls = _shards(tmp_path, 6)
    monkeypatch.setattr(pipecheck.measurement, "current_rank",
                        lambda: RankInfo(rank=1, world_size=3))
    dataset = wds.WebDataset(urls, shardshuffle=False, nodesplitter=wds.split_by_node)
    wrapped = pipecheck.wrap(DataLoader(dataset, batch_size=None), host=False)
    report = wrapped.report(gather=False)
    wrapped.close()
    assert report.rank.shards == [urls[1::3]]
    merged = merge_reports([("a", report), ("b", dataclasses.replace(
        report, rank=RankInfo(rank=0, world_size=3, shards=[urls[0::3] + urls[2::3]])))])
    assert [r.shards for r in merged.ranks.ranks] == [4, 2]
    headers, _, rows = rank_table(merged.ranks)
    assert "shards" in headers and rows[0][headers.index("shards")] == "4 shards"
