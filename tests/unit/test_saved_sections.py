"""Reports saved before the ``sharding``, ``attach`` and ``stress`` sections were typed still load,
and write back the same JSON text (keys added to the contract since come back as null); a
malformed value in those sections names its key path.

The files under ``tests/support/old_reports/`` were written by pipecheck before the sections
became dataclasses (``stress_cli.json`` by ``pipecheck stress examples/stress_target.py:make_loader
--budget 40 --json``, with its timeline emptied and its trial list cut to 4 to keep it small;
the others from the then ``analyze_sharding`` / ``analyze_attach``)."""

from __future__ import annotations

import json

import pytest

from paths import SUPPORT
from pipecheck.errors import ReportFormatError
from pipecheck.records import Finding, Recommendation, ShardingSection, ShardRank, ShardReader
from pipecheck.report import Report, load
from pipecheck.report_sections import (
    AttachSection,
    AttachWorker,
    EpochStart,
    ProfileOutcome,
    SearchSummary,
    StressChoice,
    StressHeadline,
    StressSection,
    SweepTrial,
)

OLD = sorted((SUPPORT / "old_reports").glob("*.json"))


def test_there_is_an_old_report_of_each_kind_with_each_section():
    names = {path.stem for path in OLD}
    assert {"wrap_sharding", "wrap_sharding_remote", "attach", "attach_failed",
            "stress_cli"} <= names


def without_added(new, old):
    """``new`` less the keys ``old`` lacks, each of which must hold null: fields added to the
    contract since ``old`` was written (they load as their defaults and write back as null)."""
    if isinstance(new, dict) and isinstance(old, dict):
        added = [key for key in new if key not in old]
        assert all(new[key] is None for key in added), {k: new[k] for k in added}
        return {key: without_added(value, old[key]) for key, value in new.items() if key in old}
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [without_added(n, o) for n, o in zip(new, old)]
    return new


def round_trip(data):
    """``data`` loaded and written back, less the keys added since (null)."""
    return without_added(Report.from_dict(data).to_dict(), data)


@pytest.mark.parametrize("path", OLD, ids=[p.stem for p in OLD])
def test_an_old_report_round_trips_to_the_same_json_text(path):
    text = path.read_text(encoding="utf-8")
    old = json.loads(text)
    report = Report.from_dict(old)
    assert without_added(report.to_dict(), old) == old
    # Same keys, same order, same number spelling (keys added since: null, left out here).
    assert json.dumps(without_added(report.to_dict(), old), indent=2,
                      ensure_ascii=False) + "\n" == text
    assert without_added(load(path).to_dict(), old) == old


