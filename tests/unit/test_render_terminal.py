"""Terminal summary: verdict first, sections in order, units everywhere, layouts at several
widths; and the format helpers it is built from."""

from __future__ import annotations

import dataclasses
import io
import math
import re

import pytest
from rich.console import Console

from pipecheck.records import Finding
from pipecheck import units as fmt
from pipecheck.render.terminal import render_terminal, verdict_line
from report_factory import replace_consumer, sample_report, stress_of

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SECTIONS = ("Throughput", "Data wait (stall)", "Producer vs consumer", "Host", "Findings",
            "Recommendations")


def _lines(report, width=100, verbose=True):
    """The full view (``--verbose``) as lines; the short view has tests of its own below."""
    return render_terminal(report, width=width, verbose=verbose).splitlines()


def _with_diagnosis(report, **changes):
    return dataclasses.replace(report, diagnosis=dataclasses.replace(report.diagnosis, **changes))


# -- layout at 100 columns -----------------------------------------------------------------------


def test_verdict_line_comes_first_with_its_numbers():
    lines = _lines(sample_report())
    assert lines[0] == (
        "INPUT-BOUND: the training loop waited for data 41.2% of the time (threshold 10%); "
        "data goodput 58.8%"
    )


def test_sections_appear_in_order_after_the_verdict():
    lines = _lines(sample_report())
    positions = [lines.index(title) for title in SECTIONS]
    assert positions == sorted(positions) and positions[0] > 1


def test_numbers_carry_units():
    text = render_terminal(sample_report(), width=100, verbose=True)
    for expected in ("256 samples/s", "8.00 batches/s", "wall 12.50 s", "100 batches",
                     "stall 41.2%", "steady-state stall 38.0%", "first batch after 1.20 s",
                     "mean 51.5 ms", "consumer demand 13.6 batches/s",
                     "producer capacity 9.50 batches/s (sum of per-worker busy rates)",
                     "CPU main 0.55 cores", "workers 1.58 cores", "system 97.0% of all cores",
                     "iowait 0.4%", "read from storage 1.50 MB/s", "workers RSS peak 420 MiB",
                     "overhead 60.0 ms CPU"):
        assert expected in text, expected
    assert "tokens/s" not in text  # not countable in this run, so not shown


def test_tokens_per_second_shown_when_measured():
    report = replace_consumer(sample_report(), tokens=409600, tokens_per_s=32768.0)
    assert "32,768 tokens/s" in render_terminal(report, width=100, verbose=True)


def test_worker_table_has_a_row_per_worker():
    lines = _lines(sample_report())
    header = next(line for line in lines if line.strip().startswith("worker") and "pid" in line)
    for column in ("busy", "rate", "CPU/busy", "RSS max"):
        assert column in header
    row = next(line for line in lines if "4101" in line)
    assert row.split()[:3] == ["0", "4101", "50"]
    assert "10.40 s" in row and "4.81 batches/s" in row and "94.0%" in row and "210.0 MiB" in row


def test_recommendation_row_shows_change_effect_and_reason():
    lines = _lines(sample_report())
    start = lines.index("Recommendations")
    assert " ".join(" ".join(lines[start + 1:start + 3]).split()) == (
        "Cumulative: each expected figure assumes the changes above it; each effect gives this "
        "change's own share, and the shares add up.")
    lines = lines[:start + 1] + ["caption"] + lines[start + 3:]  # the caption as one line
    header = lines[start + 2]
    for column in ("setting", "current -> proposed", "expected throughput", "expected stall"):
        assert column in header
    row = lines[start + 4]
    assert row.split()[:5] == ["1.", "num_workers", "2", "->", "4"]
    assert "410 samples/s" in row and row.rstrip().endswith("6.0%")
    reason = " ".join(" ".join(lines[start + 5:]).split())
    assert reason == (
        "1. num_workers: each worker delivers 4.8 batches/s; the step takes 13.6 "
        # the effect, labelled, and the expected figures' note follow the reason
        "Effect: +154 samples/s this change. (capped by 2 usable CPUs)"
    )


def test_several_recommendations_keep_their_order():
    first = sample_report().recommendations[0]
    second = dataclasses.replace(first, setting="persistent_workers", current=False,
                                 proposed=True, reason="start-up paid once")
    lines = _lines(sample_report(recommendations=[first, second]))
    rows = [line.split()[:2] for line in lines if line.strip()[:2] in ("1.", "2.")]
    assert rows == [["1.", "num_workers"], ["2.", "persistent_workers"],
                    ["1.", "num_workers:"], ["2.", "persistent_workers:"]]


