"""A report compared with an earlier one (pipecheck.analysis.compare) and how every format says
it: the verdict follows samples/s, never the stall; the runs' own noise decides whether a change
is measurable; different machines or data get a note."""

from __future__ import annotations

import dataclasses
import json

import pytest
from report_factory import sample_report

from pipecheck.analysis.compare import compare_reports, other_loader, run_noise_fraction
from pipecheck.records import BatchTiming, Judgement, Timeline
from pipecheck.render.markdown import MarkdownRenderer
from pipecheck.render.phrases import comparison_line
from pipecheck.render.sections import build_comparison_document
from pipecheck.render.terminal import TerminalRenderer, render_terminal
from pipecheck.report import Report


def _timeline(step_s: float, wait_s: float, jitter: float, batches: int = 200) -> Timeline:
    """Two epochs of ``batches`` batches whose loop time varies by +-``jitter`` (relative)
    in a fixed pattern (deterministic: no random draws)."""
    pattern = (1.0, -1.0, 0.5, -0.5, 0.0)
    rows = [BatchTiming(index=i, epoch=i // (batches // 2), start_at_s=i * (step_s + wait_s),
                        wait_s=wait_s, compute_s=step_s * (1.0 + jitter * pattern[i % 5]),
                        samples=32)
            for i in range(batches)]
    return Timeline(batches=rows, epochs=[], worker_batches=[], host=[])


def _run(samples_per_s: float, stall: float, step_s: float, *, num_workers: int = 0,
         jitter: float = 0.02, batches: int = 200, **loader_changes) -> Report:
    """A wrap report of ``samples_per_s`` (32 samples a batch), a judged stall of ``stall``
    and a steady step of ``step_s`` seconds."""
    base = sample_report()
    wait_s = step_s * stall / (1.0 - stall)
    judgement = Judgement(stall_fraction=stall, steady=True, goodput_fraction=1.0 - stall,
                          wait_per_batch_s=wait_s, min_wait_per_batch_s=1e-5)
    consumer = dataclasses.replace(
        base.consumer, samples_per_s=samples_per_s, batches_per_s=samples_per_s / 32,
        steady_stall_fraction=stall, demand_batches_per_s=1.0 / step_s)
    loader = dataclasses.replace(base.loader, num_workers=num_workers, **loader_changes)
    return dataclasses.replace(
        base, consumer=consumer, loader=loader,
        diagnosis=dataclasses.replace(base.diagnosis, judgement=judgement),
        timeline=_timeline(step_s, wait_s, jitter, batches))


def test_stall_fell_because_the_step_slowed_and_throughput_fell_is_said_to_fall():
    # The case: 0 -> 2 workers took cores from a CPU step; the stall fell 12% -> 4%
    # only because the step slowed (demand 13.8 -> 9.76 batches/s), while samples/s fell.
    old = _run(325.0, 0.12, 1 / 13.8, num_workers=0)
    new = _run(259.0, 0.04, 1 / 9.76, num_workers=2)
    found = compare_reports(old, new, "old.json")
    assert found.status == "compared"
    assert found.verdict == "fell"
    assert found.beyond_noise is True
    assert found.samples_per_s_ratio == pytest.approx(259 / 325)
    assert [(c.name, c.old, c.new) for c in found.settings] == [("num_workers", 0, 2)]
    figures = {f.name: f for f in found.figures}
    assert figures["stall_fraction"].old == 0.12 and figures["stall_fraction"].new == 0.04
    assert figures["steady_step_s"].new > figures["steady_step_s"].old
    assert figures["goodput_fraction"].new == pytest.approx(0.96)
    text = comparison_line(found)
    assert text.startswith("THROUGHPUT FELL 20.3%: 325 samples/s -> 259 samples/s")
    assert "beyond the runs' own noise" in text
    assert "the data stall fell (12.0% -> 4.0%) only because the step slowed" in text
    assert "not a gain" in text
    assert "better" not in text.lower() and "improv" not in text.lower()


def test_a_real_gain_rose():
    found = compare_reports(_run(259.0, 0.30, 0.07), _run(400.0, 0.02, 0.07, num_workers=4),
                            "old.json")
    assert found.verdict == "rose" and found.beyond_noise is True
    assert comparison_line(found).startswith("THROUGHPUT ROSE 54.4%: 259 samples/s -> 400")


