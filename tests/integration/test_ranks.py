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
from pipecheck.merge import merge_files, merge_reports, own_summary
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
    assert "Rank 0 (the straggler, rank 1, has no file here)" in merged.render(width=100)


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


# -- many ranks: the streaming merge, the job's shape, small rank files ---------------------------


def _job_report(rank: int, world: int, wait_s: float, per_node: int = 4,
                status: str = "complete") -> Report:
    report = replace_consumer(sample_report(), wait_s=wait_s, batches=100, compute_s=7.0,
                              stall_fraction=wait_s / (wait_s + 7.0), status=status)
    return dataclasses.replace(report, rank=RankInfo(
        rank=rank, world_size=world, local_rank=rank % per_node,
        hostname=f"node{rank // per_node}"))


def _save_job(tmp_path, waits: dict[int, float], world: int, **options) -> list[str]:
    return [str(_job_report(r, world, w, **options).save(tmp_path / "run.json"))
            for r, w in sorted(waits.items())]


def test_the_streaming_merge_gives_what_merging_loaded_reports_gives(tmp_path):
    paths = _save_job(tmp_path, {r: 0.5 + 0.01 * r for r in range(8)} | {6: 3.0}, 8)
    streamed = merge_files(paths)
    loaded = merge_reports([(p, load(p)) for p in paths])
    assert streamed.to_dict() == loaded.to_dict()
    assert streamed.rank.rank == 6 and streamed.ranks.straggler == 6


@pytest.mark.parametrize("waits, scope", [
    ({**{r: 0.5 for r in range(16)}, 9: 4.0}, "rank"),  # one rank of node 2
    ({**{r: 0.5 for r in range(16)}, **{r: 3.5 for r in range(8, 12)}}, "node"),  # node 2
    ({r: 2.0 + 0.01 * r for r in range(16)}, "job"),  # 22% stall everywhere, no standout
    ({r: 0.05 + 0.001 * r for r in range(16)}, "none"),  # under 1% stall
])
def test_the_job_shape_says_whether_the_straggler_is_a_rank_a_node_or_the_job(waits, scope):
    summaries = [own_summary(_job_report(r, 16, w)) for r, w in waits.items()]
    ranks, findings = analyze_ranks(summaries, 16)
    shape = ranks.shape
    assert shape.scope == scope, shape.scope_reason
    assert [n.node for n in shape.nodes] == ["node0", "node1", "node2", "node3"]
    assert shape.wait_per_batch_max_s == pytest.approx(max(waits.values()) / 100)
    assert shape.wait_per_batch_p50_s <= shape.wait_per_batch_p90_s <= shape.wait_per_batch_max_s
    if scope == "node":
        assert shape.slowest_nodes[0] == "node2" and shape.node_spread_s > 0.02
        (finding,) = [f for f in findings if f.kind == "straggler-rank"]
        assert "Most of its node's ranks are slow too" in finding.message
        assert finding.evidence["node"] == "node2"
    if scope == "rank":
        assert shape.slowest_ranks[0] == 9


