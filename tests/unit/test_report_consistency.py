"""Issue 28's inconsistencies, one test each: per-change and cumulative effects labelled and
adding up, savings per epoch and per 10,000 steps from the same numbers, one table of words for
a capacity / demand ratio, no cause the run rules out (worker start-up without workers, growth
that is a shrink), and a stress report that does not warn of what its own sweep measured as not
worth changing. Each failed on the code before the fix."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fake_pipeline import FakeRun, simulate
from pipecheck.analysis import analyze
from pipecheck.records import Expected, Finding, Recommendation
from pipecheck.recommend import recommend
from pipecheck.render.markdown import render_markdown
from pipecheck.render.phrases import capacity_phrase
from pipecheck.render.terminal import render_terminal
from report_factory import sample_report

RESTARTING = FakeRun(num_workers=2, production_s=0.01, step_s=0.05, epochs=3,
                     batches_per_epoch=60, startup_s=0.5, shutdown_s=0.3,
                     worker_cpu_fraction=0.2)


def _chained_report():
    """Two chained model proposals on the sample run (256 samples/s, 8 batches/s measured):
    num_workers 2 -> 4 to 410 samples/s, then persistent_workers to 450 samples/s."""
    first = Recommendation("num_workers", 2, 4, Expected(
        samples_per_s=410.0, stall_fraction=0.06, batches_per_s=410.0 / 32,
        gain_samples_per_s=154.0, saved_s_per_10k_steps=10_000 * (1 / 8 - 32 / 410),
        saved_s_per_epoch=100 * (1 / 8 - 32 / 410)), "more workers")
    second = Recommendation("persistent_workers", False, True, Expected(
        samples_per_s=450.0, stall_fraction=0.04, batches_per_s=450.0 / 32,
        gain_samples_per_s=194.0, saved_s_per_10k_steps=10_000 * (1 / 8 - 32 / 450),
        saved_s_per_epoch=100 * (1 / 8 - 32 / 450)), "start-up paid once")
    return sample_report(recommendations=[first, second])


def _text(report, verbose=True):
    return " ".join(render_terminal(report, width=200, verbose=verbose).split())


def _seconds(text):
    """Seconds from pipecheck's duration text (``1.23 s``, ``456 ms``, ``2 min 3 s``)."""
    minutes = re.fullmatch(r"(\d+) min (\d+) s", text)
    if minutes:
        return 60 * int(minutes.group(1)) + int(minutes.group(2))
    value, unit = text.split()
    return float(value.replace(",", "")) * {"s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}[unit]


# -- per-change and cumulative effects -----------------------------------------------------------


@pytest.mark.parametrize("render", [lambda r: _text(r), lambda r: _text(r, verbose=False),
                                    lambda r: " ".join(render_markdown(r).split())])
def test_per_change_and_cumulative_effects_are_labelled_and_add_up(render):
    text = render(_chained_report())
    # the second change on its own adds 40 samples/s; both together 194 samples/s
    assert "+40.0 samples/s this change" in text
    assert "+194 samples/s with the changes above" in text
    own = [_seconds(s) for s in re.findall(r"saves ([\d.,]+ (?:s|ms)) per epoch", text)]
    totals = 100 * (1 / 8 - 32 / 450)
    assert len(own) == 2 and sum(own) == pytest.approx(totals, rel=0.01)


def test_savings_per_epoch_and_per_10k_steps_come_from_the_same_numbers():
    run = simulate(RESTARTING)
    rec = {r.setting: r for r in recommend(run, analyze(run))}["persistent_workers"]
    expected = rec.expected
    # 10,000 steps at 60 batches an epoch are 10,000 / 60 epochs
    assert expected.saved_s_per_10k_steps == pytest.approx(
        expected.saved_s_per_epoch * 10_000 / 60)
    # the reason quotes no saving of its own that the effect figures would contradict
    assert "saving about" not in rec.reason


# -- one table of words for a ratio --------------------------------------------------------------


def _with_ratio(ratio, verdict):
    report = sample_report()
    judgement = analyze(simulate(FakeRun())).diagnosis.judgement
    judgement = dataclasses.replace(judgement, capacity_demand_ratio=ratio, capacity_note=None,
                                    loader_keeps_up=verdict == "compute-bound")
    return dataclasses.replace(report, diagnosis=dataclasses.replace(
        report.diagnosis, verdict=verdict, judgement=judgement))


def _ratio_words(phrase):
    """The words that follow the ratio itself, up to the measured stall's clause."""
    return phrase.split("x", 1)[1].split(";")[0]


def test_ratios_in_one_band_get_the_same_words_whatever_the_verdict():
    input_bound = capacity_phrase(_with_ratio(1.61, "input-bound"))
    balanced = capacity_phrase(_with_ratio(1.57, "balanced"))
    assert _ratio_words(input_bound) == _ratio_words(balanced)


@pytest.mark.parametrize("ratio", [1.0, 1.3, 1.79, 2.5])
def test_a_ratio_of_one_or_more_never_reads_as_not_keeping_up(ratio):
    for verdict in ("input-bound", "balanced", "compute-bound"):
        words = _ratio_words(capacity_phrase(_with_ratio(ratio, verdict)))
        assert "not keep up" not in words and "cannot keep up" not in words


def test_a_ratio_below_one_reads_as_not_keeping_up():
    assert "cannot keep up" in _ratio_words(capacity_phrase(_with_ratio(0.8, "input-bound")))


# -- no cause the run rules out ------------------------------------------------------------------


def test_no_worker_start_up_named_without_workers():
    # each epoch's first fetch takes 1 s (lazy opening of the data), with no worker to start
    run = simulate(FakeRun(num_workers=0, production_s=lambda i: 1.0 if i % 100 == 0 else 0.01,
                           step_s=0.05, epochs=2, prefetch_factor=None))
    analysis = analyze(run)
    slow = next(f for f in analysis.diagnosis.findings if f.kind == "slow-first-batch")
    assert "worker" not in slow.message
    for rec in recommend(run, analysis):
        assert "worker start-up" not in rec.reason


def test_a_shrinking_memory_is_not_shown_as_growth():
    from full_reports import attach_report
    report = attach_report()
    section = dataclasses.replace(report.attach, main_memory_growth_bytes_per_s=-7.81 * 2**20,
                                  main_memory_growth_significant=False)
    text = _text(dataclasses.replace(report, attach=section))
    assert "-7.81 MiB/s" not in text
    assert "shrinking 7.81 MiB/s" in text


# -- a stress report agrees with its own sweep ---------------------------------------------------


def test_stress_does_not_warn_of_a_first_batch_its_sweep_found_not_worth_changing():
    from pipecheck.report_sections import EpochStart
    from pipecheck.recommend.measured import stress_diagnosis

    report = sample_report()
    slow = Finding(kind="slow-first-batch", severity="warning",
                   message="Slow first batch: an epoch's first batch took 1.20 s on average.",
                   evidence={"first_batch_s": 1.2})
    diagnosis = dataclasses.replace(report.diagnosis, findings=[slow])
    epoch_start = EpochStart(status="ok", reason=None, saving_s=0.01, fraction=0.004,
                             epoch_s=2.5, matters=False)
    restated = stress_diagnosis(diagnosis, epoch_start)
    found = next(f for f in restated.findings if f.kind == "slow-first-batch")
    assert found.severity == "info"
    assert "not worth changing" in found.message


# -- findings: short in the short view, explained in the docs ------------------------------------


def test_every_finding_kind_has_an_entry_in_the_findings_page():
    from pathlib import Path

    from pipecheck.kinds import FINDING_KINDS, FINDINGS_PAGE

    page = (Path(__file__).resolve().parents[2] / FINDINGS_PAGE).read_text(encoding="utf-8")
    headings = set(re.findall(r"^## (\S+)$", page, flags=re.M))
    assert FINDING_KINDS <= headings, FINDING_KINDS - headings


def test_a_long_finding_is_one_sentence_in_the_short_view_naming_its_docs_entry():
    report = sample_report()
    long = Finding(kind="intra-op-threads", severity="info", message=(
        "With num_workers=0 batch production ran on torch's 8 intra-op threads: 2.6 ms of CPU "
        "per batch. A second sentence with benchmark figures. A third one."), evidence={})
    report = dataclasses.replace(report, diagnosis=dataclasses.replace(
        report.diagnosis, findings=[long]))
    brief = render_terminal(report, width=100)
    text = " ".join(brief.split())
    assert ("[info] With num_workers=0 batch production ran on torch's 8 intra-op threads: 2.6 ms "
            "of CPU per batch. (see docs/findings.md#intra-op-threads)") in text
    assert "second sentence" not in text
    assert "A second sentence with benchmark figures." in _text(report)  # --verbose keeps it


def test_the_default_terminal_report_of_a_typical_run_fits_a_screen():
    report = _chained_report()
    assert len(render_terminal(report, width=100).splitlines()) <= 40
    assert len(render_terminal(report, width=100, verbose=True).splitlines()) > 40


def test_an_attach_report_says_what_cannot_be_known_once():
    from full_reports import attach_report

    report = attach_report()
    first = report.attach.unknown[0]
    text = " ".join(render_terminal(report, width=100).split())
    assert text.count(first) == 1
    assert "cannot be known without wrapping:" in text