def test_findings_are_sorted_by_severity_and_printed_literally():
    lines = _lines(sample_report())
    start = lines.index("Findings")
    assert lines[start + 1].strip().startswith("[critical] the loop waited")
    assert lines[start + 1].rstrip().endswith("[2 workers busy]")  # brackets are not rich markup
    assert lines[start + 2].strip().startswith("[info]")


def test_not_measured_values_show_as_na_never_zero():
    report = replace_consumer(sample_report(), steady_stall_fraction=None, first_batch_s=None)
    text = render_terminal(report, width=100, verbose=True)
    assert "steady-state stall n/a" in text and "first batch after n/a" in text


# -- other verdicts and empty sections ---------------------------------------------------------


def test_compute_bound_line_and_why_there_are_no_recommendations():
    report = _with_diagnosis(
        sample_report(recommendations=[]),
        verdict="compute-bound",
        findings=[Finding(kind="compute-bound", severity="info", message="fine",
                          evidence={"steady_stall_fraction": 0.012})],
        thresholds={"input_bound_stall_fraction": 0.1, "compute_bound_stall_fraction": 0.03},
    )
    text = render_terminal(report, width=100, verbose=True)
    assert verdict_line(report) == (
        "COMPUTE-BOUND: the training loop waited for data only 1.2% of the time in steady state "
        "(threshold 3%); data goodput 98.8%"
    )
    assert " ".join(text.split()).startswith(verdict_line(report))  # wrapped, still first
    assert ("No recommendations: the loop is compute-bound, so no loader change is predicted "
            "to help.") in text


def test_balanced_line_lists_both_thresholds():
    report = _with_diagnosis(sample_report(), verdict="balanced", findings=[])
    # No verdict finding: the steady-state stall (the verdict's basis) is shown.
    assert verdict_line(report) == (
        "BALANCED: the training loop waited for data 38.0% of the time in steady state "
        "(thresholds: input bound 10%, compute bound 5%); data goodput 62.0%"
    )


def test_no_data_report_says_data_is_insufficient():
    consumer = replace_consumer(sample_report(), batches=0, samples=0, stall_fraction=None,
                                steady_stall_fraction=None, samples_per_s=None,
                                batches_per_s=None).consumer
    report = _with_diagnosis(sample_report(consumer=consumer, recommendations=[]),
                             verdict="no-data", findings=[])
    text = render_terminal(report, width=100, verbose=True)
    assert text.splitlines()[0] == "NO-DATA: no batches were measured, so there is no verdict"
    assert "No recommendations: insufficient data (0 batches measured)" in text
    assert "n/a samples/s" not in text and "n/a" in text


def test_unfinished_run_is_flagged_under_the_verdict():
    report = replace_consumer(sample_report(), status="error", error="OSError: shard 3 missing")
    lines = _lines(report)
    ended = next(i for i, line in enumerate(lines) if "did not complete" in line)
    assert ended < lines.index("Throughput")
    assert "OSError: shard 3 missing" in " ".join(lines[ended:ended + 2])


def test_host_unavailable_and_absent():
    unavailable = dataclasses.replace(sample_report().host, status="unavailable",
                                      note="psutil cannot read /proc")
    text = render_terminal(sample_report(host=unavailable), width=100, verbose=True)
    assert "host sampling unavailable: psutil cannot read /proc" in text
    assert "host sampling was not run" in render_terminal(sample_report(host=None), width=100,
                                                         verbose=True)


def test_main_process_loading_shows_no_worker_host_figures():
    loader = dataclasses.replace(sample_report().loader, num_workers=0, prefetch_factor=None)
    lines = _lines(sample_report(loader=loader))
    host = lines[lines.index("Host") + 1:lines.index("Findings")]
    assert host[0].strip().startswith("CPU main 0.55 cores · system 97.0% of all cores")
    assert not any("workers" in line for line in host)


def test_no_workers_says_why():
    producer = dataclasses.replace(sample_report().producer, workers=[], probe="none")
    text = render_terminal(sample_report(producer=producer), width=100, verbose=True)
    assert "no per-worker timing (worker probe: none)" in text