def test_equal_runs_are_no_measurable_change():
    run = _run(325.0, 0.12, 0.07)
    found = compare_reports(run, run, "old.json")
    assert found.verdict == "no-measurable-change"
    assert found.beyond_noise is False
    assert found.settings == [] and found.machine == [] and found.data == []
    assert comparison_line(found).startswith(
        "NO MEASURABLE CHANGE in throughput: 325 samples/s in both runs")


def test_a_change_within_the_runs_noise_is_no_measurable_change():
    # Loop times that vary +-40% in blocks: a 3% difference is inside that noise.
    old = _run(325.0, 0.12, 0.07, jitter=0.4, batches=40)
    old = dataclasses.replace(old, timeline=_blocky(0.07, 0.4))
    new = dataclasses.replace(_run(315.0, 0.12, 0.07), timeline=_blocky(0.07, 0.4))
    found = compare_reports(old, new, "old.json")
    assert found.old_noise_fraction is not None and found.old_noise_fraction > 0.03
    assert found.noise_fraction > abs(found.samples_per_s_ratio - 1)
    assert found.verdict == "no-measurable-change" and found.beyond_noise is False
    assert "within the runs' own noise" in comparison_line(found)


def _blocky(step_s: float, swing: float) -> Timeline:
    """200 batches whose loop time alternates slow and fast in stretches of 20 (a neighbour
    coming and going): the batch means spread widely."""
    rows = [BatchTiming(index=i, epoch=0, start_at_s=i * step_s, wait_s=0.0,
                        compute_s=step_s * (1 + swing * (1 if (i // 20) % 2 else -1)),
                        samples=32) for i in range(200)]
    return Timeline(batches=rows, epochs=[], worker_batches=[], host=[])


def test_noise_that_cannot_be_told_is_said():
    # sample_report's timeline holds 6 batches: too few for batch means.
    old, new = _run(325.0, 0.12, 0.07), sample_report()
    assert run_noise_fraction(new) is None
    found = compare_reports(old, new, "old.json")
    assert found.verdict == "fell" and found.beyond_noise is None and found.noise_fraction is None
    assert "cannot be told" in comparison_line(found)


def test_a_stress_report_without_a_timeline_gives_its_search_noise():
    from report_factory import stress_of

    report = dataclasses.replace(
        sample_report(kind="stress"),
        stress=stress_of({"search": {"method": "model", "candidates": 4, "measured": 2,
                                     "calibration": [], "noise_fraction": 0.07,
                                     "threshold_fraction": 0.1, "verified": [],
                                     "stop_reasons": [], "stop_reason": ""}}))
    assert run_noise_fraction(report) == pytest.approx(0.07)


def test_no_samples_per_s_is_unknown():
    old = _run(325.0, 0.12, 0.07)
    new = dataclasses.replace(old, consumer=dataclasses.replace(old.consumer,
                                                                samples_per_s=None))
    found = compare_reports(old, new, "old.json")
    assert found.verdict == "unknown"
    assert "CANNOT BE COMPARED" in comparison_line(found)


def test_tokens_are_compared_only_when_both_runs_counted_them():
    old, new = _run(325.0, 0.1, 0.07), _run(300.0, 0.1, 0.07)
    assert "tokens_per_s" not in [f.name for f in compare_reports(old, new, "o").figures]
    old = dataclasses.replace(old, consumer=dataclasses.replace(old.consumer, tokens_per_s=5e4))
    new = dataclasses.replace(new, consumer=dataclasses.replace(new.consumer, tokens_per_s=4e4))
    found = compare_reports(old, new, "o")
    assert "tokens_per_s" in [f.name for f in found.figures]
    assert "50,000 tokens/s -> 40,000 tokens/s" in comparison_line(found)


def test_other_machines_and_other_data_get_a_note():
    old = _run(325.0, 0.12, 0.07)
    new = _run(300.0, 0.12, 0.07, dataset_len=999, batch_size=64)
    new = dataclasses.replace(new, environment=dataclasses.replace(
        new.environment, cpu_count=16, usable_cpus=16, torch="2.14.0"))
    found = compare_reports(old, new, "old.json")
    assert [c.name for c in found.machine] == ["cpu_count", "usable_cpus", "torch"]
    assert [c.name for c in found.data] == ["dataset_len"]
    text = render_terminal(dataclasses.replace(new, comparison=found), width=200)
    assert "different machines or software (cpu_count 2 -> 16" in text
    assert "the comparison may not hold" in text
    assert "dataset_len 3200 -> 999, batch_size 32 -> 64" in text


def test_other_loader_names_why():
    old = _run(325.0, 0.12, 0.07)
    assert other_loader(old, old) is None
    assert other_loader(old, _run(1.0, 0.1, 0.1, dataset_type="iterable")) == \
        "another dataset (map before, iterable now)"


def test_the_comparison_round_trips_through_json_and_every_format_shows_it():
    old, new = _run(325.0, 0.12, 1 / 13.8), _run(259.0, 0.04, 1 / 9.76, num_workers=2)
    report = dataclasses.replace(new, comparison=compare_reports(old, new, "old.json"))
    data = json.loads(report.to_json())
    assert list(data)[-2:] == ["comparison", "timeline"]
    assert data["comparison"]["verdict"] == "fell"
    assert data["comparison"]["settings"] == [{"name": "num_workers", "old": 0, "new": 2}]
    again = Report.from_dict(data)
    assert again.comparison == report.comparison
    # The short view gives the one-line verdict; --verbose the section too.
    assert "THROUGHPUT FELL 20.3%" in render_terminal(report, width=200)
    summary = render_terminal(report, width=200, verbose=True)
    # The one-line verdict sits under the verdict and the context line, above every section.
    assert summary.index("THROUGHPUT FELL 20.3%") < summary.index("Throughput\n")
    assert "Compared with the earlier report" in summary
    document = build_comparison_document(report, "new.json")
    text = TerminalRenderer(width=200).render_document(document)
    assert text.splitlines()[0].startswith("THROUGHPUT FELL 20.3%")
    assert "num_workers" in text and "steady step" in text
    markdown = MarkdownRenderer().render_document(document)
    assert markdown.startswith("**THROUGHPUT FELL 20.3%")
    assert "| data stall |" in markdown


def test_a_report_without_a_comparison_writes_null_and_old_reports_load():
    data = json.loads(sample_report().to_json())
    assert data["comparison"] is None
    del data["comparison"]
    assert Report.from_dict(data).comparison is None


# -- the automatic comparison: the report a save replaces ------------------------------------


def test_nothing_to_compare_with_where_no_report_was(tmp_path):
    from pipecheck.report import compared_with_earlier, read_earlier

    assert read_earlier(tmp_path / "missing.json") is None
    (tmp_path / "empty.json").write_text("")  # pipecheck run's placeholder
    assert read_earlier(tmp_path / "empty.json") is None
    assert read_earlier("-") is None and read_earlier("/dev/null") is None
    report = _run(325.0, 0.12, 0.07)
    assert compared_with_earlier(report, None) is report


def test_an_unreadable_earlier_file_is_a_note(tmp_path):
    from pipecheck.report import compared_with_earlier, read_earlier

    path = tmp_path / "run.json"
    path.write_text('{"schema": "something/else"}')
    earlier = read_earlier(path)
    assert earlier.report is None and "is not supported" in earlier.note
    found = compared_with_earlier(_run(325.0, 0.12, 0.07), earlier).comparison
    assert found.status == "not-compared" and found.verdict is None
    assert comparison_line(found).startswith(f"not compared with the earlier report {path}: "
                                             "the earlier file could not be read")


def test_an_earlier_report_of_another_dataset_is_not_compared(tmp_path):
    from pipecheck.report import compared_with_earlier, read_earlier

    path = _run(325.0, 0.12, 0.07).save(tmp_path / "run.json")
    earlier = read_earlier(path)
    assert earlier.report is not None and earlier.report.timeline.host == []
    same = compared_with_earlier(_run(259.0, 0.04, 0.1), earlier).comparison
    assert same.status == "compared" and same.verdict == "fell"
    other = compared_with_earlier(_run(259.0, 0.04, 0.1, dataset_type="iterable"),
                                  earlier).comparison
    assert other.status == "not-compared"
    assert other.note == "the earlier report is of another dataset (map before, iterable now)"