def test_missing_and_failed_ranks_are_counted_in_the_summary(tmp_path, capsys):
    paths = _save_job(tmp_path, {r: 0.5 for r in (0, 1, 2, 4, 5)}, 8)
    paths += _save_job(tmp_path, {6: 0.6}, 8, status="error")
    merged = merge_files(paths)
    assert merged.ranks.missing == [3, 7] and merged.ranks.shape.failed == [6]
    assert main(["report", *paths, "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert "2 rank(s) missing (no data): 3, 7" in out and "1 rank(s) failed" in out


@pytest.mark.parametrize("damage, message", [
    (lambda text: text[: len(text) // 2], "is not JSON"),  # truncated mid-write
    (lambda text: "garbage", "is not JSON"),
    (lambda text: text.replace('"world_size": 8', '"world_size": 9'), "not the same run"),
    (lambda text: text.replace('"wait_s": 0.5', '"wait_s": -1'), "report.consumer.wait_s"),
])
def test_a_bad_rank_file_stops_the_merge_with_one_line_naming_it(tmp_path, capsys, damage,
                                                                 message):
    paths = _save_job(tmp_path, {r: 0.5 for r in range(8)}, 8)
    bad = tmp_path / "run.rank5.json"
    bad.write_text(damage(bad.read_text()))
    for command in (["report", *paths], ["check", *paths, "--max-stall", "0.5"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bad) in err and message in err, err


def test_rank_files_beyond_rank_0_hold_a_sampled_timeline(tmp_path):
    from pipecheck.records import BatchTiming
    from pipecheck.report import RANK_FILE_TIMELINE_ROWS

    base = _job_report(0, 2, 0.5)
    batches = [BatchTiming(index=i, epoch=0, start_at_s=0.01 * i, wait_s=0.001, compute_s=0.002,
                           samples=4) for i in range(5_000)]
    long = dataclasses.replace(base, timeline=dataclasses.replace(base.timeline,
                                                                   batches=batches))
    first = load(long.save(tmp_path / "run.json"))
    other = load(dataclasses.replace(long, rank=RankInfo(rank=1, world_size=2))
                 .save(tmp_path / "run.json"))
    assert len(first.timeline.batches) == 5_000
    kept = other.timeline.batches
    assert len(kept) == RANK_FILE_TIMELINE_ROWS and kept[0].index == 0 and kept[-1].index == 4_999
    assert other.consumer == long.consumer  # the figures come from the whole run
    assert main(["report", str(tmp_path / "run.rank1.json"), "--quiet"]) == 0


def test_verbose_html_and_json_hold_every_rank(tmp_path, capsys):
    paths = _save_job(tmp_path, {r: 0.5 + 0.001 * r for r in range(80)} | {33: 4.0}, 80)
    assert main(["report", *paths, "--width", "100", "--html", str(tmp_path / "r.html"),
                 "--json", str(tmp_path / "m.json")]) == 0
    short = capsys.readouterr().out
    assert short.count("\n") <= 60 and "node79" not in short and "--verbose" in short
    assert "straggler: rank 33" in short and "slowness is one rank" in short
    assert main(["report", *paths, "--width", "100", "--verbose"]) == 0
    full = capsys.readouterr().out
    assert "node19" in full and "Findings" in full and full.count("\n") > 80 + 20
    page = (tmp_path / "r.html").read_text()
    assert "<details><summary>Every rank (80)</summary>" in page and "<script" not in page
    assert page.count("<tr>") >= 80
    assert len(load(tmp_path / "m.json").ranks.ranks) == 80


def test_the_merge_reads_each_file_once_and_only_the_stragglers_in_full(tmp_path, monkeypatch,
                                                                        capsys):
    import pipecheck.merge

    paths = _save_job(tmp_path, {r: 0.5 + 0.01 * r for r in range(8)} | {2: 3.0}, 8)
    loaded, parsed = [], []
    real_load, real_read = pipecheck.merge.load, pipecheck.merge.read_json
    monkeypatch.setattr(pipecheck.merge, "load", lambda p: loaded.append(p) or real_load(p))
    monkeypatch.setattr(pipecheck.merge, "read_json",
                        lambda p: parsed.append(p) or real_read(p))
    assert main(["check", *paths, "--max-stall", "0.99"]) == 0
    assert "on rank 2 (the straggler)" in capsys.readouterr().out
    assert loaded == [str(tmp_path / "run.rank2.json")]
    assert sorted(parsed[1:]) == sorted(paths)  # the first file is also peeked at for its rank


def _tuned(report: Report, workers: int) -> Report:
    from pipecheck.records import TuneSection
    from pipecheck.loader_settings import LoaderSettings

    chosen = LoaderSettings(num_workers=workers, prefetch_factor=2 if workers else None)
    return dataclasses.replace(report, tune=TuneSection(
        status="settled", start=LoaderSettings(num_workers=0), chosen=chosen))


def test_ranks_that_tuned_alike_agree_and_say_so(tmp_path, capsys):
    reports = [_tuned(_rank_report(r, world=3, wait_s=0.5 + 0.1 * r), 2) for r in range(3)]
    merged = merge_reports([(f"r{r}.json", rep) for r, rep in enumerate(reports)])
    assert [(g.settings, g.ranks, g.first_ranks) for g in merged.ranks.tuned] == [
        ("num_workers=2 prefetch_factor=2", 3, [0, 1, 2])]
    assert "ranks-tuned-differently" not in [f.kind for f in merged.diagnosis.findings]
    for rep in reports:
        rep.save(tmp_path / "run.json")
    files = sorted(str(p) for p in tmp_path.glob("run.rank*.json"))
    assert main(["report", *files, "--width", "120"]) == 0
    assert ("online tuning: the 3 rank(s) that tuned all kept num_workers=2 prefetch_factor=2"
            in capsys.readouterr().out)


def test_ranks_that_tuned_differently_get_a_finding_naming_each_setting(tmp_path, capsys):
    # ranks 0-2 kept 2 workers, rank 3 (the straggler: most wait per step) kept 4, rank 4
    # did not tune
    reports = [_tuned(_rank_report(r, world=5, wait_s=0.5), 2) for r in range(3)]
    reports.append(_tuned(_rank_report(3, world=5, wait_s=3.0), 4))
    reports.append(_rank_report(4, world=5, wait_s=0.5))
    for rep in reports:
        rep.save(tmp_path / "run.json")
    files = sorted(str(p) for p in tmp_path.glob("run.rank*.json"))
    merged = merge_files(files)
    assert merged == merge_reports([(f, load(f)) for f in files])  # streaming == loaded
    assert [(g.settings, g.ranks) for g in merged.ranks.tuned] == [
        ("num_workers=2 prefetch_factor=2", 3), ("num_workers=4 prefetch_factor=2", 1)]
    assert [s.tuned for s in merged.ranks.ranks][3:] == ["num_workers=4 prefetch_factor=2", None]
    (finding,) = [f for f in merged.diagnosis.findings if f.kind == "ranks-tuned-differently"]
    assert finding.severity == "warning"
    assert "num_workers=2 prefetch_factor=2 on 3 rank(s) (0, 1, 2)" in finding.message
    assert "num_workers=4 prefetch_factor=2 on 1 rank(s) (3)" in finding.message
    assert finding.evidence["pin"] == "num_workers=4 prefetch_factor=2"  # the straggler's
    assert "the straggler's (rank 3)" in finding.message
    assert main(["report", *files, "--width", "120"]) == 0
    assert "online tuning: ranks disagree" in capsys.readouterr().out