def test_stress_sweep_is_rendered():
    stress = {
        "trials": [
            {"config": {"num_workers": 2}, "samples_per_s": 120.0, "batches_per_s": 3.75,
             "stall_fraction": 0.3, "measured": True},
            {"config": {"num_workers": 4}, "samples_per_s": 200.0, "batches_per_s": 6.25,
             "stall_fraction": None, "measured": False},
        ],
        "best": {"config": {"num_workers": 4}},
        "recommended": {"config": {"num_workers": 4}},
    }
    lines = _lines(sample_report(kind="stress", stress=stress_of(stress)))
    start = lines.index("Stress sweep")
    body = lines[start:]
    # One column per setting that varies; each row holds its value; units in the headers.
    assert any(s.split()[:3] == ["num_workers", "samples/s", "batches/s"] for s in body)
    assert any(s.split()[:4] == ["2", "120", "3.75", "30.0%"] and "measured" in s
               for s in body)
    assert any(s.split()[:1] == ["4"] and "n/a" in s and "predicted" in s for s in body)
    assert "best: num_workers=4" in " ".join(body)


def test_stress_section_names_skips_the_baseline_gain_and_the_changes():
    trials = [{"config": {"num_workers": 0, "batch_size": 8}, "samples_per_s": 100.0,
               "batches_per_s": 12.5, "stall_fraction": 0.5, "measured": True},
              {"config": {"num_workers": 4, "batch_size": 8, "in_order": False},
               "samples_per_s": 300.0, "batches_per_s": 37.5, "stall_fraction": 0.1,
               "measured": True}]
    trials += [{"config": {"num_workers": n, "batch_size": 8}, "samples_per_s": 50.0 + n,
                "batches_per_s": 6.0, "stall_fraction": 0.6, "measured": False}
               for n in range(5, 13)]
    stress = {
        "trials": trials,
        "skipped": [{"config": {"num_workers": 16}, "reason": "memory: needs about 30 GiB"}],
        "best": trials[1], "recommended": {
            "config": trials[1]["config"], "gain": 3.0, "baseline_samples_per_s": 100.0,
            "expected": {"samples_per_s": 300.0, "stall_fraction": 0.1},
            "baseline": trials[0]["config"],
            "changes": {"num_workers": [0, 4], "in_order": [None, False]}},
    }
    text = " ".join(" ".join(_lines(sample_report(kind="stress",
                                                  stress=stress_of(stress)))).split())
    assert "every trial: batch_size=8" in text
    assert "skipped (memory: needs about 30 GiB): num_workers=16" in text
    assert "3 more predicted, unmeasured configurations" in text  # 8 predicted, 5 shown
    assert "3.00x (100 samples/s -> 300 samples/s, baseline num_workers=0 batch_size=8)" in text
    assert "change: num_workers 0 -> 4, in_order" in text
    assert "not in sampler order" in text


# -- widths, colour, rich integration ------------------------------------------------------------


@pytest.mark.parametrize("verbose", [False, True])
@pytest.mark.parametrize("width", [100, 80, 60, 40])
def test_every_line_fits_the_width_and_nothing_is_cut(width, verbose):
    text = render_terminal(sample_report(), width=width, verbose=verbose)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text  # no cell truncated with an ellipsis
    words = " ".join(text.split())
    assert "each worker delivers 4.8 batches/s; the step takes 13.6" in words
    assert "num_workers" in words and "2 -> 4" in words


def test_narrow_terminal_stacks_the_recommendation_table():
    lines = _lines(sample_report(), width=70)
    start = lines.index("Recommendations")
    stacked = "1. num_workers: 2 -> 4 · expected 410 samples/s · stall 6.0%"
    assert stacked in [line.strip() for line in lines[start:start + 6]]


def test_color_adds_ansi_codes_only_when_asked():
    plain = render_terminal(sample_report(), width=100)
    colored = render_terminal(sample_report(), width=100, color=True)
    assert not ANSI.search(plain)
    assert ANSI.search(colored)
    assert ANSI.sub("", colored).splitlines()[0] == plain.splitlines()[0]


def test_width_below_minimum_is_refused():
    with pytest.raises(ValueError, match="at least 20"):
        render_terminal(sample_report(), width=10)