def test_a_loaded_sharding_section_is_typed_throughout():
    report = load(SUPPORT / "old_reports" / "wrap_sharding.json")
    section = report.sharding
    assert isinstance(section, ShardingSection)
    assert all(isinstance(a, ShardReader) for a in section.assignments)
    assert all(isinstance(r, ShardRank) for r in section.ranks)
    assert [r.batches for r in section.ranks] == [76, 26]
    assert all(isinstance(f, Finding) for f in section.findings)
    assert all(isinstance(r, Recommendation) for r in section.recommendations)
    assert [r.setting for r in section.recommendations] == ["num_shards", "resampled",
                                                            "shuffle_buffer"]
    assert section.recommendations[0].expected.note.startswith("each of 4 readers")


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("findings", [1], "report.sharding.findings[0] must be an object"),
    ("ranks", 3, "report.sharding.ranks must be a list"),
    ("assignments", [{"rank": 0, "worker": 0, "shards": 1, "samples": "many"}],
     "report.sharding.assignments[0].samples must be a number"),
    ("samples_total", -3.0, "report.sharding.samples_total must not be negative"),
    ("recommendations", [{"setting": "num_shards"}],
     "missing key report.sharding.recommendations[0].current"),
    ("world_size", None, "report.sharding.world_size must be an integer, got None"),
])
def test_a_malformed_sharding_value_fails_the_load_naming_its_path(key, value, fragment):
    data = json.loads((SUPPORT / "old_reports" / "wrap_sharding.json").read_text())
    data["sharding"][key] = value
    with pytest.raises(ReportFormatError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        Report.from_dict(data)


def test_a_loaded_attach_section_is_typed_throughout():
    section = load(SUPPORT / "old_reports" / "attach.json").attach
    assert isinstance(section, AttachSection)
    assert all(isinstance(w, AttachWorker) for w in section.workers)
    assert [w.pid for w in section.workers] == [11, 12]
    assert section.workers[0].bound == "cpu-bound" and section.workers[1].bound is None
    assert section.stall_interval is not None and len(section.stall_interval) == 2
    failed = load(SUPPORT / "old_reports" / "attach_failed.json").attach
    assert failed is not None and failed.num_workers is None and failed.workers == []


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("stall_interval", "wide", "report.attach.stall_interval must be a list"),
    ("workers", [{"pid": 11}], "missing key report.attach.workers[0].samples"),
    ("dataloader_seen", "yes", "report.attach.dataloader_seen must be true or false"),
    ("stall_fraction", 1.2, "report.attach.stall_fraction must be a 0-1 fraction"),
    ("unknown", [3], "report.attach.unknown[0] must be a string"),
])
def test_a_malformed_attach_value_fails_the_load_naming_its_path(key, value, fragment):
    data = json.loads((SUPPORT / "old_reports" / "attach.json").read_text())
    data["attach"][key] = value
    with pytest.raises(ReportFormatError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        Report.from_dict(data)


def test_a_shrinking_main_process_still_loads():
    data = json.loads((SUPPORT / "old_reports" / "attach.json").read_text())
    data["attach"]["main_memory_growth_bytes_per_s"] = -2048.0
    data["attach"]["workers"][0]["memory_growth_bytes_per_s"] = -1024.0
    assert round_trip(data) == data


def _stress_data() -> dict:
    return json.loads((SUPPORT / "old_reports" / "stress_cli.json").read_text())


def test_a_loaded_stress_section_is_typed_throughout():
    section = load(SUPPORT / "old_reports" / "stress_cli.json").stress
    assert isinstance(section, StressSection)
    assert all(isinstance(t, SweepTrial) for t in section.trials)
    assert [t.measured for t in section.trials] == [True, True, False, False]
    assert section.trials[2].run_samples_per_s is None and section.trials[0].epochs == 3
    assert isinstance(section.best, SweepTrial) and section.best.epochs is None
    assert isinstance(section.recommended, StressChoice)
    assert section.recommended.tolerance_fraction == 0.03
    assert isinstance(section.search, SearchSummary) and section.search.measured == 2
    assert section.epoch_start == EpochStart(status="skipped",
                                             reason="the best configuration has no workers")
    assert isinstance(section.profile, ProfileOutcome) and section.profile.status == "ok"
    assert isinstance(section.headline, StressHeadline)


@pytest.mark.parametrize("entry", [
    {"status": "skipped", "reason": "budget: about 9.0 s needed, 2.0 s left"},
    {"status": "failed", "reason": "num_workers=2: timed out", "trials": []},
    {"status": "ok", "reason": None, "config": {"num_workers": 2},
     "restart_s": {"persistent": 0.01, "not_persistent": 0.5},
     "short_epoch_s": {"persistent": 0.2, "not_persistent": 0.9}, "saving_s": -0.01,
     "epoch_s": None, "fraction": None, "matters": None, "method": "cut", "trials": []},
])
def test_each_shape_of_epoch_start_writes_back_its_own_keys(entry):
    data = _stress_data()
    data["stress"]["epoch_start"] = entry
    assert json.dumps(round_trip(data), indent=2, ensure_ascii=False) == json.dumps(
        data, indent=2, ensure_ascii=False)


@pytest.mark.parametrize("profile", [
    {"status": "off", "reason": "stacks=False"},
    {"status": "failed", "config": {"num_workers": 1}, "reason": "no stacks"},
    {"status": "ok", "config": {"num_workers": 1}, "samples_per_s": None, "reason": None},
])
def test_each_shape_of_profile_writes_back_its_own_keys(profile):
    data = _stress_data()
    data["stress"]["profile"] = profile
    assert json.dumps(round_trip(data), indent=2, ensure_ascii=False) == json.dumps(
        data, indent=2, ensure_ascii=False)


def test_a_sweep_section_without_the_later_entries_leaves_them_out():
    data = _stress_data()
    for key in ("epoch_start", "profile", "headline"):
        del data["stress"][key]
    data["stress"]["search"] = None
    report = Report.from_dict(data)
    assert report.stress is not None and report.stress.headline is None
    assert round_trip(data) == data


@pytest.mark.parametrize(("path", "value", "fragment"), [
    (("trials", 0, "samples_per_s"), "fast", "report.stress.trials[0].samples_per_s must be"),
    (("trials", 1, "stall_fraction"), 1.5, "report.stress.trials[1].stall_fraction must be a "
                                           "0-1 fraction"),
    (("recommended", "expected"), None, "report.stress.recommended.expected must be an object"),
    (("skipped", 0), {"config": 3, "reason": "budget spent"},
     "report.stress.skipped[0].config must be an object"),
    (("skipped", 0), {"config": {"num_workers": 1}}, "missing key report.stress.skipped[0].reason"),
    (("search", "stop_reasons"), "one", "report.stress.search.stop_reasons must be a list"),
    (("epoch_start", "status"), 3, "report.stress.epoch_start.status must be a string"),
    (("headline", "run_samples_per_s"), -1.0, "report.stress.headline.run_samples_per_s must "
                                              "not be negative"),
])
def test_a_malformed_stress_value_fails_the_load_naming_its_path(path, value, fragment):
    data = _stress_data()
    where = data["stress"]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    with pytest.raises(ReportFormatError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        Report.from_dict(data)


def test_a_report_listing_bare_skipped_configurations_still_loads():
    # Reports written before skip reasons existed listed the bare configuration (budget spent).
    data = _stress_data()
    data["stress"]["skipped"] = [{"num_workers": 1, "prefetch_factor": 2}]
    report = Report.from_dict(data)
    assert report.stress is not None
    assert report.stress.skipped[0].config == {"num_workers": 1, "prefetch_factor": 2}
    assert "skipped (budget spent): num_workers=1 prefetch_factor=2" in " ".join(
        report.render(width=200, verbose=True).split())