def test_str_and_rich_print_show_the_summary(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    report = sample_report()
    assert str(report) == report.render() == render_terminal(report, width=100)
    buffer = io.StringIO()
    Console(file=buffer, width=100, color_system=None).print(report)
    assert buffer.getvalue().splitlines()[0] == str(report).splitlines()[0]


# -- format helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize("value_s, text", [
    (0.00085, "850 µs"), (0.0123, "12.3 ms"), (0.2, "200 ms"), (1.2, "1.20 s"),
    (125.0, "2 min 05 s"), (3720.0, "1 h 02 min"), (0.0, "0 s"), (None, "n/a"),
    (math.nan, "n/a"),
])
def test_seconds(value_s, text):
    assert fmt.seconds(value_s) == text


@pytest.mark.parametrize("value_bytes, text", [
    (512, "512 B"), (12.3 * 1024, "12.3 KiB"), (210 * 1024**2, "210 MiB"),
    (1.5 * 1024**3, "1.50 GiB"), (None, "n/a"),
])
def test_size(value_bytes, text):
    assert fmt.size(value_bytes) == text


def test_rates_fractions_and_counts():
    assert fmt.percent(0.412) == "41.2%"
    assert fmt.percent(None) == "n/a"
    assert fmt.percent_value(97.0) == "97.0%"
    assert fmt.rate(12.34, "samples") == "12.3 samples/s"
    assert fmt.rate(999.7, "samples") == "1,000 samples/s"
    assert fmt.rate(12345.6, "tokens") == "12,346 tokens/s"
    assert fmt.rate(math.inf, "batches") == "n/a"
    assert fmt.bytes_rate(1.5e6) == "1.50 MB/s"
    assert fmt.bytes_rate(3780.0) == "3.78 kB/s" and fmt.bytes_rate(850.0) == "850 B/s"
    assert fmt.bytes_rate(2.5e9) == "2.50 GB/s"
    assert fmt.cores(1.8) == "1.80 cores"
    assert fmt.mib(210 * 1024**2) == "210.0 MiB"
    assert fmt.count(1, "batch", "batches") == "1 batch"
    assert fmt.count(3, "batch", "batches") == "3 batches"
    assert fmt.count(2, "epoch") == "2 epochs"
    assert fmt.setting_value(True) == "True" and fmt.setting_value("spawn") == "'spawn'"


def test_hot_stacks_and_gpu_sections_only_when_present():
    from pipecheck.records import DeviceRecord, HotFunction, StacksRecord

    assert "Hot stacks" not in render_terminal(sample_report(), width=100, verbose=True)
    stacks = StacksRecord(status="ok", window_s=10.0, rate_hz=50, worker_samples=900,
                          main_samples=40, worker_other_samples=100, overhead_cpu_s=0.8,
                          main_wait={"queue-empty": 0.9, "receiving": 0.08, "other": 0.02},
                          main_wait_samples=450, pin_memory_busy_fraction=0.25,
                          stages={"decode": 0.7, "collate": 0.2, "worker loop": 0.1},
                          top=[HotFunction(function="decode_jpeg", file="/src/data.py", line=42,
                                           fraction=0.612, inclusive_fraction=0.7, samples=551,
                                           stage="decode")])
    device = DeviceRecord(status="ok", backend="torch.cuda", batches=120, idle_s=3.25,
                          idle_fraction=0.271, pinned_fraction=1.0)
    text = render_terminal(sample_report(stacks=stacks, device=device), width=100, verbose=True)
    for expected in ("Hot stacks (py-spy)", "61.2%",
                     "worker samples 900", "py-spy overhead 800 ms CPU", "GPU (CUDA events)",
                     "GPU idle waiting for data 3.25 s", "share of stream time 27.1%",
                     "pinned batches 100.0%",
                     "main thread in next(): queue-empty 90.0% · receiving 8.0% · other 2.0% "
                     "(450 samples)", "pin-memory thread busy 25.0%",
                     "worker stages: decode 70.0% · collate 20.0% · worker loop 10.0%",
                     "decode_jpeg  [decode]  /src/data.py:42"):
        assert expected in text, expected
    missing = StacksRecord(status="unavailable", window_s=10.0, rate_hz=50,
                           note="py-spy is not installed or not on PATH")
    assert "not sampled (unavailable): py-spy is not installed" in render_terminal(
        sample_report(stacks=missing), width=100, verbose=True)
